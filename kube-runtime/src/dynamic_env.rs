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

/// How a variable's size grows with the job, which decides what leaves the environment
/// first when it would not fit ([`crate::budget`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// About this task or one role: a few per role.
    Own,
    /// One per task of the job (`PAI_HOST_IP_<role>_<i>`, …).
    PerPeer,
    /// One variable whose value lists every task of a role or of the job.
    List,
}

/// One variable the runtime exports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Variable {
    pub name: String,
    pub value: String,
    pub class: Class,
}

impl Variable {
    pub fn new(name: impl Into<String>, value: impl Into<String>, class: Class) -> Self {
        Self {
            name: name.into(),
            value: value.into(),
            class,
        }
    }
}

/// Every dynamic variable for task `me`, in a stable order: this task's own, the
/// variables of the peer table, then every role's family.
pub fn dynamic_env(peers: &PeerTable, me: &Me) -> Result<Vec<Variable>, DynamicEnvError> {
    let mut env = own_head(peers, me)?;
    env.extend(peer_vars(peers));
    env.extend(role_env(peers));
    Ok(env)
}

/// Of [`dynamic_env`], the variables of this task alone ([`Class::Own`]), in the same
/// order; the rest ([`peer_vars`]) is the same in every task of the attempt.
pub fn own_env(peers: &PeerTable, me: &Me) -> Result<Vec<Variable>, DynamicEnvError> {
    let mut env = own_head(peers, me)?;
    env.extend(role_env(peers));
    Ok(env)
}

/// This task's index, address and ports.
fn own_head(peers: &PeerTable, me: &Me) -> Result<Vec<Variable>, DynamicEnvError> {
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
    let own_var = |name: &str, value: String| Variable::new(name, value, Class::Own);
    let mut env = vec![
        own_var(
            names::CURRENT_TASK_ROLE_CURRENT_TASK_INDEX,
            me.index.to_string(),
        ),
        own_var(names::TASK_ROLE_INDEX, role_index.to_string()),
    ];
    // This task's address and index under the names OpenPAI's runtime also gave them.
    let ip = mine.ip.to_string();
    env.extend([
        own_var(names::CURRENT_CONTAINER_IP, ip.clone()),
        own_var(names::CONTAINER_HOST_IP, ip),
        own_var(names::TASK_INDEX, me.index.to_string()),
    ]);
    if let Some(http) = mine.ports.first(HTTP_LABEL) {
        env.push(own_var(names::CONTAINER_HOST_PORT, http.to_string()));
    }
    // This task's own ports: the same as its template's on Kubernetes; its own on a
    // shared host (the embedded default), where they override the role's.
    let mine = mine.ports;
    env.push(own_var(names::CONTAINER_HOST_PORT_LIST, mine.to_string()));
    for (label, ports) in mine.iter() {
        env.push(own_var(
            &names::container_host_label_port_list(label),
            join_ports(ports),
        ));
    }
    for (var, label) in [
        (names::CURRENT_CONTAINER_PORT, HTTP_LABEL),
        (names::CONTAINER_SSH_PORT, pai_contract::ports::SSH_LABEL),
    ] {
        if let Some(port) = mine.first(label) {
            env.push(own_var(var, port.to_string()));
        }
    }
    Ok(env)
}

/// The peer table's variables: one family per task ([`Class::PerPeer`]) and every role's
/// host lists ([`Class::List`]). The same in every task of the attempt: a function of the
/// table alone.
pub fn peer_vars(peers: &PeerTable) -> Vec<Variable> {
    let mut env = Vec::new();
    for (role_index, role) in peers.roles.iter().enumerate() {
        let name = role.name.as_str();
        let mut hosts = String::new();
        for task in role.tasks() {
            let peer = |n: String, v: String| Variable::new(n, v, Class::PerPeer);
            env.push(peer(names::host_ip(name, task.index), task.ip.to_string()));
            for (label, ports) in task.ports.iter() {
                env.push(peer(
                    names::port_list(name, task.index, label),
                    join_ports(ports),
                ));
                if let Some(first) = ports.first() {
                    env.push(peer(
                        names::task_port(name, task.index, label),
                        first.to_string(),
                    ));
                }
            }
            if !hosts.is_empty() {
                hosts.push(',');
            }
            hosts.push_str(&task.ip.to_string());
            hosts.push(':');
            if let Some(http) = task.ports.first(HTTP_LABEL) {
                hosts.push_str(&http.to_string());
            }
        }
        // OpenPAI's first runtime named the list by the role's place in the spec; a
        // role named like a place keeps the name.
        let by_index = names::task_role_host_list_by_index(role_index);
        if !peers
            .roles
            .iter()
            .any(|r| names::task_role_host_list(&r.name) == by_index)
        {
            env.push(Variable::new(by_index, hosts.clone(), Class::List));
        }
        env.push(Variable::new(
            names::task_role_host_list(name),
            hosts,
            Class::List,
        ));
    }
    env
}

/// Every role's own variables from the table (the same in every task, a few per role).
fn role_env(peers: &PeerTable) -> impl Iterator<Item = Variable> + '_ {
    peers.roles.iter().flat_map(|role| {
        role.env
            .iter()
            .map(|(k, v)| Variable::new(k.clone(), v.clone(), Class::Own))
    })
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
    fn a_task_own_variables_and_its_peers_are_all_of_them() {
        let table = table();
        let me = Me {
            kube_role: "ps".into(),
            index: 1,
        };
        let all = dynamic_env(&table, &me).expect("env");
        let own = own_env(&table, &me).expect("own");
        let peers = peer_vars(&table);
        assert!(own.iter().all(|v| v.class == Class::Own));
        assert!(peers.iter().all(|v| v.class != Class::Own));
        let in_order = |class_own: bool| -> Vec<&Variable> {
            all.iter()
                .filter(|v| (v.class == Class::Own) == class_own)
                .collect()
        };
        assert_eq!(in_order(true), own.iter().collect::<Vec<_>>());
        assert_eq!(in_order(false), peers.iter().collect::<Vec<_>>());
        // The peers' variables are the table's alone: another task's are the same.
        let other = Me {
            kube_role: "workera".into(),
            index: 0,
        };
        assert_ne!(own_env(&table, &other).expect("own"), own);
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
        let get = |n: &str| env.iter().find(|v| v.name == n).map(|v| v.value.as_str());
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
        let names: std::collections::HashSet<&String> = env.iter().map(|v| &v.name).collect();
        assert_eq!(names.len(), env.len(), "no variable twice");
        // What the daemons get of it: this task's variables, nothing that grows with the
        // job.
        let own: Vec<&str> = env
            .iter()
            .filter(|v| names::is_task_own(&v.name))
            .map(|v| v.name.as_str())
            .collect();
        assert!(own.contains(&"PAI_CONTAINER_SSH_PORT"), "{own:?}");
        assert!(own.contains(&"PAI_CONTAINER_HOST_ssh_PORT_LIST"), "{own:?}");
        assert!(own.contains(&"PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"));
        for name in [
            "PAI_CURRENT_CONTAINER_IP",
            "PAI_CONTAINER_HOST_IP",
            "PAI_TASK_INDEX",
            "PAI_CONTAINER_HOST_PORT",
        ] {
            assert!(own.contains(&name), "{name} in {own:?}");
        }
        for v in &env {
            if v.class != Class::Own {
                assert!(
                    !names::is_task_own(&v.name),
                    "{} grows with the job",
                    v.name
                );
            }
        }
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
