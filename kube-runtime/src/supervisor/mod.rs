//! The supervisor of a task's main container, as PID 1 (or as a child subreaper when
//! something else is PID 1, as in the embedded default). It reads like tini:
//!
//! ```text
//! start the daemons, start the user command in its own process group
//! loop:
//!     reap every child that ended; note the user command's status
//!     user command ended  → TERM everything left, KILL it after the grace period,
//!                           leave once nothing is left
//!     a signal received   → pass it to the user command's process group (every one
//!                           but SIGCHLD, as tini does; see `signals::NOT_TAKEN`; a
//!                           TERM within an earlier TERM's grace period is not passed
//!                           again); after TERM or INT, KILL the group if the grace
//!                           period passes
//!     wait for the next signal or deadline
//! exit with the user command's status (128 + N when signal N ended it)
//! ```
//!
//! A daemon that ends is logged and never ends the job.

mod daemon;
mod procs;
pub mod signals;
mod spawn;
pub mod ssh;

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::unistd::{Pid, getpid};
use tracing::{info, warn};

use crate::logs::{CappedLog, EchoBudget};
use crate::output;
use daemon::start_script;
pub use procs::Ended;
use procs::{reap, signal_group, signal_rest};
use signals::{Signals, forwarded};
use spawn::{Environment, Stream, Streams};

/// What to supervise.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The user command: `/bin/sh <main.sh>`.
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// Daemons (name, script), each run by `/bin/sh` with its own log.
    pub daemons: Vec<(String, PathBuf)>,
    /// The user command's complete environment (shared with the ssh sessions').
    pub env: Arc<Vec<(OsString, OsString)>>,
    /// The daemons' environment: the container's own and this task's variables, not
    /// the per-peer ones (which grow with the job, and every exec copies them).
    pub daemon_env: Vec<(OsString, OsString)>,
    pub log_dir: PathBuf,
    pub log_cap: u64,
    /// The container log's bound, where the embedded default gave one.
    pub log_rotation: Option<pai_contract::log_rotation::Rotation>,
    /// Between TERM and KILL.
    pub grace: Duration,
    /// The operator's failure patterns ([`pai_contract::failure::PATTERNS_VAR`]'s value).
    pub failure_patterns: Option<String>,
    /// The task's ssh port to hold and serve with `sshd -i` per connection (see
    /// [`ssh`]); `None`: the task has no ssh.
    pub ssh: Option<ssh::Sshd>,
}

#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    #[error("cannot start the user command {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("the task's ssh port {port} is taken by another process of this host")]
    PortTaken { port: u16 },
    #[error("signal handling failed: {0}")]
    Signals(#[from] nix::Error),
    #[error("cannot create {path}: {source}")]
    Log {
        path: String,
        source: std::io::Error,
    },
}

/// How the user command ended.
#[derive(Debug)]
pub struct Outcome {
    pub ended: Ended,
    /// What its output said went wrong, when it failed.
    pub cause: Option<pai_contract::failure::Cause>,
}

/// Runs `plan` to the end; returns the user command's status. `signals` must have been
/// set up before any thread started.
pub fn supervise(plan: &Plan, signals: &Signals) -> Result<Outcome, SuperviseError> {
    let pid1 = getpid().as_raw() == 1;
    if !pid1 && let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        warn!(error = %e, "cannot become a child subreaper; orphans of the user command will not be reaped here");
    }
    std::fs::create_dir_all(&plan.log_dir).map_err(|source| SuperviseError::Log {
        path: plan.log_dir.display().to_string(),
        source,
    })?;
    let (on_demand, daemon_env) = hold_ssh(plan)?;
    let daemons = start_daemons(plan, &daemon_env, on_demand.is_some());
    let (user_pid, reader) = start_user_command(plan)?;
    let mut run = Supervision {
        plan,
        pid1,
        user_pid,
        daemons,
        on_demand,
        status: None,
        stop_deadline: None,
        cleanup: None,
    };
    while run.step(signals)? {}
    let ended = run.status.unwrap_or(Ended::Exited(0));
    let detector = reader.join();
    info!(code = ended.code(), "user command ended");
    let cause = match detector {
        Ok(detector) if ended.code() != 0 => detector.cause(ended.code(), ended.signal_name()),
        _ => None,
    };
    // The shell names the script (main.sh) before its errors; the user wrote a command.
    let script = plan.args.first().map(|s| s.to_string_lossy().into_owned());
    let cause = cause.map(|mut cause| {
        cause.line =
            pai_contract::failure::in_users_words(&cause.line, script.as_deref().unwrap_or(""));
        cause
    });
    Ok(Outcome { ended, cause })
}

