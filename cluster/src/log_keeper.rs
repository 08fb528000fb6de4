//! A finished task's output outlives its pod ([`pai_contract::kept_logs`]).
//! FrameworkController deletes a task's pod as soon as its attempt completes (within about
//! a second of SUCCEEDED), and the kubelet's log goes with it. This controller (one watch
//! of the pods with rest-lite's label) puts the finalizer `rest-lite.openpai.io/keep-log`
//! on each task pod as it appears, so its deletion waits: it sees the pod being deleted,
//! copies the end of its main container's log (and of its init container's, the
//! runtime's `entry`) into a ConfigMap of the task attempt, owned by the job's Framework,
//! then takes the finalizer away and the pod goes.
//!
//! - Only a running server puts the finalizer on: a pod made while none runs (the job's
//!   next attempt after the server was removed) carries none and never waits for one. A
//!   server that finds itself removed ([`crate::removal`]) lets every pod go as it
//!   leaves ([`LogKeeper::release_all`]), so deleting the namespace afterwards finishes.
//!   A pod that appears and goes while no server runs keeps no log.
//!
//! - Bounded: at most `keptLogBytes` (config; 256 KiB by default) of each task attempt's
//!   log, and 32 KiB of its runtime's lines; deleted with the job.
//! - A restarted server, or a second replica, finds the pods still being deleted at its
//!   first list and does the same; two replicas make the same ConfigMap (the second gets
//!   409) and remove the finalizer under the pod's resourceVersion.
//! - 16 pods at a time: an attempt of 1,000 tasks that ends costs the API server 5
//!   requests per task (two log reads, a create, a read and a patch of the pod), spread.
//! - A log that cannot be read (its node gone) is tried 3 times, then the ConfigMap
//!   says why it is lost, and the pod goes: a job never waits for a log for ever.
//! - While the server restarts, a completed attempt's pods wait for it: the job's next
//!   attempt (or its completion) waits too. `keptLogBytes: 0` turns this off.

use pai_barrier::retry::WatchBackoff;
use pai_contract::backoff;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use tracing::{debug, info, warn};

use pai_contract::framework::{INIT_CONTAINER, MAIN_CONTAINER};
use pai_contract::kept_logs::{self, FINALIZER};
use pai_contract::{Framework, meta};

use crate::store::KubeStore;

/// Tries of a log that cannot be read, and the wait between them.
const READ_TRIES: u32 = 3;
/// The waits between tries (the one back-off, about 1 s, then 2 s).
const READ_WAITS: backoff::Policy = backoff::Policy {
    first: Duration::from_secs(2),
    cap: Duration::from_secs(4),
};
/// The lines asked of the kubelet, of which the last bytes are kept.
const TAIL_LINES: i64 = 20_000;

/// Keeps the logs of the pods of one namespace.
#[derive(Clone)]
pub struct LogKeeper {
    pods: Api<Pod>,
    config_maps: Api<ConfigMap>,
    store: KubeStore,
    max_bytes: u64,
    /// The attempts whose logs are kept per task: keeping attempt A's lets attempt
    /// A − `attempts`'s go, so a job restarted a thousand times keeps a bounded number
    /// of ConfigMaps (`keptAttempts`).
    attempts: u32,
    /// Pods (by UID) being kept now, so a pod seen again meanwhile is left to that.
    busy: Arc<Mutex<HashSet<String>>>,
    /// Pods (by UID) getting the finalizer now.
    holding_now: Arc<Mutex<HashSet<String>>>,
    /// Whether new pods still get the finalizer: not once the server is removed.
    holding: Arc<AtomicBool>,
    /// Read by each patch that puts the finalizer on, written once by
    /// [`LogKeeper::release_all`] to wait for those in flight.
    hold_gate: Arc<tokio::sync::RwLock<()>>,
    /// At most [`AT_ONCE`] pods kept at a time: a 1,000-task attempt that ends asks the
    /// kubelets and the API server for its logs 16 at a time, not all at once.
    at_once: Arc<tokio::sync::Semaphore>,
    /// At most [`AT_ONCE`] pods getting the finalizer at a time, apart from the keeping:
    /// a keep that waits on a node gone for seconds never delays a new pod's hold.
    holds_at_once: Arc<tokio::sync::Semaphore>,
}

