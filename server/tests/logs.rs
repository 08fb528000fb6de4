//! Task logs: served, followed, while a task starts, kept after its pod is gone. The
//! Kubernetes backend over the in-process API server, over real sockets.

use crate::support;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_are_served_and_followed() {
    let s = start().await;
    submit_base_job(&s).await;
    let path = "/api/v1/user/alice/jobs/job/logs?role=worker&index=1";
    let missing = request(s.addr, "GET", path, None, "").await;
    assert_eq!(missing.error(), (404, "NoTaskError".to_string()));
    assert!(
        missing.json()["message"]
            .as_str()
            .expect("message")
            .contains("has no log yet")
    );

    s.api.append_log(NS, &pod("worker", 1), "first line\n");
    let reply = request(s.addr, "GET", path, None, "").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body, "first line\n");

    let following = tokio::spawn(request(
        s.addr,
        "GET",
        "/api/v1/user/alice/jobs/job/logs?role=worker&index=1&follow=true",
        None,
        "",
    ));
    s.api.watches_started(1).await;
    s.api.append_log(NS, &pod("worker", 1), "second line\n");
    s.api.append_log(NS, &pod("worker", 0), "another task\n");
    s.api.append_log(NS, &pod("worker", 1), "third line\n");
    s.api.end_log(NS, &pod("worker", 1));
    let reply = following.await.expect("join");
    assert_eq!(reply.body, "first line\nsecond line\nthird line\n");

    for bad in ["role=nope&index=0", "role=worker&index=2"] {
        let reply = request(
            s.addr,
            "GET",
            &format!("/api/v1/user/alice/jobs/job/logs?{bad}"),
            None,
            "",
        )
        .await;
        assert_eq!(reply.error(), (404, "NoTaskError".to_string()), "{bad}");
    }
}

/// As a real cluster answers while a task starts (its pod not made yet: 404; made, its
/// init container running: 400 `PodInitializing`), the API answers with what there is:
/// no output yet, the runtime's lines, and a follow that waits for the main container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_answer_while_a_task_starts_and_a_follow_waits_for_its_pod() {
    let s = start().await;
    submit_base_job(&s).await;
    let path = "/api/v1/user/alice/jobs/job/logs?role=worker&index=0";
    // Followed right after the submission, before the pod exists: a stream that waits.
    let following = tokio::spawn(request(
        s.addr,
        "GET",
        "/api/v1/user/alice/jobs/job/logs?role=worker&index=0&follow=true",
        None,
        "",
    ));
    // The pod made; its init container (the runtime, at the barrier) runs.
    s.api.create(
        "pods",
        NS,
        json!({"metadata": {"name": pod("worker", 0), "namespace": NS},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]}}),
    );
    s.api.append_container_log(
        NS,
        &pod("worker", 0),
        pai_contract::framework::INIT_CONTAINER,
        &format!(
            "{}waiting at the barrier\n",
            pai_contract::log_lines::mark("INFO")
        ),
    );
    let read = request(s.addr, "GET", path, None, "").await;
    assert_eq!((read.status, read.body.as_str()), (200, ""), "no 400");
    // The kubelet's log API merges stdout and stderr: there is no log of one of them
    // alone (404 NoLogError, saying so), never an answer with both.
    let split = request(s.addr, "GET", &format!("{path}&stream=stderr"), None, "").await;
    assert_eq!(split.status, 404, "{}", split.body);
    assert!(split.body.contains("NoLogError"), "{}", split.body);
    assert!(
        split
            .body
            .contains("stream=stderr cannot be served on a cluster"),
        "{}",
        split.body
    );
    let runtime = request(s.addr, "GET", &format!("{path}&source=runtime"), None, "").await;
    assert_eq!(runtime.status, 200, "{}", runtime.body);
    assert!(
        runtime.body.contains("waiting at the barrier"),
        "{}",
        runtime.body
    );
    // The main container starts, writes and ends: the follower has it all.
    s.api
        .append_log(NS, &pod("worker", 0), "hello from worker-0\n");
    s.api.end_log(NS, &pod("worker", 0));
    let followed = following.await.expect("join");
    assert_eq!(followed.status, 200, "{}", followed.body);
    assert_eq!(followed.body, "hello from worker-0\n");
}

