//! Finished jobs on a cluster: written into the job history ([`crate::archive`]) as they
//! complete, their Frameworks deleted from the cluster once the history holds them, and
//! the history kept within the operator's bounds ([`pai_backend::retention`]).
//!
//! - [`Recorder`]: a reconcile function on the controller runtime; a completed
//!   Framework that the history does not hold as it is now is written (again after a
//!   change: its attempt history written by [`crate::history`], its tags), with its last
//!   attempt's end whether its attempt history holds it yet or not; a write that fails
//!   (the database down) is tried again with back-off, and at every start, until it is
//!   written. A Framework is retired only once the history holds it.
//! - [`Sweeper`]: at start, as Frameworks change (a second apart at most) and once a
//!   minute:
//!   1. with a history: a completed Framework that ended `history.frameworkKeptSec` ago,
//!      is held by the history as it is, and has no pod left (each pod's log is kept
//!      when it goes) has its tasks' kept logs copied into the history, and is deleted
//!      (its pods' objects, ConfigMaps and Secrets go with it). Its job stays listed
//!      and readable from the history. However many retire, a sweep makes one list of
//!      the pods (names only), one read of each retiring job's kept-log ConfigMap, then
//!      the deletions, 48 at a time.
//!   2. the finished jobs past `retention` (count, age), the history's and the
//!      cluster's together, oldest end first: their records, then their Frameworks,
//!      deleted as `delete` does.
//!
//! Every replica does the same; each write and delete is idempotent (a 404 is done).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, ResourceExt};
use tracing::{debug, info, warn};

use pai_backend::controller::{Outcome, Reconcile};
use pai_backend::retention::{AT_MOST_EVERY, Bounds, SWEEP_EVERY, past};
use pai_contract::{Framework, kept_logs};
use pai_job::attempts;

use crate::archive::{self, Archive};
use crate::store::{Change, KubeStore};

/// Objects listed at a time.
const PAGE: u32 = 500;

/// Frameworks deleted (and ConfigMaps read) at a time: the API server is the pace (on
/// the harness's control plane, 10,000 retired in 36 s at 48, in 43 s at 16).
const DELETING: usize = 48;

/// The most tasks whose kept logs a sweep reads one by one; past it, it lists them all.
const READ_AT_MOST: usize = 64;

/// Writes completed Frameworks into the history.
pub struct Recorder {
    pub archive: Arc<Archive>,
    pub store: KubeStore,
}

impl Recorder {
    /// Runs while `store` is kept: from its first list, then at every change.
    pub async fn run(self) {
        let store = self.store.clone();
        store.control(self).await;
    }

    /// What the history should hold of `framework` and does not: a completed Framework
    /// the history does not hold as it is now, with its last attempt's end.
    fn unwritten(&self, framework: &Framework) -> Option<Framework> {
        // A Framework being deleted is a job being deleted (its record goes, or went,
        // with it): never written again. Nor one the copy no longer has as it is.
        let current = self.store.get(framework.name());
        if !framework.is_completed()
            || framework.metadata.deletion_timestamp.is_some()
            || current.is_none_or(|c| c.metadata.deletion_timestamp.is_some())
            || self.archive.holds(framework)
        {
            return None;
        }
        // Its attempt history may not be written yet, or ever (a patch refused, no
        // server running as the attempt ended): the record carries the last attempt's
        // end all the same. Once the history is written, the Framework changed, and
        // its record is written again as it is.
        let mut record = framework.clone();
        attempts::record(&mut record);
        Some(record)
    }
}

impl Reconcile for Recorder {
    type Change = Change;

    fn key(change: &Change) -> String {
        change.framework().name_any()
    }

    /// Every Framework as a change, once those the history lacks are written a page at a
    /// time (a server's start finds every job that completed while none ran): each
    /// change then finds its job held, and one that could not be written is tried
    /// again on its own.
    async fn all(&mut self) -> Vec<Change> {
        let changes = self.store.all_changes();
        // A page of copies at a time, not a copy of every Framework at once.
        let mut page = Vec::new();
        let mut written = 0;
        let unwritten = changes.iter().filter_map(|change| match change {
            Change::Applied(framework) => self.unwritten(framework),
            Change::Deleted(_) => None,
        });
        for record in unwritten {
            page.push(record);
            if page.len() < PAGE as usize {
                continue;
            }
            match self.archive.write_all(&page).await {
                Ok(()) => written += std::mem::take(&mut page).len(),
                Err(e) => {
                    warn!(error = %e, "cannot write the finished jobs into the history; trying each again with back-off");
                    page.clear();
                    break;
                }
            }
        }
        if !page.is_empty() {
            match self.archive.write_all(&page).await {
                Ok(()) => written += page.len(),
                Err(e) => {
                    warn!(error = %e, "cannot write the finished jobs into the history; trying each again with back-off")
                }
            }
        }
        if written > 0 {
            info!(
                jobs = written,
                "finished jobs found unwritten, written into the history"
            );
        }
        changes
    }

