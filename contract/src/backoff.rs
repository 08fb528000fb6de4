//! The one back-off of every loop that asks another process again after a failure: the
//! server's controllers and its copy's watch, the barrier's wait, the client's watch. A
//! [`Policy`] names the first wait and the longest; each wait lies between half of its
//! ceiling and all of it (the ceiling doubling from `first` to `cap`), so that replicas,
//! namespaces and a thousand tasks refused together do not come back in step. The
//! delays are `backon`'s exponential back-off with jitter, which kube's own watcher
//! uses too.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// A back-off's bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// The ceiling of the first wait.
    pub first: Duration,
    /// The ceiling of every wait from the time the doubling reaches it.
    pub cap: Duration,
}

/// The server's own loops against the API server (its copy's watch, its controllers).
pub const SERVER: Policy = Policy {
    first: Duration::from_millis(500),
    cap: Duration::from_secs(30),
};

/// A task's barrier, within its own timeout.
pub const BARRIER: Policy = Policy {
    first: Duration::from_millis(100),
    cap: Duration::from_secs(10),
};

/// The command line's watch of a job (a person waits on it).
pub const CLIENT: Policy = Policy {
    first: Duration::from_millis(250),
    cap: Duration::from_secs(8),
};

/// The waits after failures in a row, as [`Policy`] bounds them.
#[derive(Debug)]
pub struct Backoff {
    policy: Policy,
    delays: ExponentialBackoff,
}

impl Backoff {
    /// No failure yet.
    pub fn new(policy: Policy) -> Self {
        Self {
            policy,
            delays: build(policy),
        }
    }

    /// The wait after one more failure.
    pub fn next_delay(&mut self) -> Duration {
        self.delays.next().unwrap_or(self.policy.cap)
    }

    /// A success: the next failure waits the shortest again.
    pub fn reset(&mut self) {
        self.delays = build(self.policy);
    }
}

/// backon adds to each wait up to as much again: halves of the ceilings, jittered,
/// are waits between half of each ceiling and all of it.
fn build(policy: Policy) -> ExponentialBackoff {
    ExponentialBuilder::new()
        .with_min_delay(policy.first / 2)
        .with_max_delay(policy.cap / 2)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_wait_lies_between_half_its_ceiling_and_all_of_it_and_doubles_to_the_cap() {
        for policy in [SERVER, BARRIER, CLIENT] {
            let mut backoff = Backoff::new(policy);
            let mut ceiling = policy.first;
            for _ in 0..12 {
                let wait = backoff.next_delay();
                assert!(
                    wait >= ceiling / 2 && wait <= ceiling,
                    "{policy:?}: {wait:?} against {ceiling:?}"
                );
                ceiling = (ceiling * 2).min(policy.cap);
            }
            backoff.reset();
            assert!(backoff.next_delay() <= policy.first);
        }
    }
}
