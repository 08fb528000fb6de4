//! The manifests in deploy/ render with `kubectl kustomize` into a namespace of the
//! deployer's choice, with nothing left in another namespace.

use crate::common;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// Renders `folder` (under deploy/) through an overlay that sets `namespace`.
fn render(kubectl: &Path, folder: &str, namespace: &str) -> Vec<Value> {
    overlay(kubectl, folder, &format!("namespace: {namespace}\n"), &[])
}

/// Renders an overlay of `folder` (under deploy/) whose kustomization is `kustomization`
/// and then `resources:` naming `folder`, beside `files` (name, content).
fn overlay(
    kubectl: &Path,
    folder: &str,
    kustomization: &str,
    files: &[(&str, &str)],
) -> Vec<Value> {
    let scratch = common::scratch("deploy", folder);
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
        format!("{kustomization}resources:\n  - {relative}\n"),
    )
    .expect("write overlay");
    for (name, content) in files {
        std::fs::write(overlay.join(name), content).expect("write an overlay's file");
    }
    kustomize(kubectl, &overlay)
}

/// `kubectl kustomize folder`, a value per object.
fn kustomize(kubectl: &Path, folder: &Path) -> Vec<Value> {
    let out = Command::new(kubectl)
        .arg("kustomize")
        .arg(folder)
        .output()
        .expect("run kubectl");
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        folder.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    text.split("\n---\n")
        .map(|doc| serde_saphyr::from_str(doc).expect("each document is YAML"))
        .collect()
}

fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

