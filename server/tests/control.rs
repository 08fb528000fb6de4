//! Stopping, starting and deleting a job; a retry's delay and a stop as the views tell
//! them. The Kubernetes backend over the in-process API server, over real sockets.

use crate::support;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_start_and_delete() {
    let s = start().await;
    submit_base_job(&s).await;
    let path = "/api/v1/user/alice/jobs/job/executionType";
    let reply = request(
        s.addr,
        "PUT",
        path,
        Some("application/json"),
        r#"{"value": "STOP"}"#,
    )
    .await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    let stored = s.api.get("frameworks", NS, &fw()).expect("stored");
    assert_eq!(stored["spec"]["executionType"], "Stop");
    let reply = request(
        s.addr,
        "PUT",
        path,
        Some("application/json"),
        r#"{"value": "START"}"#,
    )
    .await;
    assert_eq!(reply.status, 409, "a stopping job cannot start again");

    s.api.modify("frameworks", NS, &fw(), |f| {
        f["status"] = json!({"state": "Completed", "attemptStatus": {"id": 0, "completionStatus": {"code": -210, "phrase": "stop"}}});
    });
    // The server reads its copy, which the watch brings up to date.
    let job = until(s.addr, "/api/v1/user/alice/jobs/job", |r| {
        r.json()["jobStatus"]["state"] != "WAITING"
    })
    .await;
    assert_eq!(job.json()["jobStatus"]["state"], "STOPPED");
    let reply = request(
        s.addr,
        "PUT",
        path,
        Some("application/json"),
        r#"{"value": "START"}"#,
    )
    .await;
    assert_eq!(reply.error(), (409, "ConflictJobError".to_string()));
    let reply = request(
        s.addr,
        "PUT",
        path,
        Some("application/json"),
        r#"{"value": "PAUSE"}"#,
    )
    .await;
    assert_eq!(reply.status, 400);

    let reply = request(s.addr, "DELETE", "/api/v1/user/alice/jobs/job", None, "").await;
    assert_eq!(reply.status, 202);
    assert!(s.api.get("frameworks", NS, &fw()).is_none());
    let reply = request(s.addr, "DELETE", "/api/v1/user/alice/jobs/job", None, "").await;
    assert_eq!(reply.error(), (404, "NoJobError".to_string()));
}

