//! An in-process HTTP server that speaks enough of the Kubernetes API for our clients:
//! namespaced objects of any resource under `/api/v1` and `/apis/<group>/<version>` (and
//! cluster-scoped ones of API groups, kept under the namespace `""`), with
//! get, list (label selectors; field selectors on the fields the real server supports,
//! 400 on others), watch (from a resourceVersion, with history, 410 Gone once compacted,
//! server-side timeouts; a selecting watch sees objects enter and leave its selection as
//! ADDED and DELETED), create (409), replace (409 on a stale resourceVersion), JSON
//! merge patch, and delete (404; 409 when its preconditions' UID or resourceVersion differ).
//!
//! Tests steer it: change objects as a controller would, cut every open watch, compact
//! the history, inject faults ([`Fault`]: 401/403 for a while, 429 with Retry-After,
//! 5xx, slow answers), stop and restart on the same port (every connection dropped),
//! and count requests, and the faulted ones.
//!
//! Every object written over HTTP passes [`crate::validation::admit`] first, as a real API
//! server with FrameworkController's CRD would check it: object metadata (names, labels,
//! annotations' size, owner references), the Framework schema (names `^[a-z0-9]{1,63}$`,
//! task numbers, enums, bounds), pruning of unknown fields, and ConfigMaps' keys and
//! 1 MiB limit, Events' required fields and limits; a failure is the real 422 `Status`.
//!
//! Deleting an object deletes what it owns (`metadata.ownerReferences`), at once where
//! the real garbage collector takes a moment.
//!
//! ServiceAccounts, Roles and RoleBindings are checked as Kubernetes' RBAC validation
//! checks them; whether a request is allowed is [`crate::rbac`]'s, which tests call.
//!
//! It does not prove: admission webhooks, other resources' schemas, authentication, and
//! authorization other than a blanket denial (it does not enforce RBAC itself), server-side apply, strategic merge semantics for
//! lists, bookmarks, pagination (everything fits one page), or the timing of a real
//! API server and etcd.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

/// A container's log: its pod and the container's name.
type LogKey = (Key, String);

use pai_contract::framework::{INIT_CONTAINER, MAIN_CONTAINER};

/// Where an object lives.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// `frameworks`, `pods`, …
    pub resource: String,
    pub namespace: String,
    pub name: String,
}

