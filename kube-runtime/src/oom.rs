//! Whether the kernel's out-of-memory killer ended a process of this container: the
//! container's memory cgroup counts its kills (`oom_kill` in `memory.events` on cgroup v2,
//! in `memory.oom_control` on v1). A kubelet reports such an end as `OOMKilled`; the
//! runtime, PID 1 of the container, says the same in its termination message, so the
//! reason reaches the job's status wherever the task ran (a pod, or a container of the
//! embedded default, whose engine may not tell: Podman on cgroup v1 reports no OOM).

use std::path::Path;

/// The counter's files, cgroup v2's first, as a container sees its own cgroup.
const COUNTERS: &[&str] = &[
    "/sys/fs/cgroup/memory.events",
    "/sys/fs/cgroup/memory/memory.oom_control",
];
/// The limit's files, in the same order.
const LIMITS: &[&str] = &[
    "/sys/fs/cgroup/memory.max",
    "/sys/fs/cgroup/memory/memory.limit_in_bytes",
];

/// The container's count of OOM kills so far; `None` outside a container (the runtime
/// is not PID 1, and the cgroup files it would read are the machine's) or where the
/// kernel keeps no count.
pub fn kills() -> Option<u64> {
    if std::process::id() != 1 {
        return None;
    }
    COUNTERS.iter().find_map(|path| kills_in(Path::new(path)))
}

/// `oom_kill N` of one counter file.
fn kills_in(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(' ')?;
        (key == "oom_kill").then(|| value.trim().parse().ok())?
    })
}

/// The container's memory limit in bytes, where it has one.
fn limit() -> Option<u64> {
    LIMITS.iter().find_map(|path| {
        let value = std::fs::read_to_string(path)
            .ok()?
            .trim()
            .parse::<u64>()
            .ok()?;
        // cgroup v1 says "no limit" with a number near 2^63.
        (value < 1 << 62).then_some(value)
    })
}

/// The cause to report when the user command ended by SIGKILL and the container's count
/// of OOM kills rose since `before`.
pub fn cause(before: Option<u64>, killed: bool) -> Option<pai_contract::failure::Cause> {
    let before = before?;
    if !killed || kills()? <= before {
        return None;
    }
    let line = match limit() {
        Some(bytes) => format!(
            "{}: the container reached its memory limit ({} MiB) and the kernel killed the command",
            pai_contract::failure::OOM_KILLED_REASON,
            bytes / (1024 * 1024)
        ),
        None => format!(
            "{}: the kernel killed the command for lack of memory",
            pai_contract::failure::OOM_KILLED_REASON
        ),
    };
    Some(pai_contract::failure::Cause {
        pattern: pai_contract::failure::OOM_KILLED.to_string(),
        line,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_cgroup_versions_counts_are_read() {
        let dir = pai_test_support::scratch("oom-counter");
        let v2 = dir.path().join("memory.events");
        std::fs::write(&v2, "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\n").expect("write");
        assert_eq!(kills_in(&v2), Some(2));
        let v1 = dir.path().join("memory.oom_control");
        std::fs::write(&v1, "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n").expect("write");
        assert_eq!(kills_in(&v1), Some(5));
        let older = dir.path().join("old");
        std::fs::write(&older, "oom_kill_disable 0\nunder_oom 0\n").expect("write");
        assert_eq!(kills_in(&older), None, "a kernel without the count");
    }

    #[test]
    fn no_cause_without_a_kill_or_a_count() {
        assert_eq!(cause(None, true), None);
        assert_eq!(cause(Some(0), false), None);
    }
}
