//! FrameworkController's rules as the embedded default applies them: when a task's
//! completion completes the attempt (each role's `frameworkAttemptCompletionPolicy`), and
//! whether a completed attempt is retried (`retryPolicy`). Pure functions of the
//! Framework's spec and status.

use std::time::Duration;

use pai_contract::exit::{CompletionKind, completion as completion_code};
use pai_contract::framework::{
    CompletionStatus, CompletionTrigger, FrameworkSpec, FrameworkState, RetryPolicySpec,
    RetryPolicyStatus, TaskRoleStatus,
};

/// The attempt's completion, if the completion of task `index` of role `role` ends it.
/// `roles` holds every task's status, the completed one included.
pub fn attempt_completion(
    spec: &FrameworkSpec,
    roles: &[TaskRoleStatus],
    role: &str,
    index: i32,
) -> Option<CompletionStatus> {
    let role_spec = spec.task_roles.iter().find(|r| r.name == role)?;
    let role_status = roles.iter().find(|r| r.name == role)?;
    let task = role_status
        .task_statuses
        .iter()
        .find(|t| t.index == index)?;
    let completion = task.attempt_status.completion_status.as_ref()?;
    let codes = || {
        role_status
            .task_statuses
            .iter()
            .filter(|t| t.state == FrameworkState::Completed)
            .filter_map(|t| t.attempt_status.completion_status.as_ref())
            .map(|c| c.code)
    };
    let policy = &role_spec.framework_attempt_completion_policy;
    let trigger = |message: String| CompletionTrigger {
        message,
        task_role_name: Some(role.to_string()),
        task_index: Some(index),
    };

    if completion.code != 0 && policy.min_failed_task_count >= 1 {
        let failed = codes().filter(|&c| c != 0).count();
        if failed >= policy.min_failed_task_count as usize {
            let mut status = completion.clone();
            status.trigger = Some(trigger(format!(
                "{failed} task(s) of role {role} failed, reaching its minFailedTaskCount {}; the last was task {index}",
                policy.min_failed_task_count
            )));
            return Some(status);
        }
    }
    if completion.code == 0 && policy.min_succeeded_task_count >= 1 {
        let succeeded = codes().filter(|&c| c == 0).count();
        if succeeded >= policy.min_succeeded_task_count as usize {
            let mut status = CompletionStatus::of(
                0,
                format!(
                    "{succeeded} task(s) of role {role} succeeded, reaching its minSucceededTaskCount {}",
                    policy.min_succeeded_task_count
                ),
            );
            status.trigger = Some(trigger(format!("task {index} of role {role} succeeded")));
            return Some(status);
        }
    }
    let all_completed = roles
        .iter()
        .flat_map(|r| &r.task_statuses)
        .all(|t| t.state == FrameworkState::Completed);
    if all_completed {
        let mut status = CompletionStatus::of(
            0,
            "every task completed and no role's completion policy was reached",
        );
        status.trigger = Some(trigger(format!(
            "task {index} of role {role} was the last to complete"
        )));
        return Some(status);
    }
    None
}

/// What to do with a completed attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryDecision {
    pub retry: bool,
    /// Whether the retry counts against `maxRetryCount`.
    pub accountable: bool,
    pub delay: Duration,
    pub reason: String,
}

/// Retries of transient failures and conflicts (not counted against `maxRetryCount`) a
/// job gets here before it ends with its last failure. FrameworkController retries them
/// without end; on one machine the same conflict (a port taken, a barrier that cannot be
/// met) tends to come back every attempt, and a job that can never start must end saying
/// why.
pub const MAX_TRANSIENT_RETRIES: i32 = 10;
/// The longest wait before retrying a conflict.
const MAX_CONFLICT_DELAY: Duration = Duration::from_secs(300);

