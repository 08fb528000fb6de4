//! A task's log kept after its pod is gone. FrameworkController deletes a task's pod as
//! soon as its attempt completes, and the kubelet's log goes with it; every pod carries
//! [`FINALIZER`], so the deletion waits until the server copied the log's end into a
//! ConfigMap of its own ([`config_map`]), owned by the job's Framework, and took the
//! finalizer away.

/// The finalizer every task pod carries while its log is not kept yet.
pub const FINALIZER: &str = "rest-lite.openpai.io/keep-log";

/// How much of a task's main container log is kept by default (the last bytes).
pub const DEFAULT_BYTES: u64 = 256 * 1024;

/// How much of its init container's log (the runtime's `entry`) is kept.
pub const INIT_BYTES: u64 = 32 * 1024;

/// The kept main container log's key in the ConfigMap's `binaryData`.
pub const MAIN_KEY: &str = "main.log";
/// The kept init container log's key.
pub const INIT_KEY: &str = "init.log";
/// Set (to the reason) when the log could not be read before the pod went.
pub const LOST_KEY: &str = "lost";

/// The ConfigMap keeping the log of pod `pod` (`<framework>-<role>-<index>`) in attempt
/// `attempt`: `<framework>-log-<attempt>-<role>-<index>`.
pub fn config_map(pod: &str, attempt: i32) -> String {
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
        let pod = crate::framework::pod_name("5d41402abc4b2a76b9719d911017c592", "worker", 3);
        assert_eq!(
            config_map(&pod, 2),
            "5d41402abc4b2a76b9719d911017c592-log-2-worker-3"
        );
        assert_eq!(framework_of(&pod), "5d41402abc4b2a76b9719d911017c592");
    }
}