/// A finished task's output outlives its pod. FrameworkController deletes a completed
/// attempt's pods (the test plays it: the pod made from the template, with its finalizer,
/// then deleted); the pod waits until the server kept the end of its log, and the API
/// reads it back: the attempt's, and an earlier attempt's once the next one runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_log_outlives_its_pod() {
    let api = ApiServer::start().await;
    let client =
        kube::Client::try_from(kube::Config::new(api.url().parse().expect("url"))).expect("client");
    // 64 bytes kept of each log: the end of it.
    let backend =
        backend_on(&api, pai_cluster::store::DEFAULT_STALE_LIMIT).keeping_logs(client, NS, 64);
    backend.store().listed().await;
    let addr = serve_backend(
        backend,
        pai_server::auth::Access::Open,
        std::time::Duration::from_secs(1800),
    )
    .await;
    let s = Setup { api, addr };
    submit_base_job(&s).await;
    let framework = s.api.get("frameworks", NS, &fw()).expect("framework");
    let made = pai_test_support::frameworks::pod_of(&framework, "worker", 0);
    assert!(
        made["metadata"]["finalizers"].is_null(),
        "the template has no finalizer: a pod made while no server runs waits for nobody"
    );
    let worker = pod("worker", 0);
    s.api.create("pods", NS, made);
    // The server holds each pod as it appears, so its deletion waits for the log.
    s.api
        .wait_for("pods", NS, &worker, |p| {
            p["metadata"]["finalizers"] == json!([pai_contract::kept_logs::FINALIZER])
        })
        .await;
    s.api.append_container_log(
        NS,
        &worker,
        pai_contract::framework::INIT_CONTAINER,
        &format!("{}barrier passed\n", pai_contract::log_lines::mark("INFO")),
    );
    let long = format!(
        "{}the last line\n",
        "an early line that is not kept\n".repeat(20)
    );
    s.api.append_log(NS, &worker, &long);
    s.api.end_log(NS, &worker);
    // The attempt completed: FrameworkController deletes its pods.
    s.api.delete_pods_of_completed_attempts();
    s.api.modify("frameworks", NS, &fw(), |f| {
        f["status"] = json!({"state": "Completed", "attemptStatus": {"id": 0,
            "completionStatus": {"code": 0, "phrase": "Succeeded", "type": {"name": "Succeeded", "attributes": []}},
            "taskRoleStatuses": []}, "retryPolicyStatus": {"totalRetriedCount": 0, "accountableRetriedCount": 0}});
    });
    s.api.wait_gone("pods", NS, &worker).await;
    let kept_map = s
        .api
        .get(
            "configmaps",
            NS,
            &pai_contract::kept_logs::config_map(&worker, 0),
        )
        .expect("the log's ConfigMap");
    assert_eq!(kept_map["metadata"]["ownerReferences"][0]["name"], fw());

    // The server's copy has seen the job end.
    until(s.addr, "/api/v1/user/alice/jobs/job", |r| {
        r.json()["jobStatus"]["state"] == "SUCCEEDED"
    })
    .await;
    let path = "/api/v1/user/alice/jobs/job/logs?role=worker&index=0";
    let read = request(s.addr, "GET", path, None, "").await;
    assert_eq!(read.status, 200, "{}", read.body);
    assert_eq!(read.body.len(), 64, "{}", read.body);
    assert!(long.ends_with(&read.body) && read.body.ends_with("the last line\n"));
    let runtime = request(s.addr, "GET", &format!("{path}&source=runtime"), None, "").await;
    assert!(runtime.body.contains("barrier passed"), "{}", runtime.body);
    let followed = request(s.addr, "GET", &format!("{path}&follow=true"), None, "").await;
    assert_eq!(followed.body, read.body);
    // The task's log page shows it too.
    let page = request(s.addr, "GET", "/ui/jobs/alice/job/logs/worker/0", None, "").await;
    assert!(page.body.contains("the last line"), "{}", page.body);
    // The next attempt runs: the first one's log is still there, by its number.
    s.api.modify("frameworks", NS, &fw(), |f| {
        f["status"]["state"] = json!("AttemptRunning");
        pai_test_support::frameworks::set_attempt(f, 1, "1_uid");
    });
    until(s.addr, "/api/v1/user/alice/jobs/job", |r| {
        r.json()["jobStatus"]["state"] == "RUNNING"
    })
    .await;
    let earlier = request(s.addr, "GET", &format!("{path}&attempt=0"), None, "").await;
    assert_eq!(
        (earlier.status, earlier.body.as_str()),
        (200, read.body.as_str())
    );
}