/// Through the API and the Events of a cluster: a job between an attempt and its delayed
/// retry waits and says until when, with a RetryScheduled Event and no promise before it;
/// a job the user stopped is told as stopped (no AttemptFailed), and its tasks' codes say
/// it was the user's stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_delay_and_a_stop_are_shown_and_told_as_they_are() {
    use k8s_openapi::api::events::v1::Event;
    use pai_cluster::events::Recorder;
    let s = start().await;
    let client = s.api.client();
    let store = KubeBackend::store_only(client.clone(), NS, &s.api.url());
    let recorder = Recorder::new(client.clone(), NS, "rest-lite-a")
        .with_max_age(std::time::Duration::from_secs(100 * 365 * 86_400));
    tokio::spawn(recorder.run(store));
    let mut stopped_job = base_job();
    stopped_job["jobName"] = json!("stopped");
    let mut succeeded_job = base_job();
    succeeded_job["jobName"] = json!("succeeded");
    for spec in [base_job(), stopped_job, succeeded_job] {
        assert_eq!(submit(s.addr, "alice", &spec.to_string()).await.status, 202);
    }
    let stopped = pai_job::names::framework_name("alice", "stopped");
    let succeeded = pai_job::names::framework_name("alice", "succeeded");
    let now = jiff::Timestamp::now().to_string();
    // "job": attempt 0 ended with a conflict; FrameworkController retries it in 462 s.
    s.api.modify("frameworks", NS, &fw(), |f| {
        f["status"] = json!({"state": "AttemptCompleted", "startTime": now, "transitionTime": now,
            "retryPolicyStatus": {"totalRetriedCount": 0, "accountableRetriedCount": 0, "retryDelaySec": 462},
            "attemptStatus": {"id": 0, "startTime": now, "runTime": now, "completionTime": now,
                "completionStatus": {"code": 201, "phrase": "ContainerTransientConflictFailed",
                    "diagnostics": "the barrier timed out", "type": {"name": "Failed", "attributes": ["Transient", "Conflict"]}},
                "taskRoleStatuses": []}});
    });
    // (Before it sees the change the server shows the new job: WAITING, `Submitted`.)
    let view = until(s.addr, "/api/v1/user/alice/jobs/job", |r| {
        r.json()["jobStatus"]["waiting"]["reason"] == "RetryDelay"
    })
    .await
    .json();
    assert_eq!(view["jobStatus"]["state"], "WAITING");
    let running = view["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "Running")
        .expect("Running")
        .clone();
    assert_eq!(
        (running["status"].as_str(), running["reason"].as_str()),
        (Some("False"), Some("AttemptEnded"))
    );
    // "stopped": the user stops it; FrameworkController ends its tasks (−220) and the
    // attempt (−210), passing through the attempt's deletion, then completes it.
    let stop = request(
        s.addr,
        "PUT",
        "/api/v1/user/alice/jobs/stopped/executionType",
        Some("application/json"),
        r#"{"value": "STOP"}"#,
    )
    .await;
    assert_eq!(stop.status, 202, "{}", stop.body);
    for state in ["AttemptDeletionPending", "AttemptCompleted", "Completed"] {
        s.api.modify("frameworks", NS, &stopped, |f| {
            f["status"] = json!({"state": state, "startTime": now, "completionTime": now,
                "retryPolicyStatus": {"totalRetriedCount": 0, "accountableRetriedCount": 0},
                "attemptStatus": {"id": 0, "startTime": now, "completionTime": now,
                    "completionStatus": {"code": -210, "phrase": "StopFrameworkRequested", "type": {"name": "Failed", "attributes": ["Permanent"]}},
                    "taskRoleStatuses": [{"name": "worker", "taskStatuses": [
                        {"index": 0, "state": "Completed", "retryPolicyStatus": {"totalRetriedCount": 0, "accountableRetriedCount": 0},
                         "attemptStatus": {"id": 0, "completionTime": now, "completionStatus": {"code": -220,
                            "phrase": "FrameworkAttemptCompletion", "type": {"name": "Failed", "attributes": ["Permanent"]}}}}]}]}});
        });
    }
    // "succeeded": its attempt succeeded, passes through its deletion, and completes.
    for state in ["AttemptDeletionPending", "AttemptCompleted", "Completed"] {
        s.api.modify("frameworks", NS, &succeeded, |f| {
            f["status"] = json!({"state": state, "startTime": now, "completionTime": now,
                "retryPolicyStatus": {"totalRetriedCount": 0, "accountableRetriedCount": 0},
                "attemptStatus": {"id": 0, "startTime": now, "completionTime": now,
                    "completionStatus": {"code": 0, "phrase": "Succeeded", "type": {"name": "Succeeded", "attributes": []}},
                    "taskRoleStatuses": []}});
        });
    }
    let view = until(s.addr, "/api/v1/user/alice/jobs/stopped", |r| {
        r.json()["jobStatus"]["state"] == "STOPPED"
    })
    .await
    .json();
    assert_eq!(
        view["taskRoles"]["worker"]["taskStatuses"][0]["containerExitMeaning"],
        "stopped by the platform: the job was stopped"
    );
    // The Events, once each was recorded.
    let fw_uid = |name: &str| {
        s.api.get("frameworks", NS, name).expect("framework")["metadata"]["uid"].clone()
    };
    let (job_uid, stopped_uid, succeeded_uid) =
        (fw_uid(&fw()), fw_uid(&stopped), fw_uid(&succeeded));
    let said = |uid: &Value| -> Vec<String> {
        s.api
            .list("events", NS)
            .into_iter()
            .filter(|e| e["regarding"]["uid"] == *uid)
            .map(|e| e["reason"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    // As `until`: each look is a read of the stored Events, no pause decides anything.
    for (uid, reason) in [
        (&job_uid, "RetryScheduled"),
        (&stopped_uid, "Stopped"),
        (&succeeded_uid, "Succeeded"),
    ] {
        let mut looks = 0;
        while !said(uid).iter().any(|r| r == reason) {
            looks += 1;
            assert!(looks < 2_000, "no {reason} Event: {:?}", said(uid));
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
    let retried = said(&job_uid);
    assert!(
        retried.contains(&"AttemptFailed".to_string()),
        "{retried:?}"
    );
    let stopped_told = said(&stopped_uid);
    assert!(
        !stopped_told
            .iter()
            .any(|r| r == "AttemptFailed" || r == "Failed"),
        "a stop is no failure: {stopped_told:?}"
    );
    let succeeded_told = said(&succeeded_uid);
    assert!(
        succeeded_told.contains(&"AttemptSucceeded".to_string())
            && !succeeded_told
                .iter()
                .any(|r| r == "AttemptFailed" || r == "Failed"),
        "a success is no failure: {succeeded_told:?}"
    );
    let notes: Vec<String> = kube::Api::<Event>::namespaced(client, NS)
        .list(&Default::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter_map(|e| e.note)
        .collect();
    assert!(
        !notes.iter().any(|n| n.contains("will be retried")),
        "{notes:?}"
    );
}
