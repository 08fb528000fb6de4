//! The embedded default: Frameworks run on this machine, behind the same API as on
//! Kubernetes. Each task is a process tree started through the real runtime (`entry`,
//! then `run`), peers meet at the same barrier (over the attempt's peer table, a file
//! written once before any task starts), and
//! FrameworkController's rules decide completions and retries ([`policy`]). Every change
//! is written ([`store`]) before it is told, and every decision (acceptance, an attempt's
//! addresses, a completion, a stop) is synced; a restarted server finds every job, ends
//! what was left running and fails-and-retries those attempts.

pub mod assets;
mod controller;
pub mod lifecycle;
pub mod metrics;
/// Tests that fork hold this, and so does the one that checks the ports it was given are
/// free: a child holds its parent's sockets between fork and exec.
#[cfg(test)]
static FORKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
pub mod policy;
pub mod ports;
pub mod procs;
pub mod store;
pub mod task;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;
use tokio::sync::{mpsc, watch};

use pai_contract::Framework;
use pai_contract::framework::{ExecutionType, pod_name};
use pai_contract::ssh_key::JobKey;

use store::Store;
use task::Runtime;

/// Why an operation of the embedded default failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The name is taken (or still being freed).
    #[error("{0}")]
    Conflict(String),
    /// No such job (or task).
    #[error("not found")]
    NotFound,
    /// The job cannot run here (too large for this machine, …): the message says why.
    #[error("{0}")]
    Refused(String),
    /// Anything else (I/O on the state directory, …).
    #[error("{0}")]
    Other(String),
}

/// A task's container log, as it grows.
pub type LogStream = BoxStream<'static, Result<Bytes, std::io::Error>>;

/// A Framework as it changes: its state now, then after every change; `None` once it
/// is deleted, and then the stream ends.
pub type FrameworkStream = BoxStream<'static, Result<Option<Framework>, Error>>;

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
    /// The most tasks one job may have here ([`default_max_tasks`] unless set).
    pub max_tasks: u32,
}

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

impl Runtime {
    /// The runtime carried by this very binary.
    pub fn embedded() -> std::io::Result<Self> {
        Ok(Self {
            program: std::env::current_exe()?,
            args: vec![RUNTIME_COMMAND.into()],
        })
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

/// Variables of the server's environment every task gets (a pod gets its image's).
const HOST_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "RUST_LOG",
];

pub(crate) enum Command {
    Stop,
    Delete,
}

struct Job {
    framework: Mutex<Framework>,
    /// Held while a snapshot is written, so saves land in order.
    save: tokio::sync::Mutex<()>,
    /// Bumped after every save.
    changed: watch::Sender<u64>,
    commands: mpsc::UnboundedSender<Command>,
    /// Deleted: invisible, its name still taken until its processes and files are gone.
    deleting: std::sync::atomic::AtomicBool,
    /// Its processes and files are gone and its name is free.
    gone: std::sync::atomic::AtomicBool,
}

impl Job {
    fn framework(&self) -> MutexGuard<'_, Framework> {
        self.framework.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn name(&self) -> String {
        self.framework().metadata.name.clone().unwrap_or_default()
    }

    fn is_deleting(&self) -> bool {
        self.deleting.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn is_gone(&self) -> bool {
        self.gone.load(std::sync::atomic::Ordering::SeqCst)
    }
}

pub(crate) struct Inner {
    store: Store,
    settings: Settings,
    /// The directory with `prep/` and `init/` tasks get.
    assets: PathBuf,
    /// Task start and barrier times, for `/metrics`.
    observed: metrics::Observed,
    host_env: Vec<(String, String)>,
    /// Where tasks' processes are started.
    spawner: procs::Spawner,
    jobs: Mutex<BTreeMap<String, Arc<Job>>>,
    /// Job directories that could not be read at start, by name, with the reason: their
    /// names stay taken (a new job would overwrite what may still be recovered).
    unreadable: Mutex<BTreeMap<String, String>>,
}

impl Inner {
    fn unreadable(&self) -> MutexGuard<'_, BTreeMap<String, String>> {
        self.unreadable.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn jobs(&self) -> MutexGuard<'_, BTreeMap<String, Arc<Job>>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn visible(&self, name: &str) -> Option<Arc<Job>> {
        self.jobs().get(name).filter(|j| !j.is_deleting()).cloned()
    }

