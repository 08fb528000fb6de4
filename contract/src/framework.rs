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
    /// Free text; rest-lite writes `<user>~<job>`.
    pub description: Option<String>,
    #[serde(default)]
    /// Run or stop.
    pub execution_type: ExecutionType,
    #[serde(default)]
    /// How often the whole Framework is retried.
    pub retry_policy: RetryPolicySpec,
    /// The roles, in the spec's order.
    pub task_roles: Vec<TaskRoleSpec>,
}

/// Whether the Framework should run or be stopped.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExecutionType {
    #[default]
    /// Create and run the tasks.
    Start,
    /// Stop: the attempt completes at once, failed (−210).
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
    /// Retry by the completion's type (transient, permanent, conflict) before counting.
    pub fancy_retry_policy: bool,
    #[serde(default)]
    /// Retries of accountable failures (−1: forever, −2: always).
    pub max_retry_count: i32,
}

/// One role of the Framework: `task_number` identical pods.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TaskRoleSpec {
    /// The task-role name (`^[a-z0-9]{1,63}$`).
    pub name: String,
    /// How many identical tasks.
    pub task_number: i32,
    #[serde(default)]
    /// When this role completes the attempt.
    pub framework_attempt_completion_policy: CompletionPolicySpec,
    /// Each task's pod and retry policy.
    pub task: TaskSpec,
}

/// When a role completes the whole attempt. `-1` (or `0`) disables a count.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CompletionPolicySpec {
    /// Failed tasks that fail the attempt (−1: disabled).
    pub min_failed_task_count: i32,
    /// Succeeded tasks that succeed the attempt (−1: disabled).
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
    /// How often one task is retried (rest-lite: never; the whole attempt is).
    pub retry_policy: RetryPolicySpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Seconds to wait for a graceful pod deletion before forcing it.
    pub pod_graceful_deletion_timeout_sec: Option<i64>,
    /// The task's pod.
    pub pod: PodTemplateSpec,
}

/// The observed state of a Framework, written by FrameworkController.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FrameworkStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// When the Framework started.
    pub start_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// When its first attempt ran.
    pub run_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// When it completed.
    pub completion_time: Option<String>,
    #[serde(default)]
    /// Where it stands.
    pub state: FrameworkState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// When `state` last changed.
    pub transition_time: Option<String>,
    #[serde(default)]
    /// Retries so far.
    pub retry_policy_status: RetryPolicyStatus,
    #[serde(default)]
    /// The current attempt.
    pub attempt_status: FrameworkAttemptStatus,
}

/// States shared by Frameworks and tasks.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FrameworkState {
    #[default]
    /// The attempt is to be created.
    AttemptCreationPending,
    /// Its ConfigMap is being created.
    AttemptCreationRequested,
    /// Its tasks are being prepared.
    AttemptPreparing,
    /// Its tasks run.
    AttemptRunning,
    /// It is to be deleted.
    AttemptDeletionPending,
    /// Its deletion is requested.
    AttemptDeletionRequested,
    /// It is being deleted.
    AttemptDeleting,
    /// It completed; a retry may follow.
    AttemptCompleted,
    /// The Framework completed for good.
    Completed,
}

impl FrameworkState {
    /// Whether the attempt's outcome is decided: it is being deleted, or has completed.
    pub fn attempt_ending(self) -> bool {
        matches!(
            self,
            Self::AttemptDeletionPending
                | Self::AttemptDeletionRequested
                | Self::AttemptDeleting
                | Self::AttemptCompleted
                | Self::Completed
        )
    }
}

/// Alias: tasks go through the same states as Frameworks.
pub type TaskState = FrameworkState;

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
/// Retry counters.
pub struct RetryPolicyStatus {
    #[serde(default)]
    /// Every retry.
    pub total_retried_count: i32,
    #[serde(default)]
    /// Retries that count against `maxRetryCount`.
    pub accountable_retried_count: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Seconds before the next retry, when one is delayed.
    pub retry_delay_sec: Option<i64>,
}

/// The label FrameworkController puts on every pod it makes: the Framework's name.
pub const LABEL_FRAMEWORK_NAME: &str = "FC_FRAMEWORK_NAME";

/// The ConfigMap FrameworkController makes for a Framework's attempts:
/// `<framework>-attempt` (its name never changes between attempts).
pub fn attempt_config_map(framework: &str) -> String {
    format!("{framework}-attempt")
}

