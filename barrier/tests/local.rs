//! The local source: the same rule over a Framework file replaced atomically.

use std::path::Path;
use std::time::Duration;

use pai_barrier::{BarrierError, local_source, output};
use pai_contract::exit::ExitCode;
use pai_test_support::frameworks::{address, framework, set_pod_ip, to_value};
use serde_json::Value;

/// A directory for one test, removed when it goes out of scope (a failing test's too).
fn dir(name: &str) -> pai_test_support::scratch::TempDir {
    pai_test_support::scratch(&format!("barrier-local-{name}"))
}

fn publish(path: &Path, value: &Value) {
    output::write_json(path, value).expect("atomic write");
}

#[test]
fn passes_when_the_last_address_is_published() {
    let scratch = dir("pass");
    let dir = scratch.path();
    let path = dir.join("framework.json");
    let mut value = to_value(&framework("fw", &[("server", 1), ("client", 2)]));
    publish(&path, &value);
    let waiter = {
        let path = path.clone();
        std::thread::spawn(move || local_source::wait(&path, Duration::from_secs(120)))
    };
    for (role, position, index) in [("server", 0, 0), ("client", 1, 0), ("client", 1, 1)] {
        set_pod_ip(&mut value, role, index, &address(position, index));
        publish(&path, &value);
    }
    let passed = waiter.join().expect("thread").expect("passes");
    assert_eq!(
        passed.peers.role("client").expect("client").addresses[1].to_string(),
        address(1, 1)
    );
}

#[test]
fn a_missing_file_is_not_found() {
    let scratch = dir("missing");
    let dir = scratch.path();
    let err = local_source::wait(&dir.join("framework.json"), Duration::from_secs(120))
        .expect_err("missing");
    assert_eq!(err.exit_code(), ExitCode::PermanentFailure);
    let err = local_source::wait(
        &dir.join("nowhere/framework.json"),
        Duration::from_secs(120),
    )
    .expect_err("missing");
    assert!(matches!(err, BarrierError::NotFound { .. }), "{err}");
}

#[test]
fn a_deleted_file_is_not_found() {
    let scratch = dir("deleted");
    let dir = scratch.path();
    let path = dir.join("framework.json");
    publish(&path, &to_value(&framework("fw", &[("server", 1)])));
    let waiter = {
        let path = path.clone();
        std::thread::spawn(move || local_source::wait(&path, Duration::from_secs(120)))
    };
    std::fs::remove_file(&path).expect("delete");
    let err = waiter.join().expect("thread").expect_err("deleted");
    assert!(matches!(err, BarrierError::NotFound { .. }), "{err}");
}

#[test]
fn times_out_as_a_transient_conflict() {
    let scratch = dir("timeout");
    let dir = scratch.path();
    let path = dir.join("framework.json");
    publish(&path, &to_value(&framework("fw", &[("server", 2)])));
    let err = local_source::wait(&path, Duration::from_secs(1)).expect_err("times out");
    assert_eq!(err.exit_code(), ExitCode::TransientConflict);
    assert!(
        err.to_string().contains("0/2 tasks have an address"),
        "{err}"
    );
}