    /// Every job not being deleted.
    fn visible_jobs(&self) -> Vec<Arc<Job>> {
        self.jobs()
            .values()
            .filter(|j| !j.is_deleting())
            .cloned()
            .collect()
    }

    /// Writes the job's Framework as it is now, durably (synced); returns once it is on
    /// disk. For every decision: acceptance, an attempt's start, completion, stop.
    async fn persist(&self, job: &Job) -> Result<(), Error> {
        self.save(job, true).await
    }

    /// Writes the job's Framework as it is now, atomically but not synced: for task
    /// progress, which a restart re-derives (the attempt is then failed and retried).
    async fn record(&self, job: &Job) -> Result<(), Error> {
        self.save(job, false).await
    }

    async fn save(&self, job: &Job, durable: bool) -> Result<(), Error> {
        let _order = job.save.lock().await;
        let snapshot = job.framework().clone();
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.save(&snapshot, durable))
            .await
            .map_err(|e| Error::Other(format!("saving the job: {e}")))?
            .map_err(|e| Error::Other(e.to_string()))?;
        job.changed.send_modify(|v| *v += 1);
        Ok(())
    }
}

/// The Frameworks of this machine and the controllers running them.
pub struct Machine {
    inner: Arc<Inner>,
}

impl Machine {
    /// Opens the state directory, ends whatever tasks a previous server left, completes
    /// their attempts as failed ("server restarted") and resumes every job.
    /// Must run inside a multi-threaded Tokio runtime whose worker threads live as long
    /// as the server (tasks die with the thread that started them).
    pub async fn open(settings: Settings) -> Result<Self, Error> {
        raise_open_files_limit();
        let store = Store::open(&settings.state_dir).map_err(|e| Error::Other(e.to_string()))?;
        // Only now, with the state directory's lock held: a second server refused above
        // must not rewrite the scripts of the first one's tasks.
        let assets = match &settings.assets {
            Assets::Dir(dir) => dir.clone(),
            Assets::Embedded => assets::unpack(&settings.state_dir).map_err(|e| {
                Error::Other(format!(
                    "cannot write the runtime's prep/ and init/ scripts under {}: {e}",
                    settings.state_dir.display()
                ))
            })?,
        };
        let host_env = HOST_ENV
            .iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
            .collect();
        let spawner = procs::Spawner::start(SPAWNING_THREADS)
            .map_err(|e| Error::Other(format!("cannot start the spawning threads: {e}")))?;
        let inner = Arc::new(Inner {
            store: store.clone(),
            settings,
            assets,
            observed: metrics::Observed::default(),
            host_env,
            spawner,
            jobs: Mutex::new(BTreeMap::new()),
            unreadable: Mutex::new(BTreeMap::new()),
        });
        let (frameworks, unreadable) = tokio::task::spawn_blocking(move || store.load_all())
            .await
            .map_err(|e| Error::Other(format!("reading the state directory: {e}")))?
            .map_err(|e| Error::Other(e.to_string()))?;
        inner
            .unreadable()
            .extend(unreadable.into_iter().map(|u| (u.name, u.reason)));
        for framework in frameworks {
            let (job, commands) = insert(&inner, framework)?;
            controller::end_leftovers(&inner, &job).await;
            spawn_controller(&inner, job, commands);
        }
        Ok(Self { inner })
    }
}

/// Threads that start tasks' processes: two keep a fork in flight while another
/// thread waits for its child's `execve`.
const SPAWNING_THREADS: usize = 2;

/// Lifts the soft limit of open files to the hard one: an attempt holds a socket per
/// port of every task while it hands ports out (two per task at least), and 1,024 is a
/// common soft default.
fn raise_open_files_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
        && let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
    {
        tracing::warn!(soft, hard, error = %e, "cannot raise the open-files limit; large jobs may not get their ports");
    }
}

