//! FrameworkController's `Framework` custom resource
//! (`frameworkcontroller.microsoft.com/v1`, plural `frameworks`, namespaced).
//!
//! One type serves the transformer (which writes the spec), the server (which reads the
//! status) and the barrier (which waits on the status). Status fields are all optional
//! and unknown fields are ignored, so an object written by any controller version reads.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// API group of the Framework resource.
pub const GROUP: &str = "frameworkcontroller.microsoft.com";
/// API version of the Framework resource.
pub const VERSION: &str = "v1";
/// Plural resource name, as it appears in API paths.
pub const PLURAL: &str = "frameworks";

/// The desired state of a Framework, written by rest-lite.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "frameworkcontroller.microsoft.com",
    version = "v1",
    kind = "Framework",
    plural = "frameworks",
    namespaced,
    status = "FrameworkStatus",
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct FrameworkSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default)]
    pub execution_type: ExecutionType,
    #[serde(default)]
    pub retry_policy: RetryPolicySpec,
    pub task_roles: Vec<TaskRoleSpec>,
}

/// Whether the Framework should run or be stopped.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExecutionType {
    #[default]
    Start,
    Stop,
}

/// How often an attempt (of the whole Framework, or of one task) is retried.
///
/// `max_retry_count`: `-1` retries failures forever, `-2` retries always, `n ≥ 0` retries
/// at most `n` accountable failures.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicySpec {
    #[serde(default)]
    pub fancy_retry_policy: bool,
    #[serde(default)]
    pub max_retry_count: i32,
}

/// One role of the Framework: `task_number` identical pods.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TaskRoleSpec {
    pub name: String,
    pub task_number: i32,
    #[serde(default)]
    pub framework_attempt_completion_policy: CompletionPolicySpec,
    pub task: TaskSpec,
}

/// When a role completes the whole attempt. `-1` (or `0`) disables a count.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CompletionPolicySpec {
    pub min_failed_task_count: i32,
    pub min_succeeded_task_count: i32,
}

impl Default for CompletionPolicySpec {
    fn default() -> Self {
        Self {
            min_failed_task_count: 1,
            min_succeeded_task_count: -1,
        }
    }
}

/// The template of every task of a role.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TaskSpec {
    #[serde(default)]
    pub retry_policy: RetryPolicySpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_graceful_deletion_timeout_sec: Option<i64>,
    pub pod: PodTemplateSpec,
}

/// The observed state of a Framework, written by FrameworkController.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FrameworkStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<String>,
    #[serde(default)]
    pub state: FrameworkState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transition_time: Option<String>,
    #[serde(default)]
    pub retry_policy_status: RetryPolicyStatus,
    #[serde(default)]
    pub attempt_status: FrameworkAttemptStatus,
}

/// States shared by Frameworks and tasks.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FrameworkState {
    #[default]
    AttemptCreationPending,
    AttemptCreationRequested,
    AttemptPreparing,
    AttemptRunning,
    AttemptDeletionPending,
    AttemptDeletionRequested,
    AttemptDeleting,
    AttemptCompleted,
    Completed,
}

/// Alias: tasks go through the same states as Frameworks.
pub type TaskState = FrameworkState;

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicyStatus {
    #[serde(default)]
    pub total_retried_count: i32,
    #[serde(default)]
    pub accountable_retried_count: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_delay_sec: Option<i64>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FrameworkAttemptStatus {
    #[serde(default)]
    pub id: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_status: Option<CompletionStatus>,
    /// Absent when the controller stored the statuses compressed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_role_statuses: Option<Vec<TaskRoleStatus>>,
    /// base64 of the gzip of the JSON array `task_role_statuses`, used by the controller
    /// once that JSON reaches 700 KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_role_statuses_compressed: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CompletionStatus {
    #[serde(default)]
    pub code: i32,
    #[serde(default)]
    pub phrase: String,
    #[serde(default, rename = "type")]
    pub kind: CompletionType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<CompletionTrigger>,
}

impl CompletionStatus {
    /// The status the controller writes for `code`: its phrase and type, as classified.
    pub fn of(code: i32, diagnostics: impl Into<String>) -> Self {
        let row = crate::exit::completion(code);
        let kind = row.kind;
        Self {
            code,
            phrase: row.phrase.to_string(),
            kind: CompletionType {
                name: kind.type_name().to_string(),
                attributes: kind.attributes().iter().map(|a| a.to_string()).collect(),
            },
            diagnostics: Some(diagnostics.into()),
            trigger: None,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CompletionType {
    /// `Succeeded` or `Failed`.
    #[serde(default)]
    pub name: String,
    /// `Transient`, `Permanent`, `Conflict`, … as the controller sets them.
    #[serde(default)]
    pub attributes: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CompletionTrigger {
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_role_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_index: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TaskRoleStatus {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_uid: Option<String>,
    #[serde(default)]
    pub task_statuses: Vec<TaskStatus>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    pub index: i32,
    #[serde(default)]
    pub state: TaskState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transition_time: Option<String>,
    #[serde(default)]
    pub deletion_pending: bool,
    #[serde(default)]
    pub retry_policy_status: RetryPolicyStatus,
    #[serde(default)]
    pub attempt_status: TaskAttemptStatus,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TaskAttemptStatus {
    #[serde(default)]
    pub id: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_node_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "podIP")]
    pub pod_ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "podHostIP")]
    pub pod_host_ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_status: Option<CompletionStatus>,
}

/// Name of the init container of every task pod (kube-runtime's `entry`).
pub const INIT_CONTAINER: &str = "kube-runtime";
/// Name of the container that runs the user's command.
pub const MAIN_CONTAINER: &str = "main";
/// Resource name of NVIDIA GPUs (the device plugin's).
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// The pod name FrameworkController gives task `index` of role `role`.
pub fn pod_name(framework: &str, role: &str, index: u32) -> String {
    format!("{framework}-{role}-{index}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_reads_controller_json_with_unknown_fields() {
        let json = serde_json::json!({
            "state": "AttemptRunning",
            "somethingNew": 1,
            "attemptStatus": {
                "id": 2,
                "taskRoleStatuses": [{
                    "name": "ps",
                    "taskStatuses": [{
                        "index": 0,
                        "state": "AttemptRunning",
                        "deletionPending": false,
                        "attemptStatus": {"id": 0, "podIP": "10.0.0.5", "podHostIP": "192.0.2.1"}
                    }]
                }]
            }
        });
        let status: FrameworkStatus = serde_json::from_value(json).expect("reads");
        assert_eq!(status.state, FrameworkState::AttemptRunning);
        let roles = status.attempt_status.task_role_statuses.expect("roles");
        let task = &roles[0].task_statuses[0];
        assert_eq!(task.attempt_status.pod_ip.as_deref(), Some("10.0.0.5"));
        assert_eq!(
            task.attempt_status.pod_host_ip.as_deref(),
            Some("192.0.2.1")
        );
    }

    #[test]
    fn pod_names_follow_the_controller() {
        assert_eq!(
            pod_name("5d41402abc4b2a76b9719d911017c592", "worker", 3),
            "5d41402abc4b2a76b9719d911017c592-worker-3"
        );
    }
}
