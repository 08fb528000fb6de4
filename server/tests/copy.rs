//! The server's copy of the Frameworks: before its first list, while the API server fails,
//! past its bound, read-your-writes across replicas, a restart of the API server, managed
//! fields. The Kubernetes backend over the in-process API server, over real sockets.

use crate::support;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_the_first_list_reads_are_503_naming_the_reason_and_readyz_says_so() {
    // Unreachable from the start.
    let mut api = ApiServer::start().await;
    api.stop().await;
    let s = unlisted(api, pai_cluster::store::DEFAULT_STALE_LIMIT).await;
    let reply = until(s.addr, "/api/v1/user/alice/jobs/job", |r| {
        r.body.contains("has not read the jobs")
    })
    .await;
    assert!(reply.body.contains(&s.api.url()), "{}", reply.body);
    assert_eq!(reply.error(), (503, "ServiceUnavailableError".to_string()));
    assert_eq!(reply.retry_after, "2");
    let ready = request(s.addr, "GET", "/readyz", None, "").await;
    assert_eq!(ready.error(), (503, "ServiceUnavailableError".to_string()));
    assert!(
        ready.body.contains("has not read the jobs"),
        "{}",
        ready.body
    );
    // Liveness is not readiness.
    assert_eq!(
        request(s.addr, "GET", "/healthz", None, "").await.status,
        200
    );

    // Refused from the start: the grant is missing, and the message says where it is
    // written; once granted, the server becomes ready by itself.
    let api = ApiServer::start().await;
    api.deny(Some(403));
    let s = unlisted(api, pai_cluster::store::DEFAULT_STALE_LIMIT).await;
    let reply = until(s.addr, "/readyz", |r| r.body.contains("rbac.yaml")).await;
    assert_eq!(reply.status, 503, "{}", reply.body);
    s.api.deny(None);
    until(s.addr, "/readyz", |r| r.status == 200).await;
    assert_eq!(
        request(s.addr, "GET", "/api/v1/user/alice/jobs/job", None, "")
            .await
            .error(),
        (404, "NoJobError".to_string())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_come_from_the_copy_without_asking_the_api_server_even_while_it_fails() {
    use pai_test_support::Fault;
    let s = start().await;
    submit_base_job(&s).await;
    let job = "/api/v1/user/alice/jobs/job";
    let reads = [
        job,
        "/api/v1/user/alice/jobs",
        "/api/v1/jobs",
        "/metrics",
        "/readyz",
        "/ui/jobs/alice/job",
    ];
    let before = s.api.requests().len();
    for _ in 0..5 {
        for path in reads {
            assert_eq!(
                request(s.addr, "GET", path, None, "").await.status,
                200,
                "{path}"
            );
        }
    }
    assert_eq!(
        s.api.requests()[before..],
        [],
        "no read asks the API server once the copy is listed"
    );
    // Failing: reads still come from the copy; writes need the API server (503).
    for fault in [Fault::Deny(403), Fault::Deny(401), Fault::ServerError(500)] {
        s.api.fault(Some(fault));
        // Once its credentials were refused (401), the server is not ready; reads are
        // still answered from the copy within its bound.
        for path in reads.iter().filter(|p| **p != "/readyz") {
            assert_eq!(
                request(s.addr, "GET", path, None, "").await.status,
                200,
                "{fault:?} {path}"
            );
        }
        let stop = stop(s.addr, job).await;
        assert_eq!(
            stop.error(),
            (503, "ServiceUnavailableError".to_string()),
            "{fault:?}: {}",
            stop.body
        );
        assert_eq!(stop.retry_after, "2", "{fault:?}");
        let ready = request(s.addr, "GET", "/readyz", None, "").await;
        match fault {
            Fault::Deny(403) => assert_eq!(ready.status, 200, "{}", ready.body),
            _ => {
                assert_eq!(ready.status, 503, "{fault:?}");
                assert!(
                    ready.body.contains("refused this server's credentials"),
                    "{}",
                    ready.body
                );
            }
        }
    }
    s.api.fault(None);
    // The next request answered ends it.
    let stop = stop(s.addr, job).await;
    assert_eq!(stop.status, 202, "{}", stop.body);
    assert_eq!(
        request(s.addr, "GET", "/readyz", None, "").await.status,
        200
    );
    let watches = s.api.requests().iter().filter(|r| r.is_watch()).count();
    assert_eq!(watches, 1, "one watch of the API server for every reader");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_that_stays_out_of_date_past_its_bound_is_refused_until_current_again() {
    // The bound is zero: the first failure makes the copy stale.
    let api = ApiServer::start().await;
    let mut s = serve_on(
        api,
        None,
        std::time::Duration::from_secs(1800),
        std::time::Duration::ZERO,
    )
    .await;
    submit_base_job(&s).await;
    let job = "/api/v1/user/alice/jobs/job";
    assert_eq!(request(s.addr, "GET", job, None, "").await.status, 200);
    s.api.stop().await;
    let stale = until(s.addr, job, |r| r.status == 503).await;
    assert_eq!(stale.error(), (503, "ServiceUnavailableError".to_string()));
    assert!(stale.body.contains("out of date"), "{}", stale.body);
    let ready = request(s.addr, "GET", "/readyz", None, "").await;
    assert_eq!(ready.status, 503, "{}", ready.body);
    // Changed while away: the resumed watch brings it before anything is served.
    s.api.modify("frameworks", NS, &fw(), |f| {
        f["status"] = json!({"state": "AttemptRunning", "attemptStatus": {"id": 0}});
    });
    s.api.restart().await;
    let back = until(s.addr, job, |r| r.status == 200).await;
    assert_eq!(
        back.json()["jobStatus"]["state"],
        "RUNNING",
        "{}",
        back.body
    );
    // Credentials refused while the watch stays open (a real API server keeps a watch
    // whose token was revoked): past the bound, reads say the copy is out of date, and
    // why.
    s.api.deny(Some(401));
    let stop = stop(s.addr, job).await;
    assert_eq!(stop.status, 503, "{}", stop.body);
    let stale = request(s.addr, "GET", job, None, "").await;
    assert_eq!(stale.error(), (503, "ServiceUnavailableError".to_string()));
    assert!(
        stale.body.contains("out of date") && stale.body.contains("credentials"),
        "{}",
        stale.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_write_is_seen_by_the_next_read_of_any_replica() {
    let s = start().await;
    // A second replica on the same API server.
    let other = {
        let backend = backend_on(&s.api, pai_cluster::store::DEFAULT_STALE_LIMIT);
        backend.store().listed().await;
        serve_backend(
            backend,
            pai_server::auth::Access::Open,
            std::time::Duration::from_secs(1800),
        )
        .await
    };
    let job = "/api/v1/user/alice/jobs/job";
    for round in 0..20 {
        let name = format!("job{round}");
        let mut spec = base_job();
        spec["jobName"] = json!(name);
        let spec = spec.to_string();
        assert_eq!(submit(s.addr, "alice", &spec).await.status, 202);
        let path = format!("/api/v1/user/alice/jobs/{name}");
        // The writer's own replica, then the other one, at once.
        assert_eq!(request(s.addr, "GET", &path, None, "").await.status, 200);
        assert_eq!(request(other, "GET", &path, None, "").await.status, 200);
        let listed = request(s.addr, "GET", "/api/v1/user/alice/jobs", None, "").await;
        assert!(
            listed.body.contains(&format!("\"{name}\"")),
            "{}",
            listed.body
        );
        let stop = stop(s.addr, &path).await;
        assert_eq!(stop.status, 202, "{}", stop.body);
        let seen = request(s.addr, "GET", &format!("{path}/config"), None, "").await;
        assert_eq!(seen.status, 200);
        let view = request(s.addr, "GET", &path, None, "").await;
        assert_eq!(
            view.json()["jobStatus"]["executionType"],
            "STOP",
            "{}",
            view.body
        );
        assert_eq!(request(s.addr, "DELETE", &path, None, "").await.status, 202);
        assert_eq!(
            request(s.addr, "GET", &path, None, "").await.error(),
            (404, "NoJobError".to_string())
        );
    }
    // Both replicas answer for the same jobs.
    submit_base_job(&s).await;
    let mine = until(s.addr, job, |r| r.status == 200).await;
    let theirs = until(other, job, |r| r.status == 200).await;
    assert_eq!(mine.json(), theirs.json());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_watch_outlasts_an_api_server_restart_with_no_gap_and_no_repeat() {
    use pai_test_support::Fault;
    let mut s = start().await;
    let rest = watch_after_the_first_view(&s).await;
    // Killed and started again; the job changed meanwhile, and the restarted API server
    // refuses for a while.
    s.api.stop().await;
    s.api.modify("frameworks", NS, &fw(), |f| {
        f["status"] = json!({"state": "AttemptRunning", "attemptStatus": {"id": 0}});
    });
    s.api.restart_with(Fault::Deny(403)).await;
    s.api.faulted(1).await;
    s.api.fault(None);
    let watches = s.api.requests().iter().filter(|r| r.is_watch()).count();
    s.api.watches_started(watches).await;
    succeed(&s.api);
    let rest = rest.await.expect("join");
    assert_eq!(
        rest,
        ["RUNNING", "SUCCEEDED"],
        "the change made while the API server was away, then the final view, once each"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_copy_keeps_frameworks_without_their_managed_fields() {
    let s = start().await;
    submit_base_job(&s).await;
    let managed = json!([{"manager": "frameworkcontroller", "operation": "Update",
        "apiVersion": "frameworkcontroller.microsoft.com/v1", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:status": {}}}]);
    s.api.modify("frameworks", NS, &fw(), |f| {
        f["metadata"]["managedFields"] = managed.clone();
        f["status"] = json!({"state": "AttemptRunning", "attemptStatus": {"id": 0}});
    });
    let stored = s.api.get("frameworks", NS, &fw()).expect("stored");
    assert_eq!(stored["metadata"]["managedFields"], managed);
    let backend = backend_on(&s.api, pai_cluster::store::DEFAULT_STALE_LIMIT);
    backend.store().listed().await;
    let copy = backend.store().get(&fw()).expect("in the copy");
    assert_eq!(
        copy.status.as_ref().map(|s| s.state),
        Some(pai_contract::framework::FrameworkState::AttemptRunning)
    );
    assert_eq!(copy.metadata.managed_fields, None);
}

/// `PUT <job>/executionType` STOP, as a client asks it.
async fn stop(addr: std::net::SocketAddr, job: &str) -> Reply {
    request(
        addr,
        "PUT",
        &format!("{job}/executionType"),
        Some("application/json"),
        r#"{"value":"STOP"}"#,
    )
    .await
}
