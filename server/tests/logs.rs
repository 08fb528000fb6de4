//! Task logs: served, followed, while a task starts, kept after its pod is gone. The
//! Kubernetes backend over the in-process API server, over real sockets.

use crate::support;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_are_served_and_followed() {
    let s = start().await;
    submit_base_job(&s).await;
    let path = "/api/v1/user/alice/jobs/job/logs?role=worker&index=1";
    let missing = request(s.addr, "GET", path, None, "").await;
    assert_eq!(missing.error(), (404, "NoTaskError".to_string()));
    assert!(
        missing.json()["message"]
            .as_str()
            .expect("message")
            .contains("has no log yet")
    );

    s.api.append_log(NS, &pod("worker", 1), "first line\n");
    let reply = request(s.addr, "GET", path, None, "").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body, "first line\n");

    let following = tokio::spawn(request(
        s.addr,
        "GET",
        "/api/v1/user/alice/jobs/job/logs?role=worker&index=1&follow=true",
        None,
        "",
    ));
    s.api.watches_started(1).await;
    s.api.append_log(NS, &pod("worker", 1), "second line\n");
    s.api.append_log(NS, &pod("worker", 0), "another task\n");
    s.api.append_log(NS, &pod("worker", 1), "third line\n");
    s.api.end_log(NS, &pod("worker", 1));
    let reply = following.await.expect("join");
    assert_eq!(reply.body, "first line\nsecond line\nthird line\n");

    for bad in ["role=nope&index=0", "role=worker&index=2"] {
        let reply = request(
            s.addr,
            "GET",
            &format!("/api/v1/user/alice/jobs/job/logs?{bad}"),
            None,
            "",
        )
        .await;
        assert_eq!(reply.error(), (404, "NoTaskError".to_string()), "{bad}");
    }
}

/// With `timestamps=true` each line begins with the kubelet's time for it, and the
/// runtime's lines are still told apart by their mark after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_logs_times_are_the_kubelets_and_its_lines_are_split_after_them() {
    let s = start().await;
    submit_base_job(&s).await;
    let mark = pai_contract::log_lines::mark("INFO");
    s.api.append_log(
        NS,
        &pod("worker", 0),
        &format!("{mark}2026-11-27T10:00:00Z user command started\nepoch 1\n"),
    );
    let path = "/api/v1/user/alice/jobs/job/logs?role=worker&index=0";
    let times = |body: &str| -> Vec<(jiff::Timestamp, String)> {
        body.lines()
            .map(|line| {
                let (time, rest) = line.split_once(' ').expect("a time first");
                (time.parse().expect("RFC 3339"), rest.to_string())
            })
            .collect()
    };
    let all = request(
        s.addr,
        "GET",
        &format!("{path}&source=all&timestamps=true"),
        None,
        "",
    )
    .await;
    assert_eq!(all.status, 200, "{}", all.body);
    let all = times(&all.body);
    assert_eq!(
        all.iter().map(|(_, l)| l.as_str()).collect::<Vec<_>>(),
        [
            format!("{mark}2026-11-27T10:00:00Z user command started").as_str(),
            "epoch 1"
        ]
    );
    let user = request(s.addr, "GET", &format!("{path}&timestamps=true"), None, "").await;
    let user = times(&user.body);
    assert_eq!(user.len(), 1, "{user:?}");
    assert_eq!(user[0], all[1]);
    let runtime = request(
        s.addr,
        "GET",
        &format!("{path}&source=runtime&timestamps=true"),
        None,
        "",
    )
    .await;
    assert_eq!(times(&runtime.body)[0], all[0]);
    // Without it, the lines as written.
    let plain = request(s.addr, "GET", path, None, "").await;
    assert_eq!(plain.body, "epoch 1\n");
}

