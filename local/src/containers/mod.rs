//! Tasks in their images: each task's main container (the runtime's `run` as PID 1) as a
//! container of this machine's engine, in the task's image, with the task's directory as
//! the pod's volume and the pod's resources as limits. Its init step (`entry`) runs on
//! this machine, as a pod's runs the runtime's image, whose contents rest-lite carries.
//!
//! The choices, and why:
//! - **Two engines behind one seam** ([`Driver`]): the task's life (its init step, its
//!   stop with TERM, grace and KILL, its end, a restarted server following it) is the same
//!   code for both; only how a container starts and is asked about differs.
//! - **Podman** ([`podman`]), run attached with `--log-driver passthrough`: the
//!   container's standard output and error are the task's log file itself and its standard
//!   input the ssh port's listener, handed over while bound.
//! - **Docker Engine** ([`docker`]), through its API: its daemon holds the container's
//!   streams, so the runtime opens the task's log itself and binds its ssh port itself.
//! - **`--engine auto` asks Podman first**, then Docker: where both answer, Podman's start
//!   hands the ssh port over without a moment in which it is free, and its containers are
//!   not a daemon's that every other user of the `docker` group may also reach.
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

mod docker;
mod driver;
mod podman;
mod stores;

use driver::find_program;
pub use driver::{CDI_GPU, Driver, LABEL_SERVER, Limits, Start, Step, Ulimit};

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The main container's environment file, in the task's directory.
pub const ENV_FILE: &str = ".env-main";
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

/// A container engine that answered, and what every container of this server gets.
#[derive(Debug)]
pub struct Engine {
    /// Its name and version, as the server's start and each job's diagnostics say them.
    pub version: String,
    /// The static runtime binary mounted into every container.
    pub runtime_binary: PathBuf,
    /// The value of [`LABEL_SERVER`] for this server.
    pub server_label: String,
    /// Containers outlive the server: main containers are kept until the server has read
    /// their end, and a restarted server follows them.
    pub outlive_server: bool,
    /// Images found on this machine already: asked once, not once per task (one removed
    /// since fails its task's start with the engine's words).
    present: std::sync::Mutex<std::collections::HashSet<String>>,
    /// The users images run as ([`Engine::user_of`]).
    users: std::sync::Mutex<std::collections::HashMap<String, (u32, u32)>>,
    driver: Box<dyn Driver>,
    /// The other engine's store, which an image this one lacks is copied from.
    elsewhere: stores::Elsewhere,
    /// The command that runs this server's jobs on the host instead, as the person who
    /// started it types it ([`Detect::on_host`]).
    on_host: String,
}

/// `uid`, `uid:gid` or nothing (root) as numbers; `None` for a name.
fn numeric_user(user: &str) -> Option<(u32, u32)> {
    if user.is_empty() {
        return Some((0, 0));
    }
    let (uid, gid) = match user.split_once(':') {
        Some((uid, gid)) => (uid.parse().ok()?, gid.parse().ok()?),
        // A uid alone: its primary group is the image's to say; the files given to it
        // need only its uid.
        None => {
            let uid = user.parse().ok()?;
            (uid, uid)
        }
    };
    Some((uid, gid))
}

impl Engine {
    /// Whether the engine's client hands the task's log file and ssh listener to the
    /// container ([`Start::Attached`]); else the runtime opens and binds them itself.
    pub fn hands_over(&self) -> bool {
        self.driver.hands_over()
    }

    /// Starts the container of `step`.
    pub async fn start(&self, step: &Step) -> Result<Start, String> {
        self.driver.start(step, &self.runtime_binary).await
    }

    /// Returns once the container `name` runs (or has run): a task is RUNNING then, as a
    /// pod whose container started. The wait begins at this call: make it before the
    /// container starts.
    pub fn running<'a>(&'a self, name: &'a str) -> futures::future::BoxFuture<'a, ()> {
        self.driver.running(name)
    }

