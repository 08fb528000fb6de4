//! The peer table: every task of the job with its addresses and ports, which the runtime
//! turns into environment variables and files.

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
    pub roles: Vec<RolePeers>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolePeers {
    /// The role's name as the user wrote it (the one in `PAI_*` variable names).
    pub name: String,
    /// The role's name in the Framework (normalised for Kubernetes).
    pub kube_name: String,
    /// Tasks by index: `tasks[i].index == i`.
    pub tasks: Vec<Peer>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Peer {
    pub index: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    /// The address peers reach the task at.
    pub ip: String,
    /// The node's address, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_ip: Option<String>,
    /// The task's ports by label.
    pub ports: PortPlan,
}

impl PeerTable {
    pub fn role(&self, name: &str) -> Option<&RolePeers> {
        self.roles.iter().find(|r| r.name == name)
    }

    /// Index of role `name` in spec order.
    pub fn role_index(&self, name: &str) -> Option<usize> {
        self.roles.iter().position(|r| r.name == name)
    }
}