/// As a real cluster answers while a task starts (its pod not made yet: 404; made, its
/// init container running: 400 `PodInitializing`), the API answers with what there is:
/// no output yet, the runtime's lines, and a follow that waits for the main container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_answer_while_a_task_starts_and_a_follow_waits_for_its_pod() {
    let s = start().await;
    submit_base_job(&s).await;
    let path = "/api/v1/user/alice/jobs/job/logs?role=worker&index=0";
    // Followed right after the submission, before the pod exists: a stream that waits.
    let following = tokio::spawn(request(
        s.addr,
        "GET",
        "/api/v1/user/alice/jobs/job/logs?role=worker&index=0&follow=true",
        None,
        "",
    ));
    // The pod made; its init container (the runtime, at the barrier) runs.
    s.api.create(
        "pods",
        NS,
        json!({"metadata": {"name": pod("worker", 0), "namespace": NS},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]}}),
    );
    s.api.append_container_log(
        NS,
        &pod("worker", 0),
        pai_contract::framework::INIT_CONTAINER,
        &format!(
            "{}waiting at the barrier\n",
            pai_contract::log_lines::mark("INFO")
        ),
    );
    let read = request(s.addr, "GET", path, None, "").await;
    assert_eq!((read.status, read.body.as_str()), (200, ""), "no 400");
    // The kubelet's log API merges stdout and stderr: there is no log of one of them
    // alone (404 NoLogError, saying so), never an answer with both.
    let split = request(s.addr, "GET", &format!("{path}&stream=stderr"), None, "").await;
    assert_eq!(split.status, 404, "{}", split.body);
    assert!(split.body.contains("NoLogError"), "{}", split.body);
    assert!(
        split
            .body
            .contains("stream=stderr cannot be served on a cluster"),
        "{}",
        split.body
    );
    let runtime = request(s.addr, "GET", &format!("{path}&source=runtime"), None, "").await;
    assert_eq!(runtime.status, 200, "{}", runtime.body);
    assert!(
        runtime.body.contains("waiting at the barrier"),
        "{}",
        runtime.body
    );
    // The main container starts, writes and ends: the follower has it all.
    s.api
        .append_log(NS, &pod("worker", 0), "hello from worker-0\n");
    s.api.end_log(NS, &pod("worker", 0));
    let followed = following.await.expect("join");
    assert_eq!(followed.status, 200, "{}", followed.body);
    assert_eq!(followed.body, "hello from worker-0\n");
}

/// Task `role`-`index`'s pod as FrameworkController makes it in the Framework's current
/// attempt, with `init` and `main` as its containers' logs, both terminated (exit 0).
fn ended_pod(s: &Setup, role: &str, index: u32, init: &str, main: &str) -> String {
    let framework = s.api.get("frameworks", NS, &fw()).expect("framework");
    let mut made = pai_test_support::frameworks::pod_of(&framework, role, index);
    let name = pod(role, index);
    assert!(
        made["metadata"]["finalizers"].is_null(),
        "the template has no finalizer: no pod waits for a server"
    );
    s.api
        .append_container_log(NS, &name, pai_contract::framework::INIT_CONTAINER, init);
    s.api.append_log(NS, &name, main);
    s.api.end_log(NS, &name);
    for container in [
        pai_contract::framework::INIT_CONTAINER,
        pai_contract::framework::MAIN_CONTAINER,
    ] {
        pai_test_support::frameworks::set_terminated(&mut made, container, 0, "");
    }
    s.api.create("pods", NS, made);
    name
}

/// Makes the pod of task `role`-`index` with its main container terminated with `code`
/// and the kubelet's termination `message`, and no log (the kubelet's answer is an
/// error, as for a pod that is gone): its name.
fn pod_with_last_words(s: &Setup, role: &str, index: u32, code: i32, message: &str) -> String {
    let framework = s.api.get("frameworks", NS, &fw()).expect("framework");
    let mut made = pai_test_support::frameworks::pod_of(&framework, role, index);
    pai_test_support::frameworks::set_terminated(
        &mut made,
        pai_contract::framework::MAIN_CONTAINER,
        code,
        message,
    );
    s.api.create("pods", NS, made);
    pod(role, index)
}

