//! Frameworks in a Kubernetes cluster, through its API server. FrameworkController runs
//! them; this backend only creates, reads, patches and deletes the objects.

use futures::future::BoxFuture;
use futures::{AsyncReadExt, FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};

use pai_contract::framework::ExecutionType;
use pai_contract::{Framework, meta};

use super::backend::{Backend, BackendError, FrameworkStream, LogStream};
use pai_contract::framework::MAIN_CONTAINER;

pub struct KubeBackend {
    api: Api<Framework>,
    pods: Api<Pod>,
    namespace: String,
    address: String,
}

impl KubeBackend {
    pub fn new(client: Client, namespace: &str, address: &str) -> Self {
        Self {
            pods: Api::namespaced(client.clone(), namespace),
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            address: address.to_string(),
        }
    }

    fn error(&self, error: kube::Error) -> BackendError {
        match error {
            kube::Error::Api(status) => match status.code {
                404 => BackendError::NotFound,
                409 => BackendError::Conflict(status.message),
                400 | 422 => BackendError::Invalid(status.message),
                401 | 403 => BackendError::Other(format!(
                    "rest-lite's service account may not manage frameworks in namespace {} ({} {}): see deploy/rbac",
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

    fn unavailable(&self, message: String) -> BackendError {
        BackendError::Unavailable {
            address: self.address.clone(),
            message,
        }
    }
}

impl Backend for KubeBackend {
    fn describe(&self) -> String {
        format!(
            "kubernetes at {} (namespace {})",
            self.address, self.namespace
        )
    }

    fn create(&self, framework: Framework) -> BoxFuture<'_, Result<(), BackendError>> {
        async move {
            self.api
                .create(&PostParams::default(), &framework)
                .await
                .map(|_| ())
                .map_err(|e| self.error(e))
        }
        .boxed()
    }

    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Framework>, BackendError>> {
        async move { self.api.get_opt(name).await.map_err(|e| self.error(e)) }.boxed()
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
                .scan(false, move |listed, event| {
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
                            tracing::warn!(framework = %name, error = %e, "watch interrupted");
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
                .map_err(|e| self.error(e))
        }
        .boxed()
    }
}
