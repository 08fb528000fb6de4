//! Gang admission (#23) on the in-process API server, which checks each PodGroup against
//! its project's published CRD schema: for coscheduling and Volcano, the group a
//! submission creates (before its Framework, then owned by it) and what its pods carry;
//! for Kueue, the pods' labels alone; the queue from `virtualCluster`; a bad queue name
//! refused at submission; `none` unchanged; every request the server made allowed by
//! `deploy/rest-lite/rbac.yaml`.

mod common;

use std::sync::Arc;

use pai_client::Client;
use pai_server::AppState;
use pai_server::auth::Access;
use pai_server::kube_backend::KubeBackend;
use pai_test_support::ApiServer;
use pai_test_support::rbac::{Attributes, allows};
use pai_translate::config::ClusterConfig;
use pai_translate::gang::{Engine, GangConfig};
use pai_translate::spec::SpecFormat;
use serde_json::{Value, json};

const NS: &str = "jobs";

fn spec(queue: Option<&str>) -> String {
    let mut spec = json!({
        "jobName": "train",
        "image": "busybox",
        "taskRoles": [
            {"name": "ps", "taskNumber": 2, "cpuNumber": 1, "memoryMB": 1024, "command": "true"},
            {"name": "worker", "taskNumber": 4, "cpuNumber": 2, "memoryMB": 2048, "gpuNumber": 1, "command": "true"},
        ],
    });
    if let Some(queue) = queue {
        spec["virtualCluster"] = json!(queue);
    }
    spec.to_string()
}

async fn serve(api: &ApiServer, gang: GangConfig) -> Client {
    let client =
        kube::Client::try_from(kube::Config::new(api.url().parse().expect("url"))).expect("client");
    let state = AppState::new(
        Arc::new(KubeBackend::start(client, NS, &api.url())),
        ClusterConfig {
            namespace: NS.into(),
            barrier_timeout_sec: Some(900),
            gang,
            ..ClusterConfig::default()
        },
        Access::Open,
    );
    common::serve_in_process(state).await
}

fn engine(engine: Engine) -> GangConfig {
    GangConfig {
        engine,
        ..GangConfig::default()
    }
}

/// Submits and returns the stored Framework.
async fn submit(api: &ApiServer, client: &Client, queue: Option<&str>) -> Value {
    client
        .submit("alice", &spec(queue), SpecFormat::Json)
        .await
        .expect("submitted");
    let fw = pai_contract::names::framework_name("alice", "train");
    api.get("frameworks", NS, &fw).expect("the Framework")
}

/// Every pod template's metadata and spec.
fn pods(framework: &Value) -> Vec<(&Value, &Value)> {
    framework["spec"]["taskRoles"]
        .as_array()
        .expect("roles")
        .iter()
        .map(|r| (&r["task"]["pod"]["metadata"], &r["task"]["pod"]["spec"]))
        .collect()
}

fn assert_owned_by(object: &Value, framework: &Value) {
    let owners = object["metadata"]["ownerReferences"]
        .as_array()
        .expect("owned");
    assert_eq!(owners.len(), 1, "{object:#}");
    assert_eq!(owners[0]["uid"], framework["metadata"]["uid"]);
    assert_eq!(owners[0]["kind"], "Framework");
}

