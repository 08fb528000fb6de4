//! The jobs API over real sockets, with the Kubernetes backend talking to the in-process
//! API server.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;

use pai_cluster::backend::KubeBackend;
use pai_server::{AppState, router};
use pai_test_support::ApiServer;
use pai_translate::config::ClusterConfig;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NS: &str = "jobs";
const LIMIT: usize = 64 * 1024;

/// The Framework of alice's job "job".
fn fw() -> String {
    pai_contract::names::framework_name("alice", "job")
}

/// The pod of task `index` of the role `role` of alice's job "job".
fn pod(role: &str, index: u32) -> String {
    pai_contract::framework::pod_name(&fw(), role, index)
}

struct Setup {
    api: ApiServer,
    addr: SocketAddr,
}

async fn start() -> Setup {
    start_with(None).await
}

async fn start_with(tokens: Option<pai_server::auth::Tokens>) -> Setup {
    start_with_watch_limit(tokens, std::time::Duration::from_secs(1800)).await
}

async fn start_with_watch_limit(
    tokens: Option<pai_server::auth::Tokens>,
    watch_limit: std::time::Duration,
) -> Setup {
    let api = ApiServer::start().await;
    serve_on(
        api,
        tokens,
        watch_limit,
        pai_cluster::store::DEFAULT_STALE_LIMIT,
    )
    .await
}

/// A server over `api`, once its copy of the Frameworks is listed.
async fn serve_on(
    api: ApiServer,
    tokens: Option<pai_server::auth::Tokens>,
    watch_limit: std::time::Duration,
    stale_limit: std::time::Duration,
) -> Setup {
    use pai_server::auth::{Access, TokenTable};
    let access = match tokens {
        Some(tokens) => Access::Tokens(TokenTable::fixed(tokens)),
        None => Access::Open,
    };
    let backend = backend_on(&api, stale_limit);
    backend.store().listed().await;
    let addr = serve_backend(backend, access, watch_limit).await;
    Setup { api, addr }
}

/// A Kubernetes backend over `api` (its copy not listed yet).
fn backend_on(api: &ApiServer, stale_limit: std::time::Duration) -> KubeBackend {
    let client =
        kube::Client::try_from(kube::Config::new(api.url().parse().expect("url"))).expect("client");
    KubeBackend::with_stale_limit(client, NS, &api.url(), stale_limit)
}

/// The jobs API over `backend`, on a free loopback port.
async fn serve_backend(
    backend: KubeBackend,
    access: pai_server::auth::Access,
    watch_limit: std::time::Duration,
) -> SocketAddr {
    let state = AppState {
        body_limit: LIMIT,
        watch_limit,
        ..AppState::new(
            Arc::new(backend),
            ClusterConfig {
                namespace: NS.into(),
                ..ClusterConfig::default()
            },
            access,
        )
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, router(state)).await });
    addr
}

struct Reply {
    status: u16,
    content_type: String,
    retry_after: String,
    /// The `Link` header.
    link: String,
    body: String,
}