    /// Whether `image` is on this machine.
    pub async fn has_image(&self, image: &str) -> Result<bool, String> {
        if self.present().contains(image) {
            return Ok(true);
        }
        let found = self.driver.has_image(image).await?;
        if found {
            self.present().insert(image.to_string());
        }
        Ok(found)
    }

    /// The images known to be here.
    fn present(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.present.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Brings `image`, which this engine's store lacks, into it: copied from the other
    /// engine's store on this machine when that one has it ([`stores`]), else pulled
    /// ([`Driver::pull`]), telling `progress` what it does. On failure, the whole reason
    /// as a task's diagnostics say it ([`IMAGE_PULL_FAILED`]): the stores looked in, the
    /// registry's words, and the ways out, complete.
    pub async fn fetch(
        &self,
        image: &str,
        authfile: Option<&Path>,
        progress: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<(), String> {
        let (looked_in, copy_failed) = match self
            .elsewhere
            .copy(image, &*self.driver, progress)
            .await
        {
            Ok(stores::Copied::Here) => {
                self.present().insert(image.to_string());
                return Ok(());
            }
            Ok(stores::Copied::Nowhere(others)) => (others, None),
            // A copy that failed is said, and the registry asked still.
            Err(why) => {
                tracing::warn!(%image, %why, "cannot copy the image from the other engine's store; pulling it");
                (Vec::new(), Some(why))
            }
        };
        match self.driver.pull(image, authfile, progress).await {
            Ok(()) => {
                self.present().insert(image.to_string());
                Ok(())
            }
            Err(why) => {
                let why = match copy_failed {
                    Some(copy) => format!("{why} (and {copy})"),
                    None => why,
                };
                Err(self.not_here(image, &looked_in, &why))
            }
        }
    }

    /// Why `image` cannot be had: the stores looked in (this engine's, and `others` that
    /// answered), the pull's failure `why`, and the ways out, each a command to type.
    fn not_here(&self, image: &str, others: &[String], why: &str) -> String {
        // `Docker 28.2.2 (API 1.51, unix:///var/run/docker.sock)` as `Docker 28.2.2`.
        let short = |name: &str| name.split(" (").next().unwrap_or(name).to_string();
        let others: Vec<String> = others.iter().map(|name| short(name)).collect();
        let stores = match others.as_slice() {
            [] => format!("not in {}'s store", short(&self.version)),
            _ => format!(
                "in neither {}'s store nor {}'s",
                short(&self.version),
                others.join("'s nor ")
            ),
        };
        let program = self.driver.program();
        // Quoted, as a printed command is typed as printed.
        let typed =
            String::from_utf8_lossy(&pai_kube_runtime::shell::quote(image.as_bytes())).into_owned();
        format!(
            "{IMAGE_PULL_FAILED}: image {image} is {stores}, and cannot be pulled: {why}. Put it there by hand: `{program} pull {typed}` where a registry answers, or `{program} load -i FILE` of a saved image; or run the job's tasks on this machine's host, without their image: `{}`",
            self.on_host
        )
    }

    /// The user (`uid`, `gid`) a container of `image` runs as, once the image is here: its
    /// configuration's when that is numbers, else (a name, which only the image's own
    /// `/etc/passwd` resolves) what the runtime says in a throwaway container of it. Asked
    /// once per image.
    pub async fn user_of(&self, image: &str) -> Result<(u32, u32), String> {
        if let Some(user) = self.known_user(image) {
            return Ok(user);
        }
        let configured = self.driver.image_user(image).await?;
        let user = match numeric_user(&configured) {
            Some(user) => user,
            None => {
                let said = self.driver.whoami(image, &self.runtime_binary).await?;
                numeric_user(said.trim()).ok_or_else(|| {
                    format!("the user {configured:?} of image {image} is not known to it: {said}")
                })?
            }
        };
        self.users
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(image.to_string(), user);
        Ok(user)
    }

    /// The user of `image` if [`Engine::user_of`] found it already.
    pub fn known_user(&self, image: &str) -> Option<(u32, u32)> {
        self.users
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(image)
            .copied()
    }

    /// [`Driver::wait`].
    pub async fn wait(&self, name: &str) -> Option<i32> {
        self.driver.wait(name).await
    }

    /// [`Driver::kill`].
    pub async fn kill(&self, name: &str, signal: &str) -> bool {
        self.driver.kill(name, signal).await
    }

    /// [`Driver::remove`].
    pub async fn remove(&self, names: &[String]) {
        if !names.is_empty() {
            self.driver.remove(names).await
        }
    }

    /// [`Driver::names`].
    pub async fn names(&self, all: bool) -> Result<Vec<String>, String> {
        self.driver.names(all).await
    }
}

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
                "tasks run in their images, as containers of {}",
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
    /// The OCI runtime Podman is told to use (`--engine-runtime`).
    pub oci_runtime: Option<String>,
    /// Docker's socket (`DOCKER_HOST`, a `unix://` address); unset: the default one.
    pub docker_host: Option<String>,
    /// The static runtime binary, if this build carries one.
    pub runtime_binary: Option<PathBuf>,
    pub state_dir: &'a Path,
    /// Containers outlive the server ([`Engine::outlive_server`]).
    pub outlive_server: bool,
    /// The command that runs this server's jobs on the host, as its user types it where
    /// they started it (`rest-lite run --engine host job.yaml`): named where an image
    /// cannot be had.
    pub on_host: String,
}

/// How the server finds one engine again: enough to ask it, not the server's own.
#[derive(Clone)]
struct Finding {
    oci_runtime: Option<String>,
    docker_host: Option<String>,
    label: String,
    outlive_server: bool,
}

impl Finding {
    /// Podman, if it is installed and answers: it and its name with its version.
    async fn podman(&self) -> Result<(podman::Podman, String), String> {
        let Some(program) = find_program("podman") else {
            return Err("no podman on PATH (apt-get install podman)".to_string());
        };
        podman::Podman::find(
            program,
            self.oci_runtime.clone(),
            &self.label,
            self.outlive_server,
            own_ulimits(podman::MAX_PROCESSES),
        )
        .await
    }

