//! The embedded default: Frameworks run on this machine, behind the same API as on
//! Kubernetes. Each task is a process tree started through the real runtime (`entry`,
//! then `run`), peers meet at the same barrier (over the attempt's peer table, a file
//! written once before any task starts), and
//! FrameworkController's rules decide completions and retries ([`policy`]). Every change
//! is written ([`store`]) before it is told, and every decision (acceptance, an attempt's
//! addresses, a completion, a stop) is synced; a restarted server finds every job, ends
//! what was left running and fails-and-retries those attempts.

pub mod assets;
pub mod backend;
mod cold;
pub mod containers;
pub mod cpu_group;
mod job_loop;

pub use job_loop::WHERE_IT_RAN;
mod error;
pub mod gpus;
mod job;
pub mod lifecycle;
pub mod log_rotation;
mod log_times;
mod logs;
pub use logs::{Reading as LogReading, Which as LogWhich};
pub mod metrics;
/// Tests that fork hold this, and so does the one that checks the ports it was given are
/// free: a child holds its parent's sockets between fork and exec.
#[cfg(test)]
static FORKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
pub mod policy;
pub mod ports;
pub mod procs;
mod program;
pub mod retention;
mod settings;
mod slots;
pub mod storages;
pub mod store;
pub mod task;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use pai_contract::Framework;
use pai_contract::framework::{ExecutionType, pod_name};
use pai_job::ssh_key::JobKey;

use job::{Command, Inner, Job, uid};
use store::Store;

pub use error::{Error, FrameworkStream, LogStream};
pub use settings::{
    Assets, ContainerSettings, DEFAULT_PORTS, RUNTIME_COMMAND, Settings, as_embedded_runtime,
    default_max_tasks, default_state_dir,
};
pub use slots::Queued;

/// Variables of the server's environment every task gets (a pod gets its image's).
const HOST_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "RUST_LOG",
];

/// The Frameworks of this machine and the loops running them.
pub struct Machine {
    inner: Arc<Inner>,
}