/// Pods whose logs are read and kept at the same time.
const AT_ONCE: usize = 16;

impl LogKeeper {
    pub fn new(client: Client, namespace: &str, store: KubeStore, max_bytes: u64) -> Self {
        Self {
            pods: Api::namespaced(client.clone(), namespace),
            config_maps: Api::namespaced(client, namespace),
            store,
            max_bytes,
            attempts: pai_translate::config::DEFAULT_KEPT_ATTEMPTS,
            busy: Arc::default(),
            holding_now: Arc::default(),
            holding: Arc::new(AtomicBool::new(true)),
            hold_gate: Arc::default(),
            at_once: Arc::new(tokio::sync::Semaphore::new(AT_ONCE)),
            holds_at_once: Arc::new(tokio::sync::Semaphore::new(AT_ONCE)),
        }
    }

    /// Keeps the logs of each task's last `attempts` attempts (at least 1).
    pub fn keeping_attempts(self, attempts: u32) -> Self {
        Self {
            attempts: attempts.max(1),
            ..self
        }
    }

    /// Watches the pods with rest-lite's label until the end.
    pub async fn run(self) {
        let ours = ours();
        let mut pods =
            watcher::watcher(self.pods.clone(), watcher::Config::default().labels(&ours))
                .backoff(WatchBackoff::new(backoff::SERVER))
                .applied_objects()
                .boxed();
        while let Some(event) = pods.next().await {
            match event {
                Ok(pod) if going_with_our_finalizer(&pod) => {
                    let uid = pod.uid().unwrap_or_default();
                    if self.busy().insert(uid.clone()) {
                        let keeper = self.clone();
                        tokio::spawn(async move {
                            let permit = keeper.at_once.clone().acquire_owned().await;
                            keeper.keep(&pod).await;
                            drop(permit);
                            keeper.busy().remove(&uid);
                        });
                    }
                }
                Ok(pod) if self.to_hold(&pod) => {
                    let uid = pod.uid().unwrap_or_default();
                    if lock(&self.holding_now).insert(uid.clone()) {
                        let keeper = self.clone();
                        tokio::spawn(async move {
                            let permit = keeper.holds_at_once.clone().acquire_owned().await;
                            keeper.hold(&pod).await;
                            drop(permit);
                            lock(&keeper.holding_now).remove(&uid);
                        });
                    }
                }
                Ok(_) => {}
                Err(e) => debug!(error = %e, "the watch of the pods failed; it starts again"),
            }
        }
    }

    fn busy(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        lock(&self.busy)
    }

    /// A pod that is not being deleted and lacks the finalizer, while this server holds.
    fn to_hold(&self, pod: &Pod) -> bool {
        self.holding.load(Ordering::Acquire)
            && pod.meta().deletion_timestamp.is_none()
            && !pod.finalizers().iter().any(|f| f == FINALIZER)
    }

