//! The objects a job has beside its Framework: its account and grant ([`JobAccess`]), the
//! gang engine's group, its key and image pull Secrets, made before the Framework and
//! owned by it after; and the checks before any is made (the queue, the priority class).

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use pai_contract::{Framework, training};
use pai_job::ssh_key::JobKey;

use pai_backend::backend::BackendError;

use crate::job_access::JobAccess;

use super::KubeBackend;

impl KubeBackend {
    /// Refuses a job whose pods name a queue the cluster does not have (a Volcano Queue,
    /// or one that is closed; a Kueue LocalQueue of the namespace). When the server
    /// cannot tell (not allowed to read queues, the API server failing), the job goes
    /// on, and waits with the engine's reason.
    pub(super) async fn check_queue(&self, framework: &Framework) -> Result<(), BackendError> {
        use pai_translate::gang::Engine;
        let Some((engine, queue)) = pai_translate::gang::named_queue(framework) else {
            return Ok(());
        };
        let volcano = engine == Engine::Volcano;
        let (api, what) = if volcano {
            (&self.volcano_queues, "Volcano queue")
        } else {
            (&self.kueue_queues, "Kueue LocalQueue")
        };
        match api.get(queue).await {
            Ok(found) => {
                let state = found.data["status"]["state"].as_str().unwrap_or("Open");
                if volcano && matches!(state, "Closed" | "Closing") {
                    return Err(BackendError::Refused(format!(
                        "virtualCluster: {what} {queue} is {state}: it admits no new job"
                    )));
                }
                Ok(())
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {
                Err(BackendError::Refused(format!(
                    "virtualCluster: the cluster has no {what} named {queue} ({}): name one that exists, or leave virtualCluster out for the default queue",
                    status.message
                )))
            }
            Err(error) => {
                tracing::debug!(%queue, error = %self.errors.error(error), "cannot read the queue; the job goes on and waits with its engine's reason");
                Ok(())
            }
        }
    }

    /// Refuses a job whose pods name a priority class the cluster does not have (a
    /// PriorityClass; under Kueue also its WorkloadPriorityClass): the API server would
    /// admit none of its pods. When the server cannot tell, the job goes on.
    pub(super) async fn check_priority_class(
        &self,
        framework: &Framework,
    ) -> Result<(), BackendError> {
        let Some(pod) = framework.spec.task_roles.first().map(|role| &role.task.pod) else {
            return Ok(());
        };
        let Some(name) = pod
            .spec
            .as_ref()
            .and_then(|s| s.priority_class_name.as_deref())
        else {
            return Ok(());
        };
        // The job's own class, or the one the config gives jobs naming none.
        let field = match pai_contract::priority::JobPriority::of(framework) {
            Some(class) => format!(
                "extras.hivedScheduler.jobPriorityClass: {class} is, on this cluster,"
            ),
            None => "the server's config (priorityClasses.default, or gang.priorityClassName) gives jobs naming no jobPriorityClass".to_string(),
        };
        let missing = |what: &str, message: &str| {
            BackendError::Refused(format!(
                "{field} the class {name}, and the cluster has no {what} of that name ({message}); the config's priorityClasses names the cluster's class of each of prod, test and oppo"
            ))
        };
        if let Some(message) = self.missing(&self.priority_classes, name).await {
            return Err(missing("PriorityClass", &message));
        }
        let kueue = pod
            .metadata
            .as_ref()
            .and_then(|m| m.labels.as_ref())
            .and_then(|l| l.get(pai_translate::priority::KUEUE_PRIORITY_LABEL));
        if let Some(kueue) = kueue
            && let Some(message) = self.missing(&self.kueue_priority_classes, kueue).await
        {
            return Err(missing("Kueue WorkloadPriorityClass", &message));
        }
        Ok(())
    }

    /// The API server's words when it says `name` does not exist; `None` when it is there
    /// or the server cannot tell (not allowed to read it, the API server failing).
    pub(super) async fn missing<K>(&self, api: &Api<K>, name: &str) -> Option<String>
    where
        K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        match api.get(name).await {
            Err(kube::Error::Api(status)) if status.code == 404 => Some(status.message),
            Err(error) => {
                tracing::debug!(name, error = %self.errors.error(error), "cannot read it; the job goes on");
                None
            }
            Ok(_) => None,
        }
    }

