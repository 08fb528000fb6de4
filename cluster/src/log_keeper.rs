//! A finished task's output outlives its pod ([`pai_contract::kept_logs`]). The runtime
//! in each of a task's containers writes its log's end into the task's ConfigMap as it
//! ends; this controller (one watch of the pods with rest-lite's label) makes that
//! ConfigMap, empty and owned by the job's Framework, as the task's first pod appears:
//! the job's pods may update it but not create anything.
//!
//! Nothing waits for this server: a pod carries no finalizer, so a server that is
//! stopped, crashed, restarted or removed (`kubectl delete -k`, its namespace deleted)
//! never holds a pod or a namespace up. What a server that is not running misses: the
//! ConfigMaps of the tasks whose first pod appeared and ended while none ran (their
//! runtime says in its own log that it could not keep it).
//!
//! - One create per task for the life of its job (not per attempt: the attempts share
//!   the ConfigMap); the names made are remembered, seeded from one list at start, so a
//!   restarted server or a second replica mostly does not ask again (when it does, 409).
//! - Pods of earlier versions carried the finalizer
//!   [`LEGACY_FINALIZER`](pai_contract::kept_logs::LEGACY_FINALIZER) until a server kept
//!   their log; this one takes it off any pod that still has it.
//! - Bounded: at most `keptLogBytes` of each attempt's output and 32 KiB of its
//!   runtime's lines, the last attempts that fit in one ConfigMap (at most
//!   `keptAttempts`); deleted with the job.

use pai_barrier::retry::WatchBackoff;
use pai_contract::backoff;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tracing::{debug, info, warn};

use pai_contract::kept_logs::{self, LEGACY_FINALIZER};
use pai_contract::{Framework, meta};

use crate::store::KubeStore;

/// Makes the kept-log ConfigMaps of the tasks of one namespace.
#[derive(Clone)]
pub struct LogKeeper {
    pods: Api<Pod>,
    config_maps: Api<ConfigMap>,
    store: KubeStore,
    /// The ConfigMaps known to exist (made here, or seen at start).
    made: Arc<Mutex<Made>>,
    /// At most [`AT_ONCE`] creates at a time: a 1,000-task job's pods appear together.
    at_once: Arc<tokio::sync::Semaphore>,
}

#[derive(Default)]
struct Made {
    names: HashSet<String>,
    /// The count after the last pruning: the names of jobs gone are let go of once the
    /// set has doubled since.
    pruned_at: usize,
}

/// ConfigMaps made at the same time.
const AT_ONCE: usize = 16;

impl LogKeeper {
    pub fn new(client: Client, namespace: &str, store: KubeStore) -> Self {
        Self {
            pods: Api::namespaced(client.clone(), namespace),
            config_maps: Api::namespaced(client, namespace),
            store,
            made: Arc::default(),
            at_once: Arc::new(tokio::sync::Semaphore::new(AT_ONCE)),
        }
    }

    /// Watches the pods with rest-lite's label until the end.
    pub async fn run(self) {
        self.seed().await;
        let ours = meta::managed_by_selector();
        let mut pods =
            watcher::watcher(self.pods.clone(), watcher::Config::default().labels(&ours))
                .backoff(WatchBackoff::new(backoff::SERVER))
                .applied_objects()
                .boxed();
        while let Some(event) = pods.next().await {
            match event {
                Ok(pod) => {
                    if pod.finalizers().iter().any(|f| f == LEGACY_FINALIZER) {
                        let keeper = self.clone();
                        let name = pod.name_any();
                        tokio::spawn(async move { keeper.let_go(&name).await });
                    }
                    let map = kept_logs::config_map(&pod.name_any());
                    if self.claim(&map) {
                        let keeper = self.clone();
                        let pod = pod.name_any();
                        tokio::spawn(async move {
                            let permit = keeper.at_once.clone().acquire_owned().await;
                            keeper.make(&pod, &map).await;
                            drop(permit);
                        });
                    }
                }
                Err(e) => debug!(error = %e, "the watch of the pods failed; it starts again"),
            }
        }
    }

