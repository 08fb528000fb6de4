//! Under Kueue, the pods of an attempt that ends let go of their quota. Kueue admits a
//! plain pod group as one Workload (named after the group: the job's Framework) and,
//! when pods of the group are deleted, holds them with its `kueue.x-k8s.io/managed`
//! finalizer and keeps the quota until their owner replaces them. FrameworkController
//! deletes an attempt's pods and waits for them to be gone before it completes the
//! attempt or makes the next one under the same pod names: neither side moves, and the
//! job stays where it was (seen on a real control plane with Kueue v0.19.2: a stopped
//! job `RUNNING` for good, its pods `Terminating`, the next job waiting on its quota).
//! Only the group's owner can say the group is over; Kueue's documented way is to
//! delete its Workload, upon which Kueue ends what is left of the group, takes its
//! finalizer off the pods and frees the quota.
//!
//! The same holds one pod: FrameworkController deletes the pod of a task that ended and
//! waits for it to be gone before it completes the task (and maybe the attempt), and the
//! namespace controller deletes every pod of a namespace that goes before anything else
//! in it. A pod of ours that is being deleted is let go of here: Kueue's finalizer comes
//! off it, and the group's Workload keeps the quota for the pods that go on (or for the
//! task's next pod) until the attempt's end deletes it. (Seen on the real Kueue: a job
//! whose task failed stayed `RUNNING`, its pod `Terminating`, and neither it nor the next
//! job moved.)
//!
//! This controller says it for every job of the namespace: a Workload whose pods are
//! of an attempt that is ending or ended (stopped, failed, succeeded, the job deleted
//! or gone) is deleted, under its UID. A retried attempt's pods then make a new Workload,
//! which Kueue admits again as it admitted the first; a Workload of the job's current
//! attempt that runs is left alone, as is a finished one (its quota is free already).
//!
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, DynamicObject, Preconditions};
use kube::runtime::watcher::{self, Event as Watched};
use kube::runtime::{WatchStreamExt, watcher::Config};
use kube::{Api, Client, ResourceExt};
use serde_json::Value;
use tracing::{info, warn};

use pai_backend::controller::{Event, Outcome, Reconcile};
use pai_contract::env::fc;
use pai_contract::{Framework, backoff, meta};
use pai_kube_retry::WatchBackoff;

use crate::admission::{KUEUE_API, resource};
use crate::log_keeper::take_finalizer;
use crate::store::KubeStore;

/// One Workload of a pod group of a Framework's, as last seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Seen {
    uid: String,
    /// The Framework attempt its pods are of (`FC_FRAMEWORK_ATTEMPT_ID`), when they say.
    attempt: Option<i32>,
    /// Kueue says the group is over (`Finished=True`): its quota is free already.
    finished: bool,
}

/// The Workloads of the namespace that are our jobs', by name (the job's Framework).
type Workloads = Arc<Mutex<HashMap<String, Seen>>>;

/// Deletes the Kueue Workloads of the jobs' attempts that end, in one namespace.
pub struct QueueRelease {
    workloads: Api<DynamicObject>,
    frameworks: Api<Framework>,
    pods: Api<Pod>,
}

impl QueueRelease {
    pub fn new(client: Client, namespace: &str) -> Self {
        let kind = resource(KUEUE_API, "Workload", "workloads");
        Self {
            workloads: Api::namespaced_with(client.clone(), namespace, &kind),
            frameworks: Api::namespaced(client.clone(), namespace),
            pods: Api::namespaced(client, namespace),
        }
    }

    /// Runs while `store` is kept: from the first lists, then at every change of a
    /// Workload or a Framework.
    pub async fn run(self, store: KubeStore) {
        let seen: Workloads = Arc::default();
        let watched = {
            let seen = seen.clone();
            watcher::watcher(self.workloads.clone(), Config::default())
                .backoff(WatchBackoff::new(backoff::SERVER))
                .filter_map(move |event| std::future::ready(note(&seen, event)))
                .boxed()
        };
        let frameworks = pai_backend::controller::from_broadcast(store.subscribe(), |change| {
            change.framework().name().to_string()
        });
        tokio::spawn(let_deleted_pods_go(self.pods.clone()));
        store.listed().await;
        let releasing = Releasing {
            workloads: self.workloads,
            frameworks: self.frameworks,
            store,
            seen,
        };
        pai_backend::controller::run(releasing, futures::stream::select(watched, frameworks)).await;
    }
}

/// Kueue's finalizer on the pods of a group.
pub const KUEUE_FINALIZER: &str = "kueue.x-k8s.io/managed";

