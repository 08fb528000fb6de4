//! `cargo bench -p rest-lite --bench retire`: finished jobs retired into the job history
//! on a real control plane (#61).
//!
//! Needs `../shared/k8s-harness` started (`K8S_HARNESS` names it: its kubeconfig) and
//! PostgreSQL; without them it says so and ends (as `cargo test --benches` runs it). In a
//! new namespace, `RETIRE_JOBS` (10,000) one-task Frameworks are made completed (every
//! fifth failed), with their attempt history, each with its task's kept-log ConfigMap
//! as the runtime leaves it, 64 requests at a time. Then the release `rest-lite serve
//! --backend kube` (or `BENCH_REST_LITE`, an earlier build) starts with a job history in
//! a throwaway PostgreSQL (`frameworkKeptSec: 0`): it writes every job into the history,
//! copies its log and deletes its Framework. The result: the time from the server's
//! start to the first Framework gone, to every job written, to the last Framework gone,
//! and what the history holds; beside it, the floor: the API server's own deletion of
//! as many Frameworks (made again) in one DeleteCollection. The server's log goes to
//! `BENCH_SERVER_LOG` where set, at `BENCH_SERVER_RUST_LOG` (`warn`). What it prints it
//! also records under `benchmarks/results/` ([`pai_test_support::bench_results`]), as the
//! variant `<N>jobs`; a run of `BENCH_REST_LITE` records that build under its path.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use pai_contract::Framework;
use pai_translate::config::ClusterConfig;
use pai_translate::transform::Transformer;
use serde_json::json;

mod support;

const TOKEN: &str = "bench-token";
const AT_ONCE: usize = 64;

/// Completed Framework `i` of namespace `ns`, as FrameworkController leaves it and the
/// server's attempt history annotated it.
fn completed(transformer: &Transformer, i: usize) -> serde_json::Value {
    let text = json!({
        "jobName": format!("job{i}"), "image": "busybox",
        "taskRoles": [{"name": "worker", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128,
            "command": "echo done"}],
    })
    .to_string();
    let framework = support::framework_of(transformer, "bench", &text, i as u64);
    let mut value = pai_test_support::frameworks::to_value(&framework);
    let code = if i.is_multiple_of(5) { 1 } else { 0 };
    // Ended a minute ago: FrameworkController deletes a Framework that reached its state
    // (`transitionTime`) longer ago than its FrameworkCompletedRetainSec (30 days) itself.
    let now = jiff::Timestamp::now();
    let (started, ended) = (
        (now - jiff::SignedDuration::from_secs(120)).to_string(),
        (now - jiff::SignedDuration::from_secs(60)).to_string(),
    );
    value["status"] = json!({"state": "Completed", "startTime": started,
        "completionTime": ended, "transitionTime": ended,
        "retryPolicyStatus": {"totalRetriedCount": 0, "accountableRetriedCount": 0}});
    pai_test_support::frameworks::set_attempt(&mut value, 0, &format!("0_uid-{i}"));
    value["status"]["attemptStatus"]["startTime"] = json!(started);
    value["status"]["attemptStatus"]["completionTime"] = json!(ended);
    value["status"]["attemptStatus"]["completionStatus"] = serde_json::to_value(
        pai_contract::framework::CompletionStatus::of(code, format!("exit code {code}")),
    )
    .expect("json");
    let ended: Framework = serde_json::from_value(value.clone()).expect("a Framework");
    if let Some(history) = pai_job::attempts::with_current(&ended) {
        value["metadata"]["annotations"][pai_job::attempts::ANNOTATION] = json!(history);
    }
    value
}

/// The job's kept logs, as the server's log keeper wrote them as its task ended.
fn kept_log(framework: &str) -> ConfigMap {
    use base64::Engine;
    let pod = pai_contract::framework::pod_name(framework, "worker", 0);
    let log = format!("worker-0 of {framework}: done\n");
    serde_json::from_value(json!({
        "metadata": {
            "name": pai_contract::kept_logs::config_map(framework),
            "labels": {pai_contract::meta::LABEL_MANAGED_BY: pai_contract::meta::MANAGED_BY},
        },
        "binaryData": {
            pai_contract::kept_logs::key(&pod, 0, pai_contract::kept_logs::Part::Main):
                base64::engine::general_purpose::STANDARD.encode(log),
        },
    }))
    .expect("a ConfigMap")
}

/// Makes `jobs` completed Frameworks, and their kept logs where `maps` is given,
/// [`AT_ONCE`] requests at a time.
async fn make(
    frameworks: &Api<Framework>,
    maps: Option<&Api<ConfigMap>>,
    transformer: &Transformer,
    jobs: usize,
) {
    futures::stream::iter(0..jobs)
        .map(|i| {
            let value = completed(transformer, i);
            async move {
                let framework: Framework = serde_json::from_value(value).expect("Framework");
                let name = framework.metadata.name.clone().unwrap_or_default();
                frameworks
                    .create(&PostParams::default(), &framework)
                    .await
                    .expect("Framework created");
                if let Some(maps) = maps {
                    maps.create(&PostParams::default(), &kept_log(&name))
                        .await
                        .expect("ConfigMap created");
                }
            }
        })
        .buffer_unordered(AT_ONCE)
        .collect::<Vec<()>>()
        .await;
}

