//! Finished jobs on this machine kept within the operator's bounds
//! ([`pai_engine::retention`]): a finished job past them is deleted as a `delete` would
//! (its files, its Framework, every read of it). A finished job's tasks keep the files
//! they needed to run for a while after its end, then only their logs and results.

use std::time::Duration;

pub use pai_engine::retention::{AT_MOST_EVERY, Bounds, SWEEP_EVERY, past};

/// The bounds, and how long finished tasks keep their run-only files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    /// Which finished jobs are kept.
    pub bounds: Bounds,
    /// How long after its end a finished job's tasks keep the files they needed to run
    /// ([`crate::store::Store::settle_finished`]).
    pub task_files_kept: Duration,
}
