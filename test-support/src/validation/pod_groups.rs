//! PodGroups, by the schema of the `PodGroup` the object's `apiVersion` names, as each
//! project's CRD publishes it: scheduler-plugins' `scheduling.x-k8s.io/v1alpha1`
//! (`manifests/coscheduling/crd.yaml`) and Volcano's `scheduling.volcano.sh/v1beta1`
//! (`config/crd/volcano/bases/scheduling.volcano.sh_podgroups.yaml`).

use serde_json::{Value, json};

use super::causes::{Cause, invalid};
use super::schema::{self, Schema, check, int32, integer, object, plain_string};

/// scheduler-plugins' PodGroup (`scheduling.x-k8s.io/v1alpha1`).
fn coscheduling_pod_group() -> Schema {
    object(vec![
        (
            "spec",
            object(vec![
                ("minMember", int32()),
                ("minResources", Schema::Map(Box::new(Schema::Quantity))),
                ("scheduleTimeoutSeconds", int32()),
            ]),
        ),
        (
            "status",
            object(vec![
                ("failed", int32()),
                ("occupiedBy", plain_string()),
                ("phase", plain_string()),
                ("running", int32()),
                ("scheduleStartTime", plain_string()),
                ("succeeded", int32()),
            ]),
        ),
    ])
}

/// Volcano's PodGroup (`scheduling.volcano.sh/v1beta1`).
fn volcano_pod_group() -> Schema {
    object(vec![
        (
            "spec",
            object(vec![
                ("minMember", int32()),
                ("minResources", Schema::Map(Box::new(Schema::Quantity))),
                ("minTaskMember", Schema::Map(Box::new(int32()))),
                (
                    "networkTopology",
                    object(vec![
                        ("highestTierAllowed", integer(None, None)),
                        (
                            "mode",
                            Schema::String {
                                pattern: None,
                                enumeration: &["hard", "soft"],
                                nullable: false,
                            },
                        ),
                    ]),
                ),
                ("priorityClassName", plain_string()),
                ("queue", Schema::Defaulted("default")),
                ("preemptable", Schema::Boolean),
            ]),
        ),
        (
            "status",
            object(vec![
                (
                    "conditions",
                    Schema::Array(Box::new(object(vec![
                        ("lastTransitionTime", plain_string()),
                        ("message", plain_string()),
                        ("reason", plain_string()),
                        ("status", plain_string()),
                        ("transitionID", plain_string()),
                        ("type", plain_string()),
                    ]))),
                ),
                ("failed", int32()),
                ("phase", plain_string()),
                ("running", int32()),
                ("succeeded", int32()),
            ]),
        ),
    ])
}

/// A PodGroup by the schema of the CRD its `apiVersion` names; the kind it is (an
/// unknown group or version is refused, as the API server refuses a kind it does not
/// serve).
pub(super) fn pod_group(object: &mut Value, causes: &mut Vec<Cause>) -> &'static str {
    let (schema, kind) = match object["apiVersion"].as_str() {
        Some("scheduling.x-k8s.io/v1alpha1") => {
            (coscheduling_pod_group(), "PodGroup.scheduling.x-k8s.io")
        }
        Some("scheduling.volcano.sh/v1beta1") => {
            (volcano_pod_group(), "PodGroup.scheduling.volcano.sh")
        }
        other => {
            causes.push(invalid(
                "apiVersion",
                &json!(other),
                "no PodGroup of that group and version is installed".into(),
            ));
            (schema::object(Vec::new()), "PodGroup")
        }
    };
    check(&schema, object, "", causes);
    kind
}
