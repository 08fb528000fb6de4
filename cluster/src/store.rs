//! The server's copy of the Frameworks it manages, kept by one watch of the API server
//! and read by every route, page, `/metrics` scrape, job watch, the peer-table
//! publisher and the event recorder: the API server's load grows with the jobs, not
//! with the readers (the informer of client-go, the reflector of kube-rs).
//!
//! An informer of its own rather than kube's `reflector`: the server must know when
//! its copy is current (kube 5's watcher resumes a watch without a word, so a copy that
//! was failing would never be known to be current again), and hand every change to the
//! job watches and to a writer waiting to read its own write.
//!
//! The loop: list every Framework with rest-lite's label (in pages), then watch from
//! the list's resourceVersion; a watch that ends or fails is resumed from the last
//! version seen (bookmarks, on by default, keep it fresh; a failure first waits a
//! back-off of 0.5 s doubling to 30 s, jittered), and one whose version is too old
//! (410 Gone) lists again. A list costs the API server most: it happens once at the
//! start and after a 410 only.
//!
//! The copy keeps each Framework without its `metadata.managedFields` (the API server's
//! record of which manager set which field, several KB per object that no reader here
//! looks at), as client-go users and kube-rs' reflector examples strip them.
//!
//! Health: [`Health::Listing`] until the first list completes (reads answer 503 with the
//! reason); then [`Health::Synced`] while the watch runs; [`Health::Failing`] from the
//! first failure until a list or a watch succeeds again. A failing copy is served for
//! [`KubeStore::stale_limit`] (30 s by default) and then refused (503) until it is
//! current again: no reader gets data older than that bound from a replica that lost
//! its watch.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::{Api, ResourceExt};
use tokio::sync::{broadcast, watch};

use pai_contract::backoff::{self, Backoff};
use pai_contract::{Framework, meta};

/// How long a failing copy is still served.
pub const DEFAULT_STALE_LIMIT: Duration = Duration::from_secs(30);
/// Objects per page of a list (as client-go's reflector asks).
const LIST_PAGE: u32 = 500;
/// A watch's server-side timeout: it ends then and is resumed, as client-go's does.
const WATCH_SECONDS: u32 = 290;

/// A change of the copy, as every subscriber sees it.
#[derive(Clone, Debug)]
pub enum Change {
    /// Framework created or changed (its state now).
    Applied(Arc<Framework>),
    /// Framework deleted (its last state).
    Deleted(Arc<Framework>),
}

impl Change {
    /// The Framework it is about, as it is now (or was last).
    pub fn framework(&self) -> &Arc<Framework> {
        match self {
            Change::Applied(framework) | Change::Deleted(framework) => framework,
        }
    }
}

/// How current the copy is.
#[derive(Clone, Debug)]
pub enum Health {
    /// The first list has not completed; `error`: why the last try failed.
    Listing { error: Option<String> },
    /// The watch runs.
    Synced,
    /// Listed once; the list or watch fails since `since`.
    Failing { since: Instant, error: String },
}

/// Why the copy cannot answer a read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotServing {
    /// The first list has not completed (and why, if it failed).
    NotListed(Option<String>),
    /// The watch fails for longer than the stale limit.
    Stale { seconds: u64, error: String },
}

impl std::fmt::Display for NotServing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotServing::NotListed(None) => {
                write!(
                    f,
                    "the server is still reading the jobs from the API server"
                )
            }
            NotServing::NotListed(Some(error)) => write!(
                f,
                "the server has not read the jobs from the API server yet: {error}"
            ),
            NotServing::Stale { seconds, error } => write!(
                f,
                "the server's copy of the jobs is out of date: its watch of the API server fails for {seconds} s ({error})"
            ),
        }
    }
}

