//! Who may do what: the token matrix. The Kubernetes backend over the in-process API
//! server, over real sockets.

use crate::support;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_auth_matrix() {
    let s = start_with(Some(tokens())).await;
    let spec = base_job().to_string();
    let json = Some("application/json");

    let anonymous = request(s.addr, "GET", "/api/v1/jobs", None, "").await;
    assert_eq!(
        anonymous.error(),
        (401, "UnauthorizedUserError".to_string())
    );
    let wrong = request_as(s.addr, Some("guess"), "GET", "/api/v1/jobs", None, "").await;
    assert_eq!(wrong.status, 401);
    assert_eq!(
        request(s.addr, "GET", "/healthz", None, "").await.status,
        200,
        "health needs no token"
    );

    let own = request_as(
        s.addr,
        Some("alice-secret"),
        "POST",
        "/api/v1/user/alice/jobs",
        json,
        &spec,
    )
    .await;
    assert_eq!(own.status, 202, "{}", own.body);
    let as_other = request_as(
        s.addr,
        Some("bob-secret"),
        "POST",
        "/api/v1/user/alice/jobs",
        json,
        &spec,
    )
    .await;
    assert_eq!(as_other.error(), (403, "ForbiddenUserError".to_string()));

    // Bob never sees Alice's job, on any route: not found, not forbidden.
    let job = "/api/v1/user/alice/jobs/job";
    for (method, path, body) in [
        ("GET", job.to_string(), ""),
        ("GET", format!("{job}/config"), ""),
        ("GET", format!("{job}/ssh"), ""),
        (
            "PUT",
            format!("{job}/executionType"),
            r#"{"value": "STOP"}"#,
        ),
        ("DELETE", job.to_string(), ""),
    ] {
        let reply = request_as(s.addr, Some("bob-secret"), method, &path, json, body).await;
        assert_eq!(
            reply.error(),
            (404, "NoJobError".to_string()),
            "{method} {path}"
        );
    }
    for path in [
        "/api/v1/user/alice/jobs",
        "/api/v1/jobs?username=alice",
        "/api/v1/jobs",
    ] {
        let reply = request_as(s.addr, Some("bob-secret"), "GET", path, None, "").await;
        assert_eq!(reply.json(), json!([]), "{path}");
    }
    assert!(
        s.api.get("frameworks", NS, &fw()).is_some(),
        "still there after Bob's attempts"
    );
    assert_eq!(
        s.api.get("frameworks", NS, &fw()).expect("job")["spec"]["executionType"],
        "Start"
    );

    // Alice and an admin do see it.
    for token in ["alice-secret", "ops-secret"] {
        let reply = request_as(s.addr, Some(token), "GET", job, None, "").await;
        assert_eq!(reply.status, 200, "{token}");
        let list = request_as(s.addr, Some(token), "GET", "/api/v1/jobs", None, "").await;
        assert_eq!(list.json()[0]["name"], "job", "{token}");
    }
}
