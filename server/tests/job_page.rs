//! The job page's log previews: each read once for many readers. The Kubernetes backend
//! over the in-process API server, over real sockets.

use crate::support;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_page_read_by_many_reads_each_log_preview_once() {
    let s = start().await;
    submit_base_job(&s).await;
    s.api.modify("frameworks", NS, &fw(), |f| {
        f["status"] = json!({"state": "AttemptRunning", "attemptStatus": {"id": 0}});
        pai_test_support::frameworks::set_all_addresses(f, &[("ps", 2), ("worker", 2)]);
    });
    for (role, index) in [("ps", 0), ("ps", 1), ("worker", 0), ("worker", 1)] {
        s.api.append_log(
            NS,
            &pod(role, index),
            &format!("{role}-{index} says hello\n"),
        );
    }
    let page = "/ui/jobs/alice/job";
    let first = until(s.addr, page, |r| r.body.contains("worker-1 says hello")).await;
    assert_eq!(first.status, 200);
    let logs = || {
        s.api
            .requests()
            .iter()
            .filter(|r| r.uri.contains("/log?"))
            .count()
    };
    let read = logs();
    assert!(read >= 4, "each started task's preview read: {read}");
    // Ten more readers at once: the previews are the ones read, not read again.
    let readers = (0..10).map(|_| request(s.addr, "GET", page, None, ""));
    for again in futures::future::join_all(readers).await {
        assert!(again.body.contains("ps-0 says hello"), "{}", again.body);
    }
    assert_eq!(
        logs(),
        read,
        "no log read twice within the previews' lifetime"
    );
}

/// A failed job's conditions are listed in the order they changed: the conditions that
/// never held (at the job's creation) before its run and its end, whatever the API's
/// order of types.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_jobs_timeline_runs_forward() {
    let s = start().await;
    submit_base_job(&s).await;
    let at = |minutes: i64| {
        (jiff::Timestamp::now() + jiff::SignedDuration::from_mins(minutes)).to_string()
    };
    let (started, ran, ended) = (at(1), at(2), at(3));
    s.api.modify("frameworks", NS, &fw(), |f| {
        f["status"] = json!({"state": "Completed", "startTime": started,
            "transitionTime": ended, "completionTime": ended,
            "attemptStatus": {"id": 0, "startTime": started, "runTime": ran, "completionTime": ended,
                "completionStatus": {"code": 3, "phrase": "ContainerFailed",
                    "diagnostics": "worker-1 exited 3", "type": {"name": "Failed", "attributes": []}}}});
    });
    let page = until(s.addr, "/ui/jobs/alice/job", |r| {
        r.body.contains("<strong>Failed</strong> True")
    })
    .await;
    let timeline = page
        .body
        .split("<ol class=\"timeline\">")
        .nth(1)
        .and_then(|rest| rest.split("</ol>").next())
        .expect("the timeline");
    // `2026-01-01 00:10:00 UTC`: in time order as text.
    let times: Vec<&str> = timeline
        .split("<time>")
        .skip(1)
        .filter_map(|rest| rest.split("</time>").next())
        .collect();
    let kinds: Vec<&str> = timeline
        .split("<strong>")
        .skip(1)
        .filter_map(|rest| rest.split("</strong>").next())
        .collect();
    assert_eq!(times.len(), 6, "{timeline}");
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "{:?}",
        kinds.iter().zip(&times).collect::<Vec<_>>()
    );
    assert_eq!(kinds.first(), Some(&"Submitted"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"Failed"), "{kinds:?}");
}
