//! Who deleted a job's pod, in their own words. FrameworkController ends a task whose pod
//! others delete with `PodExternalDeleted` (−101, "Pod is being deleted by others"): a
//! transient failure, retried without spending the job's `jobRetryCount`. What did it is
//! written on the pod before it goes, as a condition:
//! - kube-scheduler's preemption, the eviction API (`kubectl drain`), the taint manager
//!   and the kubelet: `DisruptionTarget=True` with reason `PreemptionByScheduler`,
//!   `EvictionByEvictionAPI`, `DeletionByTaintManager`, `TerminationByKubelet`;
//! - Kueue, when it evicts the job's Workload (preempted, or stopped): its own
//!   `TerminationTarget=True`, reason `StoppedByKueue` in older versions, in v0.19 the
//!   eviction's (`WorkloadEvictedDueToPreempted`), with its message;
//! - Volcano's evictor (its preempt and reclaim actions): `Ready=False`, reason `Evict`,
//!   "Pod is evicted, because of preempt".
//!
//! The log keeper's pod watch ([`crate::log_keeper`]) notes the first such words of each
//! job's attempt here; the historian ([`crate::history`]) writes them into the attempt's
//! end, so the job's history says what ended it (also an end it recorded before the
//! words were noted). Kept in memory, at most one entry per job the server's copy holds:
//! dropped once written, and at each deletion every job's that is gone. A server that
//! was not running as the pod went misses them, and the history then says only
//! FrameworkController's words.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;

/// The words noted for each job (by Framework name): its attempt, and what ended it.
#[derive(Clone, Default)]
pub struct Disruptions(Arc<Mutex<HashMap<String, (i32, String)>>>);

impl Disruptions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (i32, String)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes `pod`'s disruption, if it has one, for `framework`'s attempt `attempt`
    /// (the first of an attempt is kept). Whether it was new.
    pub fn saw(&self, pod: &Pod, framework: &str, attempt: i32) -> bool {
        let Some(words) = words(pod) else {
            return false;
        };
        let mut noted = self.lock();
        match noted.get(framework) {
            Some((at, _)) if *at >= attempt => false,
            _ => {
                noted.insert(framework.to_string(), (attempt, words));
                true
            }
        }
    }

    /// The attempt of `framework` last noted and what ended it.
    pub fn of(&self, framework: &str) -> Option<(i32, String)> {
        self.lock().get(framework).cloned()
    }

    /// Forgets a job's words: written into its history, or its Framework gone.
    pub fn forget(&self, framework: &str) {
        self.lock().remove(framework);
    }

    /// Keeps only the jobs `live` says are there.
    pub fn retain(&self, live: impl Fn(&str) -> bool) {
        self.lock().retain(|name, _| live(name));
    }
}

/// Who deleted `pod` and why, from its conditions: `Kueue (StoppedByKueue): Preempted …`.
pub fn words(pod: &Pod) -> Option<String> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find_map(|c| {
        let reason = c.reason.as_deref().unwrap_or_default();
        let by = match (c.type_.as_str(), c.status.as_str(), reason) {
            ("DisruptionTarget", "True", "PreemptionByScheduler") => {
                "kube-scheduler, preempting for a pod of a higher priority"
            }
            ("DisruptionTarget", "True", "EvictionByEvictionAPI") => {
                "the eviction API (kubectl drain, or an operator's eviction)"
            }
            ("DisruptionTarget", "True", "DeletionByTaintManager") => "the node's taint manager",
            ("DisruptionTarget", "True", "TerminationByKubelet") => "the node's kubelet",
            ("DisruptionTarget", "True", _) => "the cluster",
            ("TerminationTarget", "True", _) => "Kueue",
            ("Ready", "False", "Evict") => "Volcano",
            _ => return None,
        };
        let message = c.message.as_deref().unwrap_or_default();
        Some(
            format!("{by} ({reason}): {message}")
                .trim_end_matches([':', ' '])
                .to_string(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(conditions: serde_json::Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p"}, "status": {"conditions": conditions}}),
        )
        .expect("a pod")
    }

    #[test]
    fn each_engines_condition_is_read_in_its_words() {
        let cases = [
            (
                json!([{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler", "message": "default-scheduler: preempting to accommodate a higher priority pod"}]),
                "kube-scheduler, preempting for a pod of a higher priority (PreemptionByScheduler): default-scheduler: preempting",
            ),
            (
                json!([{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting"}]),
                "the eviction API (kubectl drain, or an operator's eviction) (EvictionByEvictionAPI): Eviction API: evicting",
            ),
            (
                json!([{"type": "Ready", "status": "True"}, {"type": "TerminationTarget", "status": "True", "reason": "StoppedByKueue", "message": "Preempted to accommodate a workload (UID: 1) due to prioritization in the ClusterQueue"}]),
                "Kueue (StoppedByKueue): Preempted to accommodate a workload",
            ),
            (
                // As Kueue v0.19.2 wrote it on the harness.
                json!([{"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvictedDueToPreempted", "message": "Preempted to accommodate a workload (UID: 4ad2, JobUID: UNKNOWN) due to prioritization in the ClusterQueue; preemptor path: /cq; preemptee path: /cq"}]),
                "Kueue (WorkloadEvictedDueToPreempted): Preempted to accommodate a workload",
            ),
            (
                json!([{"type": "Ready", "status": "False", "reason": "Evict", "message": "Pod is evicted, because of preempt"}]),
                "Volcano (Evict): Pod is evicted, because of preempt",
            ),
        ];
        for (conditions, want) in cases {
            let said = words(&pod(conditions)).expect("words");
            assert!(said.starts_with(want), "{said}");
        }
        for quiet in [
            json!([{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}]),
            json!([{"type": "DisruptionTarget", "status": "False", "reason": "PreemptionByScheduler"}]),
        ] {
            assert_eq!(words(&pod(quiet)), None);
        }
    }

    #[test]
    fn the_first_words_of_an_attempt_are_kept_until_the_job_goes() {
        let noted = Disruptions::default();
        let drained = pod(
            json!([{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI", "message": "first"}]),
        );
        let other = pod(
            json!([{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler", "message": "second"}]),
        );
        assert!(noted.saw(&drained, "f", 0));
        assert!(!noted.saw(&other, "f", 0), "the first of the attempt stays");
        let (attempt, words) = noted.of("f").expect("noted");
        assert_eq!(attempt, 0);
        assert!(words.ends_with("first"));
        assert!(noted.saw(&other, "f", 1), "a later attempt's replaces it");
        assert_eq!(noted.of("f").map(|(attempt, _)| attempt), Some(1));
        assert!(noted.saw(&other, "g", 0));
        noted.retain(|name| name == "g");
        assert_eq!(noted.of("f"), None, "gone with its job");
        assert!(noted.of("g").is_some());
        noted.forget("g");
        assert_eq!(noted.of("g"), None);
    }
}
