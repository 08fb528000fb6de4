//! Gang admission (#23) on the in-process API server, which checks each PodGroup against
//! its project's published CRD schema: for coscheduling and Volcano, the group a
//! submission creates (before its Framework, then owned by it) and what its pods carry;
//! for Kueue, the pods' labels alone; the queue from `virtualCluster`; a bad queue name,
//! a queue the cluster does not have and a closed one refused at submission; `none`
//! unchanged; WAITING with the reason each engine's status gives (and the scheduler's
//! verdict on the pods), gone once the job is placed; every request the server made
//! allowed by `deploy/rest-lite/rbac.yaml` (and the ClusterRole of
//! `rbac-volcano-queues.yaml` for Volcano's cluster-wide queues).

use crate::common;

use std::sync::Arc;

use futures::StreamExt;
use pai_api::status::{JobState, JobView};
use pai_client::Client;
use pai_cluster::backend::KubeBackend;
use pai_server::AppState;
use pai_server::auth::Access;
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
    let client = api.client();
    let engine = gang.engine;
    let state = AppState::new(
        Arc::new(KubeBackend::start(client.clone(), NS, &api.url()).admitting(client, NS, engine)),
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
    let fw = pai_job::names::framework_name("alice", "train");
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

/// The rules of the `kind` named `name` in `deploy/rest-lite/{file}`.
fn rules(file: &str, kind: &str, name: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(common::repo_root().join("deploy/rest-lite").join(file))
        .expect("an RBAC file");
    text.split("\n---\n")
        .map(|doc| serde_saphyr::from_str::<Value>(doc).expect("YAML"))
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .and_then(|role| role["rules"].as_array().cloned())
        .expect("the rules")
}

fn assert_rbac_allows_everything(api: &ApiServer) {
    let role = rules("rbac.yaml", "Role", "rest-lite");
    let mut cluster = rules(
        "rbac-volcano-queues.yaml",
        "ClusterRole",
        "rest-lite-volcano-queues",
    );
    cluster.extend(rules(
        "rbac-priority-classes.yaml",
        "ClusterRole",
        "rest-lite-priority-classes",
    ));
    for request in api.requests() {
        let attributes = Attributes::of(&request.method, &request.uri).expect("a resource");
        // A Role grants nothing cluster-wide: those requests need the ClusterRole.
        let rules = if attributes.namespace.is_empty() {
            &cluster
        } else {
            &role
        };
        assert!(
            allows(rules, &attributes),
            "deploy/rest-lite/ does not allow {request:?}"
        );
    }
}

/// The job's views from now on, until one `done` accepts (which is returned).
async fn until(
    changes: &mut futures::stream::BoxStream<'static, Result<JobView, pai_client::ClientError>>,
    done: impl Fn(&JobView) -> bool,
) -> JobView {
    let wait = async {
        loop {
            let view = changes
                .next()
                .await
                .expect("the watch goes on")
                .expect("a view");
            if done(&view) {
                return view;
            }
        }
    };
    // A bound against a hang only: the views come as the test changes the objects.
    tokio::time::timeout(std::time::Duration::from_secs(60), wait)
        .await
        .expect("the awaited view")
}

/// A pod FrameworkController made for task `index` of Framework `framework`, pending:
/// the scheduler could not place it, in `message`.
fn pending_pod(framework: &str, index: u32, reason: &str, message: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{framework}-worker-{index}"), "labels": {
            "app.kubernetes.io/managed-by": "rest-lite", "FC_FRAMEWORK_NAME": framework}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
            "reason": reason, "message": message, "lastTransitionTime": "2026-11-25T10:00:00Z"}]},
    })
}

/// Submits a job naming `queue`: its refusal, in words.
async fn refused(client: &Client, queue: &str) -> String {
    client
        .submit("alice", &spec(Some(queue)), SpecFormat::Json)
        .await
        .expect_err("refused")
        .to_string()
}

fn waiting_of(view: &JobView) -> (&str, &str) {
    view.job_status
        .waiting
        .as_ref()
        .map_or(("", ""), |w| (w.reason.as_str(), w.message.as_str()))
}