impl Key {
    pub fn new(resource: &str, namespace: &str, name: &str) -> Self {
        Self {
            resource: resource.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

#[derive(Clone, Debug)]
struct Event {
    rv: u64,
    key: Key,
    kind: &'static str,
    /// Shared: every watcher's copy of the event is a pointer, not a deep copy.
    object: Arc<Value>,
    /// A modified object as it was before: a watch with a selector sees the object
    /// enter (ADDED) or leave (DELETED) what it selects, as the real API server's watch
    /// cache tells it.
    previous: Option<Arc<Value>>,
    /// The event as a watch line, serialised once for every watcher (as the real API
    /// server's watch cache does).
    line: Bytes,
}

impl Event {
    fn new(rv: u64, key: Key, kind: &'static str, object: Value) -> Self {
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
    fn line_for(&self, query: &Params) -> Option<Bytes> {
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

#[derive(Default)]
struct Store {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    history: VecDeque<Event>,
    /// Watches from a resourceVersion below this get 410 Gone.
    compacted_below: u64,
    fault: Option<Fault>,
    /// Creates are refused as invalid (422) with this message, as validation against
    /// the CRD schema or an admission webhook would.
    invalid: Option<String>,
    /// Creates of one resource refused as invalid (422) with a message.
    refused: HashMap<String, String>,
    /// Patches of one resource refused as invalid (422) with a message, as an admission
    /// webhook may.
    refused_patches: HashMap<String, String>,
    uid: u64,
    /// Container logs by pod and container.
    logs: HashMap<LogKey, String>,
    /// The same logs, each line begun with the time it was appended (`timestamps=true`).
    stamped_logs: HashMap<LogKey, String>,
    /// Containers that have ended: following their log returns what there is.
    ended_logs: std::collections::HashSet<LogKey>,
    requests: Vec<Request>,
    /// Response bytes of each request, by its position in `requests`.
    sent: Vec<Arc<AtomicU64>>,
    /// Whether a Framework whose attempt completed has its pods deleted at once, as
    /// FrameworkController deletes them ([`ApiServer::delete_pods_of_completed_attempts`]).
    delete_completed_pods: bool,
}

/// One event channel per resource, as the real API server keeps a watch cache per
/// resource: a watcher of ConfigMaps is never woken by a Framework's change.
#[derive(Default)]
struct Channels(Mutex<HashMap<String, broadcast::Sender<Event>>>);

impl Channels {
    fn sender(&self, resource: &str) -> broadcast::Sender<Event> {
        let mut channels = self.0.lock().unwrap_or_else(|p| p.into_inner());
        channels
            .entry(resource.to_string())
            .or_insert_with(|| broadcast::channel(4096).0)
            .clone()
    }

    fn send(&self, event: Event) {
        let _ = self.sender(&event.key.resource).send(event);
    }

    fn subscribe(&self, resource: &str) -> broadcast::Receiver<Event> {
        self.sender(resource).subscribe()
    }
}

struct Shared {
    store: Mutex<Store>,
    events: Channels,
    /// Bumped to end every open watch.
    cut: watch::Sender<u64>,
    /// How many watches (and followed logs) have started streaming.
    watches: watch::Sender<usize>,
    /// How many requests a fault has answered.
    faulted: watch::Sender<usize>,
    /// Text appended to a pod's log; `None` ends its followers (the container exited).
    log_appends: broadcast::Sender<(LogKey, Option<String>)>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Store> {
        // A test that panicked while holding the lock has failed already.
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The server. Dropping it stops it.
pub struct ApiServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: Option<JoinHandle<()>>,
}

impl ApiServer {
    /// Starts on a free loopback port.
    pub async fn start() -> Self {
        let events = Channels::default();
        let (cut, _) = watch::channel(0);
        let (watches, _) = watch::channel(0);
        let (faulted, _) = watch::channel(0);
        let (log_appends, _) = broadcast::channel(1024);
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::default()),
            events,
            cut,
            watches,
            faulted,
            log_appends,
        });
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let mut server = Self {
            addr,
            shared,
            task: None,
        };
        server.serve(listener);
        server
    }

    fn serve(&mut self, listener: TcpListener) {
        let collection = get(list_or_watch).post(create);
        let collection_all = collection.clone();
        let item = get(get_one).put(replace).patch(patch).delete(delete);
        let app = Router::new()
            .route("/api/v1/namespaces/{ns}/pods/{name}/log", get(pod_log))
            .route("/api/v1/namespaces/{ns}/{resource}", collection.clone())
            .route("/api/v1/namespaces/{ns}/{resource}/{name}", item.clone())
            .route(
                "/apis/{group}/{version}/namespaces/{ns}/{resource}",
                collection,
            )
            .route(
                "/apis/{group}/{version}/namespaces/{ns}/{resource}/{name}",
                item.clone(),
            )
            // Cluster-scoped objects (Volcano's Queues): kept under the namespace "".
            .route("/apis/{group}/{version}/{resource}", collection_all)
            .route("/apis/{group}/{version}/{resource}/{name}", item)
            .layer(axum::middleware::from_fn_with_state(
                self.shared.clone(),
                admit,
            ))
            .with_state(self.shared.clone());
        // Connections are served inside this task's JoinSet, so stopping the task drops
        // every one of them, as a real API server restart does.
        self.task = Some(tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        // As Go's net/http (and so the real API server) does.
                        let _ = stream.set_nodelay(true);
                        let service = hyper_util::service::TowerToHyperService::new(app.clone());
                        connections.spawn(async move {
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                                .await;
                        });
                    }
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
        }));
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kube client of this server, as a component's would be of a cluster's (plain
    /// HTTP, no credentials).
    #[cfg(feature = "kube")]
    pub fn client(&self) -> kube::Client {
        let url = self.url().parse().expect("the server's URL");
        kube::Client::try_from(kube::Config::new(url)).expect("a kube client")
    }

    /// Writes a kubeconfig whose current context is this server (no credentials), with
    /// `namespace` as the context's namespace when given.
    pub fn write_kubeconfig(&self, path: &std::path::Path, namespace: Option<&str>) {
        let namespace = namespace
            .map(|n| format!(", namespace: {n}"))
            .unwrap_or_default();
        let text = format!(
            "apiVersion: v1\nkind: Config\n\
             clusters: [{{name: test, cluster: {{server: \"{}\"}}}}]\n\
             users: [{{name: test, user: {{}}}}]\n\
             contexts: [{{name: test, context: {{cluster: test, user: test{namespace}}}}}]\n\
             current-context: test\n",
            self.url()
        );
        std::fs::write(path, text).expect("write the kubeconfig");
    }

    /// Stops serving: open connections drop, new ones are refused. State is kept.
    pub async fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
        self.cut_watches();
    }

    /// Serves again on the same port, with the state it had (an API server restart).
    pub async fn restart(&mut self) {
        self.stop().await;
        let listener = TcpListener::bind(self.addr)
            .await
            .expect("rebind the same port");
        self.serve(listener);
    }

    /// Stores `object` as if a client created it; returns it with its metadata.
    ///
    /// Panics when a real API server would refuse the object: tests put only what could
    /// exist in a cluster.
    pub fn create(&self, resource: &str, namespace: &str, mut object: Value) -> Value {
        if let Err(invalid) = crate::validation::admit(resource, &mut object) {
            panic!(
                "a real API server refuses this object: {}",
                invalid.message()
            );
        }
        let mut store = self.shared.lock();
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let key = Key::new(resource, namespace, &name);
        insert(&mut store, &self.shared.events, key, object, "ADDED")
    }

    /// The stored object.
    pub fn get(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        self.shared
            .lock()
            .objects
            .get(&Key::new(resource, namespace, name))
            .cloned()
    }

    /// Every stored object of `resource` in `namespace`.
    pub fn list(&self, resource: &str, namespace: &str) -> Vec<Value> {
        self.shared
            .lock()
            .objects
            .iter()
            .filter(|(k, _)| k.resource == resource && k.namespace == namespace)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Changes a stored object as a controller would (new resourceVersion, MODIFIED event).
    /// Panics, like [`ApiServer::create`], on a change a real API server would refuse.
    pub fn modify(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
        change: impl FnOnce(&mut Value),
    ) {
        let mut store = self.shared.lock();
        let key = Key::new(resource, namespace, name);
        let mut object = store
            .objects
            .get(&key)
            .cloned()
            .expect("object to modify exists");
        change(&mut object);
        if let Err(invalid) = crate::validation::admit(resource, &mut object) {
            panic!(
                "a real API server refuses this change: {}",
                invalid.message()
            );
        }
        insert(&mut store, &self.shared.events, key, object, "MODIFIED");
    }

    /// Deletes a stored object (DELETED event).
    pub fn delete(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        let mut store = self.shared.lock();
        remove(
            &mut store,
            &self.shared.events,
            &Key::new(resource, namespace, name),
        )
    }

    /// Appends `text` to the main container's log of pod `name` (creating the log).
    pub fn append_log(&self, namespace: &str, name: &str, text: &str) {
        self.append_container_log(namespace, name, MAIN_CONTAINER, text);
    }

    /// Appends `text` to the log of `container` of pod `name` (creating the log).
    pub fn append_container_log(&self, namespace: &str, name: &str, container: &str, text: &str) {
        let key = (Key::new("pods", namespace, name), container.to_string());
        let mut store = self.shared.lock();
        let log = store.logs.entry(key.clone()).or_default();
        let mut at_line_start = log.is_empty() || log.ends_with('\n');
        log.push_str(text);
        let now = jiff::Timestamp::now().to_string();
        let stamped = stamp(text, &mut at_line_start, &now);
        store
            .stamped_logs
            .entry(key.clone())
            .or_default()
            .push_str(&stamped);
        drop(store);
        let _ = self.shared.log_appends.send((key, Some(text.to_string())));
    }

    /// Ends every follower of pod `name`'s main container log, after what was appended
    /// before, as the container's exit does.
    pub fn end_log(&self, namespace: &str, name: &str) {
        let key = (
            Key::new("pods", namespace, name),
            MAIN_CONTAINER.to_string(),
        );
        self.shared.lock().ended_logs.insert(key.clone());
        let _ = self.shared.log_appends.send((key, None));
    }

    /// Ends every open watch and followed log, as a load balancer or a network blip would.
    pub fn cut_watches(&self) {
        self.shared.cut.send_modify(|g| *g += 1);
    }

    /// Forgets the event history: a watch from any earlier resourceVersion gets 410 Gone.
    pub fn compact(&self) {
        let mut store = self.shared.lock();
        store.history.clear();
        store.compacted_below = store.rv + 1;
    }

    /// Answers every request with this status (401 or 403), or serves normally (`None`).
    pub fn deny(&self, code: Option<u16>) {
        self.fault(code.map(Fault::Deny));
    }

    /// Answers every request with `fault` from now on, or serves normally (`None`).
    pub fn fault(&self, fault: Option<Fault>) {
        self.shared.lock().fault = fault;
    }

    /// An API server restart (every connection dropped) that answers `fault` from its
    /// first request on, as a restarted API server whose caches fill refuses for a while.
    pub async fn restart_with(&mut self, fault: Fault) {
        self.stop().await;
        self.fault(Some(fault));
        self.restart().await;
    }

    /// Returns once `n` requests in all have been answered by a fault, while `client`
    /// (what waits on this server) goes on; panics with its outcome if it ends first.
    pub async fn faulted_while<T: std::fmt::Debug>(&self, n: usize, client: &mut JoinHandle<T>) {
        tokio::select! {
            () = self.faulted(n) => {}
            ended = client => panic!("it ended during the fault: {ended:?}"),
        }
    }

    /// Returns once `n` requests in all have been answered by a fault (no clock).
    pub async fn faulted(&self, n: usize) {
        let mut count = self.shared.faulted.subscribe();
        let _ = count.wait_for(|c| *c >= n).await;
    }

    /// How many requests a fault has answered so far.
    pub fn faulted_count(&self) -> usize {
        *self.shared.faulted.borrow()
    }

    /// Refuses every create as 422 Invalid with `message` (`None`: accept again).
    pub fn reject_creates(&self, message: Option<&str>) {
        self.shared.lock().invalid = message.map(str::to_string);
    }

    /// Refuses creates of `resource` alone as 422 Invalid with `message`.
    pub fn reject_creates_of(&self, resource: &str, message: &str) {
        self.shared
            .lock()
            .refused
            .insert(resource.to_string(), message.to_string());
    }

    /// Refuses patches of `resource` as 422 Invalid with `message`, as an admission
    /// webhook may (`None`: accepts them again).
    pub fn reject_patches_of(&self, resource: &str, message: Option<&str>) {
        let mut store = self.shared.lock();
        match message {
            Some(message) => {
                store
                    .refused_patches
                    .insert(resource.to_string(), message.to_string());
            }
            None => {
                store.refused_patches.remove(resource);
            }
        }
    }

    /// Every request so far, with the response bytes sent for each.
    pub fn requests(&self) -> Vec<Request> {
        let store = self.shared.lock();
        store
            .requests
            .iter()
            .zip(&store.sent)
            .map(|(r, sent)| Request {
                bytes_sent: sent.load(Ordering::Relaxed),
                ..r.clone()
            })
            .collect()
    }

    /// Returns once `n` watches have started streaming in all (the server's own
    /// signal: tests need no clock to know a client is watching).
    pub async fn watches_started(&self, n: usize) {
        let mut count = self.shared.watches.subscribe();
        let _ = count.wait_for(|c| *c >= n).await;
    }

    /// Returns the object once it exists and `accept` holds for it, woken by the
    /// server's own events (no clock).
    /// From now on, a Framework whose attempt completed (its status says so) has its pods
    /// deleted at once, as FrameworkController deletes them: a pod with finalizers is
    /// then being deleted until they are taken away.
    pub fn delete_pods_of_completed_attempts(&self) {
        self.shared.lock().delete_completed_pods = true;
    }

    /// Waits until object `name` of `resource` is gone (deleted, its finalizers done).
    pub async fn wait_gone(&self, resource: &str, namespace: &str, name: &str) {
        let key = Key::new(resource, namespace, name);
        let mut events = self.shared.events.subscribe(resource);
        while self.shared.lock().objects.contains_key(&key) {
            match events.recv().await {
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => {
                    panic!("the API server ended while waiting for {resource}/{name} to go")
                }
            }
        }
    }

    pub async fn wait_for(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
        accept: impl Fn(&Value) -> bool,
    ) -> Value {
        let key = Key::new(resource, namespace, name);
        let mut events = self.shared.events.subscribe(resource);
        loop {
            if let Some(object) = self.shared.lock().objects.get(&key)
                && accept(object)
            {
                return object.clone();
            }
            loop {
                match events.recv().await {
                    Ok(e) if e.key == key => break,
                    Ok(_) => continue,
                    Err(broadcast::error::RecvError::Lagged(_)) => break,
                    Err(broadcast::error::RecvError::Closed) => {
                        panic!("the API server ended while waiting for {resource}/{name}")
                    }
                }
            }
        }
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.lock().rv
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.cut_watches();
    }
}

fn insert(
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
fn remove(store: &mut Store, events: &Channels, key: &Key) -> Option<Value> {
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
fn remove_one(store: &mut Store, events: &Channels, key: &Key) -> Option<Value> {
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

/// A Kubernetes `Status` failure.
struct Failure {
    code: u16,
    reason: &'static str,
    message: String,
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let body = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": self.message, "reason": self.reason, "code": self.code,
        });
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (code, axum::Json(body)).into_response()
    }
}

fn status(code: u16, reason: &'static str, message: String) -> Response {
    Failure {
        code,
        reason,
        message,
    }
    .into_response()
}

/// Every request passes here: it is recorded, and answered with the blanket denial
/// when one is set.
async fn admit(
    State(shared): State<Arc<Shared>>,
    request: axum::extract::Request,
    next: Next,
) -> Response {
    let (method, uri) = (request.method().clone(), request.uri().clone());
    let bearer = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    let sent = Arc::new(AtomicU64::new(0));
    let fault = {
        let mut store = shared.lock();
        store.requests.push(Request {
            method: method.to_string(),
            uri: uri.to_string(),
            bytes_sent: 0,
            bearer,
        });
        store.sent.push(sent.clone());
        store.fault
    };
    let answer = |response: Response| {
        shared.faulted.send_modify(|n| *n += 1);
        response
    };
    match fault {
        Some(Fault::Slow(delay)) => {
            tokio::time::sleep(delay).await;
            next.run(request).await
        }
        None => {
            let response = next.run(request).await;
            response.map(|body| {
                let counted = body.into_data_stream().inspect(move |chunk| {
                    if let Ok(chunk) = chunk {
                        sent.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                    }
                });
                Body::from_stream(counted)
            })
        }
        Some(Fault::Deny(401)) => answer(status(401, "Unauthorized", "Unauthorized".to_string())),
        Some(Fault::Deny(code)) => answer(status(
            code,
            "Forbidden",
            format!(
                "{method} {} is forbidden: User \"system:serviceaccount:test:job\" cannot do it",
                uri.path()
            ),
        )),
        Some(Fault::TooManyRequests { retry_after }) => {
            // As the API server's priority and fairness answers: the header and the
            // Status's details both say when to come back.
            let body = json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "message": "Too many requests, please try again later.",
                "reason": "TooManyRequests", "code": 429,
                "details": {"retryAfterSeconds": retry_after},
            });
            let mut response = (StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response();
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, retry_after.into());
            answer(response)
        }
        Some(Fault::ServerError(code)) => answer(status(
            code,
            if code == 503 {
                "ServiceUnavailable"
            } else {
                "InternalError"
            },
            "the server is not ready to answer (an etcd leader election, say)".to_string(),
        )),
    }
}

/// What the server answers every request with while it is set ([`ApiServer::fault`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// 401 Unauthorized or 403 Forbidden (an API server whose authenticator or
    /// authorizer caches are still filling after a restart answers so for a while).
    Deny(u16),
    /// 429 Too Many Requests with `Retry-After` (and the Status's `retryAfterSeconds`).
    TooManyRequests { retry_after: u32 },
    /// A 5xx Status (500, 503, …).
    ServerError(u16),
    /// Every answer comes this late.
    Slow(Duration),
}