impl Reply {
    /// The status and the error body's `code`.
    fn error(&self) -> (u16, String) {
        (
            self.status,
            self.json()["code"].as_str().unwrap_or_default().to_string(),
        )
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// A plain HTTP/1.1 exchange over a fresh connection.
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &str,
) -> Reply {
    request_as(addr, None, method, path, content_type, body).await
}

async fn request_as(
    addr: SocketAddr,
    token: Option<&str>,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &str,
) -> Reply {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(token) = token {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    if let Some(ct) = content_type {
        head.push_str(&format!("Content-Type: {ct}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.expect("write");
    // A server may answer (413) and close before the whole body is sent.
    let _ = stream.write_all(body.as_bytes()).await;
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw).await;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a response");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let header = |name: &str| {
        head.lines()
            .find_map(|l| {
                l.split_once(':')
                    .filter(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_default()
    };
    let body = if header("transfer-encoding") == "chunked" {
        dechunk(body)
    } else {
        body.to_string()
    };
    Reply {
        status,
        content_type: header("content-type"),
        retry_after: header("retry-after"),
        link: header("link"),
        body,
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
    out
}

/// Submits the tests' base job as alice; it must be accepted.
async fn submit_base_job(s: &Setup) {
    let reply = submit(s.addr, "alice", &common::base_job().to_string()).await;
    assert_eq!(reply.status, 202, "{}", reply.body);
}

async fn submit(addr: SocketAddr, user: &str, spec: &str) -> Reply {
    request(
        addr,
        "POST",
        &format!("/api/v1/user/{user}/jobs"),
        Some("application/json"),
        spec,
    )
    .await
}

fn frameworks(api: &ApiServer) -> usize {
    api.requests().iter().filter(|r| r.method == "POST").count()
}

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
        let mut spec = common::base_job();
        spec["jobName"] = json!(job);
        let reply = submit(s.addr, user, &spec.to_string()).await;
        assert_eq!(reply.status, 202, "{user}/{job}: {}", reply.body);
    }
    for (user, job) in pairs {
        let name = pai_contract::names::framework_name(user, job);
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
    let spec = common::base_job().to_string();
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
    let mut bad = common::base_job();
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
    let reply = submit(s.addr, "a b", &common::base_job().to_string()).await;
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
        &common::base_job().to_string(),
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
    let spec = common::base_job().to_string();
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
async fn stop_start_and_delete() {
    let s = start().await;
    assert_eq!(
        submit(s.addr, "alice", &common::base_job().to_string())
            .await
            .status,
        202
    );
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

/// Only tasks whose sshd greets the server are listed; every other task is named with
/// its reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_info_lists_only_tasks_whose_sshd_answers() {
    let s = start().await;
    assert_eq!(
        submit(s.addr, "alice", &common::base_job().to_string())
            .await
            .status,
        202
    );
    let reply = request(s.addr, "GET", "/api/v1/user/alice/jobs/job/ssh", None, "").await;
    assert_eq!(reply.error(), (404, "NoJobSshInfoError".to_string()));
    assert!(
        reply.body.contains("ps-0: the task is waiting"),
        "{}",
        reply.body
    );

    // ps-0 answers as an SSH server does; ps-1's address has nothing on the port.
    s.api.modify("frameworks", NS, &fw(), |f| {
        pai_test_support::frameworks::set_pod_ip(f, "ps", 0, "127.0.0.1");
        pai_test_support::frameworks::set_pod_ip(f, "ps", 1, "127.0.0.2");
    });
    let view = until(s.addr, "/api/v1/user/alice/jobs/job", |r| {
        r.json()["taskRoles"]["ps"]["taskStatuses"][1]["containerIp"] == "127.0.0.2"
    })
    .await;
    let port: u16 = view.json()["taskRoles"]["ps"]["taskStatuses"][0]["containerPorts"]["ssh"]
        .as_str()
        .expect("ssh port")
        .parse()
        .expect("a port");
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("the ssh port is free here");
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        while let Ok((mut stream, _)) = listener.accept().await {
            let _ = stream.write_all(b"SSH-2.0-test\r\n").await;
        }
    });
    let reply = request(s.addr, "GET", "/api/v1/user/alice/jobs/job/ssh", None, "").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let info = reply.json();
    let containers = info["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1, "{info}");
    assert_eq!(containers[0]["id"], "ps-0");
    assert_eq!(containers[0]["sshIp"], "127.0.0.1");
    assert_eq!(containers[0]["sshPort"], port.to_string());
    assert_eq!(containers[0]["sshUser"], "root");
    assert_eq!(
        info["privateKeyUrl"], "/api/v1/user/alice/jobs/job/ssh/key",
        "{info}"
    );
    let reason = |id: &str| {
        info["unavailable"]
            .as_array()
            .expect("unavailable")
            .iter()
            .find(|u| u["id"] == id)
            .map(|u| u["reason"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    assert!(
        reason("ps-1").starts_with(&format!("nothing answers ssh at 127.0.0.2:{port}")),
        "{}",
        reason("ps-1")
    );
    assert!(
        reason("worker-0").contains("waiting"),
        "{}",
        reason("worker-0")
    );
}

/// Asks `path` until `done` is true of the reply (the server's copy follows the API
/// server by its watch, and its back-off after a failure): each try is a request, no
/// fixed pause decides anything.
async fn until(addr: SocketAddr, path: &str, done: impl Fn(&Reply) -> bool) -> Reply {
    for _ in 0..2_000 {
        let reply = request(addr, "GET", path, None, "").await;
        if done(&reply) {
            return reply;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("{path} never answered as expected");
}

/// A server whose copy of the jobs is not listed yet, over `api`.
async fn unlisted(api: ApiServer, stale_limit: std::time::Duration) -> Setup {
    let addr = serve_backend(
        backend_on(&api, stale_limit),
        pai_server::auth::Access::Open,
        std::time::Duration::from_secs(1800),
    )
    .await;
    Setup { api, addr }
}

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
    submit(s.addr, "alice", &common::base_job().to_string()).await;
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
        for path in reads {
            assert_eq!(
                request(s.addr, "GET", path, None, "").await.status,
                200,
                "{fault:?} {path}"
            );
        }
        let stop = request(
            s.addr,
            "PUT",
            &format!("{job}/executionType"),
            Some("application/json"),
            r#"{"value":"STOP"}"#,
        )
        .await;
        assert_eq!(
            stop.error(),
            (503, "ServiceUnavailableError".to_string()),
            "{fault:?}: {}",
            stop.body
        );
        assert_eq!(stop.retry_after, "2", "{fault:?}");
    }
    s.api.fault(None);
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
    submit(s.addr, "alice", &common::base_job().to_string()).await;
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
        let mut spec = common::base_job();
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
        let stop = request(
            s.addr,
            "PUT",
            &format!("{path}/executionType"),
            Some("application/json"),
            r#"{"value":"STOP"}"#,
        )
        .await;
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
    submit(s.addr, "alice", &common::base_job().to_string()).await;
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

fn tokens() -> pai_server::auth::Tokens {
    use pai_server::auth::hash;
    let dir = common::scratch("server", "tokens");
    let path = dir.join("tokens.yaml");
    let file = format!(
        "users:\n  - {{name: alice, tokenSha256: {}}}\n  - {{name: bob, tokenSha256: {}}}\n  - {{name: ops, tokenSha256: {}, admin: true}}\n",
        hash("alice-secret"),
        hash("bob-secret"),
        hash("ops-secret")
    );
    std::fs::write(&path, &file).expect("write");
    assert!(!file.contains("alice-secret"), "tokens are stored hashed");
    pai_server::auth::Tokens::load(&path).expect("loads")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_auth_matrix() {
    let s = start_with(Some(tokens())).await;
    let spec = common::base_job().to_string();
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

/// `rest-lite serve` as a user starts it, with a kubeconfig pointing at the test server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_serve_command_serves_and_stops_on_sigterm() {
    use std::io::BufRead;
    let api = ApiServer::start().await;
    let dir = common::scratch("server", "serve");
    let kubeconfig = dir.join("kubeconfig");
    api.write_kubeconfig(&kubeconfig, Some("jobs"));
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_rest-lite"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--namespace",
            NS,
            "--kubeconfig",
        ])
        .arg(&kubeconfig)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("serve");
    let stderr = child.stderr.take().expect("stderr");
    // Read the log as a log collector would, all along: the start-up line gives the URL.
    let (found, started) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut found = Some(found);
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            seen.push(line.clone());
            if let Some(rest) = line.split("url=http://").nth(1)
                && let Some(tx) = found.take()
            {
                let addr = rest
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_string();
                let _ = tx.send((addr, seen.clone()));
            }
        }
    });
    let (url, lines) =
        tokio::task::spawn_blocking(move || started.recv().expect("a start-up line"))
            .await
            .expect("join");
    assert!(
        lines.iter().any(|l| l.contains("backend=kubernetes at")),
        "{lines:?}"
    );
    // Without a token file: this machine's token only, kept in the state directory.
    let token = pai_server::machine_token::read(&dir.join("state")).expect("a token");
    let addr: SocketAddr = url.parse().expect("addr");
    let reply = submit(addr, "alice", &common::base_job().to_string()).await;
    assert_eq!(reply.status, 401, "{}", reply.body);
    let reply = request_as(
        addr,
        Some(&token),
        "POST",
        "/api/v1/user/alice/jobs",
        Some("application/json"),
        &common::base_job().to_string(),
    )
    .await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    assert!(api.get("frameworks", NS, &fw()).is_some());
    nix_kill(child.id());
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("join")
        .expect("wait");
    assert!(status.success(), "{status}");
}

fn nix_kill(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

#[test]
fn serve_refuses_to_listen_beyond_loopback_without_tokens() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rest-lite"))
        .args(["serve", "--listen", "0.0.0.0:0"])
        .output()
        .expect("serve");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("without --token-file the server only listens on loopback")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_cluster_and_metrics_count_routes() {
    let s = start().await;
    assert_eq!(
        request(s.addr, "GET", "/readyz", None, "").await.status,
        200
    );
    assert_eq!(
        submit(s.addr, "alice", &common::base_job().to_string())
            .await
            .status,
        202
    );
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
async fn logs_are_served_and_followed() {
    let s = start().await;
    assert_eq!(
        submit(s.addr, "alice", &common::base_job().to_string())
            .await
            .status,
        202
    );
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
    // The kubelet's log API merges stdout and stderr: one of them alone is refused,
    // saying so, never answered with both.
    let split = request(s.addr, "GET", &format!("{path}&stream=stderr"), None, "").await;
    assert_eq!(split.status, 400, "{}", split.body);
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
    assert_eq!(
        made["metadata"]["finalizers"],
        json!([pai_contract::kept_logs::FINALIZER]),
        "every pod waits for its log to be kept"
    );
    let worker = pod("worker", 0);
    s.api.create("pods", NS, made);
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

/// A pod deleted while no server kept logs (the server down, or restarting) waits on its
/// finalizer; the next server's keeper finds it at its first list, keeps its log and
/// lets it go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_deleted_while_no_server_ran_is_kept_by_the_next() {
    let s = start().await;
    submit_base_job(&s).await;
    let framework = s.api.get("frameworks", NS, &fw()).expect("framework");
    let ps = pod("ps", 0);
    s.api.create(
        "pods",
        NS,
        pai_test_support::frameworks::pod_of(&framework, "ps", 0),
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

/// Through the API and the Events of a cluster: a job between an attempt and its delayed
/// retry waits and says until when, with a RetryScheduled Event and no promise before it;
/// a job the user stopped is told as stopped (no AttemptFailed), and its tasks' codes say
/// it was the user's stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_delay_and_a_stop_are_shown_and_told_as_they_are() {
    use k8s_openapi::api::events::v1::Event;
    use pai_cluster::events::Recorder;
    let s = start().await;
    let client = kube::Client::try_from(kube::Config::new(s.api.url().parse().expect("url")))
        .expect("client");
    let store = KubeBackend::store_only(client.clone(), NS, &s.api.url());
    let recorder = Recorder::new(client.clone(), NS, "rest-lite-a")
        .with_max_age(std::time::Duration::from_secs(100 * 365 * 86_400));
    tokio::spawn(recorder.run(store));
    let mut stopped_job = common::base_job();
    stopped_job["jobName"] = json!("stopped");
    let mut succeeded_job = common::base_job();
    succeeded_job["jobName"] = json!("succeeded");
    for spec in [common::base_job(), stopped_job, succeeded_job] {
        assert_eq!(submit(s.addr, "alice", &spec.to_string()).await.status, 202);
    }
    let stopped = pai_contract::names::framework_name("alice", "stopped");
    let succeeded = pai_contract::names::framework_name("alice", "succeeded");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_framework_the_cluster_finds_invalid_is_a_400_with_its_reason() {
    let s = start().await;
    s.api.reject_creates(Some(
        "admission webhook \"jobs.example.com\" denied the request: spec.taskRoles[0].taskNumber: Invalid value: 0",
    ));
    let reply = submit(s.addr, "alice", &common::base_job().to_string()).await;
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
    submit(s.addr, "alice", &common::base_job().to_string()).await;
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

/// Submits the base job as alice and starts watching it; returns once the server's
/// watch on the API server streams (the server's own signal, no clock).
/// Plays FrameworkController: alice's job completes, succeeded.
fn succeed(api: &ApiServer) {
    api.modify("frameworks", NS, &fw(), |f| {
        f["status"] = json!({"state": "Completed", "attemptStatus": {"id": 0,
            "completionStatus": {"code": 0, "phrase": "Succeeded", "type": {"name": "Succeeded", "attributes": []}}}});
    });
}

async fn submit_and_watch(s: &Setup) -> tokio::task::JoinHandle<Reply> {
    submit(s.addr, "alice", &common::base_job().to_string()).await;
    let addr = s.addr;
    let watch = tokio::spawn(async move {
        request(
            addr,
            "GET",
            "/api/v1/user/alice/jobs/job?watch=true",
            None,
            "",
        )
        .await
    });
    job_reads_answered(s.addr, 1).await;
    watch
}

/// Waits until the server has answered `n` reads of a job (a watch is answered, and
/// subscribed to the server's copy, before its first line).
async fn job_reads_answered(addr: SocketAddr, n: usize) {
    let line = format!(
        "rest_lite_http_requests_total{{method=\"GET\",route=\"/api/v1/user/{{user}}/jobs/{{job}}\",status=\"200\"}} {n}\n"
    );
    until(addr, "/metrics", |r| r.body.contains(&line)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_streams_each_change_and_ends_at_the_final_state() {
    let s = start().await;
    let watch = submit_and_watch(&s).await;
    s.api.modify("frameworks", NS, &fw(), |f| {
        f["status"] = json!({"state": "AttemptRunning", "attemptStatus": {"id": 0}});
    });
    succeed(&s.api);
    // Nothing changes after the final state: the stream ends by itself.
    let reply = tokio::time::timeout(std::time::Duration::from_secs(60), watch)
        .await
        .expect("the watch ends after the final state")
        .expect("join");
    assert_eq!(reply.status, 200);
    assert_eq!(reply.content_type, "application/x-ndjson");
    let states: Vec<String> = reply
        .body
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("a JSON line");
            v["jobStatus"]["state"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(
        states.first().map(String::as_str),
        Some("WAITING"),
        "{states:?}"
    );
    assert_eq!(
        states.last().map(String::as_str),
        Some("SUCCEEDED"),
        "{states:?}"
    );
    assert!(states.iter().any(|s| s == "RUNNING"), "{states:?}");

    let missing = request(
        s.addr,
        "GET",
        "/api/v1/user/alice/jobs/other?watch=true",
        None,
        "",
    )
    .await;
    assert_eq!(missing.error(), (404, "NoJobError".to_string()));
}

/// Submits alice's job, watches it with the typed client, checks the first view
/// (WAITING) and returns the states of every later view, collected until the watch ends.
async fn watch_after_the_first_view(s: &Setup) -> tokio::task::JoinHandle<Vec<String>> {
    use futures::StreamExt;
    submit(s.addr, "alice", &common::base_job().to_string()).await;
    let client = pai_client::Client::new(&format!("http://{}", s.addr), None);
    let mut views = client.watch("alice", "job").await.expect("watch");
    let first = views.next().await.expect("a view").expect("valid");
    assert_eq!(first.job_status.state.to_string(), "WAITING");
    tokio::spawn(async move {
        views
            .map(|v| v.expect("valid").job_status.state.to_string())
            .collect::<Vec<String>>()
            .await
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_watches_again_when_the_server_ends_a_watch_and_repeats_nothing() {
    // Every watch ends after a second on this server.
    let s = start_with_watch_limit(None, std::time::Duration::from_secs(1)).await;
    let rest = watch_after_the_first_view(&s).await;
    // The server ended the first watch and the client opened another (each a
    // subscription to the server's copy, not a watch of the API server): the change made
    // now reaches it, once.
    job_reads_answered(s.addr, 2).await;
    succeed(&s.api);
    let rest = rest.await.expect("join");
    assert_eq!(
        rest,
        ["SUCCEEDED"],
        "no view twice, the final one once, then the end"
    );
    let watches = s.api.requests().iter().filter(|r| r.is_watch()).count();
    assert_eq!(watches, 1, "the server's one watch of the API server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_ends_when_the_job_was_deleted_while_the_cluster_was_away() {
    let mut s = start().await;
    let watch = submit_and_watch(&s).await;
    // Away: the deletion's event is never delivered, and its history is gone.
    s.api.stop().await;
    s.api.delete("frameworks", NS, &fw());
    s.api.compact();
    s.api.restart().await;
    let reply = tokio::time::timeout(std::time::Duration::from_secs(60), watch)
        .await
        .expect("the watch ends once the re-list misses the job")
        .expect("join");
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body.lines().count(), 1, "{}", reply.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_say_what_happened_to_a_failing_and_retried_job_once_across_replicas() {
    use k8s_openapi::api::events::v1::Event;
    use pai_cluster::events::{Recorder, event, occurrences};
    let s = start().await;
    let client = kube::Client::try_from(kube::Config::new(s.api.url().parse().expect("url")))
        .expect("client");
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
    submit(s.addr, "alice", &common::base_job().to_string()).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_page_by_limit_and_continue_and_filter_by_state() {
    let s = start().await;
    for i in 0..5 {
        let mut spec = common::base_job();
        spec["jobName"] = json!(format!("job{i}"));
        assert_eq!(submit(s.addr, "alice", &spec.to_string()).await.status, 202);
    }
    let everything = request(s.addr, "GET", "/api/v1/user/alice/jobs", None, "").await;
    let all: Vec<String> = everything
        .json()
        .as_array()
        .expect("array")
        .iter()
        .map(|j| j["name"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(all.len(), 5);
    assert_eq!(everything.link, "", "no next page without a limit");
    for base in ["/api/v1/user/alice/jobs", "/api/v1/jobs"] {
        let mut paged = Vec::new();
        let mut next = format!("{base}?limit=2");
        let mut pages = 0;
        loop {
            let reply = request(s.addr, "GET", &next, None, "").await;
            assert_eq!(reply.status, 200, "{}", reply.body);
            pages += 1;
            paged.extend(
                reply
                    .json()
                    .as_array()
                    .expect("array")
                    .iter()
                    .map(|j| j["name"].as_str().unwrap_or_default().to_string()),
            );
            if reply.link.is_empty() {
                break;
            }
            next = reply
                .link
                .strip_prefix('<')
                .and_then(|l| l.split_once(">; rel=\"next\""))
                .map(|(url, _)| url.to_string())
                .expect("a next link");
        }
        assert_eq!(paged, all, "{base}: every job once, in the same order");
        assert_eq!(pages, 3, "{base}");
        // An empty token is the first page, as in the Kubernetes API.
        let first = request(
            s.addr,
            "GET",
            &format!("{base}?limit=2&continue="),
            None,
            "",
        )
        .await;
        assert_eq!(first.status, 200, "{}", first.body);
        assert_eq!(first.json()[0]["name"].as_str(), Some(all[0].as_str()));
    }
    // One job running: the state filter finds it, and pages through the rest.
    s.api.modify(
        "frameworks",
        NS,
        &pai_contract::names::framework_name("alice", "job3"),
        |f| f["status"] = json!({"state": "AttemptRunning", "attemptStatus": {"id": 0}}),
    );
    let running = until(s.addr, "/api/v1/jobs?state=RUNNING", |r| {
        r.body.contains("job3")
    })
    .await;
    assert_eq!(
        running.json().as_array().map(Vec::len),
        Some(1),
        "{}",
        running.body
    );
    let waiting = request(
        s.addr,
        "GET",
        "/api/v1/jobs?state=WAITING&limit=4",
        None,
        "",
    )
    .await;
    assert_eq!(waiting.json().as_array().map(Vec::len), Some(4));
    assert_eq!(waiting.link, "", "four waiting jobs in all: no next page");
    for bad in [
        "/api/v1/jobs?limit=0",
        "/api/v1/jobs?limit=1001",
        "/api/v1/jobs?continue=nonsense",
        "/api/v1/jobs?state=SLEEPING",
    ] {
        let reply = request(s.addr, "GET", bad, None, "").await;
        assert_eq!(reply.status, 400, "{bad}: {}", reply.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_page_read_by_many_reads_each_log_preview_once() {
    let s = start().await;
    submit(s.addr, "alice", &common::base_job().to_string()).await;
    s.api.modify("frameworks", NS, &fw(), |f| {
        f["status"] = json!({"state": "AttemptRunning", "attemptStatus": {"id": 0}});
        pai_test_support::frameworks::set_all_addresses(f, &[("ps", 2), ("worker", 2)]);
    });
    for (role, index) in [("ps", 0), ("ps", 1), ("worker", 0), ("worker", 1)] {
        s.api.append_log(
            NS,
            &pod(role, index),
            &format!("{role}-{index} says hello\n"),
        );
    }
    let page = "/ui/jobs/alice/job";
    let first = until(s.addr, page, |r| r.body.contains("worker-1 says hello")).await;
    assert_eq!(first.status, 200);
    let logs = || {
        s.api
            .requests()
            .iter()
            .filter(|r| r.uri.contains("/log?"))
            .count()
    };
    let read = logs();
    assert!(read >= 4, "each started task's preview read: {read}");
    // Ten more readers at once: the previews are the ones read, not read again.
    let readers = (0..10).map(|_| request(s.addr, "GET", page, None, ""));
    for again in futures::future::join_all(readers).await {
        assert!(again.body.contains("ps-0 says hello"), "{}", again.body);
    }
    assert_eq!(
        logs(),
        read,
        "no log read twice within the previews' lifetime"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_copy_keeps_frameworks_without_their_managed_fields() {
    let s = start().await;
    submit(s.addr, "alice", &common::base_job().to_string()).await;
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

/// A job that waits for a job that (by name) waits back for it is refused at submission
/// with the cycle: possible when a job waited for was deleted and a new one took its
/// name before its dependent was failed (this in-process server runs no dependency
/// controller, so the dependent stays held).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_cycle_is_refused_naming_it() {
    let s = start().await;
    let named = |name: &str, depends_on: serde_json::Value| {
        let mut spec = common::base_job();
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