/// Registers a job (its name must be free); returns it with its command channel.
fn insert(
    inner: &Arc<Inner>,
    framework: Framework,
) -> Result<(Arc<Job>, mpsc::UnboundedReceiver<Command>), Error> {
    let name = framework.metadata.name.clone().unwrap_or_default();
    if let Some(reason) = inner.unreadable().get(&name) {
        return Err(Error::Conflict(format!(
            "the job directory of Framework {name} exists but cannot be read ({reason}); move it away to reuse the name"
        )));
    }
    let mut jobs = inner.jobs();
    if let Some(existing) = jobs.get(&name) {
        let what = if existing.is_deleting() {
            "is still being deleted"
        } else {
            "already exists"
        };
        return Err(Error::Conflict(format!("Framework {name} {what}")));
    }
    let (commands, receiver) = mpsc::unbounded_channel();
    let job = Arc::new(Job {
        framework: Mutex::new(framework),
        save: tokio::sync::Mutex::new(()),
        changed: watch::channel(0).0,
        commands,
        deleting: false.into(),
        gone: false.into(),
    });
    jobs.insert(name, job.clone());
    Ok((job, receiver))
}

fn spawn_controller(inner: &Arc<Inner>, job: Arc<Job>, commands: mpsc::UnboundedReceiver<Command>) {
    tokio::spawn(controller::drive(inner.clone(), job, commands));
}

