//! Kubernetes Events (`events.k8s.io/v1`) on each Framework, for `kubectl describe
//! framework …` and `kubectl get events`: submitted, attempt started, each task that
//! failed (its code and phrase), attempt failed and retried, stop requested, completed,
//! deleted.
//!
//! Derived from the Framework's state in the server's copy ([`crate::store`]), not from
//! the requests one replica happened to serve: what a Framework's status says happened
//! is [`occurrences`] of it, each with the time the status gives. Each occurrence has
//! one Event whose name follows from the Framework's UID and the occurrence, so it is
//! recorded once whoever records it: every replica of the server, and a server that
//! restarted, creates it, and all but the first get 409 and leave it. That is the
//! deduplication kube's recorder does in one process (its series), across processes.
//!
//! Rate-limited as client-go's recorder is: per Framework, a burst of 25, then one more
//! every 5 minutes; what is over is dropped (and counted in the log). An occurrence older
//! than [`MAX_AGE`] is never recorded: the API server has already let such Events
//! expire (`--event-ttl`, 1 h by default), and a late one would mislead.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};

use pai_contract::exit::codes;
use pai_contract::framework::{ExecutionType, FrameworkState};
use pai_contract::{Framework, meta};

use pai_backend::controller::{Outcome, Reconcile};

use crate::store::{Change, KubeStore};

/// The reporting controller, as `kubectl describe` shows it ("From").
pub const CONTROLLER: &str = "rest-lite.openpai.io/server";
/// Occurrences older than this are not recorded (the API server's event TTL is 1 h).
pub const MAX_AGE: Duration = Duration::from_secs(50 * 60);
/// Events per Framework at once, and how often one more is allowed after that.
const BURST: u32 = 25;
const REFILL: Duration = Duration::from_secs(300);
/// The limits of the Events API (its validation).
const NOTE_LIMIT: usize = 1024;

/// Something that happened to a Framework, as an Event says it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Occurrence {
    /// Unique within the Framework: the Event's name is made from it.
    pub key: String,
    pub warning: bool,
    /// CamelCase, as `kubectl describe` shows it.
    pub reason: &'static str,
    /// What was done (the Events API's `action`).
    pub action: &'static str,
    pub note: String,
    /// When it happened (RFC 3339), if the status says; else now.
    pub time: Option<String>,
}

/// What `framework`'s state says happened to it (besides its deletion, which only the
/// watch knows).
pub fn occurrences(framework: &Framework) -> Vec<Occurrence> {
    let mut found = vec![submitted(framework)];
    if framework.spec.execution_type == ExecutionType::Stop {
        found.push(Occurrence {
            key: "stop".into(),
            warning: false,
            reason: "StopRequested",
            action: "Stop",
            note: "the job was asked to stop: its tasks get SIGTERM, then SIGKILL after their grace period".into(),
            time: None,
        });
    }
    let Some(status) = &framework.status else {
        return found;
    };
    let attempt = &status.attempt_status;
    let retried = status.retry_policy_status.total_retried_count;
    if attempt.start_time.is_some() {
        let (reason, action, note) = if attempt.id == 0 {
            ("AttemptStarted", "Start", "attempt 0 started".to_string())
        } else {
            (
                "Retried",
                "Retry",
                format!("attempt {} started (retry {retried})", attempt.id),
            )
        };
        found.push(Occurrence {
            key: format!("attempt-{}", attempt.id),
            warning: false,
            reason,
            action,
            note,
            time: attempt.start_time.clone(),
        });
    }
    task_failures(framework, attempt.id, &mut found);
    attempt_end(framework, &mut found);
    found
}

fn submitted(framework: &Framework) -> Occurrence {
    Occurrence {
        key: "submitted".into(),
        warning: false,
        reason: "Submitted",
        action: "Submit",
        note: format!(
            "job {} of user {} submitted",
            framework.job_name().unwrap_or("?"),
            framework.user_name().unwrap_or("?")
        ),
        time: framework
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string()),
    }
}

