//! Whether a job that waits for other jobs ([`pai_contract::depends`]) may run, must go
//! on waiting (and why, in words), or never will: one pure function of its Framework and
//! the Frameworks of its dependencies, used by the server on a cluster and on this
//! machine alike.

use pai_contract::Framework;
use pai_contract::depends::{self, Dependency};

use crate::status::{JobState, job_state};
use crate::waiting::Waiting;

/// What a held job's dependencies say.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Every dependency reached its state: the job runs.
    Met,
    /// Not yet: why, as the job's `waiting`.
    Waiting(Waiting),
    /// One never will: the job ends FAILED, saying why.
    Failed(String),
}

/// The reason a job waits for its dependencies.
pub const REASON: &str = "Dependencies";

/// What a dependency's job is now: its state and its Framework's UID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub state: JobState,
    pub uid: Option<String>,
}

impl Seen {
    /// What `framework` is now.
    pub fn of(framework: &Framework) -> Self {
        Self {
            state: job_state(framework),
            uid: framework.metadata.uid.clone(),
        }
    }
}

/// The decision for `framework` (held: [`depends::holds`]); `lookup` tells what a job of
/// the same namespace is now, by its Framework's name.
pub fn decide(framework: &Framework, lookup: impl Fn(&str) -> Option<Seen>) -> Decision {
    let user = framework.user_name().unwrap_or_default().to_string();
    let mut waiting = Vec::new();
    for Dependency { job, state, uid } in depends::of(framework) {
        let wanted = state.as_str();
        let name = pai_contract::names::framework_name(&user, &job);
        let found = lookup(&name).filter(|f| uid.is_none() || f.uid.as_deref() == uid.as_deref());
        let Some(Seen { state: now, .. }) = found else {
            return Decision::Failed(format!(
                "job {job}, which this job waited for to be {wanted}, was deleted"
            ));
        };
        if now.is(state) {
            continue;
        }
        if now.is_final() {
            return Decision::Failed(format!(
                "job {job} ended {now}; this job waited for it to be {wanted}"
            ));
        }
        waiting.push(format!("job {job} to be {wanted} (it is {now})"));
    }
    if waiting.is_empty() {
        return Decision::Met;
    }
    Decision::Waiting(Waiting {
        reason: REASON.to_string(),
        message: format!("waits for {}", waiting.join(", ")),
        since: framework
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_millisecond()),
    })
}
