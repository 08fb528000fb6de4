//! The readiness rule, one pure function of the Framework (frameworkbarrier's rule):
//! the barrier passes when every task counted from the spec has a pod IP and is not
//! pending deletion.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use pai_contract::env;
use pai_contract::framework::{Framework, TaskRoleSpec, TaskStatus};

use pai_contract::read::StatusError;

use crate::peers::{PeerTable, RolePeers};

/// Where the job stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// Every task has an address.
    Ready(PeerTable),
    /// Some do not yet.
    Waiting(Progress),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    pub ready: u64,
    pub total: u64,
    /// The first task (role, index) without an address.
    pub first_missing: Option<(String, u32)>,
}

impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{} tasks have an address", self.ready, self.total)?;
        if let Some((role, index)) = &self.first_missing {
            write!(f, "; waiting for {role}-{index} among others")?;
        }
        Ok(())
    }
}

/// An address counts when it is an IP address (Kubernetes writes nothing else as a pod
/// IP; an empty one is not there yet) and its task is not being deleted.
fn address(task: &TaskStatus) -> Option<IpAddr> {
    if task.deletion_pending {
        return None;
    }
    task.attempt_status.pod_ip.as_deref()?.parse().ok()
}

/// Applies the rule to `framework`.
pub fn readiness(framework: &Framework) -> Result<Readiness, StatusError> {
    let statuses = framework.task_role_statuses()?;
    let by_role: HashMap<&str, HashMap<i32, &TaskStatus>> = statuses
        .iter()
        .map(|r| {
            let tasks = r.task_statuses.iter().map(|t| (t.index, t)).collect();
            (r.name.as_str(), tasks)
        })
        .collect();
    let no_tasks = HashMap::new();

    let mut progress = Progress {
        ready: 0,
        total: 0,
        first_missing: None,
    };
    let own_ports = framework.task_ports();
    let mut roles = Vec::with_capacity(framework.spec.task_roles.len());
    for role in &framework.spec.task_roles {
        let count = u32::try_from(role.task_number).unwrap_or(0);
        let tasks = by_role.get(role.name.as_str()).unwrap_or(&no_tasks);
        let mut addresses = Vec::with_capacity(count as usize);
        for index in 0..count {
            progress.total += 1;
            let status = i32::try_from(index).ok().and_then(|i| tasks.get(&i));
            match status.and_then(|t| address(t)) {
                Some(ip) => {
                    progress.ready += 1;
                    addresses.push(ip);
                }
                None => {
                    if progress.first_missing.is_none() {
                        progress.first_missing = Some((role.name.clone(), index));
                    }
                }
            }
        }
        let task_ports = if own_ports.role(&role.name).is_empty() {
            Vec::new()
        } else {
            (0..count).map(|i| own_ports.of(role, i)).collect()
        };
        roles.push(RolePeers {
            name: role.pai_name().to_string(),
            kube_name: role.name.clone(),
            env: family(role),
            ports: role.port_plan(),
            task_ports,
            addresses,
        });
    }
    if progress.ready < progress.total {
        return Ok(Readiness::Waiting(progress));
    }
    let attempt = framework.status.as_ref().map(|s| &s.attempt_status);
    Ok(Readiness::Ready(PeerTable {
        framework: framework.name().to_string(),
        attempt: attempt.map_or(0, |a| a.id),
        attempt_instance_uid: attempt.and_then(|a| a.instance_uid.clone()),
        roles,
        not_before: None,
    }))
}

/// The role's variable family ([`env::role_family`]) as its own template states it.
fn family(role: &TaskRoleSpec) -> BTreeMap<String, String> {
    env::role_family(role.pai_name())
        .into_iter()
        .filter_map(|name| {
            let value = env::kubelet_expand(role.template_env(&name)?, |_| None);
            Some((name, value))
        })
        .collect()
}

/// True when [`readiness`] passes; a status that cannot be read is not ready.
pub fn is_ready(framework: &Framework) -> bool {
    matches!(readiness(framework), Ok(Readiness::Ready(_)))
}
