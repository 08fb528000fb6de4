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
    child: Child,
    dir: tempfile::TempDir,
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
        let mut child = as_postgres(&bin.join("postgres"))
            .arg("-D")
            .arg(&data)
            .arg("-k")
            .arg(dir.path())
            .args([
                "-c",
                "listen_addresses=",
                "-c",
                "fsync=off",
                "-c",
                "full_page_writes=off",
            ])
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
        Some(Self { child, dir })
    }

    /// The libpq connection string of its `postgres` database.
    pub fn connection(&self) -> String {
        format!(
            "host={} port=5432 user=postgres dbname=postgres",
            self.dir.path().display()
        )
    }

    /// Runs `sql` through `psql`, and returns what it printed (unaligned, tuples only).
    pub fn psql(&self, sql: &str) -> String {
        let out = Command::new("psql")
            .args(["-X", "-A", "-t", "-h"])
            .arg(self.dir.path())
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
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