/// FrameworkController's decision: stop requests and attempt completions are never
/// retried; with the fancy policy transient failures are (not counted; conflicts after
/// `conflict_delay`, doubled with each transient retry so far, at most 5 minutes), up to
/// [`MAX_TRANSIENT_RETRIES`] of them, and permanent ones never; otherwise failures are
/// retried while `accountableRetriedCount < maxRetryCount` (−1: always, −2: even after
/// success). `platform_retries`: the retries so far of attempts the platform ended
/// (preempted, or ended by the server's restart: −101), which neither the cap nor the
/// doubling counts, as they say nothing of the job; without the fancy policy they count
/// against `maxRetryCount`, as on FrameworkController.
pub fn retry_decision(
    policy: &RetryPolicySpec,
    status: &RetryPolicyStatus,
    platform_retries: i32,
    completion: &CompletionStatus,
    conflict_delay: Duration,
) -> RetryDecision {
    let decide = |retry, accountable, delay, reason: String| RetryDecision {
        retry,
        accountable,
        delay,
        reason,
    };
    let code = completion_code(completion.code);
    if code.never_retried() {
        return decide(
            false,
            true,
            Duration::ZERO,
            format!(
                "completion code {} ({}) is never retried",
                code.code, code.phrase
            ),
        );
    }
    let kind = code.kind;
    let failed = kind != CompletionKind::Succeeded;
    if policy.fancy_retry_policy {
        let reason = format!("fancy retry policy, completion type {kind:?}");
        // Retries not counted against maxRetryCount so far, but the platform's: the
        // transient ones the job may be the cause of.
        let transient = (status.total_retried_count - status.accountable_retried_count)
            .saturating_sub(platform_retries)
            .max(0);
        // The platform's own doing (a preemption, the server's restart) is never capped.
        if matches!(
            kind,
            CompletionKind::TransientConflict | CompletionKind::TransientFailure
        ) && transient >= MAX_TRANSIENT_RETRIES
            && code.code != pai_contract::exit::codes::POD_EXTERNAL_DELETED
        {
            return decide(
                false,
                false,
                Duration::ZERO,
                format!(
                    "{transient} transient failures retried already, the most this machine retries (completion code {}: {})",
                    code.code, code.phrase
                ),
            );
        }
        match kind {
            CompletionKind::TransientConflict => {
                let doubled = conflict_delay.saturating_mul(1 << transient.clamp(0, 16) as u32);
                return decide(true, false, doubled.min(MAX_CONFLICT_DELAY), reason);
            }
            CompletionKind::TransientFailure => return decide(true, false, Duration::ZERO, reason),
            CompletionKind::PermanentFailure | CompletionKind::Succeeded => {
                return decide(false, true, Duration::ZERO, reason);
            }
            CompletionKind::UnknownFailure => {}
        }
    }
    let max = policy.max_retry_count;
    let retry = max == -2 || (failed && (max == -1 || status.accountable_retried_count < max));
    decide(
        retry,
        true,
        Duration::ZERO,
        format!(
            "maxRetryCount {max}, {} accountable retries so far, {}",
            status.accountable_retried_count,
            if failed { "failed" } else { "succeeded" }
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use pai_contract::framework::{TaskAttemptStatus, TaskStatus};

    fn spec(min_failed: i32, min_succeeded: i32) -> FrameworkSpec {
        let mut framework =
            pai_test_support::frameworks::framework("fw", &[("ps", 1), ("worker", 3)]);
        for role in &mut framework.spec.task_roles {
            role.framework_attempt_completion_policy
                .min_failed_task_count = min_failed;
            role.framework_attempt_completion_policy
                .min_succeeded_task_count = min_succeeded;
        }
        framework.spec
    }

    /// `worker` task states: `None` running, `Some(code)` completed.
    fn roles(workers: &[Option<i32>], ps: Option<i32>) -> Vec<TaskRoleStatus> {
        let task = |index: usize, code: &Option<i32>| TaskStatus {
            index: index as i32,
            state: if code.is_some() {
                FrameworkState::Completed
            } else {
                FrameworkState::AttemptRunning
            },
            attempt_status: TaskAttemptStatus {
                completion_status: code.map(|c| CompletionStatus::of(c, format!("exit {c}"))),
                ..TaskAttemptStatus::default()
            },
            ..TaskStatus::default()
        };
        vec![
            TaskRoleStatus {
                name: "ps".into(),
                task_statuses: vec![task(0, &ps)],
                ..TaskRoleStatus::default()
            },
            TaskRoleStatus {
                name: "worker".into(),
                task_statuses: workers
                    .iter()
                    .enumerate()
                    .map(|(i, c)| task(i, c))
                    .collect(),
                ..TaskRoleStatus::default()
            },
        ]
    }

    #[test]
    fn one_failure_fails_the_attempt_with_that_task_named() {
        let done = attempt_completion(
            &spec(1, -1),
            &roles(&[None, Some(3), None], None),
            "worker",
            1,
        )
        .expect("completed");
        assert_eq!(done.code, 3);
        let trigger = done.trigger.expect("trigger");
        assert_eq!(
            (trigger.task_role_name.as_deref(), trigger.task_index),
            (Some("worker"), Some(1))
        );
    }

    #[test]
    fn failures_below_the_count_do_not_end_the_attempt() {
        let roles = roles(&[Some(1), None, None], None);
        assert_eq!(attempt_completion(&spec(2, -1), &roles, "worker", 0), None);
        assert_eq!(attempt_completion(&spec(-1, -1), &roles, "worker", 0), None);
    }

    #[test]
    fn enough_successes_succeed_the_attempt() {
        let roles = roles(&[Some(0), Some(0), None], None);
        let done = attempt_completion(&spec(1, 2), &roles, "worker", 1).expect("completed");
        assert_eq!(done.code, 0);
        assert_eq!(attempt_completion(&spec(1, 3), &roles, "worker", 1), None);
    }

    #[test]
    fn every_task_completed_without_a_count_reached_is_success() {
        let roles = roles(&[Some(0), Some(4), Some(0)], Some(0));
        let done = attempt_completion(&spec(-1, -1), &roles, "ps", 0).expect("completed");
        assert_eq!(done.code, 0);
    }

    use pai_contract::exit::codes;

    fn retry(fancy: bool, max: i32, accountable: i32, code: i32) -> RetryDecision {
        retry_after(fancy, max, accountable, accountable, code)
    }

    fn retry_after(
        fancy: bool,
        max: i32,
        accountable: i32,
        total: i32,
        code: i32,
    ) -> RetryDecision {
        retry_after_platform(fancy, max, accountable, total, 0, code)
    }

    fn retry_after_platform(
        fancy: bool,
        max: i32,
        accountable: i32,
        total: i32,
        platform: i32,
        code: i32,
    ) -> RetryDecision {
        retry_decision(
            &RetryPolicySpec {
                fancy_retry_policy: fancy,
                max_retry_count: max,
            },
            &RetryPolicyStatus {
                accountable_retried_count: accountable,
                total_retried_count: total,
                ..RetryPolicyStatus::default()
            },
            platform,
            &CompletionStatus::of(code, ""),
            Duration::from_secs(3),
        )
    }

    #[test]
    fn retries_follow_the_controller() {
        // Unknown failures count against maxRetryCount.
        assert!(retry(true, 2, 0, 1).retry);
        assert!(retry(true, 2, 1, 1).retry);
        assert!(!retry(true, 2, 2, 1).retry);
        assert!(retry(true, 2, 0, 1).accountable);
        // Fancy: transient always, not counted; conflicts later; permanent never.
        let transient = retry(true, 0, 0, 200);
        assert!(transient.retry && !transient.accountable);
        assert!(retry(true, 0, 0, codes::POD_EXTERNAL_DELETED).retry);
        assert_eq!(retry(true, 0, 0, 201).delay, Duration::from_secs(3));
        assert!(!retry(true, 5, 0, 210).retry);
        // Success is final unless −2; stops and attempt completions never retry.
        assert!(!retry(true, 5, 0, 0).retry);
        assert!(retry(false, -2, 9, 0).retry);
        assert!(retry(false, -1, 99, 1).retry);
        // FrameworkController's built-in never-retried codes: −210, −220, −230, whatever
        // the policy; −200 (a pod that cannot be created) is a permanent failure like any.
        for never in [
            codes::STOP_FRAMEWORK_REQUESTED,
            codes::FRAMEWORK_ATTEMPT_COMPLETION,
            codes::DELETE_TASK_REQUESTED,
        ] {
            assert!(!retry(false, -2, 0, never).retry, "{never}");
        }
        assert!(retry(false, -2, 0, codes::POD_CREATION_PERMANENT_ERROR).retry);
        assert!(retry(false, 1, 0, codes::POD_CREATION_PERMANENT_ERROR).retry);
        assert!(!retry(true, 1, 0, codes::POD_CREATION_PERMANENT_ERROR).retry);
        // Without the fancy policy a transient failure is just a failure.
        assert!(!retry(false, 0, 0, 200).retry);
    }

    #[test]
    fn transient_retries_back_off_and_end() {
        // Conflicts wait twice as long after each transient retry, at most 5 minutes.
        assert_eq!(
            retry_after(true, 0, 0, 1, 201).delay,
            Duration::from_secs(6)
        );
        assert_eq!(
            retry_after(true, 0, 2, 5, 201).delay,
            Duration::from_secs(24)
        );
        assert_eq!(
            retry_after(true, 0, 0, 9, 201).delay,
            Duration::from_secs(300)
        );
        // Accountable retries do not count towards the transient ones.
        assert!(retry_after(true, 20, 15, 24, 201).retry);
        // The eleventh transient failure ends the job, saying why.
        for code in [200, 201] {
            let last = retry_after(true, 0, 0, MAX_TRANSIENT_RETRIES, code);
            assert!(!last.retry, "{code}");
            assert!(
                last.reason
                    .contains("10 transient failures retried already"),
                "{}",
                last.reason
            );
        }
        // Preemptions count for neither: ten of them, then a conflict, waits 3 s and
        // is retried.
        let after_preemptions = retry_after_platform(true, 0, 0, MAX_TRANSIENT_RETRIES, 10, 201);
        assert!(after_preemptions.retry);
        assert_eq!(after_preemptions.delay, Duration::from_secs(3));
        // Without the fancy policy they are failures, as FrameworkController counts them.
        assert!(!retry_after_platform(false, 1, 1, 1, 1, 201).retry);
    }
}
