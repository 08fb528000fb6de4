//! sshd on demand: the supervisor holds the task's ssh port from the start and starts
//! `sshd -i` (inetd mode: the connection is its standard input and output) for each
//! connection, so no sshd runs until someone connects, and nothing else can take the
//! port in between.
//!
//! Nothing of ssh costs the task anything until then: sshd's configuration (its config
//! file, authorised keys, the session script) is made by the `init/` script that used to
//! start sshd ([`SETUP_SCRIPT`], `init/10-sshd.sh`), and while the supervisor holds the
//! port that script runs at the first connection, not at the task's start (one shell
//! less per task). Told by [`ON_DEMAND_VAR`] that the supervisor listens, it writes which
//! sshd to run into [`SSHD_PATH_FILE`] and ends; connections wait for it. When it ends
//! without naming one (no key, no sshd in the image: it says why in its log), every
//! connection is closed. When the port cannot be held, the script runs at the start as
//! every daemon script does, and starts sshd itself.

use std::ffi::OsString;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use nix::unistd::Pid;
use tracing::{info, warn};

use super::daemon;
use super::spawn::{self, Environment, Stream, Streams};

/// Set for the daemon scripts when the supervisor listens on the ssh port.
pub const ON_DEMAND_VAR: &str = "PAI_SSH_ON_DEMAND";
/// In the ssh directory: the sshd to start per connection, one line.
pub const SSHD_PATH_FILE: &str = "sshd.path";
/// The log of the sshd processes, in the task's log directory.
pub const SSHD_LOG: &str = "sshd.log";
/// The `init/` script that prepares sshd: run at the first connection when the
/// supervisor holds the port.
pub const SETUP_SCRIPT: &str = "10-sshd.sh";
/// How long a connection waits for the configuration before it is closed.
const READY_BOUND: Duration = Duration::from_secs(60);

/// Whether sshd can be started for a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Readiness {
    /// Nobody connected yet: nothing is prepared.
    Unprepared,
    /// The setup script (this pid) runs.
    Preparing(Pid),
    Ready(PathBuf),
    /// The setup script ended without naming an sshd, or there is none: since when. A
    /// connection [`RETRY_AFTER`] later (by default) runs the script again, so an sshd installed in
    /// the running task (`apt-get install openssh-server`) is found.
    Unavailable(Instant),
}

/// How long a task without sshd answers connections by closing them before it looks
/// again, unless [`pai_contract::env::runtime::SSH_RETRY_SEC`] says.
const RETRY_AFTER: Duration = Duration::from_secs(10);

fn retry_after() -> Duration {
    std::env::var(pai_contract::env::runtime::SSH_RETRY_SEC)
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(RETRY_AFTER, Duration::from_secs)
}

/// How to run the setup script: as a daemon script is run (the supervisor reaps it and
/// tells [`OnDemand`]), its output into `init-<name>.log` in `log_dir`.
pub struct Setup {
    pub script: PathBuf,
    pub env: Arc<Environment>,
    pub log_dir: PathBuf,
    pub log_cap: u64,
}

/// sshd processes that may run at once; a connection beyond is closed. A resident sshd
/// bounds its unauthenticated connections (`MaxStartups`); one `sshd -i` per connection
/// has no such bound of its own, and anyone who reaches the port could start sshd
/// processes without end.
pub const MAX_SESSIONS: usize = 64;

/// The sshd processes running, by pid: one more is let in while fewer than the bound run.
#[derive(Clone, Default)]
struct Sessions(Arc<Mutex<std::collections::HashSet<u32>>>);

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<u32>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The listener's view of the setup script and of the sshd processes it started; the
/// supervisor tells it when they end.
#[derive(Clone)]
pub struct OnDemand {
    ready: Arc<(Mutex<Readiness>, Condvar)>,
    dir: PathBuf,
    sessions: Sessions,
    setup: Arc<Option<Setup>>,
    /// How long after finding no sshd a connection runs the setup again.
    retry_after: Duration,
}

