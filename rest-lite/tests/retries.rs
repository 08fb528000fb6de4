//! Jobs that are retried, through the real `rest-lite serve`: a job retried twice succeeds
//! on its third attempt, each attempt is told with its reason (`run`, `status`), quick
//! attempts back off (WAITING `BackOff` with the delay, doubling to the cap), and a job
//! retried many times keeps the files of its last attempts only, with every attempt's
//! summary in its history. The numbers are the config's (`restartBackoff`,
//! `keptAttempts`), small here so that the tests take seconds; the defaults are the
//! kubelet's.

use crate::common;

use futures::StreamExt;
use pai_client::ClientError;
use pai_translate::spec::SpecFormat;
use serde_json::json;

use common::fifo::final_view;
use common::jobs::{get_text, job, log_of, rest_lite, role, run_spec};
use common::serve::{DEADLINE, Server};

fn scratch(name: &str) -> common::Scratch {
    common::scratch("retries", name)
}

/// A job of one worker running `command`, retried `retries` times.
fn spec(name: &str, retries: i32, command: &str) -> String {
    job(
        name,
        json!([role("worker", 1, command)]),
        json!({"retryCount": retries}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick_attempts_back_off_doubling_to_the_cap() {
    let dir = scratch("backoff");
    let server = Server::in_dir_with_config(
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
    let dir = scratch("kept");
    let server =
        Server::in_dir_with_config(&dir, "restartBackoff: {firstSec: 0}\nkeptAttempts: 2\n");
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
    let dir = scratch("run");
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

/// Where a job ran is said once on its page, however many attempts it had: on the job's
/// end, not on each attempt the history keeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_page_of_five_attempts_says_where_it_ran_once() {
    let dir = scratch("said-once");
    let server = Server::in_dir_with_config(&dir, "restartBackoff: {firstSec: 0}\n");
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
    let (code, stdout, stderr) = run_spec(
        &spec,
        &[
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