struct Shared {
    objects: RwLock<HashMap<String, Arc<Framework>>>,
    changes: broadcast::Sender<Change>,
    health: watch::Sender<Health>,
    stale_limit: Duration,
    task: tokio::task::AbortHandle,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A handle on the copy; clones share it. The watch stops when the last handle goes.
#[derive(Clone)]
pub struct KubeStore(Arc<Shared>);

/// What the store tells its owner of the API server's answers.
pub trait ApiVoice: Send + Sync + 'static {
    /// A request was answered: this server's identity is allowed.
    fn answered(&self);
    /// A failed request, in words for readers.
    fn explain(&self, error: kube::Error) -> String;
}

type Explain = Arc<dyn ApiVoice>;

impl KubeStore {
    /// Starts watching the Frameworks with rest-lite's label in `api`'s namespace;
    /// `voice` words a failure for readers.
    pub fn start(api: Api<Framework>, stale_limit: Duration, explain: Explain) -> Self {
        let (changes, _) = broadcast::channel(4096);
        let (health, _) = watch::channel(Health::Listing { error: None });
        let objects = RwLock::new(HashMap::new());
        let (ready, started) = tokio::sync::oneshot::channel::<std::sync::Weak<Shared>>();
        let task = tokio::spawn(async move {
            let Ok(shared) = started.await else { return };
            Informer {
                api,
                shared,
                explain,
                backoff: std::sync::Mutex::new(Backoff::new(backoff::SERVER)),
            }
            .run()
            .await;
        });
        let shared = Arc::new(Shared {
            objects,
            changes,
            health,
            stale_limit,
            task: task.abort_handle(),
        });
        let _ = ready.send(Arc::downgrade(&shared));
        Self(shared)
    }

    /// Whether reads may be answered from the copy now.
    pub fn serving(&self) -> Result<(), NotServing> {
        match &*self.0.health.borrow() {
            Health::Synced => Ok(()),
            Health::Listing { error } => Err(NotServing::NotListed(error.clone())),
            Health::Failing { since, error } => {
                let failing = since.elapsed();
                if failing <= self.0.stale_limit {
                    Ok(())
                } else {
                    Err(NotServing::Stale {
                        seconds: failing.as_secs(),
                        error: error.clone(),
                    })
                }
            }
        }
    }

    /// How long a failing copy is still served.
    pub fn stale_limit(&self) -> Duration {
        self.0.stale_limit
    }

    /// Waits until the first list completed.
    pub async fn listed(&self) {
        let mut health = self.0.health.subscribe();
        let _ = health
            .wait_for(|h| !matches!(h, Health::Listing { .. }))
            .await;
    }

    pub fn get(&self, name: &str) -> Option<Arc<Framework>> {
        self.read().get(name).cloned()
    }

    /// Every Framework in the copy.
    pub fn all(&self) -> Vec<Arc<Framework>> {
        self.read().values().cloned().collect()
    }

    /// The Frameworks `keep` keeps.
    pub fn filter(&self, keep: impl Fn(&Framework) -> bool) -> Vec<Arc<Framework>> {
        self.read().values().filter(|f| keep(f)).cloned().collect()
    }

    /// Announces Framework `name` again, unchanged, to every subscriber: what is shown
    /// of it changed beside it (why it waits, see [`crate::admission`]).
    pub fn nudge(&self, name: &str) {
        if let Some(framework) = self.get(name) {
            let _ = self.0.changes.send(Change::Applied(framework));
        }
    }

    /// Runs `controller` over the copy on the one controller runtime: subscribed now,
    /// it looks at every Framework once the first list is in, then at every change.
    pub async fn control<R>(&self, controller: R)
    where
        R: pai_backend::controller::Reconcile<Change = Change>,
    {
        let changes = self.subscribe();
        self.listed().await;
        let changes = pai_backend::controller::from_broadcast(changes, |change| change);
        pai_backend::controller::run(controller, changes).await;
    }

    /// Every Framework of the copy, each as a change (what a controller looks at when
    /// it starts, and after it fell behind).
    pub fn all_changes(&self) -> Vec<Change> {
        self.all().into_iter().map(Change::Applied).collect()
    }