impl Machine {
    /// Opens the state directory, ends whatever tasks a previous server left, completes
    /// their attempts as failed ("server restarted") and resumes every job.
    /// Must run inside a multi-threaded Tokio runtime whose worker threads live as long
    /// as the server (tasks die with the thread that started them).
    pub async fn open(mut settings: Settings) -> Result<Self, Error> {
        raise_open_files_limit();
        // Before the jobs' threads: the keeper's gets an arena of its own.
        pai_backend::memory::keeper::start();
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
        let static_runtime = static_runtime(&settings).await?;
        // Tasks on the host run the static runtime too, where this binary carries one
        // and no other was named: the program of pods and containers, which starts at a
        // third of this binary's cost (its relocations and page faults), twice per task,
        // at `entry` and at `run` (BENCHMARKS.md, "The embedded default's start").
        if let Some(path) = &static_runtime
            && settings.runtime.is_embedded()
        {
            settings.runtime = task::Runtime::binary(path);
        }
        settings.runtime.program =
            program::beside_state(&settings.runtime.program, &settings.state_dir).map_err(|e| {
                Error::Other(format!(
                    "cannot put the task runtime {} beside the state directory {}: {e}",
                    settings.runtime.program.display(),
                    settings.state_dir.display()
                ))
            })?;
        let isolation = isolation(&settings, static_runtime).await?;
        tracing::info!("{}", isolation.describe());
        let host_env = HOST_ENV
            .iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
            .collect();
        let cpu_group = tokio::task::spawn_blocking(cpu_group::TaskGroup::create)
            .await
            .map_err(|e| e.to_string())
            .and_then(|created| created);
        let cpu_group = match cpu_group {
            Ok(group) => {
                tracing::info!(
                    group = %group.dir().display(),
                    "tasks share the CPU with this server as one group"
                );
                Some(Arc::new(group))
            }
            Err(why) => {
                tracing::info!(
                    "tasks share the CPU with this server process by process, so a large job starting slows its answers: {why}"
                );
                None
            }
        };
        let spawner = procs::Spawner::start(SPAWNING_THREADS)
            .map_err(|e| Error::Other(format!("cannot start the spawning threads: {e}")))?;
        let slots = slots::Slots::new(settings.max_tasks, settings.gpus.clone());
        let settings_rotation = settings.log_rotation;
        let ports = ports::Ports::new(settings.ports.clone(), job_loop::LOCAL_ADDRESS);
        let inner = Arc::new(Inner {
            store: store.clone(),
            settings,
            assets,
            observed: metrics::Observed::default(),
            host_env,
            spawner,
            jobs: Mutex::new(BTreeMap::new()),
            slots,
            changes: tokio::sync::broadcast::channel(4096).0,
            ports,
            unreadable: Mutex::new(BTreeMap::new()),
            isolation,
            cpu_group,
            logs: log_rotation::Logs::new(settings_rotation),
            trimmer: Default::default(),
        });
        // One look at every running task's log now and then: rotated past its size.
        {
            let logs = Arc::downgrade(&inner.logs);
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(log_rotation::SWEEP_EVERY);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let Some(logs) = logs.upgrade() else { return };
                    let _ = tokio::task::spawn_blocking(move || logs.sweep()).await;
                }
            });
        }
        let (loaded, unreadable) = tokio::task::spawn_blocking(move || store.load_all())
            .await
            .map_err(|e| Error::Other(format!("reading the state directory: {e}")))?
            .map_err(|e| Error::Other(e.to_string()))?;
        inner
            .unreadable()
            .extend(unreadable.into_iter().map(|u| (u.name, u.reason)));
        let mut frameworks = Vec::new();
        let mut cold = Vec::new();
        for job in loaded {
            match job {
                store::Loaded::Hot(framework) => frameworks.push(*framework),
                store::Loaded::Cold { name, cold: kept } => cold.push((name, kept)),
            }
        }
        // Finished jobs stay cold: no loop until a command comes. Nothing of their
        // tasks is left to end: an attempt completes only once every task has ended.
        for (name, kept) in cold {
            register(&inner, &name, Job::new_cold(name.clone(), kept))?;
        }
        let mut adopted = match inner.isolation.engine() {
            Some(engine) => job_loop::follow_or_remove(&inner, engine, &frameworks).await,
            None => Default::default(),
        };
        let mut resumed = Vec::new();
        for framework in frameworks {
            let deleted = framework.metadata.deletion_timestamp.is_some();
            let adoption = adopted.remove(framework.metadata.name.as_deref().unwrap_or_default());
            let adopt = adoption.is_some();
            // A followed attempt's tasks hold their slots and GPUs still, and an attempt
            // the restart ends held GPUs its replacement takes again: both taken here,
            // before any other job may ask for them.
            let resume = if deleted {
                job_loop::Resume::Fresh
            } else if let Some(adoption) = adoption {
                job_loop::Resume::Follow(
                    inner.slots.hold_exactly(job_loop::need_of(&framework)),
                    adoption,
                )
            } else if held_gpus(&framework) {
                match inner.slots.ask(job_loop::need_of(&framework)).await {
                    slots::Asked::Held(held) => job_loop::Resume::Carry(held),
                    _ => job_loop::Resume::Fresh,
                }
            } else {
                job_loop::Resume::Fresh
            };
            let (job, commands) = insert(&inner, framework)?;
            if !adopt {
                job_loop::end_leftovers(&inner, &job).await;
            }
            if deleted {
                // Deleted before the restart (the deletion is saved before it is
                // answered): finished before anyone can ask, so the name is free.
                job_loop::remove(&inner, &job).await;
            } else {
                resumed.push((job, commands, resume));
            }
        }
        for (job, commands, resume) in resumed {
            spawn_job_loop(&inner, job, commands, resume);
        }
        let local = Self { inner };
        // Finished jobs past the retention, and finished tasks' run-only files past
        // theirs: at start, as jobs change (a second apart at most), and once a minute
        // (a bound by age passes without a change).
        {
            let weak = Arc::downgrade(&local.inner);
            let mut changes = local.inner.changes.subscribe();
            tokio::spawn(async move {
                use tokio::sync::broadcast::error::RecvError;
                let mut tick = tokio::time::interval(retention::SWEEP_EVERY);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut changed_meanwhile = false;
                loop {
                    if !changed_meanwhile {
                        tokio::select! {
                            _ = tick.tick() => {}
                            changed = changes.recv() => {
                                if matches!(changed, Err(RecvError::Closed)) {
                                    return;
                                }
                            }
                        }
                    }
                    let Some(inner) = weak.upgrade() else { return };
                    Self { inner }.enforce_retention().await;
                    tokio::time::sleep(retention::AT_MOST_EVERY).await;
                    // Every change said meanwhile asks for one more look, at once.
                    match retention::drain(&mut changes) {
                        Some(any) => changed_meanwhile = any,
                        None => return,
                    }
                }
            });
        }
        Ok(local)
    }

    /// Deletes the finished jobs past the retention, oldest end first, and lets the
    /// tasks of those that ended longer ago than the retention's `task_files_kept` keep
    /// only their logs and results; how many jobs were deleted.
    pub async fn enforce_retention(&self) -> usize {
        let settings = self.inner.settings.retention;
        let now = jiff::Timestamp::now().as_millisecond();
        let files_until = now.saturating_sub(
            i64::try_from(settings.task_files_kept.as_millis()).unwrap_or(i64::MAX),
        );
        let mut settle = Vec::new();
        let visible = self.inner.visible_jobs();
        // Finished jobs go cold (a finished one a reader made whole again too), on the
        // keeper's thread: what a cold job keeps is made there, beside the others', not
        // among the running jobs' blocks (see `pai_backend::memory::keeper`).
        let thawed: Vec<Arc<Job>> = visible
            .iter()
            .filter(|job| !job.is_cold() && job.ended_ms().is_some())
            .cloned()
            .collect();
        if !thawed.is_empty() {
            // What the jobs held, and the list, are dropped here, where they were made.
            let (frozen, _held, _thawed) = pai_backend::memory::keeper::make(move || {
                let (frozen, held): (Vec<_>, Vec<_>) = thawed
                    .iter()
                    .filter_map(|job| Some((job.shared_name(), job.freeze()?)))
                    .unzip();
                (frozen, held, thawed)
            })
            .await;
            for name in frozen {
                let _ = self.inner.changes.send((name, false));
                self.inner.trimmer.jobs_ended();
            }
        }
        let finished: Vec<(i64, String)> = visible
            .iter()
            .filter_map(|job| {
                // A cold job answers without being made whole.
                let ended = job.ended_ms()?;
                let name = job.name();
                if ended <= files_until
                    && !job.settled.swap(true, std::sync::atomic::Ordering::SeqCst)
                {
                    settle.push(name.clone());
                }
                Some((ended, name))
            })
            .collect();
        if !settle.is_empty() {
            let store = self.inner.store.clone();
            let _ = tokio::task::spawn_blocking(move || {
                for name in settle {
                    store.settle_finished(&name);
                }
            })
            .await;
        }
        // What the jobs that went cold freed, back to the system (after a burst of jobs,
        // most of what they took: see `pai_backend::memory`).
        if self.inner.trimmer.due() {
            let _ = tokio::task::spawn_blocking(pai_backend::memory::trim::trim).await;
        }
        let past = retention::past(settings.bounds, finished, now);
        let mut deleted = 0;
        for name in past {
            match self.delete(&name).await {
                Ok(()) => deleted += 1,
                Err(e) => {
                    tracing::warn!(job = %name, error = %e, "cannot delete a job past the retention")
                }
            }
        }
        if deleted > 0 {
            tracing::info!(deleted, "finished jobs past the retention deleted");
        }
        deleted
    }
}