    /// Puts the finalizer on `pod`, under the version seen: a pod changed meanwhile is
    /// seen again at its change.
    async fn hold(&self, pod: &Pod) {
        let _gate = self.hold_gate.read().await;
        if !self.holding.load(Ordering::Acquire) {
            return;
        }
        let name = pod.name_any();
        let mut finalizers = pod.finalizers().to_vec();
        finalizers.push(FINALIZER.to_string());
        let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": pod.resource_version()}});
        match self
            .pods
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => debug!(pod = %name, "the pod waits for its log to be kept"),
            // Changed (seen again), gone, or being deleted (no finalizer may be added).
            Err(kube::Error::Api(s)) if matches!(s.code, 404 | 409 | 422) => {
                debug!(pod = %name, code = s.code, "the pod was not held")
            }
            Err(e) => {
                warn!(pod = %name, error = %e, "cannot hold the pod for its log; tried again at its next change")
            }
        }
    }

    /// This server is removed and none follows: new pods no longer get the finalizer,
    /// and every pod that carries it is let go, a pod being deleted once its log is
    /// kept. Returns the pods let go.
    pub async fn release_all(&self) -> Result<usize, kube::Error> {
        self.holding.store(false, Ordering::Release);
        // The finalizers being put on now land before the list.
        drop(self.hold_gate.write().await);
        let pods = self
            .pods
            .list(&ListParams::default().labels(&ours()))
            .await?;
        let held: Vec<Pod> = pods
            .items
            .into_iter()
            .filter(|p| p.finalizers().iter().any(|f| f == FINALIZER))
            .collect();
        let count = held.len();
        futures::stream::iter(held)
            .for_each_concurrent(AT_ONCE, |pod| async move {
                if going_with_our_finalizer(&pod) {
                    self.keep(&pod).await;
                } else {
                    self.let_go(&pod.name_any()).await;
                }
            })
            .await;
        Ok(count)
    }

    /// Keeps `pod`'s log, then lets it go.
    async fn keep(&self, pod: &Pod) {
        let name = pod.name_any();
        let framework = self.store.get(kept_logs::framework_of(&name));
        match framework.as_deref() {
            Some(framework) => {
                let attempt = attempt_of(pod, framework);
                let map = kept_logs::config_map(&name, attempt);
                let data = self.read(&name).await;
                match self
                    .config_maps
                    .create(&PostParams::default(), &config_map(&map, framework, data))
                    .await
                {
                    Ok(_) => {
                        info!(pod = %name, config_map = %map, "the task's log is kept");
                        self.let_older_go(&name, attempt).await;
                    }
                    Err(kube::Error::Api(s)) if s.code == 409 => {
                        debug!(pod = %name, "the task's log was kept already (another replica)")
                    }
                    Err(e) => {
                        warn!(pod = %name, error = %e, "cannot keep the task's log; the pod goes without it")
                    }
                }
            }
            // The job is gone: nothing to keep the log for.
            None => debug!(pod = %name, "the job of the pod is gone; its log is not kept"),
        }
        self.let_go(&name).await;
    }

    /// Deletes the kept log of `pod`'s task that falls out of the kept attempts as
    /// attempt `attempt`'s is kept (one a step: one missed while no server ran stays until
    /// the job is deleted, as it is owned by the job).
    async fn let_older_go(&self, pod: &str, attempt: i32) {
        let Some(old) = attempt.checked_sub(i32::try_from(self.attempts).unwrap_or(i32::MAX))
        else {
            return;
        };
        if old < 0 {
            return;
        }
        let map = kept_logs::config_map(pod, old);
        match self
            .config_maps
            .delete(&map, &kube::api::DeleteParams::default())
            .await
        {
            Ok(_) => debug!(config_map = %map, "an old attempt's kept log let go"),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                warn!(config_map = %map, error = %e, "cannot delete an old attempt's kept log")
            }
        }
    }

    /// The ConfigMap's `binaryData`: the end of each container's log, or why it is lost.
    async fn read(&self, pod: &str) -> BTreeMap<String, ByteString> {
        let mut data = BTreeMap::new();
        let mut lost = Vec::new();
        for (container, key, bytes) in [
            (MAIN_CONTAINER, kept_logs::MAIN_KEY, self.max_bytes),
            (INIT_CONTAINER, kept_logs::INIT_KEY, kept_logs::INIT_BYTES),
        ] {
            // The kubelet cuts from the end by lines only: enough lines, then the bytes.
            let params = LogParams {
                container: Some(container.to_string()),
                tail_lines: Some(TAIL_LINES),
                ..LogParams::default()
            };
            let mut tries = 0;
            let mut waits = backoff::Backoff::new(READ_WAITS);
            let text = loop {
                match self.pods.logs(pod, &params).await {
                    Ok(text) => break Some(text),
                    // Never started (its init container failed, or it was stopped first).
                    Err(kube::Error::Api(s)) if s.code == 400 || s.code == 404 => break None,
                    Err(e) => {
                        tries += 1;
                        if tries >= READ_TRIES {
                            lost.push(format!("{container}: {e}"));
                            break None;
                        }
                        tokio::time::sleep(waits.next_delay()).await;
                    }
                }
            };
            if let Some(text) = text {
                let text = text.as_bytes();
                let cut = text
                    .len()
                    .saturating_sub(usize::try_from(bytes).unwrap_or(usize::MAX));
                data.insert(key.to_string(), ByteString(text[cut..].to_vec()));
            }
        }
        if !lost.is_empty() {
            data.insert(
                kept_logs::LOST_KEY.to_string(),
                ByteString(
                    format!(
                        "the log could not be read before the pod went: {}",
                        lost.join("; ")
                    )
                    .into_bytes(),
                ),
            );
        }
        data
    }

    /// Takes this server's finalizer off `pod`, under the version it reads.
    async fn let_go(&self, pod: &str) {
        for _ in 0..5 {
            let current = match self.pods.get_opt(pod).await {
                Ok(Some(current)) => current,
                Ok(None) => return,
                Err(e) => {
                    warn!(pod, error = %e, "cannot read the pod to let it go; tried again at its next change");
                    return;
                }
            };
            let rest: Vec<String> = current
                .finalizers()
                .iter()
                .filter(|f| f.as_str() != FINALIZER)
                .cloned()
                .collect();
            if rest.len() == current.finalizers().len() {
                return;
            }
            let patch = json!({"metadata": {"finalizers": rest, "resourceVersion": current.resource_version()}});
            match self
                .pods
                .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return,
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(kube::Error::Api(s)) if s.code == 404 => return,
                Err(e) => {
                    warn!(pod, error = %e, "cannot let the pod go; tried again at its next change");
                    return;
                }
            }
        }
    }
}

