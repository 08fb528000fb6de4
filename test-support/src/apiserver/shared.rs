//! The state the server and its handlers share: the store behind its lock, the event
//! channels, and the signals that end watches and count what tests wait on.

use std::sync::{Mutex, MutexGuard};

use tokio::sync::{broadcast, watch};

use super::events::Channels;
use super::store::{LogKey, Store};

/// Held (in an `Arc`) by the server and every request it serves.
pub(super) struct Shared {
    store: Mutex<Store>,
    pub(super) events: Channels,
    /// Bumped to end every open watch.
    pub(super) cut: watch::Sender<u64>,
    /// How many watches (and followed logs) have started streaming.
    pub(super) watches: watch::Sender<usize>,
    /// How many requests a fault has answered.
    pub(super) faulted: watch::Sender<usize>,
    /// Text appended to a pod's log; `None` ends its followers (the container exited).
    pub(super) log_appends: broadcast::Sender<(LogKey, Option<String>)>,
}

impl Shared {
    /// An empty store, no watch cut yet, nothing counted.
    pub(super) fn new() -> Self {
        let (cut, _) = watch::channel(0);
        let (watches, _) = watch::channel(0);
        let (faulted, _) = watch::channel(0);
        let (log_appends, _) = broadcast::channel(1024);
        Self {
            store: Mutex::new(Store::default()),
            events: Channels::default(),
            cut,
            watches,
            faulted,
            log_appends,
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Store> {
        // A test that panicked while holding the lock has failed already.
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }
}
