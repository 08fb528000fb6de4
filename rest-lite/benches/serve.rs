//! `cargo bench -p rest-lite --bench serve`: dry-run submissions over HTTP on loopback.
//!
//! The server (the real router, Kubernetes backend aimed at the in-process API server,
//! which a dry run never calls) and the load generator share this process and the
//! machine's two cores. 64 keep-alive connections each send the TensorFlow example as
//! `POST /api/v1/user/alice/jobs?dryRun=true` back to back, with alice's bearer token,
//! through every check a real request passes (Host, Origin, media type, token); every
//! request is timed.
//! Then the real `rest-lite serve` binary is started and its idle RSS read. What it
//! prints it also records under `benchmarks/results/`
//! ([`pai_test_support::bench_results`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use pai_cluster::backend::KubeBackend;
use pai_server::auth::{Access, Caller, TokenTable, Tokens};
use pai_server::{AppState, router};
use pai_test_support::ApiServer;
use pai_test_support::bench_results::Run;
use pai_translate::config::ClusterConfig;

const CONNECTIONS: usize = 64;
const TOKEN: &str = "4f1c8e2d0b7a95e3c6d1f08a2b4e7c9d5a3f6e1b8c0d2a4f7e9b1c3d5a7f9e0b";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let mut results = Run::new("rest-lite", "serve");
    let per_connection = if quick { 2 } else { 1_000 };
    let spec = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/tensorflow-ps-worker.json"
    ))
    .expect("example");

    let api = ApiServer::start().await;
    let client = api.client();
    let state = AppState::new(
        Arc::new(KubeBackend::start(client, "default", &api.url())),
        ClusterConfig::default(),
        Access::Tokens(TokenTable::fixed(Tokens::single(
            TOKEN,
            Caller {
                user: "alice".to_string(),
                admin: false,
                groups: Vec::new(),
            },
        ))),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, router(state)).await });

    let http: Client<_, Full<hyper::body::Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(CONNECTIONS)
        .build_http();
    let uri: http::Uri = format!("http://{addr}/api/v1/user/alice/jobs?dryRun=true")
        .parse()
        .expect("uri");
    let started = Instant::now();
    let workers: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let (http, uri, spec) = (http.clone(), uri.clone(), spec.clone());
            tokio::spawn(async move {
                let mut times = Vec::with_capacity(per_connection);
                for _ in 0..per_connection {
                    let request = http::Request::post(uri.clone())
                        .header("content-type", "application/json")
                        .header("authorization", format!("Bearer {TOKEN}"))
                        .body(Full::new(hyper::body::Bytes::from(spec.clone())))
                        .expect("request");
                    let t = Instant::now();
                    let response = http.request(request).await.expect("response");
                    assert_eq!(response.status(), 200);
                    response.into_body().collect().await.expect("body");
                    times.push(t.elapsed());
                }
                times
            })
        })
        .collect();
    let mut times: Vec<Duration> = Vec::new();
    for worker in workers {
        times.extend(worker.await.expect("join"));
    }
    let elapsed = started.elapsed();
    times.sort();
    let at = |p: f64| times[((times.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e3;
    println!(
        "dry-run submissions: {} over {CONNECTIONS} connections in {:.2} s = {:.0}/s; latency ms p50 {:.2}, p90 {:.2}, p99 {:.2}, max {:.2}",
        times.len(),
        elapsed.as_secs_f64(),
        times.len() as f64 / elapsed.as_secs_f64(),
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0)
    );
    let case = format!("dry-run submissions, {CONNECTIONS} connections");
    let rate = times.len() as f64 / elapsed.as_secs_f64();
    results.record(&case, "rate", rate, "/s");
    results.record(&case, "submissions", times.len() as f64, "");
    for (stat, p) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0)] {
        results.record(&case, &format!("latency: {stat}"), at(p), "ms");
    }

    // Idle RSS of the real binary.
    let dir = std::env::temp_dir().join(format!("rest-lite-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let kubeconfig = dir.join("kubeconfig");
    api.write_kubeconfig(&kubeconfig, None);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_rest-lite"))
        .args(["serve", "--listen", "127.0.0.1:0", "--kubeconfig"])
        .arg(&kubeconfig)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("serve");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        let mut tx = Some(tx);
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("rest-lite serving")
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(());
            }
        }
    });
    tokio::task::spawn_blocking(move || rx.recv().expect("started"))
        .await
        .expect("join");
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).expect("status");
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .unwrap_or("VmRSS: ?")
        .to_string();
    println!(
        "idle `rest-lite serve`: {}",
        rss.split_whitespace().skip(1).collect::<Vec<_>>().join(" ")
    );
    if let Some(kb) = rss
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse::<f64>().ok())
    {
        results.record("idle rest-lite serve", "RSS", kb, "kB");
    }
    results.write();
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
