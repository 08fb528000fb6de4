//! A throwaway PostgreSQL server for a test: Debian's `postgresql` package's `initdb` and
//! `postgres`, a new cluster in a scratch directory, reached through a Unix socket in
//! it (no TCP port), trust authentication, no fsync. Run as the `postgres` user where
//! the test runs as root (the server refuses root). Stopped and removed when dropped.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::needs;

/// A running server.
pub struct Postgres {
    /// `None` while stopped.
    child: Option<Child>,
    dir: tempfile::TempDir,
    /// Its TCP port on 127.0.0.1, where it listens on one.
    port: Option<u16>,
    program: PathBuf,
    data: PathBuf,
    settings: Vec<String>,
}

/// Sends `signal` (its name) to process `pid`, with `kill(1)`.
fn send_signal(pid: u32, signal: &str) -> std::io::Result<std::process::ExitStatus> {
    Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
}

/// Starts `postgres` on `data`, its socket in `sockets`; returns once it is ready.
fn run_server(
    program: &Path,
    data: &Path,
    sockets: &Path,
    port: Option<u16>,
    settings: &[String],
) -> Child {
    let mut command = as_postgres(program);
    command.arg("-D").arg(data).arg("-k").arg(sockets);
    if let Some(port) = port {
        // The Unix socket's name follows the port.
        command.arg("-p").arg(port.to_string());
    }
    for setting in settings {
        command.arg("-c").arg(setting);
    }
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("postgres");
    // Ready once it says so; its log is read on (and dropped) so that it never blocks.
    let stderr = child.stderr.take().expect("postgres' stderr");
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut said = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("ready to accept connections") {
                let _ = ready_tx.send(Ok(()));
            } else {
                said.push(line);
                if said.len() > 50 {
                    said.remove(0);
                }
            }
        }
        let _ = ready_tx.send(Err(said.join("\n")));
    });
    match ready_rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(Ok(())) => {}
        Ok(Err(log)) => panic!("postgres ended before it was ready:\n{log}"),
        Err(_) => panic!("postgres was not ready within 60 s"),
    }
    child
}

/// A server on TCP (127.0.0.1) as well: with TLS where `tls` is given, its clients
/// admitted as `hba`'s lines say (`pg_hba.conf`, replacing initdb's).
pub struct OnTcp<'a> {
    pub tls: Option<ServerTls<'a>>,
    pub hba: &'a [&'a str],
}

/// The server's certificate and key (PEM), and the CA its clients' certificates are
/// checked against, if any.
pub struct ServerTls<'a> {
    pub cert: &'a str,
    pub key: &'a str,
    pub client_ca: Option<&'a str>,
}

/// The directory of PostgreSQL's server programs, the newest installed.
fn server_programs() -> Option<PathBuf> {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|bin| bin.join("postgres").is_file() && bin.join("initdb").is_file())
        .collect();
    versions.sort();
    versions.pop()
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find(|l| l.starts_with("Uid:"))
            .is_some_and(|l| l.split_whitespace().nth(1) == Some("0"))
    })
}

/// `program` with `args`, as the `postgres` user where this is root.
fn as_postgres(program: &Path) -> Command {
    if is_root() {
        // setpriv execs the program (runuser would stay its parent, and a kill of it
        // would leave the server running).
        let mut command = Command::new("setpriv");
        command
            .args([
                "--reuid=postgres",
                "--regid=postgres",
                "--init-groups",
                "--",
            ])
            .arg(program);
        command
    } else {
        Command::new(program)
    }
}

impl Postgres {
    /// A new server; `None` (the test skips) where PostgreSQL is not installed, outside
    /// CI.
    pub fn start() -> Option<Self> {
        Self::start_on(None)
    }

    /// A new server on TCP too, as `tcp` says; `None` as [`Postgres::start`].
    pub fn start_tcp(tcp: &OnTcp<'_>) -> Option<Self> {
        Self::start_on(Some(tcp))
    }

