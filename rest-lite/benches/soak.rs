//! `cargo bench -p rest-lite --bench soak`: the embedded default while its server is
//! killed -9 at random moments and started again on the same state directory.
//!
//! One thread kills the real `rest-lite serve` (SIGKILL) every 0.3–3 s and starts it
//! again at once; meanwhile this process submits small jobs (three tasks, each sleeping
//! a little, then exiting 0 or 3, chosen per job), deletes some of them, and lists
//! every job between operations. What it counts, all of which must be 0:
//!
//! - lost: a job whose submission was answered 202 and was not deleted, missing from a
//!   list;
//! - resurrected: a job whose deletion was answered 202, present in a later list;
//! - wrong final state: a job ending other than its command says (exit 0 SUCCEEDED,
//!   exit 3 FAILED): an interrupted attempt is retried as on a cluster, so kills never
//!   change the outcome;
//! - tasks left running with no job: once every job is final, any process whose
//!   environment carries this run's marker.
//!
//! A request cut by a kill has no answer: its job may or may not exist, and is then
//! held to the same rules if it does. `SOAK_SECONDS` sets the killing phase (300 with
//! `--bench`; a few seconds as a test). What it prints it also records under
//! `benchmarks/results/` ([`pai_test_support::bench_results`]), as the variant `<S>s`,
//! before it asserts: a run that found something is kept too.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pai_api::status::JobState;
use pai_client::{Client, ClientError};
use pai_translate::spec::SpecFormat;
use serde_json::json;

const USER: &str = "soak";

/// What a job's command does.
#[derive(Clone, Copy)]
struct Plan {
    sleep_tenths: u32,
    code: i32,
}

impl Plan {
    fn expected(self) -> JobState {
        if self.code == 0 {
            JobState::Succeeded
        } else {
            JobState::Failed
        }
    }
}

/// What this process knows of each job.
#[derive(Default)]
struct Ledger {
    /// Answered 202, with its plan.
    submitted: BTreeMap<String, Plan>,
    /// Sent, no answer (cut by a kill).
    maybe_submitted: BTreeMap<String, Plan>,
    /// Deletion answered 202.
    deleted: BTreeSet<String>,
    /// Deletion sent, no answer.
    maybe_deleted: BTreeSet<String>,
    lost: BTreeSet<String>,
    resurrected: BTreeSet<String>,
    lists: u32,
}

/// The server and how to reach it; replaced by the killer.
struct Running {
    child: Child,
    url: String,
}

fn start(state: &Path) -> Running {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rest-lite"))
        .args(["serve", "--backend", "local", "--listen", "127.0.0.1:0"])
        .arg("--state-dir")
        .arg(state)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .env(
            "REST_LITE_ENGINE",
            std::env::var("BENCH_ENGINE").unwrap_or_else(|_| "host".to_string()),
        )
        .stderr(Stdio::piped())
        .spawn()
        .expect("rest-lite serve");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        let mut said = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(url) = line.split("url=").nth(1)
                && let Some(tx) = tx.take()
            {
                let url = url.split_whitespace().next().unwrap_or_default();
                let _ = tx.send(Ok(url.to_string()));
            }
            if tx.is_some() {
                said.push(line);
            }
        }
        if let Some(tx) = tx {
            let _ = tx.send(Err(said.join("\n")));
        }
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Ok(url)) => Running { child, url },
        Ok(Err(said)) => panic!("the server ended before it served:\n{said}"),
        Err(e) => panic!("no start-up line from the server: {e}"),
    }
}

/// A small random number source: the clock's nanoseconds through a hasher.
fn random(below: u32) -> u32 {
    use std::hash::{BuildHasher, RandomState};
    (RandomState::new().hash_one(Instant::now()) % u64::from(below.max(1))) as u32
}

fn spec(name: &str, plan: Plan, marker: &str) -> String {
    json!({
        "jobName": name,
        "image": "busybox",
        "taskRoles": [{
            "name": "worker", "taskNumber": 3, "cpuNumber": 1, "memoryMB": 128,
            "command": format!("sleep {}.{}; exit {}", plan.sleep_tenths / 10, plan.sleep_tenths % 10, plan.code),
        }],
        "jobEnvs": {"SOAK_RUN": marker},
    })
    .to_string()
}

/// Processes whose environment holds `SOAK_RUN=<marker>`.
fn marked_processes(marker: &str) -> Vec<u32> {
    let needle = format!("SOAK_RUN={marker}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == needle.as_bytes()))
        })
        .collect()
}

fn client_of(running: &Mutex<Running>, token: &str) -> Client {
    let url = running
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .url
        .clone();
    Client::new(&url, Some(token.to_string()))
}