/// Deletes `pod` (FrameworkController's doing, played) and reads its task's log through
/// the API once it is gone: what was kept.
async fn log_once_gone(s: &Setup, pod: &str, role: &str, index: u32) -> String {
    s.api.delete("pods", NS, pod);
    s.api.wait_gone("pods", NS, pod).await;
    let read = request(
        s.addr,
        "GET",
        &format!("/api/v1/user/alice/jobs/job/logs?role={role}&index={index}"),
        None,
        "",
    )
    .await;
    assert_eq!(read.status, 200, "{}", read.body);
    read.body
}

/// Waits until the job's kept-log ConfigMap holds the main container's log of `pod`'s
/// attempt `attempt` and, `with_init`, its init container's (the two reads may land in
/// different writes).
async fn kept_key(s: &Setup, pod: &str, attempt: i32, with_init: bool) -> serde_json::Value {
    use pai_contract::kept_logs::{Part, key};
    let map = pai_contract::kept_logs::config_map(&fw());
    let main = key(pod, attempt, Part::Main);
    let init = match with_init {
        true => key(pod, attempt, Part::Init),
        false => main.clone(),
    };
    let key = main.as_str();
    s.api
        .wait_for("configmaps", NS, &map, |m| {
            !m["binaryData"][key].is_null() && !m["binaryData"][&init].is_null()
        })
        .await
}

/// A finished task's output outlives its pod. The pod carries no finalizer and its
/// containers write nothing; as they terminate, the server reads each one's log's end
/// (its share of the job's bound) into the job's one ConfigMap, owned by the job;
/// FrameworkController deletes a completed attempt's pods (the test plays it) and the pod
/// goes at once; the API reads the log back: the attempt's, and an earlier attempt's once
/// the next one runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_log_outlives_its_pod() {
    let s = keeping(pai_cluster::log_keeper::Budget {
        task_bytes: 64,
        job_bytes: pai_contract::kept_logs::JOB_BYTES,
        attempts: 5,
    })
    .await;
    submit_base_job(&s).await;
    let long = format!(
        "{}the last line\n",
        "an early line that is not kept\n".repeat(20)
    );
    let barrier = format!("{}barrier passed\n", pai_contract::log_lines::mark("INFO"));
    let worker = ended_pod(&s, "worker", 0, &barrier, &long);
    let map = kept_key(&s, &worker, 0, true).await;
    assert_eq!(map["metadata"]["ownerReferences"][0]["name"], fw());
    assert!(
        s.api.get("pods", NS, &worker).expect("pod")["metadata"]["finalizers"].is_null(),
        "the server holds no pod"
    );
    // The attempt completed: FrameworkController deletes its pods, which go at once.
    s.api.delete("pods", NS, &worker);
    s.api.wait_gone("pods", NS, &worker).await;
    s.api.modify("frameworks", NS, &fw(), |f| {
        f["status"] = json!({"state": "Completed", "attemptStatus": {"id": 0,
            "completionStatus": {"code": 0, "phrase": "Succeeded", "type": {"name": "Succeeded", "attributes": []}},
            "taskRoleStatuses": []}, "retryPolicyStatus": {"totalRetriedCount": 0, "accountableRetriedCount": 0}});
    });

    // The server's copy has seen the job end.
    until(s.addr, "/api/v1/user/alice/jobs/job", |r| {
        r.json()["jobStatus"]["state"] == "SUCCEEDED"
    })
    .await;
    let path = "/api/v1/user/alice/jobs/job/logs?role=worker&index=0";
    let read = request(s.addr, "GET", path, None, "").await;
    assert_eq!(read.status, 200, "{}", read.body);
    assert_eq!(read.body.len(), 64, "{}", read.body);
    assert!(long.ends_with(&read.body) && read.body.ends_with("the last line\n"));
    let runtime = request(s.addr, "GET", &format!("{path}&source=runtime"), None, "").await;
    assert!(runtime.body.contains("barrier passed"), "{}", runtime.body);
    let followed = request(s.addr, "GET", &format!("{path}&follow=true"), None, "").await;
    assert_eq!(followed.body, read.body);
    // The task's log page shows it too.
    let page = request(s.addr, "GET", "/ui/jobs/alice/job/logs/worker/0", None, "").await;
    assert!(page.body.contains("the last line"), "{}", page.body);
    // The next attempt runs and its pod ends: the first one's log is still there, by its
    // number, beside the new one's, in the same ConfigMap.
    s.api.modify("frameworks", NS, &fw(), |f| {
        f["status"]["state"] = json!("AttemptRunning");
        pai_test_support::frameworks::set_attempt(f, 1, "1_uid");
    });
    until(s.addr, "/api/v1/user/alice/jobs/job", |r| {
        r.json()["jobStatus"]["state"] == "RUNNING"
    })
    .await;
    let again = ended_pod(&s, "worker", 0, "", "attempt 1\n");
    let map = kept_key(&s, &again, 1, true).await;
    assert!(
        !map["binaryData"]
            [pai_contract::kept_logs::key(&again, 0, pai_contract::kept_logs::Part::Main)]
        .is_null()
    );
    let earlier = request(s.addr, "GET", &format!("{path}&attempt=0"), None, "").await;
    assert_eq!(
        (earlier.status, earlier.body.as_str()),
        (200, read.body.as_str())
    );
    // The kept copy has no times but the runtime's: its lines are given the time of
    // the runtime's line before them, or the time it is read.
    let stamped = format!("{path}&attempt=0&source=all&timestamps=true");
    let stamped = request(s.addr, "GET", &stamped, None, "").await;
    assert_eq!(stamped.status, 200, "{}", stamped.body);
    for line in stamped.body.lines() {
        let (time, _) = line.split_once(' ').expect("a time first");
        assert!(time.parse::<jiff::Timestamp>().is_ok(), "{line}");
    }
    let rest: String = stamped
        .body
        .split_inclusive('\n')
        .map(|l| l.split_once(' ').map_or(l, |(_, rest)| rest))
        .collect();
    assert!(rest.ends_with(&read.body), "{rest}");
    // Nothing of it was made by the job's pods: their grant has no ConfigMap to write.
    let framework = s.api.get("frameworks", NS, &fw()).expect("framework");
    let framework: pai_contract::Framework = serde_json::from_value(framework).expect("framework");
    for rule in pai_cluster::job_access::rules(&framework) {
        assert!(
            rule.verbs
                .iter()
                .all(|v| ["get", "list", "watch"].contains(&v.as_str())),
            "{rule:?}"
        );
    }
}

