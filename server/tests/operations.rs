//! Readiness, metrics and the OpenAPI document. The Kubernetes backend over the in-process
//! API server, over real sockets.

use crate::support;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_cluster_and_metrics_count_routes() {
    let s = start().await;
    assert_eq!(
        request(s.addr, "GET", "/readyz", None, "").await.status,
        200
    );
    submit_base_job(&s).await;
    let metrics = request(s.addr, "GET", "/metrics", None, "").await;
    assert_eq!(metrics.status, 200);
    assert!(
        metrics.content_type.starts_with("text/plain"),
        "{}",
        metrics.content_type
    );
    assert!(
        metrics.body.contains(r#"rest_lite_http_requests_total{method="POST",route="/api/v1/user/{user}/jobs",status="202"} 1"#),
        "{}",
        metrics.body
    );
    assert!(!metrics.body.contains("alice"), "no user names in labels");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_covers_every_route_and_the_job_view() {
    let s = start().await;
    let doc = request(s.addr, "GET", "/api/v1/openapi.json", None, "").await;
    assert_eq!(doc.status, 200, "{}", doc.body);
    let doc = doc.json();
    assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")));
    let submitted = &doc["paths"]["/api/v1/user/{user}/jobs"]["post"]["responses"]["202"];
    assert_eq!(submitted["links"]["GetJob"]["operationId"], "get_job");
    assert_eq!(
        submitted["links"]["GetJob"]["parameters"]["job"],
        "$request.body#/jobName"
    );
    let routes = [
        ("/api/v1/jobs", "get"),
        ("/api/v1/user/{user}/jobs", "get"),
        ("/api/v1/user/{user}/jobs", "post"),
        ("/api/v1/user/{user}/jobs/{job}", "get"),
        ("/api/v1/user/{user}/jobs/{job}", "put"),
        ("/api/v1/user/{user}/jobs/{job}", "delete"),
        ("/api/v1/user/{user}/jobs/{job}/config", "get"),
        ("/api/v1/user/{user}/jobs/{job}/ssh", "get"),
        ("/api/v1/user/{user}/jobs/{job}/ssh/key", "get"),
        ("/api/v1/user/{user}/jobs/{job}/logs", "get"),
        ("/api/v1/user/{user}/jobs/{job}/executionType", "put"),
        ("/api/v1/whoami", "get"),
        ("/api/v2/jobs", "get"),
        ("/api/v2/jobs", "post"),
        ("/api/v2/jobs/{job_id}", "get"),
        ("/api/v2/jobs/{job_id}/config", "get"),
        ("/api/v2/jobs/{job_id}/executionType", "put"),
        ("/api/v2/jobs/{job_id}/tag", "put"),
        ("/api/v2/jobs/{job_id}/tag", "delete"),
        ("/api/v2/jobs/{job_id}/attempts/{attempt_id}", "get"),
        (
            "/api/v2/jobs/{job_id}/attempts/{attempt_id}/taskRoles/{role}/taskIndex/{index}/attempts",
            "get",
        ),
        (
            "/api/v2/jobs/{job_id}/attempts/{attempt_id}/taskRoles/{role}/taskIndex/{index}/attempts/{task_attempt_id}/logs",
            "get",
        ),
        ("/api/v2/storages", "get"),
        ("/api/v2/storages/{name}", "get"),
        ("/api/v1/openapi.json", "get"),
        ("/healthz", "get"),
        ("/readyz", "get"),
        ("/metrics", "get"),
    ];
    let paths = doc["paths"].as_object().expect("paths");
    let documented: usize = paths
        .values()
        .map(|p| p.as_object().map_or(0, |o| o.len()))
        .sum();
    assert_eq!(documented, routes.len(), "{:?}", paths.keys());
    for (path, method) in routes {
        let operation = &doc["paths"][path][method];
        assert!(operation.is_object(), "{method} {path} is not documented");
        for name in ["user", "job"] {
            if path.contains(&format!("{{{name}}}")) {
                assert!(
                    operation["parameters"]
                        .as_array()
                        .is_some_and(|p| p.iter().any(|p| p["name"] == name && p["in"] == "path")),
                    "{method} {path}: path parameter {name} is not documented"
                );
            }
        }
        // Links name their target by operationId, in OpenAPI's own spelling.
        for (_, response) in operation["responses"].as_object().into_iter().flatten() {
            for (name, link) in response["links"].as_object().into_iter().flatten() {
                let target = link["operationId"].as_str().unwrap_or_default();
                assert!(
                    doc["paths"]
                        .as_object()
                        .into_iter()
                        .flatten()
                        .any(|(_, item)| {
                            item.as_object()
                                .into_iter()
                                .flatten()
                                .any(|(_, op)| op["operationId"] == target)
                        }),
                    "{method} {path}: link {name} leads to no operation ({link})"
                );
            }
        }
        // Every documented route is served (an undocumented path would be 404 here).
        let concrete = path.replace("{user}", "alice").replace("{job}", "nojob");
        let reply = request(s.addr, &method.to_uppercase(), &concrete, None, "").await;
        assert_ne!(reply.status, 405, "{method} {path}");
        let secured = operation["security"].is_array();
        assert_eq!(
            secured,
            path.starts_with("/api/v1/user")
                || path.starts_with("/api/v2/")
                || path == "/api/v1/jobs"
                || path == "/api/v1/whoami"
                || path == "/metrics",
            "{method} {path}: bearer tokens are required exactly on the jobs routes and /metrics"
        );
    }
    assert!(
        doc["paths"]["/api/v1/user/{user}/jobs"]["post"]["parameters"]
            .as_array()
            .is_some_and(|p| p
                .iter()
                .any(|p| p["name"] == "dryRun" && p["in"] == "query"))
    );

    // The documented job view is the one served: every key of a real one is in the schema.
    submit_base_job(&s).await;
    let view = request(s.addr, "GET", "/api/v1/user/alice/jobs/job", None, "")
        .await
        .json();
    let schemas = &doc["components"]["schemas"];
    for (schema, value) in [
        ("JobView", &view),
        ("JobStatus", &view["jobStatus"]),
        ("TaskView", &view["taskRoles"]["worker"]["taskStatuses"][0]),
        // Not run yet: it says why it waits.
        ("Waiting", &view["jobStatus"]["waiting"]),
    ] {
        let properties = schemas[schema]["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("no schema {schema}"));
        let keys = value
            .as_object()
            .unwrap_or_else(|| panic!("{schema}: {value}"));
        for key in keys.keys() {
            assert!(properties.contains_key(key), "{schema} lacks {key}");
        }
    }
    for code in [
        "ErrorBody",
        "Message",
        "SshInfo",
        "ExecutionBody",
        "JobSummary",
    ] {
        assert!(schemas[code].is_object(), "no schema {code}");
    }
}
