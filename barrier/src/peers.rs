//! The peer table: every task of the job with its addresses and ports, which the runtime
//! turns into environment variables and files.

use serde::{Deserialize, Serialize};

use pai_contract::framework::{Framework, TaskRoleSpec};
use pai_contract::{PortPlan, env, meta};

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

/// The role's name as the user wrote it: the pod template's annotation, else the
/// Framework's (normalised) name.
pub fn pai_role_name(role: &TaskRoleSpec) -> String {
    role.task
        .pod
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(meta::ANNOTATION_ROLE))
        .cloned()
        .unwrap_or_else(|| role.name.clone())
}

/// The role's ports, from `PAI_CONTAINER_HOST_PORT_LIST` of its first container; empty
/// when the template has none (a Framework not written by rest-lite).
pub fn role_ports(role: &TaskRoleSpec) -> PortPlan {
    role.task
        .pod
        .spec
        .as_ref()
        .and_then(|spec| spec.containers.first())
        .and_then(|c| c.env.as_ref())
        .and_then(|vars| {
            vars.iter()
                .find(|v| v.name == env::CONTAINER_HOST_PORT_LIST)
        })
        .and_then(|v| v.value.as_deref())
        .and_then(|text| text.parse().ok())
        .unwrap_or_default()
}

/// Each task's own ports by role (Framework name) and index, where the Framework says
/// (the embedded default's [`meta::ANNOTATION_TASK_PORTS`]); empty otherwise, and then
/// every task has its role's ports.
pub fn task_ports(framework: &Framework) -> std::collections::HashMap<String, Vec<PortPlan>> {
    framework
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(meta::ANNOTATION_TASK_PORTS))
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

/// The ports of task `index` of `role`: its own when the Framework gives them, else the
/// role's.
pub fn ports_of(
    role: &TaskRoleSpec,
    index: u32,
    own: &std::collections::HashMap<String, Vec<PortPlan>>,
) -> PortPlan {
    own.get(&role.name)
        .and_then(|plans| plans.get(index as usize))
        .cloned()
        .unwrap_or_else(|| role_ports(role))
}

/// The Framework's name, or empty.
pub(crate) fn framework_name(framework: &Framework) -> String {
    framework.metadata.name.clone().unwrap_or_default()
}
