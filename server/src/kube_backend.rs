//! Frameworks in a Kubernetes cluster, through its API server. FrameworkController runs
//! them; this backend only creates, reads, patches and deletes the objects.

use futures::future::BoxFuture;
use futures::{AsyncReadExt, FutureExt, StreamExt};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use pai_contract::framework::ExecutionType;
use pai_contract::ssh_key::JobKey;
use pai_contract::{Framework, meta, training};

use super::backend::{Backend, BackendError, FrameworkStream, LogStream};
use super::job_access::JobAccess;
use pai_contract::framework::MAIN_CONTAINER;

pub struct KubeBackend {
    api: Api<Framework>,
    pods: Api<Pod>,
    secrets: Api<Secret>,
    accounts: Api<ServiceAccount>,
    roles: Api<Role>,
    bindings: Api<RoleBinding>,
    namespace: String,
    address: String,
    /// Some request of this server was answered: a 401/403 now is the API server's
    /// trouble (503, ask again), not a missing grant.
    allowed: std::sync::atomic::AtomicBool,
}

impl KubeBackend {
    pub fn new(client: Client, namespace: &str, address: &str) -> Self {
        Self {
            pods: Api::namespaced(client.clone(), namespace),
            secrets: Api::namespaced(client.clone(), namespace),
            accounts: Api::namespaced(client.clone(), namespace),
            roles: Api::namespaced(client.clone(), namespace),
            bindings: Api::namespaced(client.clone(), namespace),
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            address: address.to_string(),
            allowed: false.into(),
        }
    }

    fn error(&self, error: kube::Error) -> BackendError {
        match error {
            kube::Error::Api(status) => match status.code {
                404 => BackendError::NotFound,
                409 => BackendError::Conflict(status.message),
                400 | 422 => BackendError::Invalid(status.message),
                401 | 403 if self.allowed.load(std::sync::atomic::Ordering::Relaxed) => {
                    // Allowed before: not its Role but the API server (restarting, its
                    // caches filling). Ask again shortly.
                    self.unavailable(format!(
                        "{} {}: the API server refuses credentials it accepted before (is it restarting?)",
                        status.code, status.reason
                    ))
                }
                429 => self.unavailable(format!(
                    "429 {}: the API server asks its clients to slow down",
                    status.message
                )),
                401 | 403 => BackendError::Other(format!(
                    "rest-lite's service account may not do this in namespace {} ({} {}): see its Role in deploy/rest-lite/rbac.yaml",
                    self.namespace, status.code, status.message
                )),
                500..=599 => BackendError::Unavailable {
                    address: self.address.clone(),
                    message: format!("{} {}", status.code, status.reason),
                },
                code => {
                    BackendError::Other(format!("the API server answered {code} {}", status.reason))
                }
            },
            kube::Error::HyperError(e) => self.unavailable(e.to_string()),
            kube::Error::Service(e) => self.unavailable(e.to_string()),
            other => BackendError::Other(other.to_string()),
        }
    }

    /// The API server answered one of this server's requests: its identity is allowed.
    fn answered(&self) {
        self.allowed
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn unavailable(&self, message: String) -> BackendError {
        BackendError::Unavailable {
            address: self.address.clone(),
            message,
        }
    }
}

impl KubeBackend {
    /// Creates `object`, one of the access objects of Framework `framework`. One that
    /// exists already is the same (the names and contents follow from the Framework's
    /// name): kept when no owner has it (left by an interrupted submission) or its owner
    /// still exists (the submission then fails on the Framework's 409); made again when
    /// its owner is gone and the garbage collector has yet to remove it.
    async fn ensure<K>(&self, api: &Api<K>, object: &K, framework: &str) -> Result<(), BackendError>
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
    async fn remove_access(&self, access: &JobAccess) {
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
}

impl Backend for KubeBackend {
    /// The image's user, which the server cannot see: root, as in the images of
    /// TensorFlow, PyTorch and Horovod.
    fn task_user(&self) -> String {
        "root".to_string()
    }

