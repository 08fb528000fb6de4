//! The peer-table publisher against the in-process API server, with FrameworkController's
//! status updates played by the test (an attempt's instance UID, then each task's
//! address one by one): publication once every address is known and not before, one
//! object per attempt, a new attempt, a restarted publisher, a stale table replaced, and
//! the table going with its Framework, and an API server that fails its writes for a
//! while or restarts.
//!
//! "Not before" needs no clock: the publisher handles Frameworks in the order of its one
//! watch, so once a Framework changed later has its table, every earlier change has been
//! handled.

use crate::common;

use pai_barrier::{PeerTable, Readiness, published, readiness};
use pai_cluster::backend::KubeBackend;
use pai_cluster::publisher::Publisher;
use pai_contract::Framework;
use pai_test_support::frameworks::{NAMESPACE, set_attempt, set_pod_ip};
use pai_test_support::{ApiServer, Fault};
use serde_json::Value;

const SPEC: &str = r#"
jobName: JOB
image: busybox:1.36
taskRoles:
  - name: ps
    taskNumber: 1
    cpuNumber: 1
    memoryMB: 128
    command: "true"
  - name: Worker_A
    taskNumber: 3
    cpuNumber: 1
    memoryMB: 128
    command: "true"
"#;

/// Role names in the Framework and task counts of [`SPEC`].
const TASKS: &[(&str, u32)] = &[("ps", 1), ("workera", 3)];

fn ip(role: usize, index: u32) -> String {
    format!("10.{}.0.{}", role + 1, index + 1)
}

/// Submits job `job` as rest-lite would; returns the Framework's name.
fn create(server: &ApiServer, job: &str) -> String {
    let framework = common::transform(&SPEC.replace("JOB", job), 1).expect("valid spec");
    let name = framework.metadata.name.clone().expect("named");
    let mut value = serde_json::to_value(&framework).expect("json");
    value["metadata"]["namespace"] = NAMESPACE.into();
    server.create("frameworks", NAMESPACE, value);
    name
}

/// FrameworkController starts attempt `id` (no task has an address yet).
fn start_attempt(server: &ApiServer, name: &str, id: i32) {
    server.modify("frameworks", NAMESPACE, name, |f| {
        f["status"]["state"] = "AttemptRunning".into();
        set_attempt(f, id, &format!("{id}_cm-{name}-{id}"));
    });
}

/// FrameworkController gives the `n`-th task (in spec order) its address: one Framework
/// write per task.
fn give_address(server: &ApiServer, name: &str, n: usize, ip_base: u8) {
    let (role, (kube_role, index)) = TASKS
        .iter()
        .enumerate()
        .flat_map(|(r, (kube, count))| (0..*count).map(move |i| (r, (*kube, i))))
        .nth(n)
        .expect("task exists");
    server.modify("frameworks", NAMESPACE, name, |f| {
        let mut address = ip(role, index);
        if ip_base != 0 {
            address = address.replacen("10.", &format!("{ip_base}."), 1);
        }
        set_pod_ip(f, kube_role, index, &address)
    });
}

fn all_tasks() -> usize {
    TASKS.iter().map(|(_, n)| *n as usize).sum()
}

fn give_every_address(server: &ApiServer, name: &str) {
    for n in 0..all_tasks() {
        give_address(server, name, n, 0);
    }
}

fn stored(server: &ApiServer, name: &str) -> Framework {
    serde_json::from_value(server.get("frameworks", NAMESPACE, name).expect("stored"))
        .expect("framework")
}

fn table_now(server: &ApiServer, name: &str) -> PeerTable {
    match readiness(&stored(server, name)).expect("reads") {
        Readiness::Ready(table) => table,
        Readiness::Waiting(p) => panic!("not ready: {p}"),
    }
}

