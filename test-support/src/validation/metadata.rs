//! Kubernetes' object-metadata rules, which every resource's objects obey: names,
//! labels, annotations (and their size together), owner references; and the formats of
//! names that other kinds' fields use too (DNS labels and subdomains, qualified names).

use serde_json::{Value, json};

use super::causes::{Cause, invalid};

/// Kubernetes' limit on all annotations of one object together.
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// An object's `metadata`: its owner references, name, labels and annotations.
pub(super) fn metadata(meta: &Value, causes: &mut Vec<Cause>) {
    for (i, owner) in meta["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        for field in ["apiVersion", "kind", "name", "uid"] {
            if owner[field].as_str().is_none_or(str::is_empty) {
                causes.push(invalid(
                    &format!("metadata.ownerReferences[{i}].{field}"),
                    &owner[field],
                    format!("{field} must not be empty"),
                ));
            }
        }
    }
    let name = meta["name"].as_str().unwrap_or_default();
    if name.is_empty() {
        causes.push(Cause {
            reason: "FieldValueRequired",
            field: "metadata.name".into(),
            message: "Required value: name or generateName is required".into(),
        });
    } else if !dns_subdomain(name) {
        causes.push(invalid(
            "metadata.name",
            &json!(name),
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character".into(),
        ));
    }
    if let Some(labels) = meta["labels"].as_object() {
        for (key, value) in labels {
            if !qualified_name(key) {
                causes.push(invalid(
                    "metadata.labels",
                    &json!(key),
                    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into(),
                ));
            }
            if !value.as_str().is_some_and(|v| qualified_part(v, true)) {
                causes.push(invalid(
                    "metadata.labels",
                    value,
                    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character, at most 63 characters".into(),
                ));
            }
        }
    }
    if let Some(annotations) = meta["annotations"].as_object() {
        let mut total = 0;
        for (key, value) in annotations {
            if !qualified_name(key) {
                causes.push(invalid(
                    "metadata.annotations",
                    &json!(key),
                    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into(),
                ));
            }
            total += key.len() + value.as_str().map_or(0, str::len);
        }
        if total > MAX_ANNOTATIONS_BYTES {
            causes.push(Cause {
                reason: "FieldValueTooLong",
                field: "metadata.annotations".into(),
                message: format!("Too long: must have at most {MAX_ANNOTATIONS_BYTES} bytes"),
            });
        }
    }
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63.
pub(super) fn dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=63).contains(&b.len())
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
}

/// Dot-separated DNS labels, at most 253.
pub(super) fn dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(dns_label)
}

/// A label value or a key's name part: `(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?`.
fn qualified_part(s: &str, may_be_empty: bool) -> bool {
    let b = s.as_bytes();
    if b.is_empty() {
        return may_be_empty;
    }
    b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A label or annotation key: `[prefix/]name`, the prefix a DNS subdomain.
pub(super) fn qualified_name(key: &str) -> bool {
    match key.split_once('/') {
        Some((prefix, name)) => dns_subdomain(prefix) && qualified_part(name, false),
        None => qualified_part(key, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::admit;

    #[test]
    fn metadata_rules_hold_for_every_resource() {
        let mut pod = json!({"metadata": {"name": "p", "labels": {"a": "-x"},
            "annotations": {"big": "x".repeat(MAX_ANNOTATIONS_BYTES)}}});
        let invalid = admit("pods", &mut pod).expect_err("invalid");
        assert_eq!(invalid.kind, "Pod");
        let reasons: Vec<&str> = invalid.causes.iter().map(|c| c.reason).collect();
        assert_eq!(reasons, ["FieldValueInvalid", "FieldValueTooLong"]);
        let mut ok = json!({"metadata": {"name": "a.b-c", "labels": {"example.com/x": ""}}});
        admit("configmaps", &mut ok).expect("valid");
    }
}
