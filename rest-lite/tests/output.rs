//! What a task writes, read back: stdout and stderr in the order written through every
//! reader, several tasks' logs put in order by their times, and a failure's reason picked
//! from the output as the line that names its cause.

use crate::common;

use pai_translate::spec::SpecFormat;
use serde_json::json;

use common::fifo::final_view;
use common::jobs::{get_text, job, log_of, only_task, rest_lite, role, run_spec, the_example_run};
use common::serve::Server;

fn scratch(name: &str) -> common::Scratch {
    common::scratch("output", name)
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
    let (code, printed, stderr) = run_spec(
        &spec_file,
        &["--state-dir", run_state.to_str().expect("path")],
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
        let (exit, stdout, stderr) = run_spec(
            &spec_file,
            &[
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

/// A task that writes past its log's size: the log rotates, the newest files are kept,
/// and `logs` starts by saying how much was rotated away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_log_past_its_size_keeps_the_newest_bytes_and_says_so() {
    let dir = common::scratch("output", "rotation");
    let server = Server::in_dir_with_config(
        &dir,
        "containerLogMaxBytes: 4096\ncontainerLogMaxFiles: 3\n",
    );
    let client = server.client();
    let state = dir.join("state");
    // Writes until its log has rotated past the kept files (the server looks every 2 s).
    let command = format!(
        "i=0; until [ -e {}/jobs/*/attempts/0/worker-0/container.log.dropped ]; do i=$((i+1)); printf 'line %06d %0500d\\n' $i 0; sleep 0.002; done; echo last line",
        state.display()
    );
    client
        .submit(
            "alice",
            &job("chatty", json!([role("worker", 1, &command)]), json!({})),
            SpecFormat::Json,
        )
        .await
        .expect("submitted");
    let view = final_view(&client, "alice", "chatty").await;
    assert_eq!(view["jobStatus"]["state"], "SUCCEEDED", "{view:#}");
    let log = common::read_all(
        client
            .logs(
                "alice",
                "chatty",
                "worker",
                0,
                false,
                pai_client::Source::User,
            )
            .await
            .expect("log"),
    )
    .await;
    let first = log.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("[rest-lite] ")
            && first.contains("bytes of this task's earlier output were rotated away"),
        "{first}"
    );
    assert!(
        log.ends_with("last line\n"),
        "{}",
        &log[log.len().saturating_sub(200)..]
    );
    assert!(
        !log.contains("line 000001 "),
        "the first lines were rotated away"
    );
    let task = only_task(&state);
    for kept in ["container.log", "container.log.1", "container.log.2"] {
        assert!(task.join(kept).exists(), "{kept}");
    }
    assert!(!task.join("container.log.3").exists(), "three files in all");
    // The job page says so beside the log's end.
    let token = server.token.clone().expect("token");
    let page = common::request(
        &server.url,
        "GET",
        "/ui/jobs/alice/chatty",
        &[("Authorization", &format!("Bearer {token}"))],
        "",
    );
    assert!(
        page.body
            .contains("bytes of its earlier output were rotated away (a task&#x27;s log is kept in 3 files of 4 KiB)"),
        "{}",
        page.body
    );
}

/// A task that writes faster than any sweep looks: the runtime rotates its log as it
/// echoes, so no kept file passes the size by more than one read of the output, and the
/// newest bytes are the ones kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_writer_cannot_outrun_its_logs_rotation() {
    const MAX: u64 = 64 * 1024;
    let dir = common::scratch("output", "fast-rotation");
    let server = Server::in_dir_with_config(
        &dir,
        &format!("containerLogMaxBytes: {MAX}\ncontainerLogMaxFiles: 3\n"),
    );
    let client = server.client();
    // 16 MiB in one burst, well under the server's 2 s between sweeps.
    let command =
        "yes 'a line of a writer that does not pause' | head -c 16777216; echo; echo last line";
    client
        .submit(
            "alice",
            &job("burst", json!([role("worker", 1, command)]), json!({})),
            SpecFormat::Json,
        )
        .await
        .expect("submitted");
    let view = final_view(&client, "alice", "burst").await;
    assert_eq!(view["jobStatus"]["state"], "SUCCEEDED", "{view:#}");
    let task = only_task(&dir.join("state"));
    // One read of the output is at most 64 KiB.
    for kept in ["container.log", "container.log.1", "container.log.2"] {
        let len = std::fs::metadata(task.join(kept)).expect(kept).len();
        assert!(len <= 2 * MAX, "{kept}: {len} bytes");
    }
    let current = std::fs::read_to_string(task.join("container.log")).expect("log");
    assert!(current.contains("last line\n"), "{current}");
    let dropped: u64 = std::fs::read_to_string(task.join("container.log.dropped"))
        .expect("dropped")
        .trim()
        .parse()
        .expect("a count");
    assert!(dropped > 16 * 1024 * 1024 - 6 * MAX, "{dropped}");
}
