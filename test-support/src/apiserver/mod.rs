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

mod answers;
mod events;
mod faults;
mod handlers;
mod key;
mod logs;
mod selectors;
mod shared;
mod store;
mod watch;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::get;
use futures::StreamExt;
use pai_contract::framework::MAIN_CONTAINER;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

pub use faults::Fault;
pub use key::Key;
pub use store::Request;

use shared::Shared;

/// The server. Dropping it stops it.
pub struct ApiServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: Option<JoinHandle<()>>,
}

impl ApiServer {
    /// Starts on a free loopback port.
    pub async fn start() -> Self {
        let shared = Arc::new(Shared::new());
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
        let collection = get(handlers::list_or_watch).post(handlers::create);
        let collection_all = collection.clone();
        let item = get(handlers::get_one)
            .put(handlers::replace)
            .patch(handlers::patch)
            .delete(handlers::delete);
        let app = Router::new()
            .route(
                "/api/v1/namespaces/{ns}/pods/{name}/log",
                get(logs::pod_log),
            )
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
        store::insert(&mut store, &self.shared.events, key, object, "ADDED")
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
        store::insert(&mut store, &self.shared.events, key, object, "MODIFIED");
    }

    /// Deletes a stored object (DELETED event).
    pub fn delete(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        let mut store = self.shared.lock();
        store::remove(
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
        logs::append(&self.shared, key, text);
    }

    /// Ends every follower of pod `name`'s main container log, after what was appended
    /// before, as the container's exit does.
    pub fn end_log(&self, namespace: &str, name: &str) {
        let key = (
            Key::new("pods", namespace, name),
            MAIN_CONTAINER.to_string(),
        );
        logs::end(&self.shared, key);
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

    /// Returns the object once it exists and `accept` holds for it, woken by the
    /// server's own events (no clock).
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

/// Every request passes here: it is recorded, and answered by the fault when one is set
/// ([`Fault::refusal`]; a slow one serves, late).
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
    if let Some(refusal) = fault.and_then(|f| f.refusal(&method, uri.path())) {
        shared.faulted.send_modify(|n| *n += 1);
        return refusal;
    }
    if let Some(Fault::Slow(delay)) = fault {
        tokio::time::sleep(delay).await;
        return next.run(request).await;
    }
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
