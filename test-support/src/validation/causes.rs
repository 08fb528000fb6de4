//! How the API server refuses an object: the 422 [`Invalid`] and its causes, each a
//! field's path and what is wrong with it, worded as the API server words them.

use serde_json::{Value, json};

/// One reason an object is invalid, as the API server words it in `details.causes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueNotSupported`, `FieldValueTooLong`, `FieldValueRequired`.
    pub reason: &'static str,
    /// The field's path, e.g. `spec.taskRoles[0].name`.
    pub field: String,
    /// What is wrong, e.g. `Invalid value: "a-b": spec.taskRoles[0].name in body should match '^[a-z0-9]{1,63}$'`.
    pub message: String,
}

/// The API server's rejection of an object: status 422, reason `Invalid`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    /// `Framework.frameworkcontroller.microsoft.com`, `Pod`, …
    pub kind: String,
    pub name: String,
    pub causes: Vec<Cause>,
}

impl Invalid {
    /// The `message` of the `Status` a real API server sends.
    pub fn message(&self) -> String {
        let causes: Vec<String> = self
            .causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let list = match causes.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        format!("{} {:?} is invalid: {list}", self.kind, self.name)
    }

    /// The whole `Status` object.
    pub fn status(&self) -> Value {
        let causes: Vec<Value> = self
            .causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
            .collect();
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message(), "reason": "Invalid", "code": 422,
            "details": {"name": self.name, "kind": self.kind, "causes": causes},
        })
    }
}

/// `FieldValueInvalid`: `value` of `field`, and why not.
pub(super) fn invalid(field: &str, value: &Value, detail: String) -> Cause {
    Cause {
        reason: "FieldValueInvalid",
        field: field.to_string(),
        message: format!("Invalid value: {value}: {detail}"),
    }
}

/// `FieldValueRequired`: `field` is missing.
pub(super) fn required(field: &str, detail: &str) -> Cause {
    Cause {
        reason: "FieldValueRequired",
        field: field.to_string(),
        message: format!("Required value: {detail}"),
    }
}

/// `FieldValueNotSupported`: `value` of `field` is none of `supported`.
pub(super) fn not_supported(field: &str, value: &Value, supported: &[&str]) -> Cause {
    let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    Cause {
        reason: "FieldValueNotSupported",
        field: field.to_string(),
        message: format!(
            "Unsupported value: {value}: supported values: {}",
            list.join(", ")
        ),
    }
}

/// The path of `field` under `path` (`a.b`, or `b` at the top).
pub(super) fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}
