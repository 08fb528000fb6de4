//! What a job costs the cluster beside the pods FrameworkController makes: the same few
//! objects whatever its number of tasks, and kept logs within the configured bound
//! however many tasks end. Against the in-process API server, which counts requests; the
//! real control plane's figures are the cluster bench's (BENCHMARKS.md).

use std::collections::BTreeMap;

use crate::support;

use pai_contract::kept_logs::{self, Part, Share};
use support::*;

/// A job of `tasks` tasks in one role.
fn job(tasks: u32) -> String {
    json!({"jobName": "job", "image": "busybox",
        "taskRoles": [{"name": "worker", "taskNumber": tasks, "cpuNumber": 1, "memoryMB": 128,
            "command": "true"}]})
    .to_string()
}

/// The objects a submission created, by resource, and the bytes of each created object.
fn created(api: &pai_test_support::ApiServer) -> BTreeMap<String, usize> {
    let mut made = BTreeMap::new();
    for request in api.requests().iter().filter(|r| r.method == "POST") {
        let path = request.uri.split('?').next().unwrap_or_default();
        let resource = path.rsplit('/').next().unwrap_or_default().to_string();
        *made.entry(resource).or_default() += 1;
    }
    made
}

/// A submission makes one of each of its objects, whatever its tasks: nothing per task
/// (the pods are FrameworkController's), and a Role that does not name each task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_makes_the_same_objects_whatever_its_tasks() {
    let mut seen = Vec::new();
    for tasks in [1, 1000] {
        let s = start().await;
        let reply = submit(s.addr, "alice", &job(tasks)).await;
        assert_eq!(reply.status, 202, "{}", reply.body);
        let made = created(&s.api);
        assert!(
            made.values().all(|n| *n == 1),
            "{tasks} tasks: one of each object, {made:?}"
        );
        let role = s
            .api
            .get("roles", NS, &pai_contract::access::job_account(&fw()))
            .expect("the job's Role");
        seen.push((made, role["rules"].to_string().len()));
    }
    assert_eq!(seen[0], seen[1], "1 task and 1,000 tasks");
}

/// A 1,000-task job whose tasks all end at once keeps every task's newest log, each its
/// share, in one ConfigMap within the job's bound, written a few times, not once a task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_finished_job_keeps_is_bounded_whatever_its_tasks() {
    const TASKS: u32 = 1000;
    let budget = pai_cluster::log_keeper::Budget {
        task_bytes: kept_logs::DEFAULT_BYTES,
        job_bytes: kept_logs::JOB_BYTES,
        attempts: 5,
    };
    let Setup { api, addr } = keeping(budget).await;
    let reply = submit(addr, "alice", &job(TASKS)).await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    let framework = api.get("frameworks", NS, &fw()).expect("framework");
    let output = "a line of the task's output, repeated\n".repeat(100);
    for index in 0..TASKS {
        let mut made = pai_test_support::frameworks::pod_of(&framework, "worker", index);
        let name = pod("worker", index);
        api.append_container_log(NS, &name, pai_contract::framework::INIT_CONTAINER, &output);
        api.append_log(NS, &name, &output);
        api.end_log(NS, &name);
        for container in [
            pai_contract::framework::INIT_CONTAINER,
            pai_contract::framework::MAIN_CONTAINER,
        ] {
            pai_test_support::frameworks::set_terminated(&mut made, container, 0, "");
        }
        api.create("pods", NS, made);
    }
    let share = Share::of(budget.job_bytes, budget.task_bytes, TASKS as usize);
    let map = api
        .wait_for("configmaps", NS, &kept_logs::config_map(&fw()), |m| {
            m["binaryData"]
                .as_object()
                .is_some_and(|d| d.len() == 2 * TASKS as usize)
        })
        .await;
    let data = map["binaryData"].as_object().expect("binaryData");
    let mut bytes = 0u64;
    for (key, value) in data {
        let raw = base64_len(value.as_str().expect("base64"));
        let (_, attempt, part) = kept_logs::parse_key(key).expect("a kept log's key");
        assert_eq!(attempt, 0);
        assert_eq!(raw, share.of_part(part.expect("a log")), "{key}");
        bytes += (key.len() + raw as usize) as u64;
    }
    assert!(bytes <= budget.job_bytes, "{bytes} bytes kept");
    assert!(share.of_part(Part::Main) > 0);
    // No object per task: one ConfigMap, written a few times (each job's once a second at
    // most, all that was read meanwhile together).
    let maps: Vec<String> = api
        .list("configmaps", NS)
        .iter()
        .filter_map(|m| m["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    let allowed = [
        kept_logs::config_map(&fw()),
        pai_contract::access::peer_table(&fw()),
    ];
    assert!(maps.iter().all(|m| allowed.contains(m)), "{maps:?}");
    let writes = api
        .requests()
        .iter()
        .filter(|r| (r.method == "PUT" || r.method == "POST") && r.uri.contains("/configmaps"))
        .count();
    assert!(
        writes < TASKS as usize / 10,
        "{writes} writes of the kept logs for {TASKS} tasks"
    );
}

/// The length of what base64 text `text` encodes.
fn base64_len(text: &str) -> u64 {
    let pad = text.bytes().rev().take_while(|b| *b == b'=').count();
    (text.len() / 4 * 3 - pad) as u64
}