/// What the sshd processes need: where the configuration is, where they log, their
/// environment, and the one their sessions get.
#[derive(Clone, Debug)]
pub struct Sshd {
    pub port: u16,
    /// Where to bind the port when it was not handed over.
    pub address: std::net::IpAddr,
    /// The port, bound and listening, as the embedded default hands it over.
    pub listener: Option<Arc<TcpListener>>,
    /// The task's ssh directory (`<root>/ssh`).
    pub dir: PathBuf,
    pub log: PathBuf,
    pub env: Vec<(OsString, OsString)>,
    pub session: SessionEnv,
    /// The `init/` script that prepares sshd ([`SETUP_SCRIPT`]), if the task has it.
    pub setup: Option<PathBuf>,
}

/// `env-all.sh`: the task's whole environment (0600), which ssh sessions source. Written
/// at the first connection, not at the task's start: at 1,000 tasks it is 250 KB per
/// task that almost nobody reads.
#[derive(Clone, Debug)]
pub struct SessionEnv {
    pub path: PathBuf,
    pub env: Arc<Vec<(OsString, OsString)>>,
    written: Arc<std::sync::Once>,
}

impl SessionEnv {
    pub fn new(path: PathBuf, env: Arc<Vec<(OsString, OsString)>>) -> Self {
        Self {
            path,
            env,
            written: Arc::new(std::sync::Once::new()),
        }
    }

    /// Writes the file, once.
    pub fn write(&self) {
        self.written.call_once(|| {
            let vars = self.env.iter().filter(|(k, _)| {
                let k = k.to_string_lossy();
                pai_contract::env::is_shell_identifier(&k)
                    && !matches!(
                        k.as_ref(),
                        "HOME" | "PWD" | "OLDPWD" | "SHLVL" | "_" | "HOSTNAME"
                    )
            });
            let result = crate::shell::render(vars.map(|(k, v)| (k.as_os_str(), v.as_os_str())))
                .map_err(|e| e.to_string())
                .and_then(|text| write_private(&self.path, &text).map_err(|e| e.to_string()));
            if let Err(e) = result {
                warn!(path = %self.path.display(), error = %e, "cannot write the ssh sessions' environment; they will lack the job's variables");
            }
        });
    }
}

/// Writes `bytes` to `path`, readable and writable by this user alone (0600), also when
/// the file was there before.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(bytes)
}

impl OnDemand {
    /// Serves `sshd.port` from a thread of its own: the listener handed over, else the
    /// port bound on `sshd.address`; `setup` prepares sshd at the first connection.
    pub fn listen(sshd: Sshd, setup: Option<Setup>) -> std::io::Result<Self> {
        let listener = match &sshd.listener {
            Some(handed) => handed.clone(),
            None => Arc::new(TcpListener::bind((sshd.address, sshd.port))?),
        };
        let this = Self {
            ready: Arc::new((Mutex::new(Readiness::Unprepared), Condvar::new())),
            dir: sshd.dir.clone(),
            sessions: Sessions::default(),
            setup: Arc::new(setup),
            retry_after: retry_after(),
        };
        let serving = this.clone();
        let port = sshd.port;
        std::thread::Builder::new()
            .name("sshd-on-demand".into())
            .spawn(move || serving.serve(&listener, &sshd))?;
        info!(
            port,
            "ssh port held; sshd is prepared at the first connection and starts for each"
        );
        Ok(this)
    }

    /// A child of the supervisor ended (reaped): one of its sshd processes or the setup
    /// script, maybe. `task_ending`: the task's clean-up ended it (the user command had
    /// ended), which is no trouble to report.
    pub fn reaped(&self, pid: u32, task_ending: bool) {
        self.sessions.lock().remove(&pid);
        let (lock, changed) = &*self.ready;
        let mut ready = lock.lock().unwrap_or_else(|p| p.into_inner());
        if !matches!(*ready, Readiness::Preparing(setup) if setup.as_raw().unsigned_abs() == pid) {
            return;
        }
        *ready = match self.sshd_path() {
            Some(path) => Readiness::Ready(path),
            None => {
                if !task_ending {
                    warn!(
                        "the ssh setup script prepared no sshd (its log says why); ssh connections are closed"
                    );
                }
                Readiness::Unavailable(Instant::now())
            }
        };
        changed.notify_all();
    }

