//! Where things live inside a task container. The runtime root is configurable in the
//! runtime (tests and the embedded default run it elsewhere); these are the defaults a
//! pod uses, and the paths the Framework refers to.

// Each name written once: the absolute paths are made of these at compile time.
macro_rules! root {
    () => {
        "/usr/local/pai"
    };
}
macro_rules! run {
    () => {
        "run"
    };
}
macro_rules! logs {
    () => {
        "logs"
    };
}

/// The volume shared by the init and main containers.
pub const RUNTIME_ROOT: &str = root!();
/// The main container's command: the runtime installed by the init container.
pub const RUN: &str = concat!(root!(), "/", run!());
/// Where the logs volume is mounted.
pub const LOGS: &str = concat!(root!(), "/", logs!());
/// The runtime binary inside the runtime image.
pub const RUNTIME_BINARY_IN_IMAGE: &str = "/opt/pai/kube-runtime";
/// The memory-backed `/dev/shm` every task gets.
pub const DEV_SHM: &str = "/dev/shm";

/// The runtime's subcommands (`kube-runtime entry`, `kube-runtime run`); `run` is also
/// its file name under the root, which starts it as `run`.
pub mod commands {
    /// The init container's: prep, the barrier, the env file.
    pub const ENTRY: &str = "entry";
    /// The main container's, PID 1: the daemons and the user command.
    pub const RUN: &str = run!();
    /// `uid:gid` of the user it runs as, printed: what the embedded default asks a
    /// throwaway container of an image whose user is a name (its own `/etc/passwd` says
    /// which), so that the task's files the image's user must own are given to it.
    pub const WHOAMI: &str = "whoami";
}

/// File names under the runtime root.
pub mod files {
    /// The Framework as the barrier saw it when it passed (compatibility with frameworkbarrier).
    pub const FRAMEWORK_JSON: &str = "framework.json";
    /// The dynamic env file the run entry sources.
    pub const ENV_FILE: &str = "env.sh";
    /// The exported variables about the job's tasks (the same in every task of a role),
    /// beside `env.sh`'s own: `run` reads both.
    pub const PEERS_ENV_FILE: &str = "env-peers.sh";
    /// The typed peer table.
    pub const PEERS_JSON: &str = "peers.json";
    /// The user's command.
    pub const MAIN_SH: &str = "main.sh";
    /// The installed runtime, the main container's command ([`super::RUN`] in a pod).
    pub const RUN: &str = run!();
    /// The logs directory ([`super::LOGS`] in a pod).
    pub const LOGS: &str = logs!();
    /// The `init/` daemons' scripts, copied by the init container.
    pub const INIT: &str = "init";
    /// The task's whole environment, for ssh sessions (`init/10-sshd.sh` sources it).
    pub const ENV_ALL: &str = "env-all.sh";
}

/// Log directory of one task attempt, relative to the logs root:
/// `attempt-<framework attempt>/role-<role>/idx-<index>/attempt-<task attempt>`.
pub fn attempt_log_dir(
    framework_attempt: u32,
    role: &str,
    index: u32,
    task_attempt: u32,
) -> String {
    format!("attempt-{framework_attempt}/role-{role}/idx-{index}/attempt-{task_attempt}")
}
