//! The server keeps the end of each task's log after its pod is gone
//! ([`pai_contract::kept_logs`]): one watch of the pods with rest-lite's label; as a task
//! container terminates (its pod still there), its log's end is read through the API
//! (`pods/log`, the last lines only) and written into its job's one kept-log ConfigMap.
//!
//! - **O(1) per job.** One ConfigMap per job, owned by its Framework (the garbage
//!   collector deletes it with the job), bounded by `keptLogBytesPerJob` whatever its
//!   tasks: each task's share ([`Share`]) of its newest attempt always fits; earlier
//!   attempts (at most `keptAttempts` per task) are dropped, oldest first, to make room.
//! - **Few writes.** What is read waits in memory until its job's next write: one at a
//!   time per job, at most one a [`WRITE_EVERY`], each a read and a replace under the
//!   resourceVersion read (a conflict is read again). A write that would change nothing
//!   is not made, so a second replica, which reads the same logs, writes what the first
//!   did not. A write the API server's passing trouble broke off (no answer, 5xx, 429,
//!   beyond what kube's client tries again itself: 429, 503 and 504) waits for the job's
//!   next write, up to [`WRITE_TRIES`] in a row.
//! - **Bounded reads.** [`READS_AT_ONCE`] log reads at a time, each at most its share
//!   (the kubelet gives the last lines; what passes the share is dropped as it comes).
//! - **Nothing waits for the server.** No pod carries a finalizer and no pod writes: a
//!   pod that went before its log could be read (FrameworkController deletes a completed
//!   attempt's pods at once) leaves its container's termination message, which the
//!   kubelet fills with a failed container's last lines; that is kept instead, and said
//!   so. A server that was not running as a task ended misses it.
//! - A restarted server does not read again what its job's ConfigMap holds: it reads
//!   that ConfigMap once, as the job's first container to keep ends. Pods of earlier versions carried the finalizer
//!   [`LEGACY_FINALIZER`]; this one takes it off any pod that still has it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{AsyncReadExt, StreamExt};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{LogParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tracing::{debug, info, warn};

use pai_contract::backoff;
use pai_contract::framework::{INIT_CONTAINER, MAIN_CONTAINER};
use pai_contract::kept_logs::{self, LEGACY_FINALIZER, Lost, Part, Share};
use pai_contract::{Framework, meta};
use pai_kube_retry::{Kind, Verdict, WatchBackoff, classify};

use crate::store::KubeStore;

/// How much a job keeps (the config's `keptLogBytes`, `keptLogBytesPerJob`,
/// `keptAttempts`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// The main container log's last bytes a task attempt keeps at most.
    pub task_bytes: u64,
    /// What a job keeps at most, all its tasks and attempts together.
    pub job_bytes: u64,
    /// The attempts kept per task at most.
    pub attempts: u32,
}

impl Budget {
    /// What each task attempt of `framework` keeps.
    pub fn share(&self, framework: &Framework) -> Share {
        let tasks: u32 = framework.spec.task_roles.iter().map(|r| r.tasks()).sum();
        Share::of(
            self.job_bytes,
            self.task_bytes,
            usize::try_from(tasks).unwrap_or(usize::MAX),
        )
    }
}

/// Log reads at a time: a 1,000-task job's containers end together.
pub const READS_AT_ONCE: usize = 16;
/// A job's kept-log ConfigMap is written at most once in this time.
pub const WRITE_EVERY: Duration = Duration::from_secs(1);
/// Writes of one job's reads that failed for the API server's passing trouble (no answer,
/// 5xx, 429, a refusal of credentials it accepted before), each tried again at its job's
/// next write: about two minutes of trouble, after which they are dropped, said so.
pub const WRITE_TRIES: u32 = 120;
/// What a read takes from the kubelet at most, whatever the share: a log of one endless
/// line is cut there.
const READ_AT_MOST: u64 = 64 * 1024 * 1024;

/// One container's log as read, waiting for its job's next write.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Read {
    pod: String,
    attempt: i32,
    part: Part,
    bytes: Vec<u8>,
    /// Why it is not the whole end of the log (`None` when it is).
    lost: Option<Lost>,
}