    async fn reconcile(&mut self, change: Change) -> Outcome<Change> {
        let Change::Applied(framework) = &change else {
            return Outcome::Done;
        };
        let Some(record) = self.unwritten(framework) else {
            return Outcome::Done;
        };
        match self.archive.write(&record).await {
            Ok(()) => {
                debug!(framework = %framework.name_any(), "job written into the history");
                Outcome::Done
            }
            Err(e) => {
                warn!(framework = %framework.name_any(), error = %e, "cannot write a finished job into the history; trying again with back-off");
                Outcome::Retry(change)
            }
        }
    }
}

/// What the sweeper needs of the cluster.
pub struct Sweeper {
    pub api: Api<Framework>,
    pub pods: Api<Pod>,
    pub config_maps: Api<ConfigMap>,
    pub store: KubeStore,
    /// The history; `None`: finished Frameworks stay until `bounds` delete them.
    pub archive: Option<Arc<Archive>>,
    /// How long a finished Framework stays in the cluster once the history holds it.
    pub framework_kept: Duration,
    /// The attempts whose logs are kept per task (`keptAttempts`).
    pub kept_attempts: u32,
    /// The bounds as the config says them now: a change sweeps at once.
    pub bounds: tokio::sync::watch::Receiver<Bounds>,
}

