//! `events.k8s.io/v1` Events, as the API server's validation of a create checks them.

use serde_json::Value;

use super::causes::{Cause, invalid, not_supported, required};
use super::metadata::qualified_name;

/// An `events.k8s.io/v1` Event as the API server's validation of a create checks it
/// (Kubernetes' `ValidateEventCreate` for that version): `eventTime` set;
/// `reportingController` a qualified name; `reportingInstance`, `action` and `reason`
/// set and at most 128 characters; `note` at most 1 kB; `type` Normal or Warning; and
/// the regarding object in the Event's namespace.
pub(super) fn event(object: &Value, causes: &mut Vec<Cause>) {
    if object["eventTime"].as_str().is_none_or(str::is_empty) {
        causes.push(required("eventTime", "needs to be set"));
    }
    let controller = object["reportingController"].as_str().unwrap_or_default();
    if controller.is_empty() {
        causes.push(required("reportingController", ""));
    } else if !qualified_name(controller) {
        causes.push(invalid(
            "reportingController",
            &object["reportingController"],
            "must be a qualified name".into(),
        ));
    }
    for field in ["reportingInstance", "action", "reason"] {
        let value = object[field].as_str().unwrap_or_default();
        if value.is_empty() {
            causes.push(required(field, ""));
        } else if value.len() > 128 {
            causes.push(invalid(
                field,
                &object[field],
                "can have at most 128 characters".into(),
            ));
        }
    }
    if object["note"].as_str().is_some_and(|n| n.len() > 1024) {
        causes.push(invalid(
            "note",
            &object["note"],
            "can have at most 1024 characters".into(),
        ));
    }
    let kind = &object["type"];
    if !matches!(kind.as_str(), Some("Normal" | "Warning")) {
        causes.push(not_supported("type", kind, &["Normal", "Warning"]));
    }
    let namespace = &object["metadata"]["namespace"];
    let regarding = &object["regarding"]["namespace"];
    if !regarding.is_null() && !namespace.is_null() && regarding != namespace {
        causes.push(invalid(
            "regarding.namespace",
            regarding,
            "does not match event.namespace".into(),
        ));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::validation::admit;

    #[test]
    fn events_have_what_the_events_api_requires() {
        let good = json!({"metadata": {"name": "fw.1", "namespace": "jobs"},
            "eventTime": "2026-11-24T10:00:00.000000Z", "reportingController": "rest-lite.openpai.io/server",
            "reportingInstance": "rest-lite-0", "action": "Run", "reason": "TaskFailed",
            "note": "worker-1 failed", "type": "Warning",
            "regarding": {"kind": "Framework", "name": "fw", "namespace": "jobs"}});
        assert_eq!(admit("events", &mut good.clone()), Ok(()));
        let mut bad = good;
        bad["eventTime"] = Value::Null;
        bad["reportingController"] = json!("not a/qualified/name");
        bad["reason"] = json!("R".repeat(129));
        bad["note"] = json!("n".repeat(1025));
        bad["type"] = json!("Error");
        bad["regarding"]["namespace"] = json!("other");
        let causes = admit("events", &mut bad).expect_err("invalid").causes;
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "eventTime",
                "reportingController",
                "reason",
                "note",
                "type",
                "regarding.namespace"
            ]
        );
    }
}
