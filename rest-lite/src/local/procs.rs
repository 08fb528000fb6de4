//! The processes of a local task: started in their own process group, ended with their
//! parent (the server), and killed as a whole tree when they outlive their grace period.
//! A process is named by its pid and its start time, so a pid reused after a restart is
//! never mistaken for a task.

use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use pai_kube_runtime::procfs;

/// A process as `/proc` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessId {
    pub pid: i32,
    /// Clock ticks after boot (field 22 of `/proc/<pid>/stat`).
    pub start: u64,
}

impl ProcessId {
    pub fn of(pid: i32) -> Option<Self> {
        procfs::stat(pid).map(|s| Self {
            pid,
            start: s.start,
        })
    }

    /// Still running (not a zombie), and still the same process.
    pub fn alive(&self) -> bool {
        procfs::stat(self.pid).is_some_and(|s| s.start == self.start && !s.is_zombie())
    }
}

impl std::fmt::Display for ProcessId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.pid, self.start)
    }
}

impl std::str::FromStr for ProcessId {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        let mut parts = s.split_whitespace();
        let pid = parts.next().and_then(|p| p.parse().ok()).ok_or(())?;
        let start = parts.next().and_then(|p| p.parse().ok()).ok_or(())?;
        Ok(Self { pid, start })
    }
}

/// Every descendant of `root`, from `/proc`.
fn descendants(root: i32) -> Vec<i32> {
    let parents: Vec<(i32, i32)> = procfs::pids()
        .into_iter()
        .filter_map(|pid| procfs::stat(pid).map(|s| (pid, s.ppid)))
        .collect();
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            parents
                .iter()
                .filter(|(_, ppid)| *ppid == parent)
                .map(|(pid, _)| *pid),
        );
        i += 1;
    }
    found.remove(0);
    found
}

/// Sends `signal` to the process group `leader` leads.
pub fn signal_group(leader: i32, signal: Signal) {
    let _ = kill(Pid::from_raw(-leader), signal);
}

/// Kills `root` and everything below it: the tree is frozen (SIGSTOP) until no new
/// process appears, then killed, so nothing forks away in between.
pub fn kill_tree(root: ProcessId) {
    if !root.alive() {
        return;
    }
    let mut frozen: Vec<i32> = vec![root.pid];
    let _ = kill(Pid::from_raw(root.pid), Signal::SIGSTOP);
    for _ in 0..16 {
        let now = descendants(root.pid);
        let new: Vec<i32> = now
            .iter()
            .copied()
            .filter(|p| !frozen.contains(p))
            .collect();
        if new.is_empty() {
            break;
        }
        for pid in &new {
            let _ = kill(Pid::from_raw(*pid), Signal::SIGSTOP);
        }
        frozen.extend(new);
    }
    // Whatever left the process group of the root is in `frozen`; the group catches
    // what was started between the last look and the stop.
    signal_group(root.pid, Signal::SIGKILL);
    for pid in frozen {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// Waits (polling `/proc`, at most `limit`) until `process` is gone; true when it is.
pub fn wait_gone(process: ProcessId, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while process.alive() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// Starts the process in its own process group; it gets SIGTERM when the server
/// dies (the runtime's supervisor then ends the user command within its grace period).
///
/// The parent-death signal follows the *thread* that forked: call this from a thread
/// that lives as long as the server (a runtime worker thread, never a blocking-pool
/// thread, which ends when idle).
pub fn spawn(command: &mut tokio::process::Command) -> std::io::Result<tokio::process::Child> {
    let server = nix::unistd::getpid();
    command.process_group(0);
    #[allow(unsafe_code)]
    // SAFETY: between fork and exec only async-signal-safe calls: prctl and getppid.
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Some(Signal::SIGTERM))?;
            if nix::unistd::getppid() != server {
                // The server died before the signal was armed.
                return Err(std::io::Error::other("the server is gone"));
            }
            Ok(())
        });
    }
    command.spawn()
}
