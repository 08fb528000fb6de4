//! Tasks in their images: each task's main container (the runtime's `run` as PID 1) as a
//! container of this machine's engine, in the task's image, with the task's directory as
//! the pod's volume and the pod's resources as limits. Its init step (`entry`) runs on
//! this machine, as a pod's runs the runtime's image, whose contents rest-lite carries.
//!
//! The choices, and why:
//! - **Podman**, run attached with `--log-driver passthrough`: the container's standard
//!   output and error are the task's log file itself (as in host mode, so the runtime's
//!   ordered output and every reader of the log work unchanged) and its standard input
//!   is what the server gives it (the ssh port's listener, handed over while bound). Docker
//!   has neither (its daemon, not the client, starts the container), and is refused with
//!   that reason.
//! - **The host's network**, ports held by the server as in host mode and bound on
//!   127.0.0.1 only: the peer table, the barrier, ssh between tasks and the port hand-over
//!   stay the same code; a network per job would need the engine's bridge, a published
//!   port per task port (thousands for a large job) and addresses that differ from the
//!   ones the peer table was built with. What a task can reach is what a process of the
//!   server's machine on loopback can; its files, processes and limits are its own.
//! - **The runtime comes from rest-lite**, a static build mounted read-only as
//!   `/usr/local/pai/run` (the cluster's init image holds the same binary), so it runs in
//!   any image, one without glibc too.
//! - **The environment travels in a file** of the task's directory
//!   ([`pai_contract::env::runtime::ENV_FROM`]), never on the engine's command line (other
//!   users see it in `ps`) or in the engine's own environment (a job's `LD_PRELOAD` would
//!   reach the engine, a program of the host).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use pai_contract::paths;

/// The main container's environment file, in the task's directory.
pub const ENV_FILE: &str = ".env-main";
/// The label every container of a rest-lite server carries: the server's state directory
/// (a digest of its path), so that a server finds its own containers and no other's.
pub const LABEL_SERVER: &str = "io.openpai.rest-lite.server";
/// The job a container belongs to.
pub const LABEL_JOB: &str = "io.openpai.rest-lite.job";
/// The pod UID of the task a container runs.
pub const LABEL_POD_UID: &str = "io.openpai.rest-lite.pod-uid";

/// Which engine runs tasks, as asked (`--engine`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineChoice {
    /// Podman when it is installed and answers, else the host.
    Auto,
    Podman,
    Docker,
    /// Every task a process tree of this machine, in no image.
    Host,
}

impl std::str::FromStr for EngineChoice {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "auto" => Ok(Self::Auto),
            "podman" => Ok(Self::Podman),
            "docker" => Ok(Self::Docker),
            "host" => Ok(Self::Host),
            other => Err(format!(
                "{other:?} is not an engine: auto, podman, docker or host"
            )),
        }
    }
}

/// A container engine that answered.
#[derive(Clone, Debug)]
pub struct Engine {
    /// Its program.
    pub program: PathBuf,
    /// What `version` said.
    pub version: String,
    /// The OCI runtime it is told to use (`--runtime`), when one is set.
    pub oci_runtime: Option<String>,
    /// The static runtime binary mounted into every container.
    pub runtime_binary: PathBuf,
    /// The value of [`LABEL_SERVER`] for this server.
    pub server_label: String,
    /// The limits every container gets (`--ulimit`): this server's own, which the engine
    /// can set without `CAP_SYS_RESOURCE` (its defaults may exceed what the machine allows).
    pub ulimits: Vec<String>,
    /// Who waits for a container to run.
    pub starts: Arc<Starts>,
    /// Images found on this machine already: asked once, not once per task (one removed
    /// since fails its task's `run`, `--pull never`, with the engine's words).
    pub present: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    /// util-linux's `setpriv`, which starts the engine's client with a parent-death signal
    /// when containers must not outlive the server: a server that dies then ends its
    /// tasks' containers (the client passes the TERM on), as it ends its host processes.
    pub setpriv: Option<PathBuf>,
    /// Containers outlive the server: main containers are kept until the server has read
    /// their end (no `--rm`), and a restarted server follows them.
    pub outlive_server: bool,
}

