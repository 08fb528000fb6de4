//! What the embedded default measures as it runs tasks, for `/metrics`: how long each
//! task took from its attempt's start to its user command running, and how long an
//! attempt's tasks waited for its peer table (every task's address). Cumulative, as
//! Prometheus histograms are.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the buckets, in seconds (the last bucket, +Inf, is implicit).
pub const BUCKETS: [f64; 11] = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// A histogram of durations that many threads add to without a lock.
#[derive(Default, Debug)]
pub struct Histogram {
    /// Observations at or below each bound (not cumulative here), then above the last.
    counts: [AtomicU64; BUCKETS.len() + 1],
    sum_micros: AtomicU64,
}

/// A histogram as read at one moment: cumulative counts per bound, the count, the sum.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    pub cumulative: Vec<(f64, u64)>,
    pub count: u64,
    pub sum_seconds: f64,
}

impl Histogram {
    pub fn observe(&self, duration: Duration) {
        let seconds = duration.as_secs_f64();
        let bucket = BUCKETS
            .iter()
            .position(|&bound| seconds <= bound)
            .unwrap_or(BUCKETS.len());
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(
            u64::try_from(duration.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    pub fn snapshot(&self) -> Snapshot {
        let mut running = 0;
        let mut cumulative = Vec::with_capacity(BUCKETS.len());
        for (i, bound) in BUCKETS.iter().enumerate() {
            running += self.counts[i].load(Ordering::Relaxed);
            cumulative.push((*bound, running));
        }
        let count = running + self.counts[BUCKETS.len()].load(Ordering::Relaxed);
        Snapshot {
            cumulative,
            count,
            sum_seconds: self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }
}

/// Everything the embedded default measures.
#[derive(Default, Debug)]
pub struct Observed {
    /// From an attempt's start (its placement) to a task's user command running.
    pub task_start: Histogram,
    /// From an attempt's start to its peer table written, once per attempt: what the
    /// barrier of its first task waits at most.
    pub barrier_wait: Histogram,
}

impl Observed {
    /// Appends the histograms in Prometheus' text format to `out`.
    pub fn write(&self, out: &mut String) {
        use std::fmt::Write;
        for (name, help, histogram) in [
            (
                "rest_lite_task_start_seconds",
                "From an attempt's start to each task's user command running (this machine).",
                &self.task_start,
            ),
            (
                "rest_lite_barrier_wait_seconds",
                "From an attempt's start to its peer table written, once per attempt (this machine).",
                &self.barrier_wait,
            ),
        ] {
            let snapshot = histogram.snapshot();
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} histogram");
            for (bound, count) in &snapshot.cumulative {
                let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {count}");
            }
            let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", snapshot.count);
            let _ = writeln!(out, "{name}_sum {:.6}", snapshot.sum_seconds);
            let _ = writeln!(out, "{name}_count {}", snapshot.count);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_the_sum_adds_up() {
        let h = Histogram::default();
        for ms in [5, 80, 80, 3000, 90_000] {
            h.observe(Duration::from_millis(ms));
        }
        let s = h.snapshot();
        assert_eq!(s.count, 5);
        assert_eq!(s.cumulative[0], (0.01, 1));
        assert_eq!(s.cumulative[2], (0.1, 3));
        assert_eq!(s.cumulative[7], (5.0, 4));
        assert_eq!(
            s.cumulative.last(),
            Some(&(60.0, 4)),
            "90 s is only in +Inf"
        );
        assert!((s.sum_seconds - 93.165).abs() < 1e-9);
    }
}
