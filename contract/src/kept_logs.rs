//! A task's log kept after its pod is gone. FrameworkController deletes a task's pod as
//! soon as its attempt completes, and the kubelet's log goes with it. So the server keeps
//! the end of each container's log: it watches the job's pods, reads a container's log
//! through the API as the container terminates (its pod is still there), and writes what
//! it read into **one ConfigMap per job** ([`config_map`]), owned by the job's Framework,
//! under a key per task, attempt and container ([`key`]).
//!
//! What this costs does not grow with the job: one object per job, at most
//! `keptLogBytesPerJob` ([`JOB_BYTES`] by default, one ConfigMap's worth at most), split
//! evenly among its tasks ([`Share`]); each task's newest attempt always fits, its earlier
//! ones as room allows. The server writes each job's ConfigMap at most once a second
//! whatever the number of tasks that end, so a 1,000-task job that ends at once costs a
//! few writes, not a thousand.
//!
//! Nothing waits for anyone: the pod carries no finalizer, the job's pods hold no grant on
//! kept logs and write none, and a server that is stopped, crashed or removed holds
//! nothing up. What a server that is not running misses: the logs of the containers that
//! terminated and whose pods went while none ran. A pod that went before its log could be
//! read leaves what the kubelet put into its container's termination message (the last
//! lines of a failed container), which is kept instead and said so.

/// The finalizer the task pods of earlier versions carried while the server kept their
/// logs. No pod gets it now; a server takes it off any pod that still has it.
pub const LEGACY_FINALIZER: &str = "rest-lite.openpai.io/keep-log";

/// How much of a task attempt's main container log is kept at most by default (the last
/// bytes; `keptLogBytes`).
pub const DEFAULT_BYTES: u64 = 256 * 1024;

/// How much of its init container's log (the runtime's `entry`) is kept at most.
pub const INIT_BYTES: u64 = 32 * 1024;

/// What a ConfigMap may hold (the API server's limit), less room for its keys and
/// metadata.
pub const MAP_BYTES: u64 = 1024 * 1024 - 16 * 1024;

/// What one job keeps at most by default, all its tasks together (`keptLogBytesPerJob`):
/// one ConfigMap's worth, the most it may be.
pub const JOB_BYTES: u64 = MAP_BYTES;

/// Which of a task attempt's two logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Part {
    /// The init container's (`entry`: the runtime's own lines).
    Init,
    /// The main container's: the user command's output and the runtime's lines around it.
    Main,
}

impl Part {
    fn word(self) -> &'static str {
        match self {
            Part::Init => "init",
            Part::Main => "main",
        }
    }
}

/// How many bytes of each part a task attempt keeps in a job of `tasks` tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Share {
    /// Of the main container's log.
    pub main: u64,
    /// Of the init container's log.
    pub init: u64,
}

/// What a task's entries take in the job's ConfigMap beside its logs' bytes: their keys,
/// and a note where one was lost ([`Lost`]).
pub const TASK_OVERHEAD: u64 = 192;

impl Share {
    /// Each task's even part of `job_bytes` (`keptLogBytesPerJob`), less its entries'
    /// [`TASK_OVERHEAD`]: an eighth of it (at most [`INIT_BYTES`]) for the init
    /// container's log, the rest (at most `task_bytes`, `keptLogBytes`) for the main
    /// container's. A job so large that its tasks' keys alone would pass the bound keeps
    /// nothing.
    pub fn of(job_bytes: u64, task_bytes: u64, tasks: usize) -> Self {
        let each = (job_bytes / u64::try_from(tasks.max(1)).unwrap_or(u64::MAX))
            .saturating_sub(TASK_OVERHEAD);
        let init = INIT_BYTES.min(each / 8);
        Self {
            main: task_bytes.min(each - init),
            init,
        }
    }

    /// The bytes kept of `part`.
    pub fn of_part(self, part: Part) -> u64 {
        match part {
            Part::Init => self.init,
            Part::Main => self.main,
        }
    }
}

/// The ConfigMap that keeps the logs of every task of Framework `framework`.
pub fn config_map(framework: &str) -> String {
    format!("{framework}-logs")
}

/// The key, in the job's ConfigMap's `binaryData`, of the log of `part` of the task whose
/// pods are named `pod` (`<framework>-<role>-<index>`) in the Framework's attempt
/// `attempt`: `<role>-<index>.<attempt>.<init|main>`.
pub fn key(pod: &str, attempt: i32, part: Part) -> String {
    format!("{}.{attempt}.{}", task_of(pod), part.word())
}

/// Why a kept log is not its log's end, as the job's ConfigMap notes it (in `data`, under
/// [`lost_key`]): short, since every task of a large job may have one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lost {
    /// The pod went before its log could be read: its termination message is kept.
    Message,
    /// The pod went before its log could be read, and left no termination message.
    Nothing,
    /// The read from the kubelet broke off: what it gave is kept.
    Cut,
}

