//! Waiting for the attempt's published peer table against the in-process API server: a
//! table published before the task starts, one published while it waits, a table of
//! another attempt instance, a later attempt, a cut watch, 410 Gone, 403 and the timeout,
//! and the API server's faults after the wait was answered (401/403 while a restarted
//! API server's caches fill, 429, 5xx, a restart dropping every connection).
//! The barrier never reads the Framework here.

use std::time::Duration;

use pai_barrier::{Attempt, BarrierConfig, BarrierError, PeerTable, Readiness, Source};
use pai_barrier::{kube_source, published, readiness};
use pai_contract::Framework;
use pai_contract::exit::ExitCode;
use pai_test_support::frameworks::{
    NAMESPACE, address, framework, set_all_addresses, set_attempt, to_value,
};
use pai_test_support::{ApiServer, Fault};

const FW: &str = "bobjob";
const ROLES: &[(&str, u32)] = &[("ps", 1), ("worker", 3)];
const LONG: Duration = Duration::from_secs(120);

fn attempt(id: i32) -> Attempt {
    Attempt {
        id,
        instance_uid: format!("{id}_uid-{id}"),
    }
}

fn config(attempt: Attempt, timeout: Duration) -> BarrierConfig {
    BarrierConfig {
        namespace: NAMESPACE.into(),
        name: FW.into(),
        timeout,
        reread: None,
        source: Source::Published(attempt),
    }
}

/// The Framework in attempt `id` with every address, as stored (with its uid).
fn ready_framework(server: &ApiServer, id: i32) -> Framework {
    let instance = attempt(id).instance_uid;
    if server.get("frameworks", NAMESPACE, FW).is_none() {
        server.create("frameworks", NAMESPACE, to_value(&framework(FW, ROLES)));
    }
    server.modify("frameworks", NAMESPACE, FW, |f| {
        set_attempt(f, id, &instance);
        set_all_addresses(f, ROLES);
    });
    let stored = server.get("frameworks", NAMESPACE, FW).expect("stored");
    serde_json::from_value(stored).expect("framework")
}

fn table_of(framework: &Framework) -> PeerTable {
    match readiness(framework).expect("reads") {
        Readiness::Ready(table) => table,
        Readiness::Waiting(p) => panic!("not ready: {p}"),
    }
}

/// Publishes `table` as rest-lite does.
fn publish(server: &ApiServer, framework: &Framework, table: &PeerTable) {
    let map = published::config_map(table, framework);
    let value = serde_json::to_value(&map).expect("json");
    let name = published::object_name(&table.framework);
    if server.get("configmaps", NAMESPACE, &name).is_some() {
        server.modify("configmaps", NAMESPACE, &name, |m| *m = value);
    } else {
        server.create("configmaps", NAMESPACE, value);
    }
}

fn spawn_wait(
    server: &ApiServer,
    config: BarrierConfig,
) -> tokio::task::JoinHandle<Result<pai_barrier::Passed, BarrierError>> {
    let client = server.client();
    tokio::spawn(async move { kube_source::wait(client, &config).await })
}

