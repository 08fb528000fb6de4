//! Finished jobs over a server's life: the retention deletes the oldest past its bound,
//! and a restarted server still knows, and serves, every job it kept.

use std::path::Path;

use serde_json::json;

use crate::common;
use common::fifo::final_view;
use common::serve::{DEADLINE, Server};
use pai_client::{Client, ClientError, Source};
use pai_translate::spec::SpecFormat;

fn serve(dir: &Path, config: &str) -> Server {
    let path = dir.join("config.yaml");
    std::fs::write(&path, config).expect("config");
    Server::start_with_config(&dir.join("state"), &path)
}

fn spec(name: &str) -> String {
    json!({
        "jobName": name, "image": "busybox",
        "taskRoles": [{"name": "worker", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128,
            "command": format!("echo output of {name}")}],
    })
    .to_string()
}

async fn names(client: &Client) -> Vec<String> {
    let mut names: Vec<String> = client
        .jobs(None)
        .await
        .expect("list")
        .into_iter()
        .map(|j| j.name)
        .collect();
    names.sort();
    names
}

/// Asks for the list until `done` holds of it (the retention runs beside the requests):
/// each try is a request, no fixed pause decides anything.
async fn list_until(client: &Client, done: impl Fn(&[String]) -> bool) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let names = names(client).await;
        if done(&names) || tokio::time::Instant::now() > deadline {
            return names;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

async fn log_of(client: &Client, job: &str) -> Result<String, ClientError> {
    let stream = client
        .logs("alice", job, "worker", 0, false, Source::User)
        .await?;
    Ok(common::read_all(stream).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_jobs_past_the_retention_go_and_a_restart_keeps_the_rest() {
    let dir = common::scratch("history", "retention");
    // Run-only files go at a job's end here (an hour after it by default).
    let config = "retention: {finishedJobs: 2, taskFilesKeptSec: 0}\n";
    let server = serve(&dir, config);
    let client = server.client();
    for i in 0..4 {
        let name = format!("h{i}");
        client
            .submit("alice", &spec(&name), SpecFormat::Json)
            .await
            .expect("submitted");
        let view = final_view(&client, "alice", &name).await;
        assert_eq!(view["jobStatus"]["state"], "SUCCEEDED", "{view:#}");
    }
    // The two that ended first go; the two newest stay.
    let kept = list_until(&client, |names| names.len() <= 2).await;
    assert_eq!(kept, ["h2", "h3"]);
    for gone in ["h0", "h1"] {
        assert!(
            matches!(
                client.job("alice", gone).await,
                Err(ClientError::Api { status: 404, .. })
            ),
            "{gone} is gone from the job reads"
        );
        assert!(
            matches!(
                log_of(&client, gone).await,
                Err(ClientError::Api { status: 404, .. })
            ),
            "{gone} is gone from the log reads"
        );
    }
    let state = dir.join("state").join("jobs");
    let dirs: Vec<std::path::PathBuf> = std::fs::read_dir(&state)
        .expect("jobs")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(dirs.len(), 2, "the deleted jobs' files are gone");
    // A finished task keeps its logs; what it needed to run goes (as its job's
    // controller ends, beside the requests).
    for job in &dirs {
        let task = job.join("attempts/0/worker-0");
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while task.join("main.sh").exists() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let mut left: Vec<String> = std::fs::read_dir(&task)
            .expect("task")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["container.log", "logs"], "{}", task.display());
        let records = dir
            .join("state/pids")
            .join(job.file_name().expect("a name"));
        assert!(!records.exists(), "{}", records.display());
    }
    // A restart: the kept jobs, their state, attempts and logs, all there.
    server.kill();
    let server = serve(&dir, config);
    let client = server.client();
    assert_eq!(names(&client).await, ["h2", "h3"]);
    for job in ["h2", "h3"] {
        let view = client.job("alice", job).await.expect("read");
        assert_eq!(view.job_status.state.as_str(), "SUCCEEDED");
        assert_eq!(view.job_status.app_exit_code, Some(0));
        let log = log_of(&client, job).await.expect("log");
        assert!(log.contains(&format!("output of {job}")), "{log}");
    }
    let attempts = common::request(
        &server.url,
        "GET",
        "/api/v2/jobs/alice~h3/attempts/0",
        &[(
            "Authorization",
            &format!("Bearer {}", server.token.clone().expect("token")),
        )],
        "",
    );
    assert_eq!(attempts.status, 200, "{}", attempts.body);
    assert!(attempts.body.contains("SUCCEEDED"), "{}", attempts.body);
}