/// The static runtime this binary carries, written to the state directory (once per
/// content: a server started again on the same build rewrites nothing); `None` for a build
/// without one, or where nothing would run it: tasks kept on the host (`--engine host`)
/// that run another runtime (`--runtime`).
async fn static_runtime(settings: &Settings) -> Result<Option<PathBuf>, Error> {
    let Some(bytes) = settings.containers.runtime else {
        return Ok(None);
    };
    let on_host_only = settings.containers.choice == containers::EngineChoice::Host;
    if on_host_only && !settings.runtime.is_embedded() {
        return Ok(None);
    }
    let path = settings.state_dir.join("kube-runtime");
    let target = path.clone();
    tokio::task::spawn_blocking(move || assets::write_executable(&target, bytes))
        .await
        .map_err(|e| Error::Other(e.to_string()))?
        .map_err(|e| Error::Other(format!("cannot write the runtime {}: {e}", path.display())))?;
    Ok(Some(path))
}

/// Container mode or the host, as the settings and this machine decide; `runtime_binary`:
/// the static runtime containers run, if this build carries one.
async fn isolation(
    settings: &Settings,
    runtime_binary: Option<PathBuf>,
) -> Result<containers::Isolation, Error> {
    let containers = &settings.containers;
    containers::detect(containers::Detect {
        choice: containers.choice,
        oci_runtime: containers.oci_runtime.clone(),
        docker_host: std::env::var("DOCKER_HOST").ok(),
        runtime_binary,
        state_dir: &settings.state_dir,
        outlive_server: containers.outlive_server,
        on_host: containers.on_host.clone(),
    })
    .await
    .map_err(Error::Other)
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
    let (commands, receiver) = mpsc::unbounded_channel();
    let job = register(inner, &name, Job::new(framework, commands))?;
    Ok((job, receiver))
}

