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

    /// Whether a record read back after a restart may name the task of pod `pod_uid`
    /// that a previous server left: the recorded process is still the same one (pid
    /// and start time), leads its own process group (each task is started so), was
    /// started with that pod's `FC_POD_UID` (a random UID per task attempt, in the
    /// environment the server gave it), and is neither pid 1, this server, nor in this
    /// server's process group. A record is as writable as anything of the server's
    /// user; with these checks, what a task writes there never makes the server signal
    /// a process that is not one of its tasks.
    pub fn leftover_task(&self, pod_uid: &str) -> Result<(), &'static str> {
        if !may_signal(self.pid) {
            return Err("names pid 1, this server or its process group");
        }
        let stat = procfs::stat(self.pid).ok_or("no such process")?;
        if stat.start != self.start || stat.is_zombie() {
            return Err("that process has ended (its pid may be reused)");
        }
        if stat.pgrp != self.pid {
            return Err("that process does not lead its own process group, as a task does");
        }
        match started_as(self.pid, pod_uid) {
            None => Err("that process's environment cannot be read"),
            Some(false) => Err("that process was not started as this task (another FC_POD_UID)"),
            Some(true) => Ok(()),
        }
    }

    /// What is left of the task of pod `pod_uid` whose recorded process (the leader of
    /// its process group) has ended: the processes still in that group that were
    /// started as that task (its `FC_POD_UID`), such as a script its init step ran. A
    /// group's id is not given to a new process while any member is left, and the UID
    /// is random per task attempt: nothing else is named.
    pub fn orphans(&self, pod_uid: &str) -> Vec<ProcessId> {
        if pod_uid.is_empty() || self.pid <= 1 {
            return Vec::new();
        }
        procfs::pids()
            .into_iter()
            .filter_map(|pid| {
                let stat = procfs::stat(pid)?;
                (stat.pgrp == self.pid && !stat.is_zombie()).then_some(Self {
                    pid,
                    start: stat.start,
                })
            })
            .filter(|process| {
                may_signal(process.pid) && started_as(process.pid, pod_uid) == Some(true)
            })
            .collect()
    }
}

/// Whether process `pid` was started as the task of pod `pod_uid` (its environment
/// holds that `FC_POD_UID`); `None` when its environment cannot be read.
fn started_as(pid: i32, pod_uid: &str) -> Option<bool> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let wanted = format!("{}={pod_uid}", pai_contract::env::fc::POD_UID);
    Some(!pod_uid.is_empty() && environ.split(|b| *b == 0).any(|v| v == wanted.as_bytes()))
}

/// Never pid 0 or 1 (or a group through a negative pid), this server, or a member of
/// its process group.
fn may_signal(pid: i32) -> bool {
    pid > 1
        && pid != std::process::id() as i32
        && procfs::stat(pid).is_none_or(|s| s.pgrp != nix::unistd::getpgrp().as_raw())
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

/// Sends `signal` to the process group `leader` leads (never to pid 1's, this
/// server's or through a pid ≤ 1).
pub fn signal_group(leader: i32, signal: Signal) {
    if leader > 1 && leader != nix::unistd::getpgrp().as_raw() {
        let _ = kill(Pid::from_raw(-leader), signal);
    }
}

/// Kills `root` and everything below it: the tree is frozen (SIGSTOP) until no new
/// process appears, then killed, so nothing forks away in between.
pub fn kill_tree(root: ProcessId) {
    if !root.alive() || !may_signal(root.pid) {
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
        for pid in new.iter().filter(|p| may_signal(**p)) {
            let _ = kill(Pid::from_raw(*pid), Signal::SIGSTOP);
        }
        frozen.extend(new);
    }
    // Whatever left the process group of the root is in `frozen`; the group catches
    // what was started between the last look and the stop.
    signal_group(root.pid, Signal::SIGKILL);
    for pid in frozen.into_iter().filter(|p| may_signal(*p)) {
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

/// Threads that start the tasks' processes, off the async workers: a fork and the
/// wait for its `execve` block the calling thread for milliseconds, and a big job starts
/// thousands of processes, which on the workers would stall every request meanwhile.
///
/// The parent-death signal follows the *thread* that forked, so these threads live as
/// long as any handle to them does (the server's), never idle-exiting like a blocking
/// pool's.
#[derive(Clone)]
pub struct Spawner {
    jobs: std::sync::mpsc::Sender<Box<dyn FnOnce() + Send>>,
}

impl std::fmt::Debug for Spawner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Spawner")
    }
}

impl Spawner {
    /// `threads` spawning threads (at least one), in the current Tokio runtime (the
    /// processes' exit is awaited there).
    pub fn start(threads: usize) -> std::io::Result<Self> {
        let (jobs, queue) = std::sync::mpsc::channel::<Box<dyn FnOnce() + Send>>();
        let queue = std::sync::Arc::new(std::sync::Mutex::new(queue));
        let runtime = tokio::runtime::Handle::current();
        for i in 0..threads.max(1) {
            let queue = queue.clone();
            let runtime = runtime.clone();
            std::thread::Builder::new()
                .name(format!("task-spawner-{i}"))
                .spawn(move || {
                    let _context = runtime.enter();
                    loop {
                        let job = {
                            let queue = queue.lock().unwrap_or_else(|e| e.into_inner());
                            queue.recv()
                        };
                        match job {
                            Ok(job) => job(),
                            Err(_) => return,
                        }
                    }
                })?;
        }
        Ok(Self { jobs })
    }

    /// Runs `work` on a spawning thread; its result comes back here. `None`: the
    /// spawning threads are gone (the server is ending).
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.jobs
            .send(Box::new(move || {
                let _ = tx.send(work());
            }))
            .ok()?;
        rx.await.ok()
    }
}

