//! `GET …/ssh`: which tasks one can log in to, and why not the others.

use serde::{Deserialize, Serialize};

/// A task whose sshd answers.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SshContainer {
    /// `<role>-<index>`, also the task's alias inside the job.
    pub id: String,
    /// The task's role.
    pub task_role: String,
    /// The task's index in its role.
    pub task_index: u32,
    /// The task's address.
    pub ssh_ip: String,
    /// The task's `ssh` port.
    pub ssh_port: String,
    /// The user to log in as: the one the task runs as.
    pub ssh_user: String,
}

/// A task one cannot log in to now, and why.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SshUnavailable {
    /// `<role>-<index>`.
    pub id: String,
    /// Why, in a sentence.
    pub reason: String,
}

/// The tasks of a job one can log in to, and those one cannot.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SshInfo {
    /// Every task whose sshd answered just now.
    pub containers: Vec<SshContainer>,
    /// Every other task, with the reason.
    #[serde(default)]
    pub unavailable: Vec<SshUnavailable>,
    /// Where the job's private key is served (`GET`), when the job has a key pair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key_url: Option<String>,
    /// The host key every task of the job presents (`ssh-ed25519 …`), when the job has
    /// one: check it (`known_hosts`) rather than trusting whatever answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_key: Option<String>,
}
