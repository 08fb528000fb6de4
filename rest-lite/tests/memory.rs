//! The server's memory on this machine: what a burst of jobs took goes back once they
//! ended, and the server runs without glibc's per-thread caches while its tasks are not
//! told.

use crate::common;

use pai_translate::spec::SpecFormat;
use serde_json::json;

use common::fifo::final_view;
use common::jobs::{job, log_of, role, run_spec};
use common::serve::Server;

fn scratch(name: &str) -> common::Scratch {
    common::scratch("memory", name)
}

/// A burst's memory goes back to the system once its jobs ended (#60): a job its
/// controller froze as it ended says so, and the next look gives it back. Before, only
/// the retention's look said so, for the few jobs it froze itself, and a server that had
/// run 2,000 jobs held 200 MiB where a restarted one held 26.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_of_a_job_that_ended_is_given_back() {
    let dir = scratch("given-back");
    let state = dir.join("state");
    let server = Server::spawn(
        Server::command(&state)
            .args(["--backend", "local"])
            .env("RUST_LOG", "info,pai_backend::memory=debug"),
        &[
            "this machine (embedded default)",
            &state.display().to_string(),
        ],
    )
    .with_machine_token(&state);
    let client = server.client();
    let spec = job("ends", json!([role("worker", 1, "true")]), json!({}));
    client
        .submit("alice", &spec, SpecFormat::detect(&spec))
        .await
        .expect("submitted");
    let view = final_view(&client, "alice", "ends").await;
    assert_eq!(view["jobStatus"]["state"], "SUCCEEDED", "{view:#}");
    server
        .logged("the memory of ended jobs given back to the system")
        .await;
    drop(server);
}

/// The server runs without glibc's per-thread caches (#60): it starts itself again, the
/// same process, with the tunable beside the operator's own, and puts the variable back as
/// it was before anything runs. What it starts with its own environment (here the GPU
/// probe's `nvidia-smi`, a stand-in on `PATH` that writes down what it was given) sees the
/// operator's tunables alone; a task gets none of it (its variables are a fixed few).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_runs_without_per_thread_caches_and_its_tasks_are_not_told() {
    let dir = scratch("thread-caches");
    let state = dir.join("state");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let given = dir.join("nvidia-smi.env");
    let probe = bin.join("nvidia-smi");
    std::fs::write(
        &probe,
        format!("#!/bin/sh\nenv > '{}'\nexit 9\n", given.display()),
    )
    .expect("nvidia-smi");
    std::fs::set_permissions(&probe, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let server = Server::spawn(
        Server::command(&state)
            .args(["--backend", "local"])
            .env("PATH", path)
            .env("GLIBC_TUNABLES", "glibc.malloc.arena_max=4"),
        &[
            "this machine (embedded default)",
            &state.display().to_string(),
        ],
    )
    .with_machine_token(&state);
    // The environment the serving image was started with (the kernel's copy), in the
    // process that was spawned. glibc cuts the value at each ':' as it reads it (2.36
    // writes NULs there), so either separator is the one variable.
    let environ = std::fs::read(format!("/proc/{}/environ", server.pid())).expect("environ");
    let set = [b':', 0].iter().any(|sep| {
        let mut wanted = b"\0GLIBC_TUNABLES=glibc.malloc.arena_max=4".to_vec();
        wanted.push(*sep);
        wanted.extend_from_slice(b"glibc.malloc.tcache_count=0\0");
        environ.windows(wanted.len()).any(|w| w == wanted)
    });
    assert!(
        set,
        "{}",
        String::from_utf8_lossy(&environ).replace('\0', "\n")
    );
    // Named as it was started (the kernel names an image after the file executed).
    let name = std::fs::read_to_string(format!("/proc/{}/comm", server.pid())).expect("comm");
    assert_eq!(name.trim_end(), "rest-lite");
    let client = server.client();
    let spec = job(
        "tunables",
        json!([role(
            "worker",
            1,
            "echo \"tunables=${GLIBC_TUNABLES-unset} carried=${REST_LITE_GLIBC_TUNABLES_AS_STARTED-unset}\""
        )]),
        json!({}),
    );
    client
        .submit("alice", &spec, SpecFormat::detect(&spec))
        .await
        .expect("submitted");
    let view = final_view(&client, "alice", "tunables").await;
    assert_eq!(view["jobStatus"]["state"], "SUCCEEDED", "{view:#}");
    let log = log_of(&client, "alice", "tunables", "worker", 0).await;
    assert!(log.contains("tunables=unset carried=unset"), "{log}");
    // The probe ran as the server started, before the job could be placed.
    let given = std::fs::read_to_string(&given).expect("the probe's environment");
    let tunables: Vec<&str> = given
        .lines()
        .filter(|l| l.contains("TUNABLES") || l.contains("AS_STARTED"))
        .collect();
    assert_eq!(
        tunables,
        ["GLIBC_TUNABLES=glibc.malloc.arena_max=4"],
        "{given}"
    );
    drop(server);
}

/// `rest-lite run` serves its job as `serve` does, so it runs without the caches too: the
/// job's task finds the nearest `rest-lite` among its ancestors (the process that runs
/// the job) and reads the environment its image was started with, while its own has no
/// trace of the tunable.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn run_serves_its_job_without_per_thread_caches_too() {
    let dir = scratch("run-thread-caches");
    let spec = dir.join("spec.json");
    let look = "p=$$; while [ \"$p\" -gt 1 ] && [ \"$(cat /proc/$p/comm)\" != rest-lite ]; do \
                p=$(awk '/^PPid:/{print $2}' /proc/$p/status); done; \
                echo \"server=$(tr '\\0' '\\n' < /proc/$p/environ | grep -c '^GLIBC_TUNABLES=glibc.malloc.tcache_count=0$') \
                task=${GLIBC_TUNABLES-unset}\"";
    std::fs::write(
        &spec,
        job("look", json!([role("worker", 1, look)]), json!({})),
    )
    .expect("spec");
    let state = dir.join("state");
    let (code, stdout, stderr) = run_spec(
        &spec,
        &[
            "--user",
            "alice",
            "--engine",
            "host",
            "--state-dir",
            state.to_str().expect("path"),
        ],
        &[("GLIBC_TUNABLES", "")],
    );
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("server=1 task=unset"), "{stdout}\n{stderr}");
}
