//! What the server's tests share: a server over the in-process API server (the
//! Kubernetes backend, its copy listed), requests over real sockets, small jobs, and
//! scratch directories that remove themselves, a failing test's too.
#![allow(dead_code, unused_imports)]

pub use std::net::SocketAddr;
pub use std::sync::Arc;

pub use pai_cluster::backend::KubeBackend;
pub use pai_server::{AppState, router};
pub use pai_test_support::ApiServer;
pub use pai_translate::config::ClusterConfig;
pub use serde_json::{Value, json};
pub use tokio::io::{AsyncReadExt, AsyncWriteExt};

// The specs the tests write, shared by every crate's tests.
pub use pai_test_support::specs::*;

/// A directory for one test, removed when it goes out of scope.
pub fn scratch(name: &str) -> pai_test_support::scratch::TempDir {
    pai_test_support::scratch(&format!("rest-lite-server-{name}"))
}

pub const NS: &str = "jobs";

pub const LIMIT: usize = 64 * 1024;

/// The Framework of alice's job "job".
pub fn fw() -> String {
    pai_job::names::framework_name("alice", "job")
}

/// The pod of task `index` of the role `role` of alice's job "job".
pub fn pod(role: &str, index: u32) -> String {
    pai_contract::framework::pod_name(&fw(), role, index)
}

pub struct Setup {
    pub api: ApiServer,
    pub addr: SocketAddr,
}

pub async fn start() -> Setup {
    start_with(None).await
}

pub async fn start_with(tokens: Option<pai_server::auth::Tokens>) -> Setup {
    start_with_watch_limit(tokens, std::time::Duration::from_secs(1800)).await
}

pub async fn start_with_watch_limit(
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
pub async fn serve_on(
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
pub fn backend_on(api: &ApiServer, stale_limit: std::time::Duration) -> KubeBackend {
    let client = api.client();
    KubeBackend::with_stale_limit(client, NS, &api.url(), stale_limit)
}

/// The jobs API over `backend`, on a free loopback port.
pub async fn serve_backend(
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

pub struct Reply {
    pub status: u16,
    pub content_type: String,
    pub retry_after: String,
    /// The `Link` header.
    pub link: String,
    pub body: String,
}

impl Reply {
    /// The status and the error body's `code`.
    pub fn error(&self) -> (u16, String) {
        (
            self.status,
            self.json()["code"].as_str().unwrap_or_default().to_string(),
        )
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// A plain HTTP/1.1 exchange over a fresh connection.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &str,
) -> Reply {
    request_as(addr, None, method, path, content_type, body).await
}

pub async fn request_as(
    addr: SocketAddr,
    token: Option<&str>,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &str,
) -> Reply {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut headers = Vec::new();
    if let Some(bearer) = &bearer {
        headers.push(("Authorization", bearer.as_str()));
    }
    if let Some(ct) = content_type {
        headers.push(("Content-Type", ct));
    }
    let answer = pai_test_support::http::exchange(addr, method, path, &headers, body).await;
    let header = |name: &str| answer.header(name).unwrap_or_default().to_string();
    Reply {
        status: answer.status,
        content_type: header("content-type"),
        retry_after: header("retry-after"),
        link: header("link"),
        body: answer.body,
    }
}

/// Submits the tests' base job as alice; it must be accepted.
pub async fn submit_base_job(s: &Setup) {
    let reply = submit(s.addr, "alice", &base_job().to_string()).await;
    assert_eq!(reply.status, 202, "{}", reply.body);
}

pub async fn submit(addr: SocketAddr, user: &str, spec: &str) -> Reply {
    request(
        addr,
        "POST",
        &format!("/api/v1/user/{user}/jobs"),
        Some("application/json"),
        spec,
    )
    .await
}

pub fn frameworks(api: &ApiServer) -> usize {
    api.requests().iter().filter(|r| r.method == "POST").count()
}

/// Asks `path` until `done` is true of the reply (the server's copy follows the API
/// server by its watch, and its back-off after a failure): each try is a request, no
/// fixed pause decides anything.
pub async fn until(addr: SocketAddr, path: &str, done: impl Fn(&Reply) -> bool) -> Reply {
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
pub async fn unlisted(api: ApiServer, stale_limit: std::time::Duration) -> Setup {
    let addr = serve_backend(
        backend_on(&api, stale_limit),
        pai_server::auth::Access::Open,
        std::time::Duration::from_secs(1800),
    )
    .await;
    Setup { api, addr }
}

pub fn tokens() -> pai_server::auth::Tokens {
    use pai_server::auth::hash;
    let dir = scratch("tokens");
    let path = dir.path().join("tokens.yaml");
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

/// Submits the base job as alice and starts watching it; returns once the server's
/// watch on the API server streams (the server's own signal, no clock).
/// Plays FrameworkController: alice's job completes, succeeded.
pub fn succeed(api: &ApiServer) {
    api.modify("frameworks", NS, &fw(), |f| {
        f["status"] = json!({"state": "Completed", "attemptStatus": {"id": 0,
            "completionStatus": {"code": 0, "phrase": "Succeeded", "type": {"name": "Succeeded", "attributes": []}}}});
    });
}

pub async fn submit_and_watch(s: &Setup) -> tokio::task::JoinHandle<Reply> {
    submit(s.addr, "alice", &base_job().to_string()).await;
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
pub async fn job_reads_answered(addr: SocketAddr, n: usize) {
    let line = format!(
        "rest_lite_http_requests_total{{method=\"GET\",route=\"/api/v1/user/{{user}}/jobs/{{job}}\",status=\"200\"}} {n}\n"
    );
    until(addr, "/metrics", |r| r.body.contains(&line)).await;
}

/// Submits alice's job, watches it with the typed client, checks the first view
/// (WAITING) and returns the states of every later view, collected until the watch ends.
pub async fn watch_after_the_first_view(s: &Setup) -> tokio::task::JoinHandle<Vec<String>> {
    use futures::StreamExt;
    submit(s.addr, "alice", &base_job().to_string()).await;
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

/// A backend that keeps logs by `budget`, served; its copy listed.
pub async fn keeping(budget: pai_cluster::log_keeper::Budget) -> Setup {
    let api = ApiServer::start().await;
    let client = api.client();
    let backend =
        backend_on(&api, pai_cluster::store::DEFAULT_STALE_LIMIT).keeping_logs(client, NS, budget);
    backend.store().listed().await;
    let addr = serve_backend(
        backend,
        pai_server::auth::Access::Open,
        std::time::Duration::from_secs(1800),
    )
    .await;
    Setup { api, addr }
}
