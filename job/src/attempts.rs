//! How each attempt of a job ended: a short history kept on the Framework itself, in an
//! annotation, because FrameworkController's status holds only the current attempt.
//! The embedded default writes it as its attempts end; on a cluster the server writes it
//! from what it sees of the Framework (an attempt that ended and was replaced while no
//! server watched is missing from it: the count of retries still says it happened).

use serde::{Deserialize, Serialize};

use pai_contract::Framework;

/// The annotation holding the history (JSON, oldest first).
pub const ANNOTATION: &str = "rest-lite.openpai.io/attempts";

/// How many ended attempts are kept (the latest).
pub const KEPT: usize = 20;

/// The longest diagnostics kept per attempt, in bytes.
const DIAGNOSTICS_MAX: usize = 512;

/// One attempt's end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttemptEnd {
    /// The attempt's number, from 0.
    pub attempt: i32,
    /// Its completion code ([`pai_contract::exit`]).
    pub code: i32,
    /// What the controller said (cut to 512 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<String>,
    /// The task whose completion ended the attempt: its role (the Framework's name for
    /// it) and index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// That task's index in its role.
    pub trigger_index: Option<i32>,
    /// When it ended (RFC 3339), where the status says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// When it began to run (RFC 3339; when it was created, if it never ran): how long it
    /// ran decides a restart's back-off ([`crate::restarts`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<String>,
    /// Who ended it, when it was not the job: the engine that preempted or evicted a
    /// task's pod, in its words (cut to 512 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_by: Option<String>,
}

impl AttemptEnd {
    /// How long it ran, where both ends are known.
    pub fn ran(&self) -> Option<std::time::Duration> {
        let parse = |t: &Option<String>| t.as_deref()?.parse::<jiff::Timestamp>().ok();
        let (start, end) = (parse(&self.started)?, parse(&self.time)?);
        let span = end.duration_since(start);
        std::time::Duration::try_from(span).ok()
    }
}

/// The history the annotation holds (none when it is missing or unreadable).
pub fn recorded(framework: &Framework) -> Vec<AttemptEnd> {
    framework
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION))
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

/// How the current attempt ended, once its outcome is decided.
pub fn current_end(framework: &Framework) -> Option<AttemptEnd> {
    let status = framework.status.as_ref()?;
    let ending = status.state.attempt_ending();
    let attempt = &status.attempt_status;
    let completion = attempt.completion_status.as_ref().filter(|_| ending)?;
    let trigger = completion.trigger.as_ref();
    Some(AttemptEnd {
        attempt: attempt.id,
        code: completion.code,
        diagnostics: completion.diagnostics.as_deref().map(cut),
        trigger_role: trigger.and_then(|t| t.task_role_name.clone()),
        trigger_index: trigger.and_then(|t| t.task_index),
        time: attempt
            .completion_time
            .clone()
            .or_else(|| status.completion_time.clone())
            .or_else(|| status.transition_time.clone()),
        started: attempt
            .run_time
            .clone()
            .or_else(|| attempt.start_time.clone()),
        ended_by: None,
    })
}

/// Every ended attempt known: the history, and the current attempt's end when it is not
/// in it yet (a reader does not wait for the writer).
pub fn ended(framework: &Framework) -> Vec<AttemptEnd> {
    let mut ends = recorded(framework);
    if let Some(end) = current_end(framework)
        && ends.last().is_none_or(|last| last.attempt < end.attempt)
    {
        ends.push(end);
    }
    ends
}

/// The annotation's value with the current attempt's end added, when it is missing
/// from it (`None`: nothing to write).
pub fn with_current(framework: &Framework) -> Option<String> {
    amended(framework, None).map(|(value, _)| value)
}

/// As [`with_current`], and the words of who ended attempt `ended_by.0` (where known),
/// written into its end where it was ended by others' deletion of its pods (−101) and
/// does not say so yet: also an end recorded before those words were known, of this
/// attempt or an earlier one. The value, and whether it holds the words.
pub fn amended(framework: &Framework, ended_by: Option<(i32, &str)>) -> Option<(String, bool)> {
    let mut ends = recorded(framework);
    let mut changed = false;
    if let Some(end) = current_end(framework)
        && !ends.iter().any(|e| e.attempt >= end.attempt)
    {
        ends.push(end);
        let extra = ends.len().saturating_sub(KEPT);
        ends.drain(..extra);
        changed = true;
    }
    let mut said = false;
    if let Some((attempt, words)) = ended_by
        && let Some(end) = ends.iter_mut().find(|e| {
            e.attempt == attempt
                && e.code == pai_contract::exit::codes::POD_EXTERNAL_DELETED
                && e.ended_by.is_none()
        })
    {
        end.ended_by = Some(cut(words));
        (changed, said) = (true, true);
    }
    if !changed {
        return None;
    }
    serde_json::to_string(&ends).ok().map(|value| (value, said))
}

