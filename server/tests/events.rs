//! Kubernetes Events on each Framework, once across replicas. The Kubernetes backend over
//! the in-process API server, over real sockets.

use crate::support;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_say_what_happened_to_a_failing_and_retried_job_once_across_replicas() {
    use k8s_openapi::api::events::v1::Event;
    use pai_cluster::events::{Recorder, event, occurrences};
    let s = start().await;
    let client = s.api.client();
    // Two replicas record, each from its own copy.
    let recorders: Vec<_> = ["rest-lite-a", "rest-lite-b"]
        .into_iter()
        .map(|instance| {
            let store = KubeBackend::store_only(client.clone(), NS, &s.api.url());
            // The test API server dates every object 2026-01-01: no occurrence is too old.
            let recorder = Recorder::new(client.clone(), NS, instance)
                .with_max_age(std::time::Duration::from_secs(100 * 365 * 86_400));
            tokio::spawn(recorder.run(store))
        })
        .collect();
    submit_base_job(&s).await;
    let now = jiff::Timestamp::now().to_string();
    let failed_task = |f: &mut Value, attempt: i32| {
        f["status"] = json!({"state": "AttemptCompleted", "startTime": now,
            "retryPolicyStatus": {"totalRetriedCount": attempt, "accountableRetriedCount": attempt},
            "attemptStatus": {"id": attempt, "startTime": now, "completionTime": now,
                "completionStatus": {"code": 3, "phrase": "ContainerFailed", "diagnostics": "worker-1 exited 3: no data",
                    "type": {"name": "Failed", "attributes": []}},
                "taskRoleStatuses": [{"name": "worker", "taskStatuses": [
                    {"index": 0, "state": "Completed", "retryPolicyStatus": {"totalRetriedCount": 0, "accountableRetriedCount": 0},
                     "attemptStatus": {"id": 0, "completionTime": now, "completionStatus": {"code": -220, "phrase": "FrameworkAttemptCompletion",
                        "type": {"name": "Failed", "attributes": ["Permanent"]}}}},
                    {"index": 1, "state": "Completed", "retryPolicyStatus": {"totalRetriedCount": 0, "accountableRetriedCount": 0},
                     "attemptStatus": {"id": 0, "completionTime": now, "completionStatus": {"code": 3, "phrase": "ContainerFailed",
                        "diagnostics": "no data", "type": {"name": "Failed", "attributes": []}}}}]}]}});
    };
    // Attempt 0 fails on worker-1 (worker-0 is stopped by the platform: no event of its
    // own); attempt 1 starts, fails the same way, and the job fails.
    s.api.modify("frameworks", NS, &fw(), |f| failed_task(f, 0));
    let expected = |framework: &Value| -> Vec<Event> {
        let framework: pai_contract::Framework =
            serde_json::from_value(framework.clone()).expect("a Framework");
        occurrences(&framework)
            .iter()
            .map(|o| event(&framework, o, "-"))
            .collect()
    };
    let first = expected(&s.api.get("frameworks", NS, &fw()).expect("framework"));
    s.api.modify("frameworks", NS, &fw(), |f| {
        failed_task(f, 1);
        f["status"]["state"] = json!("Completed");
    });
    let last = expected(&s.api.get("frameworks", NS, &fw()).expect("framework"));
    let mut wanted: Vec<Event> = first;
    for e in last {
        if !wanted.iter().any(|w| w.metadata.name == e.metadata.name) {
            wanted.push(e);
        }
    }
    for e in &wanted {
        s.api
            .wait_for(
                "events",
                NS,
                e.metadata.name.as_deref().expect("name"),
                |_| true,
            )
            .await;
    }
    let recorded: Vec<Event> = kube::Api::<Event>::namespaced(client, NS)
        .list(&Default::default())
        .await
        .expect("events")
        .items;
    let said: Vec<(String, String)> = recorded
        .iter()
        .map(|e| {
            (
                e.reason.clone().unwrap_or_default(),
                e.note.clone().unwrap_or_default(),
            )
        })
        .collect();
    let reasons: Vec<&str> = said.iter().map(|(r, _)| r.as_str()).collect();
    for reason in [
        "Submitted",
        "AttemptStarted",
        "TaskFailed",
        "AttemptFailed",
        "Retried",
        "Failed",
    ] {
        assert!(reasons.contains(&reason), "{reason} missing from {said:?}");
    }
    assert_eq!(
        recorded.len(),
        wanted.len(),
        "each occurrence once, whichever replica recorded it: {said:?}"
    );
    let failed: Vec<&(String, String)> = said.iter().filter(|(r, _)| r == "TaskFailed").collect();
    assert_eq!(failed.len(), 2, "worker-1 in each attempt: {said:?}");
    assert!(
        failed[0].1.contains("worker-1") && failed[0].1.contains("3 (ContainerFailed)"),
        "{said:?}"
    );
    assert!(
        said.iter()
            .any(|(r, n)| r == "Failed" && n.contains("no data")),
        "the job's end with its diagnostics: {said:?}"
    );
    for e in &recorded {
        assert_eq!(
            e.regarding.as_ref().and_then(|r| r.name.clone()),
            Some(fw())
        );
        assert_eq!(
            e.type_.as_deref(),
            Some(
                if matches!(
                    e.reason.as_deref(),
                    Some("TaskFailed" | "AttemptFailed" | "Failed")
                ) {
                    "Warning"
                } else {
                    "Normal"
                }
            )
        );
    }
    // Deleted: said too.
    assert_eq!(
        request(s.addr, "DELETE", "/api/v1/user/alice/jobs/job", None, "")
            .await
            .status,
        202
    );
    let framework: pai_contract::Framework =
        serde_json::from_value(json!({"apiVersion": "frameworkcontroller.microsoft.com/v1", "kind": "Framework",
            "metadata": {"name": fw(), "namespace": NS, "uid": recorded[0].regarding.as_ref().and_then(|r| r.uid.clone())},
            "spec": {"executionType": "Start", "retryPolicy": {"fancyRetryPolicy": false, "maxRetryCount": 0}, "taskRoles": []}}))
        .expect("framework");
    let name = event(&framework, &pai_cluster::events::deleted(), "-")
        .metadata
        .name
        .expect("name");
    s.api.wait_for("events", NS, &name, |_| true).await;
    for recorder in recorders {
        recorder.abort();
    }
}
