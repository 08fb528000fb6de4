//! The config read again by running servers: two replicas of `rest-lite serve` on a
//! cluster (the test API server) share one config file, as a ConfigMap mounted as a
//! directory is shared, and take its changes without a restart. What it does not prove:
//! the kubelet's replacement of a mounted ConfigMap (the real control plane's run in
//! `real_cluster/run.sh` does).

use std::path::Path;

use serde_json::{Value, json};

use crate::common;
use common::serve::{DEADLINE, Server};
use pai_client::Client;
use pai_contract::framework::CompletionStatus;
use pai_test_support::ApiServer;
use pai_translate::spec::SpecFormat;

const NS: &str = "jobs";
const TOKEN: &str = "alice-token";

fn spec(job: &str) -> String {
    json!({
        "jobName": job, "image": "busybox",
        "taskRoles": [{"name": "worker", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128,
            "command": "true"}],
    })
    .to_string()
}

fn storages(server: &Server) -> Vec<String> {
    let answer = common::request(
        &server.url,
        "GET",
        "/api/v2/storages",
        &[("Authorization", &format!("Bearer {TOKEN}"))],
        "",
    );
    let list: Value = serde_json::from_str(&answer.body).unwrap_or(Value::Null);
    list["storages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str().map(str::to_string))
        .collect()
}

fn write(path: &Path, text: &str) {
    // Replaced whole, as the kubelet replaces a mounted ConfigMap's files.
    let next = path.with_extension("next");
    std::fs::write(&next, text).expect("config");
    std::fs::rename(&next, path).expect("config replaced");
}

/// Waits until the Frameworks left are `names` (the retention deletes the others).
async fn frameworks_left(api: &ApiServer, names: &[String]) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let mut left: Vec<String> = api
            .list("frameworks", NS)
            .iter()
            .filter_map(|f| f["metadata"]["name"].as_str().map(str::to_string))
            .collect();
        left.sort();
        if left == names {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "Frameworks left: {left:?}, not {names:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

// Long: one config's life under two replicas: a change taken, a broken file, a field
// read at start only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_take_a_changed_config_without_a_restart() {
    let dir = common::scratch("config", "replicas");
    let api = ApiServer::start().await;
    let kubeconfig = dir.join("kubeconfig");
    api.write_kubeconfig(&kubeconfig, Some(NS));
    let config = dir.join("config.yaml");
    write(&config, "retention: {finishedJobs: 10}\n");
    let tokens = common::token_file(&dir, &[("alice", TOKEN, false)]);
    let replicas = [
        Server::start_kube_in(&kubeconfig, NS, &tokens, Some(&config), Some("rest-lite-a")),
        Server::start_kube_in(&kubeconfig, NS, &tokens, Some(&config), Some("rest-lite-b")),
    ];
    let client = Client::new(&replicas[0].url, Some(TOKEN.to_string()));
    let mut names = Vec::new();
    for (second, job) in ["one", "two", "three"].into_iter().enumerate() {
        client
            .submit("alice", &spec(job), SpecFormat::Json)
            .await
            .expect("submitted");
        let name = pai_job::names::framework_name("alice", job);
        api.modify("frameworks", NS, &name, |f| {
            f["status"]["state"] = json!("Completed");
            f["status"]["completionTime"] = json!(format!("2026-01-01T00:00:0{second}Z"));
            f["status"]["attemptStatus"]["completionStatus"] =
                serde_json::to_value(CompletionStatus::of(0, "exit code 0".to_string()))
                    .expect("json");
        });
        names.push(name);
    }
    names.sort();
    frameworks_left(&api, &names).await;
    assert!(storages(&replicas[1]).is_empty());

    // The operator adds a storage and keeps one finished job only.
    let changed =
        "retention: {finishedJobs: 1}\nstorages:\n  - {name: team, claimName: team-data}\n";
    write(&config, changed);
    for replica in &replicas {
        replica.logged("config read again").await;
        let log = replica.log();
        assert!(log.contains("changed=retention, storages"), "{log}");
    }
    let newest = pai_job::names::framework_name("alice", "three");
    frameworks_left(&api, std::slice::from_ref(&newest)).await;
    for replica in &replicas {
        assert_eq!(storages(replica), ["team"]);
    }

    // A config that does not read: the last good one stays, and the log says why.
    write(&config, "retention: {finishedJobs: many}\n");
    for replica in &replicas {
        replica
            .logged("does not read: the last good one stays")
            .await;
        assert_eq!(storages(replica), ["team"]);
    }

    // A field read at start only: said, and the running value stays.
    write(&config, &format!("namespace: elsewhere\n{changed}"));
    for replica in &replicas {
        replica.logged("read at start only").await;
        assert!(
            replica.log().contains("changed=namespace"),
            "{}",
            replica.log()
        );
    }
    let job = client.job("alice", "three").await.expect("still served");
    assert_eq!(job.name, "three");
    drop(replicas);
    drop(api);
}

/// In a pod that mounts its config from a ConfigMap, a change of the ConfigMap counts as
/// soon as the API says it, before the kubelet replaces the file (here: never).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_takes_its_config_maps_change_before_the_kubelet_replaces_the_file() {
    let dir = common::scratch("config", "map");
    let api = ApiServer::start().await;
    let kubeconfig = dir.join("kubeconfig");
    api.write_kubeconfig(&kubeconfig, Some(NS));
    let mounted = dir.join("etc");
    std::fs::create_dir_all(&mounted).expect("dir");
    let config = mounted.join("config.yaml");
    write(&config, "retention: {finishedJobs: 10}\n");
    api.create(
        "configmaps",
        NS,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "rest-lite-config"},
            "data": {"config.yaml": "retention: {finishedJobs: 10}\n"}}),
    );
    // The server's pod, as the Deployment makes it: the ConfigMap mounted as the
    // config's directory.
    api.create(
        "pods",
        NS,
        json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "rest-lite-a"},
        "spec": {
            "containers": [{"name": "rest-lite", "image": "rest-lite",
                "volumeMounts": [{"name": "config", "mountPath": mounted.display().to_string()}]}],
            "volumes": [{"name": "config", "configMap": {"name": "rest-lite-config"}}],
        }}),
    );
    let tokens = common::token_file(&dir, &[("alice", TOKEN, false)]);
    let replica =
        Server::start_kube_in(&kubeconfig, NS, &tokens, Some(&config), Some("rest-lite-a"));
    replica.logged("the config's ConfigMap is followed").await;
    api.modify("configmaps", NS, "rest-lite-config", |map| {
        map["data"]["config.yaml"] = json!(
            "retention: {finishedJobs: 10}\nstorages:\n  - {name: team, claimName: team-data}\n"
        );
    });
    replica.logged("config read again").await;
    assert_eq!(storages(&replica), ["team"]);
    assert_eq!(
        std::fs::read_to_string(&config).expect("file"),
        "retention: {finishedJobs: 10}\n",
        "the file was not what changed"
    );
    drop(replica);
    drop(api);
}
