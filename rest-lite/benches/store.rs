//! `cargo bench -p rest-lite --bench store`: reads of the real `rest-lite serve` binary
//! over the in-process API server holding many jobs (#24).
//!
//! The API server (this process) holds `STORE_JOBS` jobs (1,000 by default) of 8 tasks
//! (ps ×2, worker ×6), made by the real transformer, every task running with an address
//! and a log. The release binary serves them with `--backend kube` and an admin token;
//! once `/readyz` says its copy is listed, 64 keep-alive connections send each kind of
//! read back to back: a job's status, a user's list (20 jobs), every job, a page of 100,
//! the job page, `/metrics`. Every request is timed; the API server counts the requests
//! each phase made, and the watches in all; the server's RSS is read from /proc.
//! Without `--bench` (as `cargo test --benches` runs it): 40 jobs, a few requests.
//!
//! Closed loop by default: each connection sends its next request when the last is
//! answered, so the phase runs as fast as the machine goes and its latency is mostly
//! queueing at saturation. `STORE_RATE=R` paces every connection at R requests per
//! second instead (an open loop: a request's latency counts from when it was due, so a
//! slow answer also delays the ones behind it); `STORE_PHASES=a,b` runs only the phases
//! whose names contain one of those words. `STORE_FINISHED=1` stores every job
//! completed (every fifth failed) instead of running: a server's history (#53).
//! `BENCH_REST_LITE` serves with another build (an earlier commit's) under the same
//! harness. `STORE_HISTORY=1` (finished jobs) also gives the server a job history in a
//! throwaway PostgreSQL server with `frameworkKeptSec: 0`: the reads start once every
//! Framework was written into it and deleted from the API server, so every job is
//! read from the history; then the database's size and a restart to the first page.
//! Finished jobs' tasks have their kept logs in their ConfigMaps, as their runtimes
//! leave them: retiring a Framework copies them into the history.
//!
//! What it prints it also records under `benchmarks/results/`
//! ([`pai_test_support::bench_results`]), as the variant `<N>jobs` (with `-finished` or
//! `-history`, and `-rate<R>` when paced); a run of `BENCH_REST_LITE` records that build
//! under its path.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use pai_test_support::ApiServer;
use pai_test_support::bench_results::{Run, THIS};
use pai_translate::config::ClusterConfig;
use pai_translate::transform::Transformer;
use serde_json::json;

const CONNECTIONS: usize = 64;
const NS: &str = "bench";
const TOKEN: &str = "0b9e4c1d7a3f5e2b8c6d0a4f1e7b3c9d5a2f8e6b0c4d1a7f3e9b5c2d8a6f0e4b";
const USERS: usize = 50;

