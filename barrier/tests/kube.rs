//! The Kubernetes source against an in-process API server: addresses arriving one by
//! one, cut watches, 410 Gone, deletion, a compressed 2,000-task status, 401/403, an API
//! server restart (with 403s while its caches fill), and the timeout.

use std::time::Duration;

use pai_barrier::{BarrierConfig, BarrierError, Source, kube_source};
use pai_contract::exit::ExitCode;
use pai_test_support::frameworks::{NAMESPACE, address, framework, set_pod_ip, to_value};
use pai_test_support::{ApiServer, Fault};

const FW: &str = "alicejob";

fn config(timeout: Duration) -> BarrierConfig {
    BarrierConfig {
        namespace: NAMESPACE.into(),
        name: FW.into(),
        timeout,
        reread: None,
        source: Source::Framework,
    }
}

async fn start_with_job(roles: &[(&str, u32)]) -> ApiServer {
    let server = ApiServer::start().await;
    server.create("frameworks", NAMESPACE, to_value(&framework(FW, roles)));
    server
}

fn give_address(server: &ApiServer, role_position: usize, role: &str, index: u32) {
    server.modify("frameworks", NAMESPACE, FW, |f| {
        set_pod_ip(f, role, index, &address(role_position, index))
    });
}

fn spawn_wait(
    server: &ApiServer,
    timeout: Duration,
) -> tokio::task::JoinHandle<Result<pai_barrier::Passed, BarrierError>> {
    let client = server.client();
    tokio::spawn(async move { kube_source::wait(client, &config(timeout)).await })
}

const LONG: Duration = Duration::from_secs(120);

fn lists(server: &ApiServer) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && !r.is_watch())
        .count()
}

