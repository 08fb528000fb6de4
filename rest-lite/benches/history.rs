//! `cargo bench -p rest-lite --bench history`: a server that has run many jobs (#53).
//!
//! The real `rest-lite serve --backend local` (release build) gets `HISTORY_JOBS` jobs
//! (10,000 by default; 200 without `--bench`) of one task each from 8 concurrent
//! submitters, every fifth failing, and runs them to their ends. Then, for each build
//! named (`HISTORY_BUILDS=old:/path/rest-lite,new:/path/rest-lite`; default: this
//! build alone), on the same state directory: the server starts, and the time to its
//! first answer to a page of the job list is the restart; one connection then asks each
//! kind of read back to back, timed per request; the server's RSS after the reads and
//! the state directory's size end the row. Every job is finished when the reads run:
//! the reads are of a server's history, not of its running jobs. `HISTORY_STATE=DIR`
//! reads an earlier run's state directory (copied first: a build may change it) instead
//! of making one. Before the reads, the first build's resident memory a minute after the
//! jobs ended, in the server that ran them and in the same build restarted on their
//! state, then again once that restarted server has run one job more (#60: what a
//! long-running server holds against what the jobs' data needs; the growth per job is
//! over the server's own before its first job);
//! `HISTORY_SMAPS=FILE` keeps the first server's `/proc/PID/smaps` as it is read. As a
//! benchmark it fails when those figures miss their aims ([`AIM_RATIO`], [`AIM_GROWTH`]).
//!
//! What it prints it also records under `benchmarks/results/`
//! ([`pai_test_support::bench_results`]), as the variant `<N>jobs`; each build under its
//! name (the default's, this commit's, as `this`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pai_test_support::bench_results::{Run, THIS, percentile};
use serde_json::json;

mod support;

const SUBMITTERS: usize = 8;

/// The build's name when `HISTORY_BUILDS` names none.
const DEFAULT_BUILD: &str = "this build";

/// A build's name in the results: the default's is this commit's own.
fn recorded_as(name: &str) -> &str {
    if name == DEFAULT_BUILD { THIS } else { name }
}

