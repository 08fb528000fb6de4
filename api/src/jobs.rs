//! What the job routes answer besides the job view: a list's rows, a 202's message, the
//! execution type a `PUT …/executionType` sets.

use serde::{Deserialize, Serialize};

use crate::status::JobStatus;

pub use crate::status::Execution;

/// One job in a list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobSummary {
    /// The job's name as given.
    pub name: String,
    /// Its status.
    #[serde(flatten)]
    pub status: JobStatus,
}

/// What lists and `/metrics` read of a job: its list row, and how many of its tasks are
/// in each state. Made once for a finished job, and kept where its Framework is not (a
/// cluster's job history, a cold job on this machine).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobRow {
    pub summary: JobSummary,
    /// Its tasks by state (the states with none left out).
    #[serde(default)]
    pub task_states: Vec<(crate::status::JobState, u32)>,
}

impl JobRow {
    /// The row of `view`.
    pub fn of_view(view: &crate::status::JobView) -> Self {
        let mut task_states: Vec<(crate::status::JobState, u32)> = Vec::new();
        for task in view.task_roles.values().flat_map(|r| &r.task_statuses) {
            match task_states.iter_mut().find(|(s, _)| *s == task.task_state) {
                Some((_, n)) => *n += 1,
                None => task_states.push((task.task_state, 1)),
            }
        }
        Self {
            summary: JobSummary {
                name: view.name.clone(),
                status: view.job_status.clone(),
            },
            task_states,
        }
    }

    /// The row of a job whose Framework nothing holds (a finished one: its Framework
    /// alone says), with its logs' URLs under the job's own.
    pub fn unheld(framework: &pai_contract::Framework) -> Self {
        let name = framework.job_name().unwrap_or(framework.name()).to_string();
        let url = crate::routes::JOB.with(&[framework.user_name().unwrap_or_default(), &name]);
        Self::of_view(&crate::status::job_view_held(framework, &url, None))
    }
}

/// `GET /api/v1/whoami`: whom the bearer token stands for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WhoAmI {
    /// The user the token stands for (empty for a server that takes no tokens).
    pub user: String,
    /// Whether it may act on every user's jobs.
    pub admin: bool,
}

/// The body of a 202.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Message {
    /// What was done.
    pub message: String,
    /// What the user should know before the job runs (a submission's only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl Message {
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            warnings: Vec::new(),
        }
    }
}