/// Wherever a container has runAsNonRoot, its user (or its pod's) is a number the
/// kubelet can check, and not root.
fn assert_numeric_non_root(pod: &Value) {
    for container in pod["containers"].as_array().expect("containers") {
        let context = &container["securityContext"];
        if context["runAsNonRoot"] == true || pod["securityContext"]["runAsNonRoot"] == true {
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
    // The config's ConfigMap keeps its name, and the Deployment mounts that one: a
    // change of config changes it in place, and the running replicas read it again.
    let config_map = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap")
        .and_then(|o| o["metadata"]["name"].as_str())
        .expect("the config's ConfigMap")
        .to_string();
    assert_eq!(config_map, "rest-lite-config");
    let mut names: Vec<String> = objects.iter().map(kind_and_name).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "ConfigMap/rest-lite-config",
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
    assert_numeric_non_root(pod);
    // Every image names its user by number; the server's is not root.
    for (image, root) in [
        ("rest-lite", false),
        ("barrier", false),
        ("kube-runtime", true),
    ] {
        let dockerfile = std::fs::read_to_string(
            common::repo_root()
                .join("deploy")
                .join(image)
                .join("Dockerfile"),
        )
        .expect("the Dockerfile");
        let user = dockerfile
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("USER "))
            .unwrap_or_else(|| panic!("{image}: a USER"));
        let ids: Vec<Option<u32>> = user.split(':').map(|p| p.parse().ok()).collect();
        assert!(
            ids.iter().all(Option::is_some) && ids.iter().all(|id| (*id == Some(0)) == root),
            "{image}'s USER is numeric and {}root: {user}",
            if root { "" } else { "not " }
        );
    }
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

/// The words of `docs/operating.md`'s commands after `prefix` (`kubectl create
/// namespace`, `create secret generic`): what the guide has the operator make by hand.
fn documented(guide: &str, prefix: &str) -> Vec<String> {
    guide
        .lines()
        .filter_map(|line| line.split_once(prefix))
        .filter_map(|(_, rest)| rest.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The operator's path of `docs/operating.md`, rendered as the operator renders it: the
/// example overlay (`deploy/example-cluster`, which the guide copies), whose objects
/// a real API server's checks admit (the test API server's metadata rules), whose
/// namespace, Secrets and ConfigMaps each come from a step of the guide, whose config
/// the server reads, and whose config change names a new ConfigMap in the pod template,
/// which rolls the pods.
// Long: the guide's steps checked against the rendered objects one by one.
#[tokio::test]
async fn the_operators_overlay_renders_and_everything_its_pods_mount_has_a_step() {
    let Some(kubectl) = kubectl() else { return };
    let root = common::repo_root();
    let guide = std::fs::read_to_string(root.join("docs/operating.md")).expect("the guide");
    assert!(
        guide.contains("cp -r deploy/example-cluster deploy/my-cluster")
            && guide.contains("kubectl apply -k deploy/my-cluster"),
        "the guide copies the example overlay and applies it"
    );
    let objects = kustomize(&kubectl, &root.join("deploy/example-cluster"));
    let namespaces = documented(&guide, "kubectl create namespace ");
    let namespace = objects[0]["metadata"]["namespace"]
        .as_str()
        .expect("a namespace")
        .to_string();
    assert_eq!(
        namespaces,
        std::slice::from_ref(&namespace),
        "the guide makes the overlay's namespace"
    );
    assert_all_in(&objects, &namespace);

    let secrets = documented(&guide, "create secret generic ");
    let config_maps: Vec<&str> = of_kind(&objects, "ConfigMap")
        .iter()
        .filter_map(|c| c["metadata"]["name"].as_str())
        .collect();
    let deployment = of_kind(&objects, "Deployment")[0];
    let pod = &deployment["spec"]["template"]["spec"];
    assert_numeric_non_root(pod);
    for volume in pod["volumes"].as_array().expect("volumes") {
        if let Some(secret) = volume["secret"]["secretName"].as_str() {
            assert!(
                secrets.iter().any(|s| s == secret)
                    || of_kind(&objects, "Secret")
                        .iter()
                        .any(|s| s["metadata"]["name"] == secret),
                "the Secret {secret} is mounted, and no step of the guide makes it ({secrets:?})"
            );
        }
        if let Some(map) = volume["configMap"]["name"].as_str() {
            assert!(
                config_maps.contains(&map),
                "the ConfigMap {map} is mounted, and not rendered"
            );
        }
    }
    assert_eq!(
        pod["containers"][0]["image"], "registry.example.com/pai/rest-lite:0.1.0",
        "the overlay's image"
    );
    // Its config is one the server reads, naming the pushed runtime image and the
    // mounted history Secret.
    let config = pai_translate::config::ClusterConfig::load(
        &root.join("deploy/example-cluster/config.yaml"),
    )
    .expect("the server reads the example config");
    assert_eq!(
        config.runtime_image,
        "registry.example.com/pai/kube-runtime:0.1.0"
    );
    let database_file = config.history.database_file.expect("history.databaseFile");
    let history_mount = pod["containers"][0]["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["name"] == "history")
        .and_then(|m| m["mountPath"].as_str())
        .expect("the history Secret mounted");
    assert_eq!(database_file.parent(), Some(Path::new(history_mount)));

    // What a real API server admits (names, labels, annotations of every object).
    let api = pai_test_support::ApiServer::start().await;
    for object in &objects {
        let kind = object["kind"].as_str().expect("kind");
        let resource = format!("{}s", kind.to_ascii_lowercase());
        api.create(&resource, &namespace, object.clone());
    }

    // A change of config changes the same ConfigMap, which the pods mount as a
    // directory (no subPath: the kubelet replaces its files) and read again while they
    // run: no pod rolls.
    let changed = overlay(
        &kubectl,
        "example-cluster",
        "configMapGenerator:\n  - {name: rest-lite-config, behavior: replace, files: [config.yaml], options: {disableNameSuffixHash: true}}\n",
        &[(
            "config.yaml",
            "runtimeImage: registry.example.com/pai/kube-runtime:0.2.0\n",
        )],
    );
    let name_of = |objects: &[Value]| {
        of_kind(objects, "ConfigMap")[0]["metadata"]["name"]
            .as_str()
            .expect("name")
            .to_string()
    };
    let template =
        |objects: &[Value]| of_kind(objects, "Deployment")[0]["spec"]["template"].clone();
    assert_eq!(name_of(&changed), name_of(&objects), "the same ConfigMap");
    assert_eq!(name_of(&objects), "rest-lite-config");
    assert_eq!(template(&changed), template(&objects), "no pod rolls");
    let container = &template(&objects)["spec"]["containers"][0];
    let mount = container["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["name"] == "config")
        .expect("the config mounted")
        .clone();
    assert!(
        mount["subPath"].is_null(),
        "a subPath is never updated: {mount}"
    );
    let dir = mount["mountPath"].as_str().expect("mountPath");
    let flag = format!("--config={dir}/config.yaml");
    assert!(
        container["args"]
            .as_array()
            .expect("args")
            .iter()
            .any(|a| a.as_str() == Some(flag.as_str())),
        "the server reads the mounted file: {container}"
    );
}

/// Removing rest-lite from a cluster leaves no pod waiting for a server that will never
/// come: no task pod carries a finalizer of rest-lite's, so deleting the namespace
/// finishes whether a server runs or not (against the test API server, which keeps an
/// object with finalizers until they are gone, as the real one does; the namespace
/// controller's deletion of each object is played by the test. The real control plane's
/// run of the same is `rest-lite/tests/real_cluster.rs`).
mod removal {
    use crate::common;
    use common::serve::Server;
    use pai_client::Client;
    use pai_contract::kept_logs::{self, LEGACY_FINALIZER};
    use pai_test_support::ApiServer;
    use pai_translate::spec::SpecFormat;
    use serde_json::{Value, json};

    const NS: &str = "removal";
    const TOKEN: &str = "alice-token";

    fn held(pod: &Value) -> bool {
        pod["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty())
    }

    // Long: a job's pods with a server and without one, and a pod of an earlier version.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_task_pod_waits_for_a_server_so_the_namespace_can_always_be_deleted() {
        let dir = common::scratch("deploy", "removal");
        let api = ApiServer::start().await;
        let kubeconfig = dir.join("kubeconfig");
        api.write_kubeconfig(&kubeconfig, Some(NS));
        let tokens = common::token_file(&dir, &[("alice", TOKEN, false)]);
        let serve = || Server::start_kube_in(&kubeconfig, NS, &tokens, None, None);
        let server = serve();
        let client = Client::new(&server.url, Some(TOKEN.to_string()));
        let spec = json!({"jobName": "train", "image": "busybox",
            "taskRoles": [{"name": "worker", "taskNumber": 2, "cpuNumber": 1, "memoryMB": 128,
                "command": "sleep 600"}]});
        client
            .submit("alice", &spec.to_string(), SpecFormat::Json)
            .await
            .expect("submitted");
        let framework_name = pai_job::names::framework_name("alice", "train");
        let framework = api
            .get("frameworks", NS, &framework_name)
            .expect("its Framework");
        let uid = framework["metadata"]["uid"].clone();
        // FrameworkController makes the pods from the template, which has no finalizer;
        // as their containers end, the running server keeps their logs in the job's
        // ConfigMap, owned by the job.
        let pods: Vec<String> = (0..2)
            .map(|i| pai_contract::framework::pod_name(&framework_name, "worker", i))
            .collect();
        for (index, pod) in (0..).zip(&pods) {
            let mut made = pai_test_support::frameworks::pod_of(&framework, "worker", index);
            assert!(!held(&made), "the template carries no finalizer");
            api.append_log(NS, pod, "done\n");
            api.end_log(NS, pod);
            pai_test_support::frameworks::set_terminated(
                &mut made,
                pai_contract::framework::MAIN_CONTAINER,
                0,
                "",
            );
            api.create("pods", NS, made);
            let key = kept_logs::key(pod, 0, kept_logs::Part::Main);
            let map = api
                .wait_for(
                    "configmaps",
                    NS,
                    &kept_logs::config_map(&framework_name),
                    |m| !m["binaryData"][&key].is_null(),
                )
                .await;
            assert_eq!(map["metadata"]["ownerReferences"][0]["uid"], uid, "{map}");
            assert!(!held(&api.get("pods", NS, pod).expect("pod")), "{pod}");
        }

        // The server stops (a restart, a crash, a removal: the same to the pods).
        drop(server.terminate());
        // No server runs: the namespace's deletion deletes each pod, and each goes.
        for pod in &pods {
            api.delete("pods", NS, pod);
            api.wait_gone("pods", NS, pod).await;
        }

        // A pod of an earlier version, which held it: a server takes it off.
        let mut old = pai_test_support::frameworks::pod_of(&framework, "worker", 0);
        old["metadata"]["uid"] = json!("attempt-1");
        old["metadata"]["finalizers"] = json!([LEGACY_FINALIZER]);
        api.create("pods", NS, old);
        let server = serve();
        api.wait_for("pods", NS, &pods[0], |p| !held(p)).await;
        drop(server.terminate());
        api.delete("pods", NS, &pods[0]);
        api.wait_gone("pods", NS, &pods[0]).await;
        // Every request of the servers is one their Role allows.
        let rules = common::role_rules(
            &std::fs::read_to_string(common::repo_root().join("deploy/rest-lite/rbac.yaml"))
                .expect("deploy/rest-lite/rbac.yaml"),
            "rest-lite",
        );
        for request in api.requests() {
            let attributes = pai_test_support::rbac::Attributes::of(&request.method, &request.uri)
                .unwrap_or_else(|| panic!("not a namespaced request: {request:?}"));
            assert!(
                pai_test_support::rbac::allows(&rules, &attributes),
                "deploy/rest-lite/rbac.yaml does not allow the server's {request:?}"
            );
        }
        // Nothing of rest-lite's holds any object of the namespace.
        for resource in [
            "pods",
            "frameworks",
            "configmaps",
            "secrets",
            "serviceaccounts",
        ] {
            for object in api.list(resource, NS) {
                assert!(
                    !object["metadata"]["finalizers"]
                        .as_array()
                        .is_some_and(|f| f
                            .iter()
                            .any(|f| f.as_str().is_some_and(|f| f.starts_with("rest-lite")))),
                    "{resource}: {object}"
                );
            }
        }
    }
}

/// A server whose credentials stop working while it runs (its ServiceAccount deleted by
/// `kubectl delete -k`, its token revoked): it says so once, reports not ready with the
/// reason, and recovers by itself once its access is back; the client library's own
/// lines for each retry stay out of the log. (The test API server refuses every request
/// with 401 and cuts the open watches, as a real one does at their next renewal; the real
/// control plane's run of the same is in `rest-lite/tests/real_cluster.rs`.)
mod credentials {
    use crate::common;
    use common::serve::Server;
    use pai_test_support::ApiServer;

    const NS: &str = "credentials";

    async fn readyz(url: &str) -> (u16, String) {
        let url = url.to_string();
        let reply =
            tokio::task::spawn_blocking(move || common::request(&url, "GET", "/readyz", &[], ""))
                .await
                .expect("readyz");
        (reply.status, reply.body)
    }

    // Long: the watches' back-off while refused, then the recovery.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn refused_credentials_are_said_once_the_server_is_not_ready_and_recovers_by_itself() {
        let dir = common::scratch("deploy", "credentials");
        let api = ApiServer::start().await;
        let kubeconfig = dir.join("kubeconfig");
        api.write_kubeconfig(&kubeconfig, Some(NS));
        let tokens = common::token_file(&dir, &[("alice", "alice-token", false)]);
        let server = Server::start_kube(&kubeconfig, NS, &tokens);
        assert_eq!(readyz(&server.url).await.0, 200);

        api.deny(Some(401));
        api.cut_watches();
        let (status, reason) = loop {
            let (status, body) = readyz(&server.url).await;
            if status == 503 {
                break (status, body);
            }
            tokio::task::yield_now().await;
        };
        assert_eq!(status, 503);
        assert!(
            reason.contains("refused this server's credentials")
                && reason.contains("401 Unauthorized")
                && reason.contains("ServiceAccount was deleted"),
            "{reason}"
        );
        // Reads are still answered from the copy within its bound.
        let url = server.url.clone();
        let jobs = tokio::task::spawn_blocking(move || {
            common::request(
                &url,
                "GET",
                "/api/v1/jobs",
                &[("Authorization", "Bearer alice-token")],
                "",
            )
        })
        .await
        .expect("jobs");
        assert_eq!(jobs.status, 200, "{}", jobs.body);
        // The watches and the probe go on asking (and backing off).
        api.faulted(6).await;

        api.deny(None);
        while readyz(&server.url).await.0 != 200 {
            tokio::task::yield_now().await;
        }
        let log = server.terminate();
        let said = log
            .lines()
            .filter(|l| l.contains("refuses this server's credentials"))
            .collect::<Vec<_>>();
        assert_eq!(said.len(), 1, "said once:\n{log}");
        assert!(said[0].contains("ERROR"), "{log}");
        assert!(
            log.contains("accepts this server's credentials again"),
            "{log}"
        );
        assert!(
            !log.contains("kube_runtime") && !log.contains("kube_client"),
            "the client library's lines stay out:\n{log}"
        );
    }
}
