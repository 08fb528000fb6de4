//! Why a job on a cluster that does not run yet waits, in the words of whatever holds
//! it: the gang scheduler's PodGroup, Kueue's Workload, kube-scheduler's verdict on the
//! pods ([`crate::admission`] watches them). Each reader takes the status shape its engine publishes (as JSON: these are
//! other projects' objects) and gives a [`Waiting`], or `None` when that engine no
//! longer holds the job.
//!
//! Shapes read (fields as the engines' CRDs publish them):
//! - scheduler-plugins' coscheduling PodGroup (`scheduling.x-k8s.io/v1alpha1`):
//!   `status.phase` (`Pending`, `PreScheduling`, `Scheduling`, `Scheduled`, `Running`,
//!   `Finished`, `Failed`), `status.running`, `status.scheduleStartTime`;
//! - Volcano's PodGroup (`scheduling.volcano.sh/v1beta1`): `status.phase` (`Pending`,
//!   `Inqueue`, `Running`, `Unknown`, `Completed`) and `status.conditions[]` of type
//!   `Unschedulable`/`Scheduled` with `reason`, `message`, `lastTransitionTime`;
//! - Kueue's Workload (`kueue.x-k8s.io/v1beta1`): `status.conditions[]` of type
//!   `QuotaReserved`, `Admitted`, `Evicted`, `Finished`;
//! - a Pod's `status.conditions[]` of type `PodScheduled` (`status: False`, `reason`
//!   `Unschedulable` or `SchedulingGated`, the scheduler's `message`).

use serde_json::Value;

use pai_api::waiting::{Waiting, millis};

/// What an engine says of a job it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Said {
    pub waiting: Waiting,
    /// Whether the engine explained it in its own words (a condition's message), or
    /// only named its phase: the scheduler's verdict on the pods then says more.
    pub in_own_words: bool,
}

fn phase_only(waiting: Waiting) -> Option<Said> {
    Some(Said {
        waiting,
        in_own_words: false,
    })
}

fn own_words(waiting: Waiting) -> Option<Said> {
    Some(Said {
        waiting,
        in_own_words: true,
    })
}

fn text<'a>(value: &'a Value, field: &str) -> Option<&'a str> {
    value
        .get(field)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The conditions of `status` of type `kind`.
fn condition<'a>(status: &'a Value, kind: &str) -> Option<&'a Value> {
    status
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| text(c, "type") == Some(kind))
}

fn holds(condition: Option<&Value>) -> Option<bool> {
    condition
        .and_then(|c| text(c, "status"))
        .map(|s| s == "True")
}

fn from_condition(condition: &Value, reason: &str, message: &str) -> Waiting {
    Waiting {
        reason: text(condition, "reason").unwrap_or(reason).to_string(),
        message: text(condition, "message").unwrap_or(message).to_string(),
        since: millis(text(condition, "lastTransitionTime")),
        until: None,
    }
}

/// A coscheduling PodGroup's `status` of a group of `members` pods: waiting until the
/// plugin has placed them all.
pub fn of_coscheduling_group(status: &Value, members: u32) -> Option<Said> {
    let phase = text(status, "phase").unwrap_or("Pending");
    if matches!(phase, "Scheduled" | "Running" | "Finished" | "Failed") {
        return None;
    }
    let running = status.get("running").and_then(Value::as_u64).unwrap_or(0);
    phase_only(Waiting {
        reason: phase.to_string(),
        message: format!(
            "the coscheduling plugin places all {members} pods together or none ({running} running)"
        ),
        since: millis(text(status, "scheduleStartTime")),
        until: None,
    })
}

/// A Volcano PodGroup's `status`: waiting while it is `Pending` (not let into its
/// queue) or `Inqueue` (let in, its pods not all placed), in the words of its
/// `Unschedulable` condition when it has one.
pub fn of_volcano_group(status: &Value, queue: &str) -> Option<Said> {
    let phase = text(status, "phase").unwrap_or("Pending");
    if !matches!(phase, "Pending" | "Inqueue") {
        return None;
    }
    if let Some(unschedulable) = condition(status, "Unschedulable")
        && holds(Some(unschedulable)) == Some(true)
    {
        return own_words(from_condition(
            unschedulable,
            "Unschedulable",
            "Volcano cannot place the group's pods",
        ));
    }
    let message = if phase == "Pending" {
        format!("Volcano has not let the group into queue {queue} yet")
    } else {
        format!("let into queue {queue}; Volcano places its pods together")
    };
    phase_only(Waiting {
        reason: phase.to_string(),
        message,
        since: None,
        until: None,
    })
}

