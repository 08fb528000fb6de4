//! The seam between a task's life, which is the same in every engine, and one engine:
//! the [`Driver`] each engine implements and what it is given ([`Step`]). The engines
//! ([`super::podman`], [`super::docker`]) import this module and nothing of their parent,
//! which chooses among them.

use std::path::{Path, PathBuf};

use futures::future::BoxFuture;

/// The label every container of a rest-lite server carries: the server's state directory
/// (a digest of its path), so that a server finds its own containers and no other's.
pub const LABEL_SERVER: &str = "io.openpai.rest-lite.server";

/// One container engine, as the server uses it: the seam between a task's life, which
/// is the same in every engine, and how an engine starts, follows and ends a container. A
/// new engine is a new implementation of this trait.
pub trait Driver: Send + Sync + std::fmt::Debug {
    /// Its command-line program, as a person types it (`podman`, `docker`).
    fn program(&self) -> &'static str;
    /// Whether its client hands the task's log file and ssh listener to the container
    /// ([`Start::Attached`]); else the runtime opens and binds them itself.
    fn hands_over(&self) -> bool;
    /// Starts the container of `step` (the static runtime at `runtime_binary` mounted as
    /// its entry point): how the server then follows it.
    fn start<'a>(
        &'a self,
        step: &'a Step,
        runtime_binary: &'a Path,
    ) -> BoxFuture<'a, Result<Start, String>>;
    /// Returns once the container `name` runs (or has run). The wait begins at this
    /// call, not at the future's first poll: called before the container is started, it
    /// cannot miss the start.
    fn running<'a>(&'a self, name: &'a str) -> BoxFuture<'a, ()>;
    /// Whether `image` is on this machine.
    fn has_image<'a>(&'a self, image: &'a str) -> BoxFuture<'a, Result<bool, String>>;
    /// Pulls `image`, telling `progress` each line of progress; the engine's last words
    /// on failure. Dropped (the job stopped meanwhile), the pull ends. `authfile`: the
    /// job's registry credentials (a `.dockerconfigjson`), for this pull only.
    fn pull<'a>(
        &'a self,
        image: &'a str,
        authfile: Option<&'a Path>,
        progress: &'a (dyn Fn(&str) + Send + Sync),
    ) -> BoxFuture<'a, Result<(), String>>;
    /// Writes `image` from its store to `archive` (a new file), in the docker-archive
    /// format both engines load: how an image in one engine's store reaches the other's.
    fn save<'a>(&'a self, image: &'a str, archive: &'a Path) -> BoxFuture<'a, Result<(), String>>;
    /// Loads the images of the docker-archive at `archive` into its store.
    fn load<'a>(&'a self, archive: &'a Path) -> BoxFuture<'a, Result<(), String>>;
    /// Waits for the container `name` to end: its exit code (`None`: no such container,
    /// or the engine cannot say).
    fn wait<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Option<i32>>;
    /// Sends `signal` (`TERM`, `KILL`) to the container `name`'s PID 1; false when the
    /// engine could not (no such container, or not running).
    fn kill<'a>(&'a self, name: &'a str, signal: &'a str) -> BoxFuture<'a, bool>;
    /// Removes containers by name, running or not; those that are not there are no error.
    fn remove<'a>(&'a self, names: &'a [String]) -> BoxFuture<'a, ()>;
    /// The user `image`'s configuration runs as (`""`, `1000`, `1000:100`, `jovyan`).
    fn image_user<'a>(&'a self, image: &'a str) -> BoxFuture<'a, Result<String, String>>;
    /// What the runtime's `whoami` prints in a throwaway container of `image` (the static
    /// runtime at `runtime_binary` as its entry point, no network).
    fn whoami<'a>(
        &'a self,
        image: &'a str,
        runtime_binary: &'a Path,
    ) -> BoxFuture<'a, Result<String, String>>;
    /// The names of this server's containers (by [`LABEL_SERVER`]): running ones, or
    /// `all` of them.
    fn names(&self, all: bool) -> BoxFuture<'_, Result<Vec<String>, String>>;
}

/// How a started container is followed.
pub enum Start {
    /// By a client process of this server's, still to be spawned, whose standard streams
    /// are the container's (the task's log file, the ssh port's listener on its input)
    /// and whose end is the container's (Podman's attached `run`).
    Attached(Box<tokio::process::Command>),
    /// By the engine alone: started already, followed with [`Driver::wait`] (Docker's
    /// daemon holds its streams; the runtime opens its log and binds its port itself).
    Detached,
}

pub(crate) fn find_program(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

/// A limit every container gets: this server's own, which the engine can set without
/// `CAP_SYS_RESOURCE` (its defaults may exceed what the machine allows). -1: none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ulimit {
    pub name: &'static str,
    pub soft: i64,
    pub hard: i64,
}

impl std::fmt::Display for Ulimit {
    /// As `--ulimit` takes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}:{}", self.name, self.soft, self.hard)
    }
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

/// One step of a task as a container.
#[derive(Clone, Debug)]
pub struct Step {
    /// The container's name (unique: the pod's UID is in it).
    pub name: String,
    pub image: String,
    pub hostname: String,
    /// The task's address, which its host name resolves to inside (a kubelet writes the
    /// pod's name and IP into its `/etc/hosts`; programs that look up their own host
    /// name, as gloo does for JAX's collectives, need it).
    pub address: std::net::IpAddr,
    pub labels: Vec<(String, String)>,
    /// (host path, container path, read-only).
    pub mounts: Vec<(PathBuf, String, bool)>,
    /// Where in the task's directory its environment file is written (host path), and
    /// that path in the container.
    pub env_file: (PathBuf, String),
    /// The variables the engine itself sets: the runtime's own settings (where its
    /// environment file is), never the job's.
    pub env: Vec<(String, String)>,
    pub limits: Limits,
    /// The GPUs it holds, by their indices: Podman is given them through the Container
    /// Device Interface (`nvidia.com/gpu=0`, the names `nvidia-ctk cdi generate` gives
    /// them), Docker as a device request (what `--gpus` sends).
    pub gpus: Vec<u32>,
    /// The image's user (`uid`, `gid`) where it is not root: the task's files that user
    /// must own (its ssh directory) are given to it before the container starts.
    pub user: Option<(u32, u32)>,
}

/// The CDI kind of NVIDIA's GPUs.
pub const CDI_GPU: &str = "nvidia.com/gpu";

/// The registry `image`'s reference names, if it names one: a first component with a `.`
/// or `:`, or `localhost`, before a `/` (else the image is Docker Hub's).
pub(crate) fn registry_named(image: &str) -> Option<&str> {
    let (first, _) = image.split_once('/')?;
    (first.contains('.') || first.contains(':') || first == "localhost").then_some(first)
}
