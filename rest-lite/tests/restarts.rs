//! Jobs that restart, through the real `rest-lite serve`: quick attempts back off (WAITING
//! `BackOff` with the delay, doubling to the cap), and a job retried many times keeps the
//! files of its last attempts only, with every attempt's summary in its history. The
//! numbers are the config's (`restartBackoff`, `keptAttempts`), small here so that the
//! tests take seconds; the defaults are the kubelet's.

use crate::common;

use std::path::Path;

use futures::StreamExt;
use pai_client::ClientError;
use pai_translate::spec::SpecFormat;
use serde_json::json;

use common::fifo::final_view;
use common::serve::{DEADLINE, Server};

fn serve(dir: &Path, config: &str) -> Server {
    let path = dir.join("config.yaml");
    std::fs::write(&path, config).expect("config");
    Server::start_with_config(&dir.join("state"), &path)
}

/// The directory of the first attempt's `worker-0` of the only job in `state`.
fn only_task(state: &Path) -> std::path::PathBuf {
    std::fs::read_dir(state.join("jobs"))
        .expect("jobs")
        .flatten()
        .next()
        .expect("job")
        .path()
        .join("attempts/0/worker-0")
}

fn spec(name: &str, retries: i32, command: &str) -> String {
    json!({
        "jobName": name, "image": "busybox", "retryCount": retries,
        "taskRoles": [{"name": "worker", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128, "command": command}],
    })
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick_attempts_back_off_doubling_to_the_cap() {
    let dir = common::scratch("restarts", "backoff");
    let server = serve(
        &dir,
        "restartBackoff: {firstSec: 1, capSec: 2, resetAfterSec: 600}\n",
    );
    let client = server.client();
    client
        .submit("alice", &spec("flaky", 3, "exit 1"), SpecFormat::Json)
        .await
        .expect("submitted");
    // Every wait between two attempts, as the job's WAITING state says it.
    let mut changes = client.watch("alice", "flaky").await.expect("watch");
    let mut waits: Vec<String> = Vec::new();
    let follow = async {
        while let Some(view) = changes.next().await {
            let view = view.expect("a view");
            if let Some(waiting) = view.job_status.waiting.filter(|w| w.reason == "BackOff")
                && waits.last() != Some(&waiting.message)
            {
                // When it ends, for a reader to count the time left from.
                let (since, until) = (waiting.since.expect("since"), waiting.until.expect("until"));
                assert!(until > since, "{since} {until}");
                waits.push(waiting.message);
            }
        }
    };
    tokio::time::timeout(DEADLINE, follow)
        .await
        .expect("the job ends");
    let delays: Vec<&str> = waits
        .iter()
        .map(|m| {
            m.strip_prefix("restarting after a back-off of ")
                .and_then(|m| m.split(' ').next())
                .unwrap_or(m)
        })
        .collect();
    assert_eq!(delays, ["1", "2", "2"], "{waits:#?}");
    assert!(
        waits[0].contains("attempt 0 ended (the user command exited with code 1:"),
        "{}",
        waits[0]
    );
    let view = final_view(&client, "alice", "flaky").await;
    assert_eq!(view["jobStatus"]["state"], "FAILED");
    assert_eq!(view["jobStatus"]["retries"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_retried_many_times_keeps_its_last_attempts_files() {
    let dir = common::scratch("restarts", "kept");
    let server = serve(&dir, "restartBackoff: {firstSec: 0}\nkeptAttempts: 2\n");
    let client = server.client();
    client
        .submit(
            "alice",
            &spec("many", 9, "echo attempt $FC_FRAMEWORK_ATTEMPT_ID; exit 1"),
            SpecFormat::Json,
        )
        .await
        .expect("submitted");
    let view = final_view(&client, "alice", "many").await;
    assert_eq!(view["jobStatus"]["state"], "FAILED", "{view:#}");
    assert_eq!(view["jobStatus"]["retries"], 9);
    // Every attempt's summary is kept; the files of the last two only.
    assert_eq!(
        view["jobStatus"]["attempts"].as_array().map(Vec::len),
        Some(10),
        "{view:#}"
    );
    let jobs = dir.join("state/jobs");
    let job = std::fs::read_dir(&jobs)
        .expect("jobs")
        .flatten()
        .next()
        .expect("the job's directory")
        .path();
    let mut attempts: Vec<String> = std::fs::read_dir(job.join("attempts"))
        .expect("attempts")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    attempts.sort();
    assert_eq!(attempts, ["8", "9"]);
    let peers = std::fs::read_dir(&job)
        .expect("job dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("peers-"))
        .count();
    assert!(peers <= 2, "{peers} peer tables");
    let attempt_log = |attempt: u32| {
        client.attempt_logs(
            "alice",
            "many",
            "worker",
            0,
            attempt,
            pai_client::Lines::Source(pai_client::Source::User),
        )
    };
    let last = common::read_all(attempt_log(8).await.expect("attempt 8's log")).await;
    assert!(last.contains("attempt 8"), "{last}");
    match attempt_log(0).await {
        Err(ClientError::Api {
            status, message, ..
        }) => {
            assert_eq!(status, 404);
            assert!(message.contains("no longer kept"), "{message}");
        }
        other => panic!("attempt 0's log: {:?}", other.map(|_| ())),
    }
}

/// `rest-lite run` of a job that keeps failing at once tells its first restarts a line
/// each, then their count and the last one's line, not a line per restart.
#[test]
fn run_tells_many_restarts_compactly() {
    let dir = common::scratch("restarts", "run");
    let config = dir.join("config.yaml");
    std::fs::write(&config, "restartBackoff: {firstSec: 0}\n").expect("config");
    let spec_path = dir.join("job.json");
    std::fs::write(&spec_path, spec("loops", 9, "exit 4")).expect("spec");
    let output = common::rest_lite_command()
        .arg("run")
        .arg(&spec_path)
        .arg("--config")
        .arg(&config)
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("rest-lite run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(4), "{stderr}");
    let one_each = stderr
        .lines()
        .filter(|l| l.starts_with("rest-lite: job loops: attempt "))
        .count();
    assert_eq!(one_each, 3, "{stderr}");
    let summaries: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("restarted "))
        .collect();
    assert!(!summaries.is_empty(), "{stderr}");
    assert!(
        summaries
            .last()
            .is_some_and(|l| l.contains("restarted 9 times") && l.contains("attempt 8 failed")),
        "{stderr}"
    );
}

/// A task that writes past its log's size: the log rotates, the newest files are kept,
/// and `logs` starts by saying how much was rotated away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_log_past_its_size_keeps_the_newest_bytes_and_says_so() {
    let dir = common::scratch("restarts", "rotation");
    let server = serve(
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
        .submit("alice", &spec("chatty", 0, &command), SpecFormat::Json)
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
    let dir = common::scratch("restarts", "fast-rotation");
    let server = serve(
        &dir,
        &format!("containerLogMaxBytes: {MAX}\ncontainerLogMaxFiles: 3\n"),
    );
    let client = server.client();
    // 16 MiB in one burst, well under the server's 2 s between sweeps.
    let command =
        "yes 'a line of a writer that does not pause' | head -c 16777216; echo; echo last line";
    client
        .submit("alice", &spec("burst", 0, command), SpecFormat::Json)
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

/// Where a job ran is said once on its page, however many attempts it had: on the job's
/// end, not on each attempt the history keeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_page_of_five_attempts_says_where_it_ran_once() {
    let dir = common::scratch("restarts", "said-once");
    let server = serve(&dir, "restartBackoff: {firstSec: 0}\n");
    let client = server.client();
    client
        .submit("alice", &spec("five", 4, "exit 3"), SpecFormat::Json)
        .await
        .expect("submitted");
    let view = final_view(&client, "alice", "five").await;
    assert_eq!(view["jobStatus"]["retries"], 4, "{view:#}");
    assert_eq!(
        view["jobStatus"]["attempts"].as_array().map(Vec::len),
        Some(5),
        "{view:#}"
    );
    let token = format!(
        "rest_lite_token={}",
        server.token.as_deref().expect("token")
    );
    let page = common::request(
        &server.url,
        "GET",
        "/ui/jobs/alice/five",
        &[("Cookie", token.as_str())],
        "",
    );
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(
        page.body.matches("ran on this machine by").count(),
        1,
        "{}",
        page.body
    );
}
