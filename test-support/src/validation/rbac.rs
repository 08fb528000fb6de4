//! ServiceAccounts, Roles and RoleBindings, as Kubernetes' RBAC validation checks them.

use serde_json::Value;

use super::causes::{Cause, invalid, join, not_supported, required};
use super::metadata::dns_subdomain;

/// A ServiceAccount: `automountServiceAccountToken`, when given, a boolean.
pub(super) fn service_account(object: &Value, causes: &mut Vec<Cause>) {
    let automount = &object["automountServiceAccountToken"];
    if !(automount.is_null() || automount.is_boolean()) {
        causes.push(invalid(
            "automountServiceAccountToken",
            automount,
            "must be a boolean".into(),
        ));
    }
}

/// A (namespaced) Role: each of its rules by [`policy_rule`].
pub(super) fn role(object: &Value, causes: &mut Vec<Cause>) {
    for (i, rule) in object["rules"].as_array().into_iter().flatten().enumerate() {
        policy_rule(rule, &format!("rules[{i}]"), causes);
    }
}

/// The strings of a JSON array (none when it is not one).
fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// A rule of a (namespaced) Role, by Kubernetes' RBAC validation: at least one verb; no
/// non-resource URLs in a namespaced rule; a resource rule names at least one API group
/// and one resource.
fn policy_rule(rule: &Value, path: &str, causes: &mut Vec<Cause>) {
    for field in [
        "apiGroups",
        "resources",
        "verbs",
        "resourceNames",
        "nonResourceURLs",
    ] {
        let value = &rule[field];
        let ok = value.is_null()
            || value
                .as_array()
                .is_some_and(|items| items.iter().all(Value::is_string));
        if !ok {
            causes.push(invalid(
                &join(path, field),
                value,
                "must be a list of strings".into(),
            ));
        }
    }
    if strings(&rule["verbs"]).is_empty() {
        causes.push(required(
            &join(path, "verbs"),
            "verbs must contain at least one value",
        ));
    }
    if !strings(&rule["nonResourceURLs"]).is_empty() {
        causes.push(invalid(
            &join(path, "nonResourceURLs"),
            &rule["nonResourceURLs"],
            "namespaced rules cannot apply to non-resource URLs".into(),
        ));
        return;
    }
    if rule["apiGroups"].as_array().is_none_or(Vec::is_empty) {
        causes.push(required(
            &join(path, "apiGroups"),
            "resource rules must supply at least one api group",
        ));
    }
    if strings(&rule["resources"]).is_empty() {
        causes.push(required(
            &join(path, "resources"),
            "resource rules must supply at least one resource",
        ));
    }
}

/// A RoleBinding, by Kubernetes' RBAC validation: `roleRef` in the RBAC group, of kind
/// Role or ClusterRole, with a name; each subject of a known kind with a name, a
/// ServiceAccount's in no API group and with a valid name.
pub(super) fn role_binding(binding: &Value, causes: &mut Vec<Cause>) {
    let role_ref = &binding["roleRef"];
    if role_ref["apiGroup"].as_str() != Some("rbac.authorization.k8s.io") {
        causes.push(not_supported(
            "roleRef.apiGroup",
            &role_ref["apiGroup"],
            &["rbac.authorization.k8s.io"],
        ));
    }
    if !matches!(role_ref["kind"].as_str(), Some("Role" | "ClusterRole")) {
        causes.push(not_supported(
            "roleRef.kind",
            &role_ref["kind"],
            &["Role", "ClusterRole"],
        ));
    }
    if role_ref["name"].as_str().is_none_or(str::is_empty) {
        causes.push(required("roleRef.name", "name is required"));
    }
    for (i, subject) in binding["subjects"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let path = format!("subjects[{i}]");
        let name = subject["name"].as_str().unwrap_or_default();
        if name.is_empty() {
            causes.push(required(&join(&path, "name"), "name is required"));
        }
        match subject["kind"].as_str() {
            Some("ServiceAccount") => {
                if !subject["apiGroup"].as_str().unwrap_or_default().is_empty() {
                    causes.push(not_supported(
                        &join(&path, "apiGroup"),
                        &subject["apiGroup"],
                        &[""],
                    ));
                }
                if !name.is_empty() && !dns_subdomain(name) {
                    causes.push(invalid(
                        &join(&path, "name"),
                        &subject["name"],
                        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'".into(),
                    ));
                }
            }
            Some("User" | "Group") => {
                if subject["apiGroup"].as_str() != Some("rbac.authorization.k8s.io") {
                    causes.push(not_supported(
                        &join(&path, "apiGroup"),
                        &subject["apiGroup"],
                        &["rbac.authorization.k8s.io"],
                    ));
                }
            }
            _ => causes.push(not_supported(
                &join(&path, "kind"),
                &subject["kind"],
                &["ServiceAccount", "User", "Group"],
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::validation::admit;

    #[test]
    fn rbac_objects_have_the_shape_kubernetes_requires() {
        let mut good_role = json!({"metadata": {"name": "fw-job"}, "rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["x"], "verbs": ["get"]}]});
        assert_eq!(admit("roles", &mut good_role), Ok(()));
        let mut bad_role = json!({"metadata": {"name": "fw-job"}, "rules": [
            {"resources": ["configmaps"], "verbs": []},
            {"nonResourceURLs": ["/healthz"], "verbs": ["get"]}]});
        let causes = admit("roles", &mut bad_role).expect_err("invalid").causes;
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "rules[0].verbs",
                "rules[0].apiGroups",
                "rules[1].nonResourceURLs"
            ]
        );
        let mut good_binding = json!({"metadata": {"name": "fw-job"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "fw-job"},
            "subjects": [{"kind": "ServiceAccount", "name": "fw-job", "namespace": "jobs"}]});
        assert_eq!(admit("rolebindings", &mut good_binding), Ok(()));
        let mut bad_binding = json!({"metadata": {"name": "fw-job"},
            "roleRef": {"apiGroup": "", "kind": "Secret"},
            "subjects": [{"kind": "ServiceAccount", "apiGroup": "rbac.authorization.k8s.io", "name": "Bad_Name"},
                         {"kind": "Robot", "name": "r"}]});
        let causes = admit("rolebindings", &mut bad_binding)
            .expect_err("invalid")
            .causes;
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "roleRef.apiGroup",
                "roleRef.kind",
                "roleRef.name",
                "subjects[0].apiGroup",
                "subjects[0].name",
                "subjects[1].kind"
            ]
        );
        let mut account =
            json!({"metadata": {"name": "fw-job"}, "automountServiceAccountToken": "no"});
        assert!(admit("serviceaccounts", &mut account).is_err());
    }
}