/// The path of the n-th read of a phase.
type PathOf = Box<dyn Fn(usize) -> String + Send + Sync>;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let jobs: usize = std::env::var("STORE_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 40 } else { 1_000 });
    // `STORE_PER_CONNECTION`: fewer (or more) requests per connection and phase.
    let per_connection: usize = std::env::var("STORE_PER_CONNECTION")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 2 } else { 200 });
    let rate: Option<f64> = std::env::var("STORE_RATE")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|r: &f64| *r > 0.0);
    let phases: Vec<String> = std::env::var("STORE_PHASES")
        .map(|v| v.split(',').map(str::to_string).collect())
        .unwrap_or_default();

    let history = std::env::var("STORE_HISTORY").is_ok_and(|v| v == "1");
    let finished = history || std::env::var("STORE_FINISHED").is_ok_and(|v| v == "1");
    let mut variant = format!("{jobs}jobs");
    if history {
        variant.push_str("-history");
    } else if finished {
        variant.push_str("-finished");
    }
    if let Some(rate) = rate {
        variant.push_str(&format!("-rate{rate}"));
    }
    let mut results = Run::new("rest-lite", "store").variant(variant);
    let build = std::env::var("BENCH_REST_LITE").unwrap_or_else(|_| THIS.to_string());
    let api = ApiServer::start().await;
    let made = Instant::now();
    populate(&api, jobs, finished);
    eprintln!(
        "{jobs} jobs of 8 tasks stored in {:.1} s",
        made.elapsed().as_secs_f64()
    );

    let dir = std::env::temp_dir().join(format!("rest-lite-store-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let kubeconfig = dir.join("kubeconfig");
    api.write_kubeconfig(&kubeconfig, Some(NS));
    let tokens = support::admin_tokens(&dir, TOKEN);
    let postgres = if history {
        Some(pai_test_support::postgres::Postgres::start().expect("PostgreSQL"))
    } else {
        None
    };
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        match &postgres {
            Some(pg) => support::history_config(&pg.connection()),
            None => String::new(),
        },
    )
    .expect("config");
    let port = free_port();
    let binary = std::env::var("BENCH_REST_LITE")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_rest-lite").to_string());
    let start = || {
        let mut command = std::process::Command::new(&binary);
        command
            .args(["serve", "--backend", "kube", "--namespace", NS])
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--token-file")
            .arg(&tokens)
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        if history {
            command.arg("--config").arg(&config);
        }
        command.spawn().expect("rest-lite serve")
    };
    let mut server = start();
    let base = format!("http://127.0.0.1:{port}");
    let http: Client<_, Empty<hyper::body::Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(CONNECTIONS)
        .build_http();
    let started = Instant::now();
    ready(&http, &base).await;
    eprintln!(
        "ready (listed) {:.2} s after start",
        started.elapsed().as_secs_f64()
    );
    let ready_after = started.elapsed().as_secs_f64();
    results.record_build(&build, "server", "ready after start", ready_after, "s");
    if history {
        // Every Framework written into the history and deleted from the cluster.
        let mut left = api.list("frameworks", NS).len();
        while left > 0 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            left = api.list("frameworks", NS).len();
        }
        eprintln!(
            "every job in the history, no Framework left, {:.1} s after start",
            started.elapsed().as_secs_f64()
        );
    }
    let rss_listed = support::rss(server.id());
    // The server's own start-up work (every peer table published once) is done before
    // any read is counted.
    let mut seen = api.requests().len();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = api.requests().len();
        if now == seen {
            break;
        }
        seen = now;
    }

    println!(
        "| read | requests | p50 ms | p99 ms | max ms | req/s | API requests per read | body bytes |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let job = |i: usize| (format!("u{}", i % USERS), format!("job{i}"));
    let reads: Vec<(&str, PathOf)> = vec![
        (
            "job GET",
            Box::new(move |i| {
                let (u, j) = job(i % jobs);
                format!("/api/v1/user/{u}/jobs/{j}")
            }),
        ),
        (
            "a user's list (20 jobs at 1,000)",
            Box::new(move |i| format!("/api/v1/user/u{}/jobs", i % USERS)),
        ),
        ("every job", Box::new(|_| "/api/v1/jobs".to_string())),
        (
            "v2 page of 20, first",
            Box::new(|_| "/api/v2/jobs?limit=20".to_string()),
        ),
        (
            "v2 page of 20, middle",
            Box::new(move |_| format!("/api/v2/jobs?limit=20&offset={}", jobs / 2)),
        ),
        (
            "v2 page of 20, FAILED",
            Box::new(|_| "/api/v2/jobs?limit=20&state=FAILED".to_string()),
        ),
        (
            "v2 page of 20, searched",
            Box::new(|_| "/api/v2/jobs?limit=20&keyword=job42".to_string()),
        ),
        ("portal job list", Box::new(|_| "/ui/jobs".to_string())),
        (
            "a page of 100 jobs",
            Box::new(|_| "/api/v1/jobs?limit=100".to_string()),
        ),
        (
            "job page, one job every reader refreshes",
            Box::new(move |_| {
                let (u, j) = job(0);
                format!("/ui/jobs/{u}/{j}")
            }),
        ),
        (
            "job page, a random job each",
            Box::new(move |i| {
                let (u, j) = job(i % jobs);
                format!("/ui/jobs/{u}/{j}")
            }),
        ),
        ("/metrics", Box::new(|_| "/metrics".to_string())),
    ];
    if let Some(rate) = rate {
        println!(
            "(open loop: each of {CONNECTIONS} connections paced at {rate} requests/s, {} offered)",
            rate * CONNECTIONS as f64
        );
    }
    for (name, path) in reads {
        if !phases.is_empty() && !phases.iter().any(|p| name.contains(p.as_str())) {
            continue;
        }
        // Heavy reads of everything get fewer requests.
        let count = if matches!(name, "every job" | "/metrics" | "portal job list") {
            per_connection.div_ceil(10)
        } else {
            per_connection
        };
        let path = Arc::new(path);
        let before = api.requests().len();
        let began = Instant::now();
        let mut workers = Vec::new();
        for c in 0..CONNECTIONS {
            let http = http.clone();
            let base = base.clone();
            let path = path.clone();
            workers.push(tokio::spawn(async move {
                let mut times = Vec::with_capacity(count);
                let mut bytes = 0;
                // Paced: the connections' first requests spread over one interval.
                let interval = rate.map(|r| Duration::from_secs_f64(1.0 / r));
                let first = tokio::time::Instant::now()
                    + interval.map_or(Duration::ZERO, |i| i * c as u32 / CONNECTIONS as u32);
                let mut answered = Instant::now();
                for n in 0..count {
                    let url = format!("{base}{}", path(c * 7919 + n * 104_729));
                    let t = match interval {
                        Some(interval) => {
                            let due = (first + interval * n as u32).into_std();
                            tokio::time::sleep_until(due.into()).await;
                            // Behind (the last answer came after this one was due): it
                            // counts from when it was due. Otherwise from now: the timer
                            // wakes up to a millisecond late, which is not the server's.
                            if answered > due { due } else { Instant::now() }
                        }
                        None => Instant::now(),
                    };
                    let (status, size) = get(&http, &url).await.expect("answered");
                    answered = Instant::now();
                    times.push(t.elapsed());
                    assert_eq!(status, 200, "{url}");
                    bytes = size;
                }
                (times, bytes)
            }));
        }
        let mut times = Vec::new();
        let mut bytes = 0;
        for w in workers {
            let (t, b) = w.await.expect("join");
            times.extend(t);
            bytes = b;
        }
        let elapsed = began.elapsed();
        let asked = api.requests().len() - before;
        times.sort();
        let pct = |p: f64| {
            times[((times.len() as f64 * p).ceil() as usize).clamp(1, times.len()) - 1]
                .as_secs_f64()
                * 1e3
        };
        println!(
            "| {name} | {} | {:.2} | {:.2} | {:.2} | {:.0} | {:.3} | {bytes} |",
            times.len(),
            pct(0.50),
            pct(0.99),
            pct(1.0),
            times.len() as f64 / elapsed.as_secs_f64(),
            asked as f64 / times.len() as f64,
        );
        for (metric, value, unit) in [
            ("requests", times.len() as f64, ""),
            ("p50", pct(0.50), "ms"),
            ("p99", pct(0.99), "ms"),
            ("max", pct(1.0), "ms"),
            ("req/s", times.len() as f64 / elapsed.as_secs_f64(), "/s"),
            (
                "API requests per read",
                asked as f64 / times.len() as f64,
                "",
            ),
            ("body", bytes as f64, "B"),
        ] {
            results.record_build(&build, name, metric, value, unit);
        }
    }
    let watches: Vec<String> = api
        .requests()
        .iter()
        .filter(|r| r.is_watch())
        .map(|r| r.uri.split('?').next().unwrap_or_default().to_string())
        .collect();
    println!();
    let rss_after = support::rss(server.id());
    println!(
        "watches of the API server in all: {} ({:?}); RSS {} MiB once listed, {} MiB after the reads",
        watches.len(),
        watches,
        rss_listed / 1024,
        rss_after / 1024
    );
    for (metric, value, unit) in [
        ("watches", watches.len() as f64, ""),
        ("RSS once listed", rss_listed as f64 / 1024.0, "MiB"),
        ("RSS after the reads", rss_after as f64 / 1024.0, "MiB"),
    ] {
        results.record_build(&build, "server", metric, value, unit);
    }
    if let Some(pg) = &postgres {
        println!(
            "history database: {} in all (rest_lite_jobs {}, rest_lite_logs {})",
            pg.psql("SELECT pg_size_pretty(pg_database_size('postgres'))"),
            pg.psql("SELECT pg_size_pretty(pg_total_relation_size('rest_lite_jobs'))"),
            pg.psql("SELECT pg_size_pretty(pg_total_relation_size('rest_lite_logs'))"),
        );
        let _ = server.kill();
        let _ = server.wait();
        let restarted = Instant::now();
        server = start();
        ready(&http, &base).await;
        let (status, _) = get(&http, &format!("{base}/api/v2/jobs?limit=20"))
            .await
            .expect("answered");
        assert_eq!(status, 200);
        let first = restarted.elapsed().as_secs_f64();
        let rss = support::rss(server.id());
        println!(
            "restart to the first v2 page: {first:.2} s; RSS {} MiB",
            rss / 1024
        );
        results.record_build(&build, "server", "restart to the first v2 page", first, "s");
        results.record_build(
            &build,
            "server",
            "RSS after restart",
            rss as f64 / 1024.0,
            "MiB",
        );
    }
    results.write();
    let _ = server.kill();
    let _ = server.wait();
    std::fs::remove_dir_all(&dir).ok();
}