    /// Every change from now on. A subscriber that falls more than 4,096 changes
    /// behind is told it lagged, and reads the copy again.
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.0.changes.subscribe()
    }

    /// Waits (at most `bound`) until the copy holds what `done` looks for, checking
    /// the copy at once and after every change. `changes` was subscribed before the
    /// write it waits for, so no change in between is missed. Returns whether it did.
    pub async fn wait_until(
        &self,
        mut changes: broadcast::Receiver<Change>,
        bound: Duration,
        done: impl Fn(Option<&Framework>) -> bool,
        name: &str,
    ) -> bool {
        let check = || done(self.get(name).as_deref());
        let waited = tokio::time::timeout(bound, async {
            loop {
                if check() {
                    return;
                }
                match changes.recv().await {
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => {
                        std::future::pending::<()>().await;
                    }
                }
            }
        })
        .await;
        waited.is_ok()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<Framework>>> {
        // No code holding the lock panics; a poisoned lock still has a whole map.
        self.0.objects.read().unwrap_or_else(|p| p.into_inner())
    }
}

/// The loop that keeps the copy. It holds the copy weakly: when the last handle goes,
/// the loop ends with it (and is aborted anyway).
struct Informer {
    api: Api<Framework>,
    shared: std::sync::Weak<Shared>,
    explain: Explain,
    /// The one back-off ([`pai_contract::backoff::SERVER`]), reset once a list or watch
    /// starts.
    backoff: std::sync::Mutex<Backoff>,
}

/// Why a list or watch ended.
enum Interrupted {
    /// The API server failed or could not be reached: back off, then resume the watch
    /// from the last version seen (or list, if there was none).
    Failed(String),
    /// The watch's version is too old (410 Gone): list again now.
    Expired,
}

