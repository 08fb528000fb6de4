//! Podman, through its command line: each main container is `podman run`, attached, with
//! `--log-driver passthrough`, so that the container's standard output and error are the
//! task's log file itself and its standard input is what the server gives it (the ssh
//! port's listener, handed over while bound). The client is a process of this server's, as
//! a host task's runtime is; the containers are the engine's own and outlive the client
//! where the server asks.
//!
//! The attached client per task is a Go process, 9–14 MiB of each task's memory and a
//! start heavier than `run -d`: Podman runs above its floor where Docker, through its
//! daemon's API, is at its own (BENCHMARKS.md, "Containers per engine"). Running detached
//! through Podman's API service would remove it and lose what it gives: the log file and
//! the ssh listener handed over as they are, and the container's end together with
//! `rest-lite run`'s. An event reaches the events stream 0.03–0.22 s after its `run -d`
//! returns: no slower than the 100 ms `ps` poll it replaced.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use futures::future::BoxFuture;
use pai_contract::paths;

use super::driver::{CDI_GPU, Driver, LABEL_SERVER, Start, Step, Ulimit};

/// Podman lowers its own `nproc` to this (so runc, started under it, cannot set more).
pub(super) const MAX_PROCESSES: u64 = 32_768;

/// Between two looks at the running containers, while the events that say a container
/// started cannot be read.
const START_LOOK: std::time::Duration = std::time::Duration::from_secs(1);

/// Podman's command line, as this server calls it.
#[derive(Debug)]
pub struct Podman {
    cli: Arc<Cli>,
    /// Who waits for a container to run.
    starts: Arc<Starts>,
    /// util-linux's `setpriv`, which starts the client with a parent-death signal when
    /// containers must not outlive the server: a server that dies then ends its tasks'
    /// containers (the client passes the TERM on), as it ends its host processes.
    setpriv: Option<PathBuf>,
    /// Containers outlive the server: kept until the server has read their end (no `--rm`).
    outlive_server: bool,
    /// The limits every container gets (`--ulimit`).
    ulimits: Vec<Ulimit>,
}

/// The program and what every call of it carries.
#[derive(Debug)]
struct Cli {
    program: PathBuf,
    /// The OCI runtime it is told to use (`--runtime`), when one is set.
    oci_runtime: Option<String>,
    /// `label=io.openpai.rest-lite.server=<this server>`.
    filter: String,
}

/// Tasks waiting for their main container to run, and the one follower that tells them:
/// one `podman events` stream of this server's containers' starts answers every task that
/// waits (a `wait` per container would be a process per task, and fails for a container
/// not created yet; a `ps` every 100 ms started a process that often while any task waited).
#[derive(Default)]
struct Starts {
    /// Who waits for which container, and whether the follower runs.
    waiters: std::sync::Mutex<(Waiters, bool)>,
}

type Waiters = std::collections::HashMap<String, Vec<tokio::sync::oneshot::Sender<()>>>;

impl std::fmt::Debug for Starts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Starts")
    }
}

