//! Pods: their volumes and their containers' mounts, as the API server's
//! `ValidatePodSpec` checks them.

use serde_json::Value;

use super::causes::{Cause, invalid, required};
use super::metadata::dns_label;

/// A pod's volumes and its containers' mounts as the API server's `ValidatePodSpec`
/// checks them: volume names unique DNS-1123 labels, a `persistentVolumeClaim` volume
/// naming its claim, every mount naming a volume of the pod, at a path given once per
/// container, with a relative `subPath` that does not leave the volume.
pub(super) fn pod_volumes(spec: &Value, causes: &mut Vec<Cause>) {
    let mut names: Vec<&str> = Vec::new();
    for (i, volume) in spec["volumes"].as_array().into_iter().flatten().enumerate() {
        let field = format!("spec.volumes[{i}]");
        let name = volume["name"].as_str().unwrap_or_default();
        if name.is_empty() {
            causes.push(required(&format!("{field}.name"), ""));
        } else if !dns_label(name) {
            causes.push(invalid(
                &format!("{field}.name"),
                &volume["name"],
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'".into(),
            ));
        } else if names.contains(&name) {
            causes.push(Cause {
                reason: "FieldValueDuplicate",
                field: format!("{field}.name"),
                message: format!("Duplicate value: {:?}", name),
            });
        }
        names.push(name);
        let claim = &volume["persistentVolumeClaim"];
        if claim.is_object() && claim["claimName"].as_str().is_none_or(str::is_empty) {
            causes.push(required(
                &format!("{field}.persistentVolumeClaim.claimName"),
                "",
            ));
        }
    }
    for kind in ["initContainers", "containers"] {
        for (c, container) in spec[kind].as_array().into_iter().flatten().enumerate() {
            let mut paths: Vec<&str> = Vec::new();
            let mounts = container["volumeMounts"].as_array().into_iter().flatten();
            for (m, mount) in mounts.enumerate() {
                let field = format!("spec.{kind}[{c}].volumeMounts[{m}]");
                let name = mount["name"].as_str().unwrap_or_default();
                if !names.contains(&name) {
                    causes.push(Cause {
                        reason: "FieldValueNotFound",
                        field: format!("{field}.name"),
                        message: format!("Not found: {name:?}"),
                    });
                }
                let path = mount["mountPath"].as_str().unwrap_or_default();
                if path.is_empty() {
                    causes.push(required(&format!("{field}.mountPath"), ""));
                } else if paths.contains(&path) {
                    causes.push(invalid(
                        &format!("{field}.mountPath"),
                        &mount["mountPath"],
                        "must be unique".into(),
                    ));
                }
                paths.push(path);
                if let Some(sub) = mount["subPath"].as_str()
                    && (sub.starts_with('/') || sub.split('/').any(|p| p == ".."))
                {
                    causes.push(invalid(
                        &format!("{field}.subPath"),
                        &mount["subPath"],
                        "must be a relative path without '..'".into(),
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::validation::admit;

    #[test]
    fn a_pods_mounts_name_its_volumes() {
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {
            "volumes": [
                {"name": "data-volume", "persistentVolumeClaim": {"claimName": ""}},
                {"name": "data-volume", "emptyDir": {}},
            ],
            "containers": [{"name": "main", "volumeMounts": [
                {"name": "data-volume", "mountPath": "/mnt/data"},
                {"name": "other", "mountPath": "/mnt/data", "subPath": "../x"},
            ]}],
        }});
        let invalid = admit("pods", &mut pod).expect_err("invalid");
        let fields: Vec<&str> = invalid.causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.volumes[0].persistentVolumeClaim.claimName",
                "spec.volumes[1].name",
                "spec.containers[0].volumeMounts[1].name",
                "spec.containers[0].volumeMounts[1].mountPath",
                "spec.containers[0].volumeMounts[1].subPath",
            ]
        );
        let mut ok = json!({"metadata": {"name": "p"}, "spec": {
            "volumes": [{"name": "data-volume", "persistentVolumeClaim": {"claimName": "data"}}],
            "containers": [{"name": "main", "volumeMounts": [
                {"name": "data-volume", "mountPath": "/mnt/data", "subPath": "alice"}]}],
        }});
        admit("pods", &mut ok).expect("valid");
    }
}