/// A Kueue Workload's `status`: waiting until it is admitted, in the words of its
/// `QuotaReserved` (or `Evicted`) condition.
pub fn of_workload(status: &Value, queue: &str) -> Option<Said> {
    if holds(condition(status, "Admitted")) == Some(true)
        || holds(condition(status, "Finished")) == Some(true)
    {
        return None;
    }
    if let Some(evicted) = condition(status, "Evicted")
        && holds(Some(evicted)) == Some(true)
    {
        return own_words(from_condition(evicted, "Evicted", "Kueue evicted the job"));
    }
    match condition(status, "QuotaReserved") {
        Some(reserved) if holds(Some(reserved)) == Some(false) => own_words(from_condition(
            reserved,
            "Pending",
            &format!("waiting for quota in LocalQueue {queue}"),
        )),
        Some(reserved) => own_words(Waiting {
            reason: "QuotaReserved".to_string(),
            message: "Kueue reserved quota; waiting for its admission checks".to_string(),
            since: millis(text(reserved, "lastTransitionTime")),
            until: None,
        }),
        None => phase_only(Waiting {
            reason: "Pending".to_string(),
            message: format!("LocalQueue {queue} has not considered the job yet"),
            since: None,
            until: None,
        }),
    }
}

/// A pod's verdict from the scheduler: its `PodScheduled` condition when it is
/// `False` (the pod waits to be placed, or is gated).
pub fn of_pod(pod_status: &Value) -> Option<Waiting> {
    let scheduled = condition(pod_status, "PodScheduled")?;
    if holds(Some(scheduled)) != Some(false) {
        return None;
    }
    Some(from_condition(
        scheduled,
        "Unschedulable",
        "the scheduler has not placed the pod",
    ))
}

/// The pods' verdicts as one, for a job of `total` tasks: the earliest verdict's words
/// (the pods of one job mostly share them), how many pods it holds, since the earliest.
pub fn of_pods<'a>(verdicts: impl IntoIterator<Item = &'a Waiting>, total: u32) -> Option<Waiting> {
    let mut count = 0;
    let mut first: Option<&Waiting> = None;
    for verdict in verdicts {
        count += 1;
        if first.is_none_or(|f| verdict.since.unwrap_or(i64::MAX) < f.since.unwrap_or(i64::MAX)) {
            first = Some(verdict);
        }
    }
    let first = first?;
    let gated = first.reason == "SchedulingGated";
    Some(Waiting {
        reason: first.reason.clone(),
        message: if gated {
            format!(
                "{count} of {total} pods are gated until their queue admits them: {}",
                first.message
            )
        } else {
            format!(
                "{count} of {total} pods cannot be placed: {}",
                first.message
            )
        },
        since: first.since,
        until: None,
    })
}