/// Writes the current attempt's end into `framework`'s history (the embedded default,
/// which owns its Frameworks). Whether it changed.
pub fn record(framework: &mut Framework) -> bool {
    let Some(value) = with_current(framework) else {
        return false;
    };
    framework
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(ANNOTATION.to_string(), value);
    true
}

fn cut(text: &str) -> String {
    if text.len() <= DIAGNOSTICS_MAX {
        return text.to_string();
    }
    let mut end = DIAGNOSTICS_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use pai_contract::framework::{
        CompletionStatus, CompletionTrigger, FrameworkState, FrameworkStatus,
    };

    fn ended_attempt(id: i32, code: i32) -> Framework {
        let mut framework = Framework::new(
            "f",
            pai_contract::FrameworkSpec {
                description: None,
                execution_type: Default::default(),
                retry_policy: Default::default(),
                task_roles: Vec::new(),
            },
        );
        let mut status = FrameworkStatus {
            state: FrameworkState::AttemptCompleted,
            ..Default::default()
        };
        status.attempt_status.id = id;
        status.attempt_status.completion_time = Some(format!("2026-01-01T00:00:0{id}Z"));
        let mut completion = CompletionStatus::of(code, "x".repeat(600));
        completion.trigger = Some(CompletionTrigger {
            task_role_name: Some("worker".into()),
            task_index: Some(2),
            ..Default::default()
        });
        status.attempt_status.completion_status = Some(completion);
        framework.status = Some(status);
        framework
    }

    #[test]
    fn each_attempt_is_recorded_once_and_the_oldest_go() {
        let mut framework = ended_attempt(0, 201);
        assert!(record(&mut framework));
        assert!(!record(&mut framework), "recorded once");
        let ends = recorded(&framework);
        assert_eq!(ends.len(), 1);
        assert_eq!(ends[0].code, 201);
        assert_eq!(ends[0].trigger_role.as_deref(), Some("worker"));
        assert_eq!(ends[0].trigger_index, Some(2));
        assert_eq!(ends[0].time.as_deref(), Some("2026-01-01T00:00:00Z"));
        assert!(ends[0].diagnostics.as_ref().unwrap().len() <= DIAGNOSTICS_MAX + 3);
        for id in 1..30 {
            let mut next = ended_attempt(id, 1);
            next.metadata.annotations = framework.metadata.annotations.clone();
            assert!(record(&mut next));
            framework = next;
        }
        let ends = recorded(&framework);
        assert_eq!(ends.len(), KEPT);
        assert_eq!(ends.last().unwrap().attempt, 29);
        assert_eq!(ends[0].attempt, 29 - KEPT as i32 + 1);
    }

    #[test]
    fn who_ended_an_attempt_is_written_into_its_end_once_even_after_it_was_recorded() {
        use pai_contract::exit::codes::POD_EXTERNAL_DELETED;
        let mut framework = ended_attempt(0, POD_EXTERNAL_DELETED);
        assert!(
            record(&mut framework),
            "recorded before the words were known"
        );
        // The next attempt began before they were: the recorded end gets them.
        let mut next = ended_attempt(1, 1);
        next.status.as_mut().unwrap().state = FrameworkState::AttemptRunning;
        next.metadata.annotations = framework.metadata.annotations.clone();
        let (value, said) =
            amended(&next, Some((0, "Kueue (Preempted): for prod"))).expect("amended");
        assert!(said);
        next.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(ANNOTATION.to_string(), value);
        assert_eq!(
            recorded(&next)[0].ended_by.as_deref(),
            Some("Kueue (Preempted): for prod")
        );
        assert_eq!(amended(&next, Some((0, "again"))), None, "once");
        // An attempt its own command ended never gets such words.
        let failed = ended_attempt(2, 1);
        let (_, said) = amended(&failed, Some((2, "the eviction API"))).expect("its end");
        assert!(!said);
    }

    #[test]
    fn a_running_attempt_has_no_end_and_a_reader_sees_one_not_yet_written() {
        let mut framework = ended_attempt(3, 1);
        framework.status.as_mut().unwrap().state = FrameworkState::AttemptRunning;
        assert_eq!(current_end(&framework), None);
        assert!(ended(&framework).is_empty());
        let framework = ended_attempt(3, 1);
        assert_eq!(ended(&framework).len(), 1, "not written yet, still shown");
        assert!(recorded(&framework).is_empty());
    }
}