type Params = HashMap<String, String>;

fn collection_key(params: &Params) -> (String, String) {
    (
        params.get("resource").cloned().unwrap_or_default(),
        params.get("ns").cloned().unwrap_or_default(),
    )
}

fn item_key(params: &Params) -> Key {
    let (resource, namespace) = collection_key(params);
    Key {
        resource,
        namespace,
        name: params.get("name").cloned().unwrap_or_default(),
    }
}

/// The fields a field selector may name, as the real API server supports them: every
/// resource's `metadata.name` and `metadata.namespace`, and pods' `status.phase` and
/// `spec.nodeName` (among others not modelled).
fn field_supported(resource: &str, field: &str) -> bool {
    matches!(field, "metadata.name" | "metadata.namespace")
        || (resource == "pods" && matches!(field, "status.phase" | "spec.nodeName"))
}

/// A field selector's terms: `(field, value, equal)` for `f=v`, `f==v` and `f!=v`.
fn field_terms(selector: &str) -> Vec<(&str, &str, bool)> {
    selector
        .split(',')
        .filter(|t| !t.is_empty())
        .map(|term| {
            if let Some((f, v)) = term.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, v, true)
            } else {
                let (f, v) = term.split_once('=').unwrap_or((term, ""));
                (f, v, true)
            }
        })
        .collect()
}

