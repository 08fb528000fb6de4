//! A job's pods can read their own job and nothing else (#22), on the in-process API
//! server (which checks the RBAC objects' shape as Kubernetes' validation does) and its
//! RBAC authorizer (`pai_test_support::rbac`): the objects a submission creates, what
//! the pod template mounts, every request a barrier makes allowed by its job's Role and
//! another job's objects refused, every request the server makes allowed by the Role in
//! `deploy/rest-lite/rbac.yaml`, which also holds everything it grants (RBAC's
//! escalation rule), and the garbage collector's part.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use pai_barrier::{Attempt, BarrierConfig, Source, kube_source, published};
use pai_client::Client;
use pai_cluster::backend::KubeBackend;
use pai_cluster::publisher::Publisher;
use pai_contract::{access, kept_logs};
use pai_server::AppState;
use pai_server::auth::Access;
use pai_test_support::ApiServer;
use pai_test_support::frameworks::{set_all_addresses, set_attempt};
use pai_test_support::rbac::{Attributes, allows, covers};
use pai_translate::config::ClusterConfig;
use pai_translate::spec::SpecFormat;
use serde_json::{Value, json};

const NS: &str = "jobs";
const ROLES: &[(&str, u32)] = &[("ps", 1), ("worker", 2)];

fn spec(name: &str) -> String {
    json!({
        "jobName": name,
        "image": "busybox",
        "taskRoles": [
            {"name": "ps", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128, "command": "true"},
            {"name": "worker", "taskNumber": 2, "cpuNumber": 1, "memoryMB": 128, "command": "true"},
        ],
        "jobEnvs": {"API_KEY": "alice's secret"},
    })
    .to_string()
}

/// The token a job's init container sends; the API server's log of requests names it.
const JOB_TOKEN: &str = "the-jobs-own-token";

/// A client as a job's init container has one: with the job's token.
fn job_client(api: &ApiServer) -> kube::Client {
    let mut config = kube::Config::new(api.url().parse().expect("url"));
    let bearer = http::HeaderValue::from_str(&format!("Bearer {JOB_TOKEN}")).expect("a header");
    config.headers.push((http::header::AUTHORIZATION, bearer));
    kube::Client::try_from(config).expect("client")
}

async fn serve(api: &ApiServer) -> Client {
    let state = AppState::new(
        Arc::new(KubeBackend::start(api.client(), NS, &api.url())),
        ClusterConfig {
            namespace: NS.into(),
            ..ClusterConfig::default()
        },
        Access::Open,
    );
    common::serve_in_process(state).await
}