struct Read {
    name: &'static str,
    path: String,
    times: usize,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let jobs: usize = std::env::var("HISTORY_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 200 } else { 10_000 });
    let builds: Vec<(String, PathBuf)> = std::env::var("HISTORY_BUILDS")
        .ok()
        .map(|v| {
            v.split(',')
                .filter_map(|b| b.split_once(':'))
                .map(|(name, path)| (name.to_string(), PathBuf::from(path)))
                .collect()
        })
        .unwrap_or_else(|| {
            vec![(
                DEFAULT_BUILD.to_string(),
                PathBuf::from(env!("CARGO_BIN_EXE_rest-lite")),
            )]
        });
    let mut results = Run::new("rest-lite", "history").variant(format!("{jobs}jobs"));
    let dir = std::env::temp_dir().join(format!("rest-lite-bench-history-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let state = dir.join("state");

    // `HISTORY_STATE`: a state directory from an earlier run, read as it is.
    if let Ok(kept) = std::env::var("HISTORY_STATE") {
        for (name, binary) in &builds {
            let copy = dir.join(format!("state-{}", name.replace(' ', "-")));
            let copied = Command::new("cp")
                .arg("-a")
                .arg(&kept)
                .arg(&copy)
                .status()
                .expect("cp");
            assert!(copied.success(), "cannot copy {kept}");
            run_reads(&[(name.clone(), binary.clone())], &copy, jobs, &mut results).await;
        }
        results.write();
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    // The jobs, run by the first build.
    let (server, url, token) = start(&builds[0].1, &state);
    let server = Running(server);
    // The server before any job: the growth per job below is over this.
    settle(server.0.id()).await;
    let empty = Memory::of(server.0.id());
    let made = Instant::now();
    submit_all(&url, &token, 0..jobs).await;
    let submitted = made.elapsed();
    wait_ended(&reqwest_like::Http::new(&url, &token), made).await;
    eprintln!(
        "{jobs} jobs submitted in {:.1} s, all ended {:.1} s after the first",
        submitted.as_secs_f64(),
        made.elapsed().as_secs_f64()
    );
    // The memory of the server that ran them, once settled and a minute on (its
    // once-a-minute look has come): what a long-running server holds for them. Without
    // `--bench` (the test suite's run) no minute is waited.
    let minute = Duration::from_secs(if quick { 0 } else { 65 });
    settle(server.0.id()).await;
    tokio::time::sleep(minute).await;
    let ran = Memory::of(server.0.id());
    // Where that memory is, mapping by mapping, for a reader who asks.
    if let Some(path) = std::env::var_os("HISTORY_SMAPS") {
        let smaps = std::fs::read(format!("/proc/{}/smaps", server.0.id())).expect("smaps");
        std::fs::write(path, smaps).expect("smaps written");
    }
    drop(server);
    // The same build restarted on that state, settled: what the jobs' data needs. Then
    // one job more, run to its end: a server that has run a job has the code of a job's
    // path resident (file pages of the binary, which one that read its state only has
    // not), so this second figure tells the per-job leftovers from that fixed cost.
    let (restarted, one_more) = {
        let (server, url, token) = start(&builds[0].1, &state);
        let server = Running(server);
        settle(server.0.id()).await;
        tokio::time::sleep(minute).await;
        let restarted = Memory::of(server.0.id());
        let since = Instant::now();
        submit_all(&url, &token, jobs..jobs + 1).await;
        wait_ended(&reqwest_like::Http::new(&url, &token), since).await;
        settle(server.0.id()).await;
        tokio::time::sleep(minute).await;
        (restarted, Memory::of(server.0.id()))
    };
    let mib = |kib: u64| kib as f64 / 1024.0;
    let per_job = |m: &Memory| m.rss.saturating_sub(empty.rss) as f64 / jobs as f64;
    println!(
        "\n{jobs} finished jobs, {}: RSS {:.1} MiB in the server that ran them, {:.1} MiB restarted on their state: {:.2}x; {:.1} MiB restarted and then one job run: {:.2}x",
        builds[0].0,
        mib(ran.rss),
        mib(restarted.rss),
        ran.rss as f64 / restarted.rss.max(1) as f64,
        mib(one_more.rss),
        ran.rss as f64 / one_more.rss.max(1) as f64,
    );
    println!(
        "growth over the server before any job ({:.1} MiB): {:.1} KiB per finished job in the server that ran them, {:.1} restarted",
        mib(empty.rss),
        per_job(&ran),
        per_job(&restarted),
    );
    println!(
        "anonymous (heap, stacks; no code pages): {:.1} MiB against {:.1} MiB restarted ({:.2}x), {:.1} MiB restarted and then one job run ({:.2}x); {:.1} MiB before any job",
        mib(ran.anon),
        mib(restarted.anon),
        ran.anon as f64 / restarted.anon.max(1) as f64,
        mib(one_more.anon),
        ran.anon as f64 / one_more.anon.max(1) as f64,
        mib(empty.anon),
    );
    let case = format!("{jobs} finished jobs");
    let mut record = |metric: &str, value: f64, unit: &str| {
        results.record_build(recorded_as(&builds[0].0), &case, metric, value, unit);
    };
    let ratio = |a: u64, b: u64| a as f64 / b.max(1) as f64;
    record("RSS before any job", mib(empty.rss), "MiB");
    record("RSS, the server that ran them", mib(ran.rss), "MiB");
    record("RSS, restarted on their state", mib(restarted.rss), "MiB");
    record("ran / restarted", ratio(ran.rss, restarted.rss), "×");
    record("RSS, restarted then one job", mib(one_more.rss), "MiB");
    record(
        "ran / restarted then one job",
        ratio(ran.rss, one_more.rss),
        "×",
    );
    record("growth per finished job, ran", per_job(&ran), "KiB");
    record(
        "growth per finished job, restarted",
        per_job(&restarted),
        "KiB",
    );
    record("anonymous before any job", mib(empty.anon), "MiB");
    record("anonymous, ran", mib(ran.anon), "MiB");
    record("anonymous, restarted", mib(restarted.anon), "MiB");
    record(
        "anonymous, restarted then one job",
        mib(one_more.anon),
        "MiB",
    );
    run_reads(&builds, &state, jobs + 1, &mut results).await;
    results.write();
    let _ = std::fs::remove_dir_all(&dir);
    // The aims (`pai_backend::memory`), as a benchmark: without `--bench` the jobs are
    // too few and no minute is waited for the figures to mean them.
    let ratio = ratio(ran.rss, one_more.rss);
    let growth = per_job(&ran) * 1024.0;
    if !quick && (ratio > AIM_RATIO || growth > AIM_GROWTH) {
        eprintln!(
            "FAILED: the server that ran {jobs} jobs holds {ratio:.2}x what it holds restarted then one job (at most {AIM_RATIO}x), {growth:.0} bytes more per finished job (at most {AIM_GROWTH:.0})"
        );
        std::process::exit(1);
    }
}

/// The most a server that ran the jobs may hold against the same build restarted on
/// their state, once it has run one job.
const AIM_RATIO: f64 = 1.2;

/// The most bytes a server's memory may grow by per finished job.
const AIM_GROWTH: f64 = 20_000.0;

/// A server's resident memory, in KiB: all of it, and its anonymous part.
struct Memory {
    rss: u64,
    anon: u64,
}

impl Memory {
    fn of(pid: u32) -> Self {
        Self {
            rss: support::rss(pid),
            anon: support::rss_anon(pid),
        }
    }
}

/// Returns once no job is running or waiting (polled every 2 s; an hour at most from
/// `since`).
async fn wait_ended(http: &reqwest_like::Http, since: Instant) {
    loop {
        let (status, body) = http
            .get("/api/v2/jobs?withTotalCount=true&limit=1&state=RUNNING")
            .await;
        let (_, waiting) = http
            .get("/api/v2/jobs?withTotalCount=true&limit=1&state=WAITING")
            .await;
        let count = |body: &str| {
            serde_json::from_str::<serde_json::Value>(body)
                .ok()
                .and_then(|v| v["totalCount"].as_u64())
                .unwrap_or(u64::MAX)
        };
        if status == 200 && count(&body) == 0 && count(&waiting) == 0 {
            return;
        }
        assert!(
            since.elapsed() < Duration::from_secs(3600),
            "the jobs never ended"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Each build on `state` in turn: its restart, the reads, its memory and the disk.
async fn run_reads(builds: &[(String, PathBuf)], state: &Path, jobs: usize, results: &mut Run) {
    let reads = [
        Read {
            name: "v2 page of 20, first",
            path: "/api/v2/jobs?limit=20".into(),
            times: 100,
        },
        Read {
            name: "v2 page of 20, middle",
            path: format!("/api/v2/jobs?limit=20&offset={}", jobs / 2),
            times: 100,
        },
        Read {
            name: "v2 page of 20, FAILED",
            path: "/api/v2/jobs?limit=20&state=FAILED".into(),
            times: 100,
        },
        Read {
            name: "v2 page of 20, searched",
            path: "/api/v2/jobs?limit=20&keyword=job-00042".into(),
            times: 100,
        },
        Read {
            name: "v1 page of 20",
            path: "/api/v1/jobs?limit=20".into(),
            times: 100,
        },
        Read {
            name: "one job",
            path: format!("/api/v1/user/u{}/jobs/job-{:05}", (jobs / 2) % 7, jobs / 2),
            times: 100,
        },
        Read {
            name: "portal job list",
            path: "/ui/jobs".into(),
            times: 20,
        },
        Read {
            name: "every job (v1)",
            path: "/api/v1/jobs".into(),
            times: 10,
        },
    ];
    println!("\n{jobs} finished jobs, one connection, reads back to back\n");
    println!("| build | read | p50 ms | p99 ms | body bytes |");
    println!("|---|---|---:|---:|---:|");
    let mut footer = Vec::new();
    for (name, binary) in builds {
        let started = Instant::now();
        let (server, url, token) = start(binary, state);
        let server = Running(server);
        let http = reqwest_like::Http::new(&url, &token);
        let mut first = None;
        while first.is_none() {
            let (status, _) = http.get("/api/v2/jobs?limit=20").await;
            if status == 200 {
                first = Some(started.elapsed());
            } else {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        // The reads are of a settled server: its start-up work (each job taken up again)
        // done.
        settle(server.0.id()).await;
        let settled = started.elapsed();
        for read in &reads {
            let mut times = Vec::with_capacity(read.times);
            let mut bytes = 0;
            for _ in 0..read.times {
                let at = Instant::now();
                let (status, body) = http.get(&read.path).await;
                times.push(at.elapsed().as_secs_f64() * 1000.0);
                assert_eq!(status, 200, "{}: {body}", read.path);
                bytes = body.len();
            }
            times.sort_by(f64::total_cmp);
            println!(
                "| {name} | {} | {:.2} | {:.2} | {bytes} |",
                read.name,
                percentile(&times, 0.5),
                percentile(&times, 0.99)
            );
            let build = recorded_as(name);
            results.record_build(build, read.name, "p50", percentile(&times, 0.5), "ms");
            results.record_build(build, read.name, "p99", percentile(&times, 0.99), "ms");
            results.record_build(build, read.name, "body", bytes as f64, "B");
        }
        let rss = support::rss(server.0.id());
        let first_page = first.unwrap_or_default().as_secs_f64();
        let size = du(state) as f64 / (1024.0 * 1024.0);
        for (metric, value, unit) in [
            ("first page after start", first_page, "s"),
            ("settled after start", settled.as_secs_f64(), "s"),
            ("RSS after the reads", rss as f64 / 1024.0, "MiB"),
            ("state directory", size, "MiB"),
        ] {
            results.record_build(recorded_as(name), "restart", metric, value, unit);
        }
        footer.push(format!(
            "{name}: first page {:.2} s after start (the process's start to its first 200), settled {:.1} s after start; RSS {} MiB after the reads ({:.1} KiB per job); state directory {} MiB",
            first.unwrap_or_default().as_secs_f64(),
            settled.as_secs_f64(),
            rss / 1024,
            rss as f64 / jobs as f64,
            du(state) / (1024 * 1024),
        ));
        drop(server);
    }
    println!();
    for line in footer {
        println!("- {line}");
    }
}

/// `rest-lite serve` of `binary` on `state`; its URL and machine token once it answers.
fn start(binary: &Path, state: &Path) -> (Child, String, String) {
    let mut server = Command::new(binary)
        .args(["serve", "--backend", "local", "--listen", "127.0.0.1:0"])
        .arg("--state-dir")
        .arg(state)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .env("REST_LITE_ENGINE", "host")
        .stderr(Stdio::piped())
        .spawn()
        .expect("rest-lite serve");
    let url = support::url_of(&mut server, Duration::from_secs(600));
    let token = std::fs::read_to_string(state.join("token"))
        .expect("the machine token")
        .trim()
        .to_string();
    (server, url, token)
}

/// Ends the server (TERM, then waits) however the bench ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        stop(&mut self.0);
    }
}

fn stop(server: &mut Child) {
    let _ = nix_term(server.id());
    let _ = server.wait();
}

fn nix_term(pid: u32) -> std::io::Result<()> {
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other("kill failed"))
    }
}

/// `jobs` one-task jobs from [`SUBMITTERS`] concurrent clients: job i of user `u{i % 7}`,
/// failing when i is a multiple of 5.
async fn submit_all(url: &str, token: &str, jobs: std::ops::Range<usize>) {
    let mut handles = Vec::new();
    for s in 0..SUBMITTERS {
        let http = reqwest_like::Http::new(url, token);
        let range = jobs.clone();
        handles.push(tokio::spawn(async move {
            for i in range.skip(s).step_by(SUBMITTERS) {
                let user = format!("u{}", i % 7);
                let command = if i % 5 == 0 { "exit 1" } else { "true" };
                let spec = json!({
                    "jobName": format!("job-{i:05}"), "image": "busybox",
                    "taskRoles": [{"name": "worker", "taskNumber": 1, "cpuNumber": 1,
                        "memoryMB": 64, "command": command}],
                })
                .to_string();
                let (status, body) = http.post(&format!("/api/v1/user/{user}/jobs"), &spec).await;
                assert_eq!(status, 202, "{body}");
            }
        }));
    }
    for handle in handles {
        handle.await.expect("submitter");
    }
}

/// Returns once the CPU time of `pid` was still for a second.
async fn settle(pid: u32) {
    let mut cpu = support::cpu_ticks(pid);
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = support::cpu_ticks(pid);
        if now == cpu {
            return;
        }
        cpu = now;
    }
}

fn du(path: &Path) -> u64 {
    let output = Command::new("du")
        .args(["-sb", "--exclude=run"])
        .arg(path)
        .output()
        .expect("du");
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A keep-alive HTTP/1.1 client with the bearer token: hyper's, as the store bench uses.
mod reqwest_like {
    use http_body_util::{BodyExt, Full};
    use hyper_util::client::legacy::Client;
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::rt::TokioExecutor;

    pub struct Http {
        client: Client<HttpConnector, Full<hyper::body::Bytes>>,
        base: String,
        token: String,
    }

    impl Http {
        pub fn new(base: &str, token: &str) -> Self {
            Self {
                client: Client::builder(TokioExecutor::new()).build_http(),
                base: base.trim_end_matches('/').to_string(),
                token: token.to_string(),
            }
        }

        pub async fn get(&self, path: &str) -> (u16, String) {
            self.send("GET", path, String::new()).await
        }

        pub async fn post(&self, path: &str, body: &str) -> (u16, String) {
            self.send("POST", path, body.to_string()).await
        }

        async fn send(&self, method: &str, path: &str, body: String) -> (u16, String) {
            let request = http::Request::builder()
                .method(method)
                .uri(format!("{}{path}", self.base))
                .header("authorization", format!("Bearer {}", self.token))
                .header("content-type", "application/json")
                .body(Full::new(hyper::body::Bytes::from(body)))
                .expect("request");
            match self.client.request(request).await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    let body = response
                        .into_body()
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    (status, String::from_utf8_lossy(&body).into_owned())
                }
                Err(e) => (0, e.to_string()),
            }
        }
    }
}
