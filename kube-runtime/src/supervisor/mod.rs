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

    let environment = |vars: &[(OsString, OsString)]| {
        Environment::new(vars.iter().map(|(k, v)| (k, v))).map_err(|source| SuperviseError::Spawn {
            program: "the daemon scripts".into(),
            source,
        })
    };
    let mut on_demand_env = plan.daemon_env.clone();
    on_demand_env.push((ssh::ON_DEMAND_VAR.into(), "1".into()));
    let on_demand_env = Arc::new(environment(&on_demand_env)?);
    // The ssh port is held before anything starts: nobody takes it in between.
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
    let on_demand = match on_demand {
        None => None,
        Some(Ok(on_demand)) => Some(on_demand),
        // Taken by someone else: the task goes elsewhere (a conflict, retried), rather
        // than serve ssh on a port another process answers.
        Some(Err((port, _, e))) if e.kind() == std::io::ErrorKind::AddrInUse => {
            return Err(SuperviseError::PortTaken { port });
        }
        Some(Err((port, session, e))) => {
            warn!(port, error = %e, "cannot hold the ssh port; the daemon scripts start sshd themselves");
            // Their sshd's sessions read it: now, not at the first connection.
            session.write();
            None
        }
    };
    let daemon_env = match on_demand {
        Some(_) => on_demand_env,
        None => Arc::new(environment(&plan.daemon_env)?),
    };
    let mut daemons: HashMap<Pid, String> = HashMap::new();
    for (name, script) in &plan.daemons {
        if on_demand.is_some() && name == ssh::SETUP_SCRIPT {
            // Run at the first ssh connection instead.
            continue;
        }
        match start_script(name, script, &daemon_env, &plan.log_dir, plan.log_cap) {
            Ok(pid) => {
                info!(daemon = %name, %pid, "started");
                daemons.insert(pid, name.clone());
            }
            Err(e) => warn!(daemon = %name, error = %e, "cannot start; the job goes on without it"),
        }
    }

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
            budget: EchoBudget::for_stdout(plan.log_cap),
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
    drop(env);
    info!(pid = %user_pid, "user command started");

    let mut status: Option<Ended> = None;
    // After a forwarded TERM or INT: when to KILL the user command's group.
    let mut stop_deadline: Option<Instant> = None;
    // After the user command ended: when to KILL what is left, and whether we did.
    let mut cleanup: Option<(Instant, bool)> = None;
    // Notes what ended: the user command's status, a daemon's end.
    // `cleaning_up`: the clean-up's TERM went out, so a daemon's end may be ours.
    let mut note = |ended: Vec<(Pid, Ended)>, status: &mut Option<Ended>, cleaning_up: bool| {
        for (pid, ended) in ended {
            if let Some(on_demand) = &on_demand {
                on_demand.reaped(pid.as_raw().unsigned_abs(), cleaning_up);
            }
            if pid == user_pid {
                // Told once its output is all read, after it.
                *status = Some(ended);
            } else if let Some(name) = daemons.remove(&pid) {
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
    };
    loop {
        let reaped = reap();
        note(reaped.ended, &mut status, cleanup.is_some());
        let now = Instant::now();
        if status.is_some() {
            if !reaped.children_left {
                // Nothing runs any more, and everything that ended was told.
                break;
            }
            match cleanup {
                None => {
                    signal_rest(Signal::SIGTERM, pid1);
                    cleanup = Some((now + plan.grace, false));
                }
                Some((deadline, false)) if now >= deadline => {
                    warn!("processes left after the grace period; killing them");
                    signal_rest(Signal::SIGKILL, pid1);
                    cleanup = Some((deadline, true));
                }
                Some(_) => {}
            }
        } else if let Some(deadline) = stop_deadline
            && now >= deadline
        {
            warn!(
                grace_s = plan.grace.as_secs(),
                "the user command outlived the grace period; killing it"
            );
            signal_group(user_pid, Signal::SIGKILL);
            stop_deadline = None;
        }

        let deadline = match (status, cleanup) {
            (Some(_), Some((deadline, false))) => Some(deadline),
            (Some(_), _) => None,
            (None, _) => stop_deadline,
        };
        // With everything killed, SIGCHLD is the only thing left to wait for.
        let timeout = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        for signal in signals.wait(timeout)? {
            if !forwarded(signal) {
                continue;
            }
            // A TERM while the grace period of an earlier one runs adds nothing: the
            // user command has it, and KILL follows at the deadline. The kernel sends
            // the parent-death signal again for every thread of a dying parent the
            // task is handed to in turn, so one stop can arrive as several TERMs;
            // forwarded each, they would run the user command's TERM trap again.
            if signal == Signal::SIGTERM && stop_deadline.is_some() {
                info!("TERM again within the grace period; not forwarded twice");
                continue;
            }
            if status.is_none() {
                info!(%signal, "forwarding to the user command");
                signal_group(user_pid, signal);
                if matches!(signal, Signal::SIGTERM | Signal::SIGINT) && stop_deadline.is_none() {
                    stop_deadline = Some(Instant::now() + plan.grace);
                }
            }
        }
    }
    let ended = status.unwrap_or(Ended::Exited(0));
    let detector = reader.join();
    info!(code = ended.code(), "user command ended");
    let cause = match detector {
        Ok(detector) if ended.code() != 0 => detector.cause(ended.code(), ended.signal_name()),
        _ => None,
    };
    Ok(Outcome { ended, cause })
}
