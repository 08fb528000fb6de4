//! `cargo bench -p rest-lite --bench local`: a 64-task job on the embedded default, from
//! submission to every user command running, and to SUCCEEDED.
//!
//! The real `rest-lite serve --backend local` (release build) runs with a fresh state
//! directory; this process submits over HTTP and is the clock. Every user command
//! writes one line into a FIFO the benchmark reads, then exits 0: the 64th line is
//! "every user command running"; the job's watch reaching SUCCEEDED is the end. The
//! server, 64 task trees (entry, prep, barrier, run, shell) and the clock share the
//! machine's cores.
//!
//! The floor, measured in the same run: the same user commands started directly by this
//! process, each `<shell> <script>` with the environment a task of the job had (worker 0
//! dumps it), to the last line in a FIFO; the shell is the one the runtime runs user
//! commands with (bash where there is one; `BENCH_SHELL` names another). The job's time
//! over the floor is what the platform adds. `BENCH_REST_LITE` runs another build of the
//! server (an earlier commit's, say) under the same harness; `BENCH_CODE_KIB` gives the
//! job a `codeDir` of that size, which every task copies.
//!
//! Where the CPU went, for the job's first round and for the floor, from submission (or the
//! floor's first start) to the last user command running: the machine's busy and idle
//! seconds (`/proc/stat`) and the server process's own (`/proc/PID/stat`: its threads, not
//! its tasks; the rest is the tasks' and this clock's). So a start slower than its floor
//! says whether it did more work or waited.
//!
//! What it prints it also records under `benchmarks/results/`
//! ([`pai_test_support::bench_results`]), as the variant `<N>tasks` (with `-<engine>` off
//! the host, `-code<K>k` with a `codeDir`, `-unsampled` without the sampler); a run of
//! `BENCH_REST_LITE` records that build under its path.

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use pai_client::Client;
use pai_test_support::bench_results::{Run, THIS, percentile};
use serde_json::json;

