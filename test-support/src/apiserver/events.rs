//! What a change to an object tells its watchers: the [`Event`] (kept in the history and
//! sent live), the line a watch gets for it (a selecting watch sees objects enter and
//! leave its selection), and one event channel per resource.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::key::{Key, Params};
use super::selectors::selected;

/// A change to an object (`ADDED`, `MODIFIED`, `DELETED`) at resourceVersion `rv`.
#[derive(Clone, Debug)]
pub(super) struct Event {
    pub(super) rv: u64,
    pub(super) key: Key,
    kind: &'static str,
    /// Shared: every watcher's copy of the event is a pointer, not a deep copy.
    object: Arc<Value>,
    /// A modified object as it was before: a watch with a selector sees the object
    /// enter (ADDED) or leave (DELETED) what it selects, as the real API server's watch
    /// cache tells it.
    pub(super) previous: Option<Arc<Value>>,
    /// The event as a watch line, serialised once for every watcher (as the real API
    /// server's watch cache does).
    line: Bytes,
}

impl Event {
    pub(super) fn new(rv: u64, key: Key, kind: &'static str, object: Value) -> Self {
        let line = line(&json!({"type": kind, "object": &object}));
        Self {
            rv,
            key,
            kind,
            object: Arc::new(object),
            previous: None,
            line,
        }
    }

    /// The line a watch selecting by `query` gets for this event, if any.
    pub(super) fn line_for(&self, query: &Params) -> Option<Bytes> {
        let now = selected(&self.object, query);
        let before = self.previous.as_deref().map(|p| selected(p, query));
        match (self.kind, before, now) {
            ("MODIFIED", Some(false), true) => {
                Some(line(&json!({"type": "ADDED", "object": &*self.object})))
            }
            ("MODIFIED", Some(true), false) => {
                Some(line(&json!({"type": "DELETED", "object": &*self.object})))
            }
            (_, _, true) => Some(self.line.clone()),
            _ => None,
        }
    }
}

/// `value` as one line of a watch: its JSON and a newline.
pub(super) fn line(value: &Value) -> Bytes {
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

/// One event channel per resource, as the real API server keeps a watch cache per
/// resource: a watcher of ConfigMaps is never woken by a Framework's change.
#[derive(Default)]
pub(super) struct Channels(Mutex<HashMap<String, broadcast::Sender<Event>>>);

impl Channels {
    fn sender(&self, resource: &str) -> broadcast::Sender<Event> {
        let mut channels = self.0.lock().unwrap_or_else(|p| p.into_inner());
        channels
            .entry(resource.to_string())
            .or_insert_with(|| broadcast::channel(4096).0)
            .clone()
    }

    pub(super) fn send(&self, event: Event) {
        let _ = self.sender(&event.key.resource).send(event);
    }

    pub(super) fn subscribe(&self, resource: &str) -> broadcast::Receiver<Event> {
        self.sender(resource).subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selecting_watch_sees_objects_enter_and_leave_its_selection() {
        let q = Params::from([(
            "fieldSelector".to_string(),
            "status.phase=Pending".to_string(),
        )]);
        let pod = |phase: &str| json!({"metadata": {"name": "p"}, "status": {"phase": phase}});
        let modified = |before: &str, now: &str| {
            let mut event = Event::new(2, Key::new("pods", "n", "p"), "MODIFIED", pod(now));
            event.previous = Some(Arc::new(pod(before)));
            event
                .line_for(&q)
                .map(|line| serde_json::from_slice::<Value>(&line).expect("JSON")["type"].clone())
        };
        assert_eq!(modified("Pending", "Running"), Some(json!("DELETED")));
        assert_eq!(modified("Running", "Pending"), Some(json!("ADDED")));
        assert_eq!(modified("Pending", "Pending"), Some(json!("MODIFIED")));
        assert_eq!(modified("Running", "Succeeded"), None);
    }
}