/// Tasks waiting for their main container to run, and the one poller that tells them: as
/// a kubelet's PLEG relists its containers, one `ps` of this server's running containers
/// answers every task that waits (a `wait` per container would be a process per task,
/// and fails for a container not created yet).
#[derive(Default)]
pub struct Starts {
    /// Who waits for which container, and whether the poller runs.
    waiters: std::sync::Mutex<(Waiters, bool)>,
}

type Waiters = std::collections::HashMap<String, Vec<tokio::sync::oneshot::Sender<()>>>;

impl std::fmt::Debug for Starts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Starts")
    }
}

/// Between two looks at the running containers.
const START_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// How tasks run, as decided at start.
#[derive(Clone, Debug)]
pub enum Isolation {
    /// Process trees of this machine (no engine, or `--engine host`), with why.
    Host { why: String },
    /// Containers of an engine.
    Containers(Arc<Engine>),
}

impl Isolation {
    /// One line for the server's start and each job's diagnostics.
    pub fn describe(&self) -> String {
        match self {
            Isolation::Host { why } => {
                format!("tasks run as processes of this machine, not in their images ({why})")
            }
            Isolation::Containers(engine) => format!(
                "tasks run in their images, as containers of {} {}",
                engine.program.display(),
                engine.version
            ),
        }
    }

    pub fn engine(&self) -> Option<&Arc<Engine>> {
        match self {
            Isolation::Containers(engine) => Some(engine),
            Isolation::Host { .. } => None,
        }
    }
}

/// What finding an engine needs besides the choice.
pub struct Detect<'a> {
    pub choice: EngineChoice,
    /// The OCI runtime to ask for (`--engine-runtime`).
    pub oci_runtime: Option<String>,
    /// The static runtime binary, if this build carries one.
    pub runtime_binary: Option<PathBuf>,
    pub state_dir: &'a Path,
    /// Containers outlive the server ([`Engine::outlive_server`]).
    pub outlive_server: bool,
}