fn volcano_queue(name: &str, state: &str) -> Value {
    json!({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
        "metadata": {"name": name}, "spec": {"weight": 1}, "status": {"state": state}})
}

fn local_queue(name: &str) -> Value {
    json!({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
        "metadata": {"name": name}, "spec": {"clusterQueue": "cluster"}})
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
    api.create("queues", "", volcano_queue("team-a", "Open"));
    // The class the config gives every job: an API server admits no pod naming a missing one.
    api.create(
        "priorityclasses",
        "",
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": "training"}, "value": 100}),
    );
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

/// Kueue, the jobs' default queue the LocalQueue `research`.
/// A server under Kueue with the `research` LocalQueue, and the Framework of one job
/// submitted to it (the default queue).
async fn kueue_job_in_research(api: &ApiServer) -> (Client, Value) {
    let client = serve(api, kueue_research()).await;
    api.create("localqueues", NS, local_queue("research"));
    let framework = submit(api, &client, None).await;
    (client, framework)
}

fn kueue_research() -> GangConfig {
    GangConfig {
        default_queue: Some("research".into()),
        ..engine(Engine::Kueue)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kueue_labels_the_pods_of_one_group_in_a_local_queue_and_makes_no_object() {
    let api = ApiServer::start().await;
    let (_client, framework) = kueue_job_in_research(&api).await;
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

    let text = refused(&client, "team a").await;
    assert!(text.contains("virtualCluster"), "{text}");
    assert!(text.contains("is not a virtual cluster's name"), "{text}");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coscheduling_a_waiting_job_says_what_its_group_and_the_scheduler_say() {
    let api = ApiServer::start().await;
    let client = serve(&api, engine(Engine::Coscheduling)).await;
    let framework = submit(&api, &client, None).await;
    let name = framework["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_string();
    let mut changes = client.watch("alice", "train").await.expect("watch");
    // A group the plugin has not looked at yet is pending.
    let first = until(&mut changes, |v| waiting_of(v).0 == "Pending").await;
    assert_eq!(
        waiting_of(&first).1,
        "the coscheduling plugin places all 6 pods together or none (0 running)"
    );

    // FrameworkController made the pods; the plugin holds the group, the scheduler
    // says why two of them cannot be placed.
    api.modify("podgroups", NS, &name, |g| {
        g["status"] = json!({"phase": "Pending", "running": 0});
    });
    for index in 0..2 {
        api.create(
            "pods",
            NS,
            pending_pod(
                &name,
                index,
                "Unschedulable",
                "0/2 nodes are available: 2 Insufficient cpu.",
            ),
        );
    }
    let view = until(&mut changes, |v| waiting_of(v).1.contains("2 of 6 pods")).await;
    let (reason, message) = waiting_of(&view);
    assert_eq!(reason, "Pending");
    assert_eq!(
        message,
        "the coscheduling plugin places all 6 pods together or none (0 running); 2 of 6 pods cannot be placed: 0/2 nodes are available: 2 Insufficient cpu."
    );
    assert_eq!(view.job_status.state, pai_api::status::JobState::Waiting);
    let since = view.job_status.waiting.as_ref().and_then(|w| w.since);
    assert_eq!(since, Some(1_795_600_800_000), "since the pods' verdict");
    let admitted = view.condition("Admitted").expect("an Admitted condition");
    assert_eq!(
        (admitted.status.as_str(), admitted.reason.as_str()),
        ("False", "Pending")
    );
    assert_eq!(admitted.last_transition_time, "2026-11-25T10:00:00Z");

    // Placed: the group is scheduled, the pods leave Pending (and the watch of pending
    // pods): nothing holds the job any more.
    api.modify("podgroups", NS, &name, |g| {
        g["status"]["phase"] = json!("Scheduled")
    });
    for index in 0..2 {
        api.modify("pods", NS, &format!("{name}-worker-{index}"), |p| {
            p["status"] = json!({"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]});
        });
    }
    let view = until(&mut changes, |v| {
        v.job_status.waiting.as_ref().is_some_and(|w| !w.is_held())
    })
    .await;
    assert_eq!(waiting_of(&view).0, "Submitted");
    assert_rbac_allows_everything(&api);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volcano_a_waiting_job_says_what_its_groups_condition_says_and_queues_are_checked() {
    let api = ApiServer::start().await;
    let client = serve(&api, engine(Engine::Volcano)).await;
    // The queue must exist, and be open.
    for (queue, refusal) in [
        ("missing", "the cluster has no Volcano queue named missing"),
        ("closed", "Volcano queue closed is Closed"),
    ] {
        if queue == "closed" {
            api.create("queues", "", volcano_queue("closed", "Closed"));
        }
        let text = refused(&client, queue).await;
        assert!(
            text.contains("virtualCluster") && text.contains(refusal),
            "{text}"
        );
    }
    assert!(
        !api.requests().iter().any(|r| r.method == "POST"),
        "a refused job makes nothing"
    );
    api.create("queues", "", volcano_queue("default", "Open"));
    let framework = submit(&api, &client, None).await;
    let name = framework["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_string();
    let mut changes = client.watch("alice", "train").await.expect("watch");
    api.modify("podgroups", NS, &name, |g| {
        g["status"] = json!({"phase": "Inqueue", "conditions": [{"type": "Unschedulable", "status": "True",
            "reason": "NotEnoughResources", "transitionID": "t1",
            "message": "6/6 tasks in gang unschedulable: pod group is not ready, 6 Pending, 6 minAvailable; Pending: 6 Unschedulable",
            "lastTransitionTime": "2026-11-25T10:00:00Z"}]});
    });
    // Volcano's scheduler says it on the pods too: not repeated.
    api.create(
        "pods",
        NS,
        pending_pod(
            &name,
            0,
            "Unschedulable",
            "pod group is not ready, 6 Pending, 6 minAvailable",
        ),
    );
    let view = until(&mut changes, |v| waiting_of(v).0 == "NotEnoughResources").await;
    assert_eq!(
        waiting_of(&view).1,
        "6/6 tasks in gang unschedulable: pod group is not ready, 6 Pending, 6 minAvailable; Pending: 6 Unschedulable"
    );
    assert_rbac_allows_everything(&api);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kueue_a_waiting_job_says_what_its_workload_says_and_local_queues_are_checked() {
    let api = ApiServer::start().await;
    let client = serve(&api, kueue_research()).await;
    let text = refused(&client, "nobody").await;
    assert!(
        text.contains("virtualCluster") && text.contains("no Kueue LocalQueue named nobody"),
        "{text}"
    );
    api.create("localqueues", NS, local_queue("research"));
    let framework = submit(&api, &client, None).await;
    let name = framework["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_string();
    let mut changes = client.watch("alice", "train").await.expect("watch");
    // Kueue gates the pods until it admits their Workload (named after their group).
    api.create(
        "pods",
        NS,
        pending_pod(
            &name,
            0,
            "SchedulingGated",
            "Scheduling is blocked due to non-empty scheduling gates",
        ),
    );
    let gated = until(&mut changes, |v| waiting_of(v).0 == "SchedulingGated").await;
    assert!(
        waiting_of(&gated)
            .1
            .starts_with("1 of 6 pods are gated until their queue admits them"),
        "{:?}",
        waiting_of(&gated)
    );
    api.create(
        "workloads",
        NS,
        json!({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
            "metadata": {"name": name}, "spec": {"queueName": "research"},
            "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                "message": "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 4 more needed",
                "lastTransitionTime": "2026-11-25T10:00:00Z"}]}}),
    );
    let view = until(&mut changes, |v| {
        waiting_of(v).1.contains("insufficient unused quota")
    })
    .await;
    assert_eq!(waiting_of(&view).0, "Pending");
    // Admitted: Kueue lifts the gates; the Workload says so.
    api.modify("workloads", NS, &name, |w| {
        w["status"]["conditions"] = json!([{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}]);
    });
    api.delete("pods", NS, &format!("{name}-worker-0"));
    let view = until(&mut changes, |v| {
        v.job_status.waiting.as_ref().is_some_and(|w| !w.is_held())
    })
    .await;
    assert_eq!(waiting_of(&view).0, "Submitted");
    assert_rbac_allows_everything(&api);
}

/// A Workload as Kueue v0.19 makes it for the pod group `name` whose pods belong to
/// attempt `attempt` of Framework `framework` (their spec copied, their labels not),
/// admitted and holding its quota.
fn admitted_workload(name: &str, framework: &str, attempt: i32) -> Value {
    json!({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
        "metadata": {"name": name, "annotations": {"kueue.x-k8s.io/is-group-workload": "true"}},
        "spec": {"queueName": "research", "podSets": [{"name": "90e0dcb3", "count": 6,
            "template": {"metadata": {}, "spec": {"containers": [{"name": "main",
                "env": [{"name": "FC_FRAMEWORK_NAME", "value": framework},
                    {"name": "FC_FRAMEWORK_ATTEMPT_ID", "value": attempt.to_string()}]}]}}}]},
        "status": {"conditions": [{"type": "QuotaReserved", "status": "True"},
            {"type": "Admitted", "status": "True"}]}})
}

/// Under Kueue, the pods of an attempt that ends let go of their quota: the Workload of
/// its pods is deleted once FrameworkController deletes them (a stop, a failure, a retry
/// coming) or the job is gone, never while the attempt runs; a Workload of pods that are
/// not a job's stays; a pod being deleted loses Kueue's finalizer. What the real Kueue then does (the pods let go, the next job or
/// attempt admitted) is run on a real control plane (rest-lite/tests/real_cluster/queues.sh).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kueue_the_workload_of_an_attempt_that_ends_is_deleted() {
    let api = ApiServer::start().await;
    let (client, framework) = kueue_job_in_research(&api).await;
    let name = framework["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_string();
    let state = |state: &'static str, attempt: i32| {
        move |f: &mut Value| {
            f["status"]["state"] = json!(state);
            f["status"]["attemptStatus"]["id"] = json!(attempt);
            f["status"]["retryPolicyStatus"]["totalRetriedCount"] = json!(attempt);
        }
    };
    let gone_soon = |workload: &str| {
        let (api, workload) = (&api, workload.to_string());
        async move {
            tokio::time::timeout(
                std::time::Duration::from_secs(60),
                api.wait_gone("workloads", NS, &workload),
            )
            .await
            .unwrap_or_else(|_| panic!("Workload {workload} deleted"))
        }
    };
    let mut changes = client.watch("alice", "train").await.expect("watch");
    api.modify("frameworks", NS, &name, state("AttemptRunning", 0));
    until(&mut changes, |v| v.job_status.state == JobState::Running).await;
    api.create("workloads", NS, admitted_workload(&name, &name, 0));
    // Another's pod group, whose pods are not a Framework's of its name.
    api.create("workloads", NS, admitted_workload("theirs", "another", 0));
    // A job that is gone (deleted while no server ran: found at the first list, or now):
    // its Workload goes, after the ones above were looked at.
    let gone = pai_job::names::framework_name("alice", "gone");
    api.create("workloads", NS, admitted_workload(&gone, &gone, 0));
    gone_soon(&gone).await;
    assert!(
        api.get("workloads", NS, &name).is_some(),
        "its attempt runs"
    );

    // A task's pod fails and FrameworkController deletes it: Kueue's finalizer comes off
    // (the pod goes), the Workload stays for the pods that go on.
    let mut ended = pending_pod(&name, 0, "Scheduled", "");
    ended["metadata"]["finalizers"] = json!(["kueue.x-k8s.io/managed"]);
    ended["status"] = json!({"phase": "Failed"});
    api.create("pods", NS, ended);
    api.delete("pods", NS, &format!("{name}-worker-0"));
    tokio::time::timeout(
        std::time::Duration::from_secs(60),
        api.wait_gone("pods", NS, &format!("{name}-worker-0")),
    )
    .await
    .expect("the deleted pod is let go of");
    assert!(
        api.get("workloads", NS, &name).is_some(),
        "its attempt runs"
    );

    // Attempt 0 fails and is deleted, to be retried: its pods' Workload goes.
    api.modify("frameworks", NS, &name, state("AttemptDeleting", 0));
    gone_soon(&name).await;
    // Attempt 1's pods make a new one, kept while it runs.
    api.modify("frameworks", NS, &name, state("AttemptRunning", 1));
    until(&mut changes, |v| v.job_status.retries == 1).await;
    api.create("workloads", NS, admitted_workload(&name, &name, 1));
    let later = pai_job::names::framework_name("alice", "later");
    api.create("workloads", NS, admitted_workload(&later, &later, 0));
    gone_soon(&later).await;
    assert!(api.get("workloads", NS, &name).is_some(), "attempt 1 runs");

    // Stopped for good: completed, its Workload goes.
    client.stop("alice", "train").await.expect("stopped");
    api.modify("frameworks", NS, &name, state("Completed", 1));
    gone_soon(&name).await;
    assert!(api.get("workloads", NS, "theirs").is_some(), "not a job's");
    let deletions = api
        .requests()
        .iter()
        .filter(|r| r.method == "DELETE" && r.uri.contains("/workloads/"))
        .count();
    assert_eq!(deletions, 4, "one per Workload");
    assert_rbac_allows_everything(&api);
}

/// A protocol v2 job of class `class` (its `extras.hivedScheduler.jobPriorityClass`).
fn v2_of_class(class: &str) -> String {
    json!({
        "protocolVersion": 2, "name": "urgent", "type": "job",
        "prerequisites": [{"type": "dockerimage", "name": "image", "uri": "busybox"}],
        "taskRoles": {"worker": {"instances": 2, "dockerImage": "image",
            "resourcePerInstance": {"cpu": 1, "memoryMB": 512, "gpu": 0},
            "commands": ["true"]}},
        "extras": {"hivedScheduler": {"jobPriorityClass": class}},
    })
    .to_string()
}

/// A job's class is the cluster's priority class its pods and Kueue's Workload name; a
/// class the cluster lacks (its PriorityClass, or Kueue's WorkloadPriorityClass) is refused
/// naming it, and nothing is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kueue_a_jobs_priority_class_is_the_clusters_and_a_missing_one_is_refused() {
    let api = ApiServer::start().await;
    let client = serve(&api, kueue_research()).await;
    api.create("localqueues", NS, local_queue("research"));
    let refused = |client: Client| async move {
        client
            .submit("alice", &v2_of_class("prod"), SpecFormat::Json)
            .await
            .expect_err("refused")
            .to_string()
    };
    let text = refused(client.clone()).await;
    assert!(
        text.contains("jobPriorityClass: prod is, on this cluster, the class prod, and the cluster has no PriorityClass of that name"),
        "{text}"
    );
    let class = |kind: &str| {
        let api_version = match kind {
            "PriorityClass" => "scheduling.k8s.io/v1",
            _ => "kueue.x-k8s.io/v1beta1",
        };
        json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "prod"}, "value": 1000})
    };
    api.create("priorityclasses", "", class("PriorityClass"));
    let text = refused(client.clone()).await;
    assert!(
        text.contains("the cluster has no Kueue WorkloadPriorityClass of that name"),
        "{text}"
    );
    let framework = pai_job::names::framework_name("alice", "urgent");
    assert!(api.get("frameworks", NS, &framework).is_none());
    assert!(api.list("serviceaccounts", NS).is_empty(), "nothing made");

    api.create(
        "workloadpriorityclasses",
        "",
        class("WorkloadPriorityClass"),
    );
    client
        .submit("alice", &v2_of_class("prod"), SpecFormat::Json)
        .await
        .expect("submitted");
    let framework = api
        .get("frameworks", NS, &framework)
        .expect("the Framework");
    assert_eq!(
        framework["metadata"]["labels"][pai_contract::priority::LABEL],
        "prod"
    );
    for (meta, pod) in pods(&framework) {
        assert_eq!(pod["priorityClassName"], "prod", "{pod:#}");
        assert_eq!(meta["labels"]["kueue.x-k8s.io/priority-class"], "prod");
    }
    let view = client.job("alice", "urgent").await.expect("view");
    assert_eq!(view.job_status.job_priority.as_deref(), Some("prod"));
    assert_rbac_allows_everything(&api);
}