    fn describe(&self) -> String {
        format!(
            "kubernetes at {} (namespace {})",
            self.address, self.namespace
        )
    }

    fn create(&self, framework: Framework, key: JobKey) -> BoxFuture<'_, Result<(), BackendError>> {
        async move {
            // The job's own account and grant come first: FrameworkController creates
            // the pods as soon as the Framework exists, and they name the account.
            let access = JobAccess::of(&framework);
            self.ensure(&self.accounts, &access.account, framework.name())
                .await?;
            self.ensure(&self.roles, &access.role, framework.name())
                .await?;
            self.ensure(&self.bindings, &access.binding, framework.name())
                .await?;
            let created = match self.api.create(&PostParams::default(), &framework).await {
                Ok(created) => {
                    self.answered();
                    created
                }
                Err(e) => {
                    let error = self.error(e);
                    if !matches!(error, BackendError::Conflict(_)) {
                        // No job of that name: what was made for it goes.
                        self.remove_access(&access).await;
                    }
                    return Err(error);
                }
            };
            // From now on the garbage collector removes them with the Framework.
            let owner = serde_json::json!({"metadata": {"ownerReferences": [created.owner_reference()]}});
            let patch = Patch::Merge(&owner);
            let name = pai_contract::access::job_account(created.name());
            let params = PatchParams::default();
            let owned = futures::join!(
                self.accounts.patch(&name, &params, &patch),
                self.roles.patch(&name, &params, &patch),
                self.bindings.patch(&name, &params, &patch),
            );
            for result in [owned.0.map(drop), owned.1.map(drop), owned.2.map(drop)] {
                if let Err(e) = result {
                    tracing::warn!(framework = %created.name(), error = %self.error(e), "cannot make the Framework own its access objects; they stay when it is deleted");
                }
            }
            // The Secret names its owner by UID, which only the created Framework has;
            // the garbage collector deletes it with the Framework. Until it exists the
            // kubelet holds the pods (their volume waits for it).
            let secret = job_secret(&created, &key);
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
            Ok(())
        }
        .boxed()
    }

