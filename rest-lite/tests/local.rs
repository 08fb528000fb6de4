//! The embedded default end to end: the real `rest-lite serve --backend local` process,
//! its tasks started through the real runtime, jobs submitted and followed over HTTP.
//! Tasks report through a FIFO: every user process holds its write end, so end of file
//! on the read end means every one of them is gone.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;

use pai_api::status::JobState;
use pai_client::Client;
use pai_translate::spec::SpecFormat;
use serde_json::{Value, json};

use common::fifo::{events, final_view, next_event};
use common::serve::{DEADLINE, Server};

fn scratch(name: &str) -> common::Scratch {
    common::scratch("local", name)
}

/// Every event until end of file (no task process holds the FIFO any more), sorted.
fn until_none_left(rx: &mpsc::Receiver<Option<String>>) -> Vec<String> {
    let mut seen = Vec::new();
    while let Some(event) = next_event(rx) {
        seen.push(event);
    }
    seen.sort();
    seen
}

async fn log_of(client: &Client, user: &str, job: &str, role: &str, index: u32) -> String {
    common::task_log(
        client,
        (user, job),
        (role, index),
        true,
        pai_client::Source::User,
    )
    .await
}

fn job(name: &str, roles: Value, extra: Value) -> String {
    let mut spec = json!({"jobName": name, "image": "busybox", "taskRoles": roles});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    spec.to_string()
}

fn role(name: &str, tasks: u32, command: &str) -> Value {
    json!({"name": name, "taskNumber": tasks, "cpuNumber": 1, "memoryMB": 128, "command": command})
}

/// A user command that reports `up <role>-<index>` into the FIFO, then waits; TERM makes
/// it report `term <role>-<index>` and leave.
const WAIT_FOR_TERM: &str = r#"me="$PAI_CURRENT_TASK_ROLE_NAME-$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"
exec 3>"$EVENTS"
trap 'echo "term $me" >&3; exit 0' TERM
echo "up $me" >&3
while :; do sleep 1 & wait $!; done"#;

/// Alice's job `name` of `roles`, whose commands say `up <role>-<index>` into a FIFO of
/// `dir` as [`WAIT_FOR_TERM`]'s do, submitted: the FIFO's events once every task of the
/// job said it is up, and what they said, sorted.
async fn submitted_and_up(
    client: &Client,
    dir: &Path,
    name: &str,
    roles: Value,
) -> (mpsc::Receiver<Option<String>>, Vec<String>) {
    let tasks: u64 = roles
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["taskNumber"].as_u64())
        .sum();
    let (events, rx) = events(dir);
    let spec = job(
        name,
        roles,
        json!({"jobEnvs": {"EVENTS": events.display().to_string()}}),
    );
    client
        .submit("alice", &spec, SpecFormat::detect(&spec))
        .await
        .expect("submitted");
    let mut up: Vec<String> = (0..tasks).map(|_| next_event(&rx).expect("up")).collect();
    up.sort();
    (rx, up)
}

