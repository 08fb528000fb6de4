//! One job of this machine (its Framework, saves and commands) and the registry of all
//! of them that the server's requests and the job loops share.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use pai_contract::Framework;
use tokio::sync::{mpsc, watch};

use crate::cold::Cold;
use crate::error::Error;
use crate::settings::Settings;
use crate::store::Store;
use crate::{metrics, procs};

/// What the server asks a job's loop.
pub(crate) enum Command {
    Stop,
    /// Answered once the deletion is saved.
    Delete(tokio::sync::oneshot::Sender<()>),
}

pub(crate) struct Job {
    /// Shared with readers as it is: a change makes a new one ([`Arc::make_mut`]), so a
    /// reader's copy is a version, and the server's views of it are made once. While the
    /// job is cold ([`Job::freeze`]) a placeholder; [`Job::framework`] never shows it.
    framework: Mutex<Arc<Framework>>,
    /// A finished job's Framework while nothing uses it: its JSON, deflated (about a
    /// tenth of it in memory), made whole again by the next reader.
    cold: Mutex<Option<Cold>>,
    is_cold: std::sync::atomic::AtomicBool,
    /// A cold job's end (ms since the epoch).
    ended: std::sync::atomic::AtomicI64,
    /// Its Framework's name (which never changes), known without its Framework; shared
    /// by the changes said of it ([`Inner::changes`]), which so make nothing.
    name: Arc<str>,
    /// Held while a snapshot is written, so saves land in order.
    pub(crate) save: tokio::sync::Mutex<()>,
    /// Bumped after every save.
    pub(crate) changed: watch::Sender<u64>,
    /// Where its loop reads commands; `None` while it has none (a finished job's
    /// loop ends, and its memory goes: [`crate::Machine`] starts one again for
    /// the next command).
    pub(crate) commands: Mutex<Option<mpsc::UnboundedSender<Command>>>,
    /// Its processes and files are gone and its name is free.
    pub(crate) gone: std::sync::atomic::AtomicBool,
    /// Finished, and its tasks' run-only files are gone
    /// ([`crate::store::Store::settle_finished`]).
    pub(crate) settled: std::sync::atomic::AtomicBool,
    /// Why it waits for this machine's task slots, while it does.
    pub(crate) queued: Mutex<Option<crate::slots::Queued>>,
    /// Told when the jobs it waits for reached their states (see [`crate::Local::release`]).
    pub(crate) released: tokio::sync::Notify,
}

impl Job {
    /// A job of `framework`, its command channel `commands`.
    pub(crate) fn new(framework: Framework, commands: mpsc::UnboundedSender<Command>) -> Self {
        Self {
            name: framework
                .metadata
                .name
                .as_deref()
                .unwrap_or_default()
                .into(),
            framework: Mutex::new(Arc::new(framework)),
            cold: Mutex::new(None),
            is_cold: false.into(),
            ended: 0.into(),
            save: tokio::sync::Mutex::new(()),
            changed: watch::channel(0).0,
            commands: Mutex::new(Some(commands)),
            gone: false.into(),
            settled: false.into(),
            queued: Default::default(),
            released: tokio::sync::Notify::new(),
        }
    }

    /// A cold job (no loop) named `name`.
    pub(crate) fn new_cold(name: String, cold: Cold) -> Self {
        let ended = cold.ended_ms();
        Self {
            name: name.into(),
            framework: Mutex::new(placeholder()),
            cold: Mutex::new(Some(cold)),
            is_cold: true.into(),
            ended: ended.into(),
            save: tokio::sync::Mutex::new(()),
            changed: watch::channel(0).0,
            commands: Mutex::new(None),
            gone: false.into(),
            settled: false.into(),
            queued: Default::default(),
            released: tokio::sync::Notify::new(),
        }
    }