/// The job's table once it is attempt `attempt`'s (the one object holds each attempt's
/// in turn).
async fn published_table(server: &ApiServer, name: &str, attempt: i32) -> PeerTable {
    let object = published::object_name(name);
    let instance = format!("{attempt}_cm-{name}-{attempt}");
    let of_attempt = |map: &serde_json::Value| {
        serde_json::from_value(map.clone())
            .ok()
            .and_then(|map| published::read(&map, &instance).ok())
    };
    let map = server
        .wait_for("configmaps", NAMESPACE, &object, |m| {
            of_attempt(m).is_some()
        })
        .await;
    of_attempt(&map).expect("this attempt's table")
}

/// Returns once the publisher has handled every change made so far: a fresh Framework
/// made ready now gets its table only after them.
async fn settle(server: &ApiServer, marker: &str) {
    let name = create(server, marker);
    start_attempt(server, &name, 0);
    give_every_address(server, &name);
    published_table(server, &name, 0).await;
}

fn start_publisher(server: &ApiServer) -> tokio::task::JoinHandle<()> {
    let config = kube::Config::new(server.url().parse().expect("url"));
    let client = kube::Client::try_from(config).expect("client");
    let store = KubeBackend::store_only(client.clone(), NAMESPACE, &server.url());
    tokio::spawn(Publisher::new(client, NAMESPACE).run(store))
}