fn cut(error: &ClientError) -> bool {
    error.is_transient()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let seconds: u64 = std::env::var("SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if quick { 4 } else { 300 });
    let dir: PathBuf = std::env::temp_dir().join(format!("rest-lite-soak-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let state = dir.join("state");
    let marker = format!("{}-{}", std::process::id(), random(1_000_000));

    let running = Arc::new(Mutex::new(start(&state)));
    let token = pai_server::machine_token::read(&state).expect("the server's token");
    let deadline = Instant::now() + Duration::from_secs(seconds);

    // The killer: SIGKILL at a random moment, then the same server again.
    let kills = {
        let running = running.clone();
        let state = state.clone();
        std::thread::spawn(move || {
            let mut kills = 0u32;
            while Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(300 + u64::from(random(2_700))));
                let mut guard = running.lock().unwrap_or_else(|e| e.into_inner());
                let _ = guard.child.kill();
                let _ = guard.child.wait();
                kills += 1;
                *guard = start(&state);
            }
            kills
        })
    };

    let mut ledger = Ledger::default();
    let mut next = 0u32;
    let started = Instant::now();
    while Instant::now() < deadline {
        let client = client_of(&running, &token);
        // Two submissions for each deletion, a list after every operation.
        if random(3) < 2 || ledger.submitted.len() <= ledger.deleted.len() {
            let name = format!("soak-{next}");
            next += 1;
            let plan = Plan {
                sleep_tenths: random(30),
                code: if random(2) == 0 { 0 } else { 3 },
            };
            match client
                .submit(USER, &spec(&name, plan, &marker), SpecFormat::Json)
                .await
            {
                Ok(_) => {
                    ledger.submitted.insert(name, plan);
                }
                Err(e) if cut(&e) => {
                    ledger.maybe_submitted.insert(name, plan);
                }
                Err(e) => panic!("submitting {name}: {e}"),
            }
        } else {
            let candidates: Vec<&String> = ledger
                .submitted
                .keys()
                .filter(|n| !ledger.deleted.contains(*n) && !ledger.maybe_deleted.contains(*n))
                .collect();
            if let Some(name) = candidates.get(random(candidates.len() as u32) as usize) {
                let name = (*name).clone();
                match client.delete(USER, &name).await {
                    Ok(_) => {
                        ledger.deleted.insert(name);
                    }
                    Err(e) if cut(&e) => {
                        ledger.maybe_deleted.insert(name);
                    }
                    // Deleted by a cut request whose answer was lost: it is gone.
                    Err(ClientError::Api { status: 404, .. }) => {
                        ledger.maybe_deleted.insert(name);
                    }
                    Err(e) => panic!("deleting {name}: {e}"),
                }
            }
        }
        check(&client, &mut ledger).await;
    }
    let kills = kills.join().expect("the killer");
    let killing = started.elapsed();

    // Every job to its end, with the server left alone.
    let client = client_of(&running, &token);
    let settle = Instant::now();
    let finals = loop {
        if let Ok(jobs) = client.jobs(Some(USER)).await {
            let all_final = jobs.iter().all(|j| j.status.state.is_final());
            if all_final {
                break jobs;
            }
        }
        assert!(
            settle.elapsed() < Duration::from_secs(600),
            "jobs still not final after 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    check(&client, &mut ledger).await;
    let mut wrong = Vec::new();
    for job in &finals {
        let plan = ledger
            .submitted
            .get(&job.name)
            .or_else(|| ledger.maybe_submitted.get(&job.name))
            .copied();
        match plan {
            Some(plan) if job.status.state != plan.expected() => wrong.push(format!(
                "{}: {} (exit {:?}), expected {}",
                job.name,
                job.status.state,
                job.status.app_exit_code,
                plan.expected()
            )),
            Some(_) => {}
            None => wrong.push(format!("{}: a job nobody submitted", job.name)),
        }
    }
    let leftovers = marked_processes(&marker);
    let retried: i32 = finals.iter().map(|j| j.status.retries).sum();

    {
        let mut guard = running.lock().unwrap_or_else(|e| e.into_inner());
        let _ = guard.child.kill();
        let _ = guard.child.wait();
    }
    println!(
        "soak: {} s of kills: {kills} kills -9 and restarts, {} jobs submitted ({} answered, {} cut), {} deleted ({} answered), {} lists checked; {} jobs ended, {} retries of interrupted attempts",
        killing.as_secs(),
        next,
        ledger.submitted.len(),
        ledger.maybe_submitted.len(),
        ledger.deleted.len() + ledger.maybe_deleted.len(),
        ledger.deleted.len(),
        ledger.lists,
        finals.len(),
        retried,
    );
    println!(
        "soak: lost {}, resurrected {}, wrong final states {}, tasks left running {}",
        ledger.lost.len(),
        ledger.resurrected.len(),
        wrong.len(),
        leftovers.len()
    );
    let mut results = pai_test_support::bench_results::Run::new("rest-lite", "soak")
        .variant(format!("{seconds}s"));
    for (metric, value) in [
        ("seconds of kills", killing.as_secs_f64()),
        ("kills", f64::from(kills)),
        ("submitted, answered", ledger.submitted.len() as f64),
        ("submitted, cut", ledger.maybe_submitted.len() as f64),
        ("deleted, answered", ledger.deleted.len() as f64),
        ("deleted, cut", ledger.maybe_deleted.len() as f64),
        ("lists checked", ledger.lists as f64),
        ("jobs ended", finals.len() as f64),
        ("retries of interrupted attempts", f64::from(retried)),
        ("lost", ledger.lost.len() as f64),
        ("resurrected", ledger.resurrected.len() as f64),
        ("wrong final states", wrong.len() as f64),
        ("tasks left running", leftovers.len() as f64),
    ] {
        results.record("kills -9 at random", metric, value, "");
    }
    results.write();
    assert!(ledger.lost.is_empty(), "lost: {:?}", ledger.lost);
    assert!(
        ledger.resurrected.is_empty(),
        "resurrected: {:?}",
        ledger.resurrected
    );
    assert!(wrong.is_empty(), "wrong final states: {wrong:?}");
    assert!(
        leftovers.is_empty(),
        "processes of this run left: {leftovers:?}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// One list against the ledger (skipped when a kill cuts it).
async fn check(client: &Client, ledger: &mut Ledger) {
    let Ok(jobs) = client.jobs(Some(USER)).await else {
        return;
    };
    ledger.lists += 1;
    let listed: BTreeSet<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
    for name in ledger.submitted.keys() {
        let gone = ledger.deleted.contains(name) || ledger.maybe_deleted.contains(name);
        if !gone && !listed.contains(name.as_str()) {
            ledger.lost.insert(name.clone());
        }
    }
    for name in &ledger.deleted {
        if listed.contains(name.as_str()) {
            ledger.resurrected.insert(name.clone());
        }
    }
}
