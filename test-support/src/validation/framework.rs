//! FrameworkController's Framework, as its CRD (`pkg/apis/frameworkcontroller/v1/crd.go`)
//! has the API server check it: names `^[a-z0-9]{1,63}$`, task numbers, enums, bounds,
//! and the pruning of fields the schema does not know.

use serde_json::{Value, json};

use super::causes::{Cause, invalid};
use super::schema::{Schema, check, integer, object, preserved};

/// The pattern of Framework and task-role names in FrameworkController's CRD.
pub const CRD_NAME_PATTERN: &str = "^[a-z0-9]{1,63}$";

/// Whether `s` matches [`CRD_NAME_PATTERN`].
fn crd_name(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// A string named by [`CRD_NAME_PATTERN`].
fn crd_named() -> Schema {
    Schema::String {
        pattern: Some((CRD_NAME_PATTERN, crd_name)),
        enumeration: &[],
        nullable: false,
    }
}

/// A Framework's or a task's `retryPolicy`.
fn retry_policy() -> Schema {
    object(vec![
        // ExtendedUnlimitedValue: −2 retries always, −1 failures forever.
        ("maxRetryCount", integer(Some(-2), None)),
        ("fancyRetryPolicy", Schema::Boolean),
    ])
}

/// FrameworkController's Framework schema (its `buildFrameworkSchema`).
fn framework_schema() -> Schema {
    let task_role = object(vec![
        ("name", crd_named()),
        ("taskNumber", integer(Some(0), Some(10_000))),
        (
            "frameworkAttemptCompletionPolicy",
            object(vec![
                // UnlimitedValue: −1.
                ("minFailedTaskCount", integer(Some(-1), None)),
                ("minSucceededTaskCount", integer(Some(-1), None)),
            ]),
        ),
        (
            "task",
            object(vec![
                ("retryPolicy", retry_policy()),
                (
                    "podGracefulDeletionTimeoutSec",
                    Schema::Integer {
                        minimum: None,
                        maximum: None,
                        nullable: true,
                    },
                ),
                ("pod", preserved(false)),
            ]),
        ),
    ]);
    object(vec![
        // metadata: only the name is constrained; the rest is ObjectMeta, checked apart.
        (
            "spec",
            object(vec![
                (
                    "description",
                    Schema::String {
                        pattern: None,
                        enumeration: &[],
                        nullable: true,
                    },
                ),
                (
                    "executionType",
                    Schema::String {
                        pattern: None,
                        enumeration: &["Create", "Start", "Stop"],
                        nullable: false,
                    },
                ),
                ("retryPolicy", retry_policy()),
                ("taskRoles", Schema::Array(Box::new(task_role))),
            ]),
        ),
        ("status", preserved(true)),
    ])
}

/// A Framework's name (by [`CRD_NAME_PATTERN`]) and the object by the CRD's schema.
pub(super) fn framework(name: &str, object: &mut Value, causes: &mut Vec<Cause>) {
    if !crd_name(name) {
        causes.push(invalid(
            "metadata.name",
            &json!(name),
            format!("metadata.name in body should match '{CRD_NAME_PATTERN}'"),
        ));
    }
    let schema = framework_schema();
    check(&schema, object, "", causes);
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::validation::admit;

    fn framework(name: &str, role: &str, tasks: i64) -> Value {
        json!({
            "apiVersion": "frameworkcontroller.microsoft.com/v1", "kind": "Framework",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "rest-lite"}},
            "spec": {"executionType": "Start", "retryPolicy": {"fancyRetryPolicy": true, "maxRetryCount": 0},
                "taskRoles": [{"name": role, "taskNumber": tasks,
                    "frameworkAttemptCompletionPolicy": {"minFailedTaskCount": 1, "minSucceededTaskCount": -1},
                    "task": {"retryPolicy": {"fancyRetryPolicy": false, "maxRetryCount": 0},
                        "pod": {"spec": {"anything": ["kept"]}}}}]},
        })
    }

    #[test]
    fn a_valid_framework_is_admitted_and_pruned() {
        let mut f = framework("abc123", "worker", 2);
        f["spec"]["unknown"] = json!(1);
        f["spec"]["taskRoles"][0]["task"]["unknown"] = json!(1);
        f["status"] = json!({"anything": 1});
        admit("frameworks", &mut f).expect("valid");
        assert!(f["spec"].get("unknown").is_none(), "pruned");
        assert!(f["spec"]["taskRoles"][0]["task"].get("unknown").is_none());
        assert_eq!(
            f["spec"]["taskRoles"][0]["task"]["pod"]["spec"]["anything"][0],
            "kept"
        );
        assert_eq!(f["status"]["anything"], 1, "status keeps unknown fields");
    }

    #[test]
    fn the_crd_rules_are_enforced_all_at_once() {
        let mut f = framework("alice--tfdemo", "ps-0", 10_001);
        f["spec"]["executionType"] = json!("Run");
        f["spec"]["retryPolicy"]["maxRetryCount"] = json!(-3);
        f["spec"]["taskRoles"][0]["frameworkAttemptCompletionPolicy"]["minFailedTaskCount"] =
            json!(-2);
        let invalid = admit("frameworks", &mut f).expect_err("invalid");
        let fields: Vec<&str> = invalid.causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "metadata.name",
                "spec.executionType",
                "spec.retryPolicy.maxRetryCount",
                "spec.taskRoles[0].name",
                "spec.taskRoles[0].taskNumber",
                "spec.taskRoles[0].frameworkAttemptCompletionPolicy.minFailedTaskCount",
            ]
        );
        assert!(invalid.message().starts_with(
            "Framework.frameworkcontroller.microsoft.com \"alice--tfdemo\" is invalid: [metadata.name: Invalid value: \"alice--tfdemo\": metadata.name in body should match '^[a-z0-9]{1,63}$'"
        ), "{}", invalid.message());
    }
}