/// A pod that went before the server could read its log (FrameworkController quicker, the
/// kubelet's log gone with it) leaves the termination message the kubelet gave its
/// container, the last lines of a failed one: that is kept, and the log says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_gone_before_its_log_was_read_leaves_its_termination_message() {
    let s = keeping(pai_cluster::log_keeper::Budget {
        task_bytes: 1024,
        job_bytes: pai_contract::kept_logs::JOB_BYTES,
        attempts: 1,
    })
    .await;
    submit_base_job(&s).await;
    let name = pod_with_last_words(
        &s,
        "ps",
        0,
        1,
        "Traceback (most recent call last):\nValueError: bad shape\n",
    );
    kept_key(&s, &name, 0, false).await;
    let log = log_once_gone(&s, &name, "ps", 0).await;
    assert!(log.starts_with("Traceback"), "{log}");
    assert!(
        log.contains("its pod was gone before the server could read its log"),
        "{log}"
    );
}

/// A write of a kept log that the API server could not take (it answers 500 for a while,
/// as one whose etcd elects a leader does; kube's client itself tries 429, 503 and 504
/// again, not this) is tried again at the job's next write, and the log is kept once the
/// server answers: not dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_log_waits_out_the_api_servers_trouble() {
    let s = keeping(pai_cluster::log_keeper::Budget {
        task_bytes: 1024,
        job_bytes: pai_contract::kept_logs::JOB_BYTES,
        attempts: 1,
    })
    .await;
    submit_base_job(&s).await;
    // A first task's log kept: the server's watch of the pods is up.
    let first = ended_pod(&s, "ps", 0, "", "the first task\n");
    kept_key(&s, &first, 0, false).await;
    let map = pai_contract::kept_logs::config_map(&fw());
    let since = s.api.requests().len();
    s.api
        .fault(Some(pai_test_support::apiserver::Fault::ServerError(500)));
    // Its log cannot be read either: its termination message is what is kept.
    let name = pod_with_last_words(&s, "worker", 0, 0, "the second task's last words\n");
    let kept = async {
        // Two reads of the job's ConfigMap refused: a write, and the write tried again.
        let mut faulted = s.api.faulted_count();
        loop {
            let tries = s.api.requests()[since..]
                .iter()
                .filter(|r| r.method == "GET" && r.uri.contains(&format!("/configmaps/{map}")))
                .count();
            if tries >= 2 {
                break;
            }
            faulted += 1;
            s.api.faulted(faulted).await;
        }
        s.api.fault(None);
        kept_key(&s, &name, 0, false).await;
    };
    // A bound only to fail rather than hang where the write was dropped.
    tokio::time::timeout(std::time::Duration::from_secs(120), kept)
        .await
        .expect("the refused write was never tried again: the log was dropped");
    let log = log_once_gone(&s, &name, "worker", 0).await;
    assert!(log.starts_with("the second task's last words"), "{log}");
}

