//! Submitting: formats, names, the named PUT, bad input, dry runs, races, the cluster's
//! refusal, dependency cycles. The Kubernetes backend over the in-process API server, over
//! real sockets.

use crate::support;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spec_keeps_its_format_even_when_yaml_looks_like_json() {
    let s = start().await;
    let spec = "{jobName: flow, image: busybox, taskRoles: [{name: w, taskNumber: 1, cpuNumber: 1, memoryMB: 128, command: 'true'}]}";
    let reply = request(
        s.addr,
        "POST",
        "/api/v1/user/alice/jobs",
        Some("application/yaml"),
        spec,
    )
    .await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    let config = request(
        s.addr,
        "GET",
        "/api/v1/user/alice/jobs/flow/config",
        None,
        "",
    )
    .await;
    assert_eq!(config.status, 200, "{}", config.body);
    assert_eq!(
        config.content_type, "application/yaml",
        "as submitted, not guessed"
    );
    assert_eq!(config.body, spec);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_look_alike_are_separate_jobs() {
    // a.b / a_b and alice / Alice used to share a Framework: the second submission got a
    // 409 naming the first one's job.
    let s = start().await;
    let pairs = [("alice", "a.b"), ("alice", "a_b"), ("Alice", "a.b")];
    for (user, job) in pairs {
        let mut spec = base_job();
        spec["jobName"] = json!(job);
        let reply = submit(s.addr, user, &spec.to_string()).await;
        assert_eq!(reply.status, 202, "{user}/{job}: {}", reply.body);
    }
    for (user, job) in pairs {
        let name = pai_job::names::framework_name(user, job);
        let stored = s
            .api
            .get("frameworks", NS, &name)
            .expect("its own Framework");
        let annotations = &stored["metadata"]["annotations"];
        assert_eq!(
            (
                annotations["rest-lite.openpai.io/user-name"].as_str(),
                annotations["rest-lite.openpai.io/job-name"].as_str()
            ),
            (Some(user), Some(job))
        );
        let view = request(
            s.addr,
            "GET",
            &format!("/api/v1/user/{user}/jobs/{job}"),
            None,
            "",
        )
        .await;
        assert_eq!(view.status, 200, "{}", view.body);
        assert_eq!(
            (
                view.json()["name"].as_str(),
                view.json()["jobStatus"]["username"].as_str()
            ),
            (Some(job), Some(user))
        );
    }
    let names = |user: &'static str| async move {
        let list = request(
            s.addr,
            "GET",
            &format!("/api/v1/user/{user}/jobs"),
            None,
            "",
        )
        .await;
        let mut names: Vec<String> = list
            .json()
            .as_array()
            .expect("list")
            .iter()
            .map(|j| j["name"].as_str().unwrap_or_default().to_string())
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        names("alice").await,
        ["a.b", "a_b"],
        "the label is shared, the list is not"
    );
    assert_eq!(names("Alice").await, ["a.b"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_then_read_the_job_back() {
    let s = start().await;
    let spec = base_job().to_string();
    let reply = submit(s.addr, "alice", &spec).await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    assert_eq!(reply.json()["message"], "job job submitted");
    assert!(s.api.get("frameworks", NS, &fw()).is_some());

    let job = request(s.addr, "GET", "/api/v1/user/alice/jobs/job", None, "").await;
    assert_eq!(job.status, 200, "{}", job.body);
    let view = job.json();
    assert_eq!(view["name"], "job");
    assert_eq!(view["jobStatus"]["state"], "WAITING");
    assert_eq!(view["jobStatus"]["username"], "alice");

    let config = request(
        s.addr,
        "GET",
        "/api/v1/user/alice/jobs/job/config",
        None,
        "",
    )
    .await;
    assert_eq!(config.status, 200);
    assert_eq!(config.body, spec, "the spec exactly as submitted");
    assert_eq!(config.content_type, "application/json");

    for path in [
        "/api/v1/user/alice/jobs",
        "/api/v1/jobs?username=alice",
        "/api/v1/jobs",
    ] {
        let list = request(s.addr, "GET", path, None, "").await;
        assert_eq!(list.status, 200, "{path}");
        assert_eq!(list.json()[0]["name"], "job", "{path}");
    }
    let others = request(s.addr, "GET", "/api/v1/user/bob/jobs", None, "").await;
    assert_eq!(others.json(), json!([]));
    let not_yours = request(s.addr, "GET", "/api/v1/user/bob/jobs/job", None, "").await;
    assert_eq!(not_yours.error(), (404, "NoJobError".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yaml_and_the_named_put_are_accepted() {
    let s = start().await;
    let yaml = "jobName: yjob\nimage: busybox\ntaskRoles:\n  - {name: a, taskNumber: 1, cpuNumber: 1, memoryMB: 256, command: 'true'}\n";
    let reply = request(
        s.addr,
        "POST",
        "/api/v1/user/alice/jobs",
        Some("application/yaml"),
        yaml,
    )
    .await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    let config = request(
        s.addr,
        "GET",
        "/api/v1/user/alice/jobs/yjob/config",
        None,
        "",
    )
    .await;
    assert_eq!(
        (config.body.as_str(), config.content_type.as_str()),
        (yaml, "application/yaml")
    );

    let named = yaml.replace("yjob", "other");
    let yaml_type = Some("application/yaml");
    let reply = request(
        s.addr,
        "PUT",
        "/api/v1/user/alice/jobs/other",
        yaml_type,
        &named,
    )
    .await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    let mismatch = request(
        s.addr,
        "PUT",
        "/api/v1/user/alice/jobs/third",
        yaml_type,
        &named,
    )
    .await;
    assert_eq!(mismatch.status, 400);
    assert!(
        mismatch.json()["message"]
            .as_str()
            .expect("message")
            .contains("is not the spec's jobName")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_4xx_that_changes_nothing() {
    let s = start().await;
    let mut bad = base_job();
    bad["taskRoles"][0]["taskNumber"] = json!(0);
    let reply = submit(s.addr, "alice", &bad.to_string()).await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.json()["code"], "InvalidParametersError");
    assert!(
        reply.json()["message"]
            .as_str()
            .expect("message")
            .contains("taskRoles[0].taskNumber: must be an integer from 1 to 10000, got 0")
    );

    let too_big = format!("{{\"jobName\": \"{}\"}}", "x".repeat(LIMIT));
    let reply = submit(s.addr, "alice", &too_big).await;
    assert_eq!(reply.error(), (413, "PayloadTooLargeError".to_string()));

    let reply = request(
        s.addr,
        "POST",
        "/api/v1/user/alice/jobs",
        Some("image/png"),
        "x",
    )
    .await;
    assert_eq!(reply.status, 415);
    let reply = submit(s.addr, "a b", &base_job().to_string()).await;
    assert_eq!(reply.status, 400);
    assert_eq!(frameworks(&s.api), 0, "nothing reached the cluster");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_returns_the_framework_without_creating_it() {
    let s = start().await;
    let reply = request(
        s.addr,
        "POST",
        "/api/v1/user/alice/jobs?dryRun=true",
        Some("application/json"),
        &base_job().to_string(),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let framework: pai_contract::Framework =
        serde_json::from_str(&reply.body).expect("a Framework");
    assert_eq!(framework.metadata.name.as_deref(), Some(fw().as_str()));
    assert_eq!(frameworks(&s.api), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_submissions_of_one_name_give_one_202_and_one_409() {
    let s = start().await;
    let spec = base_job().to_string();
    let (a, b) = tokio::join!(
        submit(s.addr, "alice", &spec),
        submit(s.addr, "alice", &spec)
    );
    let mut codes = [a.status, b.status];
    codes.sort();
    assert_eq!(codes, [202, 409]);
    let conflict = if a.status == 409 { a } else { b };
    assert_eq!(conflict.json()["code"], "ConflictJobError");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_framework_the_cluster_finds_invalid_is_a_400_with_its_reason() {
    let s = start().await;
    s.api.reject_creates(Some(
        "admission webhook \"jobs.example.com\" denied the request: spec.taskRoles[0].taskNumber: Invalid value: 0",
    ));
    let reply = submit(s.addr, "alice", &base_job().to_string()).await;
    assert_eq!(reply.error(), (400, "InvalidParametersError".to_string()));
    let message = reply.json()["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains("the cluster rejected the job")
            && message.contains("spec.taskRoles[0].taskNumber: Invalid value: 0"),
        "{message}"
    );
    assert!(
        !message.contains("\"kind\""),
        "no raw upstream body: {message}"
    );
    assert!(s.api.get("frameworks", NS, &fw()).is_none());
}

/// A job that waits for a job that (by name) waits back for it is refused at submission
/// with the cycle: possible when a job waited for was deleted and a new one took its
/// name before its dependent was failed (this in-process server runs no dependency
/// controller, so the dependent stays held).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_cycle_is_refused_naming_it() {
    let s = start().await;
    let named = |name: &str, depends_on: serde_json::Value| {
        let mut spec = base_job();
        spec["jobName"] = json!(name);
        if !depends_on.is_null() {
            spec["dependsOn"] = depends_on;
        }
        spec.to_string()
    };
    assert_eq!(
        submit(s.addr, "alice", &named("a", json!(null)))
            .await
            .status,
        202
    );
    assert_eq!(
        submit(s.addr, "alice", &named("b", json!([{"job": "a"}])))
            .await
            .status,
        202
    );
    assert_eq!(
        request(s.addr, "DELETE", "/api/v1/user/alice/jobs/a", None, "")
            .await
            .status,
        202
    );
    let reply = until(s.addr, "/api/v1/user/alice/jobs/a", |r| r.status == 404).await;
    assert_eq!(reply.status, 404);
    let refused = submit(s.addr, "alice", &named("a", json!([{"job": "b"}]))).await;
    assert_eq!(
        refused.error(),
        (400, "InvalidParametersError".to_string()),
        "{}",
        refused.body
    );
    assert!(
        refused
            .body
            .contains("dependsOn[0].job: waiting for job \\\"b\\\" makes a cycle: a → b → a"),
        "{}",
        refused.body
    );
}