impl Lost {
    /// The note's text in the ConfigMap.
    pub fn code(self) -> &'static str {
        match self {
            Lost::Message => "message",
            Lost::Nothing => "nothing",
            Lost::Cut => "cut",
        }
    }

    /// The note whose text is `code`.
    pub fn from_code(code: &str) -> Option<Self> {
        [Lost::Message, Lost::Nothing, Lost::Cut]
            .into_iter()
            .find(|l| l.code() == code)
    }

    /// What a reader of the log is told.
    pub fn said(self) -> &'static str {
        match self {
            Lost::Message => {
                "its pod was gone before the server could read its log: these are the last lines the kubelet kept of it"
            }
            Lost::Nothing => {
                "its pod was gone before the server could read its log, and it left no termination message"
            }
            Lost::Cut => {
                "the server's read of its log from the kubelet broke off: this is what it gave"
            }
        }
    }
}

/// The key, in the job's ConfigMap's `data`, of why the main container's log of that
/// attempt is not whole ([`Lost`]).
pub fn lost_key(pod: &str, attempt: i32) -> String {
    format!("{}.{attempt}.lost", task_of(pod))
}

/// The task, attempt and part a key of [`key`] (or [`lost_key`], part `None`) names.
pub fn parse_key(key: &str) -> Option<(&str, i32, Option<Part>)> {
    let (rest, part) = key.rsplit_once('.')?;
    let part = match part {
        "init" => Some(Part::Init),
        "main" => Some(Part::Main),
        "lost" => None,
        _ => return None,
    };
    let (task, attempt) = rest.rsplit_once('.')?;
    Some((task, attempt.parse().ok()?, part))
}

/// A pod's task within its job: the pod's name without its Framework's (`<role>-<index>`).
pub fn task_of(pod: &str) -> &str {
    pod.split_once('-').map_or(pod, |(_, task)| task)
}

/// The pod of task `task` (`<role>-<index>`) of Framework `framework`.
pub fn pod_of(framework: &str, task: &str) -> String {
    format!("{framework}-{task}")
}

/// The ConfigMap in which earlier versions kept the logs of the task whose pods are named
/// `pod`, one per task (`<framework>-logs-<role>-<index>`): read where a finished job of
/// theirs still has one.
pub fn legacy_config_map(pod: &str) -> String {
    match pod.split_once('-') {
        Some((framework, task)) => format!("{framework}-logs-{task}"),
        None => format!("{pod}-logs"),
    }
}

/// The key of attempt `attempt`'s `part` in a ConfigMap of [`legacy_config_map`].
pub fn legacy_key(attempt: i32, part: Part) -> String {
    format!("{}.{attempt}.log", part.word())
}

/// The name the job history keeps task `pod`'s attempt `attempt`'s log under
/// (`<framework>-log-<attempt>-<role>-<index>`).
pub fn archive_key(pod: &str, attempt: i32) -> String {
    match pod.split_once('-') {
        Some((framework, task)) => format!("{framework}-log-{attempt}-{task}"),
        None => format!("{pod}-log-{attempt}"),
    }
}

/// The Framework a task pod belongs to (its name's first part: a Framework's name holds
/// no `-`).
pub fn framework_of(pod: &str) -> &str {
    pod.split('-').next().unwrap_or(pod)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let fw = "5d41402abc4b2a76b9719d911017c592";
        let pod = crate::framework::pod_name(fw, "worker", 3);
        assert_eq!(config_map(fw), format!("{fw}-logs"));
        assert_eq!(framework_of(&pod), fw);
        assert_eq!(task_of(&pod), "worker-3");
        assert_eq!(pod_of(fw, "worker-3"), pod);
        assert_eq!(key(&pod, 2, Part::Main), "worker-3.2.main");
        assert_eq!(
            parse_key(&key(&pod, 12, Part::Init)),
            Some(("worker-3", 12, Some(Part::Init)))
        );
        assert_eq!(parse_key(&lost_key(&pod, 0)), Some(("worker-3", 0, None)));
        assert_eq!(parse_key("worker-3.x.main"), None);
        assert_eq!(parse_key("other"), None);
        assert_eq!(archive_key(&pod, 2), format!("{fw}-log-2-worker-3"));
        assert_eq!(legacy_config_map(&pod), format!("{fw}-logs-worker-3"));
        assert_eq!(legacy_key(1, Part::Main), "main.1.log");
    }

    #[test]
    fn a_jobs_share_is_even_and_bounded_whatever_its_size() {
        // Few tasks: each keeps what a task keeps at most.
        assert_eq!(
            Share::of(JOB_BYTES, DEFAULT_BYTES, 2),
            Share {
                main: DEFAULT_BYTES,
                init: INIT_BYTES
            }
        );
        // Many: the job's bound, evenly.
        for tasks in [4, 100, 1000, 5000] {
            let share = Share::of(JOB_BYTES, DEFAULT_BYTES, tasks);
            assert!(
                (share.main + share.init + TASK_OVERHEAD) * tasks as u64 <= JOB_BYTES,
                "{tasks}"
            );
            assert!(share.init <= share.main, "{tasks}: {share:?}");
        }
        assert_eq!(Share::of(0, DEFAULT_BYTES, 3), Share { main: 0, init: 0 });
        assert_eq!(
            Share::of(JOB_BYTES, DEFAULT_BYTES, 100_000),
            Share { main: 0, init: 0 }
        );
        for lost in [Lost::Message, Lost::Nothing, Lost::Cut] {
            assert_eq!(Lost::from_code(lost.code()), Some(lost));
            assert!(lost.code().len() + 24 < TASK_OVERHEAD as usize);
        }
    }
}
