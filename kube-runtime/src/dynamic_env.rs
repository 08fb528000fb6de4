//! The variables only known after the barrier (contracts §2, "dynamic"), plus the
//! per-task port variables the transformer leaves to the runtime so that the Framework
//! stays O(roles). All come from the peer table.

use pai_barrier::PeerTable;
use pai_contract::Framework;
use pai_contract::env as names;
use pai_contract::ports::{HTTP_LABEL, join_ports};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DynamicEnvError {
    #[error("role {0:?} (FC_TASKROLE_NAME) is not in the Framework")]
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
/// table, then every role's family copied from its own template.
pub fn dynamic_env(
    framework: &Framework,
    peers: &PeerTable,
    me: &Me,
) -> Result<Vec<(String, String)>, DynamicEnvError> {
    let role_index = peers
        .roles
        .iter()
        .position(|r| r.kube_name == me.kube_role)
        .ok_or_else(|| DynamicEnvError::UnknownRole(me.kube_role.clone()))?;
    let own = &peers.roles[role_index];
    if me.index as usize >= own.tasks.len() {
        return Err(DynamicEnvError::UnknownIndex {
            role: own.name.clone(),
            index: me.index,
            count: own.tasks.len(),
        });
    }
    let mut env = vec![
        (
            names::CURRENT_TASK_ROLE_CURRENT_TASK_INDEX.to_string(),
            me.index.to_string(),
        ),
        (names::TASK_ROLE_INDEX.to_string(), role_index.to_string()),
    ];
    // This task's own ports: the same as its template's on Kubernetes; its own on a
    // shared host (the embedded default), where they override the role's.
    let mine = &own.tasks[me.index as usize].ports;
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
        let mut hosts = Vec::with_capacity(role.tasks.len());
        for task in &role.tasks {
            env.push((names::host_ip(name, task.index), task.ip.clone()));
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
    env.extend(role_families(framework));
    Ok(env)
}

/// Each role's family ([`names::role_family`]) as its own template states it.
fn role_families(framework: &Framework) -> Vec<(String, String)> {
    let mut vars = Vec::new();
    for role in &framework.spec.task_roles {
        for name in names::role_family(role.pai_name()) {
            if let Some(value) = role.template_env(&name) {
                vars.push((name, names::kubelet_expand(value, |_| None)));
            }
        }
    }
    vars
}

#[cfg(test)]
mod tests {
    use super::*;
    use pai_barrier::{Peer, RolePeers};

    fn table() -> PeerTable {
        let role = |name: &str, kube: &str, ips: &[&str], ports: &str| RolePeers {
            name: name.into(),
            kube_name: kube.into(),
            tasks: ips
                .iter()
                .enumerate()
                .map(|(i, ip)| Peer {
                    index: i as u32,
                    pod_name: None,
                    ip: ip.to_string(),
                    host_ip: None,
                    ports: ports.parse().expect("ports"),
                })
                .collect(),
        };
        PeerTable {
            framework: "fw".into(),
            attempt: 0,
            roles: vec![
                role(
                    "ps",
                    "ps",
                    &["10.0.0.1", "10.0.0.2"],
                    "main:2000;http:2001;ssh:2002",
                ),
                role(
                    "Worker_A",
                    "workera",
                    &["10.0.1.1"],
                    "main:3000,3001;http:3002;ssh:3003",
                ),
            ],
        }
    }

    fn framework() -> Framework {
        pai_test_support::frameworks::framework("fw", &[("ps", 2), ("Worker_A", 1)])
    }

    #[test]
    fn every_dynamic_variable() {
        let env = dynamic_env(
            &framework(),
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
            Some("10.0.0.1:2001,10.0.0.2:2001")
        );
        assert_eq!(get("PAI_PORT_LIST_ps_0_main"), Some("2000"));
        assert_eq!(get("PAI_PORT_LIST_Worker_A_0_main"), Some("3000,3001"));
        assert_eq!(get("PAI_Worker_A_0_main_PORT"), Some("3000"));
        assert_eq!(get("PAI_ps_1_ssh_PORT"), Some("2002"));
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
                &framework(),
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
                &framework(),
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