/// Tasks of the job unless `BENCH_TASKS` says otherwise (at least 5: four of one role,
/// the rest of another).
const DEFAULT_TASKS: u32 = 64;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let rounds: u32 = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(if quick { 1 } else { 10 });
    let tasks: u32 = std::env::var("BENCH_TASKS")
        .ok()
        .and_then(|t| t.parse().ok())
        .filter(|t| *t >= 5)
        .unwrap_or(DEFAULT_TASKS);
    let dir = std::env::temp_dir().join(format!("rest-lite-bench-local-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");

    let binary = std::env::var("BENCH_REST_LITE")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_rest-lite").to_string());
    let mut server = Command::new(&binary)
        .args(["serve", "--backend", "local", "--listen", "127.0.0.1:0"])
        .arg("--state-dir")
        .arg(dir.join("state"))
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .env(
            "REST_LITE_ENGINE",
            std::env::var("BENCH_ENGINE").unwrap_or_else(|_| "host".to_string()),
        )
        .stderr(Stdio::piped())
        .spawn()
        .expect("rest-lite serve");
    let url = support::url_of(&mut server, Duration::from_secs(30));
    // The server's own token, from its state directory, as the CLI finds it.
    let token = pai_server::machine_token::read(&dir.join("state")).expect("the server's token");
    let client = Client::new(&url, Some(token.clone()));

    // `BENCH_CODE_KIB`: the job has a `codeDir` of that many KiB (in 16 files), which each
    // task copies into its working directory before its command.
    let code_dir = std::env::var("BENCH_CODE_KIB")
        .ok()
        .and_then(|k| k.parse::<usize>().ok())
        .map(|kib| {
            let code = dir.join("code");
            std::fs::create_dir_all(&code).expect("code dir");
            for i in 0..16 {
                std::fs::write(
                    code.join(format!("part-{i}.py")),
                    vec![b'#'; kib * 1024 / 16],
                )
                .expect("code file");
            }
            code.display().to_string()
        });
    let (mut running, mut done) = (Vec::new(), Vec::new());
    let (mut health, mut gets) = (Vec::new(), Vec::new());
    let mut job_cpu = None;
    for round in 0..rounds {
        let fifo = dir.join(format!("up-{round}"));
        assert!(
            Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .expect("mkfifo")
                .success()
        );
        let lines = read_lines(&fifo);
        let name = format!("bench-{round}");
        let mut spec = json!({
            "jobName": name,
            "image": "busybox",
            "taskRoles": [
                {"name": "ps", "taskNumber": 4, "cpuNumber": 1, "memoryMB": 128,
                 "command": "echo \"ps $PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX\" >> \"$UP\""},
                {"name": "worker", "taskNumber": tasks - 4, "cpuNumber": 1, "memoryMB": 128,
                 "command": format!("{WORKER}\n[ \"$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX\" != 0 ] || env -0 > \"$UP.env\"")}
            ],
            "jobEnvs": {"UP": fifo.display().to_string()}
        });
        if let Some(code) = &code_dir {
            spec["codeDir"] = json!(code);
        }
        let spec = spec.to_string();
        let cpu_before = CpuUse::now(Some(server.id()));
        let started = Instant::now();
        client
            .submit("bench", &spec, pai_translate::spec::SpecFormat::Json)
            .await
            .expect("submitted");
        let (stop_sampling, sampling) = tokio::sync::watch::channel(false);
        let sampler = tokio::spawn(sample(
            Client::new(&url, Some(token.clone())),
            name.clone(),
            sampling,
        ));
        let mut changes = client.watch("bench", &name).await.expect("watch");
        let waited = tokio::task::spawn_blocking(move || {
            for _ in 0..tasks {
                lines
                    .recv_timeout(Duration::from_secs(120))
                    .expect("a user command");
            }
        });
        waited.await.expect("join");
        running.push(started.elapsed().as_secs_f64() * 1000.0);
        if job_cpu.is_none() {
            job_cpu = CpuUse::now(Some(server.id()))
                .zip(cpu_before)
                .map(|(after, before)| after.since(&before));
        }
        let mut last = None;
        while let Some(view) = changes.next().await {
            last = Some(view.expect("view"));
        }
        done.push(started.elapsed().as_secs_f64() * 1000.0);
        let _ = stop_sampling.send(true);
        let (h, g) = sampler.await.expect("sampler");
        health.extend(h);
        gets.extend(g);
        let state = last.map(|v| v.job_status.state);
        assert_eq!(state, Some(pai_api::status::JobState::Succeeded));
        client.delete("bench", &name).await.expect("delete");
    }
    let _ = server.kill();
    let _ = server.wait();
    let floor_cpu_before = CpuUse::now(None);
    let floor = floor(&dir, tasks);
    let floor_cpu = CpuUse::now(None)
        .zip(floor_cpu_before)
        .map(|(after, before)| after.since(&before));
    let _ = std::fs::remove_dir_all(&dir);

    let engine = std::env::var("BENCH_ENGINE").unwrap_or_else(|_| "host".to_string());
    let mut variant = format!("{tasks}tasks");
    if engine != "host" {
        variant.push_str(&format!("-{engine}"));
    }
    if let Ok(kib) = std::env::var("BENCH_CODE_KIB") {
        variant.push_str(&format!("-code{kib}k"));
    }
    if std::env::var("BENCH_SAMPLE_MS").is_ok_and(|v| v.trim() == "0") {
        variant.push_str("-unsampled");
    }
    let mut results = Run::new("rest-lite", "local").variant(variant);
    let build = std::env::var("BENCH_REST_LITE").unwrap_or_else(|_| THIS.to_string());
    let case = format!("{tasks}-task job");
    let mut record = |metric: &str, value: f64, unit: &str| {
        results.record_build(&build, &case, metric, value, unit);
    };
    for (&up, &end) in running.iter().zip(&done) {
        record("submit → every user command running", up, "ms");
        record("submit → SUCCEEDED", end, "ms");
        if let Some(floor) = floor {
            record("running / floor", up / floor, "×");
        }
    }
    running.sort_by(f64::total_cmp);
    done.sort_by(f64::total_cmp);
    record(
        "submit → every user command running: median",
        percentile(&running, 0.5),
        "ms",
    );
    record("submit → SUCCEEDED: median", percentile(&done, 0.5), "ms");
    if let Some(floor) = floor {
        record("floor", floor, "ms");
        record(
            "running / floor: median",
            percentile(&running, 0.5) / floor,
            "×",
        );
    }
    for (whose, cpu) in [("job", &job_cpu), ("floor", &floor_cpu)] {
        if let Some(cpu) = cpu {
            record(&format!("CPU busy, {whose}"), cpu.busy, "s");
            record(&format!("CPU idle, {whose}"), cpu.idle, "s");
            if let Some(server) = cpu.server {
                record("the server's CPU", server, "s");
            }
        }
    }
    println!("| {tasks}-task job | rounds | min ms | median ms | max ms |");
    println!("|---|---|---|---|---|");
    for (what, times) in [
        ("submit → every user command running", &running),
        ("submit → SUCCEEDED", &done),
    ] {
        println!(
            "| {what} | {} | {:.0} | {:.0} | {:.0} |",
            times.len(),
            times[0],
            percentile(times, 0.5),
            times[times.len() - 1]
        );
    }
    if let Some(floor) = floor {
        println!(
            "| floor: the same {tasks} commands started directly ({}) | 1 | {floor:.0} | {floor:.0} | {floor:.0} |",
            floor_shell()
        );
        println!(
            "| every user command running / floor | | {:.2} | {:.2} | {:.2} |",
            running[0] / floor,
            percentile(&running, 0.5) / floor,
            running[running.len() - 1] / floor
        );
    }
    println!();
    println!(
        "| CPU seconds, start to every user command running | busy | the server's | the rest (tasks, this clock) | idle |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (what, cpu) in [("job, first round", &job_cpu), ("floor", &floor_cpu)] {
        if let Some(cpu) = cpu {
            let server = cpu.server.unwrap_or(0.0);
            println!(
                "| {what} | {:.1} | {server:.1} | {:.1} | {:.1} |",
                cpu.busy,
                cpu.busy - server,
                cpu.idle
            );
        }
    }
    health.sort_by(f64::total_cmp);
    gets.sort_by(f64::total_cmp);
    println!();
    println!("| sampled every 100 ms while the job ran | samples | median ms | p99 ms | max ms |");
    println!("|---|---|---|---|---|");
    for (what, times) in [("GET /healthz", &health), ("GET of the job", &gets)] {
        if times.is_empty() {
            continue;
        }
        println!(
            "| {what} | {} | {:.1} | {:.1} | {:.1} |",
            times.len(),
            percentile(times, 0.5),
            percentile(times, 0.99),
            times[times.len() - 1]
        );
        record(&format!("{what}: samples"), times.len() as f64, "");
        record(&format!("{what}: median"), percentile(times, 0.5), "ms");
        record(&format!("{what}: p99"), percentile(times, 0.99), "ms");
        record(&format!("{what}: max"), times[times.len() - 1], "ms");
    }
    results.note(format!("the floor's shell: {}", floor_shell()));
    results.write();
}