/// Registers `job` as `name`, which must be free.
fn register(inner: &Arc<Inner>, name: &str, job: Job) -> Result<Arc<Job>, Error> {
    let mut jobs = inner.jobs();
    if let Some(existing) = jobs.get(name) {
        let what = if existing.is_deleting() {
            "is still being deleted"
        } else {
            "already exists"
        };
        return Err(Error::Conflict(format!("Framework {name} {what}")));
    }
    let job = Arc::new(job);
    jobs.insert(name.to_string(), job.clone());
    Ok(job)
}

/// Sends `command` to `job`'s loop, starting one where the job has none (a
/// finished job's ended); false when the job is being removed (its loop ended for
/// that). Under the job's lock of its commands, so that a loop that ends and one
/// that starts never both run.
fn command(inner: &Arc<Inner>, job: &Arc<Job>, command: Command) -> bool {
    let mut sender = job.commands();
    match sender.as_ref() {
        Some(running) => running.send(command).is_ok(),
        None => {
            let (commands, receiver) = mpsc::unbounded_channel();
            let sent = commands.send(command).is_ok();
            *sender = Some(commands);
            spawn_job_loop(inner, job.clone(), receiver, job_loop::Resume::Fresh);
            sent
        }
    }
}

fn spawn_job_loop(
    inner: &Arc<Inner>,
    job: Arc<Job>,
    commands: mpsc::UnboundedReceiver<Command>,
    resume: job_loop::Resume,
) {
    tokio::spawn(job_loop::drive(inner.clone(), job, commands, resume));
}

