//! One CPU cgroup for every task of this machine, so that the scheduler shares the cores
//! between the server and its tasks as two groups rather than between a thousand
//! processes and one.
//!
//! Without it a 1,000-task job starting on two cores (each task's shell reading a few
//! thousand variables) is a thousand runnable processes beside the server's few threads,
//! and the completely fair scheduler gives each about the same slice: the server answered
//! `/healthz` after 0.4–0.7 s (p99) while they started. Raising the server's priority did
//! not help (a nice level weighs a thread, and a thousand of them outweigh it); a group
//! does, as a kubelet's pods sit in their own cgroup beside the node's daemons. The group
//! keeps the default weight, so while both want the CPU, the server gets half.
//!
//! The group does not slow the tasks' start. On a machine the start saturates, the
//! scheduler leaves no core idle while work waits: measured, the start and its floor (the
//! same commands without the platform) took longer than each other by exactly the CPU
//! they used more (their wall and CPU ratios agreed to 0.01). Eight times the group's
//! weight started the tasks no faster and starved the server (`/healthz` p99 210 ms).
//! The runtime joins the group itself, first thing (told its `cgroup.procs` in
//! `PAI_RUNTIME_CPU_GROUP`): a move by the server after the spawn raced with the
//! runtime's first fork on a busy machine, and a task's shell stayed outside.
//!
//! The group is `rest-lite-tasks` below the server's own CPU cgroup, shared by every
//! server started in that cgroup (their tasks together form one group), and left in
//! place when the server ends: an empty cgroup costs nothing, and removing it while a
//! container a restarted server will follow is in it would fail anyway.

use std::path::{Path, PathBuf};

/// The group's directory name below the server's own CPU cgroup.
pub const NAME: &str = "rest-lite-tasks";

/// The tasks' CPU cgroup.
#[derive(Debug)]
pub struct TaskGroup {
    /// Its `cgroup.procs`, where a process is moved in.
    procs: PathBuf,
    /// Whether a failure to move a process was logged already (once is enough).
    warned: std::sync::atomic::AtomicBool,
}

impl TaskGroup {
    /// The group below this process's own CPU cgroup, created if missing. The error says
    /// why tasks will compete with the server process by process instead.
    pub fn create() -> Result<Self, String> {
        let dir = group_dir(&read("/proc/self/cgroup")?, &read("/proc/self/mountinfo")?)?;
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("cannot create the cgroup {}: {e}", dir.display())),
        }
        let procs = dir.join("cgroup.procs");
        // Writable by this process: otherwise every task would fail to join, one by one.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&procs)
            .map_err(|e| format!("cannot write {}: {e}", procs.display()))?;
        Ok(Self {
            procs,
            warned: Default::default(),
        })
    }

    /// Its `cgroup.procs`, which a task's runtime is told to join
    /// ([`pai_contract::env::runtime::CPU_GROUP`]).
    pub fn procs(&self) -> &Path {
        &self.procs
    }

    /// The group's directory.
    pub fn dir(&self) -> &Path {
        self.procs.parent().unwrap_or(Path::new("/"))
    }

    /// Moves process `pid` into the group; what it starts afterwards is in it too. Called
    /// right after a task's process starts; a child it forked before would stay outside,
    /// so the runtime moves itself first thing as well (told the group's `cgroup.procs`
    /// in its environment), and this move is for the processes that are not the runtime
    /// (the engine's client in container mode).
    pub fn join(&self, pid: u32) {
        if let Err(e) = std::fs::write(&self.procs, pid.to_string()) {
            // A process that ended already is not there to move.
            if e.raw_os_error() != Some(nix::libc::ESRCH)
                && !self.warned.swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                tracing::warn!(
                    group = %self.dir().display(),
                    error = %e,
                    "cannot move a task into the tasks' CPU cgroup; such tasks share the CPU with the server process by process"
                );
            }
        }
    }
}

fn read(path: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))
}

/// The tasks' group directory from `/proc/self/cgroup` and `/proc/self/mountinfo`: below
/// the cgroup v1 `cpu` hierarchy's own group, or with cgroup v2 only where this process is
/// in the root (a v2 group that holds processes cannot give its children CPU weights).
fn group_dir(cgroup: &str, mountinfo: &str) -> Result<PathBuf, String> {
    let mounts: Vec<Mount<'_>> = mountinfo.lines().filter_map(Mount::parse).collect();
    // cgroup v1: "4:cpu,cpuacct:/some/path".
    let v1 = cgroup.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        controllers.split(',').any(|c| c == "cpu").then_some(path)
    });
    if let Some(path) = v1 {
        let mount = mounts
            .iter()
            .find(|m| m.fstype == "cgroup" && m.options.split(',').any(|o| o == "cpu"))
            .ok_or("the cgroup v1 cpu hierarchy is not mounted")?;
        return Ok(mount.below(path).join(NAME));
    }
    let path = cgroup
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .ok_or("no cpu cgroup for this process")?;
    let mount = mounts
        .iter()
        .find(|m| m.fstype == "cgroup2")
        .ok_or("no cgroup hierarchy with the cpu controller is mounted")?;
    if path != "/" {
        return Err(format!(
            "this server runs in the cgroup v2 group {path}, which holds processes and so cannot give a group of its own a share of the CPU (start it in the root cgroup or one delegated to it)"
        ));
    }
    let control = mount.point.join("cgroup.subtree_control");
    let enabled = std::fs::read_to_string(&control).unwrap_or_default();
    if !enabled.split_whitespace().any(|c| c == "cpu") {
        std::fs::write(&control, "+cpu").map_err(|e| {
            format!(
                "cannot enable the cpu controller in {}: {e}",
                control.display()
            )
        })?;
    }
    Ok(mount.point.join(NAME))
}

