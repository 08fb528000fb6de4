//! The back-off of the server's own loops against the API server (its copy's watch, the
//! peer-table publisher): 0.5 s doubling to 30 s, jittered between half and all of it
//! so that replicas and namespaces do not retry in step.

use std::time::{Duration, Instant};

/// The first wait, and the longest.
const FIRST: Duration = Duration::from_millis(500);
const CAP: Duration = Duration::from_secs(30);

/// The wait after `failures` failures in a row (0: the first failure).
pub fn delay(failures: u32) -> Duration {
    let ceiling = FIRST.saturating_mul(1 << failures.min(6)).min(CAP);
    let random = std::hash::BuildHasher::hash_one(
        &std::collections::hash_map::RandomState::new(),
        Instant::now(),
    );
    ceiling / 2 + (ceiling / 2).mul_f64((random % 1_000) as f64 / 1_000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_to_its_cap_and_stays_within_half_to_all() {
        for (failures, ceiling) in [(0, FIRST), (1, FIRST * 2), (6, CAP), (40, CAP)] {
            let wait = delay(failures);
            assert!(
                wait >= ceiling / 2 && wait <= ceiling,
                "{failures}: {wait:?}"
            );
        }
    }
}