fn assert_rbac_allows_everything(api: &ApiServer) {
    let text = std::fs::read_to_string(common::repo_root().join("deploy/rest-lite/rbac.yaml"))
        .expect("rbac.yaml");
    let rules: Vec<Value> = text
        .split("\n---\n")
        .map(|doc| serde_saphyr::from_str::<Value>(doc).expect("YAML"))
        .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == "rest-lite")
        .and_then(|role| role["rules"].as_array().cloned())
        .expect("the server's Role");
    for request in api.requests() {
        let attributes = Attributes::of(&request.method, &request.uri).expect("namespaced");
        assert!(
            allows(&rules, &attributes),
            "deploy/rest-lite/rbac.yaml does not allow {request:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coscheduling_a_pod_group_of_every_task_owned_by_the_framework() {
    let api = ApiServer::start().await;
    let client = serve(&api, engine(Engine::Coscheduling)).await;
    let framework = submit(&api, &client, None).await;
    let name = framework["metadata"]["name"].as_str().expect("name");
    let group = api.get("podgroups", NS, name).expect("the PodGroup");
    assert_eq!(group["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
    assert_eq!(
        group["spec"],
        json!({
            "minMember": 6,
            // ps 2 × (1 CPU, 1 GiB) + worker 4 × (2 CPU, 2 GiB, 1 GPU).
            "minResources": {"cpu": "10", "memory": "10Gi", "nvidia.com/gpu": "4"},
            "scheduleTimeoutSeconds": 900,
        })
    );
    assert_eq!(group["metadata"]["labels"], framework["metadata"]["labels"]);
    assert_owned_by(&group, &framework);
    for (meta, pod) in pods(&framework) {
        assert_eq!(meta["labels"]["scheduling.x-k8s.io/pod-group"], name);
        assert_eq!(pod["schedulerName"], "scheduler-plugins-scheduler");
    }
    // The group was made before the Framework whose pods name it.
    let order: Vec<String> = api
        .requests()
        .iter()
        .filter(|r| r.method == "POST")
        .map(|r| {
            r.uri
                .split('?')
                .next()
                .unwrap_or_default()
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .filter(|r| r == "podgroups" || r == "frameworks")
        .collect();
    assert_eq!(order, ["podgroups", "frameworks"]);
    assert_rbac_allows_everything(&api);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volcano_a_pod_group_in_the_queue_the_spec_names() {
    let api = ApiServer::start().await;
    let config = GangConfig {
        priority_class_name: Some("training".into()),
        ..engine(Engine::Volcano)
    };
    let client = serve(&api, config).await;
    let framework = submit(&api, &client, Some("team-a")).await;
    let name = framework["metadata"]["name"].as_str().expect("name");
    let group = api.get("podgroups", NS, name).expect("the PodGroup");
    assert_eq!(group["apiVersion"], "scheduling.volcano.sh/v1beta1");
    assert_eq!(group["spec"]["minMember"], 6);
    assert_eq!(group["spec"]["queue"], "team-a");
    assert_eq!(group["spec"]["priorityClassName"], "training");
    assert_eq!(group["spec"]["minResources"]["memory"], "10Gi");
    assert_owned_by(&group, &framework);
    for (meta, pod) in pods(&framework) {
        assert_eq!(meta["annotations"]["scheduling.k8s.io/group-name"], name);
        assert_eq!(
            meta["annotations"]["scheduling.volcano.sh/queue-name"],
            "team-a"
        );
        assert_eq!(pod["schedulerName"], "volcano");
        assert_eq!(pod["priorityClassName"], "training");
    }
    assert_rbac_allows_everything(&api);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kueue_labels_the_pods_of_one_group_in_a_local_queue_and_makes_no_object() {
    let api = ApiServer::start().await;
    let config = GangConfig {
        default_queue: Some("research".into()),
        ..engine(Engine::Kueue)
    };
    let client = serve(&api, config).await;
    let framework = submit(&api, &client, None).await;
    let name = framework["metadata"]["name"].as_str().expect("name");
    for (meta, pod) in pods(&framework) {
        assert_eq!(meta["labels"]["kueue.x-k8s.io/pod-group-name"], name);
        assert_eq!(meta["labels"]["kueue.x-k8s.io/queue-name"], "research");
        assert_eq!(
            meta["annotations"]["kueue.x-k8s.io/pod-group-total-count"],
            "6"
        );
        assert!(pod.get("schedulerName").is_none(), "{pod:#}");
    }
    assert!(api.get("podgroups", NS, name).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn none_leaves_the_pods_to_kube_scheduler_and_a_bad_queue_is_a_400() {
    let api = ApiServer::start().await;
    let client = serve(&api, GangConfig::default()).await;
    let framework = submit(&api, &client, Some("anything")).await;
    for (meta, pod) in pods(&framework) {
        assert_eq!(meta["labels"], framework["metadata"]["labels"]);
        assert_eq!(meta["annotations"].as_object().map(|a| a.len()), Some(1));
        assert!(pod.get("schedulerName").is_none());
    }
    assert!(!api.requests().iter().any(|r| r.uri.contains("podgroups")));

    let error = client
        .submit("alice", &spec(Some("Team_A")), SpecFormat::Json)
        .await
        .expect_err("refused");
    let text = error.to_string();
    assert!(text.contains("virtualCluster"), "{text}");
    assert!(text.contains("not a queue name"), "{text}");
}

#[test]
fn the_test_api_server_refuses_what_the_pod_group_crds_refuse() {
    use pai_test_support::validation::admit;
    let mut good = json!({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "g"}, "spec": {"minMember": 2, "minResources": {"cpu": "500m", "memory": 1024}, "surprise": 1}});
    admit("podgroups", &mut good).expect("admitted");
    assert_eq!(
        good["spec"]["queue"], "default",
        "defaulted as the CRD says"
    );
    assert!(good["spec"].get("surprise").is_none(), "pruned");
    for (api_version, spec, field) in [
        (
            "scheduling.x-k8s.io/v1alpha1",
            json!({"minMember": "2"}),
            "spec.minMember",
        ),
        (
            "scheduling.x-k8s.io/v1alpha1",
            json!({"minMember": 4_294_967_296i64}),
            "spec.minMember",
        ),
        (
            "scheduling.x-k8s.io/v1alpha1",
            json!({"minResources": {"cpu": "two"}}),
            "spec.minResources.cpu",
        ),
        (
            "scheduling.volcano.sh/v1beta1",
            json!({"queue": 3}),
            "spec.queue",
        ),
        ("scheduling.example.com/v1", json!({}), "apiVersion"),
    ] {
        let mut object = json!({"apiVersion": api_version, "kind": "PodGroup",
            "metadata": {"name": "g"}, "spec": spec});
        let invalid = admit("podgroups", &mut object).expect_err(field);
        assert!(
            invalid.causes.iter().any(|c| c.field == field),
            "{field}: {}",
            invalid.message()
        );
    }
}