/// One line of `/proc/self/mountinfo`, the fields used here.
struct Mount<'a> {
    /// The hierarchy's directory shown at the mount point ("/" for its root).
    root: &'a str,
    point: PathBuf,
    fstype: &'a str,
    /// The super block's options (a v1 hierarchy's controllers).
    options: &'a str,
}

impl<'a> Mount<'a> {
    /// `36 35 0:30 / /sys/fs/cgroup/cpu rw,… shared:9 - cgroup cgroup rw,cpu`.
    fn parse(line: &'a str) -> Option<Self> {
        let (before, after) = line.split_once(" - ")?;
        let mut before = before.split(' ');
        let (root, point) = (before.nth(3)?, before.next()?);
        let mut after = after.split(' ');
        let (fstype, options) = (after.next()?, after.nth(1)?);
        Some(Self {
            root,
            point: PathBuf::from(unescape(point)),
            fstype,
            options,
        })
    }

    /// The directory of group `path` of this hierarchy.
    fn below(&self, path: &str) -> PathBuf {
        let inside = path
            .strip_prefix(self.root)
            .unwrap_or(path)
            .trim_start_matches('/');
        self.point.join(inside)
    }
}

/// mountinfo writes a space, tab, newline and backslash in a path as octal escapes.
fn unescape(field: &str) -> String {
    field
        .replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTS: &str = "\
25 30 0:22 / /sys rw,nosuid shared:7 - sysfs sysfs rw
33 25 0:28 / /sys/fs/cgroup ro shared:8 - tmpfs tmpfs ro,mode=755
35 33 0:30 / /sys/fs/cgroup/unified rw shared:10 - cgroup2 cgroup2 rw
37 33 0:32 / /sys/fs/cgroup/cpu,cpuacct rw shared:12 - cgroup cgroup rw,cpu,cpuacct
38 33 0:33 /outer /sys/fs/cgroup/memory rw shared:13 - cgroup cgroup rw,memory
";

    #[test]
    fn v1_the_group_is_below_the_processes_own_cpu_group() {
        let cgroup = "5:memory:/outer/x\n3:cpu,cpuacct:/system.slice/a.service\n0::/\n";
        assert_eq!(
            group_dir(cgroup, MOUNTS),
            Ok(PathBuf::from(
                "/sys/fs/cgroup/cpu,cpuacct/system.slice/a.service/rest-lite-tasks"
            ))
        );
        let root = "3:cpu,cpuacct:/\n";
        assert_eq!(
            group_dir(root, MOUNTS),
            Ok(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/rest-lite-tasks"))
        );
    }

    #[test]
    fn a_mount_of_part_of_a_hierarchy_is_followed() {
        let mount = MOUNTS
            .lines()
            .filter_map(Mount::parse)
            .nth(4)
            .expect("memory");
        assert_eq!(
            mount.below("/outer/x"),
            PathBuf::from("/sys/fs/cgroup/memory/x")
        );
        // A cpuacct-only hierarchy is not the cpu one.
        assert!(!"rw,cpuacct".split(',').any(|o| o == "cpu"));
    }

    #[test]
    fn v2_outside_the_root_says_why_not() {
        let mounts = "35 33 0:30 / /sys/fs/cgroup rw shared:10 - cgroup2 cgroup2 rw\n";
        let err = group_dir("0::/user.slice/session-1.scope\n", mounts).expect_err("not root");
        assert!(err.contains("/user.slice/session-1.scope"), "{err}");
        assert!(group_dir("0::/\n", "").is_err(), "no hierarchy mounted");
    }

    #[test]
    fn escaped_mount_points_are_read_back() {
        let line = "40 33 0:40 / /mnt/with\\040space rw - cgroup cgroup rw,cpu";
        let mount = Mount::parse(line).expect("parsed");
        assert_eq!(mount.point, PathBuf::from("/mnt/with space"));
        assert_eq!(mount.options, "rw,cpu");
    }
}