/// Waits until the server at `base` answers `/readyz` with 200 (its copy listed, its
/// history read).
async fn ready(
    http: &Client<hyper_util::client::legacy::connect::HttpConnector, Empty<hyper::body::Bytes>>,
    base: &str,
) {
    let started = Instant::now();
    loop {
        if let Ok((200, _)) = get(http, &format!("{base}/readyz")).await {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the server never became ready"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Stores `jobs` Frameworks of 8 running tasks with logs, as rest-lite and
/// FrameworkController would have left them; with `finished`, completed (every fifth
/// failed).
fn populate(api: &ApiServer, jobs: usize, finished: bool) {
    let transformer = Transformer::new(ClusterConfig {
        namespace: NS.into(),
        ..ClusterConfig::default()
    });
    for i in 0..jobs {
        let user = format!("u{}", i % USERS);
        let text = json!({
            "jobName": format!("job{i}"),
            "image": "busybox",
            "taskRoles": [
                {"name": "ps", "taskNumber": 2, "cpuNumber": 1, "memoryMB": 1024, "command": "sleep 1000"},
                {"name": "worker", "taskNumber": 6, "cpuNumber": 1, "memoryMB": 1024, "command": "sleep 1000"}
            ]
        })
        .to_string();
        let framework = support::framework_of(&transformer, &user, &text, i as u64);
        let mut value = pai_test_support::frameworks::to_value(&framework);
        let name = framework.name().to_string();
        value["status"] = json!({"state": "AttemptRunning", "startTime": "2026-01-01T00:00:00Z",
            "retryPolicyStatus": {"totalRetriedCount": 0, "accountableRetriedCount": 0}});
        pai_test_support::frameworks::set_attempt(&mut value, 0, &format!("0_uid-{i}"));
        value["status"]["attemptStatus"]["startTime"] = json!("2026-01-01T00:00:00Z");
        pai_test_support::frameworks::set_all_addresses(&mut value, &[("ps", 2), ("worker", 6)]);
        if finished {
            let code = if i % 5 == 0 { 1 } else { 0 };
            // The ended attempt in the Framework's history, as the server writes it.
            value["status"]["retryPolicyStatus"]["totalRetriedCount"] = json!(0);
            value["status"]["state"] = json!("Completed");
            value["status"]["completionTime"] = json!("2026-01-01T01:00:00Z");
            value["status"]["attemptStatus"]["completionTime"] = json!("2026-01-01T01:00:00Z");
            value["status"]["attemptStatus"]["completionStatus"] = serde_json::to_value(
                pai_contract::framework::CompletionStatus::of(code, format!("exit code {code}")),
            )
            .expect("json");
            let ended: pai_contract::Framework =
                serde_json::from_value(value.clone()).expect("a Framework");
            if let Some(history) = pai_job::attempts::with_current(&ended) {
                value["metadata"]["annotations"][pai_job::attempts::ANNOTATION] = json!(history);
            }
        }
        for role in ["ps", "worker"] {
            let count = if role == "ps" { 2 } else { 6 };
            for index in 0..count {
                let pod = pai_contract::framework::pod_name(&name, role, index);
                let log = format!("{role}-{index}: step 1\n{role}-{index}: step 2\n");
                api.append_log(NS, &pod, &log);
                if finished {
                    // The task's kept log, as the server's log keeper wrote it into the
                    // job's ConfigMap as the task ended.
                    use base64::Engine;
                    let b64 = base64::engine::general_purpose::STANDARD.encode(&log);
                    let map = pai_contract::kept_logs::config_map(&name);
                    let main =
                        pai_contract::kept_logs::key(&pod, 0, pai_contract::kept_logs::Part::Main);
                    let init =
                        pai_contract::kept_logs::key(&pod, 0, pai_contract::kept_logs::Part::Init);
                    if api.get("configmaps", NS, &map).is_none() {
                        api.create(
                            "configmaps",
                            NS,
                            json!({
                                "apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {
                                    "name": map,
                                    "labels": {pai_contract::meta::LABEL_MANAGED_BY: pai_contract::meta::MANAGED_BY},
                                },
                                "binaryData": {},
                            }),
                        );
                    }
                    api.modify("configmaps", NS, &map, |m| {
                        m["binaryData"][&main] = json!(b64);
                        m["binaryData"][&init] = json!("");
                    });
                }
            }
        }
        api.create("frameworks", NS, value);
    }
}

async fn get(
    http: &Client<hyper_util::client::legacy::connect::HttpConnector, Empty<hyper::body::Bytes>>,
    url: &str,
) -> Result<(u16, usize), String> {
    let request = http::Request::get(url)
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(Empty::new())
        .map_err(|e| e.to_string())?;
    let response = http.request(request).await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, body.len()))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
