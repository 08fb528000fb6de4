//! How the embedded default runs tasks: its state directory, runtime, scripts and limits.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::task::Runtime;

/// How the embedded default runs tasks.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The state directory: jobs, their Frameworks, task roots and logs.
    pub state_dir: PathBuf,
    pub runtime: Runtime,
    /// Where tasks find `prep/` and `init/`.
    pub assets: Assets,
    /// Between a task's TERM and KILL when it is stopped (its pod's
    /// `terminationGracePeriodSeconds` when it has one).
    pub default_grace: Duration,
    /// Delay before retrying an attempt that failed with a transient conflict.
    pub conflict_delay: Duration,
    /// The most tasks this machine runs at once, and so the most one job may have here
    /// ([`default_max_tasks`] unless set).
    pub max_tasks: u32,
    /// Where tasks' ports are drawn from ([`DEFAULT_PORTS`] unless set).
    pub ports: std::ops::RangeInclusive<u16>,
    /// Whether tasks run in their images (an engine's containers) or on the host.
    pub containers: ContainerSettings,
    /// This machine's GPUs and the operator's GPU types.
    pub gpus: std::sync::Arc<crate::gpus::Gpus>,
    /// The team storages (the config's, as the server reads it again).
    pub storages: std::sync::Arc<pai_translate::storages::Registry>,
    /// The wait before the next attempt of a job whose attempts end quickly.
    pub restart: pai_job::restarts::RestartBackoff,
    /// How many attempts' files are kept per job, the current one included.
    pub kept_attempts: u32,
    /// The bound of each task's `container.log`.
    pub log_rotation: crate::log_rotation::Rotation,
    /// How long finished jobs are kept.
    pub retention: crate::retention::Retention,
}

/// What decides container mode at start.
#[derive(Clone, Debug)]
pub struct ContainerSettings {
    pub choice: crate::containers::EngineChoice,
    /// The OCI runtime the engine is told to use (`runc`, `crun`), if any.
    pub oci_runtime: Option<String>,
    /// The static runtime mounted into containers, carried in the binary (written to
    /// `<state dir>/kube-runtime`); `None`: this build has none, tasks run on the host.
    pub runtime: Option<&'static [u8]>,
    /// Whether containers outlive the server (`serve`: a restarted server follows them,
    /// as a kubelet's pods outlive the kubelet) or end with it (`run`, whose state
    /// directory goes with it).
    pub outlive_server: bool,
    /// The command that runs the same jobs on the host instead (`--engine host`), as the
    /// person who started this server types it where they did: named where a job's image
    /// cannot be had.
    pub on_host: String,
}

/// Tasks' ports unless configured: below Kubernetes' NodePort range (30000–32767) and
/// Linux's range for outgoing connections (32768–60999 by default), so that no client
/// connection of this machine is given a port a task was told to bind; 20,000 ports.
pub const DEFAULT_PORTS: std::ops::RangeInclusive<u16> = 10000..=29999;

/// How many tasks a job may have on this machine unless configured: 500 per CPU core,
/// and no more than one per 8 MiB of memory (a task is at least the runtime, a shell
/// and the user's command). 1,000 on a machine of 2 cores and 8 GiB or more.
pub fn default_max_tasks() -> u32 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(u64::MAX, |kib| kib / (8 * 1024));
    u32::try_from((500 * cores).min(memory).max(1)).unwrap_or(u32::MAX)
}

/// The `prep/` and `init/` scripts tasks run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Assets {
    /// The ones this binary carries, written to `<state dir>/assets` once the state
    /// directory is this server's ([`assets::unpack`]).
    Embedded,
    /// A directory with `prep/` and `init/`.
    Dir(PathBuf),
}

/// `rest-lite runtime entry|run`: the runtime this binary carries.
pub const RUNTIME_COMMAND: &str = "runtime";

/// Runs the runtime this binary carries when it was started as it ([`Runtime::embedded`]'s
/// `runtime` command, or installed as a task's `<root>/run`) and returns its exit status;
/// otherwise gives the arguments back, for the binary's own commands.
pub fn as_embedded_runtime(mut args: Vec<String>) -> Result<std::process::ExitCode, Vec<String>> {
    let invoked_as_run = args
        .first()
        .and_then(|a| Path::new(a).file_name())
        .is_some_and(|name| name == pai_contract::paths::commands::RUN);
    if invoked_as_run {
        return Ok(pai_kube_runtime::cli::main(args));
    }
    if args.get(1).map(String::as_str) == Some(RUNTIME_COMMAND) {
        args.remove(1);
        return Ok(pai_kube_runtime::cli::main(args));
    }
    Err(args)
}

impl Runtime {
    /// The runtime carried by this very binary.
    pub fn embedded() -> std::io::Result<Self> {
        Ok(Self {
            program: std::env::current_exe()?,
            args: vec![RUNTIME_COMMAND.into()],
        })
    }

    /// Whether this is [`Runtime::embedded`]'s shape: a binary's `runtime` command.
    pub fn is_embedded(&self) -> bool {
        matches!(self.args.as_slice(), [command] if command == RUNTIME_COMMAND)
    }

    /// A `kube-runtime` binary.
    pub fn binary(path: &Path) -> Self {
        Self {
            program: path.to_path_buf(),
            args: Vec::new(),
        }
    }
}

/// `$XDG_STATE_HOME/rest-lite`, else `~/.local/state/rest-lite`.
pub fn default_state_dir() -> PathBuf {
    std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(std::env::temp_dir)
        .join("rest-lite")
}
