//! The variables only known after the barrier (contracts §2, "dynamic"), plus the
//! per-task port variables and other roles' families the transformer leaves to the
//! runtime so that the Framework stays O(roles). All come from the peer table.

use pai_barrier::PeerTable;
use pai_contract::env as names;
use pai_contract::ports::{HTTP_LABEL, join_ports};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DynamicEnvError {
    #[error("role {0:?} (FC_TASKROLE_NAME) is not in the peer table")]
    UnknownRole(String),
    #[error("task index {index} is not below role {role:?}'s task count {count}")]
    UnknownIndex {
        role: String,
        index: u32,
        count: usize,
    },
}

/// This task: its role's Kubernetes name (`FC_TASKROLE_NAME`) and index (`FC_TASK_INDEX`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Me {
    pub kube_role: String,
    pub index: u32,
}

/// Every dynamic variable for task `me`, in a stable order: the variables of the peer
/// table, then every role's family.
pub fn dynamic_env(peers: &PeerTable, me: &Me) -> Result<Vec<(String, String)>, DynamicEnvError> {
    let role_index = peers
        .roles
        .iter()
        .position(|r| r.kube_name == me.kube_role)
        .ok_or_else(|| DynamicEnvError::UnknownRole(me.kube_role.clone()))?;
    let own = &peers.roles[role_index];
    let Some(mine) = own.task(me.index) else {
        return Err(DynamicEnvError::UnknownIndex {
            role: own.name.clone(),
            index: me.index,
            count: own.len(),
        });
    };
    let mut env = vec![
        (
            names::CURRENT_TASK_ROLE_CURRENT_TASK_INDEX.to_string(),
            me.index.to_string(),
        ),
        (names::TASK_ROLE_INDEX.to_string(), role_index.to_string()),
    ];
    // This task's own ports: the same as its template's on Kubernetes; its own on a
    // shared host (the embedded default), where they override the role's.
    let mine = mine.ports;
    env.push((
        names::CONTAINER_HOST_PORT_LIST.to_string(),
        mine.to_string(),
    ));
    for (label, ports) in mine.iter() {
        env.push((
            names::container_host_label_port_list(label),
            join_ports(ports),
        ));
    }
    for (var, label) in [
        (names::CURRENT_CONTAINER_PORT, HTTP_LABEL),
        (names::CONTAINER_SSH_PORT, pai_contract::ports::SSH_LABEL),
    ] {
        if let Some(port) = mine.first(label) {
            env.push((var.to_string(), port.to_string()));
        }
    }
    for role in &peers.roles {
        let name = role.name.as_str();
        let mut hosts = Vec::with_capacity(role.len());
        for task in role.tasks() {
            env.push((names::host_ip(name, task.index), task.ip.to_string()));
            for (label, ports) in task.ports.iter() {
                env.push((names::port_list(name, task.index, label), join_ports(ports)));
                if let Some(first) = ports.first() {
                    env.push((names::task_port(name, task.index, label), first.to_string()));
                }
            }
            let http = task
                .ports
                .first(HTTP_LABEL)
                .map(|p| p.to_string())
                .unwrap_or_default();
            hosts.push(format!("{}:{http}", task.ip));
        }
        env.push((names::task_role_host_list(name), hosts.join(",")));
    }
    for role in &peers.roles {
        env.extend(role.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pai_barrier::{Readiness, readiness};
    use pai_test_support::frameworks::{framework, set_pod_ip, to_value};

    /// The table the barrier gives for the fixture's job: ps (2 tasks), Worker_A (1).
    fn table() -> PeerTable {
        let mut value = to_value(&framework("fw", &[("ps", 2), ("Worker_A", 1)]));
        set_pod_ip(&mut value, "ps", 0, "10.0.0.1");
        set_pod_ip(&mut value, "ps", 1, "10.0.0.2");
        set_pod_ip(&mut value, "workera", 0, "10.0.1.1");
        let framework = serde_json::from_value(value).expect("framework");
        match readiness(&framework).expect("reads") {
            Readiness::Ready(table) => table,
            Readiness::Waiting(p) => panic!("not ready: {p}"),
        }
    }

    #[test]
    fn every_dynamic_variable() {
        let env = dynamic_env(
            &table(),
            &Me {
                kube_role: "workera".into(),
                index: 0,
            },
        )
        .expect("env");
        let get = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"), Some("0"));
        assert_eq!(get("PAI_TASK_ROLE_INDEX"), Some("1"));
        assert_eq!(get("PAI_HOST_IP_ps_1"), Some("10.0.0.2"));
        assert_eq!(get("PAI_HOST_IP_Worker_A_0"), Some("10.0.1.1"));
        assert_eq!(
            get("PAI_TASK_ROLE_ps_HOST_LIST"),
            Some("10.0.0.1:20001,10.0.0.2:20001")
        );
        assert_eq!(get("PAI_PORT_LIST_ps_0_http"), Some("20001"));
        assert_eq!(get("PAI_PORT_LIST_Worker_A_0_ssh"), Some("21002"));
        assert_eq!(get("PAI_Worker_A_0_http_PORT"), Some("21001"));
        assert_eq!(get("PAI_ps_1_ssh_PORT"), Some("20002"));
        assert_eq!(
            get("PAI_CONTAINER_HOST_PORT_LIST"),
            Some("http:21001;ssh:21002")
        );
        assert_eq!(get("PAI_CURRENT_CONTAINER_PORT"), Some("21001"));
        assert_eq!(
            get("PAI_TASK_ROLE_TASK_COUNT_ps"),
            Some("2"),
            "other roles' families come from their templates"
        );
        assert_eq!(get("PAI_MIN_SUCCEEDED_TASK_COUNT_ps"), Some("-1"));
        assert_eq!(
            get("PAI_RESOURCE_Worker_A"),
            Some("cpu_count:1,memMB:1024,shmMB:64,gpu_count:0")
        );
        let names: std::collections::HashSet<&String> = env.iter().map(|(k, _)| k).collect();
        assert_eq!(names.len(), env.len(), "no variable twice");
    }

    #[test]
    fn unknown_role_or_index_is_an_error() {
        assert!(
            dynamic_env(
                &table(),
                &Me {
                    kube_role: "nope".into(),
                    index: 0
                }
            )
            .is_err()
        );
        assert!(
            dynamic_env(
                &table(),
                &Me {
                    kube_role: "ps".into(),
                    index: 2
                }
            )
            .is_err()
        );
    }
}