/// The first field of `query`'s field selector that `resource` cannot be selected by.
fn unsupported_field(resource: &str, query: &Params) -> Option<String> {
    let selector = query.get("fieldSelector")?;
    field_terms(selector)
        .into_iter()
        .find(|(f, _, _)| !field_supported(resource, f))
        .map(|(f, _, _)| f.to_string())
}

/// Field selectors (`metadata.name=x,status.phase!=Running`) and `a=b,c` (label
/// present) label selectors.
fn selected(object: &Value, query: &Params) -> bool {
    let field_ok = query.get("fieldSelector").is_none_or(|sel| {
        field_terms(sel).into_iter().all(|(field, v, equal)| {
            let pointer = format!("/{}", field.replace('.', "/"));
            let actual = object
                .pointer(&pointer)
                .and_then(Value::as_str)
                .unwrap_or("");
            (actual == v) == equal
        })
    });
    let label_ok = query.get("labelSelector").is_none_or(|sel| {
        let labels = &object["metadata"]["labels"];
        sel.split(',')
            .filter(|t| !t.is_empty())
            .all(|term| match term.split_once('=') {
                Some((k, v)) => labels[k] == v,
                None => !labels[term].is_null(),
            })
    });
    field_ok && label_ok
}

fn list_kind(resource: &str, items: &[Value]) -> String {
    match items.first().and_then(|o| o["kind"].as_str()) {
        Some(kind) => format!("{kind}List"),
        None => format!("{resource}List"),
    }
}