fn watches(server: &ApiServer) -> usize {
    server.requests().iter().filter(|r| r.is_watch()).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_on_the_event_that_gives_the_last_address() {
    let server = start_with_job(&[("ps", 2), ("worker", 2)]).await;
    let waiting = spawn_wait(&server, LONG);
    server.watches_started(1).await;
    give_address(&server, 0, "ps", 0);
    give_address(&server, 0, "ps", 1);
    give_address(&server, 1, "worker", 0);
    let last_rv = {
        give_address(&server, 1, "worker", 1);
        server.resource_version()
    };
    let passed = waiting.await.expect("join").expect("passes");
    assert_eq!(
        passed
            .framework
            .as_ref()
            .and_then(|f| f.metadata.resource_version.as_deref()),
        Some(last_rv.to_string().as_str()),
        "released by the event that completed the addresses"
    );
    let worker = passed.peers.role("worker").expect("worker");
    assert_eq!(worker.addresses[1].to_string(), address(1, 1));
    assert_eq!(
        (lists(&server), watches(&server)),
        (1, 1),
        "one list and one watch: {:?}",
        server.requests()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_watch_resumes_from_the_last_resource_version() {
    let server = start_with_job(&[("worker", 3)]).await;
    let waiting = spawn_wait(&server, LONG);
    server.watches_started(1).await;
    give_address(&server, 0, "worker", 0);
    server.cut_watches();
    give_address(&server, 0, "worker", 1);
    give_address(&server, 0, "worker", 2);
    let passed = waiting.await.expect("join").expect("passes");
    assert_eq!(passed.peers.roles[0].len(), 3);
    assert_eq!(
        lists(&server),
        1,
        "no re-list after a cut: {:?}",
        server.requests()
    );
    assert!(
        watches(&server) >= 2,
        "watched again: {:?}",
        server.requests()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gone_410_makes_it_list_again() {
    let server = start_with_job(&[("worker", 2)]).await;
    let waiting = spawn_wait(&server, LONG);
    server.watches_started(1).await;
    give_address(&server, 0, "worker", 0);
    server.compact();
    server.cut_watches();
    give_address(&server, 0, "worker", 1);
    let passed = waiting.await.expect("join").expect("passes");
    assert_eq!(passed.peers.roles[0].len(), 2);
    assert!(
        lists(&server) >= 2,
        "listed again after 410: {:?}",
        server.requests()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_framework_is_permanent() {
    let server = ApiServer::start().await;
    let err = kube_source::wait(server.client(), &config(LONG))
        .await
        .expect_err("no framework");
    assert!(
        matches!(
            err,
            BarrierError::NotFound {
                what: "does not exist",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.exit_code(), ExitCode::PermanentFailure);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_framework_deleted_while_waiting_is_permanent() {
    let server = start_with_job(&[("worker", 2)]).await;
    let waiting = spawn_wait(&server, LONG);
    server.watches_started(1).await;
    server.delete("frameworks", NAMESPACE, FW);
    let err = waiting.await.expect("join").expect_err("deleted");
    assert!(
        matches!(
            err,
            BarrierError::NotFound {
                what: "was deleted while waiting",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.exit_code().code(), 210);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compressed_status_of_2000_tasks() {
    let server = start_with_job(&[("worker", 2000)]).await;
    let mut plain = to_value(&framework(FW, &[("worker", 2000)]));
    for i in 0..2000 {
        set_pod_ip(&mut plain, "worker", i, &address(0, i));
    }
    let statuses: Vec<pai_contract::framework::TaskRoleStatus> =
        serde_json::from_value(plain["status"]["attemptStatus"]["taskRoleStatuses"].clone())
            .expect("statuses");
    let compressed = pai_contract::read::compress(&statuses);
    let waiting = spawn_wait(&server, LONG);
    server.watches_started(1).await;
    server.modify("frameworks", NAMESPACE, FW, |f| {
        f["status"] = serde_json::json!({"state": "AttemptRunning",
            "attemptStatus": {"id": 0, "taskRoleStatusesCompressed": compressed}});
    });
    let passed = waiting.await.expect("join").expect("passes");
    let role = &passed.peers.roles[0];
    assert_eq!(role.len(), 2000);
    assert!(
        role.tasks()
            .all(|t| t.ip.to_string() == address(0, t.index))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_fails_at_once_naming_the_rbac_rule() {
    let server = start_with_job(&[("worker", 1)]).await;
    server.deny(Some(403));
    let err = kube_source::wait(server.client(), &config(LONG))
        .await
        .expect_err("forbidden");
    let message = err.to_string();
    assert!(matches!(err, BarrierError::Forbidden(_)), "{message}");
    assert!(
        message.contains(
            "may not list frameworks.frameworkcontroller.microsoft.com in namespace jobs"
        ),
        "{message}"
    );
    assert!(
        message.contains("get, list and watch on this Framework"),
        "{message}"
    );
    assert_eq!(err.exit_code(), ExitCode::Unknown);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthorized_fails_at_once() {
    let server = start_with_job(&[("worker", 1)]).await;
    server.deny(Some(401));
    let err = kube_source::wait(server.client(), &config(LONG))
        .await
        .expect_err("unauthorized");
    assert!(err.to_string().contains("401 Unauthorized"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_an_api_server_restart() {
    let mut server = start_with_job(&[("worker", 2)]).await;
    let waiting = spawn_wait(&server, LONG);
    server.watches_started(1).await;
    give_address(&server, 0, "worker", 0);
    server.stop().await;
    give_address(&server, 0, "worker", 1);
    server.restart().await;
    let passed = waiting
        .await
        .expect("join")
        .expect("passes after the restart");
    assert_eq!(
        passed.peers.roles[0].addresses[1].to_string(),
        address(0, 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_api_server_refusing_for_a_while_does_not_end_the_wait() {
    let mut server = start_with_job(&[("worker", 2)]).await;
    let mut waiting = spawn_wait(&server, LONG);
    server.watches_started(1).await;
    give_address(&server, 0, "worker", 0);
    server.restart_with(Fault::Deny(403)).await;
    server.faulted_while(2, &mut waiting).await;
    server.fault(None);
    give_address(&server, 0, "worker", 1);
    let passed = waiting.await.expect("join").expect("released");
    assert_eq!(
        passed.peers.roles[0].addresses[1].to_string(),
        address(0, 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn times_out_as_a_transient_conflict_saying_what_is_missing() {
    let server = start_with_job(&[("ps", 1), ("worker", 2)]).await;
    give_address(&server, 0, "ps", 0);
    let err = kube_source::wait(server.client(), &config(Duration::from_secs(1)))
        .await
        .expect_err("times out");
    assert_eq!(err.exit_code(), ExitCode::TransientConflict);
    assert_eq!(
        err.to_string(),
        "timed out after 1 s: 1/3 tasks have an address; waiting for worker-0 among others"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_interval_only_bounds_the_watch() {
    // BARRIER_CHECK_INTERVAL_SEC becomes the watch's timeoutSeconds: the watch is re-opened
    // that often from the last resourceVersion, never re-listed or polled.
    let server = start_with_job(&[("worker", 1)]).await;
    let client = server.client();
    let waiting = tokio::spawn(async move {
        let config = BarrierConfig {
            reread: Some(Duration::from_secs(1)),
            ..config(LONG)
        };
        kube_source::wait(client, &config).await
    });
    server.watches_started(2).await;
    give_address(&server, 0, "worker", 0);
    waiting.await.expect("join").expect("passes");
    let requests = server.requests();
    assert!(
        requests
            .iter()
            .filter(|r| r.is_watch())
            .all(|r| r.uri.contains("timeoutSeconds=1")),
        "{requests:?}"
    );
    assert_eq!(
        lists(&server),
        1,
        "re-opened watches, not re-lists: {requests:?}"
    );
}