fn framework_reads(server: &ApiServer) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| r.uri.contains("/frameworks"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_published_before_the_task_starts_is_read_at_once_by_one_watch() {
    let server = ApiServer::start().await;
    let framework = ready_framework(&server, 0);
    publish(&server, &framework, &table_of(&framework));
    let before = server.requests().len();

    let passed = kube_source::wait(server.client(), &config(attempt(0), LONG))
        .await
        .expect("passes");
    assert!(passed.framework.is_none(), "the Framework was not read");
    assert_eq!(passed.peers.attempt, 0);
    let worker = passed.peers.role("worker").expect("worker");
    assert_eq!(
        worker.addresses,
        (0..3)
            .map(|i| address(1, i).parse().expect("an address"))
            .collect::<Vec<std::net::IpAddr>>()
    );
    let requests = &server.requests()[before..];
    assert_eq!(requests.len(), 1, "one request: {requests:?}");
    assert!(requests[0].is_watch());
    assert!(
        requests[0]
            .uri
            .contains("fieldSelector=metadata.name%3Dbobjob-peers"),
        "{}",
        requests[0].uri
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_for_publication_and_passes_on_that_event() {
    let server = ApiServer::start().await;
    let waiting = spawn_wait(&server, config(attempt(0), LONG));
    server.watches_started(1).await;
    let framework = ready_framework(&server, 0);
    publish(&server, &framework, &table_of(&framework));
    let passed = waiting.await.expect("join").expect("passes");
    assert_eq!(passed.peers, table_of(&framework));
    assert_eq!(
        framework_reads(&server),
        0,
        "no barrier request touched the Framework"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_of_another_attempt_instance_is_not_used() {
    let server = ApiServer::start().await;
    let framework = ready_framework(&server, 0);
    // Left from an earlier Framework of the same name: same name, another instance.
    let mut stale = table_of(&framework);
    stale.attempt_instance_uid = Some("0_earlier".into());
    stale.roles[1].addresses[0] = [192, 0, 2, 99].into();
    publish(&server, &framework, &stale);

    let waiting = spawn_wait(&server, config(attempt(0), LONG));
    server.watches_started(1).await;
    // The publisher replaces it with this attempt's table.
    publish(&server, &framework, &table_of(&framework));
    let passed = waiting.await.expect("join").expect("passes");
    assert_eq!(
        passed.peers.attempt_instance_uid.as_deref(),
        Some("0_uid-0")
    );
    assert_eq!(
        passed.peers.roles[1].addresses[0].to_string(),
        address(1, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_attempt_never_reads_the_previous_attempts_table() {
    let server = ApiServer::start().await;
    let first = ready_framework(&server, 0);
    publish(&server, &first, &table_of(&first));

    let waiting = spawn_wait(&server, config(attempt(1), LONG));
    server.watches_started(1).await;
    let mut second = ready_framework(&server, 1);
    // The new attempt's pods got other addresses.
    let mut value = to_value(&second);
    pai_test_support::frameworks::set_pod_ip(&mut value, "worker", 2, "10.9.9.9");
    second = serde_json::from_value(value).expect("framework");
    publish(&server, &second, &table_of(&second));
    let passed = waiting.await.expect("join").expect("passes");
    assert_eq!(passed.peers.attempt, 1);
    assert_eq!(passed.peers.roles[1].addresses[2].to_string(), "10.9.9.9");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_watch_and_410_gone_resume_the_wait() {
    let server = ApiServer::start().await;
    let framework = ready_framework(&server, 0);
    let waiting = spawn_wait(&server, config(attempt(0), LONG));
    server.watches_started(1).await;
    server.cut_watches();
    server.watches_started(2).await;
    server.compact();
    server.cut_watches();
    server.watches_started(3).await;
    publish(&server, &framework, &table_of(&framework));
    let passed = waiting.await.expect("join").expect("passes");
    assert_eq!(passed.peers.task_count(), 4);
}

/// A watch was accepted, then the API server answers `fault` for a while (the watch cut
/// as by its restart): the wait outlasts it and passes once the table is published.
async fn outlasts_after_an_answer(fault: Fault) {
    let server = ApiServer::start().await;
    let framework = ready_framework(&server, 0);
    let mut waiting = spawn_wait(&server, config(attempt(0), LONG));
    server.watches_started(1).await;
    server.fault(Some(fault));
    server.cut_watches();
    // Answered with the fault three times: the wait did not end at the first.
    server.faulted_while(3, &mut waiting).await;
    server.fault(None);
    publish(&server, &framework, &table_of(&framework));
    let passed = waiting
        .await
        .expect("join")
        .unwrap_or_else(|e| panic!("after {fault:?}: {e}"));
    assert_eq!(passed.peers.task_count(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_403_or_401_window_after_the_watch_was_accepted_is_outlasted() {
    outlasts_after_an_answer(Fault::Deny(403)).await;
    outlasts_after_an_answer(Fault::Deny(401)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_and_too_many_requests_are_outlasted() {
    outlasts_after_an_answer(Fault::ServerError(500)).await;
    outlasts_after_an_answer(Fault::TooManyRequests { retry_after: 0 }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_api_server_only_delays_the_release() {
    let server = ApiServer::start().await;
    let framework = ready_framework(&server, 0);
    server.fault(Some(Fault::Slow(Duration::from_millis(300))));
    let waiting = spawn_wait(&server, config(attempt(0), LONG));
    server.watches_started(1).await;
    publish(&server, &framework, &table_of(&framework));
    let passed = waiting.await.expect("join").expect("released");
    assert_eq!(passed.peers.task_count(), 4);
    assert_eq!(server.faulted_count(), 0, "slow is not refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_restart_that_refuses_at_first_releases_the_wait() {
    // The measured failure: the API server killed and started again, its first answers
    // 403 while its authorizer's caches fill.
    let mut server = ApiServer::start().await;
    let framework = ready_framework(&server, 0);
    let mut waiting = spawn_wait(&server, config(attempt(0), LONG));
    server.watches_started(1).await;
    server.restart_with(Fault::Deny(403)).await;
    server.faulted_while(2, &mut waiting).await;
    server.fault(None);
    publish(&server, &framework, &table_of(&framework));
    let passed = waiting.await.expect("join").expect("released");
    assert_eq!(passed.peers.task_count(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forbidden_names_the_configmap_rule() {
    let server = ApiServer::start().await;
    server.deny(Some(403));
    let err = kube_source::wait(server.client(), &config(attempt(0), LONG))
        .await
        .expect_err("forbidden");
    let message = err.to_string();
    assert!(matches!(err, BarrierError::Forbidden(_)), "{message}");
    assert!(
        message.contains("may not watch configmaps in namespace jobs"),
        "{message}"
    );
    assert!(
        message.contains("get, list and watch on this job's peer table"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_never_published_times_out_as_a_transient_conflict_naming_it() {
    let server = ApiServer::start().await;
    let err = kube_source::wait(server.client(), &config(attempt(0), Duration::from_secs(1)))
        .await
        .expect_err("times out");
    assert_eq!(err.exit_code(), ExitCode::TransientConflict);
    assert!(err.to_string().contains("configmap bobjob-peers"), "{err}");
}
