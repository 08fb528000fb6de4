//! `cargo bench -p rest-lite --bench containers`: a job of N tasks (10, 50 and 100 unless
//! `BENCH_SIZES` says otherwise) on the embedded default, in host mode and in container
//! mode with each engine (`BENCH_ENGINES`, default `host,podman,docker`) in the same run:
//! submission → every task RUNNING (on the job's watch: in container mode a task is
//! RUNNING once its main container runs), and the machine's memory in use then, per task
//! (`MemAvailable` before the job against while every task runs: the task processes, and
//! in container mode the engine's clients, shims and the containers). Each job's command
//! waits for TERM; the job is deleted after. Beside each engine's job, its **floor** in the
//! same run: the same N containers (the image, the host's network, the memory limit)
//! started directly, all at once, with the engine's own `run -d`, until the last `run`
//! returned (each returns once its container runs).
//!
//! Needs root and, for each engine, the engine answering; the image is made from the
//! static busybox and imported into each engine's store, and removed at the end
//! (`BENCH_IMAGE` names another, which must be there already). `BENCH_ENGINE_RUNTIME`
//! names Podman's OCI runtime (runc by default).
//!
//! Under `cargo test` (no `--bench`) it runs one job of 2 tasks per engine that answers,
//! as a check that it still runs, and says which engines it skipped for want of what
//! (under `CI=true` a missing engine fails it, as every test's needs do).

mod support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use pai_client::Client;
use serde_json::{Value, json};

fn mem_available_kib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

fn start(state: &Path, engine: &str) -> (Child, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rest-lite"));
    command
        .args([
            "serve",
            "--backend",
            "local",
            "--listen",
            "127.0.0.1:0",
            "--engine",
            engine,
        ])
        .arg("--state-dir")
        .arg(state)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped());
    if engine == "podman" {
        let runtime = std::env::var("BENCH_ENGINE_RUNTIME").unwrap_or_else(|_| "runc".to_string());
        command.args(["--engine-runtime", &runtime]);
    }
    let mut child = command.spawn().expect("rest-lite serve");
    let url = support::url_of(&mut child, Duration::from_secs(120));
    let token = std::fs::read_to_string(state.join("token")).expect("token");
    (child, url, token.trim().to_string())
}

/// Seconds from submission until every task of the job runs.
async fn until_running(client: &Client, job: &str, tasks: usize) -> f64 {
    let image = image();
    let spec = json!({
        "jobName": job,
        "image": image,
        "retryCount": 0,
        "taskRoles": [{"name": "worker", "taskNumber": tasks, "cpuNumber": 1, "memoryMB": 128,
            "command": "trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done"}],
    })
    .to_string();
    let began = Instant::now();
    client
        .submit("bench", &spec, pai_translate::spec::SpecFormat::Json)
        .await
        .expect("submitted");
    let mut changes = client.watch("bench", job).await.expect("watch");
    while let Some(view) = changes.next().await {
        let view: Value = serde_json::to_value(view.expect("a view")).expect("JSON");
        let running = view["taskRoles"]["worker"]["taskStatuses"]
            .as_array()
            .map_or(0, |t| {
                t.iter().filter(|t| t["taskState"] == "RUNNING").count()
            });
        if running == tasks {
            return began.elapsed().as_secs_f64();
        }
        assert!(
            view["jobStatus"]["state"] != "FAILED",
            "the job failed: {view:#}"
        );
    }
    panic!("the watch ended before every task ran");
}

/// The image made here (unless `BENCH_IMAGE` names one).
const MADE_IMAGE: &str = "localhost/rest-lite-bench-busybox:1";

fn image() -> String {
    std::env::var("BENCH_IMAGE").unwrap_or_else(|_| MADE_IMAGE.to_string())
}

