//! The readiness rule on hand-built statuses.

use pai_barrier::{Readiness, readiness};
use pai_contract::Framework;
use pai_test_support::frameworks::{address, framework, set_pod_ip, to_value};
use serde_json::Value;

fn with(mut value: Value, change: impl FnOnce(&mut Value)) -> Framework {
    change(&mut value);
    serde_json::from_value(value).expect("framework")
}

fn all_addresses(value: &mut Value) {
    for (role, (name, n)) in [("ps", 2u32), ("worker", 3u32)].into_iter().enumerate() {
        for index in 0..n {
            set_pod_ip(value, name, index, &address(role, index));
        }
    }
}

fn base() -> Value {
    to_value(&framework("fw", &[("ps", 2), ("worker", 3)]))
}

#[test]
fn no_status_is_not_ready() {
    let Readiness::Waiting(p) = readiness(&framework("fw", &[("ps", 2)])).expect("reads") else {
        panic!("ready without a status");
    };
    assert_eq!((p.ready, p.total), (0, 2));
    assert_eq!(p.first_missing, Some(("ps".to_string(), 0)));
}

#[test]
fn every_task_with_an_address_is_ready_and_the_table_says_where() {
    let f = with(base(), all_addresses);
    let Readiness::Ready(table) = readiness(&f).expect("reads") else {
        panic!("not ready");
    };
    assert_eq!(table.framework, "fw");
    assert_eq!(table.roles.len(), 2);
    let worker = table.role("worker").expect("worker");
    assert_eq!(worker.len(), 3);
    for (i, peer) in worker.tasks().enumerate() {
        assert_eq!(peer.index as usize, i);
        assert_eq!(peer.ip.to_string(), address(1, i as u32));
        assert_eq!(peer.ports.to_string(), "http:21001;ssh:21002");
    }
    assert!(worker.task(3).is_none());
    assert!(
        worker.task_ports.is_empty(),
        "one plan for the role's tasks"
    );
    assert_eq!(
        worker
            .env
            .get("PAI_TASK_ROLE_TASK_COUNT_worker")
            .map(String::as_str),
        Some("3"),
        "the role's family travels with the table"
    );
    assert_eq!(table.role_index("worker"), Some(1));
}

#[test]
fn an_empty_address_does_not_count() {
    let f = with(base(), |v| {
        all_addresses(v);
        set_pod_ip(v, "worker", 2, "");
    });
    let Readiness::Waiting(p) = readiness(&f).expect("reads") else {
        panic!("ready")
    };
    assert_eq!((p.ready, p.total), (4, 5));
    assert_eq!(p.first_missing, Some(("worker".to_string(), 2)));
}

#[test]
fn a_task_pending_deletion_does_not_count() {
    let f = with(base(), |v| {
        all_addresses(v);
        v["status"]["attemptStatus"]["taskRoleStatuses"][0]["taskStatuses"][1]["deletionPending"] =
            true.into();
    });
    assert!(matches!(readiness(&f).expect("reads"), Readiness::Waiting(p) if p.ready == 4));
}

#[test]
fn tasks_are_counted_from_the_spec() {
    // A status listing more tasks than the spec (a scale-down in flight) is ready when
    // the spec's tasks are; one listing fewer is not.
    let f = with(base(), |v| {
        all_addresses(v);
        set_pod_ip(v, "worker", 7, "10.9.9.9");
    });
    let Readiness::Ready(table) = readiness(&f).expect("reads") else {
        panic!("not ready")
    };
    assert_eq!(table.role("worker").expect("worker").len(), 3);
    let f = with(
        to_value(&framework("fw", &[("ps", 2), ("worker", 4)])),
        all_addresses,
    );
    assert!(
        matches!(readiness(&f).expect("reads"), Readiness::Waiting(p) if p.total == 6 && p.ready == 5)
    );
}

#[test]
fn compressed_statuses_read_like_plain_ones() {
    let plain = with(base(), all_addresses);
    let statuses = plain
        .status
        .as_ref()
        .and_then(|s| s.attempt_status.task_role_statuses.clone())
        .expect("statuses");
    let compressed = with(base(), |v| {
        v["status"] = serde_json::json!({"attemptStatus": {"id": 0,
            "taskRoleStatusesCompressed": pai_contract::read::compress(&statuses)}});
    });
    assert_eq!(
        readiness(&plain).expect("plain"),
        readiness(&compressed).expect("compressed")
    );
}

#[test]
fn a_corrupt_compressed_status_is_an_error() {
    let f = with(base(), |v| {
        v["status"] =
            serde_json::json!({"attemptStatus": {"taskRoleStatusesCompressed": "bm90IGd6aXA="}});
    });
    assert!(readiness(&f).is_err());
}