fn attributes(request: &pai_test_support::apiserver::Request) -> Attributes {
    Attributes::of(&request.method, &request.uri)
        .unwrap_or_else(|| panic!("not a namespaced request: {request:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_may_read_its_own_framework_and_peer_table_and_nothing_else() {
    let api = ApiServer::start().await;
    let client = serve(&api).await;
    for (user, job) in [("alice", "train"), ("bob", "other")] {
        client
            .submit(user, &spec(job), SpecFormat::Json)
            .await
            .expect("submitted");
    }
    let fw = pai_job::names::framework_name("alice", "train");
    let bob = pai_job::names::framework_name("bob", "other");
    let account = access::job_account(&fw);
    let framework = api.get("frameworks", NS, &fw).expect("alice's Framework");
    let uid = framework["metadata"]["uid"].clone();

    // Its own account, Role and binding, each owned by the Framework.
    let sa = api.get("serviceaccounts", NS, &account).expect("account");
    let role = api.get("roles", NS, &account).expect("role");
    let binding = api.get("rolebindings", NS, &account).expect("binding");
    for object in [&sa, &role, &binding] {
        let owners = object["metadata"]["ownerReferences"]
            .as_array()
            .expect("owned");
        assert_eq!(owners.len(), 1, "{object:#}");
        assert_eq!(owners[0]["uid"], uid);
        assert_eq!(owners[0]["kind"], "Framework");
    }
    assert_eq!(sa["automountServiceAccountToken"], false);
    let rules = role["rules"].as_array().expect("rules").clone();
    // Whatever the number of tasks: nothing names a task, and nothing is written.
    assert_eq!(
        Value::Array(rules.clone()),
        json!([
            {"apiGroups": ["frameworkcontroller.microsoft.com"], "resources": ["frameworks"],
             "resourceNames": [fw], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["configmaps"],
             "resourceNames": [access::peer_table(&fw)], "verbs": ["get", "list", "watch"]},
        ])
    );
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account})
    );
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": account, "namespace": NS}])
    );

    // The pods: that account, a short-lived token, projected, in the init container only
    // (the barrier's): the user command's container has none.
    for role in framework["spec"]["taskRoles"].as_array().expect("roles") {
        let pod = &role["task"]["pod"]["spec"];
        assert_eq!(pod["serviceAccountName"], account.as_str());
        assert_eq!(pod["automountServiceAccountToken"], false);
        let mounts = |container: &Value| -> Vec<String> {
            container["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| m["mountPath"].as_str().map(str::to_string))
                .collect()
        };
        assert!(!mounts(&pod["containers"][0]).contains(&access::TOKEN_MOUNT.to_string()));
        assert!(mounts(&pod["initContainers"][0]).contains(&access::TOKEN_MOUNT.to_string()));
        let token = pod["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .find_map(|v| v["projected"]["sources"][0]["serviceAccountToken"].as_object())
            .expect("a projected token");
        assert_eq!(token["expirationSeconds"], access::TOKEN_EXPIRATION_SECONDS);
    }

    // Everything the server did so far, and everything it grants, it holds.
    let server_rules = common::role_rules(
        &std::fs::read_to_string(common::repo_root().join("deploy/rest-lite/rbac.yaml"))
            .expect("deploy/rest-lite/rbac.yaml"),
        "rest-lite",
    );
    assert!(
        covers(&server_rules, &rules),
        "RBAC would refuse to create the job's Role"
    );
    let store = KubeBackend::store_only(api.client(), NS, &api.url());
    let publisher = tokio::spawn(Publisher::new(api.client(), NS).run(store.clone()));
    // The keeper of finished tasks' logs.
    let keeper = tokio::spawn(
        pai_cluster::log_keeper::LogKeeper::new(
            api.client(),
            NS,
            store.clone(),
            pai_cluster::log_keeper::Budget {
                task_bytes: pai_contract::kept_logs::DEFAULT_BYTES,
                job_bytes: pai_contract::kept_logs::JOB_BYTES,
                attempts: 1,
            },
        )
        .run(),
    );
    // The server's Events too (the test API server dates objects long ago).
    let recorder = tokio::spawn(
        pai_cluster::events::Recorder::new(api.client(), NS, "rest-lite-0")
            .with_max_age(Duration::from_secs(100 * 365 * 86_400))
            .run(store),
    );
    // FrameworkController starts the attempt and the pods get addresses; the publisher
    // writes the table.
    let instance = "0_uid-train";
    api.modify("frameworks", NS, &fw, |f| {
        set_attempt(f, 0, instance);
        set_all_addresses(f, ROLES);
    });
    api.wait_for("configmaps", NS, &published::object_name(&fw), |_| true)
        .await;
    // A task's pod, made from the template, ends: the keeper reads its log and keeps it
    // in the job's ConfigMap.
    let framework = api.get("frameworks", NS, &fw).expect("framework");
    let pod = pai_contract::framework::pod_name(&fw, "ps", 0);
    let mut made = pai_test_support::frameworks::pod_of(&framework, "ps", 0);
    api.append_log(NS, &pod, "done\n");
    api.end_log(NS, &pod);
    pai_test_support::frameworks::set_terminated(
        &mut made,
        pai_contract::framework::MAIN_CONTAINER,
        0,
        "",
    );
    api.create("pods", NS, made);
    api.wait_for("configmaps", NS, &kept_logs::config_map(&fw), |_| true)
        .await;
    api.delete("pods", NS, &pod);
    api.wait_gone("pods", NS, &pod).await;
    client.stop("bob", "other").await.expect("stopped");
    // The recorder listed what was recorded and recorded the submissions.
    let events = || {
        api.requests()
            .iter()
            .filter(|r| r.method == "POST" && r.uri.contains("/events"))
            .count()
    };
    while events() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for request in api.requests() {
        assert!(
            allows(&server_rules, &attributes(&request)),
            "deploy/rest-lite/rbac.yaml does not allow the server's {request:?}"
        );
    }
    publisher.abort();
    recorder.abort();
    keeper.abort();

    // A barrier of the job, as its init container runs it: every request allowed. The
    // server's own informers go on beside it; the job's token tells its requests apart.
    let config = BarrierConfig {
        namespace: NS.into(),
        name: fw.clone(),
        timeout: Duration::from_secs(120),
        reread: None,
        source: Source::Published(Attempt {
            id: 0,
            instance_uid: instance.into(),
        }),
    };
    let passed = kube_source::wait(job_client(&api), &config)
        .await
        .expect("the barrier passes");
    assert_eq!(passed.peers.task_count(), 3);
    let barrier: Vec<_> = api
        .requests()
        .into_iter()
        .filter(|r| r.bearer.as_deref() == Some(JOB_TOKEN))
        .collect();
    assert!(!barrier.is_empty());
    for request in &barrier {
        assert!(
            allows(&rules, &attributes(request)),
            "the job's Role does not allow its barrier's {request:?}"
        );
    }
    // What a job's token must not reach: another job's Framework (its jobEnvs, its
    // commands), its table, its key, the list of every job, and writes to its own.
    let jobs = "/apis/frameworkcontroller.microsoft.com/v1/namespaces/jobs/frameworks";
    let maps = "/api/v1/namespaces/jobs/configmaps";
    for (method, uri) in [
        ("GET", format!("{jobs}/{bob}")),
        ("GET", jobs.to_string()),
        ("GET", format!("{jobs}?watch=true")),
        (
            "GET",
            format!("{jobs}?fieldSelector=metadata.name%3D{bob}&watch=true"),
        ),
        ("PATCH", format!("{jobs}/{fw}")),
        ("DELETE", format!("{jobs}/{fw}")),
        ("GET", format!("{maps}/{}", access::peer_table(&bob))),
        // Its own job's kept logs and another's; and no ConfigMap of its own making.
        ("PUT", format!("{maps}/{}", kept_logs::config_map(&fw))),
        ("GET", format!("{maps}/{}", kept_logs::config_map(&fw))),
        ("GET", format!("{maps}/{}", kept_logs::config_map(&bob))),
        ("DELETE", format!("{maps}/{}", kept_logs::config_map(&fw))),
        ("GET", maps.to_string()),
        ("GET", format!("/api/v1/namespaces/jobs/secrets/{fw}-ssh")),
        ("GET", format!("/api/v1/namespaces/jobs/pods/{fw}-ps-0/log")),
        ("POST", maps.to_string()),
    ] {
        let request = Attributes::of(method, &uri).expect("namespaced");
        assert!(
            !allows(&rules, &request),
            "a job's token may {method} {uri}"
        );
    }

    // Deleting the job deletes its grant.
    client.delete("alice", "train").await.expect("deleted");
    for resource in ["serviceaccounts", "roles", "rolebindings"] {
        assert!(
            api.get(resource, NS, &account).is_none(),
            "{resource} left behind"
        );
    }
    assert!(
        api.get("roles", NS, &access::job_account(&bob)).is_some(),
        "bob's stays"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_is_not_created_leaves_no_grant_and_a_second_one_takes_none() {
    let api = ApiServer::start().await;
    let client = serve(&api).await;
    let fw = pai_job::names::framework_name("alice", "train");
    let account = access::job_account(&fw);

    api.reject_creates_of("frameworks", "denied by a webhook");
    client
        .submit("alice", &spec("train"), SpecFormat::Json)
        .await
        .expect_err("refused");
    for resource in ["serviceaccounts", "roles", "rolebindings"] {
        assert!(
            api.get(resource, NS, &account).is_none(),
            "{resource} left behind"
        );
    }

    // Accepted; the same job again is a conflict and leaves the first job's grant as is.
    let api = ApiServer::start().await;
    let client = serve(&api).await;
    client
        .submit("alice", &spec("train"), SpecFormat::Json)
        .await
        .expect("submitted");
    let role = api.get("roles", NS, &account).expect("role");
    let again = client
        .submit("alice", &spec("train"), SpecFormat::Json)
        .await;
    assert!(
        matches!(again, Err(pai_client::ClientError::Api { status: 409, .. })),
        "{again:?}"
    );
    assert_eq!(api.get("roles", NS, &account), Some(role));
}
