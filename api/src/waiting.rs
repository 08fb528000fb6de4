//! Why a job that does not run yet waits: the view's [`Waiting`], and what the Framework
//! alone says of it ([`of_framework`], every backend has it). The readers of what holds a
//! job on a cluster (the gang scheduler's PodGroup, Kueue's Workload, kube-scheduler's
//! verdict on the pods) live with the cluster's backend (`pai_cluster::waiting`); the
//! embedded default's queue says its own words.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use pai_contract::framework::{Framework, FrameworkState};

/// Why a job waits, and since when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Waiting {
    /// One CamelCase word: `Unschedulable`, `Queued`, `Pending`, `Creating`, `Starting`, …
    pub reason: String,
    /// What holds the job, in its own words where it gave some.
    pub message: String,
    /// Since when it waits for this reason (epoch milliseconds), when known.
    pub since: Option<i64>,
    /// When the wait ends by itself (epoch milliseconds): a back-off or a retry delay,
    /// whose time left a reader counts from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<i64>,
}

/// The reasons a Framework's own state gives (see [`of_framework`]): a job on its way,
/// not held by anything.
pub const ON_ITS_WAY: [&str; 3] = ["Submitted", "Creating", "Starting"];

impl Waiting {
    /// Whether something holds the job (a scheduler, a queue, this machine's slots),
    /// rather than the job being on its way (see [`ON_ITS_WAY`]).
    pub fn is_held(&self) -> bool {
        !ON_ITS_WAY.contains(&self.reason.as_str())
    }
}

impl std::fmt::Display for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.reason, self.message)
    }
}

/// Epoch milliseconds of an RFC 3339 time.
pub fn millis(time: Option<&str>) -> Option<i64> {
    time.and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map(|t| t.as_millisecond())
}

/// What the Framework alone says of a job that waits (every backend has it).
pub fn of_framework(framework: &Framework, running: u32, total: u32) -> Waiting {
    let status = framework.status.as_ref();
    let since = millis(status.and_then(|s| s.transition_time.as_deref())).or_else(|| {
        framework
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_millisecond())
    });
    let [submitted, creating, starting] = ON_ITS_WAY;
    if let (Some(status), Some(delay)) = (status, framework.retry_scheduled()) {
        return retry_delay(status, delay);
    }
    let (reason, message) = match status.map(|s| s.state) {
        None => (
            submitted,
            "its controller has not started its first attempt yet".to_string(),
        ),
        Some(FrameworkState::AttemptCreationPending | FrameworkState::AttemptCreationRequested) => {
            (
                creating,
                format!("the {total} tasks of its attempt are being created"),
            )
        }
        Some(_) => (
            starting,
            format!(
                "{running} of {total} tasks run; the others are being placed or started, and every task waits at the barrier until all {total} have an address"
            ),
        ),
    };
    Waiting {
        reason: reason.to_string(),
        message,
        since,
        until: None,
    }
}

/// The reason FrameworkController retries an attempt only after `delay` seconds
/// (conflicts, such as a barrier that timed out, back off): what ended the attempt, and
/// when the next starts.
fn retry_delay(status: &pai_contract::framework::FrameworkStatus, delay: i64) -> Waiting {
    let attempt = &status.attempt_status;
    let ended = attempt
        .completion_time
        .as_deref()
        .or(status.transition_time.as_deref());
    let why = attempt
        .completion_status
        .as_ref()
        .map(|c| {
            // "3 (the user command exited with code 3)" says the number twice.
            let mut why = if pai_contract::exit::meaning_says_code(c.code) {
                pai_contract::exit::meaning(c.code)
            } else {
                format!("{} ({})", c.code, pai_contract::exit::meaning(c.code))
            };
            if let Some(d) = c
                .diagnostics
                .as_deref()
                .map(str::trim)
                .filter(|d| !d.is_empty())
            {
                why.push_str(": ");
                why.push_str(d);
            }
            why
        })
        .unwrap_or_else(|| "it ended".to_string());
    let end = ended
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .and_then(|t| t.checked_add(jiff::SignedDuration::from_secs(delay)).ok());
    let at = end
        .map(|t| format!(" (at {})", t.round(jiff::Unit::Second).unwrap_or(t)))
        .unwrap_or_default();
    let until = end.map(|t| t.as_millisecond());
    // Ended by the user's command (its success or its own code): the restart back-off of a job
    // whose attempts end quickly, as a kubelet's CrashLoopBackOff.
    let backed_off = attempt
        .completion_status
        .as_ref()
        .is_some_and(|c| pai_job::restarts::ended_by_command(c.code));
    if backed_off {
        return Waiting {
            reason: "BackOff".to_string(),
            message: format!(
                "restarting after a back-off of {delay} s{at}: attempt {} ended ({why}); its attempts end quickly, and each restart waits twice as long as the one before, up to the cap, until an attempt runs long enough",
                attempt.id
            ),
            since: millis(ended),
            until,
        };
    }
    Waiting {
        reason: "RetryDelay".to_string(),
        message: format!(
            "attempt {} ended with {why}; attempt {} starts {delay} s after it{at}",
            attempt.id,
            attempt.id + 1
        ),
        since: millis(ended),
        until,
    }
}
