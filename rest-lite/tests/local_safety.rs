//! The embedded default's own safety rules, with the real `rest-lite` processes: one
//! server per state directory, process records a task could forge never believed, an
//! unreadable job skipped, private files and directories, loopback only unless
//! acknowledged, and jobs larger than the machine refused.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use pai_client::{Client, ClientError};
use pai_translate::spec::SpecFormat;
use serde_json::{Value, json};

use common::fifo::{events, final_view, next_event};
use common::serve::Server;

fn scratch(name: &str) -> common::Scratch {
    common::scratch("safety", name)
}

fn spec(name: &str, tasks: u32, command: &str, envs: Value) -> String {
    json!({
        "jobName": name, "image": "busybox", "jobEnvs": envs,
        "taskRoles": [{"name": "worker", "taskNumber": tasks, "cpuNumber": 1, "memoryMB": 128, "command": command}],
    })
    .to_string()
}

/// Reports `up` into the FIFO on the first attempt and waits; later attempts succeed.
const UP_THEN_WAIT: &str = r#"if [ "$FC_FRAMEWORK_ATTEMPT_ID" != 0 ]; then exit 0; fi
exec 3>"$EVENTS"
echo "up $PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX" >&3
while :; do sleep 1 & wait $!; done"#;

/// Runs `rest-lite ARGS` to its end; (code, stderr).
fn rest_lite(args: &[&str], env: &[(&str, &Path)]) -> (Option<i32>, String) {
    let mut command = crate::common::rest_lite_command();
    command
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    let output = command.output().expect("rest-lite");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// The one directory below `dir` (the job's, named by its digest).
fn only_entry(dir: &Path) -> PathBuf {
    let entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read dir")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    entries.into_iter().next().expect("one")
}

/// The directory of the first attempt of `name`, a job of `tasks` workers running `true`,
/// submitted as alice to the server on `state` and run to success.
async fn succeeded_attempt(client: &Client, state: &Path, name: &str, tasks: u32) -> PathBuf {
    client
        .submit(
            "alice",
            &spec(name, tasks, "true", json!({})),
            SpecFormat::Json,
        )
        .await
        .expect("submitted");
    assert_eq!(
        final_view(client, "alice", name).await["jobStatus"]["state"],
        "SUCCEEDED"
    );
    only_entry(&state.join("jobs")).join("attempts").join("0")
}

/// `file` in the root of each of the attempt's `tasks` workers.
fn in_each_task(attempt: &Path, tasks: u32, file: &str) -> Vec<std::fs::Metadata> {
    (0..tasks)
        .map(|i| std::fs::metadata(attempt.join(format!("worker-{i}")).join(file)).expect(file))
        .collect()
}

/// A server on `state` whose job `name` has one task that reported "up 0" into the
/// FIFO `rx` reads and then waits (for TERM, or forever in attempt 0).
async fn with_a_waiting_task(
    dir: &Path,
    state: &Path,
    name: &str,
) -> (Server, std::sync::mpsc::Receiver<Option<String>>) {
    let (fifo, rx) = events(dir);
    let server = Server::start(state);
    let envs = json!({"EVENTS": fifo.display().to_string()});
    server
        .client()
        .submit(
            "alice",
            &spec(name, 1, UP_THEN_WAIT, envs),
            SpecFormat::Json,
        )
        .await
        .expect("submitted");
    assert_eq!(next_event(&rx).as_deref(), Some("up 0"));
    (server, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_on_the_same_directory_is_refused_and_the_first_keeps_its_job() {
    let dir = scratch("second");
    let state = dir.join("state");
    let (first, rx) = with_a_waiting_task(&dir, &state, "held").await;
    let client = first.client();

    let (code, stderr) = rest_lite(
        &[
            "serve",
            "--backend",
            "local",
            "--listen",
            "127.0.0.1:0",
            "--state-dir",
            state.to_str().expect("path"),
        ],
        &[],
    );
    assert_ne!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("in use by another rest-lite")
            && stderr.contains(&format!("pid {}", first.pid())),
        "{stderr}"
    );
    // The first server's task was never touched: still running, and the only end it
    // sees is the stop asked now.
    let view = client.job("alice", "held").await.expect("job");
    assert_eq!(
        serde_json::to_value(view.job_status.state).expect("state"),
        "RUNNING"
    );
    client.stop("alice", "held").await.expect("stop");
    let state = final_view(&client, "alice", "held").await["jobStatus"].clone();
    assert_eq!(state["state"], "STOPPED", "{state:#}");
    assert_eq!(next_event(&rx), None, "no task process is left");
    drop(first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_process_record_is_not_believed_by_a_restarted_server() {
    let dir = scratch("forged");
    let state = dir.join("state");
    let (server, rx) = with_a_waiting_task(&dir, &state, "forged").await;

    // A process of this user that leads its own group, as a task does, but is none.
    let mut bystander = Command::new("sleep")
        .arg("1000")
        .process_group(0)
        .spawn()
        .expect("sleep");
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", bystander.id())).expect("stat");
    let start: u64 = stat[stat.rfind(')').expect(")") + 1..]
        .split_whitespace()
        .nth(19)
        .and_then(|s| s.parse().ok())
        .expect("start time");
    // What the task could write: the record, wherever it is kept.
    let record = only_entry(&state.join("pids")).join("0").join("worker-0");
    assert!(
        record.is_file(),
        "the record is kept outside the task's directory"
    );
    std::fs::write(&record, format!("{} {start}", bystander.id())).expect("forge");

    server.kill();
    assert_eq!(next_event(&rx), None, "the task died with its server");
    let server = Server::start(&state);
    // Recovery is done once the server serves.
    assert!(
        bystander.try_wait().expect("try_wait").is_none(),
        "the process the forged record names was signalled"
    );
    let client = server.client();
    let status = final_view(&client, "alice", "forged").await["jobStatus"].clone();
    assert_eq!(status["state"], "SUCCEEDED", "{status:#}");
    assert_eq!(status["retries"], 1, "the interrupted attempt was retried");
    bystander.kill().expect("kill");
    bystander.wait().expect("wait");
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_job_is_skipped_and_the_rest_served() {
    let dir = scratch("unreadable");
    let state = dir.join("state");
    let server = Server::start(&state);
    let client = server.client();
    client
        .submit(
            "alice",
            &spec("fine", 1, "true", json!({})),
            SpecFormat::Json,
        )
        .await
        .expect("submitted");
    assert_eq!(
        final_view(&client, "alice", "fine").await["jobStatus"]["state"],
        "SUCCEEDED"
    );
    server.kill();

    let damaged = state.join("jobs").join("0123456789abcdef0123456789abcdef");
    std::fs::create_dir_all(&damaged).expect("dir");
    std::fs::write(damaged.join("framework.json"), "{\"apiVersion\": ").expect("damage");
    let server = Server::start(&state);
    let client = server.client();
    let jobs = client.jobs(Some("alice")).await.expect("list");
    let names: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names, ["fine"]);
    assert!(
        damaged.join("framework.json").is_file(),
        "nothing was removed"
    );
    drop(server);
}

/// What is the same in every task of an attempt (the peers' variables, the peer table)
/// is one read-only file, hard-linked into each task's root, not a copy per task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tasks_of_an_attempt_share_one_copy_of_the_peers_files() {
    use std::os::unix::fs::MetadataExt;
    let dir = scratch("shared");
    let state = dir.join("state");
    let server = Server::start(&state);
    let client = server.client();
    let attempt = succeeded_attempt(&client, &state, "shared", 4).await;
    for file in ["env-peers.sh", "peer-env-common.sh", "peers.json"] {
        let stats = in_each_task(&attempt, 4, file);
        assert!(
            stats.iter().all(|m| m.ino() == stats[0].ino()),
            "{file}: one inode"
        );
        assert_eq!(
            stats[0].nlink(),
            5,
            "{file}: four tasks and the shared copy"
        );
        assert_eq!(stats[0].mode() & 0o222, 0, "{file}: read-only");
        assert_eq!(
            stats[0].mode() & 0o077 & !0o044,
            0,
            "{file}: nobody else writes"
        );
    }
    // Each task's own stays its own.
    let own = |i: u32| {
        std::fs::metadata(attempt.join(format!("worker-{i}")).join("env.sh"))
            .expect("env.sh")
            .ino()
    };
    assert_ne!(own(0), own(1));
    drop(server);
}

/// A state directory on another file system than `rest-lite` (a `/home` partition, the
/// binary in `/usr/local/bin`): a task's `run` cannot be a hard link to the binary, and
/// each used to be a copy of it, 60 MB per task. Now every task links one program on the
/// state's file system (the static runtime the binary carries, or one copy of the
/// runtime's program where the build carries none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_directory_on_another_file_system_holds_one_copy_of_the_runtime() {
    use std::os::unix::fs::MetadataExt;
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_rest-lite"));
    let Some(elsewhere) = pai_test_support::needs::dir_on_another_file_system(&binary) else {
        return;
    };
    let state = elsewhere.path().join("state");
    let server = Server::start(&state);
    let attempt = succeeded_attempt(&server.client(), &state, "copies", 3).await;
    let runs = in_each_task(&attempt, 3, "run");
    assert!(
        runs.iter().all(|m| m.ino() == runs[0].ino()),
        "every task's run is one file"
    );
    let state_device = std::fs::metadata(&state).expect("state").dev();
    assert_eq!(runs[0].dev(), state_device, "on the state's file system");
    assert_eq!(runs[0].nlink(), 4, "the program and three tasks' links");
    drop(server);
}

/// `--runtime` names the tasks' runtime and `--engine host` keeps them on the host: the
/// static runtime this binary carries would run nowhere, and is not written (18 MB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_runtime_for_the_host_only_leaves_the_carried_one_unwritten() {
    use std::os::unix::fs::MetadataExt;
    let dir = scratch("named-runtime");
    // The runtime this binary carries, where a default start writes it.
    let carried = dir.join("carried");
    drop(Server::start(&carried));
    let runtime = carried.join("kube-runtime");
    if !pai_test_support::needs::present(
        "a rest-lite built with the static runtime it carries",
        runtime.is_file(),
        "build it without REST_LITE_STATIC_RUNTIME=none",
    ) {
        return;
    }
    let state = dir.join("state");
    let mut command = Server::command(&state);
    command
        .args(["--backend", "local", "--engine", "host", "--runtime"])
        .arg(&runtime);
    let server = Server::spawn(&mut command, &["this machine (embedded default)"])
        .with_machine_token(&state);
    let attempt = succeeded_attempt(&server.client(), &state, "named", 2).await;
    assert!(
        !state.join("kube-runtime").exists(),
        "the carried runtime is not written where nothing runs it"
    );
    let named = std::fs::metadata(&runtime).expect("runtime").ino();
    assert!(
        in_each_task(&attempt, 2, "run")
            .iter()
            .all(|m| m.ino() == named),
        "the tasks run the named runtime"
    );
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_and_the_files_holding_the_environment_are_private() {
    let dir = scratch("private");
    let state = dir.join("state");
    let server = Server::start(&state);
    let client = server.client();
    client
        .submit(
            "alice",
            &spec("private", 1, "true", json!({"SECRET": "s3cret"})),
            SpecFormat::Json,
        )
        .await
        .expect("submitted");
    assert_eq!(
        final_view(&client, "alice", "private").await["jobStatus"]["state"],
        "SUCCEEDED"
    );
    assert_eq!(mode(&state.join("jobs")), 0o700);
    assert_eq!(mode(&state.join("pids")), 0o700);
    let root = only_entry(&state.join("jobs"))
        .join("attempts")
        .join("0")
        .join("worker-0");
    for file in ["env.sh", "main.sh"] {
        assert_eq!(mode(&root.join(file)), 0o600, "{file}");
    }
    // The ssh sessions' copy is written at the first connection only (none here).
    assert!(!root.join("env-all.sh").exists());
    // Any file of the task's root that holds the job's values is private (its jobEnvs
    // reach the task through its process environment: none may).
    for entry in std::fs::read_dir(&root).expect("the task's root").flatten() {
        let path = entry.path();
        if std::fs::read(&path).is_ok_and(|b| b.windows(6).any(|w| w == b"s3cret")) {
            assert_eq!(mode(&path), 0o600, "{}", path.display());
        }
    }
    drop(server);

    // `rest-lite run`: a directory of its own, made now, 0700.
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).expect("tmp");
    let job = dir.join("job.json");
    std::fs::write(&job, spec("run", 1, "true", json!({}))).expect("spec");
    let (code, stderr) = rest_lite(
        &[
            "run",
            "--keep",
            job.to_str().expect("path"),
            "--user",
            "alice",
        ],
        &[("TMPDIR", &tmp)],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let run_dir = only_entry(&tmp);
    assert!(
        run_dir
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(
                |n| n.starts_with("rest-lite-run-") && n.len() > "rest-lite-run-".len() + 8
            ),
        "{run_dir:?}"
    );
    assert_eq!(mode(&run_dir), 0o700);
}

#[test]
fn the_embedded_default_listens_beyond_loopback_only_when_told() {
    let dir = scratch("listen");
    let tokens = dir.join("tokens.yaml");
    std::fs::write(
        &tokens,
        format!(
            "users:\n  - {{name: alice, tokenSha256: {}}}\n",
            "0".repeat(64)
        ),
    )
    .expect("tokens");
    let (code, stderr) = rest_lite(
        &[
            "serve",
            "--backend",
            "local",
            "--listen",
            "0.0.0.0:0",
            "--token-file",
            tokens.to_str().expect("path"),
            "--state-dir",
            dir.join("state").to_str().expect("path"),
        ],
        &[],
    );
    assert_ne!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("loopback only") && stderr.contains("--local-listen-anywhere"),
        "{stderr}"
    );
    assert!(
        !dir.join("state").exists(),
        "refused before anything was opened"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_larger_than_the_machine_takes_is_refused_naming_the_limit() {
    let dir = scratch("capacity");
    let server = Server::spawn(
        Server::command(&dir.join("state")).args(["--backend", "local", "--max-tasks", "3"]),
        &["this machine (embedded default)"],
    )
    .with_machine_token(&dir.join("state"));
    let client = server.client();
    let refused = client
        .submit(
            "alice",
            &spec("big", 4, "true", json!({})),
            SpecFormat::Json,
        )
        .await;
    match refused.expect_err("refused") {
        ClientError::Api {
            status,
            code,
            message,
            ..
        } => {
            assert_eq!(status, 400);
            assert_eq!(code, pai_client::ErrorCode::InvalidParametersError);
            assert!(
                message.contains("4 tasks")
                    && message.contains("at most 3")
                    && message.contains("--max-tasks"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(client.jobs(Some("alice")).await.expect("list").is_empty());
    client
        .submit(
            "alice",
            &spec("fits", 3, "true", json!({})),
            SpecFormat::Json,
        )
        .await
        .expect("a job within the limit");
    assert_eq!(
        final_view(&client, "alice", "fits").await["jobStatus"]["state"],
        "SUCCEEDED"
    );
    drop(server);
}

/// Watches alice's job `job` until it waits for this machine's task slots: its reason
/// then, checked against the rest of its view.
async fn queued(client: &pai_client::Client, job: &str) -> pai_api::waiting::Waiting {
    use futures::StreamExt;
    let mut changes = client.watch("alice", job).await.expect("watch");
    loop {
        let view = changes
            .next()
            .await
            .expect("a view")
            .expect("a readable view");
        if let Some(waiting) = view.job_status.waiting.clone()
            && waiting.reason == "Queued"
        {
            assert_eq!(view.job_status.state, pai_api::status::JobState::Waiting);
            assert_eq!(view.job_status.running_task_number, 0);
            let admitted = view.condition("Admitted").expect("an Admitted condition");
            assert_eq!(
                (admitted.status.as_str(), admitted.reason.as_str()),
                ("False", "Queued")
            );
            return waiting;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_waits_whole_for_the_machines_task_slots_and_says_why() {
    let dir = scratch("slots");
    // A FIFO per job: each ends (end of file) when that job's tasks are all gone.
    let [first_dir, second_dir] = [dir.join("first"), dir.join("second")];
    for d in [&first_dir, &second_dir] {
        std::fs::create_dir_all(d).expect("a directory");
    }
    let (fifo, rx) = events(&first_dir);
    let (second_fifo, second_rx) = events(&second_dir);
    let server = Server::spawn(
        Server::command(&dir.join("state")).args(["--backend", "local", "--max-tasks", "3"]),
        &["this machine (embedded default)"],
    )
    .with_machine_token(&dir.join("state"));
    let client = server.client();
    let envs = json!({"EVENTS": fifo.display().to_string()});
    client
        .submit(
            "alice",
            &spec("first", 2, UP_THEN_WAIT, envs),
            SpecFormat::Json,
        )
        .await
        .expect("submitted");
    let mut up = [next_event(&rx), next_event(&rx)];
    up.sort();
    assert_eq!(up, [Some("up 0".to_string()), Some("up 1".to_string())]);

    // Two more tasks do not fit beside the first job's two: the job waits, whole.
    let envs = json!({"EVENTS": second_fifo.display().to_string()});
    client
        .submit(
            "alice",
            &spec("second", 2, UP_THEN_WAIT, envs),
            SpecFormat::Json,
        )
        .await
        .expect("submitted");
    let waiting = queued(&client, "second").await;
    assert!(
        waiting.message.contains("at most 3 tasks at once")
            && waiting
                .message
                .contains("needs 2 and 2 were in use by 1 job")
            && waiting.message.contains("--max-tasks"),
        "{}",
        waiting.message
    );
    assert!(waiting.since.is_some());

    // A third job, queued behind the second though one slot is free, is stopped while it
    // waits: it leaves the queue, never having run.
    client
        .submit(
            "alice",
            &spec("third", 1, "exit 3", json!({})),
            SpecFormat::Json,
        )
        .await
        .expect("submitted");
    let behind = queued(&client, "third").await;
    assert!(
        behind.message.contains("behind 1 other waiting job"),
        "{}",
        behind.message
    );
    client.stop("alice", "third").await.expect("stopped");
    let third = final_view(&client, "alice", "third").await;
    assert_eq!(third["jobStatus"]["state"], "STOPPED");
    assert_eq!(
        third["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Admitted"))
            .map(|c| c["reason"].clone()),
        Some(json!("NotRun"))
    );

    // The first job ends: its tasks are gone, the second gets their slots and runs.
    client.stop("alice", "first").await.expect("stopped");
    assert_eq!(next_event(&rx), None, "the first job's tasks ended");
    let mut up = [next_event(&second_rx), next_event(&second_rx)];
    up.sort();
    assert_eq!(up, [Some("up 0".to_string()), Some("up 1".to_string())]);
    let view = client.job("alice", "second").await.expect("the job");
    assert_eq!(view.job_status.waiting, None);
    client.stop("alice", "second").await.expect("stopped");
    assert_eq!(
        final_view(&client, "alice", "second").await["jobStatus"]["state"],
        "STOPPED"
    );
    drop(server);
}
