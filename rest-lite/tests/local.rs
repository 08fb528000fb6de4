//! A job on this machine, end to end: the real `rest-lite serve --backend local`
//! process, its tasks started through the real runtime, submitted and followed over
//! HTTP: the example's tasks talk over TCP, a failed task fails the job with its code,
//! roles keep the spec's order, results reach the status, stop and delete end every
//! process, and the tasks' signals and CPU group are a container's.

use crate::common;

use pai_api::status::JobState;
use pai_translate::spec::SpecFormat;
use serde_json::json;

use common::fifo::{final_view, until_none_left};
use common::jobs::{
    WAIT_FOR_TERM, get_text, job, log_of, rest_lite, role, run_spec, run_then_delete,
    submitted_and_up, the_example_run,
};
use common::serve::{DEADLINE, Server};

fn scratch(name: &str) -> common::Scratch {
    common::scratch("local", name)
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
        .join(pai_job::names::framework_name("alice", "progress"))
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
    let (code, stdout, stderr) = run_spec(&spec, &[], &[]);
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
