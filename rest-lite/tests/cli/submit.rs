//! `rest-lite submit` and the commands of a job on a server: `--follow` and Ctrl-C,
//! `--wait`, the fields not acted on, and the command-line client driving a job through
//! status, logs, stop and delete.

use crate::common;

use std::process::Stdio;
use std::sync::mpsc;

use pai_api::status::JobState;
use serde_json::{Value, json};

use common::fifo::{events, final_view, next_event, until_none_left};
use common::jobs::{WAIT_FOR_TERM, get_text, job, rest_lite, role};
use common::serve::{DEADLINE, Server};

fn scratch(name: &str) -> common::Scratch {
    common::scratch("submit", name)
}

/// Ctrl-C on `submit --follow` stops following and leaves the job running, as `kubectl
/// logs -f` does (the job is the server's), and says how to stop it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_on_submit_follow_leaves_the_job_running() {
    use std::io::{BufRead, BufReader};
    let dir = scratch("detach");
    let state = dir.join("state");
    let server = Server::start(&state);
    let spec = dir.join("long.json");
    std::fs::write(
        &spec,
        job(
            "long",
            json!([role(
                "worker",
                1,
                "echo started; while :; do sleep 1 & wait $!; done"
            )]),
            json!({}),
        ),
    )
    .expect("spec");
    let mut command = crate::common::rest_lite_command();
    command
        .args([
            "submit",
            "--follow",
            "-u",
            "alice",
            "--server",
            &server.url,
            "--state-dir",
        ])
        .arg(&state)
        .arg(&spec)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut follower = command.spawn().expect("rest-lite submit --follow");
    let stdout = follower.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // Following: the task's first line is printed.
    loop {
        let line = rx.recv_timeout(DEADLINE).expect("the task's output");
        if line.contains("started") {
            break;
        }
    }
    let pid = nix::unistd::Pid::from_raw(i32::try_from(follower.id()).expect("pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("SIGINT");
    let output = follower.wait_with_output().expect("the follower ends");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("no longer following long; it goes on")
            && stderr.contains("rest-lite stop long"),
        "{stderr}"
    );
    let view = server.client().job("alice", "long").await.expect("the job");
    assert_eq!(view.job_status.state, JobState::Running, "{view:?}");
    server
        .client()
        .stop("alice", "long")
        .await
        .expect("stopped");
}

#[test]
fn the_command_line_client_drives_a_job() {
    let dir = scratch("client");
    let server = Server::start(&dir.join("state"));
    let spec = dir.join("hello.yaml");
    std::fs::write(
        &spec,
        "jobName: hello\nimage: busybox\ntaskRoles:\n  - name: worker\n    taskNumber: 1\n    cpuNumber: 1\n    memoryMB: 128\n    command: echo hello from $PAI_CURRENT_TASK_ROLE_NAME\n",
    )
    .expect("spec");
    let connection = ["--server", server.url.as_str(), "--user", "alice"];
    // No token given: the CLI reads the server's own from its state directory.
    let state = dir.join("state");
    let state = state.to_str().expect("path");
    let with = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(connection);
        rest_lite(&all, &[("REST_LITE_STATE_DIR", state)])
    };
    let (code, stdout, stderr) = with(&["submit", spec.to_str().expect("path")]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("hello"), "{stdout}");
    let (code, stdout, _) = with(&["logs", "hello", "--role", "worker", "--follow"]);
    assert_eq!(code, Some(0));
    // The user's output is the whole of it; the runtime's lines are asked for.
    assert_eq!(stdout, "hello from worker\n");
    // A job of one task needs no -r: its only task is the one meant.
    let (code, stdout, stderr) = with(&["logs", "hello"]);
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (Some(0), "hello from worker\n", "")
    );
    let (code, stdout, _) = with(&["logs", "hello", "--role", "worker", "--runtime"]);
    assert_eq!(code, Some(0));
    assert!(
        stdout.contains("barrier passed") && !stdout.contains("hello from worker"),
        "{stdout}"
    );
    let (_, stdout, _) = with(&["logs", "hello", "--role", "worker", "--all"]);
    assert!(
        stdout.contains("barrier passed") && stdout.contains("hello from worker"),
        "{stdout}"
    );
    // For people: a table with task counts, a summary with a line per task.
    let (_, stdout, _) = with(&["jobs"]);
    let mut lines = stdout.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "USER", "STATE", "TASKS", "RETRIES", "AGE"],
        "{stdout}"
    );
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        &row[..5],
        ["hello", "alice", "SUCCEEDED", "0/1", "0"],
        "{stdout}"
    );
    let (code, stdout, _) = with(&["status", "hello"]);
    assert_eq!(code, Some(0));
    assert!(
        stdout.starts_with("job hello of alice: SUCCEEDED, 0 of 1 tasks running, 0 retries\n"),
        "{stdout}"
    );
    assert!(stdout.contains("exit code 0 (task worker-0)"), "{stdout}");
    // Its only task's end decided the outcome: marked, and said under the table.
    let task: Vec<&str> = stdout
        .lines()
        .find(|l| l.starts_with("worker-0* "))
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        task[..3],
        ["worker-0*", "SUCCEEDED", "127.0.0.1"],
        "{stdout}"
    );
    assert!(
        stdout.ends_with("* its end decided the job's outcome\n"),
        "{stdout}"
    );
    assert_eq!(task[4..], ["0", "0"], "exit code and retries: {stdout}");
    // For machines: the API's view.
    let (code, stdout, _) = with(&["status", "hello", "-o", "json"]);
    assert_eq!(code, Some(0));
    let view: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(view["name"], "hello");
    assert_eq!(view["jobStatus"]["runningTaskNumber"], 0);
    let (code, stdout, _) = with(&["status", "hello", "-o", "yaml"]);
    assert_eq!(code, Some(0));
    let view: Value = serde_saphyr::from_str(&stdout).expect("YAML");
    assert_eq!(view["jobStatus"]["state"], "SUCCEEDED");
    // An error says what to do next.
    let (code, _, stderr) = with(&["status", "nothing"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("NoJobError"), "{stderr}");
    assert!(
        stderr.contains("hint: `rest-lite jobs` lists your jobs"),
        "{stderr}"
    );
    let (code, _, stderr) = with(&["delete", "hello"]);
    assert_eq!(code, Some(0), "{stderr}");

    // YAML in flow style starts like JSON: the file's extension says what it is.
    let flow = dir.join("flow.yaml");
    std::fs::write(
        &flow,
        "{jobName: flow, image: busybox, taskRoles: [{name: w, taskNumber: 1, cpuNumber: 1, memoryMB: 128, command: 'true'}]}\n",
    )
    .expect("spec");
    let (code, stdout, stderr) = with(&["submit", flow.to_str().expect("path")]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout, "job flow submitted\n");

    // Submitted and followed: the output, then the job's exit code as ours.
    let failing = dir.join("failing.json");
    std::fs::write(
        &failing,
        job(
            "failing",
            json!([role("worker", 1, "echo giving up; exit 4")]),
            json!({}),
        ),
    )
    .expect("spec");
    let (code, stdout, stderr) = with(&["submit", failing.to_str().expect("path"), "--follow"]);
    assert_eq!(code, Some(4), "{stdout}\n{stderr}");
    assert!(stdout.contains("[worker-0] giving up"), "{stdout}");
    assert!(stderr.contains("job failing FAILED"), "{stderr}");
    drop(server);
}

