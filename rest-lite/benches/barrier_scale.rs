//! `cargo bench -p rest-lite --bench barrier_scale`: N barriers waiting on one N-task
//! Framework, on the in-process API server, with FrameworkController's status updates
//! played here: the attempt starts with every task's status (no address), then every
//! task's address is written one by one, the whole Framework rewritten each time.
//!
//! Two ways to wait, in the same run:
//! - `published`: the barriers wait for the attempt's peer table, which rest-lite's
//!   publisher (the real one, watching the Framework) writes once;
//! - `framework`: every barrier watches the whole Framework (no publisher).
//!
//! Counted by the API server: the response bytes and requests of the barriers (and of
//! the publisher). Timed here: last address written → table published → last barrier
//! released. Every barrier is a task of this process with its own client and connection;
//! the API server, the publisher and the N barriers share the machine's two cores.
//!
//! `BENCH_TASKS=100,400,1000` chooses N; `BENCH_FRAMEWORK_MAX=200` the largest N for
//! which the Framework watch is run too (its cost grows as N³). What it prints it also
//! records under `benchmarks/results/` ([`pai_test_support::bench_results`]).

use std::time::{Duration, Instant};

use pai_barrier::config::{Attempt, Source};
use pai_barrier::{BarrierConfig, kube_source, published};
use pai_cluster::backend::KubeBackend;
use pai_cluster::publisher::Publisher;
use pai_contract::meta;
use pai_test_support::ApiServer;
use pai_test_support::bench_results::Run;
use pai_test_support::frameworks::{NAMESPACE, address, framework, set_attempt, to_value};
use serde_json::{Value, json};

const NAME: &str = "scale";
const INSTANCE: &str = "0_4b1d-attempt";

/// The Framework as FrameworkController has it once the attempt started: every task's
/// status, none with an address yet.
fn started(tasks: u32) -> Value {
    let mut value = to_value(&framework(NAME, &[("worker", tasks)]));
    value["metadata"]["labels"] = json!({meta::LABEL_MANAGED_BY: meta::MANAGED_BY});
    set_attempt(&mut value, 0, INSTANCE);
    value["status"]["state"] = "AttemptRunning".into();
    let statuses: Vec<Value> = (0..tasks)
        .map(|i| {
            json!({
                "index": i, "state": "AttemptCreationRequested",
                "startTime": "2026-11-22T10:00:00Z", "transitionTime": "2026-11-22T10:00:01Z",
                "retryPolicyStatus": {"totalRetriedCount": 0, "accountableRetriedCount": 0},
                "attemptStatus": {
                    "id": 0, "startTime": "2026-11-22T10:00:00Z",
                    "instanceUID": format!("0_{:08x}-0000-4000-8000-{:012x}", i, i),
                    "podName": format!("{NAME}-worker-{i}"),
                    "podUID": format!("{:08x}-0000-4000-8000-{:012x}", i, i),
                    "podNodeName": format!("node-{}", i % 50),
                }
            })
        })
        .collect();
    value["status"]["attemptStatus"]["taskRoleStatuses"] =
        json!([{"name": "worker", "instanceUID": "role-uid", "taskStatuses": statuses}]);
    value
}

struct Outcome {
    framework_bytes: usize,
    to_last_release_after_last_address: Duration,
    published_after_last_address: Option<Duration>,
    last_release_after_publication: Option<Duration>,
    barrier_bytes: u64,
    barrier_requests: usize,
    publisher_bytes: u64,
    /// CPU time of this process (API server, publisher, barriers) from publication (or
    /// the last address) to the last release.
    release_cpu: Duration,
}

/// CPU time (user + system) this process has used.
fn cpu_now() -> Duration {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .expect("getrusage");
    let tv = |t: nix::sys::time::TimeVal| {
        Duration::from_secs(t.tv_sec() as u64) + Duration::from_micros(t.tv_usec() as u64)
    };
    tv(usage.user_time()) + tv(usage.system_time())
}

