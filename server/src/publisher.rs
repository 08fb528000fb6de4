//! The peer-table publisher: a small controller over the Frameworks rest-lite created.
//! It watches them (one watch for the namespace) and, when every task of an attempt has
//! an address, writes that attempt's table once as a ConfigMap
//! ([`pai_barrier::published`]). Each task's barrier then reads one small object instead
//! of watching the whole Framework, whose every change FrameworkController rewrites.
//!
//! Level-triggered: the wanted state is "every running attempt whose tasks all have
//! addresses has its table, as the Framework says now". A restart re-lists every
//! Framework and writes what is missing or stale; a write that fails is retried.

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::PostParams;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tracing::{debug, info, warn};

use pai_barrier::{PeerTable, Readiness, published, readiness};
use pai_contract::framework::FrameworkState;
use pai_contract::{Framework, meta};

/// How often writes that failed are tried again.
const RETRY_EVERY: Duration = Duration::from_secs(5);

/// Publishes the peer tables of the Frameworks rest-lite manages in one namespace.
pub struct Publisher {
    frameworks: Api<Framework>,
    maps: Api<ConfigMap>,
    /// The table last written (or found) for each Framework, by name.
    published: HashMap<String, PeerTable>,
    /// Frameworks whose table could not be written yet, as last seen.
    pending: HashMap<String, Framework>,
}

impl Publisher {
    pub fn new(client: Client, namespace: &str) -> Self {
        Self {
            frameworks: Api::namespaced(client.clone(), namespace),
            maps: Api::namespaced(client, namespace),
            published: HashMap::new(),
            pending: HashMap::new(),
        }
    }

    /// Runs until the process ends.
    pub async fn run(mut self) {
        let selector = format!("{}={}", meta::LABEL_MANAGED_BY, meta::MANAGED_BY);
        let events = watcher::watcher(
            self.frameworks.clone(),
            watcher::Config::default().labels(&selector),
        )
        .default_backoff();
        futures::pin_mut!(events);
        let mut retry = tokio::time::interval(RETRY_EVERY);
        retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                event = events.next() => match event {
                    Some(Ok(Event::InitApply(framework) | Event::Apply(framework))) => {
                        self.reconcile(framework).await;
                    }
                    Some(Ok(Event::Delete(framework))) => {
                        let name = framework.name().to_string();
                        self.published.remove(&name);
                        self.pending.remove(&name);
                    }
                    Some(Ok(Event::Init | Event::InitDone)) => {}
                    Some(Err(error)) => {
                        warn!(%error, "watching Frameworks for the peer tables failed; resuming");
                    }
                    None => return,
                },
                _ = retry.tick(), if !self.pending.is_empty() => {
                    let pending = std::mem::take(&mut self.pending);
                    for framework in pending.into_values() {
                        self.reconcile(framework).await;
                    }
                }
            }
        }
    }

    /// Writes `framework`'s table when its attempt has every address and the table
    /// differs from what was written.
    pub async fn reconcile(&mut self, framework: Framework) {
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
                self.published.insert(name, table);
            }
            Err(error) => {
                warn!(framework = %name, %error, "cannot publish the peer table; will retry");
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