/// A random UID in the form Kubernetes gives objects.
pub(crate) fn uid() -> String {
    let mut bytes = [0u8; 16];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// The task of job `framework` that pod `pod` names: its role and index.
fn task_of_pod(framework: &Framework, pod: &str) -> Option<(String, u32)> {
    let name = framework.metadata.name.as_deref()?;
    framework.spec.task_roles.iter().find_map(|role| {
        let index = pod
            .strip_prefix(&format!("{name}-{}-", role.name))?
            .parse::<u32>()
            .ok()?;
        (i64::from(index) < i64::from(role.task_number) && pod_name(name, &role.name, index) == pod)
            .then(|| (role.name.clone(), index))
    })
}

impl Machine {
    /// Which backend, where its state is.
    pub fn describe(&self) -> String {
        format!(
            "this machine (embedded default), state in {}",
            self.inner.store.root().display()
        )
    }

    /// Accepts a Framework and its ssh key pair: on disk before this returns, then run.
    pub async fn create(&self, mut framework: Framework, key: JobKey) -> Result<(), Error> {
        {
            framework.metadata.uid = Some(uid());
            framework.metadata.creation_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
            );
            framework.status = None;
            let tasks: u64 = framework
                .spec
                .task_roles
                .iter()
                .map(|r| u64::from(r.tasks()))
                .sum();
            let limit = self.inner.settings.max_tasks;
            if tasks > u64::from(limit) {
                return Err(Error::Refused(format!(
                    "the job has {tasks} tasks; this machine runs at most {limit} tasks per job (rest-lite serve --max-tasks, or REST_LITE_MAX_TASKS; the default is 500 per CPU core, at most one per 8 MiB of memory): submit it to a cluster, or make it smaller"
                )));
            }
            let (job, commands) = insert(&self.inner, framework)?;
            // On disk before the caller is told.
            let store = self.inner.store.clone();
            let name = job.name();
            let saved_key = tokio::task::spawn_blocking(move || store.save_key(&name, &key))
                .await
                .map_err(|e| Error::Other(format!("saving the job's key: {e}")))
                .and_then(|r| r.map_err(|e| Error::Other(e.to_string())));
            if let Err(e) = saved_key {
                self.inner.jobs().remove(&job.name());
                return Err(e);
            }
            if let Err(e) = self.inner.persist(&job).await {
                self.inner.jobs().remove(&job.name());
                return Err(e);
            }
            spawn_controller(&self.inner, job, commands);
            Ok(())
        }
    }

    /// The private key of job `name`'s key pair (jobs made before keys were have none).
    pub fn ssh_key(&self, name: &str) -> Option<String> {
        self.inner.visible(name)?;
        self.inner.store.key(name)
    }

    /// The Framework `name` as it is now.
    pub fn get(&self, name: &str) -> Option<Framework> {
        self.inner.visible(name).map(|j| j.framework().clone())
    }

    /// Every Framework of `user` (by its label), or of everybody.
    pub fn list(&self, user: Option<&str>) -> Vec<Framework> {
        {
            self.inner
                .visible_jobs()
                .iter()
                .map(|j| j.framework())
                .filter(|f| {
                    user.is_none_or(|u| {
                        f.metadata
                            .labels
                            .as_ref()
                            .and_then(|l| l.get(pai_contract::meta::LABEL_USER))
                            .is_some_and(|v| v == u)
                    })
                })
                .map(|f| f.clone())
                .collect()
        }
    }

    /// Sets the Framework's `executionType` (Stop ends every task; Start changes
    /// nothing: a completed job is not restarted).
    pub async fn set_execution(&self, name: &str, execution: ExecutionType) -> Result<(), Error> {
        {
            let job = self.inner.visible(name).ok_or(Error::NotFound)?;
            if execution == ExecutionType::Stop {
                let changed = {
                    let mut framework = job.framework();
                    let changed = framework.spec.execution_type != ExecutionType::Stop;
                    framework.spec.execution_type = ExecutionType::Stop;
                    changed
                };
                if changed {
                    self.inner.persist(&job).await?;
                    let _ = job.commands.send(Command::Stop);
                }
            }
            Ok(())
        }
    }

    /// The container log of the task whose pod is `pod`: of the current attempt (with
    /// `follow`, until the task completes), or all of `earlier`'s, kept on this machine
    /// until the job is deleted.
    pub fn logs(&self, pod: &str, follow: bool, earlier: Option<i32>) -> Result<LogStream, Error> {
        let (job, role, index) = self.task_of(pod)?;
        controller::log_stream(&self.inner, job, role, index, follow, earlier)
    }

    /// The visible job, role and index pod `pod` is a task of.
    fn task_of(&self, pod: &str) -> Result<(Arc<Job>, String, u32), Error> {
        self.inner
            .visible_jobs()
            .into_iter()
            .find_map(|j| {
                let (role, index) = task_of_pod(&j.framework(), pod)?;
                Some((j, role, index))
            })
            .ok_or(Error::NotFound)
    }

    /// What this machine measured of the tasks it started.
    pub fn observed(&self) -> &metrics::Observed {
        &self.inner.observed
    }

    /// The last `max_bytes` of pod `pod`'s log in the current attempt.
    pub fn log_end(&self, pod: &str, max_bytes: u64) -> Result<Vec<u8>, Error> {
        let (job, role, index) = self.task_of(pod)?;
        controller::log_end(&self.inner, &job, &role, index, max_bytes)
    }

    /// The Framework `name` now and after every change, until it is deleted.
    pub fn watch(&self, name: &str) -> Result<FrameworkStream, Error> {
        {
            let job = self.inner.visible(name).ok_or(Error::NotFound)?;
            let changed = job.changed.subscribe();
            // (job, changes, the deletion was told, the first look). As on Kubernetes,
            // the deletion is told once the name is free again; a job being deleted shows
            // nothing more (its tasks' ends are not the job's outcome).
            let stream = futures::stream::unfold(
                (job, changed, false, true),
                |(job, mut changed, told, mut first)| async move {
                    if told {
                        return None;
                    }
                    loop {
                        if !first && changed.changed().await.is_err() {
                            return None;
                        }
                        first = false;
                        changed.borrow_and_update();
                        if job.is_gone() {
                            return Some((Ok(None), (job, changed, true, false)));
                        }
                        if !job.is_deleting() {
                            let framework = job.framework().clone();
                            return Some((Ok(Some(framework)), (job, changed, false, false)));
                        }
                    }
                },
            );
            Ok(Box::pin(stream) as FrameworkStream)
        }
    }

    /// Deletes the job: its tasks are ended, then its files go, then its name is free.
    pub fn delete(&self, name: &str) -> Result<(), Error> {
        {
            let job = self.inner.visible(name).ok_or(Error::NotFound)?;
            job.deleting
                .store(true, std::sync::atomic::Ordering::SeqCst);
            let _ = job.commands.send(Command::Delete);
            job.changed.send_modify(|v| *v += 1);
            Ok(())
        }
    }
}