    /// The sshd a script named in [`SSHD_PATH_FILE`].
    fn sshd_path(&self) -> Option<PathBuf> {
        std::fs::read_to_string(self.dir.join(SSHD_PATH_FILE))
            .ok()
            .map(|p| PathBuf::from(p.trim()))
            .filter(|p| p.is_absolute())
    }

    /// What a connection gets: the sshd to run, or `None`. The first one starts the
    /// setup script, and every one waits for it to end.
    fn wait_ready(&self) -> Option<PathBuf> {
        let (lock, changed) = &*self.ready;
        let mut ready = lock.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(*ready, Readiness::Unavailable(since) if since.elapsed() >= self.retry_after) {
            *ready = Readiness::Unprepared;
        }
        if *ready == Readiness::Unprepared {
            // Another script of the image may have prepared sshd already.
            *ready = match (self.sshd_path(), &*self.setup) {
                (Some(path), _) => Readiness::Ready(path),
                (None, Some(setup)) => {
                    match daemon::start_script(
                        SETUP_SCRIPT,
                        &setup.script,
                        &setup.env,
                        &setup.log_dir,
                        setup.log_cap,
                    ) {
                        // Entered under the lock: the supervisor, reaping a script that
                        // ended at once, looks for its pid only after this.
                        Ok(pid) => {
                            info!(script = SETUP_SCRIPT, %pid, "preparing sshd for the first connection");
                            Readiness::Preparing(pid)
                        }
                        Err(e) => {
                            warn!(script = %setup.script.display(), error = %e, "cannot start the ssh setup script; ssh connections are closed");
                            Readiness::Unavailable(Instant::now())
                        }
                    }
                }
                (None, None) => {
                    warn!(
                        "no {SETUP_SCRIPT} among the init scripts and no sshd prepared; ssh connections are closed"
                    );
                    Readiness::Unavailable(Instant::now())
                }
            };
        }
        let (ready, _) = changed
            .wait_timeout_while(ready, READY_BOUND, |r| matches!(r, Readiness::Preparing(_)))
            .unwrap_or_else(|p| p.into_inner());
        match &*ready {
            Readiness::Ready(path) => Some(path.clone()),
            _ => None,
        }
    }

    fn serve(&self, listener: &TcpListener, sshd: &Sshd) {
        for stream in listener.incoming() {
            let stream = match stream {
                Ok(stream) => stream,
                Err(e) => {
                    warn!(error = %e, "cannot accept an ssh connection");
                    continue;
                }
            };
            let Some(program) = self.wait_ready() else {
                continue;
            };
            // Held from the check to the pid's entry: the supervisor, reaping an sshd
            // that ended at once, removes its pid only after it was entered.
            let mut running = self.sessions.lock();
            if running.len() >= MAX_SESSIONS {
                warn!(
                    max = MAX_SESSIONS,
                    "ssh connection closed: as many sshd processes as allowed run"
                );
                continue;
            }
            sshd.session.write();
            match start(&program, stream, sshd) {
                Ok(pid) => {
                    running.insert(pid);
                }
                Err(e) => {
                    warn!(sshd = %program.display(), error = %e, "cannot start sshd for a connection")
                }
            }
        }
    }
}

/// `sshd -i` on `stream`, in its own process group (a signal for the user command's
/// group does not reach it); the supervisor reaps it. Returns its pid.
fn start(program: &Path, stream: TcpStream, sshd: &Sshd) -> std::io::Result<u32> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&sshd.log)?;
    let input = stream.try_clone()?;
    let config = sshd.dir.join("sshd_config");
    let pid = spawn::spawn(
        program,
        &[
            "-i".as_ref(),
            "-e".as_ref(),
            "-f".as_ref(),
            config.as_os_str(),
        ],
        &Environment::new(sshd.env.iter().map(|(k, v)| (k, v)))?,
        Streams {
            stdin: Stream::To(input.into()),
            stdout: Stream::To(stream.into()),
            stderr: Stream::To(log.into()),
        },
    )?;
    // Reaped by the supervisor's loop, as every child is.
    Ok(pid.as_raw().unsigned_abs())
}
