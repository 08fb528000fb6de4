//! What the server keeps (its [`Store`]: objects by [`Key`], the resourceVersion, the
//! event history, container logs, the requests it saw, what tests set it to refuse), and
//! how an object is written and deleted: metadata filled in, events recorded and sent,
//! finalizers and owner references honoured, and JSON merge patches applied.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use serde_json::{Value, json};

use super::events::{Channels, Event};
use super::faults::Fault;
use super::key::Key;

/// A container's log: its pod and the container's name.
pub(super) type LogKey = (Key, String);

/// One request as the server saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    /// Path and query.
    pub uri: String,
    /// Bytes of the response body sent so far (a watch's grow while it lasts).
    pub bytes_sent: u64,
    /// The bearer token it came with: who asked (this server checks none).
    pub bearer: Option<String>,
}

impl Request {
    pub fn is_watch(&self) -> bool {
        self.uri.contains("watch=true") || self.uri.contains("watch=1")
    }
}

/// Everything the server keeps, behind one lock.
#[derive(Default)]
pub(super) struct Store {
    pub(super) rv: u64,
    pub(super) objects: BTreeMap<Key, Value>,
    pub(super) history: VecDeque<Event>,
    /// Watches from a resourceVersion below this get 410 Gone.
    pub(super) compacted_below: u64,
    pub(super) fault: Option<Fault>,
    /// Creates are refused as invalid (422) with this message, as validation against
    /// the CRD schema or an admission webhook would.
    pub(super) invalid: Option<String>,
    /// Creates of one resource refused as invalid (422) with a message.
    pub(super) refused: HashMap<String, String>,
    /// Patches of one resource refused as invalid (422) with a message, as an admission
    /// webhook may.
    pub(super) refused_patches: HashMap<String, String>,
    uid: u64,
    /// Container logs by pod and container.
    pub(super) logs: HashMap<LogKey, String>,
    /// The same logs, each line begun with the time it was appended (`timestamps=true`).
    pub(super) stamped_logs: HashMap<LogKey, String>,
    /// Containers that have ended: following their log returns what there is.
    pub(super) ended_logs: HashSet<LogKey>,
    pub(super) requests: Vec<Request>,
    /// Response bytes of each request, by its position in `requests`.
    pub(super) sent: Vec<Arc<AtomicU64>>,
    /// Whether a Framework whose attempt completed has its pods deleted at once, as
    /// FrameworkController deletes them
    /// ([`ApiServer::delete_pods_of_completed_attempts`](super::ApiServer::delete_pods_of_completed_attempts)).
    pub(super) delete_completed_pods: bool,
}

/// Stores `object` at `key` (a new resourceVersion, a UID and a creation time when it
/// has none) and records and sends its `kind` event; a Framework whose attempt completed
/// takes its pods with it when the store's `delete_completed_pods` says so.
pub(super) fn insert(
    store: &mut Store,
    events: &Channels,
    key: Key,
    mut object: Value,
    kind: &'static str,
) -> Value {
    store.rv += 1;
    let rv = store.rv;
    if !object["metadata"].is_object() {
        object["metadata"] = json!({});
    }
    let meta = &mut object["metadata"];
    meta["name"] = json!(key.name);
    meta["namespace"] = json!(key.namespace);
    meta["resourceVersion"] = json!(rv.to_string());
    if meta["uid"].as_str().is_none_or(str::is_empty) {
        store.uid += 1;
        meta["uid"] = json!(format!("00000000-0000-0000-0000-{:012}", store.uid));
    }
    if meta["creationTimestamp"].is_null() {
        meta["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
    }
    let previous = store.objects.insert(key.clone(), object.clone());
    let completed = key.resource == "frameworks"
        && store.delete_completed_pods
        && !object["status"]["attemptStatus"]["completionStatus"].is_null();
    let mut event = Event::new(rv, key.clone(), kind, object.clone());
    if kind == "MODIFIED" {
        event.previous = previous.map(Arc::new);
    }
    store.history.push_back(event.clone());
    events.send(event);
    if completed {
        // FrameworkController deletes a completed attempt's pods (`<framework>-…`).
        let prefix = format!("{}-", key.name);
        let pods: Vec<Key> = store
            .objects
            .keys()
            .filter(|k| {
                k.resource == "pods" && k.namespace == key.namespace && k.name.starts_with(&prefix)
            })
            .cloned()
            .collect();
        for pod in pods {
            remove_one(store, events, &pod);
        }
    }
    object
}

/// Removes the object, then (as the garbage collector does after a background-cascading
/// delete, here at once) every object it owns, and theirs.
pub(super) fn remove(store: &mut Store, events: &Channels, key: &Key) -> Option<Value> {
    let object = remove_one(store, events, key)?;
    let mut owners: Vec<Value> = vec![object["metadata"]["uid"].clone()];
    while let Some(uid) = owners.pop() {
        let owned: Vec<Key> = store
            .objects
            .iter()
            .filter(|(k, o)| {
                k.namespace == key.namespace
                    && o["metadata"]["ownerReferences"]
                        .as_array()
                        .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in owned {
            if let Some(gone) = remove_one(store, events, &k) {
                owners.push(gone["metadata"]["uid"].clone());
            }
        }
    }
    Some(object)
}

/// Deletes one object as the API server does: one with finalizers only gets its
/// `deletionTimestamp` (it goes once a patch takes the last finalizer away); a pod that
/// goes takes its containers' logs with it, as the kubelet's go.
pub(super) fn remove_one(store: &mut Store, events: &Channels, key: &Key) -> Option<Value> {
    let finalized = store.objects.get(key).is_some_and(|o| {
        o["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty())
    });
    if finalized {
        let mut object = store.objects.get(key)?.clone();
        if object["metadata"]["deletionTimestamp"].is_null() {
            let now = jiff::Timestamp::now();
            object["metadata"]["deletionTimestamp"] =
                json!(now.round(jiff::Unit::Second).unwrap_or(now).to_string());
            return Some(insert(store, events, key.clone(), object, "MODIFIED"));
        }
        return Some(object);
    }
    if key.resource == "pods" {
        store.logs.retain(|(pod, _), _| pod != key);
        store.stamped_logs.retain(|(pod, _), _| pod != key);
        store.ended_logs.retain(|(pod, _)| pod != key);
    }
    let mut object = store.objects.remove(key)?;
    store.rv += 1;
    let rv = store.rv;
    object["metadata"]["resourceVersion"] = json!(rv.to_string());
    let event = Event::new(rv, key.clone(), "DELETED", object.clone());
    store.history.push_back(event.clone());
    events.send(event);
    Some(object)
}

/// RFC 7386 JSON merge patch.
pub(super) fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(fields) => {
            if !target.is_object() {
                *target = json!({});
            }
            for (k, v) in fields {
                if v.is_null() {
                    if let Some(map) = target.as_object_mut() {
                        map.remove(k);
                    }
                } else {
                    merge(&mut target[k], v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut target = json!({"a": 1, "b": {"c": 2, "d": 3}});
        merge(&mut target, &json!({"a": null, "b": {"c": 5}, "e": [1]}));
        assert_eq!(target, json!({"b": {"c": 5, "d": 3}, "e": [1]}));
    }
}