/// An attempt's instance UID as FrameworkController writes it: `<attempt id>_<uid>`,
/// the uid being the attempt ConfigMap's (a Framework attempt) or the pod's (a task
/// attempt).
pub fn instance_uid(attempt: impl std::fmt::Display, uid: &str) -> String {
    format!("{attempt}_{uid}")
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
/// The current attempt of a Framework.
pub struct FrameworkAttemptStatus {
    #[serde(default)]
    /// The attempt's number, from 0.
    pub id: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// When it started.
    pub start_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// When its tasks ran.
    pub run_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// When it completed.
    pub completion_time: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "instanceUID",
        alias = "instanceUid"
    )]
    /// The attempt's instance UID.
    pub instance_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Its ConfigMap.
    pub config_map_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// How it completed.
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
/// How an attempt or a task completed.
pub struct CompletionStatus {
    #[serde(default)]
    /// The completion code (see [`crate::exit`]).
    pub code: i32,
    #[serde(default)]
    /// The code's phrase.
    pub phrase: String,
    #[serde(default, rename = "type")]
    /// Succeeded or failed, with attributes.
    pub kind: CompletionType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// What happened, for people.
    pub diagnostics: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The task whose completion completed the attempt.
    pub trigger: Option<CompletionTrigger>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// A task's pod as it ended (FrameworkController copies each container's
    /// termination state, with its termination message, here).
    pub pod: Option<PodCompletionStatus>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
/// A pod as it ended.
pub struct PodCompletionStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The pod's reason.
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The pod's message.
    pub message: Option<String>,
    #[serde(default)]
    /// Each container as it ended.
    pub containers: Vec<ContainerCompletionStatus>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
/// A container as it ended.
pub struct ContainerCompletionStatus {
    /// The container's name.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Its reason (`Error`, `OOMKilled`, …).
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Its termination message.
    pub message: Option<String>,
    #[serde(default)]
    /// The signal that ended it, if one did.
    pub signal: i32,
    #[serde(default)]
    /// Its exit code.
    pub code: i32,
}

impl CompletionStatus {
    /// The termination message of the main container, where the status has it.
    pub fn main_message(&self) -> Option<&str> {
        self.pod
            .as_ref()?
            .containers
            .iter()
            .find(|c| c.name == MAIN_CONTAINER)?
            .message
            .as_deref()
    }

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
            pod: None,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
/// The type of a completion.
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
/// The task that completed an attempt.
pub struct CompletionTrigger {
    #[serde(default)]
    /// Why.
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Its task-role name.
    pub task_role_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Its index.
    pub task_index: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
/// The tasks of one role in the current attempt.
pub struct TaskRoleStatus {
    /// The task-role name.
    pub name: String,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "instanceUID",
        alias = "instanceUid"
    )]
    /// The role's instance UID.
    pub instance_uid: Option<String>,
    #[serde(default)]
    /// Its tasks.
    pub task_statuses: Vec<TaskStatus>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
/// One task.
pub struct TaskStatus {
    /// Its index in the role.
    pub index: i32,
    #[serde(default)]
    /// Where it stands.
    pub state: TaskState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// When `state` last changed.
    pub transition_time: Option<String>,
    #[serde(default)]
    /// Being deleted: it does not count as ready.
    pub deletion_pending: bool,
    #[serde(default)]
    /// Its retries.
    pub retry_policy_status: RetryPolicyStatus,
    #[serde(default)]
    /// Its current attempt.
    pub attempt_status: TaskAttemptStatus,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
/// One attempt of a task: its pod.
pub struct TaskAttemptStatus {
    #[serde(default)]
    /// The attempt's number.
    pub id: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// When it started.
    pub start_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// When its pod ran.
    pub run_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// When it completed.
    pub completion_time: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "instanceUID",
        alias = "instanceUid"
    )]
    /// The attempt's instance UID.
    pub instance_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Its pod.
    pub pod_name: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "podUID",
        alias = "podUid"
    )]
    /// Its pod's UID.
    pub pod_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The node its pod runs on.
    pub pod_node_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "podIP")]
    /// The pod's address.
    pub pod_ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "podHostIP")]
    /// The node's address.
    pub pod_host_ip: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// How it completed.
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
                "instanceUID": "2_c0ffee",
                "configMapUID": "c0ffee",
                "taskRoleStatuses": [{
                    "name": "ps",
                    "instanceUID": "r1",
                    "taskStatuses": [{
                        "index": 0,
                        "state": "AttemptRunning",
                        "deletionPending": false,
                        "attemptStatus": {"id": 0, "instanceUID": "0_p1", "podUID": "p1",
                            "podIP": "10.0.0.5", "podHostIP": "192.0.2.1"}
                    }]
                }]
            }
        });
        let status: FrameworkStatus = serde_json::from_value(json.clone()).expect("reads");
        assert_eq!(status.state, FrameworkState::AttemptRunning);
        // FrameworkController's own spelling of the UIDs, both ways.
        assert_eq!(
            status.attempt_status.instance_uid.as_deref(),
            Some("2_c0ffee")
        );
        let written = serde_json::to_value(&status).expect("writes");
        assert_eq!(written["attemptStatus"]["instanceUID"], "2_c0ffee");
        assert_eq!(
            written["attemptStatus"]["taskRoleStatuses"][0]["taskStatuses"][0]["attemptStatus"]["podUID"],
            "p1"
        );
        let roles = status.attempt_status.task_role_statuses.expect("roles");
        assert_eq!(roles[0].instance_uid.as_deref(), Some("r1"));
        let task = &roles[0].task_statuses[0];
        assert_eq!(task.attempt_status.instance_uid.as_deref(), Some("0_p1"));
        assert_eq!(task.attempt_status.pod_uid.as_deref(), Some("p1"));
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
