//! Why a job on the cluster waits, kept from the objects that hold it: the gang
//! engine's group (a coscheduling or Volcano PodGroup, a Kueue Workload) and the
//! scheduler's verdict on its pods that are not placed yet (`PodScheduled=False`).
//!
//! Two watches at most, each of a handful of objects per waiting job rather than per
//! reader: the engine's groups with rest-lite's label (Kueue's Workloads have none of
//! ours: every Workload of the namespace, kept only when it names one of our jobs), and
//! the *pending* pods with rest-lite's label (`fieldSelector=status.phase=Pending`: a pod
//! that is placed and runs leaves the watch, as the API server tells a filtered watch
//! with a deletion). kube's watcher keeps each going (re-listing after a 410, backing off
//! after failures). A failing watch leaves the reasons it had: they are words for
//! people, never a decision.
//!
//! A job's reason is made again only when something it is made of changes; when it
//! changes, the job's Framework is announced to the copy's subscribers again, so its
//! view is made anew and job watches send a line.

use pai_contract::backoff;
use pai_kube_retry::WatchBackoff;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use serde_json::Value;

use pai_api::waiting::Waiting;

use crate::waiting;
use pai_contract::framework::LABEL_FRAMEWORK_NAME;
use pai_contract::{Framework, meta};
use pai_translate::gang::Engine;

use crate::store::KubeStore;

/// What one job's reason is made of.
#[derive(Default)]
struct Evidence {
    /// The engine's group or Workload, as read.
    engine: Option<waiting::Said>,
    /// Each pending pod's verdict, by pod name.
    pods: BTreeMap<String, Waiting>,
    /// The reason made of the above; the same `Arc` until it changes.
    held: Option<Arc<Waiting>>,
}

/// Which watch a reading came from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    Engine,
    Pods,
}

/// The reasons jobs wait, kept by two watches; clones share them.
#[derive(Clone)]
pub struct Admission(Arc<Shared>);