    // Long: a server from nothing (the programs, the user, initdb, the TCP and TLS
    // settings, the start and its readiness), one step after the other.
    fn start_on(tcp: Option<&OnTcp<'_>>) -> Option<Self> {
        let bin = server_programs();
        let user = !is_root()
            || Command::new("id")
                .arg("postgres")
                .output()
                .is_ok_and(|o| o.status.success());
        if !needs::present(
            "PostgreSQL's server (initdb, postgres) and its postgres user",
            bin.is_some() && user,
            "apt-get install postgresql",
        ) {
            return None;
        }
        let bin = bin?;
        let dir = tempfile::Builder::new()
            .prefix("pg-")
            .tempdir()
            .expect("a scratch directory");
        if is_root() {
            let owned = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .expect("chown");
            assert!(owned.success(), "chown of the scratch directory");
        }
        let data = dir.path().join("data");
        let chown = |path: &Path| {
            if is_root() {
                let owned = Command::new("chown")
                    .args(["postgres:postgres"])
                    .arg(path)
                    .status()
                    .expect("chown");
                assert!(owned.success(), "chown {}", path.display());
            }
        };
        let init = as_postgres(&bin.join("initdb"))
            .args([
                "--auth=trust",
                "--encoding=UTF8",
                "--no-sync",
                "-U",
                "postgres",
                "-D",
            ])
            .arg(&data)
            .output()
            .expect("initdb");
        assert!(
            init.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        let mut settings = vec!["fsync=off".to_string(), "full_page_writes=off".to_string()];
        let port = tcp.map(|_| crate::free_port());
        match (tcp, port) {
            (Some(tcp), Some(port)) => {
                settings.push("listen_addresses=127.0.0.1".to_string());
                settings.push(format!("port={port}"));
                let hba = data.join("pg_hba.conf");
                let mut lines = vec!["local all all trust".to_string()];
                lines.extend(tcp.hba.iter().map(|l| l.to_string()));
                std::fs::write(&hba, lines.join("\n") + "\n").expect("pg_hba.conf");
                chown(&hba);
                if let Some(tls) = &tcp.tls {
                    let write = |name: &str, text: &str| {
                        let path = dir.path().join(name);
                        std::fs::write(&path, text).expect("a TLS file");
                        use std::os::unix::fs::PermissionsExt;
                        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                            .expect("mode");
                        chown(&path);
                        path.display().to_string()
                    };
                    settings.push("ssl=on".to_string());
                    settings.push(format!("ssl_cert_file={}", write("server.crt", tls.cert)));
                    settings.push(format!("ssl_key_file={}", write("server.key", tls.key)));
                    if let Some(ca) = tls.client_ca {
                        settings.push(format!("ssl_ca_file={}", write("client-ca.crt", ca)));
                    }
                }
            }
            _ => settings.push("listen_addresses=".to_string()),
        }
        let program = bin.join("postgres");
        let child = run_server(&program, &data, dir.path(), port, &settings);
        Some(Self {
            child: Some(child),
            dir,
            port,
            program,
            data,
            settings,
        })
    }

    /// Stops the server (fast shutdown), as a database that went away.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = send_signal(child.id(), "INT");
            let _ = child.wait();
        }
    }

    /// Starts it again on the same data, where it was stopped.
    pub fn restart(&mut self) {
        if self.child.is_none() {
            self.child = Some(run_server(
                &self.program,
                &self.data,
                self.dir.path(),
                self.port,
                &self.settings,
            ));
        }
    }

    /// The libpq connection string of its `postgres` database.
    pub fn connection(&self) -> String {
        format!(
            "host={} port={} user=postgres dbname=postgres",
            self.dir.path().display(),
            self.port.unwrap_or(5432)
        )
    }

    /// The libpq connection string of its `postgres` database over TCP, as `user`,
    /// reaching 127.0.0.1 by the name `host` (`hostaddr`: a certificate's name is checked
    /// against `host`), with `more` parameters.
    pub fn tcp_connection(&self, user: &str, host: &str, more: &str) -> String {
        let port = self.port.expect("a server started with start_tcp");
        format!("host={host} hostaddr=127.0.0.1 port={port} user={user} dbname=postgres {more}")
    }

    /// Runs `sql` through `psql`, and returns what it printed (unaligned, tuples only).
    pub fn psql(&self, sql: &str) -> String {
        let out = Command::new("psql")
            .args(["-X", "-A", "-t", "-h"])
            .arg(self.dir.path())
            .args(["-p", &self.port.unwrap_or(5432).to_string()])
            .args(["-U", "postgres", "-d", "postgres", "-c", sql])
            .output()
            .expect("psql");
        assert!(
            out.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
