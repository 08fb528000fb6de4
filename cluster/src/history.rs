//! Each job's attempt history on a cluster: FrameworkController's status holds only the
//! current attempt, so when the server sees an attempt's outcome decided it writes that
//! end into the Framework's history annotation ([`pai_job::attempts`]) before the
//! next attempt replaces it. The embedded default writes the history itself.
//!
//! Level-triggered from the server's copy ([`crate::store`]): at the first list and at
//! every change, a Framework whose current attempt ended and is not in its history gets
//! one merge patch, under the resourceVersion it was read at (a replica or a controller
//! that wrote meanwhile makes it a 409, and the next change is looked at again). A patch
//! that failed otherwise is tried again with the controller runtime's back-off while the
//! attempt is current. Every
//! replica of the server writes the same value; the history is idempotent.
//!
//! What it cannot keep: an attempt that ended and was replaced while no server watched
//! (or in between two of its views) is missing; `retries` still counts it, and the
//! current attempt's end is shown whether written yet or not.

use std::collections::HashSet;

use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tracing::{debug, warn};

use pai_contract::Framework;
use pai_job::attempts;

use pai_backend::controller::{Outcome, Reconcile};

use crate::disruptions::Disruptions;
use crate::store::{Change, KubeStore};

/// Writes the ended attempts of the Frameworks of one namespace into their history.
pub struct Historian {
    api: Api<Framework>,
    disruptions: Disruptions,
}

impl Historian {
    /// `disruptions`: who deleted jobs' pods, noted by the pod watch, for the ends of the
    /// attempts they ended.
    pub fn new(client: Client, namespace: &str, disruptions: Disruptions) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            disruptions,
        }
    }

    /// Runs while `store` is kept: from its first list, then at every change.
    pub async fn run(self, store: KubeStore) {
        let writing = Writing {
            api: self.api,
            disruptions: self.disruptions,
            store: store.clone(),
            failing: HashSet::new(),
        };
        store.control(writing).await;
    }
}

/// The historian at work: a reconcile function on the controller runtime.
struct Writing {
    api: Api<Framework>,
    disruptions: Disruptions,
    store: KubeStore,
    /// Frameworks whose write failed (not by a conflict), logged once until it is written.
    failing: HashSet<String>,
}

impl Reconcile for Writing {
    type Change = Change;

    fn key(change: &Change) -> String {
        change.framework().name_any()
    }

    async fn all(&mut self) -> Vec<Change> {
        self.store.all_changes()
    }

    /// Writes the Framework's current attempt's end into its history if it is missing.
    async fn reconcile(&mut self, change: Change) -> Outcome<Change> {
        let framework = match &change {
            Change::Applied(framework) => framework,
            Change::Deleted(framework) => {
                self.failing.remove(&framework.name_any());
                // Every job's that is gone, also one whose deletion was not seen: one
                // entry at most per job the copy holds.
                self.disruptions
                    .retain(|name| self.store.get(name).is_some());
                return Outcome::Done;
            }
        };
        let name = framework.name_any();
        let noted = self.disruptions.of(&name);
        let Some((history, said)) = attempts::amended(
            framework,
            noted
                .as_ref()
                .map(|(attempt, words)| (*attempt, words.as_str())),
        ) else {
            self.failing.remove(&name);
            return Outcome::Done;
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
                if said {
                    self.disruptions.forget(&name);
                }
                if self.failing.remove(&name) {
                    debug!(framework = %name, "attempt history written after a failure");
                }
                Outcome::Done
            }
            // Changed meanwhile: the change comes, and is looked at again.
            Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => {
                Outcome::Done
            }
            Err(e) => {
                if self.failing.insert(name.clone()) {
                    warn!(framework = %name, error = %e, "cannot write the attempt history; trying again with back-off");
                }
                Outcome::Retry(change)
            }
        }
    }
}