/// A pod a server held, deleted while no server kept logs (the server restarting), waits
/// on its finalizer; the next server's keeper finds it at its first list, keeps its log
/// and lets it go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_deleted_while_no_server_ran_is_kept_by_the_next() {
    let s = start().await;
    submit_base_job(&s).await;
    let framework = s.api.get("frameworks", NS, &fw()).expect("framework");
    let ps = pod("ps", 0);
    s.api.create(
        "pods",
        NS,
        held(pai_test_support::frameworks::pod_of(&framework, "ps", 0)),
    );
    s.api.append_log(NS, &ps, "ps done\n");
    s.api.delete("pods", NS, &ps);
    let waiting = s
        .api
        .get("pods", NS, &ps)
        .expect("the pod waits on its finalizer");
    assert!(!waiting["metadata"]["deletionTimestamp"].is_null());
    // The next server's keeper.
    let client = kube::Client::try_from(kube::Config::new(s.api.url().parse().expect("url")))
        .expect("client");
    let store = KubeBackend::store_only(client.clone(), NS, &s.api.url());
    store.listed().await;
    let keeper =
        tokio::spawn(pai_cluster::log_keeper::LogKeeper::new(client, NS, store, 1024).run());
    s.api.wait_gone("pods", NS, &ps).await;
    let kept = s
        .api
        .get(
            "configmaps",
            NS,
            &pai_contract::kept_logs::config_map(&ps, 0),
        )
        .expect("kept");
    assert_eq!(
        kept["binaryData"]["main.log"],
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "ps done\n")
    );
    keeper.abort();
}

/// A job restarted many times keeps each task's logs of its last attempts only: keeping
/// attempt 2's log (with two attempts kept) lets attempt 0's ConfigMap go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeping_a_later_attempts_log_lets_the_oldest_kept_one_go() {
    let s = start().await;
    submit_base_job(&s).await;
    let mut framework = s.api.get("frameworks", NS, &fw()).expect("framework");
    let ps = pod("ps", 0);
    // Attempt 0's log, kept before.
    let old = pai_contract::kept_logs::config_map(&ps, 0);
    s.api.create(
        "configmaps",
        NS,
        json!({"metadata": {"name": old, "labels": {"app.kubernetes.io/managed-by": "rest-lite"}},
            "binaryData": {"main.log": "YQ=="}}),
    );
    // Attempt 2's pod ends.
    pai_test_support::frameworks::set_attempt(&mut framework, 2, "2_uid");
    s.api.modify("frameworks", NS, &fw(), |f| {
        pai_test_support::frameworks::set_attempt(f, 2, "2_uid");
    });
    let mut made = pai_test_support::frameworks::pod_of(&framework, "ps", 0);
    made["metadata"]["annotations"][pai_contract::env::fc::FRAMEWORK_ATTEMPT_ID] = json!("2");
    s.api.create("pods", NS, held(made));
    s.api.append_log(NS, &ps, "attempt 2\n");
    s.api.delete("pods", NS, &ps);
    let client = kube::Client::try_from(kube::Config::new(s.api.url().parse().expect("url")))
        .expect("client");
    let store = KubeBackend::store_only(client.clone(), NS, &s.api.url());
    store.listed().await;
    let keeper = tokio::spawn(
        pai_cluster::log_keeper::LogKeeper::new(client, NS, store, 1024)
            .keeping_attempts(2)
            .run(),
    );
    s.api.wait_gone("pods", NS, &ps).await;
    s.api.wait_gone("configmaps", NS, &old).await;
    assert!(
        s.api
            .get(
                "configmaps",
                NS,
                &pai_contract::kept_logs::config_map(&ps, 2)
            )
            .is_some(),
        "attempt 2's log is kept"
    );
    keeper.abort();
}

/// `pod` as a server that ran before held it: with the keep-log finalizer.
fn held(mut pod: serde_json::Value) -> serde_json::Value {
    pod["metadata"]["finalizers"] = json!([pai_contract::kept_logs::FINALIZER]);
    pod
}
