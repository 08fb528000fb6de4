//! `cargo bench -p pai-kube-runtime --bench start`: how fast the runtime gets out of the
//! way, and what it costs while the job runs.
//!
//! - run → user command: from spawning `kube-runtime run` to the user command's first
//!   action (it opens a FIFO this bench is blocked on), through env file, env-all.sh,
//!   log setup and `/bin/sh` start-up.
//! - entry (barrier already passed): `kube-runtime entry` to its exit, with the local
//!   barrier's Framework file already complete, so the barrier costs one read.
//! - the supervisor's RSS while the user command runs, idle and after 256 MiB of output
//!   went through it to the capped log.
//! - the user command's output through the runtime (read in write order, echoed, kept
//!   as records in the capped log) beside the floor: the same script run by the same
//!   shell, its stdout and stderr one pipe this bench drains. Many small writes (each
//!   `echo` of a loop one write, half of them to stderr) and few large ones.
//!
//! What it prints it also records under `benchmarks/results/`
//! ([`pai_test_support::bench_results`]).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pai_test_support::bench_results::Run;
use pai_test_support::frameworks::{address, framework_on_ports, set_pod_ip, to_value};

const BIN: &str = env!("CARGO_BIN_EXE_kube-runtime");

fn dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("kube-runtime-bench-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("init")).expect("dir");
    std::fs::write(dir.join("env.sh"), "export PAI_HOST_IP_ps_0='10.0.0.1'\n").expect("env");
    dir
}

fn run_command(root: &Path) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(["run", "--root"])
        .arg(root)
        .env("FC_TASKROLE_NAME", "worker")
        .env("FC_TASK_INDEX", "0")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

fn fifo(root: &Path, name: &str) -> PathBuf {
    let path = root.join(name);
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    path
}