/// Each task of attempt `attempt` that failed (not stopped by the platform or the user).
fn task_failures(framework: &Framework, attempt: i32, found: &mut Vec<Occurrence>) {
    for role in framework.task_role_statuses().unwrap_or_default().iter() {
        for task in &role.task_statuses {
            let Some(done) = &task.attempt_status.completion_status else {
                continue;
            };
            // Succeeded, or stopped by the platform because the attempt ended or the
            // user stopped it: not a failure of the task.
            if done.code == codes::SUCCEEDED
                || pai_contract::exit::completion(done.code).never_retried()
            {
                continue;
            }
            found.push(Occurrence {
                key: format!("attempt-{}.{}-{}.failed", attempt, role.name, task.index),
                warning: true,
                reason: "TaskFailed",
                action: "Run",
                note: format!(
                    "task {}-{} of attempt {} failed: {} ({}){}",
                    role.name,
                    task.index,
                    attempt,
                    done.code,
                    done.phrase,
                    diagnostics(done.diagnostics.as_deref())
                ),
                time: task.attempt_status.completion_time.clone(),
            });
        }
    }
}

/// How the current attempt ended, and the retry it scheduled.
// Long: one match over how an attempt ends (succeeded, stopped, failed; final or retried),
// each arm a few lines.
fn attempt_end(framework: &Framework, found: &mut Vec<Occurrence>) {
    let Some(status) = &framework.status else {
        return;
    };
    let attempt = &status.attempt_status;
    if let Some(done) = &attempt.completion_status {
        let final_ = status.state == FrameworkState::Completed;
        let succeeded = done.code == codes::SUCCEEDED;
        let (key, reason, action, note) = match (final_, succeeded) {
            (true, true) => (
                "completed".to_string(),
                "Succeeded",
                "Complete",
                format!("the job succeeded in attempt {}", attempt.id),
            ),
            (true, false) if done.code == codes::STOP_FRAMEWORK_REQUESTED => (
                "completed".to_string(),
                "Stopped",
                "Complete",
                format!("the job stopped as asked, in attempt {}", attempt.id),
            ),
            (true, false) => (
                "completed".to_string(),
                "Failed",
                "Complete",
                format!(
                    "the job failed in attempt {}: {} ({}){}",
                    attempt.id,
                    done.code,
                    done.phrase,
                    diagnostics(done.diagnostics.as_deref())
                ),
            ),
            // FrameworkController passes every attempt, the last too, through its
            // deletion and `AttemptCompleted` before it decides: an attempt stopped by the
            // user is told once the job is Completed, a succeeded one is no failure, and
            // a retry is said only once it is scheduled (below).
            (false, _)
                if pai_contract::exit::stopped_by_user(
                    framework.spec.execution_type == ExecutionType::Stop,
                    Some(done.code),
                ) =>
            {
                return;
            }
            (false, true) => (
                format!("attempt-{}.completed", attempt.id),
                "AttemptSucceeded",
                "Complete",
                format!("attempt {} succeeded", attempt.id),
            ),
            (false, false) => (
                format!("attempt-{}.completed", attempt.id),
                "AttemptFailed",
                "Complete",
                format!(
                    "attempt {} failed: {} ({}){}",
                    attempt.id,
                    done.code,
                    done.phrase,
                    diagnostics(done.diagnostics.as_deref())
                ),
            ),
        };
        if !final_ && let Some(delay) = framework.retry_scheduled() {
            found.push(Occurrence {
                key: format!("attempt-{}.retry", attempt.id),
                warning: false,
                reason: "RetryScheduled",
                action: "Retry",
                note: format!(
                    "attempt {} will start {delay} s after attempt {} ended",
                    attempt.id + 1,
                    attempt.id
                ),
                time: status.transition_time.clone(),
            });
        }
        found.push(Occurrence {
            key,
            warning: !succeeded && done.code != codes::STOP_FRAMEWORK_REQUESTED,
            reason,
            action,
            note,
            time: attempt
                .completion_time
                .clone()
                .or_else(|| status.completion_time.clone()),
        });
    }
}

