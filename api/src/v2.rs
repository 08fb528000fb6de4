//! The answers of OpenPAI's v2 REST API in the shapes of its official SDK's models
//! (`@microsoft/openpai-js-sdk`, `src/api/v2/swagger.yaml`): the job list's summaries,
//! a task's attempts and its log locations. A job's detail is the v1 [`JobView`]
//! (OpenPAI's v2 `JobDetail` has the same shape).
//!
//! [`JobView`]: crate::status::JobView

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::jobs::JobSummary;
use crate::status::{JobState, TaskView};

/// One job of `GET /api/v2/jobs`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobSummaryV2 {
    pub name: String,
    pub username: String,
    pub state: JobState,
    /// The Framework's own state, e.g. `AttemptRunning`.
    pub sub_state: String,
    /// `START` or `STOP`.
    #[schema(value_type = String)]
    pub execution_type: crate::jobs::Execution,
    pub retries: i32,
    /// When it was submitted (epoch ms).
    pub submission_time: Option<i64>,
    pub created_time: Option<i64>,
    pub completed_time: Option<i64>,
    pub app_exit_code: Option<i32>,
    pub virtual_cluster: String,
    pub total_gpu_number: u32,
    pub total_task_number: u32,
    pub total_task_role_number: usize,
    /// `1` or `2`: the protocol its spec was written in.
    pub protocol_version: String,
    /// Its tags, in the order added.
    pub tags: Vec<String>,
    /// Its priority class (`prod`, `test`, `oppo`); null: none.
    pub job_priority: Option<String>,
}

impl From<&JobSummary> for JobSummaryV2 {
    fn from(job: &JobSummary) -> Self {
        Self::from_status(&job.name, &job.status)
    }
}

impl JobSummaryV2 {
    /// The summary of a job's view.
    pub fn of(view: &crate::status::JobView) -> Self {
        Self::from_status(&view.name, &view.job_status)
    }

    /// The summary of a job's list row.
    pub fn of_summary(row: &crate::jobs::JobSummary) -> Self {
        Self::from_status(&row.name, &row.status)
    }

    fn from_status(name: &str, s: &crate::status::JobStatus) -> Self {
        Self {
            name: name.to_string(),
            username: s.username.clone(),
            state: s.state,
            sub_state: s.sub_state.clone(),
            execution_type: s.execution_type,
            retries: s.retries,
            submission_time: s.created_time,
            created_time: s.created_time,
            completed_time: s.completed_time,
            app_exit_code: s.app_exit_code,
            virtual_cluster: s.virtual_cluster.clone(),
            total_gpu_number: s.total_gpu_number,
            total_task_number: s.total_task_number,
            total_task_role_number: s.total_task_role_number,
            protocol_version: s.protocol_version.clone(),
            tags: s.tags.clone(),
            job_priority: s.job_priority.clone(),
        }
    }
}

/// `GET /api/v2/jobs`: a list, or with `withTotalCount=true` the count and a page.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum JobListV2 {
    /// The jobs.
    List(Vec<JobSummaryV2>),
    /// `withTotalCount=true`.
    WithTotalCount(JobSummariesWithTotalCount),
}

/// `GET /api/v2/jobs?withTotalCount=true`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobSummariesWithTotalCount {
    /// Jobs matching the filters, before `offset` and `limit`.
    pub total_count: usize,
    pub data: Vec<JobSummaryV2>,
}

/// `GET …/taskRoles/{role}/taskIndex/{index}/attempts`: a task and its attempts (the
/// current one: earlier attempts' tasks are not kept).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatusV2 {
    pub task_index: u32,
    pub task_role_name: String,
    pub task_state: JobState,
    pub retries: i32,
    pub username: String,
    pub job_name: String,
    pub job_attempt_id: i32,
    pub attempts: Vec<TaskAttemptV2>,
}

/// One attempt of a task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskAttemptV2 {
    pub attempt_id: i32,
    pub attempt_state: JobState,
    /// The pod's UID.
    pub container_id: Option<String>,
    pub container_ip: Option<String>,
    /// Label → comma-separated ports.
    pub container_ports: BTreeMap<String, String>,
    pub container_gpus: u64,
    /// Where its log is served.
    pub container_log: String,
    pub container_exit_code: Option<i32>,
    /// What the exit code means.
    pub container_exit_diagnostics: Option<String>,
}

impl TaskStatusV2 {
    /// Task `task` of role `role` in attempt `attempt` of `user`'s job `job`.
    pub fn of(
        task: &TaskView,
        role: &str,
        user: &str,
        job: &str,
        attempt: i32,
        retries: i32,
    ) -> Self {
        Self {
            task_index: task.task_index,
            task_role_name: role.to_string(),
            task_state: task.task_state,
            retries,
            username: user.to_string(),
            job_name: job.to_string(),
            job_attempt_id: attempt,
            attempts: vec![TaskAttemptV2 {
                attempt_id: task.retries,
                attempt_state: task.task_state,
                container_id: task.container_id.clone(),
                container_ip: task.container_ip.clone(),
                container_ports: (*task.container_ports).clone(),
                container_gpus: task.container_gpus,
                container_log: task.container_log.clone(),
                container_exit_code: task.container_exit_code,
                container_exit_diagnostics: task.container_exit_meaning.clone(),
            }],
        }
    }
}

/// `GET …/attempts/{taskAttemptId}/logs`: where the task's log is read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PodLogInfo {
    pub locations: Vec<LogLocation>,
}

/// One log of a task: `all` (the user command's output, with the runtime's warnings and
/// errors) or `runtime` (the runtime's own lines).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LogLocation {
    pub name: String,
    /// An absolute URL on this server; the same bearer token reads it.
    pub uri: String,
}