impl Sweeper {
    /// Sweeps at the first list, as Frameworks change (at most once a second) and once
    /// a minute, as long as the process runs.
    pub async fn run(self) {
        let mut changes = self.store.subscribe();
        let mut written = self.archive.as_ref().map(|a| a.subscribe());
        self.store.listed().await;
        let mut tick = tokio::time::interval(SWEEP_EVERY);
        let mut bounds = self.bounds.clone();
        // Closed once no one can change them (they stay as they are).
        let mut bounds_open = true;
        loop {
            self.sweep().await;
            tokio::time::sleep(AT_MOST_EVERY).await;
            let history = async {
                match written.as_mut() {
                    Some(written) => {
                        let _ = written.recv().await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tick.tick() => {}
                _ = changes.recv() => {}
                () = history => {}
                changed = bounds.changed(), if bounds_open => {
                    bounds_open = changed.is_ok();
                }
            }
        }
    }

    /// One look at every finished job.
    pub async fn sweep(&self) {
        let now = jiff::Timestamp::now().as_millisecond();
        let frameworks: Vec<Arc<Framework>> = self
            .store
            .all()
            .into_iter()
            .filter(|f| f.is_completed() && f.metadata.deletion_timestamp.is_none())
            .collect();
        if let Some(archive) = &self.archive
            && archive.ready().is_ok()
        {
            let until = now
                .saturating_sub(i64::try_from(self.framework_kept.as_millis()).unwrap_or(i64::MAX));
            let ready: Vec<Arc<Framework>> = frameworks
                .iter()
                .filter(|f| archive::ended_ms(f) <= until && archive.holds(f))
                .cloned()
                .collect();
            self.retire(archive, ready).await;
        }
        // By name: a Framework deleted while this looks is in the history and may have
        // been in the copy a moment ago; it counts once.
        let mut finished: std::collections::HashMap<String, i64> = frameworks
            .iter()
            .map(|f| (f.name().to_string(), archive::ended_ms(f)))
            .collect();
        if let Some(archive) = &self.archive {
            if archive.ready().is_err() {
                // The history's jobs are not known yet: nothing is counted without them.
                return;
            }
            for (name, archived) in archive.all() {
                finished.entry(name).or_insert(archived.ended_ms);
            }
        }
        let finished: Vec<(i64, String)> = finished
            .into_iter()
            .map(|(name, ended)| (ended, name))
            .collect();
        let bounds = *self.bounds.borrow();
        let past = past(bounds, finished, now);
        if !past.is_empty() {
            info!(
                jobs = past.len(),
                "finished jobs past the retention deleted"
            );
        }
        for name in past {
            self.delete(&name).await;
        }
    }

    /// Retires `ready` (held by the history, ended long enough ago): those with no pod
    /// left have their tasks' kept logs copied into the history, then are deleted from
    /// the cluster. Paced by what it needs, however many retire: one list of the pods
    /// (names only), one read of each job's kept-log ConfigMap, then the deletions,
    /// [`DELETING`] at a time.
    async fn retire(&self, archive: &Archive, ready: Vec<Arc<Framework>>) {
        if ready.is_empty() {
            return;
        }
        let with_pods = match self.frameworks_with_pods().await {
            Ok(names) => names,
            Err(e) => {
                warn!(error = %e, "cannot list the pods of finished jobs; their Frameworks stay");
                return;
            }
        };
        let ready: HashMap<&str, &Framework> = ready
            .iter()
            .filter(|f| !with_pods.contains(f.name()))
            .map(|f| (f.name(), f.as_ref()))
            .collect();
        if ready.is_empty() {
            debug!("finished jobs' pods are still going; their Frameworks stay");
            return;
        }
        let logs = match self.copy_kept_logs(archive, &ready).await {
            Ok(logs) => logs,
            Err(e) => {
                warn!(error = %e, "cannot copy finished jobs' logs into the history; their Frameworks stay");
                return;
            }
        };
        let names: Vec<String> = ready.keys().map(|name| name.to_string()).collect();
        let api = &self.api;
        let deleted = futures::stream::iter(names)
            .map(|name| async move {
                match api.delete(&name, &DeleteParams::background()).await {
                    Ok(_) => true,
                    Err(kube::Error::Api(s)) if s.code == 404 => false,
                    Err(e) => {
                        warn!(framework = %name, error = %e, "cannot delete a finished job's Framework");
                        false
                    }
                }
            })
            .buffer_unordered(DELETING)
            .fold(0usize, |count, deleted| async move { count + usize::from(deleted) })
            .await;
        if deleted > 0 {
            info!(
                jobs = deleted,
                logs, "finished jobs' Frameworks deleted; their records stay in the history"
            );
        }
    }

    /// The Frameworks that still have pods: one list of rest-lite's pods, names only.
    async fn frameworks_with_pods(&self) -> Result<HashSet<String>, kube::Error> {
        let mut names = HashSet::new();
        let mut params = ListParams::default()
            .labels(&pai_contract::meta::managed_by_selector())
            .limit(PAGE);
        loop {
            let page = self.pods.list_metadata(&params).await?;
            names.extend(page.items.iter().filter_map(|pod| {
                pod.labels()
                    .get(pai_contract::framework::LABEL_FRAMEWORK_NAME)
                    .cloned()
            }));
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(names),
            }
        }
    }

    /// Copies the kept logs of `ready`'s tasks, in the attempts whose logs are kept, into
    /// the history: one read of each job's kept-log ConfigMap ([`DELETING`] at a time),
    /// each job's written as it comes. A job of an earlier version, whose tasks kept
    /// their logs in a ConfigMap each, has those copied ([`Self::copy_legacy`]). Returns
    /// the logs copied.
    async fn copy_kept_logs(
        &self,
        archive: &Archive,
        ready: &HashMap<&str, &Framework>,
    ) -> Result<usize, String> {
        let maps = self.config_maps.clone();
        let names: Vec<String> = ready.keys().map(|name| name.to_string()).collect();
        let read: Vec<(String, Result<Option<ConfigMap>, kube::Error>)> =
            futures::stream::iter(names)
                .map(|name| {
                    let maps = maps.clone();
                    async move {
                        let map = maps.get_opt(&kept_logs::config_map(&name)).await;
                        (name, map)
                    }
                })
                .buffer_unordered(DELETING)
                .collect()
                .await;
        let mut copied = 0;
        let mut legacy = HashMap::new();
        for (name, map) in &read {
            let name = name.as_str();
            let Some(framework) = ready.get(name) else {
                continue;
            };
            let map = match map {
                Ok(Some(map)) => map,
                // Only a job an earlier version made can have per-task ConfigMaps: a
                // job of this one without logs kept costs no more reads.
                Ok(None) if made_by_an_earlier_version(framework) => {
                    legacy.insert(name, *framework);
                    continue;
                }
                Ok(None) => continue,
                Err(e) => return Err(e.to_string()),
            };
            let first = self.first_kept(framework);
            let logs: Vec<_> = crate::log_keeper::all_in(map, name)
                .into_iter()
                .filter(|(_, attempt, _)| *attempt >= first)
                .map(|(pod, attempt, kept)| {
                    (
                        name.to_string(),
                        kept_logs::archive_key(&pod, attempt),
                        kept,
                    )
                })
                .collect();
            archive
                .write_logs_of(&logs)
                .await
                .map_err(|e| e.to_string())?;
            copied += logs.len();
        }
        Ok(copied + self.copy_legacy(archive, &legacy).await?)
    }

    /// The first attempt of `framework` whose logs are kept (`keptAttempts`).
    fn first_kept(&self, framework: &Framework) -> i32 {
        framework
            .attempt_id()
            .saturating_sub(i32::try_from(self.kept_attempts).unwrap_or(i32::MAX))
            .saturating_add(1)
            .max(0)
    }

    /// Copies the logs of `ready`'s tasks that an earlier version kept in a ConfigMap per
    /// task: each read by name where they are few ([`READ_AT_MOST`]), else one list of
    /// the kept-log ConfigMaps, a page at a time.
    async fn copy_legacy(
        &self,
        archive: &Archive,
        ready: &HashMap<&str, &Framework>,
    ) -> Result<usize, String> {
        if ready.is_empty() {
            return Ok(0);
        }
        let tasks: Vec<String> = ready
            .values()
            .flat_map(|f| {
                f.spec.task_roles.iter().flat_map(move |role| {
                    (0..role.tasks()).map(move |index| f.pod_name(role, index))
                })
            })
            .collect();
        if tasks.len() <= READ_AT_MOST {
            let maps = &self.config_maps;
            let read: Vec<Result<Option<ConfigMap>, kube::Error>> = futures::stream::iter(tasks)
                .map(|pod| async move { maps.get_opt(&kept_logs::legacy_config_map(&pod)).await })
                .buffer_unordered(DELETING)
                .collect()
                .await;
            let mut logs = Vec::new();
            for map in read {
                if let Some(map) = map.map_err(|e| e.to_string())? {
                    logs.extend(self.legacy_kept_of(ready, &map));
                }
            }
            archive
                .write_logs_of(&logs)
                .await
                .map_err(|e| e.to_string())?;
            return Ok(logs.len());
        }
        let mut copied = 0;
        let mut params = ListParams::default()
            .labels(&pai_contract::meta::managed_by_selector())
            .limit(PAGE);
        loop {
            let page = self
                .config_maps
                .list(&params)
                .await
                .map_err(|e| e.to_string())?;
            let logs: Vec<_> = page
                .items
                .iter()
                .flat_map(|map| self.legacy_kept_of(ready, map))
                .collect();
            archive
                .write_logs_of(&logs)
                .await
                .map_err(|e| e.to_string())?;
            copied += logs.len();
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(copied),
            }
        }
    }