/// Keeps the logs of the tasks of one namespace.
#[derive(Clone)]
pub struct LogKeeper {
    pods: Api<Pod>,
    config_maps: Api<ConfigMap>,
    store: KubeStore,
    budget: Budget,
    state: Arc<Mutex<State>>,
    reads: Arc<tokio::sync::Semaphore>,
    wake: Arc<tokio::sync::Notify>,
    /// Who deleted pods, noted as the watch shows it ([`crate::disruptions`]).
    disruptions: crate::disruptions::Disruptions,
}

#[derive(Default)]
struct State {
    /// The containers whose log is kept or being read, by job: `(task, attempt, part)`.
    taken: HashMap<String, HashSet<(String, i32, Part)>>,
    /// What is read and not yet written, by job.
    pending: HashMap<String, Vec<Read>>,
    /// What each job's ConfigMap held when first needed ([`LogKeeper::present`]).
    present: HashMap<String, Arc<tokio::sync::OnceCell<Arc<HashSet<String>>>>>,
    /// The writes of each job that failed in a row, for trouble that passes.
    failed_writes: HashMap<String, u32>,
}

/// How one job's write went.
#[derive(Debug, PartialEq, Eq)]
enum Written {
    /// Written, or nothing to write (the job gone, its reads already there).
    Done,
    /// The API server's passing trouble: the reads wait for the job's next write.
    Again(Vec<Read>),
}

impl LogKeeper {
    pub fn new(client: Client, namespace: &str, store: KubeStore, budget: Budget) -> Self {
        Self {
            pods: Api::namespaced(client.clone(), namespace),
            config_maps: Api::namespaced(client, namespace),
            store,
            budget,
            state: Arc::default(),
            reads: Arc::new(tokio::sync::Semaphore::new(READS_AT_ONCE)),
            wake: Arc::default(),
            disruptions: Default::default(),
        }
    }

    /// Notes in `disruptions` who deleted the pods it sees.
    pub fn noting(mut self, disruptions: crate::disruptions::Disruptions) -> Self {
        self.disruptions = disruptions;
        self
    }

    /// Watches the pods with rest-lite's label until the end.
    pub async fn run(self) {
        self.store.listed().await;
        tokio::spawn(self.clone().write_loop());
        let ours = meta::managed_by_selector();
        let mut pods =
            watcher::watcher(self.pods.clone(), watcher::Config::default().labels(&ours))
                .backoff(WatchBackoff::new(backoff::SERVER))
                .touched_objects()
                .boxed();
        while let Some(event) = pods.next().await {
            match event {
                Ok(pod) => self.saw(&pod),
                Err(e) => debug!(error = %e, "the watch of the pods failed; it starts again"),
            }
        }
    }

    /// The keys job `framework`'s kept-log ConfigMap held when this server first needed
    /// to know (read once per job): what is there is not read again.
    async fn present(&self, framework: &str) -> Arc<HashSet<String>> {
        let cell = lock(&self.state)
            .present
            .entry(framework.to_string())
            .or_default()
            .clone();
        cell.get_or_init(|| async {
            let map = self
                .config_maps
                .get_opt(&kept_logs::config_map(framework))
                .await;
            let keys = match map {
                Ok(map) => map
                    .iter()
                    .flat_map(|m| m.binary_data.iter().flatten())
                    .map(|(k, _)| k.clone())
                    .collect(),
                Err(e) => {
                    debug!(framework, error = %e, "cannot read a job's kept logs; what they hold may be read again");
                    HashSet::new()
                }
            };
            Arc::new(keys)
        })
        .await
        .clone()
    }

