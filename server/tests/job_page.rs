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
