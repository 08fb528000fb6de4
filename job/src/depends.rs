//! Jobs that wait for jobs: a spec's `dependsOn` names jobs of the same user that must
//! reach a state first. The Framework carries what it waits for and how that ended, in
//! annotations, so that every server (a restart, a replica) and the embedded default read
//! the same: [`ANNOTATION`] lists the dependencies (each pinned to the UID its job had
//! at submission, so a job deleted and submitted again under the name is not it),
//! [`RELEASED`] says when they were all met, [`FAILED`] why one never will be.
//!
//! On a cluster the job's pods are held by a scheduling gate ([`GATE`], Kubernetes' own
//! way to keep a pod from being scheduled) in every role's pod template until released.

use serde::{Deserialize, Serialize};

use pai_contract::Framework;

/// The dependencies (JSON, [`Dependency`] each).
pub const ANNOTATION: &str = "rest-lite.openpai.io/depends-on";
/// When every dependency was met (RFC 3339): the job runs from then on.
pub const RELEASED: &str = "rest-lite.openpai.io/dependencies-met";
/// Why a dependency can no longer be met: the job was stopped and ended FAILED.
pub const FAILED: &str = "rest-lite.openpai.io/dependency-failed";
/// The pods' scheduling gate while the dependencies are not met.
pub const GATE: &str = "rest-lite.openpai.io/depends-on";
/// The most dependencies a job may name.
pub const MAX: usize = 16;

/// The state a dependency must reach.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Wanted {
    /// Succeeded.
    Succeeded,
    /// Failed.
    Failed,
    /// Stopped.
    Stopped,
}

impl Wanted {
    /// Its name, as the spec and the job state say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Wanted::Succeeded => "SUCCEEDED",
            Wanted::Failed => "FAILED",
            Wanted::Stopped => "STOPPED",
        }
    }

    /// The state named `text` (upper case).
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "SUCCEEDED" => Some(Wanted::Succeeded),
            "FAILED" => Some(Wanted::Failed),
            "STOPPED" => Some(Wanted::Stopped),
            _ => None,
        }
    }
}

/// One dependency.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Dependency {
    /// The job's name (of the same user).
    pub job: String,
    /// The state it must reach.
    pub state: Wanted,
    /// The UID of its Framework when this job was submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

fn annotation<'a>(framework: &'a Framework, key: &str) -> Option<&'a str> {
    framework
        .metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// What `framework` waits for (none when it names nothing).
pub fn of(framework: &Framework) -> Vec<Dependency> {
    annotation(framework, ANNOTATION)
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

/// Whether it names jobs it waits for (met or not).
pub fn waits(framework: &Framework) -> bool {
    annotation(framework, ANNOTATION).is_some()
}

/// Why its dependencies failed it, if they did.
pub fn failed(framework: &Framework) -> Option<&str> {
    annotation(framework, FAILED)
}

/// Whether it is held: it names dependencies, not yet all met, none failed.
pub fn holds(framework: &Framework) -> bool {
    annotation(framework, ANNOTATION).is_some()
        && annotation(framework, RELEASED).is_none()
        && annotation(framework, FAILED).is_none()
}

/// Whether it was released (every dependency was met).
pub fn released(framework: &Framework) -> bool {
    annotation(framework, RELEASED).is_some()
}