/// Takes Kueue's finalizer off every pod of ours that is being deleted, as one watch of
/// the pods with rest-lite's label says.
async fn let_deleted_pods_go(pods: Api<Pod>) {
    let config = Config::default().labels(&meta::managed_by_selector());
    let mut changed = watcher::watcher(pods.clone(), config)
        .backoff(WatchBackoff::new(backoff::SERVER))
        .applied_objects()
        .boxed();
    while let Some(pod) = changed.next().await {
        let Ok(pod) = pod else { continue };
        let held = pod.metadata.deletion_timestamp.is_some()
            && pod.finalizers().iter().any(|f| f == KUEUE_FINALIZER);
        if !held {
            continue;
        }
        let name = pod.name_any();
        match take_finalizer(&pods, &name, KUEUE_FINALIZER).await {
            Ok(true) => {
                info!(pod = %name, "a pod being deleted let go of: Kueue's finalizer taken off")
            }
            Ok(false) => {}
            Err(e) => {
                warn!(pod = %name, error = %e, "cannot take Kueue's finalizer off a pod being deleted; tried again at its next change")
            }
        }
    }
}

/// Keeps `seen` as the watch says: the name of a Workload of ours that changed, or that
/// everything is to be looked at again (the watch listed anew). A failed watch says
/// nothing: it is resumed with the back-off, and what was seen stays.
fn note(
    seen: &Workloads,
    event: Result<Watched<DynamicObject>, watcher::Error>,
) -> Option<Event<String>> {
    let event = event.ok()?;
    let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
    match event {
        Watched::Init => {
            seen.clear();
            None
        }
        Watched::InitDone => Some(Event::Missed),
        Watched::Apply(workload) | Watched::InitApply(workload) => {
            let name = workload.metadata.name.clone()?;
            match read(&workload) {
                Some(workload) => {
                    seen.insert(name.clone(), workload);
                }
                None => {
                    seen.remove(&name);
                }
            }
            Some(Event::Changed(name))
        }
        Watched::Delete(workload) => {
            seen.remove(workload.metadata.name.as_deref()?);
            None
        }
    }
}