    /// A pod as the watch shows it: each of its containers that terminated and whose log
    /// is not taken yet is read.
    fn saw(&self, pod: &Pod) {
        if pod.finalizers().iter().any(|f| f == LEGACY_FINALIZER) {
            let keeper = self.clone();
            let name = pod.name_any();
            tokio::spawn(async move { keeper.let_go(&name).await });
        }
        let name = pod.name_any();
        let framework_name = kept_logs::framework_of(&name).to_string();
        let Some(framework) = self.store.get(&framework_name) else {
            return;
        };
        let attempt = pod
            .annotations()
            .get(pai_contract::env::fc::FRAMEWORK_ATTEMPT_ID)
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| framework.attempt_id());
        if self.disruptions.saw(pod, &framework_name, attempt) {
            debug!(pod = %name, attempt, "a pod deleted by others: its attempt's end says who");
            // Its history's writer looks again (the attempt may have been written first).
            self.store.nudge(&framework_name);
        }
        let share = self.budget.share(&framework);
        let Some(status) = pod.status.as_ref() else {
            return;
        };
        let ended = |statuses: &Option<Vec<ContainerStatus>>, container: &str| {
            statuses
                .iter()
                .flatten()
                .find(|c| c.name == container)
                .and_then(|c| c.state.as_ref()?.terminated.as_ref())
                .map(|t| t.message.clone().unwrap_or_default())
        };
        for (part, container, message) in [
            (
                Part::Init,
                INIT_CONTAINER,
                ended(&status.init_container_statuses, INIT_CONTAINER),
            ),
            (
                Part::Main,
                MAIN_CONTAINER,
                ended(&status.container_statuses, MAIN_CONTAINER),
            ),
        ] {
            let Some(message) = message else { continue };
            if share.of_part(part) == 0 {
                continue;
            }
            let task = kept_logs::task_of(&name).to_string();
            let claimed = lock(&self.state)
                .taken
                .entry(framework_name.clone())
                .or_default()
                .insert((task, attempt, part));
            if !claimed {
                continue;
            }
            let keeper = self.clone();
            let pod = name.clone();
            let bytes = share.of_part(part);
            let framework = framework_name.clone();
            tokio::spawn(async move {
                let key = kept_logs::key(&pod, attempt, part);
                if keeper.present(&framework).await.contains(&key) {
                    return;
                }
                let permit = keeper.reads.clone().acquire_owned().await;
                let read = keeper
                    .read(&pod, attempt, part, container, bytes, message)
                    .await;
                drop(permit);
                keeper.add(read);
            });
        }
    }

    /// The last `bytes` of `container`'s log of pod `pod`; where the pod went first, its
    /// termination `message`.
    async fn read(
        &self,
        pod: &str,
        attempt: i32,
        part: Part,
        container: &str,
        bytes: u64,
        message: String,
    ) -> Read {
        let params = LogParams {
            container: Some(container.to_string()),
            // Every line holds a byte at least.
            tail_lines: Some(i64::try_from(bytes.max(1)).unwrap_or(i64::MAX)),
            ..LogParams::default()
        };
        let read = async {
            let reader = self.pods.log_stream(pod, &params).await?;
            Ok::<_, kube::Error>(last_bytes(reader, bytes).await)
        };
        let (bytes, lost) = match read.await {
            Ok((end, None)) => (end, None),
            Ok((end, Some(e))) => {
                debug!(pod, container, error = %e, "a container's log read broke off");
                (end, Some(Lost::Cut))
            }
            Err(e) => {
                debug!(pod, container, error = %e, "cannot read a terminated container's log");
                let message = message.into_bytes();
                let cut = message
                    .len()
                    .saturating_sub(usize::try_from(bytes).unwrap_or(usize::MAX));
                let lost = match message.is_empty() {
                    true => Lost::Nothing,
                    false => Lost::Message,
                };
                (message[cut..].to_vec(), Some(lost))
            }
        };
        Read {
            pod: pod.to_string(),
            attempt,
            part,
            bytes,
            lost,
        }
    }

    /// Adds a read to its job's next write.
    fn add(&self, read: Read) {
        let framework = kept_logs::framework_of(&read.pod).to_string();
        lock(&self.state)
            .pending
            .entry(framework)
            .or_default()
            .push(read);
        self.wake.notify_one();
    }

    /// Writes what is read, each job's at most once a [`WRITE_EVERY`].
    async fn write_loop(self) {
        loop {
            self.wake.notified().await;
            loop {
                let pending = std::mem::take(&mut lock(&self.state).pending);
                if pending.is_empty() {
                    break;
                }
                futures::stream::iter(pending)
                    .for_each_concurrent(4, |(framework, reads)| {
                        let keeper = &self;
                        async move {
                            let written = keeper.write(&framework, reads).await;
                            keeper.after_write(&framework, written);
                        }
                    })
                    .await;
                self.prune();
                tokio::time::sleep(WRITE_EVERY).await;
            }
        }
    }

    /// Writes `reads` into Framework `name`'s kept-log ConfigMap (made if missing).
    async fn write(&self, name: &str, reads: Vec<Read>) -> Written {
        let map_name = kept_logs::config_map(name);
        for _ in 0..10 {
            let Some(framework) = self.store.get(name) else {
                return Written::Done;
            };
            let current = match self.config_maps.get_opt(&map_name).await {
                Ok(map) => map,
                Err(e) => return failed(&map_name, &e, reads),
            };
            let existed = current.is_some();
            let map = current.unwrap_or_else(|| config_map(&map_name, &framework));
            let Some(updated) = with_reads(map.clone(), &reads, &framework, &self.budget) else {
                return Written::Done;
            };
            let written = match existed {
                true => {
                    self.config_maps
                        .replace(&map_name, &PostParams::default(), &updated)
                        .await
                }
                false => {
                    self.config_maps
                        .create(&PostParams::default(), &updated)
                        .await
                }
            };
            match written {
                Ok(_) => {
                    debug!(config_map = %map_name, logs = reads.len(), "tasks' logs kept");
                    return Written::Done;
                }
                // Written meanwhile (another replica): read again.
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return failed(&map_name, &e, reads),
            }
        }
        Written::Done
    }

    /// Counts a job's failed writes: reads that wait are its next write's, up to
    /// [`WRITE_TRIES`] in a row.
    fn after_write(&self, framework: &str, written: Written) {
        let mut state = lock(&self.state);
        let Written::Again(reads) = written else {
            state.failed_writes.remove(framework);
            return;
        };
        let failures = state
            .failed_writes
            .entry(framework.to_string())
            .or_default();
        *failures += 1;
        if *failures >= WRITE_TRIES {
            warn!(
                framework,
                logs = reads.len(),
                tries = WRITE_TRIES,
                "the API server's trouble lasts: these tasks' logs are not kept"
            );
            state.failed_writes.remove(framework);
            return;
        }
        // The earlier reads first: a newer read of the same container replaces them.
        let pending = state.pending.entry(framework.to_string()).or_default();
        let newer = std::mem::replace(pending, reads);
        pending.extend(newer);
    }

    /// Forgets the jobs gone from the server's copy.
    fn prune(&self) {
        let store = &self.store;
        let mut state = lock(&self.state);
        state
            .taken
            .retain(|framework, _| store.get(framework).is_some());
        state
            .failed_writes
            .retain(|framework, _| store.get(framework).is_some());
        state
            .present
            .retain(|framework, _| store.get(framework).is_some());
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

/// A write of `reads` into `map` that `error` broke off: tried again where the trouble
/// passes (the one rule, [`classify`]: this server was answered before), else
/// dropped, said so.
fn failed(map: &str, error: &kube::Error, reads: Vec<Read>) -> Written {
    match classify(error, true) {
        Verdict::Retry { kind, .. } if kind != Kind::OtherAnswer => {
            debug!(config_map = %map, %error, "cannot keep a job's tasks' logs now; tried again");
            Written::Again(reads)
        }
        _ => {
            warn!(config_map = %map, %error, "cannot keep a job's tasks' logs");
            Written::Done
        }
    }
}

/// The last `max` bytes of what `reader` gives, holding no more than that in memory,
/// and the error that broke it off, if one did.
async fn last_bytes(
    reader: impl futures::AsyncBufRead + Unpin,
    max: u64,
) -> (Vec<u8>, Option<std::io::Error>) {
    let max = usize::try_from(max).unwrap_or(usize::MAX);
    let mut reader = reader.take(READ_AT_MOST);
    let mut kept = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match reader.read(&mut chunk).await {
            Ok(n) => n,
            Err(e) => return (kept, Some(e)),
        };
        if n == 0 {
            return (kept, None);
        }
        kept.extend_from_slice(&chunk[..n]);
        if kept.len() > max {
            kept.drain(..kept.len() - max);
        }
    }
}

