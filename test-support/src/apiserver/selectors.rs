//! Which objects a list or watch selects: field selectors on the fields the real API
//! server supports (400 on others) and label selectors, and the kind of a list.

use serde_json::Value;

use super::key::Params;

/// The fields a field selector may name, as the real API server supports them: every
/// resource's `metadata.name` and `metadata.namespace`, and pods' `status.phase` and
/// `spec.nodeName` (among others not modelled).
fn field_supported(resource: &str, field: &str) -> bool {
    matches!(field, "metadata.name" | "metadata.namespace")
        || (resource == "pods" && matches!(field, "status.phase" | "spec.nodeName"))
}

/// A field selector's terms: `(field, value, equal)` for `f=v`, `f==v` and `f!=v`.
fn field_terms(selector: &str) -> Vec<(&str, &str, bool)> {
    selector
        .split(',')
        .filter(|t| !t.is_empty())
        .map(|term| {
            if let Some((f, v)) = term.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, v, true)
            } else {
                let (f, v) = term.split_once('=').unwrap_or((term, ""));
                (f, v, true)
            }
        })
        .collect()
}

/// The first field of `query`'s field selector that `resource` cannot be selected by.
pub(super) fn unsupported_field(resource: &str, query: &Params) -> Option<String> {
    let selector = query.get("fieldSelector")?;
    field_terms(selector)
        .into_iter()
        .find(|(f, _, _)| !field_supported(resource, f))
        .map(|(f, _, _)| f.to_string())
}

/// Field selectors (`metadata.name=x,status.phase!=Running`) and `a=b,c` (label
/// present) label selectors.
pub(super) fn selected(object: &Value, query: &Params) -> bool {
    let field_ok = query.get("fieldSelector").is_none_or(|sel| {
        field_terms(sel).into_iter().all(|(field, v, equal)| {
            let pointer = format!("/{}", field.replace('.', "/"));
            let actual = object
                .pointer(&pointer)
                .and_then(Value::as_str)
                .unwrap_or("");
            (actual == v) == equal
        })
    });
    let label_ok = query.get("labelSelector").is_none_or(|sel| {
        let labels = &object["metadata"]["labels"];
        sel.split(',')
            .filter(|t| !t.is_empty())
            .all(|term| match term.split_once('=') {
                Some((k, v)) => labels[k] == v,
                None => !labels[term].is_null(),
            })
    });
    field_ok && label_ok
}

/// The `kind` of a list of `resource`: its items' kind and `List`.
pub(super) fn list_kind(resource: &str, items: &[Value]) -> String {
    match items.first().and_then(|o| o["kind"].as_str()) {
        Some(kind) => format!("{kind}List"),
        None => format!("{resource}List"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selectors() {
        let object = json!({"metadata": {"name": "x", "namespace": "n", "labels": {"a": "b"}}});
        let q = |k: &str, v: &str| Params::from([(k.to_string(), v.to_string())]);
        assert!(selected(&object, &q("fieldSelector", "metadata.name=x")));
        assert!(!selected(&object, &q("fieldSelector", "metadata.name=y")));
        assert!(selected(&object, &q("labelSelector", "a=b")));
        assert!(selected(&object, &q("labelSelector", "a")));
        assert!(!selected(&object, &q("labelSelector", "a=c")));
        let pod = json!({"metadata": {"name": "p"}, "status": {"phase": "Pending"}});
        assert!(selected(&pod, &q("fieldSelector", "status.phase=Pending")));
        assert!(selected(&pod, &q("fieldSelector", "status.phase!=Running")));
        assert!(!selected(
            &pod,
            &q("fieldSelector", "status.phase==Running")
        ));
        assert_eq!(
            unsupported_field("pods", &q("fieldSelector", "status.phase=Pending")),
            None
        );
        assert_eq!(
            unsupported_field("configmaps", &q("fieldSelector", "status.phase=Pending")),
            Some("status.phase".to_string())
        );
    }
}
