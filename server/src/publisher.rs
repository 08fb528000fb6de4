//! The peer-table publisher: a small controller over the Frameworks rest-lite created.
//! It follows them through the server's copy ([`crate::store`], the one watch of the
//! namespace's Frameworks every reader shares) and, when every task of an attempt has
//! an address, writes that attempt's table once as a ConfigMap
//! ([`pai_barrier::published`]). Each task's barrier then reads one small object instead
//! of watching the whole Framework, whose every change FrameworkController rewrites.
//!
//! Level-triggered: the wanted state is "every running attempt whose tasks all have
//! addresses has its table, as the Framework says now". A restart re-lists every
//! Framework and writes what is missing or stale; every replica of the server publishes,
//! and idempotently: a table that exists and says the same is left alone (a 409 and one
//! read), one that differs is replaced under its resourceVersion (a replica that
//! raced gets a 409 and reads again); a write that fails is retried with
//! back-off (0.5 s doubling to 30 s, jittered) for as long as the Framework wants its
//! table, the first failure of each logged and its recovery too, never every retry.

use std::collections::HashMap;
use std::time::Duration;

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::broadcast::error::RecvError;
use tracing::{debug, info, warn};

use pai_barrier::{PeerTable, Readiness, published, readiness};
use pai_contract::Framework;
use pai_contract::framework::FrameworkState;

use crate::store::{Change, KubeStore};

/// Publishes the peer tables of the Frameworks rest-lite manages in one namespace.
pub struct Publisher {
    maps: Api<ConfigMap>,
    /// The table last written (or found) for each Framework, by name.
    published: HashMap<String, PeerTable>,
    /// Frameworks whose table could not be written yet, as last seen.
    pending: HashMap<String, Arc<Framework>>,
    /// Failed rounds of writes in a row (the back-off's exponent).
    failed_rounds: u32,
    /// Frameworks whose failure to publish was logged, until it is published.
    failing: std::collections::HashSet<String>,
}

impl Publisher {
    pub fn new(client: Client, namespace: &str) -> Self {
        Self {
            maps: Api::namespaced(client, namespace),
            published: HashMap::new(),
            pending: HashMap::new(),
            failed_rounds: 0,
            failing: Default::default(),
        }
    }

    /// Runs while `store` is kept: from its first list, then at every change.
    pub async fn run(mut self, store: KubeStore) {
        let mut changes = store.subscribe();
        store.listed().await;
        self.reconcile_all(&store).await;
        let retry = tokio::time::sleep(Duration::ZERO);
        futures::pin_mut!(retry);
        loop {
            tokio::select! {
                change = changes.recv() => {
                    let had_pending = !self.pending.is_empty();
                    match change {
                        Ok(Change::Applied(framework)) => self.reconcile(framework).await,
                        Ok(Change::Deleted(framework)) => self.forget(framework.name()),
                        // Fell behind: the copy says how things are now.
                        Err(RecvError::Lagged(missed)) => {
                            debug!(missed, "the publisher fell behind the changes; reading them all");
                            self.reconcile_all(&store).await;
                        }
                        Err(RecvError::Closed) => return,
                    }
                    if !had_pending && !self.pending.is_empty() {
                        retry.as_mut().reset(tokio::time::Instant::now() + self.retry_delay());
                    }
                }
                () = &mut retry, if !self.pending.is_empty() => {
                    let pending = std::mem::take(&mut self.pending);
                    for framework in pending.into_values() {
                        self.reconcile(framework).await;
                    }
                    self.failed_rounds = if self.pending.is_empty() {
                        0
                    } else {
                        self.failed_rounds.saturating_add(1)
                    };
                    retry.as_mut().reset(tokio::time::Instant::now() + self.retry_delay());
                }
            }
        }
    }

    /// Every Framework of the copy, and forgets those it no longer has.
    async fn reconcile_all(&mut self, store: &KubeStore) {
        let all = store.all();
        let names: std::collections::HashSet<&str> = all.iter().map(|f| f.name()).collect();
        let gone: Vec<String> = self
            .published
            .keys()
            .chain(self.pending.keys())
            .filter(|n| !names.contains(n.as_str()))
            .cloned()
            .collect();
        for name in gone {
            self.forget(&name);
        }
        for framework in all {
            self.reconcile(framework).await;
        }
    }

    fn forget(&mut self, name: &str) {
        self.published.remove(name);
        self.pending.remove(name);
        self.failing.remove(name);
    }

    /// How long to wait before the pending writes are tried again.
    fn retry_delay(&self) -> Duration {
        crate::backoff::delay(self.failed_rounds)
    }

    /// Writes `framework`'s table when its attempt has every address and the table
    /// differs from what was written.
    pub async fn reconcile(&mut self, framework: Arc<Framework>) {
        let name = framework.name().to_string();
        let Some(table) = wanted(&framework) else {
            self.pending.remove(&name);
            return;
        };
        if self.published.get(&name) == Some(&table) {
            return;
        }
        match self.write(&framework, &table).await {
            Ok(()) => {
                self.pending.remove(&name);
                if self.failing.remove(&name) {
                    info!(framework = %name, "peer table published after failed tries");
                }
                self.published.insert(name, table);
            }
            Err(error) => {
                if self.failing.insert(name.clone()) {
                    warn!(framework = %name, %error, "cannot publish the peer table; retrying with back-off");
                } else {
                    debug!(framework = %name, %error, "the peer table still cannot be published");
                }
                self.pending.insert(name, framework);
            }
        }
    }

    /// Creates the table's ConfigMap, or replaces one that says something else.
    async fn write(&self, framework: &Framework, table: &PeerTable) -> Result<(), kube::Error> {
        let map = published::config_map(table, framework);
        let object = published::object_name(&table.framework);
        match self.maps.create(&PostParams::default(), &map).await {
            Ok(_) => {
                info!(configmap = %object, tasks = table.task_count(), "peer table published");
                return Ok(());
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(error) => return Err(error),
        }
        // It exists: from before a restart (then it is usually right), or from an earlier
        // Framework of the same name, or changed since.
        let existing = self.maps.get(&object).await?;
        let instance = table.attempt_instance_uid.as_deref().unwrap_or_default();
        if published::read(&existing, instance).as_ref() == Ok(table) {
            debug!(configmap = %object, "peer table already published");
            return Ok(());
        }
        let mut replacement = map;
        replacement.metadata.resource_version = existing.metadata.resource_version;
        self.maps
            .replace(&object, &PostParams::default(), &replacement)
            .await?;
        info!(configmap = %object, tasks = table.task_count(), "peer table replaced");
        Ok(())
    }
}

/// The table `framework`'s current attempt should have published: when the attempt runs
/// (not completed), has its instance UID, and every task has an address.
pub fn wanted(framework: &Framework) -> Option<PeerTable> {
    let status = framework.status.as_ref()?;
    if matches!(
        status.state,
        FrameworkState::AttemptCompleted | FrameworkState::Completed
    ) {
        return None;
    }
    match readiness(framework) {
        Ok(Readiness::Ready(table)) if table.attempt_instance_uid.is_some() => Some(table),
        _ => None,
    }
}