async fn list_or_watch(
    State(shared): State<Arc<Shared>>,
    Path(params): Path<Params>,
    Query(query): Query<Params>,
) -> Response {
    let (resource, namespace) = collection_key(&params);
    if let Some(field) = unsupported_field(&resource, &query) {
        return status(
            400,
            "BadRequest",
            format!("field label not supported: {field}"),
        );
    }
    let watching = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
    if !watching {
        let store = shared.lock();
        let items: Vec<Value> = store
            .objects
            .iter()
            .filter(|(k, _)| k.resource == resource && k.namespace == namespace)
            .map(|(_, o)| o.clone())
            .filter(|o| selected(o, &query))
            .collect();
        let body = json!({
            "kind": list_kind(&resource, &items), "apiVersion": "v1",
            "metadata": {"resourceVersion": store.rv.to_string()},
            "items": items,
        });
        return axum::Json(body).into_response();
    }
    watch_stream(shared, resource, namespace, query)
}

fn watch_stream(
    shared: Arc<Shared>,
    resource: String,
    namespace: String,
    query: Params,
) -> Response {
    let from: u64 = query
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_secs);
    // Subscribe before reading the history, so nothing falls between the two.
    let live = shared.events.subscribe(&resource);
    let mut cut = shared.cut.subscribe();
    cut.mark_unchanged();
    let matches = {
        let resource = resource.clone();
        let namespace = namespace.clone();
        let query = query.clone();
        move |e: &Event| -> Option<Bytes> {
            if e.key.resource != resource || e.key.namespace != namespace {
                return None;
            }
            e.line_for(&query)
        }
    };
    let backlog: Vec<(u64, Bytes)> = {
        let store = shared.lock();
        if from > 0 && from < store.compacted_below {
            let gone = json!({"type": "ERROR", "object": {
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("too old resource version: {from} ({})", store.compacted_below),
                "reason": "Expired", "code": 410}});
            return line_response(futures::stream::iter([line(&gone)]).boxed());
        }
        if from == 0 {
            store
                .objects
                .iter()
                .filter(|(k, o)| {
                    k.resource == resource && k.namespace == namespace && selected(o, &query)
                })
                .map(|(_, o)| (store.rv, line(&json!({"type": "ADDED", "object": o}))))
                .collect()
        } else {
            store
                .history
                .iter()
                .filter(|e| e.rv > from)
                .filter_map(|e| matches(e).map(|line| (e.rv, line)))
                .collect()
        }
    };
    let last_sent = backlog.iter().map(|(rv, _)| *rv).max().unwrap_or(from);
    shared.watches.send_modify(|c| *c += 1);
    let backlog = futures::stream::iter(backlog.into_iter().map(|(_, line)| line));
    let live = futures::stream::unfold((live, last_sent), move |(mut rx, last)| {
        let matches = matches.clone();
        async move {
            loop {
                match rx.recv().await {
                    Ok(e) if e.rv > last => {
                        if let Some(line) = matches(&e) {
                            return Some((line, (rx, e.rv)));
                        }
                    }
                    Ok(_) => continue,
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        }
    });
    let ends = async move {
        let cut = async {
            let _ = cut.changed().await;
        };
        match timeout {
            Some(t) => {
                let _ = tokio::time::timeout(t, cut).await;
            }
            None => cut.await,
        }
    };
    line_response(backlog.chain(live).take_until(Box::pin(ends)).boxed())
}

fn line(value: &Value) -> Bytes {
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

fn line_response(lines: futures::stream::BoxStream<'static, Bytes>) -> Response {
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(
            lines.map(Ok::<_, std::convert::Infallible>),
        ))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// `text`, each line begun with `time` and a space, as the kubelet's `timestamps=true`;
/// `at_line_start`: whether `text` begins a line (and after it, whether the next does).
fn stamp(text: &str, at_line_start: &mut bool, time: &str) -> String {
    let mut out = String::with_capacity(text.len() + 32);
    for piece in text.split_inclusive('\n') {
        if *at_line_start {
            out.push_str(time);
            out.push(' ');
        }
        out.push_str(piece);
        *at_line_start = piece.ends_with('\n');
    }
    out
}

/// `GET …/pods/{name}/log[?follow=true][&timestamps=true]`: the log so far, then
/// (following) what is appended until the log ends or the stream is cut; with
/// `timestamps`, each line begun with the time it was appended.
async fn pod_log(
    State(shared): State<Arc<Shared>>,
    Path(params): Path<Params>,
    Query(query): Query<Params>,
) -> Response {
    let pod = Key::new(
        "pods",
        params.get("ns").map_or("", String::as_str),
        params.get("name").map_or("", String::as_str),
    );
    // Our pods have two containers: the API server asks which one.
    let Some(container) = query.get("container").cloned() else {
        return status(
            400,
            "BadRequest",
            format!(
                "a container name must be specified for pod {}, choose one of: [{INIT_CONTAINER} {MAIN_CONTAINER}]",
                pod.name
            ),
        );
    };
    let key = (pod, container);
    let follow = matches!(query.get("follow").map(String::as_str), Some("true" | "1"));
    let timestamps = matches!(
        query.get("timestamps").map(String::as_str),
        Some("true" | "1")
    );
    let appends = shared.log_appends.subscribe();
    let mut cut = shared.cut.subscribe();
    cut.mark_unchanged();
    let (so_far, ended) = {
        let store = shared.lock();
        let logs = match timestamps {
            true => &store.stamped_logs,
            false => &store.logs,
        };
        let Some(so_far) = logs.get(&key).cloned() else {
            // As the kubelet answers: a pod that is not there is a 404; one whose
            // container has not started (its init container runs) a 400.
            if !store.objects.contains_key(&key.0) {
                return not_found(&key.0);
            }
            return status(
                400,
                "BadRequest",
                format!(
                    "container \"{}\" in pod \"{}\" is waiting to start: PodInitializing",
                    key.1, key.0.name
                ),
            );
        };
        (so_far, store.ended_logs.contains(&key))
    };
    let at_line_start = so_far.is_empty() || so_far.ends_with('\n');
    let head = futures::stream::iter([Bytes::from(so_far)]);
    // Following an ended container's log gives what it wrote, then ends, as the kubelet.
    if !follow || ended {
        return line_response(head.boxed());
    }
    shared.watches.send_modify(|c| *c += 1);
    let state = (appends, key, at_line_start);
    let tail = futures::stream::unfold(
        state,
        move |(mut appends, key, mut at_line_start)| async move {
            loop {
                match appends.recv().await {
                    Ok((k, Some(text))) if k == key => {
                        let text = match timestamps {
                            true => {
                                let now = jiff::Timestamp::now().to_string();
                                stamp(&text, &mut at_line_start, &now)
                            }
                            false => text,
                        };
                        return Some((Bytes::from(text), (appends, key, at_line_start)));
                    }
                    Ok((k, None)) if k == key => return None,
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        },
    );
    let ends = async move {
        let _ = cut.changed().await;
    };
    line_response(head.chain(tail).take_until(Box::pin(ends)).boxed())
}

async fn get_one(State(shared): State<Arc<Shared>>, Path(params): Path<Params>) -> Response {
    let key = item_key(&params);
    match shared.lock().objects.get(&key) {
        Some(o) => axum::Json(o.clone()).into_response(),
        None => not_found(&key),
    }
}

/// 409: a write named a resourceVersion that is no longer the object's.
fn stale(key: &Key) -> Response {
    status(
        409,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on {} \"{}\": the object has been modified; please apply your changes to the latest version and try again",
            key.resource, key.name
        ),
    )
}

fn not_found(key: &Key) -> Response {
    status(
        404,
        "NotFound",
        format!("{} \"{}\" not found", key.resource, key.name),
    )
}

fn unprocessable(invalid: &crate::validation::Invalid) -> Response {
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        axum::Json(invalid.status()),
    )
        .into_response()
}

fn parse_body(body: &Bytes) -> Result<Value, Failure> {
    serde_json::from_slice(body).map_err(|e| Failure {
        code: 400,
        reason: "BadRequest",
        message: format!("invalid body: {e}"),
    })
}

async fn create(
    State(shared): State<Arc<Shared>>,
    Path(params): Path<Params>,
    body: Bytes,
) -> Response {
    let object = match parse_body(&body) {
        Ok(o) => o,
        Err(r) => return r.into_response(),
    };
    let (resource, namespace) = collection_key(&params);
    let Some(name) = object["metadata"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .map(str::to_string)
    else {
        return status(422, "Invalid", "metadata.name: Required value".to_string());
    };
    let mut object = object;
    if let Err(invalid) = crate::validation::admit(&resource, &mut object) {
        return unprocessable(&invalid);
    }
    let key = Key {
        resource,
        namespace,
        name,
    };
    let mut store = shared.lock();
    if let Some(message) = store
        .invalid
        .clone()
        .or_else(|| store.refused.get(&key.resource).cloned())
    {
        return status(422, "Invalid", message);
    }
    if store.objects.contains_key(&key) {
        return status(
            409,
            "AlreadyExists",
            format!("{} \"{}\" already exists", key.resource, key.name),
        );
    }
    object["metadata"]["resourceVersion"] = Value::Null;
    let created = insert(&mut store, &shared.events, key, object, "ADDED");
    (StatusCode::CREATED, axum::Json(created)).into_response()
}

async fn replace(
    State(shared): State<Arc<Shared>>,
    Path(params): Path<Params>,
    body: Bytes,
) -> Response {
    let mut object = match parse_body(&body) {
        Ok(o) => o,
        Err(r) => return r.into_response(),
    };
    let key = item_key(&params);
    if let Err(invalid) = crate::validation::admit(&key.resource, &mut object) {
        return unprocessable(&invalid);
    }
    let mut store = shared.lock();
    let Some(current) = store.objects.get(&key) else {
        return not_found(&key);
    };
    let sent = object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default();
    if !sent.is_empty() && current["metadata"]["resourceVersion"] != sent {
        return stale(&key);
    }
    let updated = insert(&mut store, &shared.events, key, object, "MODIFIED");
    axum::Json(updated).into_response()
}

/// RFC 7386 JSON merge patch.
fn merge(target: &mut Value, patch: &Value) {
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

async fn patch(
    State(shared): State<Arc<Shared>>,
    Path(params): Path<Params>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !(content_type.starts_with("application/merge-patch+json")
        || content_type.starts_with("application/strategic-merge-patch+json"))
    {
        return status(
            415,
            "UnsupportedMediaType",
            format!("the test server does not support patch type {content_type:?}"),
        );
    }
    let patch = match parse_body(&body) {
        Ok(p) => p,
        Err(r) => return r.into_response(),
    };
    let key = item_key(&params);
    let mut store = shared.lock();
    if let Some(message) = store.refused_patches.get(&key.resource).cloned() {
        return status(422, "Invalid", message);
    }
    let Some(mut object) = store.objects.get(&key).cloned() else {
        return not_found(&key);
    };
    // A patch that names a resourceVersion applies only to that version, as the real
    // API server's optimistic concurrency.
    if let Some(sent) = patch["metadata"]["resourceVersion"].as_str()
        && object["metadata"]["resourceVersion"].as_str() != Some(sent)
    {
        return stale(&key);
    }
    merge(&mut object, &patch);
    if let Err(invalid) = crate::validation::admit(&key.resource, &mut object) {
        return unprocessable(&invalid);
    }
    let going = !object["metadata"]["deletionTimestamp"].is_null()
        && object["metadata"]["finalizers"]
            .as_array()
            .is_none_or(|f| f.is_empty());
    let updated = insert(&mut store, &shared.events, key.clone(), object, "MODIFIED");
    // Its last finalizer taken away, an object being deleted goes.
    if going {
        remove_one(&mut store, &shared.events, &key);
    }
    axum::Json(updated).into_response()
}

async fn delete(
    State(shared): State<Arc<Shared>>,
    Path(params): Path<Params>,
    body: axum::body::Bytes,
) -> Response {
    let key = item_key(&params);
    let mut store = shared.lock();
    // DeleteOptions' preconditions: the object's UID and resourceVersion must be these.
    let options: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if let Some(object) = store.objects.get(&key) {
        for field in ["uid", "resourceVersion"] {
            let wanted = &options["preconditions"][field];
            if wanted.is_string() && *wanted != object["metadata"][field] {
                return status(
                    409,
                    "Conflict",
                    format!(
                        "Precondition failed: {field} in precondition: {wanted}, {field} in object meta: {}",
                        object["metadata"][field]
                    ),
                );
            }
        }
    }
    match remove(&mut store, &shared.events, &key) {
        Some(object) => axum::Json(object).into_response(),
        None => not_found(&key),
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

    #[test]
    fn selectors() {
        let object = json!({"metadata": {"name": "x", "namespace": "n", "labels": {"a": "b"}}});
        let q = |k: &str, v: &str| Params::from([(k.to_string(), v.to_string())]);
        assert!(selected(&object, &q("fieldSelector", "metadata.name=x")));
        assert!(!selected(&object, &q("fieldSelector", "metadata.name=y")));
        assert!(selected(&object, &q("labelSelector", "a=b")));
        assert!(selected(&object, &q("labelSelector", "a")));
        assert!(!selected(&object, &q("labelSelector", "a=c")));
        let pod = json!({"metadata": {"name": "p"}, "status": {"phase": "Pending"}});
        assert!(selected(&pod, &q("fieldSelector", "status.phase=Pending")));
        assert!(selected(&pod, &q("fieldSelector", "status.phase!=Running")));
        assert!(!selected(
            &pod,
            &q("fieldSelector", "status.phase==Running")
        ));
        assert_eq!(
            unsupported_field("pods", &q("fieldSelector", "status.phase=Pending")),
            None
        );
        assert_eq!(
            unsupported_field("configmaps", &q("fieldSelector", "status.phase=Pending")),
            Some("status.phase".to_string())
        );
    }

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