fn read_fifo(path: &Path) {
    let mut s = String::new();
    std::fs::File::open(path)
        .expect("open")
        .read_to_string(&mut s)
        .expect("read");
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn report(results: &mut Run, name: &str, mut times: Vec<Duration>) {
    times.sort();
    let at = |p: f64| times[((times.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e3;
    println!(
        "| {name} | {} | {:.2} | {:.2} | {:.2} |",
        times.len(),
        at(0.0),
        at(0.5),
        at(0.99)
    );
    results.record(name, "rounds", times.len() as f64, "");
    for (stat, p) in [("min", 0.0), ("median", 0.5), ("p99", 0.99)] {
        results.record(name, stat, at(p), "ms");
    }
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let rounds = if quick { 2 } else { 200 };
    let mut results = Run::new("pai-kube-runtime", "start");
    println!("| step | rounds | min ms | median ms | p99 ms |");
    println!("|---|---|---|---|---|");

    let root = dir("start");
    let ready = fifo(&root, "ready");
    std::fs::write(
        root.join("main.sh"),
        format!("echo > {}\n", ready.display()),
    )
    .expect("main.sh");
    let times = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            let mut child = run_command(&root).spawn().expect("run");
            read_fifo(&ready);
            let elapsed = start.elapsed();
            child.wait().expect("wait");
            elapsed
        })
        .collect();
    report(&mut results, "run → user command", times);

    let entry_root = dir("entry");
    let mut framework = to_value(&framework_on_ports(
        "fw",
        &[("ps", 1), ("worker", 1)],
        31600,
    ));
    set_pod_ip(&mut framework, "ps", 0, &address(0, 0));
    set_pod_ip(&mut framework, "worker", 0, &address(1, 0));
    let framework_file = entry_root.join("framework-state.json");
    std::fs::write(
        &framework_file,
        serde_json::to_vec(&framework).expect("json"),
    )
    .expect("write");
    let assets = entry_root.join("assets");
    std::fs::create_dir_all(assets.join("init")).expect("assets");
    let times = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            let status = Command::new(BIN)
                .args(["entry", "--root"])
                .arg(entry_root.join("pai"))
                .arg("--assets")
                .arg(&assets)
                .env("FC_FRAMEWORK_NAMESPACE", "jobs")
                .env("FC_FRAMEWORK_NAME", "fw")
                .env("FC_TASKROLE_NAME", "worker")
                .env("FC_TASK_INDEX", "0")
                .env("USER_CMD", "true")
                .env("BARRIER_FRAMEWORK_FILE", &framework_file)
                .env("RUST_LOG", "warn")
                .stderr(Stdio::null())
                .status()
                .expect("entry");
            assert!(status.success());
            start.elapsed()
        })
        .collect();
    report(
        &mut results,
        "entry, barrier already passed (links the runtime binary)",
        times,
    );

    let rss_root = dir("rss");
    let started = fifo(&rss_root, "started");
    let streamed = fifo(&rss_root, "streamed");
    let release = fifo(&rss_root, "release");
    let bytes = if quick { 1 << 20 } else { 256 << 20 };
    std::fs::write(
        rss_root.join("main.sh"),
        format!(
            "echo > {s}\nhead -c {bytes} /dev/zero\necho > {d}\nread x < {r}\n",
            s = started.display(),
            d = streamed.display(),
            r = release.display()
        ),
    )
    .expect("main.sh");
    let mut child = run_command(&rss_root)
        .env("PAI_LOG_MAX_BYTES", (64u64 << 20).to_string())
        .spawn()
        .expect("run");
    read_fifo(&started);
    let idle = rss_kib(child.id(), "VmRSS:");
    // What each task adds on its own (heap, stacks) apart from the binary's pages, which
    // the tasks of a host share through the page cache.
    let (anon, file) = (
        rss_kib(child.id(), "RssAnon:"),
        rss_kib(child.id(), "RssFile:"),
    );
    read_fifo(&streamed);
    let after = rss_kib(child.id(), "VmRSS:");
    let peak = rss_kib(child.id(), "VmHWM:");
    std::fs::write(&release, "\n").expect("release");
    child.wait().expect("wait");
    println!(
        "\nsupervisor RSS: {idle} KiB at the user command's start ({anon} KiB its own, {file} KiB the binary's and libraries' shared pages), {after} KiB after {} MiB of output (peak {peak} KiB)",
        bytes >> 20
    );
    let output_mib = bytes >> 20;
    for (metric, kib) in [
        ("RSS at the user command's start", idle),
        ("RssAnon at the user command's start", anon),
        ("RssFile at the user command's start", file),
        (&*format!("RSS after {output_mib} MiB of output"), after),
        ("peak RSS", peak),
    ] {
        results.record("supervisor", metric, kib as f64, "KiB");
    }
    output(quick, &mut results);
    results.write();
    for d in [root, entry_root, rss_root] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// The output's cost through the runtime against the same script's output drained here.
fn output(quick: bool, results: &mut Run) {
    let lines = if quick { 2_000 } else { 200_000 };
    let bytes: u64 = if quick { 1 << 20 } else { 256 << 20 };
    let cases = [
        (
            format!("{lines} small writes, stdout and stderr by turns"),
            format!(
                "i=0; while [ $i -lt {lines} ]; do echo \"out $i\"; echo \"err $i\" >&2; i=$((i+2)); done\n"
            ),
        ),
        (
            format!("{} MiB in large writes", bytes >> 20),
            format!("head -c {bytes} /dev/zero\n"),
        ),
    ];
    let shell = pai_kube_runtime::run::user_shell();
    println!("\n| output ({shell}) | through the runtime s | floor s | ratio |");
    results.note(format!("the output's shell: {shell}"));
    println!("|---|---|---|---|");
    for (name, script) in cases {
        let root = dir("output");
        std::fs::write(root.join("main.sh"), &script).expect("main.sh");
        let best = |mut run: Box<dyn FnMut() -> Duration>| {
            (0..if quick { 1 } else { 3 })
                .map(|_| run())
                .min()
                .expect("a round")
        };
        let through = best(Box::new(|| {
            let start = Instant::now();
            let status = run_command(&root)
                .env("PAI_LOG_MAX_BYTES", (64u64 << 20).to_string())
                .stdout(Stdio::piped())
                .spawn()
                .and_then(|mut child| {
                    let mut out = child.stdout.take().expect("piped");
                    std::io::copy(&mut out, &mut std::io::sink())?;
                    child.wait()
                })
                .expect("run");
            assert!(status.success());
            start.elapsed()
        }));
        let floor = best(Box::new(|| {
            let start = Instant::now();
            let (mut reader, writer) = std::io::pipe().expect("pipe");
            let mut child = Command::new(shell)
                .arg(root.join("main.sh"))
                .stdout(writer.try_clone().expect("dup"))
                .stderr(writer)
                .spawn()
                .expect("shell");
            std::io::copy(&mut reader, &mut std::io::sink()).expect("drain");
            assert!(child.wait().expect("wait").success());
            start.elapsed()
        }));
        println!(
            "| {name} | {:.2} | {:.2} | {:.2} |",
            through.as_secs_f64(),
            floor.as_secs_f64(),
            through.as_secs_f64() / floor.as_secs_f64()
        );
        results.record(&name, "through the runtime", through.as_secs_f64(), "s");
        results.record(&name, "floor", floor.as_secs_f64(), "s");
        let ratio = through.as_secs_f64() / floor.as_secs_f64();
        results.record(&name, "ratio", ratio, "×");
        let _ = std::fs::remove_dir_all(root);
    }
}
