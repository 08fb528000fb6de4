//! Finished jobs on this machine kept within the operator's bounds
//! ([`pai_backend::retention`]): a finished job past them is deleted as a `delete` would
//! (its files, its Framework, every read of it). A finished job's tasks keep the files
//! they needed to run for a while after its end, then only their logs and results.

use std::time::Duration;

pub use pai_backend::retention::{AT_MOST_EVERY, Bounds, SWEEP_EVERY, past};

/// The bounds, and how long finished tasks keep their run-only files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    /// Which finished jobs are kept.
    pub bounds: Bounds,
    /// How long after its end a finished job's tasks keep the files they needed to run
    /// ([`crate::store::Store::settle_finished`]).
    pub task_files_kept: Duration,
}

/// Reads every change waiting in `changes`: whether there was one (one that was missed
/// counts), `None` once the channel closed. The retention's look reads them all after
/// each look; read one a look, a burst's thousands waited in the channel for an hour,
/// each holding its block where it was made.
pub(crate) fn drain<T: Clone>(changes: &mut tokio::sync::broadcast::Receiver<T>) -> Option<bool> {
    use tokio::sync::broadcast::error::TryRecvError;
    let mut any = false;
    loop {
        match changes.try_recv() {
            Ok(_) | Err(TryRecvError::Lagged(_)) => any = true,
            Err(TryRecvError::Empty) => return Some(any),
            Err(TryRecvError::Closed) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_waiting_change_is_read_at_once_and_none_is_left_in_the_channel() {
        let (sender, mut changes) = tokio::sync::broadcast::channel::<u32>(4);
        assert_eq!(drain(&mut changes), Some(false), "nothing waits");
        for n in 0..10 {
            sender.send(n).unwrap();
        }
        assert_eq!(sender.len(), 4, "the channel held the last four");
        assert_eq!(drain(&mut changes), Some(true), "lagged, then read");
        assert_eq!(
            sender.len(),
            0,
            "nothing is held for this receiver any more"
        );
        drop(sender);
        assert_eq!(drain(&mut changes), None, "closed");
    }
}
