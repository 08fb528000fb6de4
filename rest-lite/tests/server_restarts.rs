//! A server killed and started again loses nothing: a deletion it answered is done, and
//! a job that was running is known again and its attempt retried.

use crate::common;

use pai_api::status::JobState;
use pai_translate::spec::SpecFormat;
use serde_json::json;

use common::fifo::{final_view, until_none_left};
use common::jobs::{WAIT_FOR_TERM, job, log_of, role, run_then_delete, submitted_and_up};
use common::serve::Server;

fn scratch(name: &str) -> common::Scratch {
    common::scratch("restart", name)
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