/// A Workload of a pod group of a Framework named as it is: Kueue marks a group's
/// Workload (`kueue.x-k8s.io/is-group-workload`) and copies the pods' spec, not their
/// labels, into its pod sets, whose containers carry FrameworkController's
/// `FC_FRAMEWORK_NAME`. `None` for any other, and for one being deleted. (Whether the
/// Framework is rest-lite's is the copy's to say, or the API server's.)
pub(crate) fn read(workload: &DynamicObject) -> Option<Seen> {
    if workload.metadata.deletion_timestamp.is_some() {
        // Deleted already (Kueue ends the group before it goes): nothing to ask again.
        return None;
    }
    let name = workload.metadata.name.as_deref()?;
    let group = workload
        .metadata
        .annotations
        .as_ref()?
        .get(GROUP_WORKLOAD)
        .is_some_and(|v| v == "true");
    let sets = workload.data["spec"]["podSets"].as_array()?;
    let env = |set: &Value| -> Vec<(String, String)> {
        set["template"]["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["env"].as_array())
            .flatten()
            .filter_map(|v| Some((v["name"].as_str()?.into(), v["value"].as_str()?.into())))
            .collect()
    };
    let of_framework = sets.iter().map(env).find(|env| {
        env.iter()
            .any(|(n, v)| n == fc::FRAMEWORK_NAME && v == name)
    })?;
    if !group {
        return None;
    }
    let attempt = of_framework
        .iter()
        .find(|(n, _)| n == fc::FRAMEWORK_ATTEMPT_ID)
        .and_then(|(_, v)| v.parse().ok());
    let finished = workload.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Finished" && c["status"] == "True");
    Some(Seen {
        uid: workload.metadata.uid.clone().unwrap_or_default(),
        attempt,
        finished,
    })
}

/// Kueue's annotation of a pod group's Workload.
const GROUP_WORKLOAD: &str = "kueue.x-k8s.io/is-group-workload";

/// Whether the pods of `attempt` (`None`: not said) of the job `framework` (`None`:
/// gone) are going: the job is deleted, or that attempt is over (FrameworkController
/// deletes its pods, then completes it or makes the next).
pub(crate) fn attempt_over(framework: Option<&Framework>, attempt: Option<i32>) -> bool {
    let Some(framework) = framework else {
        return true;
    };
    if framework.metadata.deletion_timestamp.is_some() {
        return true;
    }
    let Some(status) = framework.status.as_ref() else {
        return false;
    };
    let current = status.attempt_status.id;
    match attempt {
        Some(attempt) if attempt < current => true,
        Some(attempt) if attempt > current => false,
        _ => status.state.attempt_ending(),
    }
}

/// The releaser at work: a reconcile function on the controller runtime, keyed by job.
struct Releasing {
    workloads: Api<DynamicObject>,
    frameworks: Api<Framework>,
    store: KubeStore,
    seen: Workloads,
}

impl Reconcile for Releasing {
    type Change = String;

    fn key(change: &String) -> String {
        change.clone()
    }

    /// Every Workload of ours that is not finished.
    async fn all(&mut self) -> Vec<String> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.iter()
            .filter(|(_, s)| !s.finished)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Deletes job `name`'s Workload when the attempt its pods are of is over and Kueue
    /// holds the group.
    async fn reconcile(&mut self, name: String) -> Outcome<String> {
        let seen = self
            .seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&name)
            .cloned();
        let Some(seen) = seen.filter(|s| !s.finished) else {
            return Outcome::Done;
        };
        let framework = self.store.get(&name);
        if !attempt_over(framework.as_deref(), seen.attempt) {
            return Outcome::Done;
        }
        if framework.is_none() {
            // Not in the copy: gone, or too new for it.
            match self.frameworks.get_opt(&name).await {
                Ok(None) => {}
                Ok(Some(_)) => return Outcome::Done,
                Err(e) => {
                    warn!(job = %name, error = %e, "cannot tell whether the job of a Kueue Workload is gone");
                    return Outcome::Retry(name);
                }
            }
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(seen.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        let outcome = self.workloads.delete(&name, &params).await;
        let settled = match &outcome {
            Ok(_) => true,
            Err(kube::Error::Api(e)) => e.code == 404 || e.code == 409,
            Err(_) => false,
        };
        if settled {
            // Done with this Workload: the job's next change, before the watch says it
            // went, deletes it no second time. A newer one of the name stays.
            let mut known = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            if known.get(&name).is_some_and(|s| s.uid == seen.uid) {
                known.remove(&name);
            }
        }
        match outcome {
            Ok(_) => {
                info!(job = %name, attempt = ?seen.attempt, "the attempt is over: its Kueue Workload deleted, its pods let go and its quota given back");
                Outcome::Done
            }
            // Gone, or another one of the name (a precondition's 409): not ours to delete.
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Outcome::Done,
            Err(e) => {
                warn!(job = %name, error = %e, "cannot delete the Kueue Workload of a job that is over");
                Outcome::Retry(name)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// A Workload as Kueue v0.19 makes one for a pod group: the pods' spec (their
    /// containers' environment) in its pod set, their labels not.
    fn workload(
        name: &str,
        annotations: Value,
        framework: &str,
        conditions: Value,
    ) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": KUEUE_API, "kind": "Workload",
            "metadata": {"name": name, "uid": "u-1", "annotations": annotations},
            "spec": {"podSets": [{"name": "90e0dcb3", "count": 2, "template": {"metadata": {},
                "spec": {"containers": [{"name": "main", "env": [
                    {"name": "FC_FRAMEWORK_NAMESPACE", "value": "default"},
                    {"name": "FC_FRAMEWORK_NAME", "value": framework},
                    {"name": "FC_FRAMEWORK_ATTEMPT_ID", "value": "1"}]}]}}}]},
            "status": {"conditions": conditions},
        }))
        .expect("a Workload")
    }

    #[test]
    fn only_the_workloads_of_frameworks_pod_groups_are_read_and_finished_ones_say_so() {
        let group = json!({"kueue.x-k8s.io/is-group-workload": "true"});
        let seen = read(&workload("job-a", group.clone(), "job-a", json!([]))).expect("a group");
        assert_eq!(
            seen,
            Seen {
                uid: "u-1".into(),
                attempt: Some(1),
                finished: false
            }
        );
        let finished = json!([{"type": "Finished", "status": "True"}]);
        assert!(
            read(&workload("job-a", group.clone(), "job-a", finished)).is_some_and(|s| s.finished)
        );
        // A single pod's Workload, or pods of another Framework: not a job's group.
        assert_eq!(
            read(&workload("job-a", json!({}), "job-a", json!([]))),
            None
        );
        assert_eq!(read(&workload("job-a", group, "job-b", json!([]))), None);
    }

    /// A Framework in `state` at attempt `attempt`.
    fn at(state: &str, attempt: i32) -> Framework {
        let mut framework = pai_test_support::frameworks::framework("job-a", &[("worker", 2)]);
        framework.status = Some(
            serde_json::from_value(json!({"state": state, "attemptStatus": {"id": attempt}}))
                .expect("a status"),
        );
        framework
    }

    #[test]
    fn an_attempts_pods_go_when_it_ends_or_the_job_does_and_the_next_attempts_stay() {
        assert!(attempt_over(None, Some(0)), "the job is gone");
        for state in [
            "AttemptDeletionPending",
            "AttemptDeleting",
            "AttemptCompleted",
            "Completed",
        ] {
            assert!(attempt_over(Some(&at(state, 0)), Some(0)), "{state}");
            assert!(attempt_over(Some(&at(state, 0)), None), "{state}");
        }
        for state in [
            "AttemptCreationRequested",
            "AttemptPreparing",
            "AttemptRunning",
        ] {
            assert!(!attempt_over(Some(&at(state, 1)), Some(1)), "{state}");
            assert!(
                attempt_over(Some(&at(state, 1)), Some(0)),
                "an earlier attempt's"
            );
        }
        // The copy behind the next attempt's Workload: not yet.
        assert!(!attempt_over(Some(&at("AttemptDeleting", 0)), Some(1)));
        let mut deleted = at("AttemptRunning", 0);
        deleted.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
        );
        assert!(attempt_over(Some(&deleted), Some(0)));
        assert!(!attempt_over(
            Some(&pai_test_support::frameworks::framework("new", &[])),
            Some(0)
        ));
    }
}