    /// Docker Engine, if its daemon answers: it and its name with its version.
    async fn docker(&self) -> Result<(docker::Docker, String), String> {
        docker::Docker::find(
            self.docker_host.as_deref(),
            &self.label,
            own_ulimits(u64::MAX),
        )
        .await
        .map_err(|why| format!("{why} (apt-get install docker.io)"))
    }

    /// The stores of the engines other than `running` that answer.
    fn others(self, running: &'static str) -> stores::Finder {
        Box::new(move || {
            let finding = self.clone();
            Box::pin(async move {
                let mut found = Vec::new();
                if running != "podman"
                    && let Ok((podman, name)) = finding.podman().await
                {
                    found.push(stores::Store::new(name, Box::new(podman)));
                }
                if running != "docker"
                    && let Ok((docker, name)) = finding.docker().await
                {
                    found.push(stores::Store::new(name, Box::new(docker)));
                }
                found
            })
        })
    }
}

/// Finds the engine `detect.choice` names. `Auto` asks Podman, then Docker, and falls back
/// to the host, saying why; an engine named but not usable is an error with the reason.
pub async fn detect(detect: Detect<'_>) -> Result<Isolation, String> {
    let fallback = |why: String| -> Result<Isolation, String> {
        if detect.choice == EngineChoice::Auto {
            Ok(Isolation::Host { why })
        } else {
            Err(why)
        }
    };
    if detect.choice == EngineChoice::Host {
        return Ok(Isolation::Host {
            why: "--engine host".to_string(),
        });
    }
    let Some(runtime_binary) = detect.runtime_binary.clone() else {
        return fallback(
            "this rest-lite was built without the static runtime containers need (REST_LITE_STATIC_RUNTIME=none, or a machine without libc6-dev: its build warned)"
                .to_string(),
        );
    };
    let finding = Finding {
        oci_runtime: detect.oci_runtime.clone(),
        docker_host: detect.docker_host.clone(),
        label: server_label(detect.state_dir),
        outlive_server: detect.outlive_server,
    };
    let found = |version: String, driver: Box<dyn Driver>| {
        let elsewhere = stores::Elsewhere::new(
            finding.clone().others(driver.program()),
            detect.state_dir.join("images"),
        );
        Ok(Isolation::Containers(Arc::new(Engine {
            version,
            runtime_binary: runtime_binary.clone(),
            server_label: finding.label.clone(),
            outlive_server: detect.outlive_server,
            present: Default::default(),
            users: Default::default(),
            driver,
            elsewhere,
            on_host: detect.on_host.clone(),
        })))
    };
    let mut reasons = Vec::new();
    if matches!(detect.choice, EngineChoice::Auto | EngineChoice::Podman) {
        match finding.podman().await {
            Ok((podman, version)) => return found(version, Box::new(podman)),
            Err(why) => reasons.push(why),
        }
    }
    if matches!(detect.choice, EngineChoice::Auto | EngineChoice::Docker) {
        match finding.docker().await {
            Ok((docker, version)) => return found(version, Box::new(docker)),
            Err(why) => reasons.push(why),
        }
    }
    fallback(reasons.join("; "))
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

/// `nofile` and `nproc` as this process has them, `nproc` at most `most_processes`.
fn own_ulimits(most_processes: u64) -> Vec<Ulimit> {
    use nix::sys::resource::{RLIM_INFINITY, Resource, getrlimit};
    let show = |n: u64| {
        if n == RLIM_INFINITY {
            -1
        } else {
            i64::try_from(n).unwrap_or(-1)
        }
    };
    [
        ("nofile", Resource::RLIMIT_NOFILE, u64::MAX),
        ("nproc", Resource::RLIMIT_NPROC, most_processes),
    ]
    .into_iter()
    .filter_map(|(name, resource, most)| {
        let (soft, hard) = getrlimit(resource).ok()?;
        let (soft, hard) = (soft.min(most), hard.min(most));
        Some(Ulimit {
            name,
            soft: show(soft),
            hard: show(hard),
        })
    })
    .collect()
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
    if driver::registry_named(image).is_some() {
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
    fn an_images_user_is_numbers_or_a_name_to_ask_the_image_about() {
        assert_eq!(numeric_user(""), Some((0, 0)));
        assert_eq!(numeric_user("1000"), Some((1000, 1000)));
        assert_eq!(numeric_user("1000:100"), Some((1000, 100)));
        assert_eq!(numeric_user("jovyan"), None);
        assert_eq!(numeric_user("1000:users"), None);
    }

    #[test]
    fn engines_are_named_as_the_flag_takes_them() {
        assert_eq!("auto".parse(), Ok(EngineChoice::Auto));
        assert_eq!("podman".parse(), Ok(EngineChoice::Podman));
        assert_eq!("docker".parse(), Ok(EngineChoice::Docker));
        assert_eq!("host".parse(), Ok(EngineChoice::Host));
        assert!("containerd".parse::<EngineChoice>().is_err());
    }

    #[tokio::test]
    async fn an_engine_named_but_not_there_is_refused_with_the_reason() {
        let dir = pai_test_support::scratch("engine");
        // A socket nobody listens on.
        let socket = dir.path().join("docker.sock");
        let refused = detect(Detect {
            choice: EngineChoice::Docker,
            oci_runtime: None,
            docker_host: Some(format!("unix://{}", socket.display())),
            runtime_binary: Some(dir.path().join("runtime")),
            state_dir: dir.path(),
            outlive_server: true,
            on_host: "rest-lite serve --engine host".to_string(),
        })
        .await
        .expect_err("refused");
        assert!(refused.contains("docker.sock"), "{refused}");
        assert!(refused.contains("apt-get install docker.io"), "{refused}");
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
