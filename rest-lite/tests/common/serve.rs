//! `rest-lite serve` as a real process, on either backend.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use pai_client::Client;

/// Long enough for a slow machine, short enough to fail rather than hang.
pub const DEADLINE: Duration = Duration::from_secs(120);

pub struct Server {
    child: Child,
    pub url: String,
    /// This machine's token, which a server without a token file accepts alone.
    pub token: Option<String>,
    /// Every line the server logged so far.
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// Reads the log until the server's end.
    reader: Option<std::thread::JoinHandle<()>>,
}

/// `command` run by `wrapper` (`nohup`): its program and arguments after the wrapper's
/// name, its environment and directory as they were, its output as [`Server::spawn`]
/// reads it.
#[allow(dead_code)]
pub fn under(wrapper: &str, command: &Command) -> Command {
    let mut wrapped = Command::new(wrapper);
    wrapped.arg(command.get_program()).args(command.get_args());
    for (name, value) in command.get_envs() {
        match value {
            Some(value) => wrapped.env(name, value),
            None => wrapped.env_remove(name),
        };
    }
    if let Some(dir) = command.get_current_dir() {
        wrapped.current_dir(dir);
    }
    Server::quiet(&mut wrapped);
    wrapped
}

impl Server {
    /// `rest-lite serve` on this machine, state in `state`.
    pub fn start(state: &Path) -> Self {
        Self::spawn(
            Self::command(state).args(["--backend", "local"]),
            &[
                "this machine (embedded default)",
                &state.display().to_string(),
            ],
        )
        .with_machine_token(state)
    }

    /// [`Server::start`] with the config file `config` (`--config`).
    pub fn start_with_config(state: &Path, config: &Path) -> Self {
        Self::spawn(
            Self::command(state)
                .args(["--backend", "local", "--config"])
                .arg(config),
            &["this machine (embedded default)"],
        )
        .with_machine_token(state)
    }

    /// [`Server::start_with_config`] in `dir`: the config `text` written to
    /// `dir/config.yaml`, the state kept in `dir/state`.
    pub fn in_dir_with_config(dir: &Path, text: &str) -> Self {
        let path = dir.join("config.yaml");
        std::fs::write(&path, text).expect("config");
        Self::start_with_config(&dir.join("state"), &path)
    }

    /// Reads the token a server without a token file made in its state directory.
    pub fn with_machine_token(mut self, state: &Path) -> Self {
        self.token = pai_server::machine_token::read(state);
        assert!(self.token.is_some(), "no token in {}", state.display());
        self
    }

    /// `rest-lite serve` on this machine with bearer tokens from `tokens`.
    pub fn start_with_tokens(state: &Path, tokens: &Path) -> Self {
        Self::start_with_tokens_and_config(state, tokens, None)
    }

    /// [`Server::start_with_tokens`] and the config file `config`, if any.
    pub fn start_with_tokens_and_config(
        state: &Path,
        tokens: &Path,
        config: Option<&Path>,
    ) -> Self {
        let mut command = Self::command(state);
        command
            .args(["--backend", "local", "--token-file"])
            .arg(tokens);
        if let Some(config) = config {
            command.arg("--config").arg(config);
        }
        Self::spawn(&mut command, &["this machine (embedded default)"])
    }

    /// `rest-lite serve` over the cluster `kubeconfig` names, with bearer tokens.
    pub fn start_kube(kubeconfig: &Path, namespace: &str, tokens: &Path) -> Self {
        Self::start_kube_with_config(kubeconfig, namespace, tokens, None)
    }

    /// [`Server::start_kube`] and the config file `config`, if any.
    pub fn start_kube_with_config(
        kubeconfig: &Path,
        namespace: &str,
        tokens: &Path,
        config: Option<&Path>,
    ) -> Self {
        Self::start_kube_in(kubeconfig, namespace, tokens, config, None)
    }