/// CPU seconds spent so far (or, after [`CpuUse::since`], in a span): the machine's busy
/// and idle time, and the server process's.
#[derive(Clone, Copy)]
struct CpuUse {
    busy: f64,
    idle: f64,
    server: Option<f64>,
}

impl CpuUse {
    /// Now; `None` where `/proc/stat` cannot be read.
    fn now(server: Option<u32>) -> Option<Self> {
        // Clock ticks are USER_HZ, 100 a second on Linux.
        const TICK: f64 = 0.01;
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let ticks: Vec<f64> = stat
            .lines()
            .next()?
            .split_whitespace()
            .skip(1)
            .filter_map(|t| t.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal …
        let at = |i: usize| ticks.get(i).copied().unwrap_or(0.0);
        let busy = (at(0) + at(1) + at(2) + at(5) + at(6)) * TICK;
        let idle = (at(3) + at(4)) * TICK;
        let server = server
            .and_then(support::cpu_ticks)
            .map(|ticks| ticks as f64 * TICK);
        Some(Self { busy, idle, server })
    }

    fn since(&self, before: &Self) -> Self {
        let minus = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a - b);
        Self {
            busy: self.busy - before.busy,
            idle: self.idle - before.idle,
            server: minus(self.server, before.server),
        }
    }
}

