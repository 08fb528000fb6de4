//! The running tasks' `container.log`s kept to a size
//! ([`pai_contract::log_rotation`] says how). The runtime rotates the log as it echoes
//! the user command's output where the log is its own standard output (host mode); one
//! sweep every [`SWEEP_EVERY`] looks at every running task's log for the rest: a
//! container's log, which the engine writes, and what a task's processes write to it
//! past the runtime.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the running tasks' logs are looked at.
pub const SWEEP_EVERY: Duration = Duration::from_secs(2);

pub use pai_contract::log_rotation::{Rotation, dropped, numbered, older_files, rotate_if_needed};

/// The logs of the running tasks, and their bound.
#[derive(Debug)]
pub struct Logs {
    paths: Mutex<HashSet<PathBuf>>,
    rotation: Rotation,
}

/// A log looked after while it is held; forgotten when dropped.
pub struct Watched {
    logs: Arc<Logs>,
    path: PathBuf,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.logs.paths().remove(&self.path);
    }
}

impl Logs {
    pub fn new(rotation: Rotation) -> Arc<Self> {
        Arc::new(Self {
            paths: Mutex::default(),
            rotation,
        })
    }

    fn paths(&self) -> std::sync::MutexGuard<'_, HashSet<PathBuf>> {
        self.paths.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The bound of each log.
    pub fn rotation(&self) -> Rotation {
        self.rotation
    }

    /// Looks after `path` until the guard is dropped.
    pub fn watch(self: &Arc<Self>, path: PathBuf) -> Watched {
        self.paths().insert(path.clone());
        Watched {
            logs: self.clone(),
            path,
        }
    }

    /// Rotates every watched log past its size (blocking: file I/O).
    pub fn sweep(&self) {
        let paths: Vec<PathBuf> = self.paths().iter().cloned().collect();
        for path in paths {
            if let Err(e) = rotate_if_needed(&path, self.rotation) {
                tracing::warn!(log = %path.display(), error = %e, "cannot rotate a task's log");
            }
        }
    }
}