/// Whether `framework`'s open attempt held GPUs when the previous server ended.
fn held_gpus(framework: &Framework) -> bool {
    use pai_contract::framework::FrameworkState;
    let open = framework.status.as_ref().is_some_and(|s| {
        !matches!(
            s.state,
            FrameworkState::Completed | FrameworkState::AttemptCompleted
        )
    });
    open && gpus::Assignment::of(framework).is_some_and(|a| {
        a.attempt == framework.attempt_id() && a.tasks.values().flatten().any(|t| !t.is_empty())
    })
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
    /// Whether tasks run in containers or on the host.
    pub fn isolation(&self) -> &containers::Isolation {
        &self.inner.isolation
    }

    /// Which backend, where its state is.
    pub fn describe(&self) -> String {
        format!(
            "this machine (embedded default), state in {}; {}",
            self.inner.store.root().display(),
            self.inner.isolation.describe()
        )
    }

    /// Whether this machine can run `framework` at all: its task count, its storages, its
    /// GPUs. A submission and its dry run (the portal's Check) ask the same.
    pub fn admit(&self, framework: &Framework) -> Result<(), Error> {
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
        if let Some(why) = storages::refusal(
            framework,
            &self.inner.settings.storages.current(),
            self.inner.isolation.engine().is_some(),
        ) {
            return Err(Error::Refused(why));
        }
        let need = job_loop::need_of(framework);
        let per_task: Vec<u32> = need.tasks.iter().map(|t| t.2).collect();
        if let Some(why) = self
            .inner
            .settings
            .gpus
            .refusal(&per_task, need.gpu_type.as_deref())
        {
            return Err(Error::Refused(why));
        }
        Ok(())
    }

    /// Accepts a Framework and its ssh key pair: on disk before this returns, then run.
    pub async fn create(&self, mut framework: Framework, key: JobKey) -> Result<(), Error> {
        {
            framework.metadata.uid = Some(uid());
            framework.metadata.creation_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
            );
            framework.status = None;
            self.admit(&framework)?;
            // Its entry in the registry, kept as long as the job, made on the keeper's
            // thread (see `pai_backend::memory::keeper`).
            let inner = self.inner.clone();
            let (job, commands) =
                pai_backend::memory::keeper::make(move || insert(&inner, framework)).await?;
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
            spawn_job_loop(&self.inner, job, commands, job_loop::Resume::Fresh);
            Ok(())
        }
    }

    /// One file of job `name`'s key material (`training::JOB_KEY_FILE`, …): jobs made
    /// before keys, or host keys, were have none.
    pub fn ssh_key(&self, name: &str, file: &str) -> Option<String> {
        self.inner.visible(name)?;
        self.inner.store.key(name, file)
    }

    /// The Framework `name` as it is now.
    pub fn get(&self, name: &str) -> Option<Arc<Framework>> {
        self.inner.visible(name).map(|j| j.current())
    }

    /// This machine's GPUs and GPU types.
    pub fn gpus(&self) -> &gpus::Gpus {
        &self.inner.settings.gpus
    }

    /// Why job `name` waits for this machine's task slots, while it does.
    pub fn queued(&self, name: &str) -> Option<Queued> {
        self.inner.visible(name)?.queued()
    }

    /// Every Framework of `user` (by its label), or of everybody: each as it is now,
    /// shared, not copied.
    pub fn list(&self, user: Option<&str>) -> Vec<Arc<Framework>> {
        {
            self.inner
                .visible_jobs()
                .iter()
                .filter(|j| !j.is_cold())
                .map(|j| j.current())
                .filter(|f| {
                    user.is_none_or(|u| {
                        f.metadata
                            .labels
                            .as_ref()
                            .and_then(|l| l.get(pai_contract::meta::LABEL_USER))
                            .is_some_and(|v| v == u)
                    })
                })
                .map(|f| Arc::clone(&f))
                .collect()
        }
    }

    /// The list row of finished job `name` while it is cold (its Framework kept
    /// deflated, see `Job::freeze`).
    pub fn cold_row(&self, name: &str) -> Option<Arc<pai_api::jobs::JobRow>> {
        self.inner.visible(name)?.cold_row()
    }

    /// Every cold job's list row, by Framework name.
    pub fn cold_rows(&self) -> Vec<(String, Arc<pai_api::jobs::JobRow>)> {
        self.inner
            .visible_jobs()
            .iter()
            .filter_map(|j| Some((j.name(), j.cold_row()?)))
            .collect()
    }

    /// The name of each job as it changes (saved, deleted, removed), and whether it
    /// names jobs it waits for; a receiver that falls 4,096 changes behind is told it
    /// lagged.
    pub fn changes(&self) -> tokio::sync::broadcast::Receiver<(Arc<str>, bool)> {
        self.inner.changes.subscribe()
    }

    /// `read` of the Framework `name` as it is now, without a copy of it.
    pub fn inspect<T>(&self, name: &str, read: impl FnOnce(&Framework) -> T) -> Option<T> {
        let job = self.inner.visible(name)?;
        Some(read(&job.current()))
    }

    /// Lets job `name`, which waited for other jobs, run: marks its dependencies met
    /// (saved) and wakes its loop. Nothing when it was released already.
    pub async fn release(&self, name: &str) -> Result<(), Error> {
        let job = self.inner.visible(name).ok_or(Error::NotFound)?;
        {
            let mut guard = job.framework();
            if pai_job::depends::released(&guard) {
                return Ok(());
            }
            Arc::make_mut(&mut guard)
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(
                    pai_job::depends::RELEASED.to_string(),
                    jiff::Timestamp::now().to_string(),
                );
        }
        self.inner.persist(&job).await?;
        job.released.notify_one();
        Ok(())
    }

    /// Ends job `name`, which waited for other jobs, FAILED: says why on it and stops it.
    pub async fn refuse(&self, name: &str, why: &str) -> Result<(), Error> {
        let job = self.inner.visible(name).ok_or(Error::NotFound)?;
        Arc::make_mut(&mut job.framework())
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(pai_job::depends::FAILED.to_string(), why.to_string());
        // Saved whether or not the job was being stopped already.
        self.inner.persist(&job).await?;
        self.set_execution(name, ExecutionType::Stop).await
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
                    if changed {
                        Arc::make_mut(&mut framework).spec.execution_type = ExecutionType::Stop;
                    }
                    changed
                };
                if changed {
                    self.inner.persist(&job).await?;
                    command(&self.inner, &job, Command::Stop);
                }
            }
            Ok(())
        }
    }

    /// Changes job `name`'s annotations by `change` under the job's lock, and keeps the
    /// result when `change` says it changed something (`Ok(true)`); `change`'s own error
    /// changes nothing.
    pub async fn annotate<E>(
        &self,
        name: &str,
        change: impl FnOnce(&mut std::collections::BTreeMap<String, String>) -> Result<bool, E>,
    ) -> Result<Result<bool, E>, Error> {
        let job = self.inner.visible(name).ok_or(Error::NotFound)?;
        let outcome = {
            let mut framework = job.framework();
            let mut annotations = framework.metadata.annotations.clone().unwrap_or_default();
            let outcome = change(&mut annotations);
            if matches!(outcome, Ok(true)) {
                Arc::make_mut(&mut framework).metadata.annotations = Some(annotations);
            }
            outcome
        };
        if matches!(outcome, Ok(true)) {
            self.inner.persist(&job).await?;
        }
        Ok(outcome)
    }

    /// The container log of the task whose pod is `pod`, or one stream of its output,
    /// as `reading` asks: of the current attempt (with `follow`, until the task
    /// completes), or all of an earlier one's, kept on this machine until the job is
    /// deleted.
    pub fn logs(&self, pod: &str, reading: logs::Reading) -> Result<LogStream, Error> {
        let (job, role, index) = self.task_of(pod)?;
        logs::log_stream(&self.inner, job, role, index, reading)
    }

    /// The visible job, role and index pod `pod` is a task of.
    fn task_of(&self, pod: &str) -> Result<(Arc<Job>, String, u32), Error> {
        // A pod's name begins with its Framework's, which holds no `-`.
        let job = self
            .inner
            .visible(pai_contract::kept_logs::framework_of(pod))
            .ok_or(Error::NotFound)?;
        let (role, index) = task_of_pod(&job.current(), pod).ok_or(Error::NotFound)?;
        Ok((job, role, index))
    }

    /// What this machine measured of the tasks it started.
    pub fn observed(&self) -> &metrics::Observed {
        &self.inner.observed
    }

    /// The last `max_bytes` of pod `pod`'s log in the current attempt.
    pub fn log_end(&self, pod: &str, max_bytes: u64) -> Result<Vec<u8>, Error> {
        let (job, role, index) = self.task_of(pod)?;
        logs::log_end(&self.inner, &job, &role, index, max_bytes)
    }

    /// What was rotated away of pod `pod`'s current log, if anything.
    pub fn log_rotated(&self, pod: &str) -> Option<String> {
        let (job, role, index) = self.task_of(pod).ok()?;
        logs::rotated_away(&self.inner, &job, &role, index)
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
                        let visible = {
                            let framework = job.current();
                            framework
                                .metadata
                                .deletion_timestamp
                                .is_none()
                                .then(|| framework.clone())
                        };
                        if let Some(framework) = visible {
                            return Some((Ok(Some(framework)), (job, changed, false, false)));
                        }
                    }
                },
            );
            Ok(Box::pin(stream) as FrameworkStream)
        }
    }

    /// Deletes the job: returns once the deletion is saved (a server killed after that
    /// finishes it when it starts again); then its tasks are ended, its files go and its
    /// name is free.
    pub async fn delete(&self, name: &str) -> Result<(), Error> {
        let job = self.inner.visible(name).ok_or(Error::NotFound)?;
        let (saved, answer) = tokio::sync::oneshot::channel();
        if !command(&self.inner, &job, Command::Delete(saved)) {
            // Its loop has ended: it is being removed already.
            return Ok(());
        }
        // No answer: the loop ended first, the job is gone.
        let _ = answer.await;
        Ok(())
    }
}
