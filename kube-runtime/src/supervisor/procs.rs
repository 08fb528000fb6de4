//! Processes: reaping, finding what is left, and ending it.

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getpgid, getpid};

use crate::procfs;

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    Exited(i32),
    Signaled(Signal),
}

impl Ended {
    /// The shell's convention: the exit code, or 128 + N for signal N.
    pub fn code(self) -> i32 {
        match self {
            Ended::Exited(code) => code,
            Ended::Signaled(signal) => 128 + signal as i32,
        }
    }

    /// The signal that ended it, by name (`SIGKILL`).
    pub fn signal_name(self) -> Option<&'static str> {
        match self {
            Ended::Exited(_) => None,
            Ended::Signaled(signal) => Some(signal.as_str()),
        }
    }
}

/// What one round of reaping found.
#[derive(Debug, Default)]
pub struct Reaped {
    /// The children that had ended, with how.
    pub ended: Vec<(Pid, Ended)>,
    /// Whether any child (reparented orphans included) still lives: the kernel says so
    /// without a look through `/proc`, whose cost grows with every process of the host.
    /// A thousand tasks' supervisors on one host each reading every process's stat once
    /// their command ended (2,000–3,000 processes while a job starts) was quadratic: it
    /// doubled a 1,000-task job's start on the embedded default.
    pub children_left: bool,
}

/// Reaps every child that has ended, without blocking.
pub fn reap() -> Reaped {
    let mut reaped = Reaped::default();
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) => reaped.ended.push((pid, Ended::Exited(code))),
            Ok(WaitStatus::Signaled(pid, signal, _)) => {
                reaped.ended.push((pid, Ended::Signaled(signal)))
            }
            Ok(WaitStatus::StillAlive) => {
                reaped.children_left = true;
                return reaped;
            }
            Err(Errno::ECHILD) => return reaped,
            Ok(_) | Err(Errno::EINTR) => continue,
            Err(_) => {
                // Unexpected: ask /proc instead.
                reaped.children_left = !children().is_empty();
                return reaped;
            }
        }
    }
}

/// Our living children, from /proc (reparented orphans included; zombies are reaped,
/// not killed). Reads every process's stat: only when `reap` says some child lives.
fn children() -> Vec<Pid> {
    let me = getpid().as_raw();
    procfs::pids()
        .into_iter()
        .filter(|&pid| procfs::stat(pid).is_some_and(|s| !s.is_zombie() && s.ppid == me))
        .map(Pid::from_raw)
        .collect()
}

/// Sends `signal` to every process we are responsible for. As PID 1 that is every other
/// process of the namespace; otherwise each child and its process group.
pub fn signal_rest(signal: Signal, pid1: bool) {
    if pid1 {
        let _ = kill(Pid::from_raw(-1), signal);
        return;
    }
    let own_group = getpgid(None).ok();
    for child in children() {
        if let Ok(group) = getpgid(Some(child))
            && Some(group) != own_group
        {
            let _ = killpg(group, signal);
        }
        let _ = kill(child, signal);
    }
}

/// Sends `signal` to a process group, ignoring one that is already gone.
pub fn signal_group(group: Pid, signal: Signal) {
    match killpg(group, signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => tracing::warn!(%group, %signal, error = %e, "cannot signal the process group"),
    }
}
