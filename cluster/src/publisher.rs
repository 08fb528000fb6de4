//! The peer-table publisher: a small controller over the Frameworks rest-lite created.
//! It follows them through the server's copy ([`crate::store`], the one watch of the
//! namespace's Frameworks every reader shares) and, when every task of an attempt has
//! an address, writes that attempt's table once as a ConfigMap
//! ([`pai_barrier::published`]). Each task's barrier then reads one small object instead
//! of watching the whole Framework, whose every change FrameworkController rewrites.
//! N barriers watching a Framework of N tasks that is rewritten at each of N addresses
//! receive O(N³) bytes: 27.7 GB at 400 tasks, where the tables take 2.7 MB, sent once
//! (`cargo bench -p rest-lite --bench barrier_scale`; BENCHMARKS.md, "The barrier"). The
//! publisher is the one watcher of the whole Framework left, as FrameworkController is.
//!
//! Level-triggered: the wanted state is "every running attempt whose tasks all have
//! addresses has its table, as the Framework says now". A restart re-lists every
//! Framework and writes what is missing or stale; every replica of the server publishes,
//! and idempotently: a table that exists and says the same is left alone (a 409 and one
//! read), one that differs is replaced under its resourceVersion (a replica that
//! raced gets a 409 and reads again); a write that fails is retried with
//! the controller runtime's back-off (0.5 s doubling to 30 s, jittered) for as long as the Framework wants its
//! table, the first failure of each logged and its recovery too, never every retry.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::PostParams;
use kube::{Api, Client};
use tracing::{debug, info, warn};

use pai_barrier::{PeerTable, Readiness, published, readiness};
use pai_contract::Framework;
use pai_contract::framework::FrameworkState;
use pai_job::restarts::RestartBackoff;

use pai_backend::controller::{Outcome, Reconcile};

use crate::store::{Change, KubeStore};

/// Publishes the peer tables of the Frameworks rest-lite manages in one namespace.
pub struct Publisher {
    maps: Api<ConfigMap>,
    restart: RestartBackoff,
}

impl Publisher {
    pub fn new(client: Client, namespace: &str) -> Self {
        Self {
            maps: Api::namespaced(client, namespace),
            restart: RestartBackoff::default(),
        }
    }

    /// With the restart back-off `restart` (the config's `restartBackoff`) in place of the
    /// kubelet's numbers.
    pub fn restarting(self, restart: RestartBackoff) -> Self {
        Self { restart, ..self }
    }

    /// Runs while `store` is kept: from its first list, then at every change.
    pub async fn run(self, store: KubeStore) {
        let publishing = Publishing {
            maps: self.maps,
            restart: self.restart,
            store: store.clone(),
            published: HashMap::new(),
            failing: HashSet::new(),
        };
        store.control(publishing).await;
    }
}

/// The publisher at work: a reconcile function on the controller runtime.
struct Publishing {
    maps: Api<ConfigMap>,
    /// The back-off of quick attempts, written into each attempt's table.
    restart: RestartBackoff,
    store: KubeStore,
    /// The table last written (or found) for each Framework, by name.
    published: HashMap<String, PeerTable>,
    /// Frameworks whose failure to publish was logged, until it is published.
    failing: HashSet<String>,
}

impl Reconcile for Publishing {
    type Change = Change;

    fn key(change: &Change) -> String {
        change.framework().name().to_string()
    }

    /// Every Framework of the copy; what it no longer has is forgotten.
    async fn all(&mut self) -> Vec<Change> {
        let all = self.store.all_changes();
        let names: HashSet<&str> = all.iter().map(|c| c.framework().name()).collect();
        self.published
            .retain(|name, _| names.contains(name.as_str()));
        self.failing.retain(|name| names.contains(name.as_str()));
        all
    }

