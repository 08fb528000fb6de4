//! The manifests in deploy/ render with `kubectl kustomize` into a namespace of the
//! deployer's choice, with nothing left in another namespace.

use crate::common;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// Renders `folder` (under deploy/) through an overlay that sets `namespace`.
fn render(kubectl: &Path, folder: &str, namespace: &str) -> Vec<Value> {
    let scratch = common::scratch("deploy", &format!("{folder}-{namespace}"));
    let overlay = scratch.to_path_buf();
    // kustomize takes other folders only by relative path.
    let target = common::repo_root().join("deploy").join(folder);
    let depth = overlay.components().count() - 1;
    let relative = format!(
        "{}{}",
        "../".repeat(depth),
        target.display().to_string().trim_start_matches('/')
    );
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!("namespace: {namespace}\nresources:\n  - {relative}\n"),
    )
    .expect("write overlay");
    let out = Command::new(kubectl)
        .arg("kustomize")
        .arg(&overlay)
        .output()
        .expect("run kubectl");
    assert!(
        out.status.success(),
        "kubectl kustomize {folder}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    text.split("\n---\n")
        .map(|doc| serde_saphyr::from_str(doc).expect("each document is YAML"))
        .collect()
}

fn kind_and_name(object: &Value) -> String {
    format!(
        "{}/{}",
        object["kind"].as_str().unwrap_or_default(),
        object["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// Every object is in `namespace`, and so is every service account a binding names.
fn assert_all_in(objects: &[Value], namespace: &str) {
    for object in objects {
        assert_eq!(
            object["metadata"]["namespace"].as_str(),
            Some(namespace),
            "{}",
            kind_and_name(object)
        );
        for subject in object["subjects"].as_array().into_iter().flatten() {
            assert_eq!(
                subject["namespace"].as_str(),
                Some(namespace),
                "subject of {}",
                kind_and_name(object)
            );
        }
    }
}

fn kubectl() -> Option<std::path::PathBuf> {
    let found = pai_test_support::needs::program("kubectl");
    pai_test_support::needs::present(
        "kubectl (with kustomize v4 or newer)",
        found.is_some(),
        "install kubectl",
    )
    .then_some(found)
    .flatten()
}

#[test]
fn the_server_renders_into_any_namespace_and_serves_that_one_on_kubernetes_only() {
    let Some(kubectl) = kubectl() else { return };
    let objects = render(&kubectl, "rest-lite", "team-b");
    assert_all_in(&objects, "team-b");
    // The config's ConfigMap is named by its content's hash, and the Deployment mounts
    // that one: a change of config rolls the pods.
    let config_map = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap")
        .and_then(|o| o["metadata"]["name"].as_str())
        .expect("the config's ConfigMap")
        .to_string();
    let hash = config_map
        .strip_prefix("rest-lite-config-")
        .unwrap_or_default();
    assert!(
        hash.len() >= 8 && hash.chars().all(|c| c.is_ascii_alphanumeric()),
        "{config_map}: named with a hash of the config"
    );
    let mut names: Vec<String> = objects
        .iter()
        .map(kind_and_name)
        .map(|n| n.replace(&config_map, "rest-lite-config-HASH"))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "ConfigMap/rest-lite-config-HASH",
            "Deployment/rest-lite",
            "PodDisruptionBudget/rest-lite",
            "Role/rest-lite",
            "RoleBinding/rest-lite",
            "Service/rest-lite",
            "ServiceAccount/rest-lite",
        ]
    );
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("deployment");
    assert_eq!(
        deployment["spec"]["replicas"], 2,
        "two replicas behind one Service"
    );
    let pod = &deployment["spec"]["template"]["spec"];
    let mounted: Vec<&str> = pod["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .filter_map(|v| v["configMap"]["name"].as_str())
        .collect();
    assert_eq!(
        mounted,
        [config_map.as_str()],
        "the Deployment mounts the config's ConfigMap"
    );
    // Wherever runAsNonRoot is set, the user is a number the kubelet can check.
    for container in pod["containers"].as_array().expect("containers") {
        let context = &container["securityContext"];
        if context["runAsNonRoot"] == true {
            let user = context["runAsUser"]
                .as_u64()
                .or_else(|| pod["securityContext"]["runAsUser"].as_u64());
            assert!(
                user.is_some_and(|u| u > 0),
                "{}: runAsNonRoot without a numeric non-root runAsUser",
                container["name"]
            );
        }
    }
    let dockerfile = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/rest-lite/Dockerfile"),
    )
    .expect("the server's Dockerfile");
    let user = dockerfile
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER");
    assert!(
        user.split(':')
            .all(|part| part.parse::<u32>().is_ok_and(|n| n > 0)),
        "the image's USER is numeric and not root: {user}"
    );
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(args.contains(&"--backend=kube"), "{args:?}");
    let namespace_source = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == "REST_LITE_NAMESPACE")
        .expect("REST_LITE_NAMESPACE");
    assert_eq!(
        namespace_source["valueFrom"]["fieldRef"]["fieldPath"], "metadata.namespace",
        "the server's own namespace"
    );
}