/// Whether `engine` can run the bench's containers here: root, the engine answering
/// (Podman's client, Docker's daemon), and its image; what is missing is said (a test's
/// needs: fatal under `CI=true`). The image made here is imported once, and removed
/// when the bench exits.
fn usable(engine: &'static str, scratch: &Path) -> bool {
    use pai_test_support::{images, needs};
    if engine == "host" {
        return true;
    }
    if !needs::present(
        "root (rootful containers)",
        nix::unistd::geteuid().is_root(),
        "run it as root",
    ) {
        return false;
    }
    let answers = |args: &[&str]| {
        Command::new(engine)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let there = match engine {
        "podman" => needs::present(
            "podman",
            answers(&["--version"]),
            "apt-get install podman runc",
        ),
        _ => needs::present(
            "a Docker Engine answering at DOCKER_HOST or /var/run/docker.sock",
            answers(&["version", "--format", "{{.Server.Version}}"]),
            "apt-get install docker.io, then .ci/start-dockerd",
        ),
    };
    if !there || std::env::var_os("BENCH_IMAGE").is_some() {
        return there;
    }
    let busybox = Path::new("/bin/busybox");
    if !needs::present(
        "a static busybox at /bin/busybox",
        busybox.is_file(),
        "apt-get install busybox-static",
    ) {
        return false;
    }
    images::shared(engine, MADE_IMAGE, || {
        let dir = scratch.join(format!("image-{engine}"));
        std::fs::create_dir_all(&dir).expect("the image's folder");
        let root = images::busybox_root(&dir, busybox);
        images::import(engine, &dir, &root, MADE_IMAGE, &[])
    });
    true
}

/// Seconds until `tasks` containers of the bench's image, started at once with `engine`'s
/// `run -d` (the host's network, 128 MiB, a command that waits), all run; removed after.
fn floor(engine: &str, tasks: usize) -> f64 {
    let names: Vec<String> = (0..tasks)
        .map(|i| format!("rest-lite-bench-floor-{}-{i}", std::process::id()))
        .collect();
    // The limits the server gives its containers: its own (Podman's `nproc` at most its
    // 32,768); Podman's defaults exceed what this machine allows.
    let own = |resource, most: u64| {
        let (soft, hard) = nix::sys::resource::getrlimit(resource).expect("getrlimit");
        let show = |n: u64| {
            if n == nix::sys::resource::RLIM_INFINITY {
                "-1".to_string()
            } else {
                n.min(most).to_string()
            }
        };
        format!("{}:{}", show(soft), show(hard))
    };
    let limits = [
        format!(
            "nofile={}",
            own(nix::sys::resource::Resource::RLIMIT_NOFILE, u64::MAX)
        ),
        format!(
            "nproc={}",
            own(nix::sys::resource::Resource::RLIMIT_NPROC, 32_768)
        ),
    ];
    let began = Instant::now();
    let runs: Vec<Child> = names
        .iter()
        .map(|name| {
            let mut command = Command::new(engine);
            if engine == "podman" {
                let runtime =
                    std::env::var("BENCH_ENGINE_RUNTIME").unwrap_or_else(|_| "runc".to_string());
                command.args(["--runtime", &runtime]);
            }
            command.args(["run", "-d", "--network", "host", "--memory", "128m"]);
            for limit in &limits {
                command.args(["--ulimit", limit]);
            }
            command
                .arg("--name")
                .arg(name)
                .arg(image())
                .args(["sleep", "600"])
                .stdout(Stdio::null())
                .spawn()
                .expect("run -d")
        })
        .collect();
    for mut run in runs {
        assert!(
            run.wait().expect("run -d").success(),
            "{engine} run -d failed"
        );
    }
    let seconds = began.elapsed().as_secs_f64();
    let mut rm = Command::new(engine);
    rm.args(["rm", "--force"]);
    if engine == "podman" {
        rm.args(["--time", "0"]);
    }
    let _ = rm.args(&names).stdout(Stdio::null()).status();
    seconds
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // `cargo bench` passes --bench; `cargo test` runs it as a check.
    let quick = !std::env::args().any(|a| a == "--bench");
    let sizes: Vec<usize> = std::env::var("BENCH_SIZES")
        .unwrap_or_else(|_| if quick { "2" } else { "10,50,100" }.to_string())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let dir =
        std::env::temp_dir().join(format!("rest-lite-bench-containers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let engines: Vec<&'static str> = std::env::var("BENCH_ENGINES")
        .unwrap_or_else(|_| "host,podman,docker".to_string())
        .split(',')
        .map(|s| &*s.trim().to_string().leak())
        .filter(|engine| usable(engine, &dir))
        .collect();
    println!(
        "| tasks | mode | submit → every task RUNNING (s) | floor: the engine's run -d ×N (s) | job / floor | memory per task (MiB) |"
    );
    println!("|---|---|---|---|---|---|");
    let mut results = pai_test_support::bench_results::Run::new("rest-lite", "containers");
    for &tasks in &sizes {
        let mut host_seconds = None;
        for &engine in &engines {
            let floor = (engine != "host").then(|| floor(engine, tasks));
            let state = dir.join(format!("{engine}-{tasks}"));
            let before = mem_available_kib();
            let (mut server, url, token) = start(&state, engine);
            let client = Client::new(&url, Some(token));
            let job = format!("b{tasks}");
            let seconds = until_running(&client, &job, tasks).await;
            let used = before.saturating_sub(mem_available_kib()) as f64 / 1024.0 / tasks as f64;
            let ratio = match host_seconds {
                Some(host) => format!(" ({:.1}× host)", seconds / host),
                None => {
                    host_seconds = Some(seconds);
                    String::new()
                }
            };
            let case = format!("{tasks} tasks, {engine}");
            results.record(&case, "submit → every task RUNNING", seconds, "s");
            results.record(&case, "memory per task", used, "MiB");
            if let Some(f) = floor {
                results.record(&case, "floor: run -d ×N", f, "s");
                results.record(&case, "job / floor", seconds / f, "×");
            }
            let (floor, of_floor) = match floor {
                Some(f) => (format!("{f:.2}"), format!("{:.2}", seconds / f)),
                None => ("–".to_string(), "–".to_string()),
            };
            println!(
                "| {tasks} | {engine} | {seconds:.2}{ratio} | {floor} | {of_floor} | {used:.1} |"
            );
            client.delete("bench", &job).await.expect("deleted");
            // Containers outlive a killed server: wait until the deletion removed them all.
            let label = format!(
                "label={}={}",
                pai_local::containers::LABEL_JOB,
                pai_job::names::framework_name("bench", &job)
            );
            while engine != "host"
                && Command::new(engine)
                    .args(["ps", "--all", "--quiet", "--filter", &label])
                    .output()
                    .is_ok_and(|o| !o.stdout.is_empty())
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let _ = server.kill();
            let _ = server.wait();
        }
    }
    results.write();
    let _ = std::fs::remove_dir_all(&dir);
}