/// The label selector of rest-lite's task pods.
fn ours() -> String {
    format!("{}={}", meta::LABEL_MANAGED_BY, meta::MANAGED_BY)
}

fn lock(set: &Mutex<HashSet<String>>) -> std::sync::MutexGuard<'_, HashSet<String>> {
    set.lock().unwrap_or_else(|p| p.into_inner())
}

/// A pod being deleted that still waits for this server.
fn going_with_our_finalizer(pod: &Pod) -> bool {
    pod.meta().deletion_timestamp.is_some() && pod.finalizers().iter().any(|f| f == FINALIZER)
}

/// The attempt a pod belongs to: FrameworkController's annotation, else the Framework's
/// current attempt (its pods are deleted before the next attempt starts).
fn attempt_of(pod: &Pod, framework: &Framework) -> i32 {
    pod.annotations()
        .get(pai_contract::env::fc::FRAMEWORK_ATTEMPT_ID)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| framework.attempt_id())
}

fn config_map(name: &str, framework: &Framework, data: BTreeMap<String, ByteString>) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(BTreeMap::from([(
                meta::LABEL_MANAGED_BY.to_string(),
                meta::MANAGED_BY.to_string(),
            )])),
            owner_references: Some(vec![OwnerReference {
                api_version: "frameworkcontroller.microsoft.com/v1".to_string(),
                kind: "Framework".to_string(),
                name: framework.name().to_string(),
                uid: framework.metadata.uid.clone().unwrap_or_default(),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        binary_data: Some(data),
        ..ConfigMap::default()
    }
}

/// What the ConfigMap of `pod`'s attempt `attempt` kept: its main container's log and
/// its init container's, or why they are lost; `None` when nothing was kept.
pub async fn kept(config_maps: &Api<ConfigMap>, pod: &str, attempt: i32) -> Option<Kept> {
    let map = config_maps
        .get_opt(&kept_logs::config_map(pod, attempt))
        .await
        .ok()
        .flatten()?;
    let data = map.binary_data.unwrap_or_default();
    let get = |key: &str| data.get(key).map(|b| b.0.clone()).unwrap_or_default();
    Some(Kept {
        main: get(kept_logs::MAIN_KEY),
        init: get(kept_logs::INIT_KEY),
        lost: String::from_utf8_lossy(&get(kept_logs::LOST_KEY)).into_owned(),
    })
}

/// What was kept of pod `pod`'s log in its job's current attempt (the pod is gone).
pub async fn kept_now(config_maps: &Api<ConfigMap>, store: &KubeStore, pod: &str) -> Option<Kept> {
    let attempt = store.get(kept_logs::framework_of(pod))?.attempt_id();
    kept(config_maps, pod, attempt).await
}

/// A task attempt's kept log.
pub struct Kept {
    pub main: Vec<u8>,
    pub init: Vec<u8>,
    /// Why the log could not be kept, if it could not.
    pub lost: String,
}
