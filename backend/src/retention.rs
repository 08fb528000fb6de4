//! Finished jobs kept within the operator's bounds (the config's `retention`), on either
//! backend: past the most finished jobs kept, or ended longer ago than the age kept, a
//! finished job is deleted from every read. Running and waiting jobs are never deleted by
//! it. Each backend looks at its finished jobs at start, as jobs change (a second apart
//! at most) and once a minute, and deletes those [`past`] names.

use std::time::Duration;

/// How often the finished jobs are looked at.
pub const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// The least time between two looks.
pub const AT_MOST_EVERY: Duration = Duration::from_secs(1);

/// The bounds; `None`: no bound of that kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bounds {
    /// The most finished jobs kept, the newest ends.
    pub finished_jobs: Option<u32>,
    /// The longest a finished job is kept after its end.
    pub max_age: Option<Duration>,
}

impl Bounds {
    /// The config's bounds (0: none of that kind).
    pub fn of(config: &pai_translate::config::RetentionConfig) -> Self {
        Self {
            finished_jobs: (config.finished_jobs > 0).then_some(config.finished_jobs),
            max_age: (config.finished_job_days > 0)
                .then(|| Duration::from_secs(u64::from(config.finished_job_days) * 86_400)),
        }
    }
}

/// The names of the finished jobs past `retention`, oldest end first, of `finished`:
/// each finished job's name and end (ms since the epoch), in any order.
pub fn past(retention: Bounds, mut finished: Vec<(i64, String)>, now_ms: i64) -> Vec<String> {
    // Newest end first; by name among equals, so that the choice is the same each time.
    finished.sort_unstable_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let kept_by_count = retention
        .finished_jobs
        .map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX));
    let oldest_kept = retention
        .max_age
        .map(|age| now_ms.saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX)));
    let mut out: Vec<String> = finished
        .into_iter()
        .enumerate()
        .filter(|(i, (ended, _))| *i >= kept_by_count || oldest_kept.is_some_and(|o| *ended < o))
        .map(|(_, (_, name))| name)
        .collect();
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobs(ends: &[(i64, &str)]) -> Vec<(i64, String)> {
        ends.iter().map(|(t, n)| (*t, n.to_string())).collect()
    }

    #[test]
    fn past_the_count_the_oldest_ends_go_first() {
        let retention = Bounds {
            finished_jobs: Some(2),
            ..Bounds::default()
        };
        let finished = jobs(&[(30, "c"), (10, "a"), (40, "d"), (20, "b")]);
        assert_eq!(past(retention, finished, 100), ["a", "b"]);
    }

    #[test]
    fn past_the_age_they_go_whatever_the_count() {
        let retention = Bounds {
            finished_jobs: Some(10),
            max_age: Some(Duration::from_millis(50)),
        };
        let finished = jobs(&[(10, "old"), (60, "new"), (49, "older")]);
        assert_eq!(past(retention, finished, 100), ["old", "older"]);
    }

    #[test]
    fn no_bounds_keep_everything() {
        let finished = jobs(&[(1, "a"), (2, "b")]);
        assert!(past(Bounds::default(), finished, i64::MAX).is_empty());
    }
}
