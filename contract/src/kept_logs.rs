//! A task's log kept after its pod is gone. FrameworkController deletes a task's pod as
//! soon as its attempt completes, and the kubelet's log goes with it. So the runtime keeps
//! its own: `entry` (the init container) and `run` (PID 1 of the main container) each
//! write the end of their task attempt's output, as they end, into one ConfigMap of the
//! task ([`config_map`]), owned by the job's Framework, under keys of the attempt
//! ([`main_key`], [`init_key`]).
//!
//! Nothing waits for anyone: the pod carries no finalizer, and a server that is stopped,
//! crashed or removed holds nothing up. The server makes each task's ConfigMap (empty) as
//! the task's first pod appears; the job's Role lets the job's pods `get` and `update`
//! those ConfigMaps by name and nothing more ([`crate::access`]).
//!
//! One ConfigMap holds at most 1 MiB: a task keeps the last attempts that fit, at most
//! `keptAttempts`, the newest always whole.

/// The finalizer the task pods of earlier versions carried while the server kept their
/// logs. No pod gets it now; a server takes it off any pod that still has it.
pub const LEGACY_FINALIZER: &str = "rest-lite.openpai.io/keep-log";

/// How much of a task's main container log is kept by default (the last bytes).
pub const DEFAULT_BYTES: u64 = 256 * 1024;

/// How much of its init container's log (the runtime's `entry`) is kept.
pub const INIT_BYTES: u64 = 32 * 1024;

/// What a ConfigMap may hold (the API server's limit), less room for its keys and
/// metadata.
pub const MAP_BYTES: u64 = 1024 * 1024 - 16 * 1024;

/// The kept main container log of attempt `attempt` (the Framework's attempt) in the
/// task's ConfigMap's `binaryData`.
pub fn main_key(attempt: i32) -> String {
    format!("main.{attempt}.log")
}

/// The kept init container log of attempt `attempt`.
pub fn init_key(attempt: i32) -> String {
    format!("init.{attempt}.log")
}

/// The attempt a key of the task's ConfigMap belongs to.
pub fn attempt_of_key(key: &str) -> Option<i32> {
    let rest = key
        .strip_prefix("main.")
        .or_else(|| key.strip_prefix("init."))?;
    rest.strip_suffix(".log")?.parse().ok()
}

/// The ConfigMap keeping the logs of the task whose pods are named `pod`
/// (`<framework>-<role>-<index>`): `<framework>-logs-<role>-<index>`, one for every
/// attempt of the task.
pub fn config_map(pod: &str) -> String {
    match pod.split_once('-') {
        Some((framework, task)) => format!("{framework}-logs-{task}"),
        None => format!("{pod}-logs"),
    }
}

/// The task pod whose logs ConfigMap `name` keeps (the inverse of [`config_map`]);
/// `None` for a name that is no kept-log ConfigMap's.
pub fn pod_of_config_map(name: &str) -> Option<String> {
    let (framework, rest) = name.split_once("-logs")?;
    match rest {
        "" => Some(framework.to_string()),
        _ => rest
            .strip_prefix('-')
            .filter(|task| !task.is_empty())
            .map(|task| format!("{framework}-{task}")),
    }
}

/// The name the job history keeps task `pod`'s attempt `attempt`'s log under
/// (`<framework>-log-<attempt>-<role>-<index>`: the ConfigMap of one attempt that earlier
/// versions kept).
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

/// The settings of the runtime's keeping, in both containers' environment (cluster only;
/// unset, nothing is kept).
pub mod env {
    /// The prefix of the names below.
    pub const PREFIX: &str = "PAI_RUNTIME_KEPT_";
    /// The last bytes of the main container's output kept for each attempt.
    pub const BYTES: &str = "PAI_RUNTIME_KEPT_LOG_BYTES";
    /// At most this many attempts of the task are kept.
    pub const ATTEMPTS: &str = "PAI_RUNTIME_KEPT_ATTEMPTS";
    /// The API server's address where the in-cluster one is not reachable (config
    /// `kubeApiserverAddress`; the init container's is `KUBE_APISERVER_ADDRESS`).
    pub const APISERVER: &str = "PAI_RUNTIME_KEPT_LOG_APISERVER";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let pod = crate::framework::pod_name("5d41402abc4b2a76b9719d911017c592", "worker", 3);
        assert_eq!(
            config_map(&pod),
            "5d41402abc4b2a76b9719d911017c592-logs-worker-3"
        );
        assert_eq!(framework_of(&pod), "5d41402abc4b2a76b9719d911017c592");
        assert_eq!(
            archive_key(&pod, 2),
            "5d41402abc4b2a76b9719d911017c592-log-2-worker-3"
        );
        assert_eq!(main_key(2), "main.2.log");
        assert_eq!(attempt_of_key(&main_key(12)), Some(12));
        assert_eq!(attempt_of_key(&init_key(0)), Some(0));
        assert_eq!(attempt_of_key("lost"), None);
        assert_eq!(pod_of_config_map(&config_map(&pod)), Some(pod.clone()));
        assert_eq!(pod_of_config_map("rest-lite-config"), None);
        assert_eq!(pod_of_config_map("abc-peers"), None);
    }
}
