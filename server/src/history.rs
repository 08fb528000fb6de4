//! Each job's attempt history on a cluster: FrameworkController's status holds only the
//! current attempt, so when the server sees an attempt's outcome decided it writes that
//! end into the Framework's history annotation ([`pai_contract::attempts`]) before the
//! next attempt replaces it. The embedded default writes the history itself.
//!
//! Level-triggered from the server's copy ([`crate::store`]): at the first list and at
//! every change, a Framework whose current attempt ended and is not in its history gets
//! one merge patch, under the resourceVersion it was read at (a replica or a controller
//! that wrote meanwhile makes it a 409, and the next change is looked at again). A patch
//! that failed otherwise is tried again every 10 s while the attempt is current. Every
//! replica of the server writes the same value; the history is idempotent.
//!
//! What it cannot keep: an attempt that ended and was replaced while no server watched
//! (or in between two of its views) is missing; `retries` still counts it, and the
//! current attempt's end is shown whether written yet or not.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;
use tracing::{debug, warn};

use pai_contract::Framework;
use pai_contract::attempts;

use crate::store::{Change, KubeStore};

/// How often a failed write is tried again.
const RETRY: Duration = Duration::from_secs(10);

/// Writes the ended attempts of the Frameworks of one namespace into their history.
pub struct Historian {
    api: Api<Framework>,
    /// Frameworks whose write failed (not by a conflict), as last seen.
    failed: HashMap<String, Arc<Framework>>,
}

impl Historian {
    pub fn new(client: Client, namespace: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            failed: HashMap::new(),
        }
    }

    /// Runs while `store` is kept: from its first list, then at every change.
    pub async fn run(mut self, store: KubeStore) {
        let mut changes = store.subscribe();
        store.listed().await;
        for framework in store.all() {
            self.observe(framework).await;
        }
        let mut retry = tokio::time::interval(RETRY);
        retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                change = changes.recv() => match change {
                    Ok(Change::Applied(framework)) => self.observe(framework).await,
                    Ok(Change::Deleted(framework)) => {
                        self.failed.remove(&framework.name_any());
                    }
                    Err(RecvError::Lagged(_)) => {
                        for framework in store.all() {
                            self.observe(framework).await;
                        }
                    }
                    Err(RecvError::Closed) => return,
                },
                _ = retry.tick(), if !self.failed.is_empty() => {
                    let failed: Vec<_> = self.failed.keys().cloned().collect();
                    for name in failed {
                        match store.get(&name) {
                            Some(framework) => self.observe(framework).await,
                            None => {
                                self.failed.remove(&name);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Writes `framework`'s current attempt's end into its history if it is missing.
    async fn observe(&mut self, framework: Arc<Framework>) {
        let name = framework.name_any();
        let Some(history) = attempts::with_current(&framework) else {
            self.failed.remove(&name);
            return;
        };
        let patch = json!({
            "metadata": {
                "resourceVersion": framework.resource_version(),
                "annotations": {attempts::ANNOTATION: history},
            }
        });
        match self
            .api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                if self.failed.remove(&name).is_some() {
                    debug!(framework = %name, "attempt history written after a failure");
                }
            }
            // Changed meanwhile: the change comes, and is looked at again.
            Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => {}
            Err(e) => {
                if !self.failed.contains_key(&name) {
                    warn!(framework = %name, error = %e, "cannot write the attempt history; trying again every 10 s");
                }
                self.failed.insert(name, framework);
            }
        }
    }
}
