//! `cargo bench -p pai-barrier --bench release`: the barrier against the in-process API
//! server.
//!
//! 1. Release latency: a 100-task job waits; the API server receives the last address;
//!    the time until `wait` returns is measured, many times.
//! 2. API requests in a 60 s wait: the watch-based barrier and a frameworkbarrier-style
//!    10 s poll wait side by side on the same server for the same 60 s, then the last
//!    address arrives; requests are counted per Framework, with each one's release latency.
//!
//! What it prints it also records under `benchmarks/results/`
//! ([`pai_test_support::bench_results`]).

use std::time::{Duration, Instant};

use kube::Api;
use pai_barrier::readiness::is_ready;
use pai_barrier::{BarrierConfig, kube_source};
use pai_contract::Framework;
use pai_test_support::ApiServer;
use pai_test_support::bench_results::{Run, percentile};
use pai_test_support::frameworks::{NAMESPACE, address, framework, set_pod_ip, to_value};

fn config(name: &str) -> BarrierConfig {
    BarrierConfig {
        namespace: NAMESPACE.into(),
        name: name.into(),
        timeout: Duration::from_secs(600),
        reread: None,
        source: pai_barrier::Source::Framework,
    }
}

/// Creates a job of `tasks` tasks with every address but the last.
fn almost_ready(server: &ApiServer, name: &str, tasks: u32) {
    let mut value = to_value(&framework(name, &[("worker", tasks)]));
    for i in 0..tasks - 1 {
        set_pod_ip(&mut value, "worker", i, &address(0, i));
    }
    server.create("frameworks", NAMESPACE, value);
}

fn last_address(server: &ApiServer, name: &str, tasks: u32) {
    server.modify("frameworks", NAMESPACE, name, |f| {
        set_pod_ip(f, "worker", tasks - 1, &address(0, tasks - 1))
    });
}

/// frameworkbarrier's loop: get the Framework every `interval` until it is ready.
async fn poll(client: kube::Client, name: &str, interval: Duration) {
    let api: Api<Framework> = Api::namespaced(client, NAMESPACE);
    let mut tick = tokio::time::interval(interval);
    loop {
        tick.tick().await;
        if let Ok(f) = api.get(name).await
            && is_ready(&f)
        {
            return;
        }
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let mut run = Run::new("pai-barrier", "release");
    let server = ApiServer::start().await;
    let tasks = 100;

    let rounds = if quick { 3 } else { 200 };
    let mut latencies = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let name = format!("latency{round}");
        almost_ready(&server, &name, tasks);
        let before = server.requests().iter().filter(|r| r.is_watch()).count();
        let waiting = tokio::spawn({
            let client = server.client();
            let config = config(&name);
            async move { kube_source::wait(client, &config).await }
        });
        server.watches_started(before + 1).await;
        let start = Instant::now();
        last_address(&server, &name, tasks);
        waiting.await.expect("join").expect("passes");
        latencies.push(start.elapsed());
    }
    latencies.sort();
    println!(
        "release latency, {tasks}-task job, {rounds} rounds: min {} ms, median {} ms, p99 {} ms, max {} ms",
        ms(latencies[0]),
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.99)),
        ms(latencies[rounds - 1])
    );
    let job = format!("{tasks}-task job");
    for (stat, latency) in [
        ("min", latencies[0]),
        ("median", percentile(&latencies, 0.5)),
        ("p99", percentile(&latencies, 0.99)),
        ("max", latencies[rounds - 1]),
    ] {
        let metric = format!("release latency: {stat}");
        run.record(&job, &metric, latency.as_secs_f64() * 1e3, "ms");
    }
    run.record(&job, "rounds", rounds as f64, "");

    let wait = if quick {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(60)
    };
    let poll_interval = if quick {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(10)
    };
    almost_ready(&server, "watched", tasks);
    almost_ready(&server, "polled", tasks);
    let watched = tokio::spawn({
        let client = server.client();
        async move {
            kube_source::wait(client, &config("watched"))
                .await
                .map(|_| Instant::now())
        }
    });
    let polled = tokio::spawn({
        let client = server.client();
        async move {
            poll(client, "polled", poll_interval).await;
            Instant::now()
        }
    });
    tokio::time::sleep(wait).await; // the wait being measured, not a synchronisation
    let released = Instant::now();
    last_address(&server, "watched", tasks);
    last_address(&server, "polled", tasks);
    let watched_at = watched.await.expect("join").expect("passes");
    let polled_at = polled.await.expect("join");
    let count = |name: &str| {
        server
            .requests()
            .iter()
            .filter(|r| {
                r.uri.contains(&format!("frameworks/{name}"))
                    || r.uri.contains(&format!("metadata.name%3D{name}"))
                    || r.uri.contains(&format!("metadata.name={name}"))
            })
            .count()
    };
    println!(
        "{} s wait: watch barrier {} requests, released {} ms after the last address; {} s poll {} requests, released {} ms after",
        wait.as_secs(),
        count("watched"),
        ms(watched_at - released),
        poll_interval.as_secs_f64(),
        count("polled"),
        ms(polled_at - released)
    );
    let waited = format!("{} s wait", wait.as_secs());
    let poll = format!("{} s poll", poll_interval.as_secs_f64());
    for (who, requests, after) in [
        (
            "watch barrier".to_string(),
            count("watched"),
            watched_at - released,
        ),
        (poll, count("polled"), polled_at - released),
    ] {
        run.record(&waited, &format!("{who}: requests"), requests as f64, "");
        let metric = format!("{who}: released after the last address");
        run.record(&waited, &metric, after.as_secs_f64() * 1e3, "ms");
    }
    run.write();
}