/// Holds the ssh port before anything starts (nobody takes it in between), and the
/// environment the daemon scripts run with.
fn hold_ssh(plan: &Plan) -> Result<(Option<ssh::OnDemand>, Arc<Environment>), SuperviseError> {
    let environment = |vars: &[(OsString, OsString)]| {
        Environment::new(vars.iter().map(|(k, v)| (k, v))).map_err(|source| SuperviseError::Spawn {
            program: "the daemon scripts".into(),
            source,
        })
    };
    let mut on_demand_env = plan.daemon_env.clone();
    on_demand_env.push((ssh::ON_DEMAND_VAR.into(), "1".into()));
    let on_demand_env = Arc::new(environment(&on_demand_env)?);
    let on_demand = plan.ssh.clone().map(|sshd| {
        let port = sshd.port;
        let session = sshd.session.clone();
        let setup = sshd.setup.clone().map(|script| ssh::Setup {
            script,
            env: on_demand_env.clone(),
            log_dir: plan.log_dir.clone(),
            log_cap: plan.log_cap,
        });
        ssh::OnDemand::listen(sshd, setup).map_err(|e| (port, session, e))
    });
    match on_demand {
        None => Ok((None, Arc::new(environment(&plan.daemon_env)?))),
        Some(Ok(on_demand)) => Ok((Some(on_demand), on_demand_env)),
        // Taken by someone else: the task goes elsewhere (a conflict, retried), rather
        // than serve ssh on a port another process answers.
        Some(Err((port, _, e))) if e.kind() == std::io::ErrorKind::AddrInUse => {
            Err(SuperviseError::PortTaken { port })
        }
        Some(Err((port, session, e))) => {
            warn!(port, error = %e, "cannot hold the ssh port; the daemon scripts start sshd themselves");
            // Their sshd's sessions read it: now, not at the first connection.
            session.write();
            Ok((None, Arc::new(environment(&plan.daemon_env)?)))
        }
    }
}

/// Starts the `init/` daemon scripts (sshd's setup waits for the first connection when
/// the port is held); one that cannot start is left out.
fn start_daemons(plan: &Plan, env: &Environment, ssh_on_demand: bool) -> HashMap<Pid, String> {
    let mut daemons = HashMap::new();
    for (name, script) in &plan.daemons {
        if ssh_on_demand && name == ssh::SETUP_SCRIPT {
            // Run at the first ssh connection instead.
            continue;
        }
        match start_script(name, script, env, &plan.log_dir, plan.log_cap) {
            Ok(pid) => {
                info!(daemon = %name, %pid, "started");
                daemons.insert(pid, name.clone());
            }
            Err(e) => warn!(daemon = %name, error = %e, "cannot start; the job goes on without it"),
        }
    }
    daemons
}

/// Starts the user command with its output read in order into the user log.
fn start_user_command(
    plan: &Plan,
) -> Result<
    (
        Pid,
        std::thread::JoinHandle<pai_contract::failure::Detector>,
    ),
    SuperviseError,
> {
    let user_log_path = plan.log_dir.join(crate::logs::USER_LOG);
    let user_log = match CappedLog::create(&user_log_path, plan.log_cap) {
        Ok(log) => Some(Arc::new(Mutex::new(log))),
        Err(e) => {
            warn!(path = %user_log_path.display(), error = %e, "cannot create the user log; output goes to the container log only");
            None
        }
    };
    let spawn_error = |source| SuperviseError::Spawn {
        program: plan.program.display().to_string(),
        source,
    };
    let env = Environment::new(plan.env.iter().map(|(k, v)| (k, v))).map_err(spawn_error)?;
    let (writers, read_ends) = output::pipes().map_err(spawn_error)?;
    let reader = output::start(
        read_ends,
        output::Sinks {
            log: user_log,
            budget: EchoBudget::for_stdout(plan.log_cap, plan.log_rotation),
            detector: pai_contract::failure::Detector::from_var(plan.failure_patterns.as_deref()),
        },
    );
    let args: Vec<&OsStr> = plan.args.iter().map(OsString::as_os_str).collect();
    let user_pid = spawn::spawn(
        &plan.program,
        &args,
        &env,
        Streams {
            stdin: Stream::Inherit,
            stdout: Stream::To(writers.stdout),
            stderr: Stream::To(writers.stderr),
        },
    )
    .map_err(spawn_error)?;
    info!(pid = %user_pid, "user command started");
    Ok((user_pid, reader))
}

