//! Memory the server freed, given back to the system once a burst of jobs is over (see
//! [`super`]).
//!
//! glibc's allocator gives memory back only from the top of each heap: what a thousand
//! finished tasks freed in the middle stayed resident. `malloc_trim` gives back every
//! free page of every arena, once jobs ended: a job that goes cold says so
//! ([`Trimmer::jobs_ended`]), by its loop as it ends or by the retention's look. (Until
//! #60 only the look said so, and most jobs go cold by their loop: whether a burst's
//! memory was given back depended on the look freezing one job of it.)

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// At most one trim in this long: a trim walks every free chunk of every arena.
const AT_MOST_EVERY: Duration = Duration::from_secs(10);

/// Gives back freed memory after jobs ended, at most once in [`AT_MOST_EVERY`]: the
/// retention's look (as jobs change, and once a minute) asks it each time.
#[derive(Debug, Default)]
pub struct Trimmer {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Jobs ended since the last trim.
    pending: bool,
    /// A trim is owed once more, [`SETTLED_AFTER`] after the last one: what the server
    /// lets go of after jobs went cold (the blocking threads that started their tasks,
    /// which end after ten idle seconds; the lists' indexes caught up) was still held then.
    again: bool,
    last: Option<Instant>,
}

/// When the trim owed after the last jobs went cold comes.
const SETTLED_AFTER: Duration = Duration::from_secs(30);

impl Trimmer {
    /// Jobs ended (went cold): their memory is free now.
    pub fn jobs_ended(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).pending = true;
    }

    /// Whether a trim is due: jobs ended since the last one, which is [`AT_MOST_EVERY`]
    /// old; or, once none ended since, one more [`SETTLED_AFTER`] the last. A `true`
    /// counts as the trim (the caller runs [`trim`]); after a `false`, a later call (the
    /// look comes at least once a minute) says when.
    pub fn due(&self) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let since = state.last.map(|at| at.elapsed());
        let due = if state.pending {
            since.is_none_or(|s| s >= AT_MOST_EVERY)
        } else {
            state.again && since.is_none_or(|s| s >= SETTLED_AFTER)
        };
        if due {
            state.again = state.pending;
            state.pending = false;
            state.last = Some(Instant::now());
        }
        due
    }
}

/// [`give_back`], timed in the log. Blocking (milliseconds for a heap of a hundred
/// megabytes): run it off the async workers.
pub fn trim() {
    let started = Instant::now();
    give_back();
    tracing::debug!(
        ms = started.elapsed().as_secs_f64() * 1000.0,
        "the memory of ended jobs given back to the system"
    );
}

/// Every free page of the allocator's heaps back to the system.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn give_back() {
    #[allow(unsafe_code)]
    // SAFETY: malloc_trim takes each arena's lock itself and only releases pages of free
    // chunks; it is safe to call from any thread at any time.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}

/// Other C libraries' allocators (musl's gives whole free pages back by itself).
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn give_back() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trim_is_due_once_jobs_ended_and_not_twice_within_the_interval() {
        let trimmer = Trimmer::default();
        assert!(!trimmer.due(), "nothing ended yet");
        trimmer.jobs_ended();
        assert!(trimmer.due());
        trimmer.jobs_ended();
        assert!(!trimmer.due(), "within the interval");
        trimmer.state.lock().unwrap().last = Some(Instant::now() - AT_MOST_EVERY);
        assert!(trimmer.due(), "the ended jobs were remembered");
        assert!(
            !trimmer.due(),
            "nothing ended since, and the server has not settled"
        );
        trimmer.state.lock().unwrap().last = Some(Instant::now() - SETTLED_AFTER);
        assert!(trimmer.due(), "once more after the last jobs ended");
        trimmer.state.lock().unwrap().last = Some(Instant::now() - SETTLED_AFTER);
        assert!(!trimmer.due(), "and only once");
    }

    /// Anonymous resident memory of this process, in KiB.
    fn rss_anon_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .expect("/proc/self/status")
            .lines()
            .find_map(|l| l.strip_prefix("RssAnon:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("RssAnon")
    }

    /// What a burst of jobs leaves: many blocks freed between a few that stay, so no
    /// heap's top is free. Without the trim, glibc keeps every page of them.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn freed_blocks_between_kept_ones_go_back_to_the_system() {
        // On a thread of its own, so its arena holds this test's blocks alone.
        std::thread::spawn(|| {
            let blocks: Vec<Vec<u8>> = (0..24_000).map(|i| vec![i as u8; 2_000]).collect();
            let kept: Vec<Vec<u8>> = blocks
                .into_iter()
                .enumerate()
                .filter_map(|(i, b)| (i % 64 == 0).then_some(b))
                .collect();
            let before = rss_anon_kib();
            give_back();
            let after = rss_anon_kib();
            assert!(
                before.saturating_sub(after) > 20 * 1024,
                "{before} KiB before the trim, {after} KiB after: 45 MB of 47 were freed"
            );
            drop(kept);
        })
        .join()
        .expect("the test's thread");
    }
}
