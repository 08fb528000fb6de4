//! Job lists: pages by limit and continue, filters by state. The Kubernetes backend over
//! the in-process API server, over real sockets.

use crate::support;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_page_by_limit_and_continue_and_filter_by_state() {
    let s = start().await;
    for i in 0..5 {
        let mut spec = base_job();
        spec["jobName"] = json!(format!("job{i}"));
        assert_eq!(submit(s.addr, "alice", &spec.to_string()).await.status, 202);
    }
    let everything = request(s.addr, "GET", "/api/v1/user/alice/jobs", None, "").await;
    let all: Vec<String> = everything
        .json()
        .as_array()
        .expect("array")
        .iter()
        .map(|j| j["name"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(all.len(), 5);
    assert_eq!(everything.link, "", "no next page without a limit");
    for base in ["/api/v1/user/alice/jobs", "/api/v1/jobs"] {
        let mut paged = Vec::new();
        let mut next = format!("{base}?limit=2");
        let mut pages = 0;
        loop {
            let reply = request(s.addr, "GET", &next, None, "").await;
            assert_eq!(reply.status, 200, "{}", reply.body);
            pages += 1;
            paged.extend(
                reply
                    .json()
                    .as_array()
                    .expect("array")
                    .iter()
                    .map(|j| j["name"].as_str().unwrap_or_default().to_string()),
            );
            if reply.link.is_empty() {
                break;
            }
            next = reply
                .link
                .strip_prefix('<')
                .and_then(|l| l.split_once(">; rel=\"next\""))
                .map(|(url, _)| url.to_string())
                .expect("a next link");
        }
        assert_eq!(paged, all, "{base}: every job once, in the same order");
        assert_eq!(pages, 3, "{base}");
        // An empty token is the first page, as in the Kubernetes API.
        let first = request(
            s.addr,
            "GET",
            &format!("{base}?limit=2&continue="),
            None,
            "",
        )
        .await;
        assert_eq!(first.status, 200, "{}", first.body);
        assert_eq!(first.json()[0]["name"].as_str(), Some(all[0].as_str()));
    }
    // One job running: the state filter finds it, and pages through the rest.
    s.api.modify(
        "frameworks",
        NS,
        &pai_job::names::framework_name("alice", "job3"),
        |f| f["status"] = json!({"state": "AttemptRunning", "attemptStatus": {"id": 0}}),
    );
    let running = until(s.addr, "/api/v1/jobs?state=RUNNING", |r| {
        r.body.contains("job3")
    })
    .await;
    assert_eq!(
        running.json().as_array().map(Vec::len),
        Some(1),
        "{}",
        running.body
    );
    let waiting = request(
        s.addr,
        "GET",
        "/api/v1/jobs?state=WAITING&limit=4",
        None,
        "",
    )
    .await;
    assert_eq!(waiting.json().as_array().map(Vec::len), Some(4));
    assert_eq!(waiting.link, "", "four waiting jobs in all: no next page");
    for bad in [
        "/api/v1/jobs?limit=0",
        "/api/v1/jobs?limit=1001",
        "/api/v1/jobs?continue=nonsense",
        "/api/v1/jobs?state=SLEEPING",
    ] {
        let reply = request(s.addr, "GET", bad, None, "").await;
        assert_eq!(reply.status, 400, "{bad}: {}", reply.body);
    }
}