/// The engine's reason, with the pods' verdict added when the engine only names its
/// phase (coscheduling, a Volcano group without a condition); the pods' verdict alone
/// when the engine says nothing; the earlier `since` of the two.
pub fn combine(engine: Option<Said>, pods: Option<Waiting>) -> Option<Waiting> {
    match (engine, pods) {
        (Some(said), Some(pods)) => {
            let mut engine = said.waiting;
            if !said.in_own_words {
                engine.message = format!("{}; {}", engine.message, pods.message);
            }
            engine.since = match (engine.since, pods.since) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            Some(engine)
        }
        (engine, pods) => engine.map(|s| s.waiting).or(pods),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_volcano_group_waits_in_its_unschedulable_conditions_words() {
        let status = json!({"phase": "Inqueue", "conditions": [
            {"type": "Scheduled", "status": "False"},
            {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
             "message": "6/6 tasks in gang unschedulable: pod group is not ready, 6 Pending, 6 minAvailable",
             "lastTransitionTime": "2026-11-25T10:00:00Z"}]});
        let said = of_volcano_group(&status, "research").expect("waits");
        assert!(said.in_own_words);
        let waiting = said.waiting;
        assert_eq!(waiting.reason, "NotEnoughResources");
        assert!(
            waiting
                .message
                .starts_with("6/6 tasks in gang unschedulable")
        );
        assert_eq!(waiting.since, millis(Some("2026-11-25T10:00:00Z")));
        let pending = of_volcano_group(&json!({"phase": "Pending"}), "research")
            .unwrap()
            .waiting;
        assert_eq!(pending.reason, "Pending");
        assert!(pending.message.contains("queue research"), "{pending}");
        assert_eq!(of_volcano_group(&json!({"phase": "Running"}), "q"), None);
    }

    #[test]
    fn a_workload_waits_until_admitted() {
        let status = json!({"conditions": [{"type": "QuotaReserved", "status": "False",
            "reason": "Pending", "message": "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 2 more needed",
            "lastTransitionTime": "2026-11-25T10:00:00Z"}]});
        let waiting = of_workload(&status, "team").expect("waits").waiting;
        assert_eq!(waiting.reason, "Pending");
        assert!(waiting.message.contains("insufficient unused quota"));
        let admitted = json!({"conditions": [{"type": "QuotaReserved", "status": "True"},
            {"type": "Admitted", "status": "True"}]});
        assert_eq!(of_workload(&admitted, "team"), None);
        let unseen = of_workload(&json!({}), "team").unwrap();
        assert!(!unseen.in_own_words);
        assert!(unseen.waiting.message.contains("LocalQueue team"));
    }

    #[test]
    fn pods_verdicts_count_and_the_earliest_speaks() {
        let pod = |message: &str, at: &str| {
            of_pod(
                &json!({"phase": "Pending", "conditions": [{"type": "PodScheduled",
                "status": "False", "reason": "Unschedulable", "message": message,
                "lastTransitionTime": at}]}),
            )
            .unwrap()
        };
        let verdicts = [
            pod("later", "2026-11-25T10:05:00Z"),
            pod(
                "0/2 nodes are available: 2 Insufficient cpu.",
                "2026-11-25T10:00:00Z",
            ),
        ];
        let joined = of_pods(&verdicts, 6).unwrap();
        assert_eq!(joined.reason, "Unschedulable");
        assert_eq!(
            joined.message,
            "2 of 6 pods cannot be placed: 0/2 nodes are available: 2 Insufficient cpu."
        );
        assert_eq!(of_pods(&[], 6), None);
        let scheduled = json!({"conditions": [{"type": "PodScheduled", "status": "True"}]});
        assert_eq!(of_pod(&scheduled), None);
    }

    #[test]
    fn a_phase_only_reason_gets_the_pods_words() {
        let group = of_coscheduling_group(&json!({"phase": "Pending"}), 6).unwrap();
        let pods = Waiting {
            reason: "Unschedulable".into(),
            message: "6 of 6 pods cannot be placed: 0/2 nodes are available".into(),
            since: Some(5),
            until: None,
        };
        let both = combine(Some(group), Some(pods)).unwrap();
        assert_eq!(both.reason, "Pending");
        assert!(both.message.contains("together or none"), "{both}");
        assert!(both.message.ends_with("0/2 nodes are available"), "{both}");
        assert_eq!(both.since, Some(5));
        assert_eq!(of_coscheduling_group(&json!({"phase": "Running"}), 6), None);
        // An engine that explains itself is not repeated by the pods.
        let volcano = own_words(Waiting {
            reason: "NotEnoughResources".into(),
            message: "6/6 tasks in gang unschedulable".into(),
            since: None,
            until: None,
        });
        let pods = Waiting {
            reason: "Unschedulable".into(),
            message: "6 of 6 pods cannot be placed: pod group is not ready".into(),
            since: Some(7),
            until: None,
        };
        let one = combine(volcano, Some(pods)).unwrap();
        assert_eq!(one.message, "6/6 tasks in gang unschedulable");
        assert_eq!(one.since, Some(7));
    }
}