    /// The kept-log ConfigMaps that exist already (one list, names only), of the jobs
    /// the server's copy holds: those of jobs gone wait for the garbage collector.
    async fn seed(&self) {
        self.store.listed().await;
        let params = ListParams::default().labels(&meta::managed_by_selector());
        match self.config_maps.list_metadata(&params).await {
            Ok(list) => {
                let store = &self.store;
                let mut made = lock(&self.made);
                made.names
                    .extend(list.items.into_iter().map(|m| m.name_any()).filter(|n| {
                        n.contains("-logs-") && store.get(kept_logs::framework_of(n)).is_some()
                    }));
                made.pruned_at = made.names.len();
            }
            Err(e) => {
                debug!(error = %e, "cannot list the kept logs; each is made (or found) again")
            }
        }
    }

    /// Whether `map` is still to be made (then it counts as made from now on).
    fn claim(&self, map: &str) -> bool {
        let mut made = lock(&self.made);
        if made.names.contains(map) {
            return false;
        }
        made.names.insert(map.to_string());
        if made.names.len() > 2 * made.pruned_at.max(512) {
            let store = &self.store;
            made.names
                .retain(|n| store.get(kept_logs::framework_of(n)).is_some());
            made.pruned_at = made.names.len();
        }
        true
    }

    /// Makes the ConfigMap `map` of pod `pod`'s task, empty, owned by its job.
    async fn make(&self, pod: &str, map: &str) {
        let Some(framework) = self.store.get(kept_logs::framework_of(pod)) else {
            // The job is gone (or not seen yet: its next pod's event tries again).
            lock(&self.made).names.remove(map);
            return;
        };
        match self
            .config_maps
            .create(&PostParams::default(), &config_map(map, &framework))
            .await
        {
            Ok(_) => debug!(config_map = %map, "the task's kept log is made"),
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => {
                lock(&self.made).names.remove(map);
                warn!(config_map = %map, error = %e, "cannot make the task's kept log; tried again at its pod's next change")
            }
        }
    }

    /// Takes the finalizer of earlier versions off `pod`.
    async fn let_go(&self, pod: &str) {
        match take_finalizer(&self.pods, pod, LEGACY_FINALIZER).await {
            Ok(true) => info!(
                pod,
                "an earlier version's finalizer taken off: nothing waits for a server"
            ),
            Ok(false) => {}
            Err(e) => {
                warn!(pod, error = %e, "cannot let the pod go; tried again at its next change")
            }
        }
    }
}

/// Takes `finalizer` off `pod`, under the version it reads (read again after a conflict,
/// five times at most): whether it was taken off (false: not there, or the pod is gone).
pub(crate) async fn take_finalizer(
    pods: &Api<Pod>,
    pod: &str,
    finalizer: &str,
) -> Result<bool, kube::Error> {
    for _ in 0..5 {
        let Some(current) = pods.get_opt(pod).await? else {
            return Ok(false);
        };
        let rest: Vec<String> = current
            .finalizers()
            .iter()
            .filter(|f| f.as_str() != finalizer)
            .cloned()
            .collect();
        if rest.len() == current.finalizers().len() {
            return Ok(false);
        }
        let patch = json!({"metadata": {"finalizers": rest, "resourceVersion": current.resource_version()}});
        match pods
            .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

fn lock(made: &Mutex<Made>) -> std::sync::MutexGuard<'_, Made> {
    made.lock().unwrap_or_else(|p| p.into_inner())
}

fn config_map(name: &str, framework: &Framework) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(BTreeMap::from([(
                meta::LABEL_MANAGED_BY.to_string(),
                meta::MANAGED_BY.to_string(),
            )])),
            owner_references: Some(vec![framework.owner_reference()]),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

/// What the task of pod `pod` kept of attempt `attempt`: its main container's log and its
/// init container's; `None` when nothing was kept.
pub async fn kept(config_maps: &Api<ConfigMap>, pod: &str, attempt: i32) -> Option<Kept> {
    let map = config_maps
        .get_opt(&kept_logs::config_map(pod))
        .await
        .ok()
        .flatten()?;
    kept_in(&map, attempt)
}

/// What the task's ConfigMap `map` holds of attempt `attempt`.
pub fn kept_in(map: &ConfigMap, attempt: i32) -> Option<Kept> {
    let data = map.binary_data.as_ref()?;
    let main = data.get(&kept_logs::main_key(attempt));
    let init = data.get(&kept_logs::init_key(attempt));
    if main.is_none() && init.is_none() {
        return None;
    }
    Some(Kept {
        main: main.map(|b| b.0.clone()).unwrap_or_default(),
        init: init.map(|b| b.0.clone()).unwrap_or_default(),
        lost: String::new(),
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