/// Finds the engine `detect.choice` names. `Auto` falls back to the host, saying why;
/// an engine named but not usable is an error with the reason.
pub fn detect(detect: Detect<'_>) -> Result<Isolation, String> {
    let program = match detect.choice {
        EngineChoice::Host => {
            return Ok(Isolation::Host {
                why: "--engine host".to_string(),
            });
        }
        EngineChoice::Docker => {
            return Err("Docker is not supported: its daemon starts the containers, so a task's log file and its ssh port cannot be handed to it as they are to Podman's; install Podman (apt-get install podman) or use --engine host".to_string());
        }
        EngineChoice::Auto | EngineChoice::Podman => find_program("podman"),
    };
    let fallback = |why: String| -> Result<Isolation, String> {
        if detect.choice == EngineChoice::Auto {
            Ok(Isolation::Host { why })
        } else {
            Err(why)
        }
    };
    let Some(program) = program else {
        return fallback("no podman on PATH (apt-get install podman)".to_string());
    };
    let version = match std::process::Command::new(&program)
        .args(["version", "--format", "{{.Client.Version}}"])
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        Ok(out) => {
            return fallback(format!(
                "{} version failed: {}",
                program.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Err(e) => return fallback(format!("cannot run {}: {e}", program.display())),
    };
    let Some(runtime_binary) = detect.runtime_binary else {
        return fallback(
            "this rest-lite was built without the static runtime containers need (REST_LITE_STATIC_RUNTIME=none, or a machine without libc6-dev: its build warned)"
                .to_string(),
        );
    };
    Ok(Isolation::Containers(Arc::new(Engine {
        program,
        version: format!("Podman {version}"),
        oci_runtime: detect.oci_runtime,
        runtime_binary,
        server_label: server_label(detect.state_dir),
        ulimits: own_ulimits(),
        starts: Arc::default(),
        present: Arc::default(),
        setpriv: (!detect.outlive_server)
            .then(|| find_program("setpriv"))
            .flatten(),
        outlive_server: detect.outlive_server,
    })))
}

fn find_program(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

/// A short digest of the state directory's path: the label of this server's containers.
pub fn server_label(state_dir: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let path = std::fs::canonicalize(state_dir).unwrap_or_else(|_| state_dir.to_path_buf());
    let digest = ring::digest::digest(&ring::digest::SHA256, path.as_os_str().as_bytes());
    digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Podman lowers its own `nproc` to this (so runc, started under it, cannot set more).
const PODMAN_MAX_PROCESSES: u64 = 32_768;

/// `nofile` and `nproc` as this process has them (`nproc` at most what Podman keeps).
fn own_ulimits() -> Vec<String> {
    use nix::sys::resource::{Resource, getrlimit};
    let show = |n: u64| {
        if n == nix::sys::resource::RLIM_INFINITY {
            "-1".to_string()
        } else {
            n.to_string()
        }
    };
    [
        ("nofile", Resource::RLIMIT_NOFILE, u64::MAX),
        ("nproc", Resource::RLIMIT_NPROC, PODMAN_MAX_PROCESSES),
    ]
    .into_iter()
    .filter_map(|(name, resource, most)| {
        let (soft, hard) = getrlimit(resource).ok()?;
        let (soft, hard) = (soft.min(most), hard.min(most));
        Some(format!("{name}={}:{}", show(soft), show(hard)))
    })
    .collect()
}

/// A role's resources as a pod's limits say them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Limits {
    /// CPUs (`--cpus`).
    pub cpus: Option<f64>,
    /// Memory in bytes (`--memory`, and as much with swap: none beyond it).
    pub memory: Option<u64>,
    /// `/dev/shm`'s size in bytes.
    pub shm: Option<u64>,
}

/// A Kubernetes quantity (`4`, `500m`, `1.5`, `8192Mi`, `2Gi`, `1G`) as a number of units.
pub fn quantity(text: &str) -> Option<f64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some(number * factor).filter(|v| v.is_finite() && *v >= 0.0)
}

/// An image reference as a kubelet reads it: a first component that names no registry
/// (no `.` or `:`, not `localhost`) means Docker Hub, and a single name there is under
/// `library/` (`perl:5.40-slim` is `docker.io/library/perl:5.40-slim`). Podman would
/// otherwise ask its own search list, which is empty on many machines.
pub fn normalize_image(image: &str) -> String {
    let first = image.split('/').next().unwrap_or_default();
    let names_registry =
        image.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    if names_registry {
        image.to_string()
    } else if image.contains('/') {
        format!("docker.io/{image}")
    } else {
        format!("docker.io/library/{image}")
    }
}

/// The name of the main container of the task whose pod has UID `pod_uid`.
pub fn main_name(pod_uid: &str) -> String {
    format!("rest-lite-{pod_uid}")
}

/// What a kubelet calls an image it could not pull.
pub const IMAGE_PULL_FAILED: &str = "ErrImagePull";

/// The ways out of a pull that failed, on this machine: the image put here by hand, or
/// the tasks on the host.
pub const PULL_WAY_OUT: &str = "Pull it by hand where a registry answers (`podman pull`, or `podman load` of a saved image), or run the job's tasks on this machine's host without their image: `--engine host` (of `rest-lite run` or `rest-lite serve`)";

/// One step of a task as a container.
#[derive(Clone, Debug)]
pub struct Step {
    /// The container's name (unique: the pod's UID is in it).
    pub name: String,
    pub image: String,
    pub hostname: String,
    pub labels: Vec<(String, String)>,
    /// (host path, container path, read-only).
    pub mounts: Vec<(PathBuf, String, bool)>,
    /// Where in the task's directory its environment file is written (host path), and
    /// that path in the container.
    pub env_file: (PathBuf, String),
    pub limits: Limits,
    /// The GPUs it holds, given through the Container Device Interface by their
    /// indices (`nvidia.com/gpu=0`, the names `nvidia-ctk cdi generate` gives them).
    pub gpus: Vec<u32>,
}

/// The CDI kind of NVIDIA's GPUs.
pub const CDI_GPU: &str = "nvidia.com/gpu";

impl Engine {
    /// The engine's command for a task's container: started through `setpriv` with a
    /// parent-death signal where containers end with the server.
    fn client(&self) -> tokio::process::Command {
        let Some(setpriv) = &self.setpriv else {
            return self.command();
        };
        let mut command = tokio::process::Command::new(setpriv);
        command
            .args(["--pdeathsig", "TERM", "--"])
            .arg(&self.program);
        if let Some(runtime) = &self.oci_runtime {
            command.arg("--runtime").arg(runtime);
        }
        command
    }

    /// The engine's command before its subcommand.
    pub fn command(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.program);
        if let Some(runtime) = &self.oci_runtime {
            command.arg("--runtime").arg(runtime);
        }
        command
    }

    /// `podman run` of `step`, attached: its standard streams are the command's own. The
    /// client gets SIGTERM when the thread that starts it ends (the server's spawning
    /// threads live as long as the server) and passes it to the container.
    pub fn run(&self, step: &Step) -> tokio::process::Command {
        let mut command = self.client();
        command.arg("run");
        // The container of a server whose containers outlive it stays until the server
        // has read how it ended (a restarted server reads it with `wait`).
        if !self.outlive_server {
            command.arg("--rm");
        }
        command.args([
            "--log-driver",
            "passthrough",
            "--network",
            "host",
            "--pull",
            "never",
            "--name",
            &step.name,
            "--hostname",
            &step.hostname,
            "--label",
            &format!("{LABEL_SERVER}={}", self.server_label),
        ]);
        for (key, value) in &step.labels {
            command.arg("--label").arg(format!("{key}={value}"));
        }
        for limit in &self.ulimits {
            command.arg("--ulimit").arg(limit);
        }
        if let Some(cpus) = step.limits.cpus {
            command.arg("--cpus").arg(format!("{cpus}"));
        }
        if let Some(memory) = step.limits.memory {
            command
                .arg("--memory")
                .arg(memory.to_string())
                .arg("--memory-swap")
                .arg(memory.to_string());
        }
        if let Some(shm) = step.limits.shm {
            command.arg("--shm-size").arg(shm.to_string());
        }
        for index in &step.gpus {
            command.arg("--device").arg(format!("{CDI_GPU}={index}"));
        }
        let mut volume = |host: &Path, inside: &str, read_only: bool| {
            let mut spec = std::ffi::OsString::from(host.as_os_str());
            spec.push(format!(":{inside}"));
            if read_only {
                spec.push(":ro");
            }
            command.arg("--volume").arg(spec);
        };
        for (host, inside, read_only) in &step.mounts {
            volume(host, inside, *read_only);
        }
        volume(&self.runtime_binary, paths::RUN, true);
        command
            .arg("--env")
            .arg(format!(
                "{}={}",
                pai_contract::env::runtime::ENV_FROM,
                step.env_file.1
            ))
            .arg("--entrypoint")
            .arg(paths::RUN)
            .arg(&step.image);
        command
    }

    /// Returns once the container `name` runs (or has run): a task is RUNNING then, as a
    /// pod whose container started.
    pub async fn running(self: &Arc<Self>, name: &str) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let start_poller = {
            let mut waiters = self
                .starts
                .waiters
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            waiters.0.entry(name.to_string()).or_default().push(tx);
            !std::mem::replace(&mut waiters.1, true)
        };
        if start_poller {
            tokio::spawn(self.clone().poll_starts());
        }
        let _ = rx.await;
    }

    /// Lists this server's running containers until nobody waits.
    async fn poll_starts(self: Arc<Self>) {
        loop {
            // None when the engine cannot say: asked again at the next look.
            let running = self.names(false).await.unwrap_or_default();
            {
                let mut waiters = self
                    .starts
                    .waiters
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                for name in running {
                    for tx in waiters.0.remove(&name).into_iter().flatten() {
                        let _ = tx.send(());
                    }
                }
                waiters.0.retain(|_, senders| {
                    senders.retain(|tx| !tx.is_closed());
                    !senders.is_empty()
                });
                if waiters.0.is_empty() {
                    waiters.1 = false;
                    return;
                }
            }
            tokio::time::sleep(START_POLL).await;
        }
    }

    /// Whether `image` is on this machine.
    pub async fn has_image(&self, image: &str) -> Result<bool, String> {
        if self.present().contains(image) {
            return Ok(true);
        }
        let status = self
            .quiet(&["image", "exists", image])
            .await
            .map_err(|e| format!("cannot run {}: {e}", self.program.display()))?;
        if status.success() {
            self.present().insert(image.to_string());
        }
        Ok(status.success())
    }

    /// The images known to be here.
    fn present(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.present.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The engine with `args`, its output discarded: how it ended.
    async fn quiet(&self, args: &[&str]) -> std::io::Result<std::process::ExitStatus> {
        self.command()
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
    }

    /// Pulls `image`, telling `progress` each line the engine prints; the engine's last
    /// words on failure. Dropped (the job stopped meanwhile), the pull is killed.
    /// `authfile`: the job's registry credentials, for this pull only.
    pub async fn pull(
        &self,
        image: &str,
        authfile: Option<&Path>,
        progress: impl Fn(&str),
    ) -> Result<(), String> {
        use tokio::io::AsyncBufReadExt;
        let mut command = self.command();
        command.arg("pull");
        if let Some(authfile) = authfile {
            command.arg("--authfile").arg(authfile);
        }
        let mut child = command
            .arg(image)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.program.display()))?;
        let mut last = String::new();
        if let Some(stderr) = child.stderr.take() {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let line = line.trim();
                if !line.is_empty() {
                    progress(line);
                    last = line.to_string();
                }
            }
        }
        let status = child
            .wait()
            .await
            .map_err(|e| format!("lost {}: {e}", self.program.display()))?;
        if status.success() {
            self.present().insert(image.to_string());
            return Ok(());
        }
        Err(if last.is_empty() {
            "the pull failed".to_string()
        } else {
            last.trim_start_matches("Error: ").to_string()
        })
    }

    /// Waits for the container `name` to end; its exit code (`None`: no such container,
    /// or the engine cannot say).
    pub async fn wait(&self, name: &str) -> Option<i32> {
        let output = self
            .command()
            .args(["wait", name])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .ok()?;
        if !output.status.success() {
            return None;
        }
        String::from_utf8_lossy(&output.stdout).trim().parse().ok()
    }

    /// Sends `signal` (`TERM`, `KILL`) to the container `name`'s PID 1; false when the
    /// engine could not (no such container, or not running).
    pub async fn kill(&self, name: &str, signal: &str) -> bool {
        self.quiet(&["kill", "--signal", signal, name])
            .await
            .is_ok_and(|s| s.success())
    }

    /// Removes containers by name, running or not; those that are not there are no error.
    pub async fn remove(&self, names: &[String]) {
        if names.is_empty() {
            return;
        }
        let mut args = vec!["rm", "--force", "--ignore", "--time", "0"];
        args.extend(names.iter().map(String::as_str));
        let _ = self.quiet(&args).await;
    }

    /// The names of this server's containers: running ones, or `all` of them.
    pub async fn names(&self, all: bool) -> Result<Vec<String>, String> {
        let mut command = self.command();
        command.arg("ps");
        if all {
            command.arg("--all");
        }
        let output = command
            .args([
                "--filter",
                &format!("label={LABEL_SERVER}={}", self.server_label),
                "--format",
                "{{.Names}}",
            ])
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| format!("cannot run {}: {e}", self.program.display()))?;
        if !output.status.success() {
            return Err(String::from_utf8_lossy(&output.stderr).trim().to_string());
        }
        Ok(String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(str::to_string)
            .collect())
    }
}

