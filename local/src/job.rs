//! One job of this machine (its Framework, saves and commands) and the registry of all
//! of them that the server's requests and the controllers share.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use pai_contract::Framework;
use tokio::sync::{mpsc, watch};

use crate::error::Error;
use crate::settings::Settings;
use crate::store::Store;
use crate::{metrics, procs};

/// What the server asks a job's controller.
pub(crate) enum Command {
    Stop,
    /// Answered once the deletion is saved.
    Delete(tokio::sync::oneshot::Sender<()>),
}

pub(crate) struct Job {
    /// Shared with readers as it is: a change makes a new one ([`Arc::make_mut`]), so a
    /// reader's copy is a version, and the server's views of it are made once.
    pub(crate) framework: Mutex<Arc<Framework>>,
    /// Held while a snapshot is written, so saves land in order.
    pub(crate) save: tokio::sync::Mutex<()>,
    /// Bumped after every save.
    pub(crate) changed: watch::Sender<u64>,
    /// Where its controller reads commands; `None` while it has none (a finished job's
    /// controller ends, and its memory goes: [`crate::Machine`] starts one again for
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
    pub(crate) fn framework(&self) -> MutexGuard<'_, Arc<Framework>> {
        self.framework.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn name(&self) -> String {
        self.framework().metadata.name.clone().unwrap_or_default()
    }

    /// Deleted (the state machine's record, `deletionTimestamp`): invisible, its name
    /// still taken until its processes and files are gone.
    pub(crate) fn is_deleting(&self) -> bool {
        self.framework().metadata.deletion_timestamp.is_some()
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
    /// waits for (for whoever watches them all).
    pub(crate) changes: tokio::sync::broadcast::Sender<(String, bool)>,
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
            let waits = pai_contract::depends::waits(&job.framework());
            let _ = self.changes.send((job.name(), waits));
        }
        Ok(())
    }
}

/// A random UID in the form Kubernetes gives objects (a version 4 UUID).
pub(crate) fn uid() -> String {
    uuid::Uuid::new_v4().to_string()
}