#[test]
fn submit_wait_shows_each_role_starting_and_returns_once_every_task_runs() {
    let dir = scratch("wait");
    let (events_path, events) = events(&dir);
    let server = Server::start(&dir.join("state"));
    let spec = dir.join("waiting.json");
    std::fs::write(
        &spec,
        job(
            "waiting",
            json!([
                role("ps", 1, WAIT_FOR_TERM),
                role("worker", 2, WAIT_FOR_TERM)
            ]),
            json!({"jobEnvs": {"EVENTS": events_path.display().to_string()}}),
        ),
    )
    .expect("spec");
    let connection = ["--server", server.url.as_str(), "--user", "alice"];
    let mut args = vec!["submit", spec.to_str().expect("path"), "--wait"];
    args.extend(connection);
    let state = dir.join("state");
    let state_env = [("REST_LITE_STATE_DIR", state.to_str().expect("path"))];
    let (code, stdout, stderr) = rest_lite(&args, &state_env);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert_eq!(
        stdout, "job waiting submitted\njob waiting: all 3 tasks running\n",
        "{stderr}"
    );
    // Not a terminal: a plain line per change of a role, ending with every task running.
    assert!(stderr.contains("ps      1/1 running\n"), "{stderr}");
    assert!(stderr.contains("worker  2/2 running\n"), "{stderr}");
    assert!(
        stderr.contains(&format!("open {}/ui/jobs/alice/waiting", server.url)),
        "{stderr}"
    );
    // The printed next step works as printed: it names the server and the user.
    assert!(
        stderr.contains(&format!(
            "follow it with: rest-lite logs waiting -r ps -f --server {} -u alice,",
            server.url
        )),
        "{stderr}"
    );
    // Every task's user command did start.
    let mut up: Vec<String> = (0..3).map(|_| next_event(&events).expect("up")).collect();
    up.sort();
    assert_eq!(up, ["up ps-0", "up worker-0", "up worker-1"]);
    // The job and its tasks by state, and this machine's task start and barrier times.
    let metrics = get_text(
        &server.url,
        "/metrics",
        server.token.as_deref().expect("token"),
    );
    for line in [
        "rest_lite_jobs{state=\"RUNNING\"} 1",
        "rest_lite_jobs{state=\"FAILED\"} 0",
        "rest_lite_tasks{state=\"RUNNING\"} 3",
        "rest_lite_task_start_seconds_count 3",
        "rest_lite_task_start_seconds_bucket{le=\"+Inf\"} 3",
        "rest_lite_barrier_wait_seconds_count 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line}: {metrics}");
    }
    let mut stop = vec!["stop", "waiting"];
    stop.extend(connection);
    let (code, stdout, _) = rest_lite(&stop, &state_env);
    assert_eq!(code, Some(0));
    assert_eq!(stdout, "job waiting is stopping\n");
    assert_eq!(until_none_left(&events).len(), 3, "every task got TERM");
    // Stopping it again, once it ended: said so, and not a success.
    let ended = tokio::runtime::Runtime::new()
        .expect("a runtime")
        .block_on(final_view(&server.client(), "alice", "waiting"));
    assert_eq!(ended["jobStatus"]["state"], "STOPPED");
    let (code, stdout, stderr) = rest_lite(&stop, &state_env);
    assert_eq!(code, Some(1), "{stdout}");
    assert_eq!(stdout, "");
    assert!(
        stderr.starts_with("rest-lite: job waiting already ended (STOPPED")
            && stderr.ends_with("): nothing to stop\n"),
        "{stderr}"
    );
    // A task the job does not have: its own error naming the job's tasks, and a hint.
    let mut logs = vec!["logs", "waiting", "-r", "nosuchrole"];
    logs.extend(connection);
    let (code, _, stderr) = rest_lite(&logs, &state_env);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("NoTaskError (404): job alice~waiting has no task nosuchrole-0 (its tasks: ps 0–0, worker 0–1)")
            && stderr.contains("hint: `rest-lite status JOB` lists its tasks"),
        "{stderr}"
    );
    // A job of several roles: which task is asked, its tasks named, with the commands
    // that show them, as they run here.
    let mut logs = vec!["logs", "waiting"];
    logs.extend(connection);
    let (code, stdout, stderr) = rest_lite(&logs, &state_env);
    assert_eq!((code, stdout.as_str()), (Some(2), ""), "{stderr}");
    assert!(
        stderr.contains("error: job alice~waiting has 2 roles: say whose log with -r ROLE -i INDEX (its tasks: ps-0, worker-0, worker-1)"),
        "{stderr}"
    );
    let hint = stderr.lines().last().unwrap_or_default();
    let flags = format!(" --server {} -u alice", server.url);
    assert!(
        hint.starts_with("hint: `")
            && hint.contains(&format!(" status waiting{flags}` shows each task's state"))
            && hint.contains(&format!(" logs waiting -r ps -i 0{flags}`")),
        "{stderr}"
    );
    drop(server);
}