/// A task whose attempt ended before it was placed (its image not pulled) never will have
/// a log in that attempt: the API and the task's log page say so and what ended it, not
/// "no log yet"; a task that was placed still has its pod's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_never_started_says_why_it_has_no_log() {
    let s = start().await;
    submit_base_job(&s).await;
    let now = jiff::Timestamp::now().to_string();
    s.api.modify("frameworks", NS, &fw(), |f| {
        let task = |index: u32| {
            json!({"index": index, "state": "Completed",
                "attemptStatus": {"id": 0, "podName": pod("worker", index), "completionTime": now,
                    "completionStatus": {"code": -200, "phrase": "x", "type": {"name": "Failed", "attributes": []},
                        "diagnostics": "not started: ErrImagePull: image example.org/app is not on this machine"}}})
        };
        f["status"] = json!({"state": "Completed", "completionTime": now,
            "attemptStatus": {"id": 0, "completionTime": now,
                "completionStatus": {"code": -200, "phrase": "x", "type": {"name": "Failed", "attributes": []},
                    "diagnostics": "ErrImagePull: image example.org/app is not on this machine"},
                "taskRoleStatuses": [{"name": "worker", "taskStatuses": [task(0), task(1)]}]},
            "retryPolicyStatus": {"totalRetriedCount": 0, "accountableRetriedCount": 0}});
        // worker-0 was placed: it had a pod, whose log is gone.
        pai_test_support::frameworks::set_pod_ip(f, "worker", 0, "10.0.0.7");
    });
    until(s.addr, "/api/v1/user/alice/jobs/job", |r| {
        r.json()["jobStatus"]["state"] == "FAILED"
    })
    .await;
    let never = request(
        s.addr,
        "GET",
        "/api/v1/user/alice/jobs/job/logs?role=worker&index=1",
        None,
        "",
    )
    .await;
    assert_eq!(
        never.error(),
        (404, "NoLogError".to_string()),
        "{}",
        never.body
    );
    let said = "task worker-1 of job alice~job never started: attempt 0 ended before it ran (ErrImagePull: image example.org/app is not on this machine)";
    assert_eq!(never.json()["message"], said);
    let page = request(s.addr, "GET", "/ui/jobs/alice/job/logs/worker/1", None, "").await;
    assert_eq!(page.status, 404);
    assert!(page.body.contains(said), "{}", page.body);
    // The job's page, where each task's last lines would be, says it too.
    let page = request(s.addr, "GET", "/ui/jobs/alice/job", None, "").await;
    assert!(
        page.body
            .contains(&format!("<div class=\"note\">{said}</div>")),
        "{}",
        page.body
    );
    // Placed, its pod gone: no log, without a reason it never will have one.
    let placed = request(
        s.addr,
        "GET",
        "/api/v1/user/alice/jobs/job/logs?role=worker&index=0",
        None,
        "",
    )
    .await;
    assert_eq!(placed.error(), (404, "NoTaskError".to_string()));
    assert!(
        placed.json()["message"]
            .as_str()
            .is_some_and(|m| m.contains("has no log yet")),
        "{}",
        placed.body
    );
}