    /// The Framework as it is now (made whole first if the job was cold).
    pub(crate) fn framework(&self) -> MutexGuard<'_, Arc<Framework>> {
        let mut guard = self.framework.lock().unwrap_or_else(|e| e.into_inner());
        if self.is_cold.load(std::sync::atomic::Ordering::Acquire) {
            self.thaw(&mut guard);
        }
        guard
    }

    /// The Framework as it is now, for a reader: a cold job's is read back for the
    /// caller alone, and the job stays cold.
    pub(crate) fn current(&self) -> Arc<Framework> {
        let guard = self.framework.lock().unwrap_or_else(|e| e.into_inner());
        if !self.is_cold() {
            return guard.clone();
        }
        let cold = self.cold.lock().unwrap_or_else(|e| e.into_inner());
        match cold.as_ref().map(Cold::framework) {
            Some(Ok(framework)) => Arc::new(framework),
            _ => {
                drop(cold);
                let mut guard = guard;
                self.thaw(&mut guard);
                guard.clone()
            }
        }
    }

    /// Its list row while it is cold.
    pub(crate) fn cold_row(&self) -> Option<Arc<pai_api::jobs::JobRow>> {
        if !self.is_cold() {
            return None;
        }
        self.cold
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|c| c.row.clone())
    }

    /// When it ended (ms since the epoch), if it did.
    pub(crate) fn ended_ms(&self) -> Option<i64> {
        // Under the lock a freeze holds, so that a job frozen meanwhile is not thawed by
        // this reader (see `is_deleting`).
        let framework = self.framework.lock().unwrap_or_else(|e| e.into_inner());
        if self.is_cold() {
            return Some(self.ended.load(std::sync::atomic::Ordering::Acquire));
        }
        let status = framework.status.as_ref()?;
        framework
            .is_completed()
            .then(|| pai_api::waiting::millis(status.completion_time.as_deref()).unwrap_or(0))
    }

    pub(crate) fn name(&self) -> String {
        self.name.to_string()
    }

    /// Its name, shared: what a change said of it carries.
    pub(crate) fn shared_name(&self) -> Arc<str> {
        self.name.clone()
    }

    /// Deleted (the state machine's record, `deletionTimestamp`): invisible, its name
    /// still taken until its processes and files are gone. A cold job never is.
    pub(crate) fn is_deleting(&self) -> bool {
        // Read under the Framework's lock, which a freeze holds: a job frozen between a
        // look at `is_cold` and the lock would otherwise be thawed by this reader, made
        // whole on its thread until the retention's look froze it again (`cargo bench -p
        // rest-lite --bench kept` found it). A cold job is never being deleted.
        let guard = self.framework.lock().unwrap_or_else(|e| e.into_inner());
        !self.is_cold() && guard.metadata.deletion_timestamp.is_some()
    }

    /// Whether the job is cold now.
    pub(crate) fn is_cold(&self) -> bool {
        self.is_cold.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Keeps a finished job's Framework deflated while nothing uses it: once its
    /// loop ended, and not while it is being deleted. When it froze it, the
    /// Framework it held, for the caller to drop where it was made: run on the keeper's
    /// thread ([`pai_backend::memory::keeper`]), whose freed blocks it would take back one by one
    /// (glibc's per-thread cache) and make what it keeps in them, in the workers' arenas.
    #[must_use]
    pub(crate) fn freeze(&self) -> Option<Arc<Framework>> {
        if self.commands().is_some() {
            return None;
        }
        let mut guard = self.framework.lock().unwrap_or_else(|e| e.into_inner());
        if self.is_cold() || !guard.is_completed() || guard.metadata.deletion_timestamp.is_some() {
            return None;
        }
        let cold = Cold::of(&guard)?;
        self.ended
            .store(cold.ended_ms(), std::sync::atomic::Ordering::Release);
        *self.cold.lock().unwrap_or_else(|e| e.into_inner()) = Some(cold);
        let held = std::mem::replace(&mut *guard, placeholder());
        self.is_cold
            .store(true, std::sync::atomic::Ordering::Release);
        Some(held)
    }

    /// Makes the Framework whole again (under its lock, held as `guard`).
    fn thaw(&self, guard: &mut Arc<Framework>) {
        let Some(cold) = self.cold.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        match cold.framework() {
            Ok(framework) => *guard = Arc::new(framework),
            // Made from a Framework by this process: cannot happen short of a bug, and
            // the saved file still holds it.
            Err(e) => {
                tracing::error!(job = %self.name, error = %e, "a cold job's Framework cannot be read back");
            }
        }
        self.is_cold
            .store(false, std::sync::atomic::Ordering::Release);
    }

    /// Says why it waits for slots (`None`: it does not); its watchers are told.
    pub(crate) fn set_queued(&self, queued: Option<crate::slots::Queued>) {
        let mut now = self.queued.lock().unwrap_or_else(|e| e.into_inner());
        if *now != queued {
            *now = queued;
            drop(now);
            self.changed.send_modify(|v| *v += 1);
        }
    }

    pub(crate) fn queued(&self) -> Option<crate::slots::Queued> {
        self.queued
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn commands(&self) -> MutexGuard<'_, Option<mpsc::UnboundedSender<Command>>> {
        self.commands.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn is_gone(&self) -> bool {
        self.gone.load(std::sync::atomic::Ordering::SeqCst)
    }
}

pub(crate) struct Inner {
    pub(crate) store: Store,
    pub(crate) settings: Settings,
    /// The directory with `prep/` and `init/` tasks get.
    pub(crate) assets: PathBuf,
    /// Task start and barrier times, for `/metrics`.
    pub(crate) observed: metrics::Observed,
    pub(crate) host_env: Vec<(String, String)>,
    /// Where tasks' processes are started.
    pub(crate) spawner: procs::Spawner,
    pub(crate) jobs: Mutex<BTreeMap<String, Arc<Job>>>,
    /// This machine's task slots, held by running attempts.
    pub(crate) slots: crate::slots::Slots,
    /// The name of each job as it is saved or removed, and whether it names jobs it
    /// waits for (for whoever watches them all). A change waits in the channel until
    /// every receiver read it: its name is the job's own, so that waiting makes no block
    /// among a burst's (see [`pai_backend::memory::keeper`]).
    pub(crate) changes: tokio::sync::broadcast::Sender<(Arc<str>, bool)>,
    /// Where tasks' ports come from.
    pub(crate) ports: crate::ports::Ports,
    /// Job directories that could not be read at start, by name, with the reason: their
    /// names stay taken (a new job would overwrite what may still be recovered).
    pub(crate) unreadable: Mutex<BTreeMap<String, String>>,
    /// Whether tasks run in containers, decided at start.
    pub(crate) isolation: crate::containers::Isolation,
    /// The tasks' CPU cgroup, where this machine allows one.
    pub(crate) cpu_group: Option<Arc<crate::cpu_group::TaskGroup>>,
    /// The running tasks' logs, kept to their bound.
    pub(crate) logs: Arc<crate::log_rotation::Logs>,
    /// Gives the memory of ended jobs back to the system.
    pub(crate) trimmer: pai_backend::memory::Trimmer,
}

impl Inner {
    pub(crate) fn unreadable(&self) -> MutexGuard<'_, BTreeMap<String, String>> {
        self.unreadable.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn jobs(&self) -> MutexGuard<'_, BTreeMap<String, Arc<Job>>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn visible(&self, name: &str) -> Option<Arc<Job>> {
        self.jobs().get(name).filter(|j| !j.is_deleting()).cloned()
    }

    /// Every job not being deleted.
    pub(crate) fn visible_jobs(&self) -> Vec<Arc<Job>> {
        self.jobs()
            .values()
            .filter(|j| !j.is_deleting())
            .cloned()
            .collect()
    }

    /// Writes the job's Framework as it is now, durably (synced); returns once it is on
    /// disk. For every decision: acceptance, an attempt's start, completion, stop.
    pub(crate) async fn persist(&self, job: &Job) -> Result<(), Error> {
        self.save(job, true).await
    }

    /// Writes the job's Framework as it is now, atomically but not synced: for task
    /// progress, which a restart re-derives (the attempt is then failed and retried).
    pub(crate) async fn record(&self, job: &Job) -> Result<(), Error> {
        self.save(job, false).await
    }

    pub(crate) async fn save(&self, job: &Job, durable: bool) -> Result<(), Error> {
        let _order = job.save.lock().await;
        let snapshot = job.framework().clone();
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.save(&snapshot, durable))
            .await
            .map_err(|e| Error::Other(format!("saving the job: {e}")))?
            .map_err(|e| Error::Other(e.to_string()))?;
        job.changed.send_modify(|v| *v += 1);
        if self.changes.receiver_count() > 0 {
            let waits = pai_job::depends::waits(&job.framework());
            let _ = self.changes.send((job.shared_name(), waits));
        }
        Ok(())
    }
}

