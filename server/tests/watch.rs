//! Job watches: every change once, the client's watch again, a job deleted while the
//! cluster was away. The Kubernetes backend over the in-process API server, over real
//! sockets.

use crate::support;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_streams_each_change_and_ends_at_the_final_state() {
    let s = start().await;
    let watch = submit_and_watch(&s).await;
    s.api.modify("frameworks", NS, &fw(), |f| {
        f["status"] = json!({"state": "AttemptRunning", "attemptStatus": {"id": 0}});
    });
    succeed(&s.api);
    // Nothing changes after the final state: the stream ends by itself.
    let reply = tokio::time::timeout(std::time::Duration::from_secs(60), watch)
        .await
        .expect("the watch ends after the final state")
        .expect("join");
    assert_eq!(reply.status, 200);
    assert_eq!(reply.content_type, "application/x-ndjson");
    let states: Vec<String> = reply
        .body
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("a JSON line");
            v["jobStatus"]["state"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(
        states.first().map(String::as_str),
        Some("WAITING"),
        "{states:?}"
    );
    assert_eq!(
        states.last().map(String::as_str),
        Some("SUCCEEDED"),
        "{states:?}"
    );
    assert!(states.iter().any(|s| s == "RUNNING"), "{states:?}");

    let missing = request(
        s.addr,
        "GET",
        "/api/v1/user/alice/jobs/other?watch=true",
        None,
        "",
    )
    .await;
    assert_eq!(missing.error(), (404, "NoJobError".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_watches_again_when_the_server_ends_a_watch_and_repeats_nothing() {
    // Every watch ends after a second on this server.
    let s = start_with_watch_limit(None, std::time::Duration::from_secs(1)).await;
    let rest = watch_after_the_first_view(&s).await;
    // The server ended the first watch and the client opened another (each a
    // subscription to the server's copy, not a watch of the API server): the change made
    // now reaches it, once.
    job_reads_answered(s.addr, 2).await;
    succeed(&s.api);
    let rest = rest.await.expect("join");
    assert_eq!(
        rest,
        ["SUCCEEDED"],
        "no view twice, the final one once, then the end"
    );
    let watches = s.api.requests().iter().filter(|r| r.is_watch()).count();
    assert_eq!(watches, 1, "the server's one watch of the API server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_ends_when_the_job_was_deleted_while_the_cluster_was_away() {
    let mut s = start().await;
    let watch = submit_and_watch(&s).await;
    // Away: the deletion's event is never delivered, and its history is gone.
    s.api.stop().await;
    s.api.delete("frameworks", NS, &fw());
    s.api.compact();
    s.api.restart().await;
    let reply = tokio::time::timeout(std::time::Duration::from_secs(60), watch)
        .await
        .expect("the watch ends once the re-list misses the job")
        .expect("join");
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body.lines().count(), 1, "{}", reply.body);
}