    /// The API of `group`'s kind.
    pub(super) fn groups_of(
        &self,
        group: &pai_translate::gang::Group,
    ) -> &Api<kube::api::DynamicObject> {
        if group.api_version == pai_translate::gang::VOLCANO_API {
            &self.volcano_groups
        } else {
            &self.coscheduling_groups
        }
    }

    /// The job's own account and grant, then its gang engine's group, made before its
    /// Framework: FrameworkController creates the pods as soon as the Framework exists,
    /// and they name both. The group, where there is one, with its API and name.
    pub(super) async fn create_access_and_group(
        &self,
        framework: &Framework,
    ) -> Result<(JobAccess, Option<(&Api<kube::api::DynamicObject>, String)>), BackendError> {
        let access = JobAccess::of(framework);
        self.ensure(&self.accounts, &access.account, framework.name())
            .await?;
        self.ensure(&self.roles, &access.role, framework.name())
            .await?;
        self.ensure(&self.bindings, &access.binding, framework.name())
            .await?;
        // The gang engine's group comes before the pods that name it too: a pod
        // whose group does not exist yet would be placed alone, or not at all.
        let group = match pai_translate::gang::group(framework) {
            Some(group) => {
                let api = self.groups_of(&group);
                let object: kube::api::DynamicObject = serde_json::from_value(group.object)
                    .map_err(|e| BackendError::Other(format!("the job's PodGroup: {e}")))?;
                if let Err(error) = self.ensure(api, &object, framework.name()).await {
                    self.remove_access(&access).await;
                    return Err(error);
                }
                Some((api, object.name_any()))
            }
            None => None,
        };
        Ok((access, group))
    }

    /// Makes `created` the owner of its access objects and group: from now on the
    /// garbage collector removes them with the Framework.
    pub(super) async fn own(
        &self,
        created: &Framework,
        group: Option<&(&Api<kube::api::DynamicObject>, String)>,
    ) {
        let owner =
            serde_json::json!({"metadata": {"ownerReferences": [created.owner_reference()]}});
        let patch = Patch::Merge(&owner);
        let name = pai_contract::access::job_account(created.name());
        let params = PatchParams::default();
        let owned = futures::join!(
            self.accounts.patch(&name, &params, &patch),
            self.roles.patch(&name, &params, &patch),
            self.bindings.patch(&name, &params, &patch),
        );
        let owned_group = match group {
            Some((api, name)) => api.patch(name, &params, &patch).await.map(drop),
            None => Ok(()),
        };
        for result in [
            owned.0.map(drop),
            owned.1.map(drop),
            owned.2.map(drop),
            owned_group,
        ] {
            if let Err(e) = result {
                tracing::warn!(framework = %created.name(), error = %self.error(e), "cannot make the Framework own its access objects; they stay when it is deleted");
            }
        }
    }

    /// The Secrets of `created`: its key pair (without which the Framework is deleted
    /// again) and its image pull credentials (without which the pods pull without them).
    pub(super) async fn create_secrets(
        &self,
        created: &Framework,
        key: &JobKey,
    ) -> Result<(), BackendError> {
        // The Secret names its owner by UID, which only the created Framework has;
        // the garbage collector deletes it with the Framework. Until it exists the
        // kubelet holds the pods (their volume waits for it).
        let secret = job_secret(created, key);
        if let Err(e) = self.secrets.create(&PostParams::default(), &secret).await {
            let error = self.error(e);
            tracing::warn!(framework = %created.name(), %error, "cannot create the job's key Secret; deleting the Framework");
            if let Err(e) = self
                .api
                .delete(created.name(), &DeleteParams::background())
                .await
            {
                tracing::warn!(framework = %created.name(), error = %self.error(e), "cannot delete the Framework without its key");
            }
            return Err(match error {
                BackendError::Other(message) => BackendError::Other(format!(
                    "cannot create the job's ssh key Secret: {message}"
                )),
                other => other,
            });
        }
        if let Some(config) = &key.registry {
            let secret = registry_secret(created, config);
            if let Err(e) = self.secrets.create(&PostParams::default(), &secret).await {
                // The pods then pull without the credentials; say so, keep the job.
                tracing::warn!(framework = %created.name(), error = %self.error(e), "cannot create the job's image pull Secret");
            }
        }
        Ok(())
    }

