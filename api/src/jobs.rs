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

impl JobSummary {
    /// The row of a job whose Framework nothing holds (a finished one: its Framework
    /// alone says), with its logs' URLs under the job's own.
    pub fn unheld(framework: &pai_contract::Framework) -> Self {
        let name = framework.job_name().unwrap_or(framework.name()).to_string();
        let url = crate::routes::JOB.with(&[framework.user_name().unwrap_or_default(), &name]);
        let view = crate::status::job_view_held(framework, &url, None);
        Self {
            name: view.name,
            status: view.job_status,
        }
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