async fn left(frameworks: &Api<Framework>) -> usize {
    frameworks
        .list_metadata(&ListParams::default())
        .await
        .map(|l| l.items.len())
        .unwrap_or(usize::MAX)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let Some(harness) = std::env::var_os("K8S_HARNESS").map(PathBuf::from) else {
        eprintln!("retire: needs a started ../shared/k8s-harness (K8S_HARNESS names it); skipped");
        return;
    };
    let Some(postgres) = pai_test_support::postgres::Postgres::start() else {
        eprintln!("retire: needs PostgreSQL; skipped");
        return;
    };
    let jobs: usize = std::env::var("RETIRE_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 50 } else { 10_000 });
    let kubeconfig = harness.join("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig"),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("config");
    let client = Client::try_from(config).expect("client");
    let ns = format!("retire-bench-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).expect("namespace"),
        )
        .await
        .expect("namespace");
    let frameworks: Api<Framework> = Api::namespaced(client.clone(), &ns);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let transformer = Transformer::new(ClusterConfig {
        namespace: ns.clone(),
        ..ClusterConfig::default()
    });
    let made = Instant::now();
    make(&frameworks, Some(&maps), &transformer, jobs).await;
    eprintln!(
        "{jobs} completed Frameworks and their kept logs made in {:.1} s",
        made.elapsed().as_secs_f64()
    );

    let dir = std::env::temp_dir().join(format!("rest-lite-retire-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let tokens = support::admin_tokens(&dir, TOKEN);
    let config = dir.join("config.yaml");
    std::fs::write(&config, support::history_config(&postgres.connection())).expect("config");
    let binary = std::env::var("BENCH_REST_LITE")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_rest-lite").to_string());
    let started = Instant::now();
    let mut server = std::process::Command::new(&binary)
        .args(["serve", "--backend", "kube", "--listen", "127.0.0.1:0"])
        .args(["--namespace", &ns])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--token-file")
        .arg(&tokens)
        .arg("--config")
        .arg(&config)
        .env(
            "RUST_LOG",
            std::env::var("BENCH_SERVER_RUST_LOG").unwrap_or_else(|_| "warn".to_string()),
        )
        .stdout(std::process::Stdio::null())
        .stderr(match std::env::var_os("BENCH_SERVER_LOG") {
            Some(path) => std::fs::File::create(path).expect("server log").into(),
            None => std::process::Stdio::null(),
        })
        .spawn()
        .expect("rest-lite serve");
    let mut first_gone = None;
    let mut all_written = None;
    loop {
        let now = left(&frameworks).await;
        if now < jobs && first_gone.is_none() {
            first_gone = Some(started.elapsed());
        }
        if all_written.is_none()
            && postgres
                .psql("SELECT count(*) FROM rest_lite_jobs")
                .parse::<usize>()
                .is_ok_and(|n| n >= jobs)
        {
            all_written = Some(started.elapsed());
        }
        if now == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(1800),
            "{now} Frameworks left after 30 minutes"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let all_gone = started.elapsed();
    let records = postgres.psql("SELECT count(*) FROM rest_lite_jobs");
    let logs = postgres.psql("SELECT count(*) FROM rest_lite_logs");
    let rss = std::fs::read_to_string(format!("/proc/{}/status", server.id()))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .map(|l| l.split_whitespace().nth(1).unwrap_or("?").to_string())
        })
        .unwrap_or_default();
    println!(
        "| jobs | first Framework gone (s) | every job written (s) | every Framework gone (s) | records | logs | server RSS (kB) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {jobs} | {:.1} | {:.1} | {:.1} | {records} | {logs} | {rss} |",
        first_gone.unwrap_or_default().as_secs_f64(),
        all_written.unwrap_or(all_gone).as_secs_f64(),
        all_gone.as_secs_f64()
    );
    let mut results = pai_test_support::bench_results::Run::new("rest-lite", "retire")
        .variant(format!("{jobs}jobs"));
    let build = std::env::var("BENCH_REST_LITE")
        .unwrap_or_else(|_| pai_test_support::bench_results::THIS.to_string());
    let case = format!("{jobs} finished jobs");
    let number = |text: &str| text.trim().parse::<f64>().ok();
    for (metric, value, unit) in [
        (
            "first Framework gone",
            first_gone.map(|d| d.as_secs_f64()),
            "s",
        ),
        (
            "every job written",
            Some(all_written.unwrap_or(all_gone).as_secs_f64()),
            "s",
        ),
        ("every Framework gone", Some(all_gone.as_secs_f64()), "s"),
        ("records", number(&records), ""),
        ("logs", number(&logs), ""),
        ("server RSS", number(&rss), "kB"),
    ] {
        if let Some(value) = value {
            results.record_build(&build, &case, metric, value, unit);
        }
    }
    let _ = server.kill();
    let _ = server.wait();
    // The floor: the API server's own deletion of as many Frameworks (made again), in
    // one DeleteCollection.
    make(&frameworks, None, &transformer, jobs).await;
    let floor = Instant::now();
    let _ = frameworks
        .delete_collection(&DeleteParams::background(), &ListParams::default())
        .await
        .expect("DeleteCollection");
    while left(&frameworks).await > 0 {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let floor = floor.elapsed().as_secs_f64();
    println!(
        "\nfloor: the API server deleted {jobs} Frameworks (one DeleteCollection) in {floor:.1} s"
    );
    results.record_build(&build, &case, "floor: DeleteCollection", floor, "s");
    results.write();
    let _ = namespaces.delete(&ns, &DeleteParams::background()).await;
    let _ = std::fs::remove_dir_all(&dir);
}