/// The shell example submitted as alice and run to its end, which must be success: its
/// final view.
async fn the_example_run(client: &Client) -> Value {
    let spec = std::fs::read_to_string(common::repo_root().join("examples/shell-hello.yaml"))
        .expect("example");
    client
        .submit("alice", &spec, SpecFormat::detect(&spec))
        .await
        .expect("submitted");
    let view = final_view(client, "alice", "shell-hello").await;
    assert_eq!(view["jobStatus"]["state"], "SUCCEEDED", "{view:#}");
    view
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shell_example_exchanges_messages_over_tcp_and_succeeds() {
    let dir = scratch("example");
    let server = Server::start(&dir.join("state"));
    let client = server.client();
    let view = the_example_run(&client).await;
    assert_eq!(view["jobStatus"]["appExitCode"], 0);
    let diagnostics = view["jobStatus"]["appExitDiagnostics"]
        .as_str()
        .unwrap_or_default();
    assert!(
        diagnostics.contains("perl:5.40-slim") && diagnostics.contains("not used"),
        "{diagnostics}"
    );

    // Tasks of one role share this host: each has its own ports.
    let clients = view["taskRoles"]["client"]["taskStatuses"]
        .as_array()
        .expect("clients");
    let http: Vec<&str> = clients
        .iter()
        .map(|t| t["containerPorts"]["http"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(http.len(), 2);
    assert_ne!(http[0], http[1], "{view:#}");

    let server_log = log_of(&client, "alice", "shell-hello", "server", 0).await;
    assert!(
        server_log.contains("every client said hello"),
        "{server_log}"
    );
    for index in 0..2 {
        let log = log_of(&client, "alice", "shell-hello", "client", index).await;
        assert!(
            log.contains(&format!("heard: ack: hello from client {index}")),
            "{log}"
        );
    }
    let view = client.job("alice", "shell-hello").await.expect("job");
    assert_eq!(view.name, "shell-hello");
    drop(server);
}

/// The lines of a log asked with its times, each split into its time and the rest.
fn stamped_lines(log: &str) -> Vec<(jiff::Timestamp, String)> {
    log.lines()
        .map(|line| {
            let (time, rest) = line.split_once(' ').expect("a time, a space, the line");
            let time = time
                .parse()
                .unwrap_or_else(|e| panic!("{time:?} is no time: {e}"));
            (time, rest.to_string())
        })
        .collect()
}

/// The time of the first line of `lines` that holds `text`.
fn time_of(lines: &[(jiff::Timestamp, String)], text: &str) -> jiff::Timestamp {
    lines
        .iter()
        .find(|(_, line)| line.contains(text))
        .unwrap_or_else(|| panic!("no line holds {text:?}: {lines:?}"))
        .0
}

/// Asked with their times, the logs of several tasks can be put in the order they were
/// written: the server's line said before it listens is older than each client's line
/// said once the server answered; the runtime's lines carry their own times, the user's
/// output the times the runtime read it; the lines are otherwise as without times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_logs_times_put_the_lines_of_several_tasks_in_the_order_written() {
    let dir = scratch("times");
    let server = Server::start(&dir.join("state"));
    let client = server.client();
    the_example_run(&client).await;
    let job = ("alice", "shell-hello");
    let all = pai_client::Lines::Source(pai_client::Source::All);
    let server_log = common::task_log(&client, job, ("server", 0), false, all.stamped()).await;
    let server_lines = stamped_lines(&server_log);
    let listens = time_of(&server_lines, "listens on");
    // The runtime's line before it, with its own time: the init step's last (its
    // "user command started" is said once the spawn returned, which the command's first
    // line may beat).
    assert!(
        time_of(&server_lines, "entry done") < listens,
        "{server_log}"
    );
    let unstamped = common::task_log(&client, job, ("server", 0), false, all).await;
    let rest: String = server_lines.iter().map(|(_, l)| format!("{l}\n")).collect();
    assert_eq!(rest, unstamped);
    for index in 0..2 {
        let user = pai_client::Lines::Source(pai_client::Source::User).stamped();
        let log = common::task_log(&client, job, ("client", index), true, user).await;
        let heard = time_of(&stamped_lines(&log), "heard: ack");
        assert!(
            listens < heard,
            "server: {server_log}\nclient {index}: {log}"
        );
    }
    // One stream alone, with its times.
    let stdout = pai_client::Lines::Stream(pai_client::Stream::Stdout).stamped();
    let log = common::task_log(&client, job, ("server", 0), false, stdout).await;
    assert_eq!(time_of(&stamped_lines(&log), "listens on"), listens);
    // The command line, as `kubectl logs --timestamps`.
    let state = dir.join("state");
    let (code, printed, stderr) = rest_lite(
        &[
            "logs",
            "shell-hello",
            "-r",
            "server",
            "--timestamps",
            "--server",
            server.url.as_str(),
            "--user",
            "alice",
        ],
        &[("REST_LITE_STATE_DIR", state.to_str().expect("path"))],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(time_of(&stamped_lines(&printed), "listens on"), listens);
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_task_fails_the_job_with_its_code_and_name() {
    let dir = scratch("failure");
    let server = Server::start(&dir.join("state"));
    let client = server.client();
    let wait = "while :; do sleep 1 & wait $!; done";
    let spec = job(
        "fails",
        json!([
            role("ps", 1, wait),
            {"name": "worker", "taskNumber": 2, "cpuNumber": 1, "memoryMB": 128, "minFailedTaskCount": 1,
             "command": format!("if [ \"$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX\" = 1 ]; then echo bad input >&2; exit 7; fi\n{wait}")}
        ]),
        json!({}),
    );
    client
        .submit("alice", &spec, SpecFormat::detect(&spec))
        .await
        .expect("submitted");
    let view = final_view(&client, "alice", "fails").await;
    let status = &view["jobStatus"];
    assert_eq!(status["state"], "FAILED", "{view:#}");
    assert_eq!(status["appExitCode"], 7);
    assert_eq!(status["appExitTriggerTaskRoleName"], "worker");
    assert_eq!(status["appExitTriggerTaskIndex"], 1);
    assert!(
        status["appExitDiagnostics"]
            .as_str()
            .unwrap_or_default()
            .contains("code 7: bad input"),
        "{status}"
    );
    assert_eq!(status["retries"], 0);
    let worker = &view["taskRoles"]["worker"]["taskStatuses"];
    assert_eq!(worker[1]["containerExitCode"], 7);
    // The others were ended when the attempt completed: by the platform, not failed.
    assert_eq!(worker[0]["containerExitCode"], -220);
    assert_eq!(worker[0]["taskState"], "STOPPED");
    assert_eq!(worker[1]["taskState"], "FAILED");
    assert_eq!(worker[1]["decidedOutcome"], true);
    assert_eq!(
        view["taskRoles"]["ps"]["taskStatuses"][0]["containerExitCode"],
        -220
    );
    drop(server);
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
            .env("RUST_LOG", "info,pai_local::memory=debug"),
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

/// Roles are shown in the order the spec gives them (`worker` before `ps` here), in the
/// API's view as OpenPAI's answered, and in `status`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_keep_the_order_of_the_spec() {
    let dir = scratch("role-order");
    let state = dir.join("state");
    let server = Server::start(&state);
    let client = server.client();
    let spec = job(
        "ordered",
        json!([role("worker", 2, "true"), role("ps", 1, "true")]),
        json!({}),
    );
    client
        .submit("alice", &spec, SpecFormat::detect(&spec))
        .await
        .expect("submitted");
    final_view(&client, "alice", "ordered").await;
    // The JSON as sent (a `Value` would sort its keys).
    let text = get_text(
        &server.url,
        "/api/v1/user/alice/jobs/ordered",
        server.token.as_deref().expect("token"),
    );
    let roles = &text[text.find("\"taskRoles\"").expect("taskRoles")..];
    let (worker, ps) = (roles.find("\"worker\":"), roles.find("\"ps\":"));
    assert!(worker.is_some() && ps.is_some() && worker < ps, "{text}");
    let typed = client.job("alice", "ordered").await.expect("the job");
    let typed_roles: Vec<&str> = typed.task_roles.keys().map(String::as_str).collect();
    assert_eq!(typed_roles, ["worker", "ps"]);
    let (code, stdout, stderr) = rest_lite(
        &[
            "status",
            "ordered",
            "-u",
            "alice",
            "--server",
            &server.url,
            "--state-dir",
        ]
        .into_iter()
        .chain([state.to_str().expect("path")])
        .collect::<Vec<_>>(),
        &[],
    );
    assert_eq!(code, Some(0), "{stderr}");
    // The task table's rows.
    let (worker, ps) = (stdout.find("\nworker-0"), stdout.find("\nps-0"));
    assert!(worker.is_some() && ps.is_some() && worker < ps, "{stdout}");
    drop(server);
}

/// A server started where SIGHUP is ignored (`nohup rest-lite serve &`) gives its tasks
/// every signal at its default action, as a container's PID 1 would: a task that gets
/// SIGHUP dies of it (exit 129), instead of going on to `exit 3`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_of_a_server_that_ignores_sighup_still_dies_of_it() {
    let dir = scratch("nohup");
    let state = dir.join("state");
    let mut command = Server::command(&state);
    command.args(["--backend", "local"]);
    let server = Server::spawn(
        &mut common::serve::under("nohup", &command),
        &["this machine (embedded default)"],
    )
    .with_machine_token(&state);
    let client = server.client();
    let spec = job(
        "hangup",
        json!([role("main", 1, "kill -HUP $$; exit 3")]),
        json!({}),
    );
    client
        .submit("alice", &spec, SpecFormat::detect(&spec))
        .await
        .expect("submitted");
    let view = final_view(&client, "alice", "hangup").await;
    let status = &view["jobStatus"];
    assert_eq!(status["state"], "FAILED", "{view:#}");
    assert_eq!(status["appExitCode"], 129, "killed by SIGHUP: {status}");
    assert!(
        status["appExitDiagnostics"]
            .as_str()
            .is_some_and(|d| d.contains("SIGHUP")),
        "{status}"
    );
    drop(server);
}

/// Each task's result: written to `$PAI_RESULT_FILE`, sent by the runtime as the main
/// container's termination message, shown in the job's status, by `rest-lite results`
/// and on the page; a result that cannot be sent is reported and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tasks_result_reaches_the_status_and_bad_ones_are_reported() {
    let dir = scratch("results");
    let server = Server::start(&dir.join("state"));
    let client = server.client();
    let command = r#"case $PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX in
0) printf '{"accuracy": 0.93, "checkpoint": "/out/ckpt-7"}' > "$PAI_RESULT_FILE" ;;
1) echo 'accuracy: 0.5' > "$PAI_RESULT_FILE" ;;
2) printf '%05000d' 7 > "$PAI_RESULT_FILE" ;;
esac"#;
    let spec = job("scored", json!([role("eval", 4, command)]), json!({}));
    client
        .submit("alice", &spec, SpecFormat::detect(&spec))
        .await
        .expect("submitted");
    let view = final_view(&client, "alice", "scored").await;
    assert_eq!(
        view["jobStatus"]["state"], "SUCCEEDED",
        "results never change the outcome: {view:#}"
    );
    let tasks = &view["taskRoles"]["eval"]["taskStatuses"];
    assert_eq!(
        tasks[0]["result"],
        json!({"accuracy": 0.93, "checkpoint": "/out/ckpt-7"})
    );
    assert!(tasks[1]["result"].is_null());
    assert!(
        tasks[1]["resultError"]
            .as_str()
            .is_some_and(|e| e.contains("not JSON")),
        "{tasks:#}"
    );
    assert!(
        tasks[2]["resultError"]
            .as_str()
            .is_some_and(|e| e.contains("5000 bytes") && e.contains("at most 4000")),
        "{tasks:#}"
    );
    assert!(tasks[3]["result"].is_null() && tasks[3]["resultError"].is_null());

    // The command line prints them, as JSON and for people.
    let url = server.url.clone();
    let token = server.token.clone().expect("the machine's token");
    let cli = |args: &'static [&'static str]| {
        let (url, token) = (url.clone(), token.clone());
        tokio::task::spawn_blocking(move || {
            let mut all = args.to_vec();
            all.extend(["--server", &url, "-u", "alice", "--token", &token]);
            rest_lite(&all, &[])
        })
    };
    let (code, stdout, stderr) = cli(&["results", "scored", "-o", "json"])
        .await
        .expect("join");
    assert_eq!(code, Some(0), "{stderr}");
    let printed: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(printed["eval-0"]["accuracy"], 0.93, "{printed:#}");
    assert!(printed["eval-1"]["error"].is_string(), "{printed:#}");
    assert!(printed.get("eval-3").is_none(), "{printed:#}");
    let (_, table, _) = cli(&["results", "scored"]).await.expect("join");
    assert!(
        table.contains(r#"eval-0  SUCCEEDED  {"accuracy":0.93,"checkpoint":"/out/ckpt-7"}"#),
        "{table}"
    );
    // And the page.
    let page = tokio::task::spawn_blocking(move || get_text(&url, "/ui/jobs/alice/scored", &token))
        .await
        .expect("join");
    assert!(
        page.contains("result <code>{&quot;accuracy&quot;:0.93,"),
        "{page}"
    );
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_retried_twice_succeeds_on_its_third_attempt() {
    let dir = scratch("retry");
    let server = Server::start(&dir.join("state"));
    let client = server.client();
    let counter = dir.join("attempts");
    let spec = job(
        "flaky",
        json!([role(
            "worker",
            1,
            "n=$(cat \"$COUNTER\" 2>/dev/null || echo 0); n=$((n + 1)); echo \"$n\" > \"$COUNTER\"\necho \"attempt $FC_FRAMEWORK_ATTEMPT_ID, run $n\"\n[ \"$n\" -ge 3 ]"
        )]),
        json!({"retryCount": 2, "jobEnvs": {"COUNTER": counter.display().to_string()}}),
    );
    client
        .submit("alice", &spec, SpecFormat::detect(&spec))
        .await
        .expect("submitted");
    let view = final_view(&client, "alice", "flaky").await;
    assert_eq!(view["jobStatus"]["state"], "SUCCEEDED", "{view:#}");
    assert_eq!(view["jobStatus"]["retries"], 2);
    assert_eq!(
        std::fs::read_to_string(&counter).expect("counter").trim(),
        "3"
    );
    // Every attempt's end is kept: code, phrase, the task, whether it was retried.
    let attempts = view["jobStatus"]["attempts"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ends: Vec<_> = attempts
        .iter()
        .map(|a| {
            (
                a["attempt"].as_i64(),
                a["exitCode"].as_i64(),
                a["phrase"].as_str().map(String::from),
                a["triggerTaskRoleName"].as_str().map(String::from),
                a["retried"].as_bool(),
            )
        })
        .collect();
    let failed = |n| {
        (
            Some(n),
            Some(1),
            Some("ContainerUnrecognizedFailed".to_string()),
            Some("worker".to_string()),
            Some(true),
        )
    };
    assert_eq!(
        ends,
        [
            failed(0),
            failed(1),
            (
                Some(2),
                Some(0),
                Some("Succeeded".to_string()),
                Some("worker".to_string()),
                Some(false)
            )
        ],
        "{view:#}"
    );
    // The page lists the earlier ones too, a line each (the last one's end is the job's,
    // said once above them).
    let page = {
        let url = server.url.clone();
        let token = server.token.clone().expect("the machine's token");
        tokio::task::spawn_blocking(move || get_text(&url, "/ui/jobs/alice/flaky", &token))
            .await
            .expect("join")
    };
    let listed = page
        .split(r#"<ul class="attempts" id="attempts">"#)
        .nth(1)
        .and_then(|rest| rest.split("</ul>").next())
        .unwrap_or_else(|| panic!("the attempts: {page}"));
    assert_eq!(listed.matches("<li>").count(), 2, "{listed}");
    assert!(
        listed.contains("attempt 0 failed: task worker-0: the user command exited with code 1")
            && listed.contains("retried as attempt 1"),
        "{listed}"
    );
    let log = log_of(&client, "alice", "flaky", "worker", 0).await;
    assert!(log.contains("attempt 2, run 3"), "{log}");
    assert!(!log.contains("run 2"), "only the current attempt's: {log}");
    // Each earlier attempt's own log, kept until the job is deleted.
    for (attempt, line) in [(0, "attempt 0, run 1"), (1, "attempt 1, run 2")] {
        let text = common::read_all(
            client
                .attempt_logs(
                    "alice",
                    "flaky",
                    "worker",
                    0,
                    attempt,
                    pai_client::Source::User,
                )
                .await
                .expect("an earlier attempt's log"),
        )
        .await;
        assert!(text.contains(line), "attempt {attempt}: {text}");
        assert!(!text.contains("run 3"), "attempt {attempt}: {text}");
    }
    match client
        .attempt_logs("alice", "flaky", "worker", 0, 3, pai_client::Source::User)
        .await
    {
        Err(pai_client::ClientError::Api {
            status: 404,
            message,
            ..
        }) => assert!(
            message.contains("no attempt 3") && message.contains("current attempt is 2"),
            "{message}"
        ),
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("attempt 3 does not exist"),
    }
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_terms_every_task_and_leaves_no_process() {
    let dir = scratch("stop");
    let server = Server::start(&dir.join("state"));
    let client = server.client();
    let roles = json!([
        role("ps", 1, WAIT_FOR_TERM),
        role("worker", 2, WAIT_FOR_TERM)
    ]);
    let (rx, up) = submitted_and_up(&client, &dir, "long", roles).await;
    assert_eq!(up, ["up ps-0", "up worker-0", "up worker-1"]);
    assert_eq!(
        client
            .job("alice", "long")
            .await
            .expect("job")
            .job_status
            .state,
        JobState::Running
    );

    client.stop("alice", "long").await.expect("stopped");
    let seen = until_none_left(&rx);
    assert_eq!(
        seen,
        ["term ps-0", "term worker-0", "term worker-1"],
        "every task got TERM; end of file: none is left"
    );
    let view = final_view(&client, "alice", "long").await;
    assert_eq!(view["jobStatus"]["state"], "STOPPED", "{view:#}");
    assert_eq!(view["jobStatus"]["appExitCode"], -210);
    drop(server);
}

/// Task progress is written with whatever came meanwhile, not once per task: however it
/// is spaced, the stored Framework of a job whose tasks all run says so without any
/// further event (a progress write left pending would leave it saying otherwise until
/// the next decision).
#[tokio::test]
async fn every_tasks_progress_reaches_the_stored_framework_with_no_event_after_it() {
    let dir = scratch("progress-stored");
    let server = Server::start(&dir.join("state"));
    let client = server.client();
    let roles = json!([role("worker", 6, WAIT_FOR_TERM)]);
    let (rx, _) = submitted_and_up(&client, &dir, "progress", roles).await;
    let stored = dir
        .join("state/jobs")
        .join(pai_contract::names::framework_name("alice", "progress"))
        .join("framework.json");
    let running_on_disk = || {
        let framework: pai_contract::Framework =
            serde_json::from_slice(&std::fs::read(&stored).expect("the stored Framework"))
                .expect("a Framework");
        framework
            .task_role_statuses()
            .expect("task statuses")
            .iter()
            .flat_map(|r| r.task_statuses.iter())
            .filter(|t| t.state == pai_contract::framework::FrameworkState::AttemptRunning)
            .count()
    };
    let deadline = std::time::Instant::now() + DEADLINE;
    while running_on_disk() < 6 {
        assert!(
            std::time::Instant::now() < deadline,
            "the stored Framework never showed every task running"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    client.stop("alice", "progress").await.expect("stopped");
    assert_eq!(until_none_left(&rx).len(), 6, "every task got TERM");
    let view = final_view(&client, "alice", "progress").await;
    assert_eq!(view["jobStatus"]["state"], "STOPPED", "{view:#}");
}

/// Alice's job "doomed" (two tasks that wait for TERM), running, then deleted (202);
/// returns its tasks' events.
async fn run_then_delete(client: &Client, dir: &Path) -> mpsc::Receiver<Option<String>> {
    let roles = json!([role("worker", 2, WAIT_FOR_TERM)]);
    let (rx, _) = submitted_and_up(client, dir, "doomed", roles).await;
    client.delete("alice", "doomed").await.expect("deleted");
    rx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_ends_every_task_and_frees_the_name() {
    let dir = scratch("delete");
    let server = Server::start(&dir.join("state"));
    let client = server.client();
    let rx = run_then_delete(&client, &dir).await;
    assert!(matches!(
        client.job("alice", "doomed").await,
        Err(pai_client::ClientError::Api { status: 404, .. })
    ));
    let seen = until_none_left(&rx);
    assert_eq!(seen.len(), 2, "{seen:?}");
    let listed = client.jobs(Some("alice")).await.expect("list");
    assert!(listed.is_empty());
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_once_answered_survives_a_server_killed_right_after() {
    let dir = scratch("delete-kill");
    let state = dir.join("state");
    let server = Server::start(&state);
    let client = server.client();
    let rx = run_then_delete(&client, &dir).await;
    // Killed at once: the tasks may not even have had their TERM from the deletion.
    server.kill();
    until_none_left(&rx);

    let server = Server::start(&state);
    let client = server.client();
    assert!(
        client.jobs(Some("alice")).await.expect("list").is_empty(),
        "a deleted job came back"
    );
    assert!(matches!(
        client.job("alice", "doomed").await,
        Err(pai_client::ClientError::Api { status: 404, .. })
    ));
    // Finished, not only hidden: the name is free again.
    let again = job("doomed", json!([role("worker", 1, "true")]), json!({}));
    client
        .submit("alice", &again, SpecFormat::Json)
        .await
        .expect("the name is free");
    assert_eq!(
        final_view(&client, "alice", "doomed").await["jobStatus"]["state"],
        "SUCCEEDED"
    );
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_job_restarts_with_every_job_and_retries_the_running_one() {
    let dir = scratch("restart");
    let state = dir.join("state");
    let server = Server::start(&state);
    let client = server.client();
    // One job done before the crash.
    client
        .submit(
            "alice",
            &job(
                "done",
                json!([role("worker", 1, "echo finished")]),
                json!({}),
            ),
            SpecFormat::Json,
        )
        .await
        .expect("submitted");
    assert_eq!(
        final_view(&client, "alice", "done").await["jobStatus"]["state"],
        "SUCCEEDED"
    );
    // One running at the crash: its second attempt succeeds at once.
    let command = format!(
        "if [ \"$FC_FRAMEWORK_ATTEMPT_ID\" != 0 ]; then echo \"attempt $FC_FRAMEWORK_ATTEMPT_ID\"; exit 0; fi\n{WAIT_FOR_TERM}"
    );
    let roles = json!([role("worker", 2, &command)]);
    let (rx, up) = submitted_and_up(&client, &dir, "crash", roles).await;
    assert_eq!(up, ["up worker-0", "up worker-1"]);

    server.kill();
    // The tasks die with the server: each got TERM, then no writer is left.
    let seen = until_none_left(&rx);
    assert_eq!(seen, ["term worker-0", "term worker-1"]);

    let server = Server::start(&state);
    let client = server.client();
    let mut names: Vec<String> = client
        .jobs(Some("alice"))
        .await
        .expect("list")
        .into_iter()
        .map(|j| j.name)
        .collect();
    names.sort();
    assert_eq!(names, ["crash", "done"]);
    assert_eq!(
        client
            .job("alice", "done")
            .await
            .expect("job")
            .job_status
            .state,
        JobState::Succeeded
    );

    let view = final_view(&client, "alice", "crash").await;
    assert_eq!(view["jobStatus"]["state"], "SUCCEEDED", "{view:#}");
    assert_eq!(
        view["jobStatus"]["retries"], 1,
        "the interrupted attempt was retried"
    );
    // And the job says why: its first attempt ended with the server.
    let first = &view["jobStatus"]["attempts"][0];
    assert_eq!(first["attempt"], 0, "{view:#}");
    assert_eq!(first["phrase"], "PodExternalDeleted", "{view:#}");
    assert_eq!(first["retried"], true, "{view:#}");
    assert!(
        first["meaning"]
            .as_str()
            .is_some_and(|m| m.contains("the server restarted")),
        "{view:#}"
    );
    let log = log_of(&client, "alice", "crash", "worker", 0).await;
    assert!(log.contains("attempt 1"), "{log}");
    drop(server);
}

/// Runs `rest-lite ARGS` to its end (killed past the deadline); returns (code, stdout,
/// stderr).
fn rest_lite(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut command = crate::common::rest_lite_command();
    command
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    let child = command.spawn().expect("rest-lite");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let output = match rx.recv_timeout(DEADLINE) {
        Ok(output) => output.expect("output"),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("rest-lite {args:?} did not end");
        }
    };
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn the_quick_start_runs_the_example_in_one_command() {
    let example = common::repo_root().join("examples/shell-hello.yaml");
    let (code, stdout, stderr) = rest_lite(
        &["run", example.to_str().expect("path"), "--user", "alice"],
        &[],
    );
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("[server-0] every client said hello"),
        "{stdout}"
    );
    assert!(
        stdout.contains("[client-1] client 1 of 2 heard: ack: hello from client 1"),
        "{stdout}"
    );
    // In the order written, across tasks: the server says it listens before any client
    // can have heard from it.
    let listens = stdout.find("] server of").expect("the server's first line");
    assert!(
        stdout
            .find("heard: ack")
            .is_some_and(|heard| listens < heard),
        "{stdout}"
    );
    assert!(stderr.contains("job shell-hello SUCCEEDED"), "{stderr}");
}

/// A retried attempt is told as it happens (`run`, like `submit --follow`), and `status`
/// keeps telling it afterwards.
#[test]
fn each_retried_attempt_is_told_with_its_reason() {
    let dir = scratch("run-retried");
    let spec = dir.join("flaky.yaml");
    std::fs::write(
        &spec,
        "jobName: flaky\nimage: busybox\nretryCount: 1\ntaskRoles:\n  - name: worker\n    taskNumber: 1\n    cpuNumber: 1\n    memoryMB: 128\n    command: 'if [ \"$FC_FRAMEWORK_ATTEMPT_ID\" = 0 ]; then echo broken >&2; exit 3; fi; echo fine'\n",
    )
    .expect("spec");
    let state = dir.join("state");
    let (code, stdout, stderr) = rest_lite(
        &[
            "run",
            spec.to_str().expect("path"),
            "--user",
            "alice",
            "--state-dir",
            state.to_str().expect("path"),
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    let told = "attempt 0 failed: task worker-0: the user command exited with code 3";
    assert!(
        stderr.contains(&format!("rest-lite: job flaky: {told}"))
            // Told as it ended: the next attempt waits (a quick failure backs off).
            && stderr.contains("; retrying in 10 s (attempt 1)"),
        "{stderr}"
    );
    assert!(stderr.contains("job flaky SUCCEEDED"), "{stderr}");
    // The state directory was kept: a server on it answers `status` with the history.
    let server = Server::start(&state);
    let (code, stdout, stderr) = rest_lite(
        &["status", "flaky", "--server", &server.url, "-u", "alice"],
        &[("REST_LITE_STATE_DIR", state.to_str().expect("path"))],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.starts_with("job flaky of alice: SUCCEEDED, 0 of 1 tasks running, 1 retry\n"),
        "{stdout}"
    );
    assert!(stdout.contains(told), "{stdout}");
    drop(server);
}

#[test]
fn run_exits_with_the_failed_jobs_code() {
    let dir = scratch("run-fails");
    let spec = dir.join("fails.json");
    std::fs::write(
        &spec,
        job(
            "exits",
            json!([role("worker", 1, "echo about to fail; exit 3")]),
            json!({}),
        ),
    )
    .expect("spec");
    let (code, stdout, stderr) = rest_lite(&["run", spec.to_str().expect("path")], &[]);
    assert_eq!(code, Some(3), "{stdout}\n{stderr}");
    assert!(stdout.contains("[worker-0] about to fail"), "{stdout}");
    // The runtime's own lines are not the user's output (`run -v` shows them).
    assert!(!stdout.contains("[runtime "), "{stdout}");
    assert!(stderr.contains("FAILED"), "{stderr}");
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
fn without_a_cluster_configuration_serve_runs_jobs_here() {
    let dir = scratch("auto");
    let state = dir.join("state");
    let server = Server::spawn(
        Server::command(&state)
            .env("HOME", dir.as_os_str())
            .env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT"),
        &[
            "this machine (embedded default)",
            &state.display().to_string(),
        ],
    );
    assert!(
        server.url.starts_with("http://127.0.0.1:"),
        "{}",
        server.url
    );
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

#[test]
fn a_token_made_by_the_command_lets_its_user_in() {
    let dir = scratch("token");
    let file = dir.join("tokens.yaml");
    let (code, token, stderr) = rest_lite(
        &["token", "alice", "--file", file.to_str().expect("path")],
        &[],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let token = token.trim().to_string();
    assert_eq!(token.len(), 64, "{token}");
    let (code, _, stderr) = rest_lite(
        &[
            "token",
            "ops",
            "--admin",
            "--file",
            file.to_str().expect("path"),
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let text = std::fs::read_to_string(&file).expect("token file");
    assert!(!text.contains(&token), "the file holds hashes only: {text}");
    assert!(text.contains(&pai_server::auth::hash(&token)), "{text}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).expect("meta").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let (code, _, stderr) = rest_lite(
        &["token", "a b", "--file", file.to_str().expect("path")],
        &[],
    );
    assert_eq!(code, Some(2));
    assert!(stderr.contains("user name \"a b\""), "{stderr}");
    // A second token for alice only when asked for.
    let path = file.to_str().expect("path");
    let (code, _, stderr) = rest_lite(&["token", "alice", "--file", path], &[]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("user alice has a token in") && stderr.contains("--another"),
        "{stderr}"
    );
    let before = std::fs::read_to_string(&file).expect("token file");
    let (code, second, stderr) = rest_lite(&["token", "alice", "--another", "--file", path], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_ne!(second.trim(), token);
    let after = std::fs::read_to_string(&file).expect("token file");
    assert!(after.starts_with(&before) && after.len() > before.len());

    let server = Server::start_with_tokens(&dir.join("state"), &file);
    let (code, stdout, stderr) = rest_lite(
        &[
            "jobs",
            "--server",
            &server.url,
            "--user",
            "alice",
            "--token",
            &token,
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.starts_with("no jobs"), "{stdout}");
    let (code, _, stderr) = rest_lite(&["jobs", "--server", &server.url, "--user", "alice"], &[]);
    assert_eq!(code, Some(2));
    // The server says where its tokens are; the hint, both ways of this machine's.
    assert!(
        stderr.contains("Ask this server's operator for a token")
            && stderr.contains("hint: a server of this machine")
            && stderr.contains("--token"),
        "{stderr}"
    );
    // A token given that is not the server's is said to be so.
    let (code, _, stderr) = rest_lite(
        &[
            "jobs",
            "--server",
            &server.url,
            "--user",
            "alice",
            "--token",
            "wrong",
        ],
        &[],
    );
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("the bearer token given is not one of this server's")
            && stderr.contains(
                "hint: the token given (--token or REST_LITE_TOKEN) is not this server's"
            ),
        "{stderr}"
    );
    // A task that does not exist: its own error, and a hint that lists the tasks.
    let mut logs = vec!["logs", "nosuch", "-r", "nosuchrole"];
    logs.extend([
        "--server",
        &server.url,
        "--user",
        "alice",
        "--token",
        &token,
    ]);
    let (code, _, stderr) = rest_lite(&logs, &[]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("NoJobError"), "no such job first: {stderr}");
    // Without -u the commands act as the user the token stands for (the server says).
    let spec = dir.join("mine.json");
    std::fs::write(
        &spec,
        job("mine", json!([role("worker", 1, "true")]), json!({})),
    )
    .expect("spec");
    let spec = spec.to_str().expect("path");
    let (code, stdout, stderr) = rest_lite(
        &["submit", spec, "--server", &server.url, "--token", &token],
        &[],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("mine"), "{stdout}");
    let (code, stdout, stderr) =
        rest_lite(&["jobs", "--server", &server.url, "--token", &token], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("mine ") && l.contains(" alice ")),
        "{stdout}"
    );
    drop(server);
    // Nobody listens there any more.
    let (code, _, stderr) = rest_lite(
        &["jobs", "--server", "http://127.0.0.1:9", "--user", "a"],
        &[],
    );
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("hint: is a server running there?"),
        "{stderr}"
    );
}

/// The body of a GET, over a plain connection.
/// This machine's token goes to this machine's server only: `--server` naming another
/// address (a listener of the test's, on this machine too, that records what it is
/// sent) gets no Authorization header; the machine's own server, at the address it
/// recorded beside its token, gets the token without one being typed.
#[test]
fn the_machine_token_goes_to_this_machines_server_only() {
    use std::io::{BufRead, BufReader, Write};
    let dir = scratch("own-server");
    let state = dir.join("state");
    let server = Server::start(&state);
    let other = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let other_url = format!("http://{}", other.local_addr().expect("address"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (mut stream, _) = other.accept().expect("accept");
        let mut reader = BufReader::new(stream.try_clone().expect("clone"));
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let body = r#"{"code":"UnauthorizedUserError","message":"a token is needed"}"#;
        let _ = write!(
            stream,
            "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = tx.send(head);
    });
    let state_arg = state.to_str().expect("path");
    let (code, _, stderr) = rest_lite(
        &[
            "jobs",
            "--server",
            &other_url,
            "--state-dir",
            state_arg,
            "-u",
            "alice",
        ],
        &[],
    );
    assert_eq!(code, Some(2), "{stderr}");
    let head = rx
        .recv_timeout(DEADLINE)
        .expect("the other server was asked");
    assert!(head.starts_with("GET "), "{head}");
    assert!(
        !head.to_ascii_lowercase().contains("authorization"),
        "the machine's token went to another server: {head}"
    );
    let (code, stdout, stderr) = rest_lite(
        &["jobs", "--server", &server.url, "--state-dir", state_arg],
        &[],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.starts_with("no jobs"), "{stdout}");
}

fn get_text(url: &str, path: &str, token: &str) -> String {
    use std::io::{Read, Write};
    let address = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).expect("connect");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("receive");
    let (head, body) = answer.split_once("\r\n\r\n").expect("head");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

/// A task's ports stay bound by the server from their allocation until its main
/// container starts: while its init container runs (a `prep/` script here), nothing of
/// this machine can bind them; its user command then can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_ports_are_held_until_its_main_container_starts() {
    let dir = scratch("held-ports");
    let (first, last) = (31600, 31639);
    // The only prep/ script: which ports of the range can be bound now.
    let assets = dir.join("assets");
    std::fs::create_dir_all(assets.join("prep")).expect("prep");
    std::fs::create_dir_all(assets.join("init")).expect("init");
    let during_init = dir.join("during-init");
    std::fs::write(
        assets.join("prep/10-ports.sh"),
        format!(
            "exec perl -MIO::Socket::INET -e 'for my $p ({first}..{last}) {{ \
             my $s = IO::Socket::INET->new(LocalAddr => \"0.0.0.0\", LocalPort => $p, \
             Listen => 1, ReuseAddr => 1); print \"$p \", ($s ? \"free\" : \"taken\"), \"\\n\" }}' > {}\n",
            during_init.display()
        ),
    )
    .expect("prep script");
    let server = Server::spawn(
        Server::command(&dir.join("state"))
            .args(["--backend", "local", "--port-range"])
            .arg(format!("{first}-{last}"))
            .arg("--assets")
            .arg(&assets),
        &["this machine (embedded default)"],
    )
    .with_machine_token(&dir.join("state"));
    let client = server.client();
    // The user command binds its own port.
    let bind = "perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalAddr => \"0.0.0.0\", \
                LocalPort => $ENV{PAI_CURRENT_CONTAINER_PORT}, Listen => 1, ReuseAddr => 1) \
                or die \"cannot bind: $!\\n\"; print \"bound $ENV{PAI_CURRENT_CONTAINER_PORT}\\n\"'";
    let spec = job("held", json!([role("worker", 1, bind)]), json!({}));
    client
        .submit("alice", &spec, SpecFormat::Json)
        .await
        .expect("submitted");
    let view = final_view(&client, "alice", "held").await;
    assert_eq!(view["jobStatus"]["state"], "SUCCEEDED", "{view:#}");
    let port = view["taskRoles"]["worker"]["taskStatuses"][0]["containerPorts"]["http"]
        .as_str()
        .expect("the task's http port")
        .to_string();
    let seen = std::fs::read_to_string(&during_init).expect("the prep script's report");
    assert!(
        seen.lines().any(|l| l == format!("{port} taken")),
        "port {port} was not held while the init container ran:\n{seen}"
    );
    let log = log_of(&client, "alice", "held", "worker", 0).await;
    assert_eq!(log, format!("bound {port}\n"));
    drop(server);
}

/// A v1 job as OpenPAI's users wrote them (comments, a role name with '-', numbers as
/// strings, `codeDir`, a bash-only command, fields not acted on): it runs its code from
/// the task's working directory under bash, and every field not acted on is named.
#[test]
fn a_v1_job_as_people_wrote_it_runs_its_code_under_bash() {
    let dir = scratch("v1-code-dir");
    let code = dir.join("code");
    std::fs::create_dir_all(&code).expect("code dir");
    std::fs::write(
        code.join("start.sh"),
        "#!/bin/sh\necho \"start.sh ran in $(basename \"$(pwd)\") with $1\"\n",
    )
    .expect("script");
    std::fs::set_permissions(
        code.join("start.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let spec = dir.join("job.json");
    std::fs::write(
        &spec,
        format!(
            r#"{{
  // As OpenPAI's examples wrote them: comments, and the code beside the job.
  "jobName": "v1-as-written",
  "image": "openpai/pai.example.tensorflow",
  "codeDir": "file://{}",
  "virtualCluster": "defualt",
  "gpuType": "K80",
  /* obsolete, but in many files */
  "killAllOnCompletedTaskNumber": 0,
  "taskRoles": [
    {{
      "name": "main-role",
      "taskNumber": "1",
      "command": "cd code && ./start.sh arg && echo {{1..3}} && arr=(x y) && [[ ${{arr[1]}} == y && -n $PAI_HOST_IP_main_role_0 ]] && echo bash-and-peers-ok && echo \"ip=$PAI_CURRENT_CONTAINER_IP host=$PAI_CONTAINER_HOST_IP role0=${{PAI_TASK_ROLE_0_HOST_LIST%%:*}} user=$PAI_USERNAME resource=$PAI_RESOURCE pod=${{PAI_CONTAINER_ID:+set}}\"",
      "minFailedTaskCount": null
    }}
  ]
}}"#,
            code.display()
        ),
    )
    .expect("spec");
    let (code, stdout, stderr) = rest_lite(
        &["run", spec.to_str().expect("path"), "--user", "alice"],
        &[],
    );
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("[main-role-0] start.sh ran in code with arg"),
        "{stdout}"
    );
    assert!(stdout.contains("[main-role-0] 1 2 3"), "{stdout}");
    assert!(
        stdout.contains("[main-role-0] bash-and-peers-ok"),
        "{stdout}"
    );
    // OpenPAI v1's runtime's names, with its meanings.
    assert!(
        stdout.contains(
            "[main-role-0] ip=127.0.0.1 host=127.0.0.1 role0=127.0.0.1 user=alice resource=0,1,100,64 pod=set"
        ),
        "{stdout}"
    );
    for warned in [
        "warning: gpuType: \"K80\" is not used",
        "warning: virtualCluster: \"defualt\" (did you mean \"default\"?) names no queue",
        "warning: killAllOnCompletedTaskNumber: obsolete in OpenPAI",
        "warning: taskRoles[0].name: \"main-role\" is main_role in variable names",
    ] {
        assert!(stderr.contains(warned), "{warned}: {stderr}");
    }
    // The code was copied, not run where it lies: nothing was written beside it.
    assert_eq!(
        std::fs::read_dir(dir.join("code")).expect("code").count(),
        1
    );
}

#[test]
fn code_this_machine_cannot_reach_is_refused_before_anything_runs() {
    let dir = scratch("v1-code-missing");
    let spec = dir.join("job.json");
    std::fs::write(
        &spec,
        job(
            "no-code",
            json!([role("main", 1, "cd code && ./start.sh")]),
            json!({"codeDir": "hdfs://namenode:9000/user/alice/code"}),
        ),
    )
    .expect("spec");
    let (code, stdout, stderr) = rest_lite(
        &["run", spec.to_str().expect("path")],
        &[("PATH", "/usr/bin:/bin")],
    );
    assert_eq!(code, Some(2), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("codeDir: hdfs://namenode:9000/user/alice/code is on HDFS, and this machine has no HDFS client"),
        "{stderr}"
    );
    assert!(!stdout.contains("[main-0]"), "{stdout}");
    assert!(
        !stderr.contains("running no-code on this machine"),
        "refused before it says it runs: {stderr}"
    );
    // Code on the default file system, which this machine's config does not name: the
    // refusal says which key of which file would.
    std::fs::write(
        &spec,
        job(
            "no-fs",
            json!([role("main", 1, "cd code && ./start.sh")]),
            json!({"codeDir": "$PAI_DEFAULT_FS_URI/alice/code"}),
        ),
    )
    .expect("spec");
    let (code, _, stderr) = rest_lite(&["run", spec.to_str().expect("path")], &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("set defaultFsUri in a config file given to `rest-lite serve --config FILE` or `rest-lite run --config FILE`")
            && !stderr.contains("running no-fs on this machine"),
        "{stderr}"
    );
}

/// `rest-lite run spec | head`: the reader goes away, the job goes on to its end, and
/// `run` ends with its code, never a panic.
#[test]
fn run_whose_reader_went_away_ends_with_the_jobs_code() {
    let dir = scratch("run-closed-pipe");
    let spec = dir.join("many.json");
    std::fs::write(
        &spec,
        job(
            "many-lines",
            json!([role("main", 1, "seq 1 20000; echo done >&2")]),
            json!({}),
        ),
    )
    .expect("spec");
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = crate::common::rest_lite_command()
        .args(["run", spec.to_str().expect("path")])
        .stdin(Stdio::null())
        .stdout(writer.try_clone().expect("pipe"))
        .stderr(writer)
        .status()
        .expect("rest-lite");
    assert_eq!(out.code(), Some(0), "{out:?}");
}

/// `codeDir` on HDFS, where this machine has a client: the runtime fetches it with `hdfs
/// dfs -get` into the task's working directory (a stand-in client here records its
/// arguments and makes the directory, as Hadoop's would).
#[test]
fn code_on_hdfs_is_fetched_with_the_hdfs_client() {
    let dir = scratch("v1-code-hdfs");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let calls = dir.join("hdfs-calls");
    std::fs::write(
        bin.join("hdfs"),
        format!(
            "#!/bin/sh\necho \"$@\" >> {}\n[ \"$1 $2 $3\" = 'dfs -get -f' ] || exit 9\nmkdir -p \"$5/code\" && echo 'echo fetched from hdfs' > \"$5/code/start.sh\"\n",
            calls.display()
        ),
    )
    .expect("client");
    std::fs::set_permissions(
        bin.join("hdfs"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let spec = dir.join("job.json");
    std::fs::write(
        &spec,
        job(
            "hdfs-code",
            json!([role("main", 1, "cd code && sh start.sh")]),
            json!({"codeDir": "hdfs://namenode:9000/user/$PAI_USER_NAME/code"}),
        ),
    )
    .expect("spec");
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let (code, stdout, stderr) = rest_lite(
        &["run", spec.to_str().expect("path"), "--user", "alice"],
        &[("PATH", &path)],
    );
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("[main-0] fetched from hdfs"), "{stdout}");
    let calls = std::fs::read_to_string(&calls).expect("the client was called");
    assert!(
        calls.starts_with("dfs -get -f hdfs://namenode:9000/user/alice/code /"),
        "{calls}"
    );
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

/// The issue's own task: stdout and stderr interleaved, back to back.
const INTERLEAVED: &str = r#"echo "1 out"; echo "2 err" >&2; echo "3 out"; echo "4 err: real error" >&2
for i in 5 6 7 8 9 10; do if [ $((i % 2)) = 0 ]; then echo "$i err" >&2; else echo "$i out"; fi; done"#;
const IN_ORDER: &str =
    "1 out\n2 err\n3 out\n4 err: real error\n5 out\n6 err\n7 out\n8 err\n9 out\n10 err\n";

/// Both streams come back in the order the task wrote them, through every reader: the
/// API (whole and followed), `logs`, `run`, the task's page; `stream=` (and `logs
/// --stream`) gives one of them alone.
#[test]
fn output_reads_in_the_order_it_was_written_through_every_reader() {
    let dir = scratch("ordered");
    let server = Server::start(&dir.join("state"));
    let client = server.client();
    let spec = job(
        "ordered",
        json!([role("worker", 1, INTERLEAVED)]),
        json!({}),
    );
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (followed, whole, stderr, stdout) = rt.block_on(async {
        client
            .submit("alice", &spec, SpecFormat::Json)
            .await
            .expect("submitted");
        let view = final_view(&client, "alice", "ordered").await;
        assert_eq!(view["jobStatus"]["state"], "SUCCEEDED", "{view:#}");
        let followed = log_of(&client, "alice", "ordered", "worker", 0).await;
        let read = |lines: pai_client::Lines, follow| {
            common::task_log(&client, ("alice", "ordered"), ("worker", 0), follow, lines)
        };
        (
            followed,
            read(pai_client::Source::User.into(), false).await,
            read(pai_client::Lines::Stream(pai_client::Stream::Stderr), false).await,
            read(pai_client::Lines::Stream(pai_client::Stream::Stdout), true).await,
        )
    });
    assert_eq!(followed, IN_ORDER);
    assert_eq!(whole, IN_ORDER);
    assert_eq!(stderr, "2 err\n4 err: real error\n6 err\n8 err\n10 err\n");
    assert_eq!(stdout, "1 out\n3 out\n5 out\n7 out\n9 out\n");
    let connection = ["--server", server.url.as_str(), "--user", "alice"];
    let state = dir.join("state");
    let state_env = [("REST_LITE_STATE_DIR", state.to_str().expect("path"))];
    let mut logs = vec!["logs", "ordered", "-r", "worker"];
    logs.extend(connection);
    let (code, printed, _) = rest_lite(&logs, &state_env);
    assert_eq!((code, printed.as_str()), (Some(0), IN_ORDER));
    logs.extend(["--stream", "stderr"]);
    let (code, printed, _) = rest_lite(&logs, &state_env);
    assert_eq!(
        (code, printed.as_str()),
        (Some(0), "2 err\n4 err: real error\n6 err\n8 err\n10 err\n")
    );
    // The task's page shows its log as written.
    let token = server.token.as_deref().expect("token");
    let page = get_text(&server.url, "/ui/jobs/alice/ordered/logs/worker/0", token);
    assert!(page.contains(IN_ORDER), "{page}");
    // `run` prints it as it comes, in the same order.
    let spec_file = dir.join("ordered.json");
    std::fs::write(&spec_file, &spec).expect("spec");
    let run_state = dir.join("run-state");
    let (code, printed, stderr) = rest_lite(
        &[
            "run",
            spec_file.to_str().expect("path"),
            "--state-dir",
            run_state.to_str().expect("path"),
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let expected: String = IN_ORDER
        .lines()
        .map(|l| format!("[worker-0] {l}\n"))
        .collect();
    assert_eq!(printed, expected);
    drop(server);
}

/// A failure's reason is the line that says what went wrong, picked from the task's
/// output: a Python traceback's exception (not the progress line after it), mpirun's
/// line for the rank that failed (not its banner), the shell's word for a killed
/// command; said once by `run`.
#[test]
fn a_failures_reason_is_the_line_that_names_its_cause() {
    let dir = scratch("cause");
    let traceback = "echo 'loading data'\n\
        python3 -c 'import sys; print(\"epoch 1\", flush=True); raise ValueError(\"learning rate must be positive\")'\n\
        status=$?; printf '100%%|##########| 10/10\\r\\n'; exit $status";
    let killed = "echo allocating; bash -c 'kill -9 $$'; exit 137";
    let mut cases = vec![
        (
            "traceback",
            traceback,
            1,
            "python-exception",
            "ValueError: learning rate must be positive",
        ),
        ("killed", killed, 137, "killed", "Killed"),
    ];
    let mpi = "mpirun --allow-run-as-root --oversubscribe -np 2 sh -c 'echo rank $OMPI_COMM_WORLD_RANK; exit 3'";
    if pai_test_support::needs::present(
        "mpirun",
        pai_test_support::needs::program("mpirun").is_some(),
        "apt-get install openmpi-bin",
    ) {
        // Open MPI says it in one of two sentences, depending on which of its processes
        // notices first; both name the non-zero exit.
        cases.push(("mpi", mpi, 3, "mpi-exit", "non-zero"));
    }
    // The operator's own pattern (the config's `failurePatterns`) ranks first.
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        "failurePatterns:\n  - name: dataset-missing\n    userLogRegex: 'dataset \\S+ is not mounted'\n",
    )
    .expect("config");
    let operator = "echo 'dataset imagenet is not mounted'; echo 'Error: giving up' >&2; exit 4";
    cases.push((
        "operator",
        operator,
        4,
        "dataset-missing",
        "dataset imagenet is not mounted",
    ));
    for (name, command, code, pattern, line) in cases {
        let spec_file = dir.join(format!("{name}.json"));
        std::fs::write(
            &spec_file,
            job(name, json!([role("worker", 1, command)]), json!({})),
        )
        .expect("spec");
        let state = dir.join("state");
        let (exit, stdout, stderr) = rest_lite(
            &[
                "run",
                spec_file.to_str().expect("path"),
                "--user",
                "alice",
                "--state-dir",
                state.to_str().expect("path"),
                "--config",
                config.to_str().expect("path"),
            ],
            &[],
        );
        assert_eq!(exit, Some(code), "{name}: {stdout}\n{stderr}");
        let told: Vec<&str> = stderr.lines().filter(|l| l.contains(line)).collect();
        assert_eq!(told.len(), 1, "{name}: the cause once:\n{stderr}");
        assert!(
            told[0].contains(&format!("FAILED (exit code {code}")),
            "{name}: {stderr}"
        );
        let server = Server::start(&state);
        let view = tokio::runtime::Runtime::new()
            .expect("runtime")
            .block_on(final_view(&server.client(), "alice", name));
        let status = &view["jobStatus"];
        assert_eq!(
            status["appExitCause"]["pattern"], pattern,
            "{name}: {status:#}"
        );
        assert!(
            status["appExitCause"]["line"]
                .as_str()
                .is_some_and(|l| l.contains(line)),
            "{name}: {status:#}"
        );
        assert!(
            status["appExitDiagnostics"]
                .as_str()
                .is_some_and(|d| d.contains(line)),
            "{name}: {status:#}"
        );
        assert_eq!(
            view["taskRoles"]["worker"]["taskStatuses"][0]["containerExitCause"],
            status["appExitCause"]
        );
        drop(server);
    }
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

/// Listening sockets on `port` from /proc/net/tcp and tcp6, as `address:port` in hex.
fn listeners(port: u16) -> Vec<String> {
    let mut found = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state)) = (fields.get(1), fields.get(3)) else {
                continue;
            };
            if *state == "0A" && local.ends_with(&format!(":{port:04X}")) {
                found.push(local.to_string());
            }
        }
    }
    found
}

/// On this machine a task's ports are bound on its own address (127.0.0.1), never
/// wider: the ssh port the runtime serves (handed over from the server's hold, never
/// free in between) and every port while the server holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_task_port_is_bound_on_the_tasks_address_only() {
    let dir = scratch("bound");
    let server = Server::start(&dir.join("state"));
    let client = server.client();
    let roles = json!([role("worker", 2, WAIT_FOR_TERM)]);
    let (events, up) = submitted_and_up(&client, &dir, "bound", roles).await;
    assert_eq!(up, ["up worker-0", "up worker-1"]);
    let view = client.job("alice", "bound").await.expect("view");
    for task in &view.task_roles["worker"].task_statuses {
        let ports = &task.container_ports;
        let ssh: u16 = ports["ssh"].parse().expect("an ssh port");
        assert_eq!(
            listeners(ssh),
            [format!("0100007F:{ssh:04X}")],
            "the ssh port is served on 127.0.0.1 alone"
        );
        for (label, value) in ports.iter() {
            for port in value.split(',').filter_map(|p| p.parse::<u16>().ok()) {
                assert!(
                    listeners(port).iter().all(|l| l.starts_with("0100007F:")),
                    "{label} {port}: {:?}",
                    listeners(port)
                );
            }
        }
    }
    client.stop("alice", "bound").await.expect("stop");
    assert_eq!(until_none_left(&events).len(), 2);
    drop(server);
}

/// The cgroup v1 `cpu` line of `/proc/<pid>/cgroup` (the path), or v2's.
fn cpu_cgroup(text: &str) -> Option<String> {
    let v1 = text.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        controllers
            .split(',')
            .any(|c| c == "cpu")
            .then(|| path.to_string())
    });
    v1.or_else(|| {
        text.lines()
            .find_map(|l| l.strip_prefix("0::"))
            .map(str::to_string)
    })
}

#[test]
fn tasks_share_the_cpu_with_the_server_as_one_group() {
    // The same probe the server makes: a CPU cgroup this process may create and write.
    let probe = pai_local::cpu_group::TaskGroup::create();
    if !pai_test_support::needs::present(
        "a CPU cgroup this user may create (root, with cgroup v1's cpu hierarchy or in cgroup v2's root)",
        probe.is_ok(),
        probe.as_ref().err().map_or("", String::as_str),
    ) {
        return;
    }
    let dir = scratch("cpu-group");
    let spec = dir.join("cgroup.json");
    // The user command, its shell and what it starts are all in the group.
    std::fs::write(
        &spec,
        job(
            "cgroup",
            json!([role("worker", 2, "cat /proc/self/cgroup")]),
            json!({}),
        ),
    )
    .expect("spec");
    let (code, stdout, stderr) = rest_lite(&["run", spec.to_str().expect("path")], &[]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    // `run`'s server is in this test's cgroup; its tasks one below it.
    let own = cpu_cgroup(&std::fs::read_to_string("/proc/self/cgroup").expect("cgroup"))
        .expect("this process's CPU cgroup");
    let group = format!(
        "{}/{}",
        own.trim_end_matches('/'),
        pai_local::cpu_group::NAME
    );
    for task in ["worker-0", "worker-1"] {
        let lines: String = stdout
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("[{task}] ")))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(cpu_cgroup(&lines), Some(group.clone()), "{task}: {stdout}");
    }
    assert_ne!(own, group);
}

/// The commands `run` prints for meanwhile work as printed: `status`, and `ssh` into the
/// task (where sshd and ssh are here), with no token typed: `run` records in its state
/// directory where it serves, so the command line sends that directory's token there.
#[test]
fn the_commands_run_prints_work_as_printed() {
    use std::io::BufRead;
    let dir = scratch("run-printed-commands");
    let go = dir.join("go");
    let spec = dir.join("waits.json");
    std::fs::write(
        &spec,
        job(
            "waits",
            json!([role(
                "main",
                1,
                &format!("while [ ! -e {} ]; do sleep 0.1; done", go.display())
            )]),
            json!({}),
        ),
    )
    .expect("spec");
    /// `run` and its job end with the test, even one that fails before it lets them go.
    struct Ends(std::process::Child);
    impl Drop for Ends {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut run = Ends(
        crate::common::rest_lite_command()
            .args(["run", spec.to_str().expect("path")])
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rest-lite run"),
    );
    let mut lines = std::io::BufReader::new(run.0.stderr.take().expect("stderr")).lines();
    let printed = loop {
        let line = lines
            .next()
            .expect("run printed the commands")
            .expect("a line");
        if let Some((_, rest)) = line.split_once("other commands meanwhile: ") {
            break rest.trim_end_matches(')').to_string();
        }
    };
    // `NAME=VALUE NAME=VALUE rest-lite status waits`, as a shell reads it (the tests'
    // rest-lite is on their PATH: printed_commands.rs tries the other places).
    let words: Vec<&str> = printed.split_whitespace().collect();
    let (vars, command): (Vec<&str>, Vec<&str>) = words.iter().partition(|w| w.contains('='));
    assert_eq!(command, ["rest-lite", "status", "waits"], "{printed}");
    let printed_command = |args: &[&str]| {
        let mut command = crate::common::rest_lite_command();
        for var in &vars {
            let (name, value) = var.split_once('=').expect("NAME=VALUE");
            command.env(name, value);
        }
        command
            .args(args)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .output()
            .expect("rest-lite")
    };
    let status = printed_command(&command[1..]);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("waits"),
        "{}",
        String::from_utf8_lossy(&status.stdout)
    );
    let have_ssh = ["sshd", "ssh"]
        .iter()
        .all(|p| pai_test_support::needs::program(p).is_some());
    if pai_test_support::needs::present(
        "sshd, ssh",
        have_ssh,
        "apt-get install openssh-server openssh-client",
    ) {
        // Into the task once it runs.
        while !String::from_utf8_lossy(&printed_command(&command[1..]).stdout).contains("RUNNING") {
            std::thread::yield_now();
        }
        let ssh = printed_command(&["ssh", "waits", "main", "0", "--", "echo", "in the task"]);
        assert!(
            ssh.status.success(),
            "{}",
            String::from_utf8_lossy(&ssh.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&ssh.stdout), "in the task\n");
    }
    std::fs::write(&go, "").expect("go");
    for _ in lines.by_ref() {}
    assert_eq!(run.0.wait().expect("run ends").code(), Some(0));
}

/// A hint fits where the person is: a spec this machine refuses for what it asks (GPUs it
/// does not have) is not sent to `rest-lite transform`, which accepts it; a spec that is
/// wrong in itself is.
#[test]
fn a_refusal_of_the_place_does_not_send_the_person_to_transform() {
    let dir = scratch("hint-fits");
    let state = dir.join("state");
    let server = Server::start(&state);
    let submit = |name: &str, gpus: u32, tasks: u32| {
        let spec = dir.join(format!("{name}.json"));
        std::fs::write(
            &spec,
            json!({"jobName": name, "image": "busybox", "taskRoles": [
                {"name": "main", "taskNumber": tasks, "cpuNumber": 1, "memoryMB": 128,
                 "gpuNumber": gpus, "command": "true"}]})
            .to_string(),
        )
        .expect("spec");
        rest_lite(
            &[
                "submit",
                spec.to_str().expect("path"),
                "--server",
                &server.url,
            ],
            &[("REST_LITE_STATE_DIR", state.to_str().expect("path"))],
        )
    };
    let (code, _, stderr) = submit("gpus", 2, 1);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("GPU"), "{stderr}");
    assert!(!stderr.contains("rest-lite transform"), "{stderr}");
    let (code, _, stderr) = submit("none", 0, 0);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("hint: `rest-lite transform SPEC`"),
        "{stderr}"
    );
    // A second server of this machine, its state directory not named: the hint names it.
    let (code, _, stderr) = rest_lite(&["jobs", "--server", &server.url], &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("401") && stderr.contains("its --state-dir"),
        "{stderr}"
    );
    drop(server);
}

/// `run` on the host says once why the tasks run there, and its last line does not say it
/// again.
#[test]
fn run_says_where_the_tasks_run_once() {
    let dir = scratch("run-said-once");
    let spec = dir.join("hello.json");
    std::fs::write(
        &spec,
        job("hello", json!([role("main", 1, "echo hi")]), json!({})),
    )
    .expect("spec");
    let (code, stdout, stderr) = rest_lite(&["run", spec.to_str().expect("path")], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("[main-0] hi"), "{stdout}");
    assert_eq!(stderr.matches("--engine host").count(), 1, "{stderr}");
    assert!(!stderr.contains("ran on this machine by"), "{stderr}");
}