/// The job's tables there are (its one object, if published), by name.
fn config_maps(server: &ApiServer, framework: &str) -> Vec<String> {
    let name = published::object_name(framework);
    server
        .get("configmaps", NAMESPACE, &name)
        .map(|_| name)
        .into_iter()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_once_every_address_is_known_and_not_before() {
    let server = ApiServer::start().await;
    let _publisher = start_publisher(&server);
    let name = create(&server, "gang");
    start_attempt(&server, &name, 0);
    for n in 0..all_tasks() - 1 {
        give_address(&server, &name, n, 0);
    }
    settle(&server, "marker-one").await;
    assert!(
        config_maps(&server, &name).is_empty(),
        "published with a task still without an address"
    );

    give_address(&server, &name, all_tasks() - 1, 0);
    let table = published_table(&server, &name, 0).await;
    assert_eq!(table, table_now(&server, &name));
    assert_eq!(table.task_count(), 4);
    let worker = table.role("Worker_A").expect("the role by its own name");
    assert_eq!(worker.kube_name, "workera");
    let addresses: Vec<String> = worker.addresses.iter().map(|a| a.to_string()).collect();
    assert_eq!(addresses, vec![ip(1, 0), ip(1, 1), ip(1, 2)]);
    assert_eq!(
        worker
            .env
            .get("PAI_TASK_ROLE_TASK_COUNT_Worker_A")
            .map(String::as_str),
        Some("3")
    );
    let map = server
        .get("configmaps", NAMESPACE, &published::object_name(&name))
        .expect("published");
    let framework_uid =
        server.get("frameworks", NAMESPACE, &name).expect("fw")["metadata"]["uid"].clone();
    assert_eq!(map["metadata"]["ownerReferences"][0]["uid"], framework_uid);
    assert_eq!(map["metadata"]["ownerReferences"][0]["kind"], "Framework");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_object_per_job_written_once() {
    let server = ApiServer::start().await;
    let _publisher = start_publisher(&server);
    let name = create(&server, "once");
    start_attempt(&server, &name, 0);
    give_every_address(&server, &name);
    published_table(&server, &name, 0).await;
    // FrameworkController goes on rewriting the Framework (task states, times).
    for _ in 0..5 {
        server.modify("frameworks", NAMESPACE, &name, |f| {
            f["status"]["transitionTime"] = "2026-11-22T10:00:00Z".into();
            f["status"]["attemptStatus"]["taskRoleStatuses"][0]["taskStatuses"][0]["state"] =
                "AttemptRunning".into();
        });
    }
    settle(&server, "marker-two").await;
    assert_eq!(
        config_maps(&server, &name),
        vec![published::object_name(&name)]
    );
    let writes = server
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.uri.contains("/configmaps"))
        .count();
    assert_eq!(writes, 2, "one create for the job, one for the marker");
    assert!(
        !server
            .requests()
            .iter()
            .any(|r| r.method == "PUT" && r.uri.contains("/configmaps")),
        "never rewritten"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_attempt_replaces_the_table_and_a_finished_one_changes_nothing() {
    let server = ApiServer::start().await;
    let _publisher = start_publisher(&server);
    let name = create(&server, "retried");
    start_attempt(&server, &name, 0);
    give_every_address(&server, &name);
    let first = published_table(&server, &name, 0).await;

    // Attempt 1: new pods, other addresses.
    start_attempt(&server, &name, 1);
    for n in 0..all_tasks() {
        give_address(&server, &name, n, 172);
    }
    let second = published_table(&server, &name, 1).await;
    assert_eq!(second.attempt, 1);
    assert_ne!(second.roles[1].addresses, first.roles[1].addresses);
    assert!(second.roles[1].addresses[0].to_string().starts_with("172."));
    // One object for every attempt (the job's Role names it once): attempt 1's table
    // replaced attempt 0's.
    assert_eq!(
        config_maps(&server, &name),
        vec![published::object_name(&name)]
    );

    // A completed attempt publishes nothing, even with every address.
    let done = create(&server, "done");
    start_attempt(&server, &done, 0);
    give_every_address(&server, &done);
    published_table(&server, &done, 0).await;
    server.modify("frameworks", NAMESPACE, &done, |f| {
        f["status"]["state"] = "AttemptCompleted".into();
        set_attempt(f, 1, "1_cm-late");
    });
    server.modify("frameworks", NAMESPACE, &done, |f| {
        for n in 0..3u32 {
            set_pod_ip(f, "workera", n, "10.5.5.5");
        }
        set_pod_ip(f, "ps", 0, "10.5.5.6");
    });
    settle(&server, "marker-three").await;
    assert_eq!(
        config_maps(&server, &done),
        vec![published::object_name(&done)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_publisher_writes_what_is_missing_and_replaces_what_is_stale() {
    let server = ApiServer::start().await;
    // Ready while no publisher runs.
    let missing = create(&server, "missing");
    start_attempt(&server, &missing, 0);
    give_every_address(&server, &missing);
    // A table left by an earlier Framework of the same name: same object name, another
    // attempt instance and other addresses.
    let stale = create(&server, "stale");
    start_attempt(&server, &stale, 0);
    give_every_address(&server, &stale);
    let mut old = table_now(&server, &stale);
    old.attempt_instance_uid = Some("0_earlier".into());
    old.roles[0].addresses[0] = [192, 0, 2, 200].into();
    let map = published::config_map(&old, &stored(&server, &stale));
    server.create(
        "configmaps",
        NAMESPACE,
        serde_json::to_value(&map).expect("json"),
    );
    // One already right.
    let right = create(&server, "right");
    start_attempt(&server, &right, 0);
    give_every_address(&server, &right);
    let map = published::config_map(&table_now(&server, &right), &stored(&server, &right));
    server.create(
        "configmaps",
        NAMESPACE,
        serde_json::to_value(&map).expect("json"),
    );

    let _publisher = start_publisher(&server);
    assert_eq!(
        published_table(&server, &missing, 0).await,
        table_now(&server, &missing)
    );
    let object = published::object_name(&stale);
    let instance = "0_cm-".to_string() + &stale + "-0";
    let replaced = server
        .wait_for("configmaps", NAMESPACE, &object, |m: &Value| {
            m["data"]["peers.json"]
                .as_str()
                .is_some_and(|t| t.contains(&instance))
        })
        .await;
    let replaced = published::read(&serde_json::from_value(replaced).expect("cm"), &instance)
        .expect("this attempt's table");
    assert_eq!(replaced, table_now(&server, &stale));
    settle(&server, "marker-four").await;
    let rewritten = server
        .requests()
        .iter()
        .any(|r| r.method == "PUT" && r.uri.contains(&right));
    assert!(!rewritten, "a table that is right is not rewritten");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_refused_while_the_api_server_fails_is_made_once_it_answers() {
    for fault in [
        Fault::ServerError(500),
        Fault::Deny(403),
        Fault::TooManyRequests { retry_after: 0 },
    ] {
        let server = ApiServer::start().await;
        let _publisher = start_publisher(&server);
        server.watches_started(1).await;
        let name = create(&server, "gang");
        start_attempt(&server, &name, 0);
        let before = server.faulted_count();
        server.fault(Some(fault));
        // The open watch still brings the change; the write it makes is refused.
        give_every_address(&server, &name);
        server.faulted(before + 1).await;
        assert!(config_maps(&server, &name).is_empty());
        server.fault(None);
        let table = published_table(&server, &name, 0).await;
        assert_eq!(table, table_now(&server, &name), "after {fault:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_restart_loses_no_table() {
    let mut server = ApiServer::start().await;
    let _publisher = start_publisher(&server);
    server.watches_started(1).await;
    let name = create(&server, "gang");
    start_attempt(&server, &name, 0);
    server.stop().await;
    // Changed while the API server was down for the publisher, and refused at first
    // after the restart, as a restarting API server does.
    give_every_address(&server, &name);
    server.fault(Some(Fault::Deny(403)));
    server.restart().await;
    server.faulted(1).await;
    server.fault(None);
    let table = published_table(&server, &name, 0).await;
    assert_eq!(table, table_now(&server, &name));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_goes_with_its_framework() {
    let server = ApiServer::start().await;
    let _publisher = start_publisher(&server);
    let name = create(&server, "gone");
    start_attempt(&server, &name, 0);
    give_every_address(&server, &name);
    published_table(&server, &name, 0).await;
    server.delete("frameworks", NAMESPACE, &name);
    assert!(
        config_maps(&server, &name).is_empty(),
        "owned by the Framework: the garbage collector removes it"
    );
}

/// Two replicas of the server publish side by side: each table is created once (the
/// other replica's create is a 409, after which it reads and leaves it), never
/// rewritten while it says the same, and says what the Framework says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_publish_each_table_once() {
    let server = ApiServer::start().await;
    let _one = start_publisher(&server);
    let _two = start_publisher(&server);
    server.watches_started(2).await;
    let name = create(&server, "replicated");
    start_attempt(&server, &name, 0);
    give_every_address(&server, &name);
    let table = published_table(&server, &name, 0).await;
    // FrameworkController goes on rewriting the Framework; both replicas see it.
    server.modify("frameworks", NAMESPACE, &name, |f| {
        f["status"]["transitionTime"] = "2026-11-22T10:00:00Z".into();
    });
    // A marker each replica handles after the job (each handles changes in order):
    // once both tried to create the marker's table, both are done with the job's.
    let marker = create(&server, "marker");
    start_attempt(&server, &marker, 0);
    give_every_address(&server, &marker);
    published_table(&server, &marker, 0).await;
    let posts = || {
        server
            .requests()
            .iter()
            .filter(|r| r.method == "POST" && r.uri.contains("/configmaps"))
            .count()
    };
    // The second replica's create of the marker's table may still be on its way.
    for _ in 0..1_000 {
        if posts() >= 4 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let posts = posts();
    assert_eq!(posts, 4, "each replica tried each of the two tables once");
    assert!(
        !server
            .requests()
            .iter()
            .any(|r| (r.method == "PUT" || r.method == "PATCH") && r.uri.contains("/configmaps")),
        "no table rewritten"
    );
    assert_eq!(
        config_maps(&server, &name),
        vec![published::object_name(&name)]
    );
    assert_eq!(published_table(&server, &name, 0).await, table);
}
