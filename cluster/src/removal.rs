//! Whether a server that is stopping is being removed or only restarted. A restarted
//! server (a rolling update, a node drain, a crash) is followed by another, which takes
//! over the finalizers the pods carry ([`crate::log_keeper`]). A removed one is not:
//! `kubectl delete -k`, a namespace's deletion or a scale to zero leaves no server to let
//! the pods go, and a namespace whose pods wait on a finalizer never finishes deleting.
//! So a server that finds its own Deployment gone, being deleted or scaled to zero lets
//! every pod go as it leaves ([`crate::log_keeper::LogKeeper::release_all`]).
//!
//! Read through the owners of the server's own pod (`POD_NAME`, from the downward API):
//! the pod, its ReplicaSet, the ReplicaSet's Deployment. A pod no controller owns is
//! removed when it is being deleted. A pod of another controller (a StatefulSet, a Job)
//! is taken as restarted: the finalizers stay.

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client, Resource, ResourceExt};

/// Reads the owners of one server pod.
pub struct Removal {
    pod: String,
    pods: Api<Pod>,
    replica_sets: Api<ReplicaSet>,
    deployments: Api<Deployment>,
}

/// What stopping means for this server.
#[derive(Debug, PartialEq, Eq)]
pub enum Leaving {
    /// Another server follows (or may): the pods keep their finalizer for it.
    Restarted,
    /// No server follows; why.
    Removed(String),
}

impl Removal {
    /// For the server whose pod is `pod` in `namespace`.
    pub fn new(client: Client, namespace: &str, pod: String) -> Self {
        Self {
            pod,
            pods: Api::namespaced(client.clone(), namespace),
            replica_sets: Api::namespaced(client.clone(), namespace),
            deployments: Api::namespaced(client, namespace),
        }
    }

    /// Reads the owners now.
    pub async fn leaving(&self) -> Result<Leaving, kube::Error> {
        let Some(pod) = self.pods.get_opt(&self.pod).await? else {
            return Ok(Leaving::Removed(format!("its pod {} is gone", self.pod)));
        };
        let Some(set) = controller_of(&pod, "ReplicaSet") else {
            return Ok(match (pod.owner_references().is_empty(), deleting(&pod)) {
                (true, true) => Leaving::Removed(format!(
                    "its pod {}, which no controller restarts, is being deleted",
                    self.pod
                )),
                _ => Leaving::Restarted,
            });
        };
        let Some(replica_set) = self.replica_sets.get_opt(&set).await? else {
            return Ok(Leaving::Removed(format!("its ReplicaSet {set} is gone")));
        };
        if deleting(&replica_set) {
            return Ok(Leaving::Removed(format!(
                "its ReplicaSet {set} is being deleted"
            )));
        }
        let Some(name) = controller_of(&replica_set, "Deployment") else {
            return Ok(Leaving::Restarted);
        };
        let Some(deployment) = self.deployments.get_opt(&name).await? else {
            return Ok(Leaving::Removed(format!("its Deployment {name} is gone")));
        };
        if deleting(&deployment) {
            return Ok(Leaving::Removed(format!(
                "its Deployment {name} is being deleted"
            )));
        }
        if deployment.spec.as_ref().and_then(|s| s.replicas) == Some(0) {
            return Ok(Leaving::Removed(format!(
                "its Deployment {name} is scaled to 0"
            )));
        }
        Ok(Leaving::Restarted)
    }
}

fn deleting<K: Resource>(object: &K) -> bool {
    object.meta().deletion_timestamp.is_some()
}

/// The name of `object`'s controller of kind `kind`, if that is its controller.
fn controller_of<K: Resource>(object: &K, kind: &str) -> Option<String> {
    object
        .meta()
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && o.kind == kind)
        .map(|o| o.name.clone())
}