/// What a cold job's Framework slot holds: one Framework for every cold job.
fn placeholder() -> Arc<Framework> {
    static PLACEHOLDER: std::sync::OnceLock<Arc<Framework>> = std::sync::OnceLock::new();
    PLACEHOLDER
        .get_or_init(|| {
            Arc::new(Framework::new(
                "",
                pai_contract::framework::FrameworkSpec {
                    description: None,
                    execution_type: Default::default(),
                    retry_policy: Default::default(),
                    task_roles: Vec::new(),
                },
            ))
        })
        .clone()
}

/// A random UID in the form Kubernetes gives objects (a version 4 UUID).
pub(crate) fn uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished(name: &str) -> Framework {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "frameworkcontroller.microsoft.com/v1",
            "kind": "Framework",
            "metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00.123Z",
                "annotations": {"note": "x".repeat(4096)}},
            "spec": {"executionType": "Start", "taskRoles": []},
            "status": {"state": "Completed", "startTime": "2026-01-01T00:00:00Z",
                "completionTime": "2026-01-01T00:00:09Z",
                "attemptStatus": {"id": 0, "startTime": "2026-01-01T00:00:00Z",
                    "completionStatus": {"code": 0, "phrase": "Succeeded", "type": {"name": "Succeeded", "attributes": []}, "diagnostics": "done"}},
                "retryPolicyStatus": {"totalRetriedCount": 0, "accountableRetriedCount": 0}}
        }))
        .expect("a Framework")
    }

    #[test]
    fn a_cold_job_reads_as_it_was_and_a_writer_makes_it_whole() {
        let (commands, _receiver) = mpsc::unbounded_channel();
        let job = Job::new(finished("f"), commands);
        let before = job.current();
        assert!(job.freeze().is_none(), "not while its loop may run");
        *job.commands() = None;
        assert_eq!(
            job.freeze().as_deref(),
            Some(&*before),
            "it gives back what it held"
        );
        assert!(job.is_cold() && !job.is_deleting());
        assert_eq!(job.name(), "f");
        assert_eq!(job.ended_ms(), Some(1_767_225_609_000));
        assert_eq!(
            job.cold_row().expect("its row").summary.status.state,
            pai_api::status::JobState::Succeeded
        );
        // A reader gets it whole; the job stays cold.
        assert_eq!(*job.current(), *before);
        assert!(job.is_cold());
        // A writer makes it whole again.
        Arc::make_mut(&mut job.framework()).spec.execution_type =
            pai_contract::framework::ExecutionType::Stop;
        assert!(!job.is_cold() && job.cold_row().is_none());
        assert_eq!(
            job.current().metadata.annotations,
            before.metadata.annotations
        );
    }

    #[test]
    fn a_running_job_never_goes_cold() {
        let mut running = finished("r");
        running.status.as_mut().expect("a status").state =
            pai_contract::framework::FrameworkState::AttemptRunning;
        let (commands, _receiver) = mpsc::unbounded_channel();
        let job = Job::new(running, commands);
        *job.commands() = None;
        assert!(job.freeze().is_none());
        assert!(!job.is_cold());
    }
}