struct Shared {
    jobs: RwLock<HashMap<String, Evidence>>,
    store: KubeStore,
    /// Whether the engine's objects carry rest-lite's label (PodGroups; not Kueue's
    /// Workloads).
    engine_labelled: bool,
    tasks: Vec<tokio::task::AbortHandle>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The `ApiResource` of `kind` in `api_version` (`group/version`), named `plural`.
pub fn resource(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// The Kueue Workloads' API version.
pub const KUEUE_API: &str = "kueue.x-k8s.io/v1beta1";

impl Admission {
    /// Starts the watches of `namespace` for a cluster whose gang engine is `engine`;
    /// announces changed reasons through `store`.
    pub fn start(client: Client, namespace: &str, engine: Engine, store: KubeStore) -> Self {
        let ours = meta::managed_by_selector();
        let (ready, started) = tokio::sync::watch::channel(None::<std::sync::Weak<Shared>>);
        let mut tasks = Vec::new();
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let config = watcher::Config::default()
            .labels(&format!("{ours},{LABEL_FRAMEWORK_NAME}"))
            .fields("status.phase=Pending");
        let stream = watcher::watcher(pods, config)
            .backoff(WatchBackoff::new(backoff::SERVER))
            .map(|event| event.map(|e| map_event(e, pod_reading)));
        tasks.push(spawn(Source::Pods, stream.boxed(), started.clone()));
        let pod_group = |api_version: &str, reader: Reader| {
            let kind = resource(api_version, "PodGroup", pai_translate::gang::PODGROUPS);
            Some((kind, Some(ours.clone()), reader))
        };
        let group = match engine {
            Engine::None => None,
            Engine::Coscheduling => {
                pod_group(pai_translate::gang::COSCHEDULING_API, coscheduling_reading)
            }
            Engine::Volcano => pod_group(pai_translate::gang::VOLCANO_API, volcano_reading),
            Engine::Kueue => Some((
                resource(KUEUE_API, "Workload", "workloads"),
                None,
                workload_reading as Reader,
            )),
        };
        if let Some((resource, labels, reader)) = group {
            let api: Api<DynamicObject> = Api::namespaced_with(client, namespace, &resource);
            let mut config = watcher::Config::default();
            if let Some(labels) = &labels {
                config = config.labels(labels);
            }
            let stream = watcher::watcher(api, config)
                .backoff(WatchBackoff::new(backoff::SERVER))
                .map(move |event| event.map(|e| map_event(e, reader)));
            tasks.push(spawn(Source::Engine, stream.boxed(), started));
        }
        let shared = Arc::new(Shared {
            jobs: Default::default(),
            store,
            engine_labelled: engine != Engine::Kueue,
            tasks,
        });
        let _ = ready.send(Some(Arc::downgrade(&shared)));
        Self(shared)
    }

    /// Why the job of `framework` waits, as its engine and pods say; `None`: they say
    /// nothing.
    pub fn held(&self, framework: &Framework) -> Option<Arc<Waiting>> {
        self.0
            .jobs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(framework.name())
            .and_then(|e| e.held.clone())
    }
}

/// What one object says of a job: the pods' verdicts and the engine's reading.
enum Word {
    Pod(Waiting),
    Engine(waiting::Said),
}

/// Reads one object: the job (Framework name) it speaks of, the key it is kept by
/// within that job, and what it says (`None`: it no longer holds the job).
type Reader = fn(&Value) -> Option<(String, String, Option<Word>)>;

/// One change of a watch, read.
enum Reading {
    /// A (re-)list starts: what the list brings replaces what the watch had.
    Restart,
    /// An object as it is now.
    Seen(String, String, Option<Word>),
    /// An object is gone.
    Gone(String, String),
    /// A (re-)list ended.
    Listed,
    Nothing,
}

fn map_event<K: serde::Serialize>(event: Event<K>, reader: Reader) -> Reading {
    let read = |object: &K| serde_json::to_value(object).ok().and_then(|v| reader(&v));
    match event {
        Event::Init => Reading::Restart,
        Event::InitDone => Reading::Listed,
        Event::Apply(object) | Event::InitApply(object) => match read(&object) {
            Some((job, key, said)) => Reading::Seen(job, key, said),
            None => Reading::Nothing,
        },
        Event::Delete(object) => match read(&object) {
            Some((job, key, _)) => Reading::Gone(job, key),
            None => Reading::Nothing,
        },
    }
}

fn spawn(
    source: Source,
    mut stream: futures::stream::BoxStream<'static, Result<Reading, watcher::Error>>,
    mut started: tokio::sync::watch::Receiver<Option<std::sync::Weak<Shared>>>,
) -> tokio::task::AbortHandle {
    tokio::spawn(async move {
        let Ok(weak) = started.wait_for(Option::is_some).await.map(|w| w.clone()) else {
            return;
        };
        let Some(weak) = weak else { return };
        // What the current (re-)list has brought: (job, key) seen.
        let mut listing: Option<HashSet<(String, String)>> = None;
        // The first failure is told; the rest are the watcher's retries.
        let mut warned = false;
        while let Some(reading) = stream.next().await {
            let Some(shared) = weak.upgrade() else { return };
            match reading {
                Ok(Reading::Restart) => listing = Some(HashSet::new()),
                Ok(Reading::Seen(job, key, said)) => {
                    if let Some(seen) = listing.as_mut() {
                        seen.insert((job.clone(), key.clone()));
                    }
                    shared.set(source, &job, &key, said);
                }
                Ok(Reading::Gone(job, key)) => shared.set(source, &job, &key, None),
                Ok(Reading::Listed) => {
                    if let Some(seen) = listing.take() {
                        shared.forget_unseen(source, &seen);
                    }
                }
                Ok(Reading::Nothing) => {}
                Err(error) if !warned => {
                    warned = true;
                    tracing::warn!(%error, "cannot watch what says why jobs wait (the Role may lack it: deploy/rest-lite/rbac.yaml); waiting jobs show their Framework's state meanwhile; retrying");
                }
                Err(error) => {
                    tracing::debug!(%error, "a watch of why jobs wait failed; kube's watcher retries it");
                }
            }
        }
    })
    .abort_handle()
}

impl Shared {
    /// Keeps what `key` of `source` says of `job` (`None`: nothing any more).
    fn set(&self, source: Source, job: &str, key: &str, said: Option<Word>) {
        // Kueue's Workloads are watched without a label of ours: only our jobs' are
        // kept (Kueue makes a Workload once every pod exists, after the Framework).
        // PodGroups carry our label, and come before their Framework.
        if source == Source::Engine
            && !self.engine_labelled
            && said.is_some()
            && self.store.get(job).is_none()
        {
            return;
        }
        let mut jobs = self.jobs.write().unwrap_or_else(|p| p.into_inner());
        let evidence = jobs.entry(job.to_string()).or_default();
        match (source, said) {
            (Source::Engine, Some(Word::Engine(said))) => evidence.engine = Some(said),
            (Source::Engine, _) => evidence.engine = None,
            (Source::Pods, Some(Word::Pod(verdict))) => {
                evidence.pods.insert(key.to_string(), verdict);
            }
            (Source::Pods, _) => {
                evidence.pods.remove(key);
            }
        }
        let changed = self.remake(job, &mut jobs);
        drop(jobs);
        if changed {
            self.store.nudge(job);
        }
    }

    /// Forgets what `source` said that its last list did not bring again.
    fn forget_unseen(&self, source: Source, seen: &HashSet<(String, String)>) {
        let mut jobs = self.jobs.write().unwrap_or_else(|p| p.into_inner());
        let names: Vec<String> = jobs.keys().cloned().collect();
        let mut changed = Vec::new();
        for job in names {
            let Some(evidence) = jobs.get_mut(&job) else {
                continue;
            };
            match source {
                Source::Engine => {
                    if !seen.contains(&(job.clone(), job.clone())) {
                        evidence.engine = None;
                    }
                }
                Source::Pods => evidence
                    .pods
                    .retain(|pod, _| seen.contains(&(job.clone(), pod.clone()))),
            }
            if self.remake(&job, &mut jobs) {
                changed.push(job);
            }
        }
        drop(jobs);
        for job in changed {
            self.store.nudge(&job);
        }
    }

    /// Makes `job`'s reason again from its evidence; whether it changed. A job with no
    /// evidence left is forgotten.
    fn remake(&self, job: &str, jobs: &mut HashMap<String, Evidence>) -> bool {
        let Some(evidence) = jobs.get_mut(job) else {
            return false;
        };
        let total = self.store.get(job).map_or(evidence.pods.len() as u32, |f| {
            f.spec.task_roles.iter().map(|r| r.tasks()).sum()
        });
        let made = waiting::combine(
            evidence.engine.clone(),
            waiting::of_pods(evidence.pods.values(), total),
        );
        let changed = evidence.held.as_deref() != made.as_ref();
        if changed {
            evidence.held = made.map(Arc::new);
        }
        if evidence.engine.is_none() && evidence.pods.is_empty() {
            jobs.remove(job);
        }
        changed
    }
}

fn name_of(object: &Value) -> Option<String> {
    object["metadata"]["name"].as_str().map(str::to_string)
}

/// A pending pod: its Framework (FrameworkController's label) and its scheduler
/// verdict.
fn pod_reading(pod: &Value) -> Option<(String, String, Option<Word>)> {
    let job = pod["metadata"]["labels"][LABEL_FRAMEWORK_NAME].as_str()?;
    let said = (pod["status"]["phase"].as_str().unwrap_or("Pending") == "Pending")
        .then(|| waiting::of_pod(&pod["status"]))
        .flatten()
        .map(Word::Pod);
    Some((job.to_string(), name_of(pod)?, said))
}

/// A coscheduling PodGroup (named after its Framework).
fn coscheduling_reading(group: &Value) -> Option<(String, String, Option<Word>)> {
    let name = name_of(group)?;
    let members = group["spec"]["minMember"].as_u64().unwrap_or(0);
    let said = waiting::of_coscheduling_group(
        &group["status"],
        u32::try_from(members).unwrap_or(u32::MAX),
    )
    .map(Word::Engine);
    Some((name.clone(), name, said))
}

/// A Volcano PodGroup (named after its Framework).
fn volcano_reading(group: &Value) -> Option<(String, String, Option<Word>)> {
    let name = name_of(group)?;
    let queue = group["spec"]["queue"].as_str().unwrap_or("default");
    let said = waiting::of_volcano_group(&group["status"], queue).map(Word::Engine);
    Some((name.clone(), name, said))
}

/// A Kueue Workload of a pod group (named after the group: its Framework).
fn workload_reading(workload: &Value) -> Option<(String, String, Option<Word>)> {
    let name = name_of(workload)?;
    let queue = workload["spec"]["queueName"].as_str().unwrap_or("");
    let said = waiting::of_workload(&workload["status"], queue).map(Word::Engine);
    Some((name.clone(), name, said))
}