/// `submit --wait` on a job whose command fails at once (a typo): its tasks run for a
/// moment, then the job fails; --wait says so and exits with the job's code.
#[test]
fn submit_wait_ends_with_the_outcome_of_a_job_that_fails_at_once() {
    let dir = scratch("wait-fails");
    let server = Server::start(&dir.join("state"));
    let spec = dir.join("typo.json");
    std::fs::write(
        &spec,
        job(
            "typo",
            json!([role("worker", 2, "pythn train.py")]),
            json!({}),
        ),
    )
    .expect("spec");
    let state = dir.join("state");
    let state_env = [("REST_LITE_STATE_DIR", state.to_str().expect("path"))];
    let (code, stdout, stderr) = rest_lite(
        &[
            "submit",
            spec.to_str().expect("path"),
            "--wait",
            "--server",
            &server.url,
            "--user",
            "alice",
        ],
        &state_env,
    );
    assert_eq!(code, Some(127), "{stdout}\n{stderr}");
    assert!(!stdout.contains("running"), "{stdout}");
    assert!(
        stderr.contains("job typo FAILED (exit code 127")
            && stderr.contains("pythn: command not found"),
        "{stderr}"
    );
    drop(server);
}

/// `submit` of a user's own published job file (mythezone/OpenPAI_zmy, its virtual
/// cluster misspelt; its commands, which clone a repository, replaced by `true`) says
/// what is not done, from the API's answer.
#[test]
fn submit_names_the_fields_of_a_published_file_it_does_not_act_on() {
    let dir = scratch("submit-warned");
    // It asks for a GPU per task: two stated (none is opened), as a GPU machine has them.
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        "gpus:\n  devices:\n    - {index: 0, uuid: GPU-zmy-0}\n    - {index: 1, uuid: GPU-zmy-1}\n",
    )
    .expect("config");
    let server = Server::start_with_config(&dir.join("state"), &config);
    let state = dir.join("state");
    let published = std::fs::read_to_string(common::repo_root().join(
        "translate/tests/fixtures/v1/user__mythezone_OpenPAI_zmy__CNN_docker_version-0.1_job_config.json",
    ))
    .expect("fixture");
    let mut doc: Value = serde_json::from_str(&published).expect("JSON");
    for role in doc["taskRoles"].as_array_mut().expect("roles") {
        role["command"] = json!("true");
    }
    let spec = dir.join("job_config.json");
    std::fs::write(&spec, doc.to_string()).expect("spec");
    let (code, stdout, stderr) = rest_lite(
        &[
            "submit",
            spec.to_str().expect("path"),
            "--server",
            &server.url,
            "--user",
            "alice",
        ],
        &[("REST_LITE_STATE_DIR", state.to_str().expect("path"))],
    );
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(
            "warning: virtualCluster: \"defualt\" (did you mean \"default\"?) names no queue"
        ),
        "{stderr}"
    );
    drop(server);
}