    /// Writes the Framework's table when its attempt has every address and the table
    /// differs from what was written.
    async fn reconcile(&mut self, change: Change) -> Outcome<Change> {
        let framework = match &change {
            Change::Applied(framework) => framework.clone(),
            Change::Deleted(framework) => {
                self.published.remove(framework.name());
                self.failing.remove(framework.name());
                return Outcome::Done;
            }
        };
        let name = framework.name().to_string();
        let Some(table) = wanted(&framework, &self.restart) else {
            return Outcome::Done;
        };
        if self.published.get(&name) == Some(&table) {
            return Outcome::Done;
        }
        match self.write(&framework, &table).await {
            Ok(()) => {
                if self.failing.remove(&name) {
                    info!(framework = %name, "peer table published after failed tries");
                }
                self.published.insert(name, table);
                Outcome::Done
            }
            Err(error) => {
                if self.failing.insert(name.clone()) {
                    warn!(framework = %name, %error, "cannot publish the peer table; retrying with back-off");
                } else {
                    debug!(framework = %name, %error, "the peer table still cannot be published");
                }
                Outcome::Retry(change)
            }
        }
    }
}

impl Publishing {
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
pub fn wanted(framework: &Framework, restart: &RestartBackoff) -> Option<PeerTable> {
    let status = framework.status.as_ref()?;
    if matches!(
        status.state,
        FrameworkState::AttemptCompleted | FrameworkState::Completed
    ) {
        return None;
    }
    match readiness(framework) {
        Ok(Readiness::Ready(mut table)) if table.attempt_instance_uid.is_some() => {
            table.not_before = not_before(framework, restart);
            Some(table)
        }
        _ => None,
    }
}

/// When the current attempt's commands may start: its previous attempt's end plus the
/// restart back-off, if the attempts before it ended quickly (the attempts' history the
/// server keeps on the Framework; the kubelet's numbers). FrameworkController starts the
/// next attempt at once: the runtime waits this out after the barrier.
pub fn not_before(framework: &Framework, policy: &RestartBackoff) -> Option<String> {
    let current = framework.status.as_ref()?.attempt_status.id;
    let history = pai_job::attempts::recorded(framework);
    let previous = history.last().filter(|end| end.attempt == current - 1)?;
    let wait = pai_job::restarts::wait(&history, policy)?;
    let ended = previous.time.as_deref()?.parse::<jiff::Timestamp>().ok()?;
    let span = jiff::SignedDuration::try_from(wait.delay).ok()?;
    Some(ended.checked_add(span).ok()?.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attempt 1 of a job whose attempt 0 ended (with its own code) 1 s after it began:
    /// attempt 1's commands wait 10 s from that end (the kubelet's first back-off); after a
    /// long attempt, or before any attempt ended, they do not wait.
    #[test]
    fn a_quick_attempt_makes_the_next_one_wait_from_its_end() {
        let mut framework = pai_test_support::frameworks::framework("fw", &[("worker", 1)]);
        let ended = |ran_s: i64| {
            let start = jiff::Timestamp::from_second(1_800_000_000).expect("time");
            let end = start
                .checked_add(jiff::SignedDuration::from_secs(ran_s))
                .expect("time");
            let history = serde_json::json!([{"attempt": 0, "code": 1,
                "started": start.to_string(), "time": end.to_string()}]);
            (history.to_string(), end)
        };
        let mut status = pai_contract::FrameworkStatus::default();
        status.attempt_status.id = 1;
        framework.status = Some(status);
        assert_eq!(
            not_before(&framework, &RestartBackoff::default()),
            None,
            "no history"
        );
        let (history, end) = ended(1);
        framework
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(pai_job::attempts::ANNOTATION.to_string(), history);
        let at = not_before(&framework, &RestartBackoff::default()).expect("a wait");
        assert_eq!(
            at.parse::<jiff::Timestamp>().expect("time"),
            end.checked_add(jiff::SignedDuration::from_secs(10))
                .expect("time")
        );
        let (history, _) = ended(3600);
        framework
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(pai_job::attempts::ANNOTATION.to_string(), history);
        assert_eq!(
            not_before(&framework, &RestartBackoff::default()),
            None,
            "an hour's run resets the back-off"
        );
    }
}
