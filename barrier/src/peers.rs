//! The peer table: every task of one Framework attempt with its address and ports, and
//! each role's variable family; all the runtime needs to write a task's dynamic
//! environment. The same JSON is `peers.json` in every task's runtime root and the
//! published object of the attempt ([`crate::published`]), so it is kept compact: ports
//! once per role (tasks of a role share them on a cluster), addresses as a list by index.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use pai_contract::PortPlan;

/// Every role of the job, in spec order, with every task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PeerTable {
    /// Name of the Framework.
    pub framework: String,
    /// The Framework attempt these addresses belong to.
    pub attempt: i32,
    /// FrameworkController's instance UID of that attempt (`<attempt>_<configmap uid>`),
    /// which tells two attempts with one id apart (a Framework deleted and made again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_instance_uid: Option<String>,
    pub roles: Vec<RolePeers>,
    /// The attempt's tasks start their commands no earlier than this (RFC 3339): the
    /// restart back-off of a job whose previous attempt ended quickly
    /// (the restart policy in `pai-job`), which the runtime waits out after the barrier. On a
    /// cluster FrameworkController starts the next attempt at once; the server, which
    /// knows the attempts' history, says when it may begin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<String>,
}

/// One role's tasks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolePeers {
    /// The role's name as the user wrote it (the one in `PAI_*` variable names).
    pub name: String,
    /// The role's name in the Framework (normalised for Kubernetes).
    pub kube_name: String,
    /// The role's variable family (task count, completion counts, resources) as its
    /// template states it; every task exports every role's family.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Every task's ports, unless `taskPorts` gives each task its own.
    pub ports: PortPlan,
    /// Each task's own ports, by index (tasks sharing one host); empty when every task
    /// has `ports`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub task_ports: Vec<PortPlan>,
    /// Each task's address, by index (read without an allocation per task: a table of
    /// thousands of tasks is read by thousands of tasks at once).
    pub addresses: Vec<IpAddr>,
}

/// One task, as read from its role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer<'a> {
    pub index: u32,
    /// The address peers reach the task at.
    pub ip: IpAddr,
    /// The task's ports by label.
    pub ports: &'a PortPlan,
}

impl PeerTable {
    /// The role the user calls `name`.
    pub fn role(&self, name: &str) -> Option<&RolePeers> {
        self.roles.iter().find(|r| r.name == name)
    }

    /// Index of role `name` in spec order.
    pub fn role_index(&self, name: &str) -> Option<usize> {
        self.roles.iter().position(|r| r.name == name)
    }

    /// How many tasks the table holds.
    pub fn task_count(&self) -> usize {
        self.roles.iter().map(|r| r.addresses.len()).sum()
    }
}

impl RolePeers {
    /// How many tasks the role has.
    pub fn len(&self) -> usize {
        self.addresses.len()
    }

    /// True for a role without tasks.
    pub fn is_empty(&self) -> bool {
        self.addresses.is_empty()
    }

    /// Task `index`, when the role has it.
    pub fn task(&self, index: u32) -> Option<Peer<'_>> {
        let i = usize::try_from(index).ok()?;
        let ip = *self.addresses.get(i)?;
        let ports = self.task_ports.get(i).unwrap_or(&self.ports);
        Some(Peer { index, ip, ports })
    }

    /// Every task, by index.
    pub fn tasks(&self) -> impl Iterator<Item = Peer<'_>> {
        (0..self.addresses.len()).filter_map(|i| self.task(u32::try_from(i).ok()?))
    }
}