/// The floor's shell: the one the runtime runs user commands with, unless `BENCH_SHELL`
/// names another (an earlier build's, which ran them with `/bin/sh`).
fn floor_shell() -> String {
    std::env::var("BENCH_SHELL").unwrap_or_else(|_| pai_kube_runtime::run::user_shell().to_string())
}

/// What every worker runs (worker 0 also dumps its environment for the floor).
const WORKER: &str = "echo \"worker $PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX\" >> \"$UP\"";

/// The floor, in ms: `tasks` shells running the workers' command with the environment a
/// task had (its index and `UP` set per shell), all started from here, to the last line.
fn floor(dir: &Path, tasks: u32) -> Option<f64> {
    let dump = std::fs::read(dir.join("up-0.env")).ok()?;
    let env: Vec<(String, String)> = dump
        .split(|b| *b == 0)
        .filter_map(|entry| {
            let entry = String::from_utf8_lossy(entry);
            let (k, v) = entry.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        })
        .filter(|(k, _)| k != "UP" && k != "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX")
        .collect();
    let script = dir.join("floor.sh");
    std::fs::write(&script, format!("{WORKER}\n")).ok()?;
    let fifo = dir.join("floor-up");
    Command::new("mkfifo").arg(&fifo).status().ok()?;
    let lines = read_lines(&fifo);
    let started = Instant::now();
    let mut children = Vec::new();
    for index in 0..tasks {
        let child = Command::new(floor_shell())
            .arg(&script)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env("UP", &fifo)
            .env(
                "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX",
                index.to_string(),
            )
            .stdout(Stdio::null())
            .spawn()
            .ok()?;
        children.push(child);
    }
    for _ in 0..tasks {
        lines.recv_timeout(Duration::from_secs(120)).ok()?;
    }
    let elapsed = started.elapsed().as_secs_f64() * 1000.0;
    for mut child in children {
        let _ = child.wait();
    }
    Some(elapsed)
}

/// Every 100 ms (`BENCH_SAMPLE_MS`) until told to stop: the time `/healthz` and `GET` of the job take, in
/// ms. A request still open at the next tick delays it (the samples are sequential), so
/// a slow answer shows as itself, never hidden by overlap.
async fn sample(
    client: Client,
    job: String,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> (Vec<f64>, Vec<f64>) {
    let (mut health, mut gets) = (Vec::new(), Vec::new());
    // `BENCH_SAMPLE_MS`: another period; 0 samples nothing (the job's start alone).
    let period: u64 = std::env::var("BENCH_SAMPLE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    if period == 0 {
        let _ = stop.changed().await;
        return (health, gets);
    }
    let mut tick = tokio::time::interval(Duration::from_millis(period));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return (health, gets),
        }
        let t = Instant::now();
        client.healthz().await.expect("/healthz");
        health.push(t.elapsed().as_secs_f64() * 1000.0);
        let t = Instant::now();
        client.job("bench", &job).await.expect("GET of the job");
        gets.push(t.elapsed().as_secs_f64() * 1000.0);
    }
}

/// Lines written into the FIFO at `path`, as they come (each task opens, writes, closes).
fn read_lines(path: &Path) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        // Opened for writing too: the FIFO never sees its last writer leave, so there is
        // no end of file to reopen after, and no moment without a reader in which a
        // task's write would fail with EPIPE (a reopening reader lost lines that way).
        let Ok(file) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
        else {
            return;
        };
        for line in BufReader::new(file).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}