/// Writes a container's environment file: `NAME=VALUE\0` records in the task's own
/// directory, read and removed by the runtime, PID 1, before anything else runs there.
/// 0644, for an image whose user is not root (the server's user owns it): no other user of
/// this machine reaches it, as the state directory's `jobs/` above it is 0700.
pub fn write_env_file(path: &Path, env: &[(String, String)]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut bytes = Vec::new();
    for (name, value) in env {
        bytes.extend_from_slice(name.as_bytes());
        bytes.push(b'=');
        bytes.extend_from_slice(value.as_bytes());
        bytes.push(0);
    }
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
    file.write_all(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_as_kubernetes_writes_them() {
        assert_eq!(quantity("4"), Some(4.0));
        assert_eq!(quantity("500m"), Some(0.5));
        assert_eq!(quantity("1.5"), Some(1.5));
        assert_eq!(quantity("8192Mi"), Some(8192.0 * 1024.0 * 1024.0));
        assert_eq!(quantity("2Gi"), Some(2.0 * 1024.0 * 1024.0 * 1024.0));
        assert_eq!(quantity("1G"), Some(1e9));
        assert_eq!(quantity("lots"), None);
        assert_eq!(quantity("3Xi"), None);
    }

    #[test]
    fn short_image_names_mean_docker_hub_as_on_a_cluster() {
        assert_eq!(
            normalize_image("perl:5.40-slim"),
            "docker.io/library/perl:5.40-slim"
        );
        assert_eq!(
            normalize_image("openpai/standard:python_3.6"),
            "docker.io/openpai/standard:python_3.6"
        );
        assert_eq!(normalize_image("localhost/test:1"), "localhost/test:1");
        assert_eq!(normalize_image("registry:5000/a/b"), "registry:5000/a/b");
        assert_eq!(
            normalize_image("nvcr.io/nvidia/pytorch:24.01-py3"),
            "nvcr.io/nvidia/pytorch:24.01-py3"
        );
    }

    #[test]
    fn engines_are_named_as_the_flag_takes_them() {
        assert_eq!("auto".parse(), Ok(EngineChoice::Auto));
        assert_eq!("podman".parse(), Ok(EngineChoice::Podman));
        assert_eq!("host".parse(), Ok(EngineChoice::Host));
        assert!("containerd".parse::<EngineChoice>().is_err());
    }

    #[test]
    fn docker_is_refused_with_the_reason() {
        let dir = pai_test_support::scratch("engine");
        let refused = detect(Detect {
            choice: EngineChoice::Docker,
            oci_runtime: None,
            runtime_binary: None,
            state_dir: dir.path(),
            outlive_server: true,
        })
        .expect_err("refused");
        assert!(refused.contains("Podman"), "{refused}");
    }

    #[test]
    fn the_environment_file_keeps_any_bytes_of_a_value_for_any_user_of_the_image() {
        let dir = pai_test_support::scratch("env-file");
        let path = dir.path().join("env");
        write_env_file(
            &path,
            &[
                ("USER_CMD".into(), "echo 'a\nb' \"$X\" =".into()),
                ("EMPTY".into(), String::new()),
            ],
        )
        .expect("write");
        assert_eq!(
            std::fs::read(&path).expect("read"),
            b"USER_CMD=echo 'a\nb' \"$X\" =\0EMPTY=\0"
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777,
            0o644
        );
    }
}