/// The supervisor's loop: what runs, what ended, and the deadlines of a stop.
struct Supervision<'a> {
    plan: &'a Plan,
    pid1: bool,
    user_pid: Pid,
    daemons: HashMap<Pid, String>,
    on_demand: Option<ssh::OnDemand>,
    /// The user command's status, once it ended.
    status: Option<Ended>,
    /// After a forwarded TERM or INT: when to KILL the user command's group.
    stop_deadline: Option<Instant>,
    /// After the user command ended: when to KILL what is left, and whether we did.
    cleanup: Option<(Instant, bool)>,
}

impl Supervision<'_> {
    /// Reaps, acts on the deadlines, then waits for signals; `false` once nothing runs
    /// any more and everything that ended was told.
    fn step(&mut self, signals: &Signals) -> Result<bool, SuperviseError> {
        let reaped = reap();
        self.note(reaped.ended);
        let now = Instant::now();
        if self.status.is_some() {
            if !reaped.children_left {
                return Ok(false);
            }
            match self.cleanup {
                None => {
                    signal_rest(Signal::SIGTERM, self.pid1);
                    self.cleanup = Some((now + self.plan.grace, false));
                }
                Some((deadline, false)) if now >= deadline => {
                    warn!("processes left after the grace period; killing them");
                    signal_rest(Signal::SIGKILL, self.pid1);
                    self.cleanup = Some((deadline, true));
                }
                Some(_) => {}
            }
        } else if let Some(deadline) = self.stop_deadline
            && now >= deadline
        {
            warn!(
                grace_s = self.plan.grace.as_secs(),
                "the user command outlived the grace period; killing it"
            );
            signal_group(self.user_pid, Signal::SIGKILL);
            self.stop_deadline = None;
        }
        let deadline = match (self.status, self.cleanup) {
            (Some(_), Some((deadline, false))) => Some(deadline),
            (Some(_), _) => None,
            (None, _) => self.stop_deadline,
        };
        // With everything killed, SIGCHLD is the only thing left to wait for.
        let timeout = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        for signal in signals.wait(timeout)? {
            self.forward(signal);
        }
        Ok(true)
    }

    /// Notes what ended: the user command's status, a daemon's end. Once the clean-up's
    /// TERM went out, a daemon's end may be ours.
    fn note(&mut self, ended: Vec<(Pid, Ended)>) {
        let cleaning_up = self.cleanup.is_some();
        for (pid, ended) in ended {
            if let Some(on_demand) = &self.on_demand {
                on_demand.reaped(pid.as_raw().unsigned_abs(), cleaning_up);
            }
            if pid == self.user_pid {
                // Told once its output is all read, after it.
                self.status = Some(ended);
            } else if let Some(name) = self.daemons.remove(&pid) {
                if ended.code() == 0 {
                    info!(daemon = %name, "daemon script finished");
                } else if cleaning_up {
                    // Ended by the clean-up after the user command: as it should.
                    info!(daemon = %name, code = ended.code(), "daemon stopped with the task");
                } else {
                    warn!(daemon = %name, code = ended.code(), "daemon ended; the job goes on");
                }
            }
        }
    }

    /// Hands `signal` to the user command's group while it runs.
    fn forward(&mut self, signal: Signal) {
        if !forwarded(signal) {
            return;
        }
        // A TERM while the grace period of an earlier one runs adds nothing: the user
        // command has it, and KILL follows at the deadline. The kernel sends the
        // parent-death signal again for every thread of a dying parent the task is
        // handed to in turn, so one stop can arrive as several TERMs; forwarded each,
        // they would run the user command's TERM trap again.
        if signal == Signal::SIGTERM && self.stop_deadline.is_some() {
            info!("TERM again within the grace period; not forwarded twice");
            return;
        }
        if self.status.is_none() {
            info!(%signal, "forwarding to the user command");
            signal_group(self.user_pid, signal);
            if matches!(signal, Signal::SIGTERM | Signal::SIGINT) && self.stop_deadline.is_none() {
                self.stop_deadline = Some(Instant::now() + self.plan.grace);
            }
        }
    }
}