impl Informer {
    async fn run(self) {
        let selector = meta::managed_by_selector();
        // The version to resume watching from; `None`: list first.
        let mut version: Option<String> = None;
        loop {
            let result = match version.take() {
                None => self.list(&selector).await.map(|v| version = Some(v)),
                Some(mut from) => {
                    let watched = self.watch(&selector, &mut from).await;
                    // Resumed from where it got, unless the version expired.
                    if !matches!(watched, Err(Interrupted::Expired)) && !from.is_empty() {
                        version = Some(from);
                    }
                    watched
                }
            };
            match result {
                Ok(()) | Err(Interrupted::Expired) => {}
                Err(Interrupted::Failed(error)) => {
                    let Some(shared) = self.shared.upgrade() else {
                        return;
                    };
                    failing(&shared, error);
                    // Refused past its bound, the copy becomes current again by a list:
                    // a resumed watch answers before it delivers what changed meanwhile.
                    if matches!(&*shared.health.borrow(), Health::Failing { since, .. } if since.elapsed() > shared.stale_limit)
                    {
                        version = None;
                    }
                    drop(shared);
                    let delay = self
                        .backoff
                        .lock()
                        .map_or(backoff::SERVER.cap, |mut b| b.next_delay());
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    /// Lists every Framework (in pages), replaces the copy with them and tells the
    /// subscribers what changed. Returns the list's resourceVersion.
    async fn list(&self, selector: &str) -> Result<String, Interrupted> {
        let mut params = ListParams::default().labels(selector).limit(LIST_PAGE);
        let mut listed = HashMap::new();
        let version = loop {
            let page = self
                .api
                .list(&params)
                .await
                .map_err(|e| Interrupted::Failed(self.explain.explain(e)))?;
            self.answered();
            let version = page.metadata.resource_version.clone().unwrap_or_default();
            let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
            for framework in page.items {
                listed.insert(framework.name_any(), Arc::new(kept(framework)));
            }
            match next {
                Some(token) => params = params.continue_token(&token),
                None => break version,
            }
        };
        let Some(shared) = self.shared.upgrade() else {
            return Err(Interrupted::Failed("stopped".into()));
        };
        let previous = {
            let mut objects = shared.objects.write().unwrap_or_else(|p| p.into_inner());
            std::mem::replace(&mut *objects, listed.clone())
        };
        // Serving before the changes go out: a subscriber that falls behind on them
        // (more than the channel holds) reads the copy, which is whole already.
        current(&shared, listed.len());
        // What the list changed, as if it had been watched.
        for (name, framework) in &listed {
            let same = previous
                .get(name)
                .is_some_and(|p| p.resource_version() == framework.resource_version());
            if !same {
                let _ = shared.changes.send(Change::Applied(framework.clone()));
            }
        }
        for (name, framework) in previous {
            if !listed.contains_key(&name) {
                let _ = shared.changes.send(Change::Deleted(framework));
            }
        }
        Ok(version)
    }

    /// Watches from `version` (kept up to date with every event) until the watch
    /// fails or expires; a watch the API server ends is resumed at once.
    async fn watch(&self, selector: &str, version: &mut String) -> Result<(), Interrupted> {
        loop {
            let params = WatchParams::default()
                .labels(selector)
                .timeout(WATCH_SECONDS);
            let stream = self
                .api
                .watch(&params, version)
                .await
                .map_err(|e| Interrupted::Failed(self.explain.explain(e)))?;
            self.answered();
            if let Some(shared) = self.shared.upgrade() {
                let objects = shared.objects.read().map(|o| o.len()).unwrap_or_default();
                current(&shared, objects);
            }
            futures::pin_mut!(stream);
            loop {
                let event = match stream.try_next().await {
                    Ok(Some(event)) => event,
                    // Ended by the server (its timeout): resume.
                    Ok(None) => break,
                    Err(e) => return Err(Interrupted::Failed(self.explain.explain(e))),
                };
                let Some(shared) = self.shared.upgrade() else {
                    return Ok(());
                };
                match event {
                    WatchEvent::Added(framework) | WatchEvent::Modified(framework) => {
                        *version = framework.resource_version().unwrap_or_default();
                        let framework = Arc::new(kept(framework));
                        shared
                            .objects
                            .write()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(framework.name_any(), framework.clone());
                        let _ = shared.changes.send(Change::Applied(framework));
                    }
                    WatchEvent::Deleted(framework) => {
                        *version = framework.resource_version().unwrap_or_default();
                        let removed = shared
                            .objects
                            .write()
                            .unwrap_or_else(|p| p.into_inner())
                            .remove(&framework.name_any());
                        let last = removed.unwrap_or_else(|| Arc::new(framework));
                        let _ = shared.changes.send(Change::Deleted(last));
                    }
                    WatchEvent::Bookmark(bookmark) => {
                        *version = bookmark.metadata.resource_version;
                    }
                    WatchEvent::Error(status) if status.code == 410 => {
                        tracing::debug!("the watch of Frameworks expired (410); listing again");
                        return Err(Interrupted::Expired);
                    }
                    WatchEvent::Error(status) => {
                        return Err(Interrupted::Failed(format!(
                            "{} {}",
                            status.code, status.message
                        )));
                    }
                }
            }
            // Nothing to resume from (a server without versions): list again.
            if version.is_empty() {
                return Ok(());
            }
        }
    }
}

impl Informer {
    /// The API server answered a list or a watch.
    fn answered(&self) {
        if let Ok(mut backoff) = self.backoff.lock() {
            backoff.reset();
        }
        self.explain.answered();
    }
}

/// A Framework as the copy keeps it: without its managed fields.
fn kept(mut framework: Framework) -> Framework {
    framework.metadata.managed_fields = None;
    framework
}

/// The list or watch failed with `error`.
fn failing(shared: &Shared, error: String) {
    shared.health.send_modify(|health| {
        *health = match health {
            Health::Listing { .. } => Health::Listing { error: Some(error) },
            Health::Synced => {
                tracing::warn!(%error, "the watch of Frameworks failed; the jobs are served from the server's copy while it resumes");
                Health::Failing {
                    since: Instant::now(),
                    error,
                }
            }
            Health::Failing { since, .. } => Health::Failing {
                since: *since,
                error,
            },
        }
    });
}

/// The copy is current: say so, and that it recovered if it was failing.
fn current(shared: &Shared, objects: usize) {
    shared.health.send_if_modified(|health| match health {
        Health::Synced => false,
        Health::Listing { .. } => {
            tracing::info!(
                frameworks = objects,
                "listed the jobs; serving reads from the server's copy"
            );
            *health = Health::Synced;
            true
        }
        Health::Failing { since, .. } => {
            tracing::info!(
                after_s = since.elapsed().as_secs(),
                "watching Frameworks again; the server's copy is current"
            );
            *health = Health::Synced;
            true
        }
    });
}

/// The stream of one Framework's states from the copy: its state now, then after
/// every change, `None` once it is deleted (and the stream ends there).
pub fn follow(
    store: &KubeStore,
    name: &str,
) -> impl futures::Stream<Item = Option<Arc<Framework>>> + Send + 'static {
    let changes = store.subscribe();
    let first = store.get(name);
    let store = store.clone();
    let name = name.to_string();
    let rest = futures::stream::unfold(
        (changes, store, name),
        |(mut changes, store, name)| async move {
            loop {
                match changes.recv().await {
                    Ok(Change::Applied(f)) if f.name_any() == name => {
                        return Some((Some(f), (changes, store, name)));
                    }
                    Ok(Change::Deleted(f)) if f.name_any() == name => {
                        return Some((None, (changes, store, name)));
                    }
                    Ok(_) => {}
                    // Fell behind: the copy has its state now.
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        let now = store.get(&name);
                        return Some((now, (changes, store, name)));
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        },
    );
    futures::stream::once(async move { first })
        .chain(rest)
        .scan(false, |ended, state| {
            if *ended {
                return futures::future::ready(None);
            }
            *ended = state.is_none();
            futures::future::ready(Some(state))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pai_test_support::ApiServer;
    use pai_test_support::frameworks::{framework, to_value};

    struct Plain;

    impl ApiVoice for Plain {
        fn answered(&self) {}
        fn explain(&self, error: kube::Error) -> String {
            error.to_string()
        }
    }

    /// The first list's changes go out once the copy is whole and served: a subscriber
    /// that falls behind on them (more than the channel holds), and reads the copy as
    /// every controller then does, finds every Framework, never "not listed yet".
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_first_lists_changes_come_once_the_copy_is_whole_and_served() {
        let api = ApiServer::start().await;
        // Enough that sending their changes takes a while (and more than the channel
        // holds).
        let jobs = 4_200;
        for i in 0..jobs {
            let mut value = to_value(&framework(&format!("fw{i}"), &[("worker", 1)]));
            value["metadata"]["labels"][meta::LABEL_MANAGED_BY] = meta::MANAGED_BY.into();
            api.create("frameworks", "ns", value);
        }
        let client = api.client();
        let store = KubeStore::start(
            Api::namespaced(client, "ns"),
            Duration::from_secs(30),
            Arc::new(Plain),
        );
        // Woken by the first change on a thread of its own, while the rest are sent.
        let mut changes = store.subscribe();
        let watching = store.clone();
        // A thread slow to start may find it has fallen behind already: that too is a
        // wake-up after which the copy must be whole.
        let first = std::thread::spawn(move || {
            let first = match changes.blocking_recv() {
                Ok(change) => Some(change),
                Err(broadcast::error::RecvError::Lagged(_)) => None,
                Err(broadcast::error::RecvError::Closed) => panic!("the changes ended"),
            };
            (first, watching.serving().is_ok(), watching.all().len())
        });
        let (first, serving, copied) = tokio::task::spawn_blocking(move || first.join())
            .await
            .expect("joined")
            .expect("the first change");
        assert!(first.is_none_or(|first| matches!(first, Change::Applied(_))));
        assert!(serving, "a change came while the copy was not served");
        assert_eq!(copied, jobs);
        assert_eq!(store.all().len(), jobs);
    }
}