    /// Creates `object`, one of the access objects of Framework `framework`. One that
    /// exists already is the same (the names and contents follow from the Framework's
    /// name): kept when no owner has it (left by an interrupted submission) or its owner
    /// still exists (the submission then fails on the Framework's 409); made again when
    /// its owner is gone and the garbage collector has yet to remove it.
    pub(super) async fn ensure<K>(
        &self,
        api: &Api<K>,
        object: &K,
        framework: &str,
    ) -> Result<(), BackendError>
    where
        K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
    {
        let name = object.name_any();
        match api.create(&PostParams::default(), object).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(e) => {
                return Err(self.error(e));
            }
        }
        let existing = api
            .get(&name)
            .await
            .inspect(|_| self.answered())
            .map_err(|e| self.error(e))?;
        if existing.owner_references().is_empty()
            || self
                .api
                .get_opt(framework)
                .await
                .inspect(|_| self.answered())
                .map_err(|e| self.error(e))?
                .is_some()
        {
            return Ok(());
        }
        api.delete(&name, &DeleteParams::background())
            .await
            .inspect(|_| self.answered())
            .map_err(|e| self.error(e))?;
        api.create(&PostParams::default(), object)
            .await
            .map(drop)
            .inspect(|_| self.answered())
            .map_err(|e| self.error(e))
    }

    /// Removes the access objects of a Framework that was not created.
    pub(super) async fn remove_access(&self, access: &JobAccess) {
        let name = access.account.name_any();
        let params = DeleteParams::background();
        let removed = futures::join!(
            self.accounts.delete(&name, &params),
            self.roles.delete(&name, &params),
            self.bindings.delete(&name, &params),
        );
        for result in [
            removed.0.map(drop),
            removed.1.map(drop),
            removed.2.map(drop),
        ] {
            if let Err(e) = result {
                tracing::warn!(object = %name, error = %self.error(e), "cannot remove an access object of a job that was not created");
            }
        }
    }

    /// Changes the tags of job `name`, whose Framework is gone, in its record.
    pub(super) async fn edit_archived_tags(
        &self,
        archive: &crate::archive::Archive,
        name: &str,
        edit: &pai_job::tags::Edit,
    ) -> Result<(), BackendError> {
        let unavailable = |e: crate::archive::ArchiveError| BackendError::History(e.to_string());
        archive
            .update(name, |framework| {
                let annotations = framework.metadata.annotations.get_or_insert_default();
                pai_job::tags::apply(annotations, edit)
            })
            .await
            .map_err(unavailable)?
            .ok_or(BackendError::NotFound)?
            .map_err(BackendError::from)
    }
}

/// The image pull Secret of `framework`'s registry credentials, owned by it.
fn registry_secret(framework: &Framework, config: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(training::job_registry_secret(framework.name())),
            namespace: framework.metadata.namespace.clone(),
            labels: framework.metadata.labels.clone(),
            owner_references: Some(vec![framework.owner_reference()]),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/dockerconfigjson".to_string()),
        data: Some(
            [(
                ".dockerconfigjson".to_string(),
                ByteString(config.as_bytes().to_vec()),
            )]
            .into(),
        ),
        ..Secret::default()
    }
}

/// Writes of a tag change tried before its conflicts are given back.
pub(super) const TAG_WRITES: usize = 3;

/// The Secret with `framework`'s key pair, owned by it.
fn job_secret(framework: &Framework, key: &JobKey) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(training::job_ssh_secret(framework.name())),
            namespace: framework.metadata.namespace.clone(),
            labels: framework.metadata.labels.clone(),
            owner_references: Some(vec![framework.owner_reference()]),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".to_string()),
        data: Some(
            key.files()
                .into_iter()
                .map(|(k, v, _)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Secret::default()
    }
}