async fn run(tasks: u32, way: &str) -> Outcome {
    let server = ApiServer::start().await;
    let stored = server.create("frameworks", NAMESPACE, started(tasks));
    let framework_bytes = serde_json::to_vec(&stored).map_or(0, |b| b.len());
    let publishing = way == "published";
    let publisher = publishing.then(|| {
        let store = KubeBackend::store_only(server.client(), NAMESPACE, &server.url());
        tokio::spawn(Publisher::new(server.client(), NAMESPACE).run(store))
    });
    let source = if publishing {
        Source::Published(Attempt {
            id: 0,
            instance_uid: INSTANCE.to_string(),
        })
    } else {
        Source::Framework
    };
    let mut barriers = Vec::with_capacity(tasks as usize);
    for _ in 0..tasks {
        let client = server.client();
        let config = BarrierConfig {
            namespace: NAMESPACE.into(),
            name: NAME.into(),
            timeout: Duration::from_secs(1800),
            reread: None,
            source: source.clone(),
        };
        barriers.push(tokio::spawn(async move {
            let passed = kube_source::wait(client, &config).await;
            (Instant::now(), passed.map(|p| p.peers.task_count()))
        }));
    }
    server
        .watches_started(tasks as usize + usize::from(publishing))
        .await;
    let table = published::object_name(NAME);
    let publication = {
        let waiter = server.wait_for("configmaps", NAMESPACE, &table, |_| true);
        async move {
            waiter.await;
            Instant::now()
        }
    };
    let publication = publishing.then_some(publication);
    let mut last_address = Instant::now();
    let writes = async {
        for i in 0..tasks {
            server.modify("frameworks", NAMESPACE, NAME, |f| {
                let task = &mut f["status"]["attemptStatus"]["taskRoleStatuses"][0]["taskStatuses"]
                    [i as usize];
                task["state"] = "AttemptRunning".into();
                task["attemptStatus"]["podIP"] = address(0, i).into();
                task["attemptStatus"]["podHostIP"] = format!("192.0.2.{}", i % 50).into();
            });
            // FrameworkController writes between its other work: let others run.
            tokio::task::yield_now().await;
        }
        last_address = Instant::now();
    };
    let published_at = match publication {
        Some(p) => {
            let (at, ()) = tokio::join!(p, writes);
            Some(at)
        }
        None => {
            writes.await;
            None
        }
    };
    let cpu_at_publication = cpu_now();
    let mut last_release = last_address;
    for barrier in barriers {
        let (at, passed) = barrier.await.expect("join");
        assert_eq!(passed.expect("passes"), tasks as usize);
        last_release = last_release.max(at);
    }
    let release_cpu = cpu_now().saturating_sub(cpu_at_publication);
    if let Some(p) = publisher {
        p.abort();
    }
    let requests = server.requests();
    let is_publisher = |uri: &str| uri.contains("labelSelector");
    let barrier: Vec<_> = requests
        .iter()
        .filter(|r| r.uri.contains("fieldSelector"))
        .collect();
    Outcome {
        framework_bytes,
        to_last_release_after_last_address: last_release.saturating_duration_since(last_address),
        published_after_last_address: published_at
            .map(|p| p.saturating_duration_since(last_address)),
        last_release_after_publication: published_at
            .map(|p| last_release.saturating_duration_since(p)),
        barrier_bytes: barrier.iter().map(|r| r.bytes_sent).sum(),
        barrier_requests: barrier.len(),
        publisher_bytes: requests
            .iter()
            .filter(|r| is_publisher(&r.uri))
            .map(|r| r.bytes_sent)
            .sum(),
        release_cpu,
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn mb(bytes: u64) -> String {
    format!("{:.2} MB", bytes as f64 / 1e6)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let sizes: Vec<u32> = std::env::var("BENCH_TASKS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| {
            if quick {
                vec![20]
            } else {
                vec![100, 400, 1000]
            }
        });
    let framework_max: u32 = std::env::var("BENCH_FRAMEWORK_MAX")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let mut results = Run::new("rest-lite", "barrier_scale");
    println!(
        "| N | way | Framework | last address → published | published → last release | last address → last release | CPU after | to the barriers | requests | to the publisher |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for &n in &sizes {
        for way in ["published", "framework"] {
            if way == "framework" && n > framework_max {
                continue;
            }
            let o = run(n, way).await;
            println!(
                "| {n} | {way} | {} | {} | {} | {} | {} | {} | {} | {} |",
                mb(o.framework_bytes as u64),
                o.published_after_last_address.map_or("–".into(), ms),
                o.last_release_after_publication.map_or("–".into(), ms),
                ms(o.to_last_release_after_last_address),
                ms(o.release_cpu),
                mb(o.barrier_bytes),
                o.barrier_requests,
                if way == "published" {
                    mb(o.publisher_bytes)
                } else {
                    "–".into()
                },
            );
            let case = format!("N = {n}, {way}");
            let millis = |d: Duration| d.as_secs_f64() * 1000.0;
            let megabytes = |b: u64| b as f64 / 1e6;
            let mut record = |metric: &str, value: f64, unit: &str| {
                results.record(&case, metric, value, unit);
            };
            record("Framework", megabytes(o.framework_bytes as u64), "MB");
            if let Some(d) = o.published_after_last_address {
                record("last address → published", millis(d), "ms");
            }
            if let Some(d) = o.last_release_after_publication {
                record("published → last release", millis(d), "ms");
            }
            let release = millis(o.to_last_release_after_last_address);
            record("last address → last release", release, "ms");
            record("CPU after", millis(o.release_cpu), "ms");
            record("to the barriers", megabytes(o.barrier_bytes), "MB");
            record("requests", o.barrier_requests as f64, "");
            if way == "published" {
                record("to the publisher", megabytes(o.publisher_bytes), "MB");
            }
        }
    }
    results.write();
}