impl Podman {
    /// Podman at `program`, if it answers: it and its version.
    pub async fn find(
        program: PathBuf,
        oci_runtime: Option<String>,
        server_label: &str,
        outlive_server: bool,
        ulimits: Vec<Ulimit>,
    ) -> Result<(Self, String), String> {
        let out = tokio::process::Command::new(&program)
            .args(["version", "--format", "{{.Client.Version}}"])
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
        if !out.status.success() {
            return Err(format!(
                "{} version failed: {}",
                program.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let podman = Self {
            cli: Arc::new(Cli {
                program,
                oci_runtime,
                filter: format!("label={LABEL_SERVER}={server_label}"),
            }),
            starts: Arc::default(),
            setpriv: (!outlive_server)
                .then(|| super::driver::find_program("setpriv"))
                .flatten(),
            outlive_server,
            ulimits,
        };
        Ok((podman, format!("Podman {version}")))
    }

    /// The client for a task's container: started through `setpriv` with a parent-death
    /// signal where containers end with the server.
    fn client(&self) -> tokio::process::Command {
        let Some(setpriv) = &self.setpriv else {
            return self.cli.command();
        };
        let mut command = tokio::process::Command::new(setpriv);
        command
            .args(["--pdeathsig", "TERM", "--"])
            .arg(&self.cli.program);
        if let Some(runtime) = &self.cli.oci_runtime {
            command.arg("--runtime").arg(runtime);
        }
        command
    }

    /// `podman run` of `step`, attached: its standard streams are the command's own. The
    /// client gets SIGTERM when the thread that starts it ends (the server's spawning
    /// threads live as long as the server) and passes it to the container.
    // Long: one flag after another, as `podman run` takes them.
    fn run(&self, step: &Step, runtime_binary: &Path) -> tokio::process::Command {
        let mut command = self.client();
        command.arg("run");
        // The container of a server whose containers outlive it stays until the server
        // has read how it ended (a restarted server reads it with `wait`).
        if !self.outlive_server {
            command.arg("--rm");
        }
        command.args([
            "--log-driver",
            "passthrough",
            "--network",
            "host",
            "--pull",
            "never",
            "--name",
            &step.name,
            "--hostname",
            &step.hostname,
        ]);
        command
            .arg("--add-host")
            .arg(format!("{}:{}", step.hostname, step.address));
        for (key, value) in &step.labels {
            command.arg("--label").arg(format!("{key}={value}"));
        }
        if let Some(cpus) = step.limits.cpus {
            command.arg("--cpus").arg(format!("{cpus}"));
        }
        if let Some(memory) = step.limits.memory {
            command
                .arg("--memory")
                .arg(memory.to_string())
                .arg("--memory-swap")
                .arg(memory.to_string());
        }
        if let Some(shm) = step.limits.shm {
            command.arg("--shm-size").arg(shm.to_string());
        }
        for index in &step.gpus {
            command.arg("--device").arg(format!("{CDI_GPU}={index}"));
        }
        for (host, inside, read_only) in &step.mounts {
            command
                .arg("--volume")
                .arg(volume(host, inside, *read_only));
        }
        for (name, value) in &step.env {
            command.arg("--env").arg(format!("{name}={value}"));
        }
        self.runtime_in(&mut command, runtime_binary, &step.image);
        command
    }

    /// What every container of this server gets, its image last: the server's limits,
    /// and the static runtime at `runtime_binary` mounted read-only as its entry point.
    fn runtime_in(
        &self,
        command: &mut tokio::process::Command,
        runtime_binary: &Path,
        image: &str,
    ) {
        for limit in &self.ulimits {
            command.arg("--ulimit").arg(limit.to_string());
        }
        command
            .arg("--volume")
            .arg(volume(runtime_binary, paths::RUN, true))
            .arg("--entrypoint")
            .arg(paths::RUN)
            .arg(image);
    }
}

/// `--volume`'s `host:inside[:ro]`, the host path as it is (not UTF-8 too).
fn volume(host: &Path, inside: &str, read_only: bool) -> std::ffi::OsString {
    let mut spec = std::ffi::OsString::from(host.as_os_str());
    spec.push(format!(":{inside}"));
    if read_only {
        spec.push(":ro");
    }
    spec
}

impl Cli {
    /// The engine's command before its subcommand.
    fn command(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.program);
        if let Some(runtime) = &self.oci_runtime {
            command.arg("--runtime").arg(runtime);
        }
        command
    }

    /// The engine with `args`, its output discarded: how it ended.
    async fn quiet(&self, args: &[&str]) -> std::io::Result<std::process::ExitStatus> {
        self.command()
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
    }

    /// What `command` printed, or its words on failure.
    async fn output(&self, mut command: tokio::process::Command) -> Result<String, String> {
        let out = command
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|e| self.cannot_run(e))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr)
                .trim()
                .trim_start_matches("Error: ")
                .to_string())
        }
    }

    fn cannot_run(&self, e: std::io::Error) -> String {
        format!("cannot run {}: {e}", self.program.display())
    }

    /// The names of this server's containers: running ones, or `all` of them.
    async fn names(&self, all: bool) -> Result<Vec<String>, String> {
        let mut command = self.command();
        command.arg("ps");
        if all {
            command.arg("--all");
        }
        let output = command
            .args(["--filter", &self.filter, "--format", "{{.Names}}"])
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| self.cannot_run(e))?;
        if !output.status.success() {
            return Err(String::from_utf8_lossy(&output.stderr).trim().to_string());
        }
        Ok(String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(str::to_string)
            .collect())
    }

    /// Tells the waiting tasks their container runs, until nobody waits, from one
    /// `podman events` stream of this server's containers' starts. The stream replays the
    /// engine's event log from a moment before `began`, when the first waiter came: every
    /// waiter comes before its container starts ([`Driver::running`]), so no start is
    /// missed between the stream's spawn and its subscription. One look at the running
    /// containers at the beginning answers a waiter whose container was there already.
    /// Only while the engine's events cannot be read does a look come each [`START_LOOK`]
    /// (a `ps` each second, with 50 containers starting, took CPU the starts needed).
    async fn follow_starts(self: Arc<Self>, starts: Arc<Starts>, began: std::time::SystemTime) {
        use tokio::io::AsyncBufReadExt;
        // The event log's clock is this machine's; a second before is a margin for its
        // resolution, and a start replayed twice is told once.
        let since = began
            .checked_sub(std::time::Duration::from_secs(1))
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|t| format!("{}.{:09}", t.as_secs(), t.subsec_nanos()))
            .unwrap_or_else(|| "0".to_string());
        let events = self
            .command()
            .args(["events", "--since", &since])
            .args(["--filter", "event=start", "--filter"])
            .arg(&self.filter)
            .args(["--format", "{{.Name}}"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn();
        let (_events, mut lines) = match events {
            Ok(mut child) => {
                let lines = child
                    .stdout
                    .take()
                    .map(|out| tokio::io::BufReader::new(out).lines());
                (Some(child), lines)
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot follow Podman's events; looking at the running containers instead");
                (None, None)
            }
        };
        if starts.tell(self.names(false).await.unwrap_or_default()) {
            return;
        }
        let mut look = tokio::time::interval(START_LOOK);
        loop {
            let started: Vec<String> = tokio::select! {
                line = async { lines.as_mut()?.next_line().await.ok().flatten() }, if lines.is_some() => {
                    match line {
                        Some(name) => vec![name],
                        None => {
                            // The stream ended: the looks go on alone.
                            tracing::warn!("Podman's event stream ended; looking at the running containers instead");
                            lines = None;
                            look.reset();
                            Vec::new()
                        }
                    }
                }
                // While the stream lives, the tick only forgets waiters that are gone
                // (a task whose start failed), so that a follower nobody needs ends.
                _ = look.tick() => match lines {
                    Some(_) => Vec::new(),
                    None => self.names(false).await.unwrap_or_default(),
                },
            };
            if starts.tell(started) {
                return;
            }
        }
    }
}

