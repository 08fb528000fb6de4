//! The back-off of a job whose attempts end quickly: a service (`retryCount: -2`) whose
//! command exits at once, or any job retried after a failure in its first seconds. As a
//! kubelet's CrashLoopBackOff: the next attempt waits `first`, doubling with each quick
//! attempt in a row up to `cap`, and an attempt that ran `reset_after` or longer starts
//! the count again. Only attempts the user's command ended count ([`ended_by_command`]:
//! success, or the command's own exit code): the platform's own failures (a conflict, a
//! server restart) have their own rules.

use std::time::Duration;

use crate::attempts::AttemptEnd;

/// The back-off's numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartBackoff {
    /// The wait after the first quick attempt; zero turns the back-off off.
    pub first: Duration,
    /// The longest wait.
    pub cap: Duration,
    /// An attempt that ran this long resets the count.
    pub reset_after: Duration,
}

impl Default for RestartBackoff {
    /// The kubelet's: 10 s, doubling to 5 min, reset after 10 min of running.
    fn default() -> Self {
        Self {
            first: Duration::from_secs(10),
            cap: Duration::from_secs(300),
            reset_after: Duration::from_secs(600),
        }
    }
}

/// Why the next attempt waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait {
    /// How long.
    pub delay: Duration,
    /// Quick attempts in a row, the last included.
    pub quick: u32,
}

/// Whether an attempt that completed with `code` was ended by the user's command (its
/// success, or its own exit code) rather than by the platform ([`pai_contract::exit`]).
pub fn ended_by_command(code: i32) -> bool {
    code == pai_contract::exit::codes::SUCCEEDED
        || pai_contract::exit::platform_meaning(code).is_none()
}

/// How long the attempt after `history`'s last one waits, if at all. `history` is oldest
/// first; an attempt whose times are not known counts as quick.
pub fn wait(history: &[AttemptEnd], policy: &RestartBackoff) -> Option<Wait> {
    if policy.first.is_zero() {
        return None;
    }
    let quick = history
        .iter()
        .rev()
        .take_while(|end| {
            ended_by_command(end.code) && end.ran().is_none_or(|ran| ran < policy.reset_after)
        })
        .count() as u32;
    if quick == 0 {
        return None;
    }
    let doubled = policy
        .first
        .checked_mul(1u32.checked_shl(quick - 1).unwrap_or(u32::MAX))
        .unwrap_or(policy.cap);
    Some(Wait {
        delay: doubled.min(policy.cap),
        quick,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(attempt: i32, code: i32, ran_s: i64) -> AttemptEnd {
        let start =
            jiff::Timestamp::from_second(1_800_000_000 + i64::from(attempt) * 1_000).expect("time");
        let stop = start
            .checked_add(jiff::SignedDuration::from_secs(ran_s))
            .expect("time");
        AttemptEnd {
            attempt,
            code,
            diagnostics: None,
            trigger_role: None,
            trigger_index: None,
            time: Some(stop.to_string()),
            started: Some(start.to_string()),
            ended_by: None,
        }
    }

    #[test]
    fn quick_attempts_double_the_wait_up_to_the_cap() {
        let policy = RestartBackoff::default();
        let mut history = Vec::new();
        let mut waits = Vec::new();
        for attempt in 0..7 {
            history.push(end(attempt, 0, 1));
            waits.push(wait(&history, &policy).expect("a wait").delay.as_secs());
        }
        assert_eq!(waits, [10, 20, 40, 80, 160, 300, 300]);
        // Failures count as successes do: the command ended either way.
        assert_eq!(wait(&[end(0, 1, 0)], &policy).map(|w| w.quick), Some(1));
    }

    #[test]
    fn a_long_run_resets_the_count() {
        let policy = RestartBackoff::default();
        let mut history: Vec<AttemptEnd> = (0..5).map(|a| end(a, 1, 2)).collect();
        history.push(end(5, 1, 601));
        assert_eq!(wait(&history, &policy), None, "ran past 10 min");
        history.push(end(6, 1, 2));
        assert_eq!(
            wait(&history, &policy),
            Some(Wait {
                delay: Duration::from_secs(10),
                quick: 1
            })
        );
    }

    #[test]
    fn the_platforms_failures_and_a_zero_first_wait_do_not_back_off() {
        let policy = RestartBackoff::default();
        assert_eq!(wait(&[end(0, 1, 1), end(1, -101, 1)], &policy), None);
        // A conflict (201) is the platform's, though positive.
        assert_eq!(wait(&[end(0, 201, 1)], &policy), None);
        let off = RestartBackoff {
            first: Duration::ZERO,
            ..policy
        };
        assert_eq!(wait(&[end(0, 1, 1)], &off), None);
    }
}