/// `map` with `reads` in it, and without what passes `budget`: earlier attempts past
/// `keptAttempts` per task, then the oldest attempts while the whole passes the job's
/// bytes (a task's newest attempt stays). `None` when nothing changes.
fn with_reads(
    mut map: ConfigMap,
    reads: &[Read],
    framework: &Framework,
    budget: &Budget,
) -> Option<ConfigMap> {
    let before = (map.binary_data.clone(), map.data.clone());
    let data = map.binary_data.get_or_insert_with(BTreeMap::new);
    let notes = map.data.get_or_insert_with(BTreeMap::new);
    for read in reads {
        let key = kept_logs::key(&read.pod, read.attempt, read.part);
        let lost_key = kept_logs::lost_key(&read.pod, read.attempt);
        // A whole read (another replica's, or this one's) is not replaced by a lesser one.
        // The note is the main container's (what a reader of the output is told); an
        // init container's lost read keeps what it had without one.
        let noted = read.part == Part::Main;
        let whole_there = data.contains_key(&key) && !(noted && notes.contains_key(&lost_key));
        if whole_there && read.lost.is_some() {
            continue;
        }
        data.insert(key, ByteString(read.bytes.clone()));
        match (noted, read.lost) {
            (false, _) => None,
            (true, None) => notes.remove(&lost_key),
            (true, Some(lost)) => notes.insert(lost_key, lost.code().to_string()),
        };
    }
    let newest = framework.attempt_id();
    let first = newest
        .saturating_sub(i32::try_from(budget.attempts.max(1)).unwrap_or(i32::MAX))
        .saturating_add(1);
    let keep = |key: &String| kept_logs::parse_key(key).is_some_and(|(_, a, _)| a >= first);
    data.retain(|k, _| keep(k));
    notes.retain(|k, _| keep(k));
    let limit = budget.job_bytes.min(kept_logs::MAP_BYTES);
    loop {
        let size: usize = data.iter().map(|(k, v)| k.len() + v.0.len()).sum::<usize>()
            + notes.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
        if size as u64 <= limit {
            break;
        }
        // The oldest attempt kept, while it is not the newest.
        let oldest = data
            .keys()
            .filter_map(|k| kept_logs::parse_key(k).map(|(_, a, _)| a))
            .min();
        match oldest {
            Some(oldest) if oldest < newest => {
                let other =
                    |key: &String| kept_logs::parse_key(key).is_none_or(|(_, a, _)| a != oldest);
                data.retain(|k, _| other(k));
                notes.retain(|k, _| other(k));
            }
            // Each read was cut to its share, so the newest attempts fit the job's bytes
            // unless its names are unusually long: then the longest logs lose their
            // first bytes, so that the bound holds whatever the names.
            _ => {
                let mut over = size as u64 - limit;
                let mut longest: Vec<(usize, String)> =
                    data.iter().map(|(k, v)| (v.0.len(), k.clone())).collect();
                longest.sort_unstable_by(|a, b| b.cmp(a));
                for (_, key) in longest {
                    let Some(value) = data.get_mut(&key) else {
                        continue;
                    };
                    let cut = usize::try_from(over)
                        .unwrap_or(usize::MAX)
                        .min(value.0.len());
                    value.0.drain(..cut);
                    over -= cut as u64;
                    if over == 0 {
                        break;
                    }
                }
                break;
            }
        }
    }
    (before != (map.binary_data.clone(), map.data.clone())).then_some(map)
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

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// Job `framework`'s kept-log ConfigMap `name`, empty, owned by it.
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
/// init container's; `None` when nothing was kept. Read from its job's ConfigMap, or from
/// the task's own where an earlier version kept it there.
pub async fn kept(config_maps: &Api<ConfigMap>, pod: &str, attempt: i32) -> Option<Kept> {
    let job = kept_logs::config_map(kept_logs::framework_of(pod));
    if let Some(map) = config_maps.get_opt(&job).await.ok().flatten()
        && let Some(kept) = kept_in(&map, pod, attempt)
    {
        return Some(kept);
    }
    let legacy = config_maps
        .get_opt(&kept_logs::legacy_config_map(pod))
        .await
        .ok()
        .flatten()?;
    legacy_kept_in(&legacy, attempt)
}

/// What job ConfigMap `map` holds of pod `pod`'s attempt `attempt`.
pub fn kept_in(map: &ConfigMap, pod: &str, attempt: i32) -> Option<Kept> {
    let data = map.binary_data.as_ref()?;
    let main = data.get(&kept_logs::key(pod, attempt, Part::Main));
    let init = data.get(&kept_logs::key(pod, attempt, Part::Init));
    if main.is_none() && init.is_none() {
        return None;
    }
    Some(Kept {
        main: main.map(|b| b.0.clone()).unwrap_or_default(),
        init: init.map(|b| b.0.clone()).unwrap_or_default(),
        lost: map
            .data
            .as_ref()
            .and_then(|d| d.get(&kept_logs::lost_key(pod, attempt)))
            .and_then(|code| Lost::from_code(code))
            .map(|lost| lost.said().to_string())
            .unwrap_or_default(),
    })
}

/// What an earlier version's task ConfigMap `map` holds of attempt `attempt`.
pub fn legacy_kept_in(map: &ConfigMap, attempt: i32) -> Option<Kept> {
    let data = map.binary_data.as_ref()?;
    let main = data.get(&kept_logs::legacy_key(attempt, Part::Main));
    let init = data.get(&kept_logs::legacy_key(attempt, Part::Init));
    if main.is_none() && init.is_none() {
        return None;
    }
    Some(Kept {
        main: main.map(|b| b.0.clone()).unwrap_or_default(),
        init: init.map(|b| b.0.clone()).unwrap_or_default(),
        lost: String::new(),
    })
}

/// Every task attempt job ConfigMap `map` holds: `(pod, attempt, log)`, for the history.
pub fn all_in(map: &ConfigMap, framework: &str) -> Vec<(String, i32, Kept)> {
    let mut attempts: Vec<(String, i32)> = map
        .binary_data
        .iter()
        .flat_map(|d| d.keys())
        .filter_map(|k| kept_logs::parse_key(k).map(|(t, a, _)| (t.to_string(), a)))
        .collect();
    attempts.sort();
    attempts.dedup();
    attempts
        .into_iter()
        .filter_map(|(task, attempt)| {
            let pod = kept_logs::pod_of(framework, &task);
            kept_in(map, &pod, attempt).map(|kept| (pod, attempt, kept))
        })
        .collect()
}

/// What was kept of pod `pod`'s log in its job's current attempt (the pod is gone).
pub async fn kept_now(config_maps: &Api<ConfigMap>, store: &KubeStore, pod: &str) -> Option<Kept> {
    let attempt = store.get(kept_logs::framework_of(pod))?.attempt_id();
    kept(config_maps, pod, attempt).await
}

/// A task attempt's kept log.
#[derive(Debug)]
pub struct Kept {
    pub main: Vec<u8>,
    pub init: Vec<u8>,
    /// Why the log could not be kept whole, if it could not.
    pub lost: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framework(tasks: i32, attempt: i32) -> Framework {
        let mut f: Framework = serde_json::from_value(json!({
            "apiVersion": "frameworkcontroller.microsoft.com/v1", "kind": "Framework",
            "metadata": {"name": "fw", "uid": "u"},
            "spec": {"executionType": "Start", "retryPolicy": {"fancyRetryPolicy": false, "maxRetryCount": 0},
                "taskRoles": [{"name": "worker", "taskNumber": tasks,
                    "frameworkAttemptCompletionPolicy": {"minFailedTaskCount": 1, "minSucceededTaskCount": -1},
                    "task": {"retryPolicy": {"fancyRetryPolicy": false, "maxRetryCount": 0}, "pod": {"spec": {"containers": []}}}}]}
        }))
        .expect("framework");
        f.status = serde_json::from_value(json!({"state": "AttemptRunning",
            "attemptStatus": {"id": attempt, "taskRoleStatuses": []},
            "retryPolicyStatus": {"totalRetriedCount": 0, "accountableRetriedCount": 0}}))
        .ok();
        f
    }

    fn read(task: u32, attempt: i32, part: Part, bytes: usize, lost: Option<Lost>) -> Read {
        Read {
            pod: pai_contract::framework::pod_name("fw", "worker", task),
            attempt,
            part,
            bytes: vec![b'x'; bytes],
            lost,
        }
    }

    fn size(map: &ConfigMap) -> u64 {
        let data: usize = map
            .binary_data
            .iter()
            .flatten()
            .map(|(k, v)| k.len() + v.0.len())
            .sum();
        let notes: usize = map
            .data
            .iter()
            .flatten()
            .map(|(k, v)| k.len() + v.len())
            .sum();
        (data + notes) as u64
    }

    #[test]
    fn a_job_keeps_its_bound_whatever_its_tasks_and_attempts() {
        let budget = Budget {
            task_bytes: kept_logs::DEFAULT_BYTES,
            job_bytes: kept_logs::JOB_BYTES,
            attempts: 3,
        };
        for tasks in [1u32, 4, 1000] {
            let mut map = ConfigMap::default();
            for attempt in 0..5 {
                let f = framework(tasks as i32, attempt);
                let share = budget.share(&f);
                let reads: Vec<Read> = (0..tasks)
                    .flat_map(|t| {
                        [
                            read(t, attempt, Part::Init, share.init as usize, None),
                            read(t, attempt, Part::Main, share.main as usize, Some(Lost::Cut)),
                        ]
                    })
                    .collect();
                map = with_reads(map, &reads, &f, &budget).expect("changed");
                assert!(
                    size(&map) <= budget.job_bytes,
                    "{tasks} tasks: {}",
                    size(&map)
                );
                // Every task's newest attempt is there, whole.
                let pod = pai_contract::framework::pod_name("fw", "worker", tasks - 1);
                let kept = kept_in(&map, &pod, attempt).expect("newest kept");
                assert_eq!(kept.main.len() as u64, share.main);
                assert!(
                    kept_in(&map, &pod, attempt - 3).is_none(),
                    "past keptAttempts"
                );
            }
        }
    }

    #[test]
    fn a_whole_read_is_not_replaced_by_a_lesser_one_and_nothing_new_writes_nothing() {
        let budget = Budget {
            task_bytes: 64,
            job_bytes: 4096,
            attempts: 1,
        };
        let f = framework(2, 0);
        let whole = read(0, 0, Part::Main, 10, None);
        let map = with_reads(
            ConfigMap::default(),
            std::slice::from_ref(&whole),
            &f,
            &budget,
        )
        .expect("changed");
        let lesser = read(0, 0, Part::Main, 2, Some(Lost::Message));
        assert!(with_reads(map.clone(), &[lesser], &f, &budget).is_none());
        assert!(with_reads(map.clone(), &[whole], &f, &budget).is_none());
        let pod = pai_contract::framework::pod_name("fw", "worker", 0);
        assert_eq!(kept_in(&map, &pod, 0).expect("kept").main.len(), 10);
        // A lost read is kept with why, and a whole one replaces it.
        let lost = with_reads(
            map,
            &[read(1, 0, Part::Main, 3, Some(Lost::Nothing))],
            &f,
            &budget,
        )
        .expect("changed");
        let other = pai_contract::framework::pod_name("fw", "worker", 1);
        assert_eq!(
            kept_in(&lost, &other, 0).expect("kept").lost,
            Lost::Nothing.said()
        );
        let fixed =
            with_reads(lost, &[read(1, 0, Part::Main, 5, None)], &f, &budget).expect("changed");
        let kept = kept_in(&fixed, &other, 0).expect("kept");
        assert_eq!((kept.main.len(), kept.lost.as_str()), (5, ""));
        assert_eq!(all_in(&fixed, "fw").len(), 2);
    }

    #[tokio::test]
    async fn a_read_holds_only_the_end() {
        let text: Vec<u8> = (0..200_000u32).flat_map(|i| i.to_le_bytes()).collect();
        let (end, error) = last_bytes(futures::io::Cursor::new(text.clone()), 1000).await;
        assert!(error.is_none());
        assert_eq!(end, text[text.len() - 1000..]);
    }
}