/// Starts the process in its own process group; it gets SIGTERM when the server
/// dies (the runtime arms that itself, told the server's pid by
/// [`PARENT_PID`](pai_contract::env::runtime::PARENT_PID); its supervisor then ends the
/// user command within its grace period).
///
/// Nothing runs between fork and exec, so the standard library starts it with
/// `posix_spawn` (a `vfork`): no copy of the server's page tables per task, which with a
/// fork serialised every start behind the server's memory map (about 6 ms each at 1,000
/// tasks). The parent-death signal follows the *thread* that started the process: call
/// this on a [`Spawner`]'s thread.
pub fn spawn(command: &mut tokio::process::Command) -> std::io::Result<tokio::process::Child> {
    command
        .process_group(0)
        .env(
            pai_contract::env::runtime::PARENT_PID,
            nix::unistd::getpid().to_string(),
        )
        .spawn()
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;

    use super::*;

    /// A shell that says "ready" and then waits on its stdin. The parent of an
    /// `execve` may run again before the kernel has filled in the new image's
    /// environment (`/proc/<pid>/environ` reads empty then), so the tests look only
    /// once the process has run its own code.
    fn sleeper(own_group: bool, pod_uid: &str) -> (std::process::Child, ProcessId) {
        use std::io::BufRead;
        let mut command = std::process::Command::new("sh");
        command
            .args(["-c", "echo ready; read -r _"])
            .env("FC_POD_UID", pod_uid)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped());
        if own_group {
            command.process_group(0);
        }
        let mut child = command.spawn().expect("sh");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut line)
            .expect("read");
        assert_eq!(line, "ready\n");
        let id = ProcessId::of(child.id() as i32).expect("in /proc");
        (child, id)
    }

    fn end(mut child: std::process::Child) {
        child.kill().expect("kill");
        child.wait().expect("wait");
    }

    /// A task's leader that ended and left a process in its group: that process, and
    /// only for the pod UID it was started with.
    #[test]
    fn the_processes_a_gone_leader_left_in_its_group_are_its_orphans() {
        use std::io::BufRead;
        let _forking = crate::FORKING.lock().unwrap_or_else(|e| e.into_inner());
        // The process left says its pid from its own code (its environment is in
        // `/proc` by then, see `sleeper`), then waits on the test's pipe.
        let mut leader = std::process::Command::new("sh")
            // (A background job's standard input is /dev/null: the pipe goes as fd 3.)
            .args(["-c", "exec 3<&0; sh -c 'echo $$; read -r _ <&3' &"])
            .env("FC_POD_UID", "pod-orphans")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("sh");
        let _held_open = leader.stdin.take();
        let mut line = String::new();
        std::io::BufReader::new(leader.stdout.take().expect("piped"))
            .read_line(&mut line)
            .expect("read");
        let left: i32 = line.trim().parse().expect("a pid");
        let group = leader.id() as i32;
        assert!(leader.wait().expect("wait").success());
        let gone = ProcessId {
            pid: group,
            start: 0,
        };
        let orphans = gone.orphans("pod-orphans");
        let pids: Vec<i32> = orphans.iter().map(|p| p.pid).collect();
        let other = gone.orphans("another-pod");
        for orphan in &orphans {
            kill_tree(*orphan);
        }
        let _ = kill(Pid::from_raw(left), Signal::SIGKILL);
        assert_eq!(pids, vec![left]);
        assert!(other.is_empty(), "{other:?}");
    }

    #[test]
    fn only_a_group_leader_started_as_that_pod_is_believed() {
        let _forking = crate::FORKING.lock().unwrap_or_else(|e| e.into_inner());
        let (task, id) = sleeper(true, "pod-a");
        assert_eq!(id.leftover_task("pod-a"), Ok(()));
        assert!(id.leftover_task("pod-b").is_err(), "another pod's record");
        assert!(id.leftover_task("").is_err());
        let stale = ProcessId {
            start: id.start + 1,
            ..id
        };
        assert!(stale.leftover_task("pod-a").is_err(), "a reused pid");
        end(task);

        let (member, id) = sleeper(false, "pod-a");
        assert!(
            id.leftover_task("pod-a").is_err(),
            "not a group leader, and in this process's group"
        );
        end(member);
    }

    #[test]
    fn pid_1_and_this_process_are_never_believed() {
        let _forking = crate::FORKING.lock().unwrap_or_else(|e| e.into_inner());
        for pid in [1, std::process::id() as i32] {
            let id = ProcessId::of(pid).expect("in /proc");
            assert!(id.leftover_task("anything").is_err(), "pid {pid}");
        }
        assert!(!may_signal(0) && !may_signal(-1) && !may_signal(1));
        assert!(!may_signal(std::process::id() as i32));
    }
}