    /// What an earlier version's task ConfigMap `map` holds of the attempts whose logs
    /// are kept, where its Framework is one of `ready`: `(job, key, log)` each.
    fn legacy_kept_of(
        &self,
        ready: &HashMap<&str, &Framework>,
        map: &ConfigMap,
    ) -> Vec<(String, String, crate::log_keeper::Kept)> {
        let Some(pod) = legacy_pod(&map.name_any()) else {
            return Vec::new();
        };
        let name = kept_logs::framework_of(&pod);
        let Some(framework) = ready.get(name) else {
            return Vec::new();
        };
        (self.first_kept(framework)..=framework.attempt_id())
            .filter_map(|attempt| {
                crate::log_keeper::legacy_kept_in(map, attempt).map(|kept| {
                    (
                        name.to_string(),
                        kept_logs::archive_key(&pod, attempt),
                        kept,
                    )
                })
            })
            .collect()
    }

    /// Deletes finished job `name` past the retention: its record, then its Framework.
    async fn delete(&self, name: &str) {
        if let Some(archive) = &self.archive
            && let Err(e) = archive.delete(name).await
        {
            warn!(framework = %name, error = %e, "cannot delete a job past the retention from the history");
            return;
        }
        if self.store.get(name).is_some() {
            match self.api.delete(name, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    warn!(framework = %name, error = %e, "cannot delete a job past the retention")
                }
            }
        }
    }
}

/// The variable the runtime of earlier versions was told its kept log's size by: a
/// Framework whose containers carry it kept its tasks' logs in a ConfigMap per task.
const LEGACY_KEPT_VAR: &str = "PAI_RUNTIME_KEPT_LOG_BYTES";

/// Whether an earlier version made `framework`, with its tasks' logs kept a ConfigMap per
/// task.
fn made_by_an_earlier_version(framework: &Framework) -> bool {
    framework.spec.task_roles.iter().any(|role| {
        role.main_container()
            .and_then(|c| c.env.as_ref())
            .is_some_and(|env| env.iter().any(|v| v.name == LEGACY_KEPT_VAR))
    })
}

/// The task pod whose logs an earlier version's ConfigMap `name` kept
/// (`<framework>-logs-<role>-<index>`); `None` for any other name.
fn legacy_pod(name: &str) -> Option<String> {
    let (framework, task) = name.split_once("-logs-")?;
    (!task.is_empty()).then(|| kept_logs::pod_of(framework, task))
}