    /// [`Server::start_kube_with_config`], run as if in the pod named `pod` (`POD_NAME`,
    /// as the Deployment's downward API sets it).
    pub fn start_kube_in(
        kubeconfig: &Path,
        namespace: &str,
        tokens: &Path,
        config: Option<&Path>,
        pod: Option<&str>,
    ) -> Self {
        let mut command = crate::common::rest_lite_command();
        command.env_remove("POD_NAME");
        if let Some(pod) = pod {
            command.env("POD_NAME", pod);
        }
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--backend", "kube"])
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--namespace", namespace, "--token-file"])
            .arg(tokens);
        if let Some(config) = config {
            command.arg("--config").arg(config);
        }
        Self::quiet(&mut command);
        // Reads are answered once the jobs were listed (until then a 503 says so).
        // With a job history, once it is read too.
        let history = config.is_some_and(|c| {
            std::fs::read_to_string(c).is_ok_and(|text| text.contains("history:"))
        });
        let also: &[&str] = if history {
            &["listed the jobs", "job history read"]
        } else {
            &["listed the jobs"]
        };
        Self::spawn_until(&mut command, &["kubernetes at"], also)
    }

    fn quiet(command: &mut Command) {
        command
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
    }

    /// `rest-lite serve` on a free loopback port with state in `state`, other options to
    /// be added.
    pub fn command(state: &Path) -> Command {
        let mut command = Self::command_with_default_state();
        command.arg("--state-dir").arg(state);
        command
    }

    /// `rest-lite serve` on a free loopback port, its state where it finds it by default.
    pub fn command_with_default_state() -> Command {
        let mut command = crate::common::rest_lite_command();
        command.args(["serve", "--listen", "127.0.0.1:0"]);
        Self::quiet(&mut command);
        command
    }

    /// Starts `command`; returns once its start-up line, which must say each of
    /// `expected`, is written.
    pub fn spawn(command: &mut Command, expected: &[&str]) -> Self {
        Self::spawn_until(command, expected, &[])
    }

    /// [`Server::spawn`], and then until log lines say each of `also` too.
    pub fn spawn_until(command: &mut Command, expected: &[&str], also: &[&str]) -> Self {
        let mut child = command.spawn().expect("rest-lite serve");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        let (also_tx, also_rx) = mpsc::channel();
        let mut wanted: Vec<String> = also.iter().map(|a| a.to_string()).collect();
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = log.clone();
        // Reads the log all along, as a log collector would.
        let reader = std::thread::spawn(move || {
            let mut tx = Some(tx);
            let mut also_tx = Some(also_tx);
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                kept.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(line.clone());
                if line.contains("rest-lite serving")
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(line);
                } else {
                    wanted.retain(|a| !line.contains(a.as_str()));
                    if wanted.is_empty()
                        && let Some(also_tx) = also_tx.take()
                    {
                        let _ = also_tx.send(());
                    }
                }
            }
        });
        let line = rx.recv_timeout(DEADLINE);
        let expected_line = line
            .as_ref()
            .is_ok_and(|line| expected.iter().all(|part| line.contains(part)));
        if !expected_line {
            // No server left behind by a failed test.
            let _ = child.kill();
            let _ = child.wait();
            panic!("the start-up line {line:?} does not say {expected:?}");
        }
        if !also.is_empty() && also_rx.recv_timeout(DEADLINE).is_err() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the server never logged {also:?}");
        }
        let line = line.unwrap_or_default();
        let url = line
            .split("url=")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .expect("url")
            .to_string();
        Self {
            child,
            url,
            token: None,
            log,
            reader: Some(reader),
        }
    }

    /// What the server logged so far, a line each.
    #[allow(dead_code)]
    pub fn log(&self) -> String {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .join("\n")
    }

    /// Returns once the server has logged a line holding `text` (each look a read of
    /// what it logged; no fixed pause decides anything).
    #[allow(dead_code)]
    pub async fn logged(&self, text: &str) {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while !self.log().contains(text) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the server never logged {text:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// The server's process id.
    #[allow(dead_code)]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn client(&self) -> Client {
        Client::new(&self.url, self.token.clone())
    }

    /// SIGTERM, as the kubelet stops a pod; returns once the server has exited, with
    /// everything it logged.
    #[allow(dead_code)]
    pub fn terminate(mut self) -> String {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).expect("pid"));
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "the server ended with {status}");
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.log()
    }

    /// SIGKILL: no chance to clean up.
    pub fn kill(mut self) {
        self.child.kill().expect("kill");
        self.child.wait().expect("wait");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