/// The Framework was deleted (only the watch knows).
pub fn deleted() -> Occurrence {
    Occurrence {
        key: "deleted".into(),
        warning: false,
        reason: "Deleted",
        action: "Delete",
        note: "the job was deleted, and its tasks with it".into(),
        time: None,
    }
}

fn diagnostics(text: Option<&str>) -> String {
    match text.map(str::trim).filter(|t| !t.is_empty()) {
        Some(text) => format!(": {text}"),
        None => String::new(),
    }
}

/// The Event of `occurrence` on `framework`.
pub fn event(framework: &Framework, occurrence: &Occurrence, instance: &str) -> Event {
    let now = jiff::Timestamp::now();
    let at = occurrence
        .time
        .as_deref()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .unwrap_or(now);
    let mut note = occurrence.note.clone();
    if note.len() > NOTE_LIMIT {
        let mut end = NOTE_LIMIT - 3;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str("...");
    }
    Event {
        metadata: ObjectMeta {
            name: Some(event_name(framework, &occurrence.key)),
            namespace: framework.metadata.namespace.clone(),
            labels: Some(
                [(
                    meta::LABEL_MANAGED_BY.to_string(),
                    meta::MANAGED_BY.to_string(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(at)),
        reporting_controller: Some(CONTROLLER.to_string()),
        reporting_instance: Some(instance.chars().take(128).collect()),
        action: Some(occurrence.action.to_string()),
        reason: Some(occurrence.reason.to_string()),
        note: Some(note),
        type_: Some(
            if occurrence.warning {
                "Warning"
            } else {
                "Normal"
            }
            .to_string(),
        ),
        regarding: Some(reference(framework)),
        ..Event::default()
    }
}

fn reference(framework: &Framework) -> ObjectReference {
    ObjectReference {
        api_version: Some(Framework::api_version(&()).to_string()),
        kind: Some(Framework::kind(&()).to_string()),
        name: framework.metadata.name.clone(),
        namespace: framework.metadata.namespace.clone(),
        uid: framework.metadata.uid.clone(),
        resource_version: None,
        field_path: None,
    }
}

/// `<framework>.<digest of its UID and the occurrence>`: the same for every replica.
fn event_name(framework: &Framework, key: &str) -> String {
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!(
            "{}\n{key}",
            framework.metadata.uid.as_deref().unwrap_or_default()
        )
        .as_bytes(),
    );
    let hex: String = digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{}.{hex}", framework.name_any())
}

/// Per Framework: tokens left and when the last was refilled.
struct Bucket {
    tokens: u32,
    refilled: Instant,
}

/// Records the Events of the Frameworks in a copy, as they change.
pub struct Recorder {
    events: Api<Event>,
    instance: String,
    /// Names of Events known to exist.
    recorded: HashSet<String>,
    buckets: HashMap<String, Bucket>,
    dropped: u64,
    max_age: Duration,
}

impl Recorder {
    /// `instance`: this replica (its pod's name), as `reportingInstance`.
    pub fn new(client: Client, namespace: &str, instance: &str) -> Self {
        Self {
            events: Api::namespaced(client, namespace),
            instance: instance.to_string(),
            recorded: HashSet::new(),
            buckets: HashMap::new(),
            dropped: 0,
            max_age: MAX_AGE,
        }
    }

    /// Occurrences older than `max_age` are not recorded (default [`MAX_AGE`]).
    pub fn with_max_age(mut self, max_age: Duration) -> Self {
        self.max_age = max_age;
        self
    }

    /// Runs while `store` is kept.
    pub async fn run(self, store: KubeStore) {
        let recording = Recording {
            recorder: self,
            store: store.clone(),
            listed: false,
        };
        store.control(recording).await;
    }

    /// What is recorded already (by another replica, or before a restart): one list.
    async fn list_recorded(&mut self) {
        let selector = meta::managed_by_selector();
        match self
            .events
            .list(&ListParams::default().labels(&selector))
            .await
        {
            Ok(list) => self
                .recorded
                .extend(list.items.iter().map(|e| e.name_any())),
            Err(error) => {
                tracing::debug!(%error, "cannot list the Events recorded; a 409 will say so")
            }
        }
    }

    async fn observe(&mut self, framework: &Framework) {
        for occurrence in occurrences(framework) {
            self.record(framework, &occurrence).await;
        }
    }

    async fn record(&mut self, framework: &Framework, occurrence: &Occurrence) {
        // Every change of a Framework names all its occurrences again: most are
        // recorded already, and cost a digest, not an Event.
        let name = event_name(framework, &occurrence.key);
        if self.recorded.contains(&name) {
            return;
        }
        let event = event(framework, occurrence, &self.instance);
        let old = event.event_time.as_ref().is_some_and(|t| {
            jiff::Timestamp::now().duration_since(t.0)
                > jiff::SignedDuration::try_from(self.max_age).unwrap_or(jiff::SignedDuration::MAX)
        });
        if old {
            self.recorded.insert(name);
            return;
        }
        if !self.allow(framework.name()) {
            self.dropped += 1;
            tracing::debug!(framework = %framework.name(), reason = occurrence.reason, dropped = self.dropped, "event over the rate limit; dropped");
            return;
        }
        match self.events.create(&PostParams::default(), &event).await {
            Ok(_) => {
                self.recorded.insert(name);
            }
            // Recorded by another replica, or before a restart.
            Err(kube::Error::Api(status)) if status.code == 409 => {
                self.recorded.insert(name);
            }
            Err(error) => {
                tracing::debug!(framework = %framework.name(), reason = occurrence.reason, %error, "cannot record an event");
            }
        }
    }

    fn allow(&mut self, framework: &str) -> bool {
        let bucket = self.buckets.entry(framework.to_string()).or_insert(Bucket {
            tokens: BURST,
            refilled: Instant::now(),
        });
        let earned = (bucket.refilled.elapsed().as_secs() / REFILL.as_secs()) as u32;
        if earned > 0 {
            bucket.tokens = (bucket.tokens + earned).min(BURST);
            bucket.refilled = Instant::now();
        }
        if bucket.tokens == 0 {
            return false;
        }
        bucket.tokens -= 1;
        true
    }
}

/// The recorder at work: a reconcile function on the controller runtime. Events are
/// best effort: one that cannot be recorded is not tried again.
struct Recording {
    recorder: Recorder,
    store: KubeStore,
    /// Whether the Events recorded already were listed.
    listed: bool,
}

impl Reconcile for Recording {
    type Change = Change;

    fn key(change: &Change) -> String {
        change.framework().name_any()
    }

    async fn all(&mut self) -> Vec<Change> {
        if !std::mem::replace(&mut self.listed, true) {
            self.recorder.list_recorded().await;
        }
        self.store.all_changes()
    }

    async fn reconcile(&mut self, change: Change) -> Outcome<Change> {
        match change {
            Change::Applied(framework) => self.recorder.observe(&framework).await,
            Change::Deleted(framework) => {
                self.recorder.record(&framework, &deleted()).await;
                // Nothing more happens to it: what is kept for it goes.
                self.recorder.buckets.remove(framework.name());
                let prefix = format!("{}.", framework.name());
                self.recorder
                    .recorded
                    .retain(|name| !name.starts_with(&prefix));
            }
        }
        Outcome::Done
    }
}

/// The name `kubectl` and the recorder use for this replica: the pod's name where the
/// deployment gives it (`POD_NAME`), else the host's.
pub fn instance_name() -> String {
    std::env::var("POD_NAME")
        .ok()
        .filter(|n| !n.is_empty())
        .or_else(|| {
            nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok())
        })
        .unwrap_or_else(|| "rest-lite".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pai_test_support::frameworks::{framework, to_value};
    use serde_json::{Value, json};

    /// The job `fw` (one role of two tasks) in FrameworkController's `state`, its attempt
    /// `id` ended with `code`, a retry scheduled `delay` seconds on when given.
    fn at(state: &str, id: i32, code: Option<i32>, delay: Option<i64>, stop: bool) -> Framework {
        let mut value: Value = to_value(&framework("fw", &[("worker", 2)]));
        if stop {
            value["spec"]["executionType"] = json!("Stop");
        }
        value["status"] = json!({"state": state,
            "retryPolicyStatus": {"totalRetriedCount": id, "accountableRetriedCount": id},
            "attemptStatus": {"id": id, "startTime": "2026-01-01T00:00:00Z", "taskRoleStatuses": []}});
        if let Some(code) = code {
            value["status"]["attemptStatus"]["completionStatus"] = json!({"code": code,
                "phrase": "p", "type": {"name": if code == 0 { "Succeeded" } else { "Failed" }, "attributes": []}});
        }
        if let Some(delay) = delay {
            value["status"]["retryPolicyStatus"]["retryDelaySec"] = json!(delay);
        }
        serde_json::from_value(value).expect("framework")
    }

    /// Every reason said of the job through the phases, each once (as the recorder
    /// records each key once), with its note.
    fn told(phases: &[Framework]) -> Vec<(String, &'static str, String)> {
        let mut out: Vec<(String, &'static str, String)> = Vec::new();
        for framework in phases {
            for o in occurrences(framework) {
                if !out.iter().any(|(key, _, _)| *key == o.key) {
                    out.push((o.key, o.reason, o.note));
                }
            }
        }
        out
    }

    fn reasons(told: &[(String, &'static str, String)]) -> Vec<&'static str> {
        told.iter().map(|(_, reason, _)| *reason).collect()
    }

    const ENDING: [&str; 4] = [
        "AttemptDeletionPending",
        "AttemptDeletionRequested",
        "AttemptDeleting",
        "AttemptCompleted",
    ];

    #[test]
    fn a_succeeded_job_is_told_as_succeeded_through_every_phase() {
        let mut phases: Vec<Framework> = ENDING
            .iter()
            .map(|s| at(s, 0, Some(0), None, false))
            .collect();
        phases.push(at("Completed", 0, Some(0), None, false));
        let told = told(&phases);
        assert_eq!(
            reasons(&told),
            [
                "Submitted",
                "AttemptStarted",
                "AttemptSucceeded",
                "Succeeded"
            ],
            "{told:?}"
        );
    }

    #[test]
    fn a_stopped_job_is_told_as_stopped_not_as_failed() {
        let mut phases: Vec<Framework> = ENDING
            .iter()
            .map(|s| at(s, 0, Some(-210), None, true))
            .collect();
        phases.push(at("Completed", 0, Some(-210), None, true));
        let told = told(&phases);
        assert_eq!(
            reasons(&told),
            ["Submitted", "StopRequested", "AttemptStarted", "Stopped"],
            "{told:?}"
        );
    }

    #[test]
    fn a_retry_is_said_once_it_is_scheduled_and_not_before() {
        let mut phases: Vec<Framework> = ENDING[..3]
            .iter()
            .map(|s| at(s, 0, Some(201), None, false))
            .collect();
        let before = told(&phases);
        assert!(
            before
                .iter()
                .all(|(_, r, n)| *r != "RetryScheduled" && !n.contains("retried")),
            "{before:?}"
        );
        phases.push(at("AttemptCompleted", 0, Some(201), Some(462), false));
        phases.push(at("AttemptCreationPending", 1, None, None, false));
        let retried = told(&phases);
        assert_eq!(
            reasons(&retried),
            [
                "Submitted",
                "AttemptStarted",
                "AttemptFailed",
                "RetryScheduled",
                "Retried"
            ],
            "{retried:?}"
        );
        assert_eq!(
            retried[3].2,
            "attempt 1 will start 462 s after attempt 0 ended"
        );
        // A failed last attempt, no retry: failed, and nothing promised.
        let mut last: Vec<Framework> = ENDING
            .iter()
            .map(|s| at(s, 1, Some(3), None, false))
            .collect();
        last.push(at("Completed", 1, Some(3), None, false));
        let ended = told(&last);
        assert_eq!(
            reasons(&ended),
            ["Submitted", "Retried", "AttemptFailed", "Failed"],
            "{ended:?}"
        );
    }
}
