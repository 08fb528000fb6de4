//! This machine's task slots: gang admission of the embedded default. A job's attempt
//! starts only when every one of its tasks has a slot, and holds them until each of its
//! tasks has ended; one that does not fit waits, in submission order (a job at the head
//! of the queue is not overtaken by smaller ones behind it, so it cannot starve), and
//! says so. The slots are `--max-tasks`, the most tasks one job may have here: as many
//! as this machine runs at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Why a job waits before its tasks start (this machine's slots, or its images being
/// pulled), since when (RFC 3339).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Queued {
    /// The reason, as the job's WAITING state names it.
    pub reason: &'static str,
    pub message: String,
    pub since: String,
}

/// The reason of a job waiting for this machine's task slots.
pub const QUEUED: &str = "Queued";
/// The reason of a job whose images are being pulled (a kubelet's pod says `Pulling`).
pub const PULLING_IMAGE: &str = "PullingImage";

/// The machine's slots.
pub(crate) struct Slots {
    semaphore: Arc<Semaphore>,
    capacity: u32,
    /// Jobs holding slots now.
    holders: Arc<AtomicUsize>,
    /// Jobs waiting for slots now.
    waiting: Arc<AtomicUsize>,
}

/// Slots held by one attempt; given back when dropped.
pub(crate) struct Held {
    _permit: OwnedSemaphorePermit,
    holders: Arc<AtomicUsize>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.holders.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A place in the queue: resolves to the slots once they are free. Dropping it leaves
/// the queue.
pub(crate) type Waiter =
    std::pin::Pin<Box<dyn std::future::Future<Output = Option<Held>> + Send + Sync>>;

/// What asking for slots gave.
pub(crate) enum Asked {
    Held(Held),
    /// In the queue, and why.
    Queued(Waiter, Queued),
    /// More than the machine has.
    TooMany(String),
}

impl Slots {
    pub(crate) fn new(capacity: u32) -> Self {
        Self {
            semaphore: Arc::new(Semaphore::new(capacity as usize)),
            capacity,
            holders: Default::default(),
            waiting: Default::default(),
        }
    }

    /// Asks for `tasks` slots: held at once if they are free and nobody waits before;
    /// else a place in the queue.
    pub(crate) async fn ask(&self, tasks: u32) -> Asked {
        if tasks > self.capacity {
            return Asked::TooMany(format!(
                "the job has {tasks} tasks; this machine runs at most {} tasks at once (rest-lite serve --max-tasks)",
                self.capacity
            ));
        }
        let in_use = self.capacity as usize - self.semaphore.available_permits();
        let (holding, ahead) = (
            self.holders.load(Ordering::Relaxed),
            self.waiting.load(Ordering::Relaxed),
        );
        let holders = self.holders.clone();
        let waiting = self.waiting.clone();
        let semaphore = self.semaphore.clone();
        let mut waiter: Waiter = Box::pin(async move {
            let permit = semaphore.acquire_many_owned(tasks).await.ok()?;
            holders.fetch_add(1, Ordering::Relaxed);
            Some(Held {
                _permit: permit,
                holders,
            })
        });
        // Polled once: taken at once when free (the semaphore is fair: a request is
        // queued behind any earlier one).
        if let std::task::Poll::Ready(held) = futures::poll!(waiter.as_mut()) {
            return match held {
                Some(held) => Asked::Held(held),
                None => Asked::TooMany("this machine's task slots are closed".to_string()),
            };
        }
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let counted = WaitCount(waiting);
        let waiter: Waiter = Box::pin(async move {
            let held = waiter.await;
            drop(counted);
            held
        });
        let behind = match ahead {
            0 => String::new(),
            1 => ", behind 1 other waiting job".to_string(),
            n => format!(", behind {n} other waiting jobs"),
        };
        let queued = Queued {
            reason: QUEUED,
            message: format!(
                "this machine runs at most {} tasks at once (rest-lite serve --max-tasks); the job needs {tasks} and {in_use} were in use by {holding} {} when it was queued{behind}: it starts, whole, when enough end",
                self.capacity,
                if holding == 1 { "job" } else { "jobs" },
            ),
            since: jiff::Timestamp::now().to_string(),
        };
        Asked::Queued(waiter, queued)
    }
}

/// Counts a waiter until it is served or leaves the queue.
struct WaitCount(Arc<AtomicUsize>);

impl Drop for WaitCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn jobs_are_admitted_whole_and_in_order() {
        let slots = Slots::new(10);
        let Asked::Held(first) = slots.ask(6).await else {
            panic!("6 of 10 free slots are held at once");
        };
        let Asked::Queued(mut big, why) = slots.ask(8).await else {
            panic!("8 more do not fit");
        };
        assert!(
            why.message
                .contains("the job needs 8 and 6 were in use by 1 job"),
            "{}",
            why.message
        );
        // A small job behind the big one waits too, though 4 slots are free.
        let Asked::Queued(mut small, why) = slots.ask(2).await else {
            panic!("a smaller job does not overtake the queue");
        };
        assert!(
            why.message.contains("behind 1 other waiting job"),
            "{}",
            why.message
        );
        assert!(futures::poll!(big.as_mut()).is_pending());
        drop(first);
        let held_big = big.await.expect("the big job gets its slots");
        assert!(
            futures::poll!(small.as_mut()).is_ready(),
            "2 of the 2 left fit"
        );
        drop(held_big);
        assert!(matches!(slots.ask(11).await, Asked::TooMany(_)));
        assert_eq!(slots.waiting.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_job_that_leaves_the_queue_lets_the_next_go() {
        let slots = Slots::new(4);
        let Asked::Held(held) = slots.ask(4).await else {
            panic!()
        };
        let Asked::Queued(gone, _) = slots.ask(3).await else {
            panic!()
        };
        let Asked::Queued(next, _) = slots.ask(1).await else {
            panic!()
        };
        drop(gone);
        drop(held);
        assert!(next.await.is_some());
    }
}