    fn ssh_key<'a>(
        &'a self,
        name: &'a str,
        file: &'static str,
    ) -> BoxFuture<'a, Result<Option<String>, BackendError>> {
        async move {
            let secret = self
                .secrets
                .get_opt(&training::job_ssh_secret(name))
                .await
                .inspect(|_| self.answered())
                .map_err(|e| self.error(e))?;
            Ok(secret
                .and_then(|s| s.data)
                .and_then(|mut d| d.remove(file))
                .and_then(|bytes| String::from_utf8(bytes.0).ok()))
        }
        .boxed()
    }

    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Framework>, BackendError>> {
        async move {
            self.api
                .get_opt(name)
                .await
                .inspect(|_| self.answered())
                .map_err(|e| self.error(e))
        }
        .boxed()
    }

    fn list<'a>(
        &'a self,
        user: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<Framework>, BackendError>> {
        async move {
            let mut selector = format!("{}={}", meta::LABEL_MANAGED_BY, meta::MANAGED_BY);
            if let Some(user) = user {
                selector.push_str(&format!(",{}={user}", meta::LABEL_USER));
            }
            self.api
                .list(&ListParams::default().labels(&selector))
                .await
                .map(|list| list.items)
                .inspect(|_| self.answered())
                .map_err(|e| self.error(e))
        }
        .boxed()
    }

    fn set_execution<'a>(
        &'a self,
        name: &'a str,
        execution: ExecutionType,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        async move {
            let patch = serde_json::json!({"spec": {"executionType": execution}});
            self.api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
                .inspect(|_| self.answered())
                .map_err(|e| self.error(e))
        }
        .boxed()
    }

    fn logs<'a>(
        &'a self,
        pod: &'a str,
        follow: bool,
        earlier: Option<i32>,
    ) -> BoxFuture<'a, Result<LogStream, BackendError>> {
        async move {
            if let Some(attempt) = earlier {
                return Err(BackendError::Gone(format!(
                    "the log of attempt {attempt} is no longer on the cluster: FrameworkController deletes a task's pod before it starts the next attempt (pod {pod} is the current attempt's), and with it the pod's log; keep earlier attempts' logs with the cluster's log collector"
                )));
            }
            let params = LogParams {
                container: Some(MAIN_CONTAINER.to_string()),
                follow,
                ..LogParams::default()
            };
            let reader = self
                .pods
                .log_stream(pod, &params)
                .await
                .inspect(|_| self.answered())
                .map_err(|e| self.error(e))?;
            let chunks = futures::stream::unfold(Box::pin(reader), |mut reader| async move {
                let mut buf = vec![0u8; 16 * 1024];
                match reader.read(&mut buf).await {
                    Ok(0) => None,
                    Ok(n) => {
                        buf.truncate(n);
                        Some((Ok(axum::body::Bytes::from(buf)), reader))
                    }
                    Err(e) => Some((Err(e), reader)),
                }
            });
            Ok(chunks.boxed())
        }
        .boxed()
    }

    /// The API server cuts the log: `tailLines` and `limitBytes`, nothing more crosses.
    fn log_tail<'a>(
        &'a self,
        pod: &'a str,
        lines: usize,
        max_bytes: usize,
    ) -> BoxFuture<'a, Result<String, BackendError>> {
        async move {
            let params = LogParams {
                container: Some(MAIN_CONTAINER.to_string()),
                tail_lines: Some(i64::try_from(lines).unwrap_or(i64::MAX)),
                limit_bytes: Some(i64::try_from(max_bytes).unwrap_or(i64::MAX)),
                ..LogParams::default()
            };
            let text = self
                .pods
                .logs(pod, &params)
                .await
                .inspect(|_| self.answered())
                .map_err(|e| self.error(e))?;
            Ok(super::backend::last_lines(
                text.as_bytes(),
                lines,
                max_bytes,
            ))
        }
        .boxed()
    }

    fn watch<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<FrameworkStream, BackendError>> {
        async move {
            use kube::runtime::WatchStreamExt;
            use kube::runtime::watcher::{self, Event};
            let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
            let name = name.to_string();
            // A (re-)list that no longer finds the Framework means it was deleted while
            // the watch was down: the raw watcher says so only by its absence.
            let events = watcher::watcher(self.api.clone(), config)
                .default_backoff()
                .scan((false, false), move |(listed, failing), event| {
                    if event.is_ok() && !matches!(event, Ok(Event::Init)) && *failing {
                        *failing = false;
                        tracing::info!(framework = %name, "watching again");
                    }
                    let change = match event {
                        Ok(Event::Init) => {
                            *listed = false;
                            None
                        }
                        Ok(Event::InitApply(f)) => {
                            *listed = true;
                            Some(Ok(Some(f)))
                        }
                        Ok(Event::InitDone) => (!*listed).then_some(Ok(None)),
                        Ok(Event::Apply(f)) => Some(Ok(Some(f))),
                        Ok(Event::Delete(_)) => Some(Ok(None)),
                        Err(e) => {
                            // The watcher re-lists after its back-off; the stream goes on.
                            // Said once per interruption, not at every retry.
                            if !*failing {
                                *failing = true;
                                tracing::warn!(framework = %name, error = %e, "watch interrupted; resuming with back-off");
                            }
                            None
                        }
                    };
                    futures::future::ready(Some(change))
                })
                .filter_map(futures::future::ready);
            Ok(events.boxed())
        }
        .boxed()
    }

    fn delete<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), BackendError>> {
        async move {
            self.api
                .delete(name, &DeleteParams::background())
                .await
                .map(|_| ())
                .inspect(|_| self.answered())
                .map_err(|e| self.error(e))
        }
        .boxed()
    }
}

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