impl Starts {
    /// Tells the waiters of the containers `started`, and forgets those no longer
    /// waiting: true when nobody waits any more (the follower then ends).
    fn tell(&self, started: Vec<String>) -> bool {
        let mut waiters = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        for name in started {
            for tx in waiters.0.remove(&name).into_iter().flatten() {
                let _ = tx.send(());
            }
        }
        waiters.0.retain(|_, senders| {
            senders.retain(|tx| !tx.is_closed());
            !senders.is_empty()
        });
        if waiters.0.is_empty() {
            waiters.1 = false;
        }
        waiters.0.is_empty()
    }
}

impl Driver for Podman {
    fn program(&self) -> &'static str {
        "podman"
    }

    fn hands_over(&self) -> bool {
        true
    }

    fn start<'a>(
        &'a self,
        step: &'a Step,
        runtime_binary: &'a Path,
    ) -> BoxFuture<'a, Result<Start, String>> {
        Box::pin(async move { Ok(Start::Attached(Box::new(self.run(step, runtime_binary)))) })
    }

    /// Returns once the container `name` runs (or has run): a task is RUNNING then, as a
    /// pod whose container started. The waiter is there from this call on.
    fn running<'a>(&'a self, name: &'a str) -> BoxFuture<'a, ()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let start_follower = {
            let mut waiters = self
                .starts
                .waiters
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            waiters.0.entry(name.to_string()).or_default().push(tx);
            !std::mem::replace(&mut waiters.1, true)
        };
        if start_follower {
            let follower = self
                .cli
                .clone()
                .follow_starts(self.starts.clone(), std::time::SystemTime::now());
            tokio::spawn(follower);
        }
        Box::pin(async move {
            let _ = rx.await;
        })
    }

    fn has_image<'a>(&'a self, image: &'a str) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async move {
            let status = self
                .cli
                .quiet(&["image", "exists", image])
                .await
                .map_err(|e| self.cli.cannot_run(e))?;
            Ok(status.success())
        })
    }

    fn pull<'a>(
        &'a self,
        image: &'a str,
        authfile: Option<&'a Path>,
        progress: &'a (dyn Fn(&str) + Send + Sync),
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            use tokio::io::AsyncBufReadExt;
            let mut command = self.cli.command();
            command.arg("pull");
            if let Some(authfile) = authfile {
                command.arg("--authfile").arg(authfile);
            }
            let mut child = command
                .arg(image)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| self.cli.cannot_run(e))?;
            let mut last = String::new();
            if let Some(stderr) = child.stderr.take() {
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let line = line.trim();
                    if !line.is_empty() {
                        progress(line);
                        last = line.to_string();
                    }
                }
            }
            let status = child
                .wait()
                .await
                .map_err(|e| format!("lost {}: {e}", self.cli.program.display()))?;
            if status.success() {
                return Ok(());
            }
            Err(if last.is_empty() {
                "the pull failed".to_string()
            } else {
                last.trim_start_matches("Error: ").to_string()
            })
        })
    }

    fn save<'a>(&'a self, image: &'a str, archive: &'a Path) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let mut command = self.cli.command();
            command
                .args(["save", "--quiet", "--format", "docker-archive", "--output"])
                .arg(archive)
                .arg(image);
            self.cli.output(command).await.map(drop)
        })
    }

    fn load<'a>(&'a self, archive: &'a Path) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let mut command = self.cli.command();
            command.args(["load", "--quiet", "--input"]).arg(archive);
            self.cli.output(command).await.map(drop)
        })
    }

    fn wait<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Option<i32>> {
        Box::pin(async move {
            let output = self
                .cli
                .command()
                .args(["wait", name])
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .output()
                .await
                .ok()?;
            if !output.status.success() {
                return None;
            }
            String::from_utf8_lossy(&output.stdout).trim().parse().ok()
        })
    }

    fn kill<'a>(&'a self, name: &'a str, signal: &'a str) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            self.cli
                .quiet(&["kill", "--signal", signal, name])
                .await
                .is_ok_and(|s| s.success())
        })
    }

    fn remove<'a>(&'a self, names: &'a [String]) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if names.is_empty() {
                return;
            }
            let mut args = vec!["rm", "--force", "--ignore", "--time", "0"];
            args.extend(names.iter().map(String::as_str));
            let _ = self.cli.quiet(&args).await;
        })
    }

    fn names(&self, all: bool) -> BoxFuture<'_, Result<Vec<String>, String>> {
        Box::pin(self.cli.names(all))
    }

    fn image_user<'a>(&'a self, image: &'a str) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            let mut command = self.cli.command();
            command.args(["image", "inspect", "--format", "{{.Config.User}}", image]);
            self.cli.output(command).await
        })
    }

    fn whoami<'a>(
        &'a self,
        image: &'a str,
        runtime_binary: &'a Path,
    ) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            let mut command = self.cli.command();
            command.args(["run", "--rm", "--network", "none", "--pull", "never"]);
            self.runtime_in(&mut command, runtime_binary, image);
            command.arg(paths::commands::WHOAMI);
            self.cli.output(command).await
        })
    }
}
