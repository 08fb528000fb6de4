//! The [`Backend`] trait on a cluster: each request of the jobs API as reads of the server's
//! copy and writes to the API server.

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use kube::api::{DeleteParams, LogParams, Patch, PatchParams, PostParams};

use std::sync::Arc;
use std::time::Instant;

use pai_contract::framework::ExecutionType;
use pai_contract::{Framework, meta, training};
use pai_job::ssh_key::JobKey;

use pai_backend::backend::{
    Backend, BackendError, Changed, FrameworkStream, LogPart, LogRequest, LogStream, split_log,
};
use pai_backend::controller::Event;
use pai_contract::log_lines::Source;

use pai_contract::framework::MAIN_CONTAINER;

use super::KubeBackend;
use super::logs::{TAIL_TTL, TAILS_KEPT};
use super::objects::TAG_WRITES;

impl Backend for KubeBackend {
    fn runs_here(&self) -> bool {
        false
    }

    /// The image's user, which the server cannot see: root, as in the images of
    /// TensorFlow, PyTorch and Horovod.
    fn task_user(&self) -> String {
        "root".to_string()
    }

    fn describe(&self) -> String {
        format!(
            "kubernetes at {} (namespace {})",
            self.errors.address, self.errors.namespace
        )
    }

    fn taking_requests(&self) -> Result<(), BackendError> {
        self.ready()?;
        match self.errors.credentials.refusal() {
            Some(refusal) => Err(BackendError::CredentialsRefused(refusal.explain())),
            None => Ok(()),
        }
    }

    fn ready(&self) -> Result<(), BackendError> {
        self.serving()?;
        match &self.archive {
            Some(archive) => archive.ready().map_err(|why| {
                BackendError::History(format!(
                    "the job history ({}) is not read yet: {why}",
                    archive.place()
                ))
            }),
            None => Ok(()),
        }
    }

    fn archived(&self, name: &str) -> Option<Arc<pai_api::jobs::JobRow>> {
        if self.store.get(name).is_some() {
            return None;
        }
        self.archive.as_ref()?.get(name).map(|a| a.row)
    }

    fn archive(&self) -> Vec<(String, Arc<pai_api::jobs::JobRow>)> {
        let Some(archive) = &self.archive else {
            return Vec::new();
        };
        archive
            .all()
            .into_iter()
            .filter(|(name, _)| self.store.get(name).is_none())
            .map(|(name, a)| (name, a.row))
            .collect()
    }

    fn held(&self, framework: &Framework) -> Option<Arc<pai_api::waiting::Waiting>> {
        self.admission.as_ref()?.held(framework)
    }

    /// Creates a job in order: the checks, its access objects and gang group, the
    /// Framework, what it owns from then on; what was made is undone on failure.
    fn create(&self, framework: Framework, key: JobKey) -> BoxFuture<'_, Result<(), BackendError>> {
        async move {
            // A finished job in the history keeps its name until it is deleted, as its
            // Framework would.
            if self.archived(framework.name()).is_some() {
                return Err(BackendError::Conflict(format!(
                    "Framework {} exists in the job history",
                    framework.name()
                )));
            }
            self.check_queue(&framework).await?;
            self.check_priority_class(&framework).await?;
            // Subscribed before the write: the change that shows it cannot be missed.
            let changes = self.store.subscribe();
            let (access, group) = self.create_access_and_group(&framework).await?;
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
                        if let Some((api, name)) = &group {
                            let _ = api.delete(name, &DeleteParams::background()).await;
                        }
                    }
                    return Err(error);
                }
            };
            self.own(&created, group.as_ref()).await;
            self.create_secrets(&created, &key).await?;
            let uid = created.metadata.uid.clone();
            self.visible(changes, created.name(), |f| {
                f.is_some_and(|f| f.metadata.uid == uid)
            })
            .await;
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

    /// From the copy. A name the copy does not have is read through once: the job may
    /// have been created a moment ago through another replica.
    fn get<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Arc<Framework>>, BackendError>> {
        async move {
            self.serving()?;
            if let Some(found) = self.store.get(name) {
                return Ok(Some(found));
            }
            if let Some(archive) = &self.archive
                && archive.get(name).is_some()
            {
                return match archive.framework(name).await {
                    Ok(found) => Ok(found.map(Arc::new)),
                    Err(e) => Err(BackendError::History(e.to_string())),
                };
            }
            match self.api.get_opt(name).await {
                Ok(found) => {
                    self.answered();
                    Ok(found.map(Arc::new))
                }
                // The copy's answer stands.
                Err(error) => {
                    tracing::debug!(framework = %name, error = %self.error(error), "cannot read through a job the copy does not have");
                    Ok(None)
                }
            }
        }
        .boxed()
    }

    fn list<'a>(
        &'a self,
        user: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<Arc<Framework>>, BackendError>> {
        async move {
            self.serving()?;
            Ok(match user {
                Some(user) => self.store.filter(|f| {
                    f.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(meta::LABEL_USER))
                        .is_some_and(|u| u == user)
                }),
                None => self.store.all(),
            })
        }
        .boxed()
    }

    fn peek(&self, name: &str) -> Option<Arc<Framework>> {
        self.store.get(name)
    }

    fn seen(&self, name: &str) -> Option<pai_backend::backend::Seen> {
        self.store
            .get(name)
            .map(|f| pai_backend::backend::Seen::of(&f))
    }

    /// A job's images, registry credentials and commands are the cluster's to check:
    /// nothing to say before it runs.
    fn warnings(&self, _spec: &pai_translate::spec::JobSpec) -> Vec<String> {
        Vec::new()
    }

    /// FrameworkController and the kubelet start the tasks, and export their own
    /// metrics; the server measures nothing of them.
    fn write_metrics(&self, _out: &mut String) {}

    fn changes(&self) -> futures::stream::BoxStream<'static, Event<Changed>> {
        let frameworks =
            pai_backend::controller::from_broadcast(self.store.subscribe(), |change| {
                let framework = change.framework();
                Changed {
                    name: framework.name().to_string(),
                    waits: pai_job::depends::waits(framework),
                }
            });
        match &self.archive {
            // A job written into the history or deleted from it changes too.
            Some(archive) => futures::stream::select(
                frameworks,
                pai_backend::controller::from_broadcast(archive.subscribe(), |name| Changed {
                    name,
                    waits: false,
                }),
            )
            .boxed(),
            None => frameworks,
        }
    }

    /// Marks the dependencies met and takes the gate out of the pod templates (one patch
    /// under the version read: the pods of later attempts are not held), then lifts the
    /// gate of every pod of the Framework that has it (FrameworkController may have made
    /// them from the gated template).
    fn release<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), BackendError>> {
        async move {
            let framework = self.store.get(name).ok_or(BackendError::NotFound)?;
            if !pai_job::depends::released(&framework) {
                let mut ungated = (*framework).clone();
                pai_backend::depends::ungate_template(&mut ungated);
                let patch = serde_json::json!({
                    "metadata": {
                        "resourceVersion": framework.metadata.resource_version,
                        "annotations": {
                            pai_job::depends::RELEASED: jiff::Timestamp::now().to_string(),
                        },
                    },
                    "spec": {"taskRoles": ungated.spec.task_roles},
                });
                self.api
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .inspect(|_| self.answered())
                    .map_err(|e| self.error(e))?;
            }
            let selector = format!("{}={name}", pai_contract::framework::LABEL_FRAMEWORK_NAME);
            let pods = self
                .pods
                .list(&kube::api::ListParams::default().labels(&selector))
                .await
                .inspect(|_| self.answered())
                .map_err(|e| self.error(e))?;
            for pod in pods {
                let mut spec = pod.spec.clone().unwrap_or_default();
                if !pai_backend::depends::ungate(&mut spec) {
                    continue;
                }
                // Only gates may be taken away; others' (Kueue's) stay, under the
                // version read.
                let patch = serde_json::json!({
                    "metadata": {"resourceVersion": pod.metadata.resource_version},
                    "spec": {"schedulingGates": spec.scheduling_gates},
                });
                let pod_name = pod.metadata.name.clone().unwrap_or_default();
                match self
                    .pods
                    .patch(&pod_name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => self.answered(),
                    // Changed or gone meanwhile: looked at again at the next change.
                    Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => {}
                    Err(e) => return Err(self.error(e)),
                }
            }
            Ok(())
        }
        .boxed()
    }

    /// Says why on the Framework and stops it: FrameworkController completes it, and the
    /// job reads FAILED with that reason.
    fn refuse<'a>(
        &'a self,
        name: &'a str,
        why: &'a str,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        async move {
            let patch = serde_json::json!({
                "metadata": {"annotations": {pai_job::depends::FAILED: why}},
                "spec": {"executionType": ExecutionType::Stop},
            });
            self.api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .inspect(|_| self.answered())
                .map_err(|e| self.error(e))?;
            Ok(())
        }
        .boxed()
    }

    fn set_execution<'a>(
        &'a self,
        name: &'a str,
        execution: ExecutionType,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        async move {
            let changes = self.store.subscribe();
            let patch = serde_json::json!({"spec": {"executionType": execution}});
            let patched = self
                .api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .inspect(|_| self.answered())
                .map_err(|e| self.error(e))?;
            let version = patched.metadata.resource_version;
            self.visible(changes, name, |f| {
                f.is_none_or(|f| f.metadata.resource_version == version)
            })
            .await;
            Ok(())
        }
        .boxed()
    }

    fn edit_tags<'a>(
        &'a self,
        name: &'a str,
        edit: &'a pai_job::tags::Edit,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        async move {
            if let Some(archive) = &self.archive
                && self.archived(name).is_some()
            {
                return self.edit_archived_tags(archive, name, edit).await;
            }
            // The server's copy first; after a conflict (another change came between the
            // read and the write), the API server's own, then again.
            let mut current = self.get(name).await?.ok_or(BackendError::NotFound)?;
            for _ in 0..TAG_WRITES {
                let mut annotations = current.metadata.annotations.clone().unwrap_or_default();
                if !pai_job::tags::apply(&mut annotations, edit)? {
                    return Ok(());
                }
                let tags = annotations.get(pai_job::tags::ANNOTATION);
                let patch = serde_json::json!({"metadata": {
                    "resourceVersion": current.metadata.resource_version,
                    "annotations": {pai_job::tags::ANNOTATION: tags},
                }});
                let changes = self.store.subscribe();
                match self
                    .api
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .inspect(|_| self.answered())
                    .map_err(|e| self.error(e))
                {
                    Ok(patched) => {
                        let version = patched.metadata.resource_version;
                        self.visible(changes, name, |f| {
                            f.is_none_or(|f| f.metadata.resource_version == version)
                        })
                        .await;
                        return Ok(());
                    }
                    Err(BackendError::Conflict(_)) => {
                        current = Arc::new(
                            self.api
                                .get(name)
                                .await
                                .inspect(|_| self.answered())
                                .map_err(|e| self.error(e))?,
                        );
                    }
                    Err(other) => return Err(other),
                }
            }
            Err(BackendError::Conflict(format!(
                "the job changed {TAG_WRITES} times while its tags were written: try again"
            )))
        }
        .boxed()
    }

    /// The retention's bounds count from the next sweep, which a change of them starts
    /// (bounds as they were wake nothing).
    fn reconfigure(&self, config: &pai_translate::config::ClusterConfig) -> Vec<&'static str> {
        let bounds = pai_backend::retention::Bounds::of(&config.retention);
        self.retention
            .send_if_modified(|now| std::mem::replace(now, bounds) != bounds);
        vec!["retention"]
    }

    /// The kubelet's log API gives a container's stdout and stderr merged (in the order
    /// the container runtime read them): there is no log of one stream alone (404). The runtime's lines
    /// are the init container's log, then the main container's marked lines.
    fn log<'a>(
        &'a self,
        pod: &'a str,
        request: LogRequest,
    ) -> BoxFuture<'a, Result<LogStream, BackendError>> {
        let LogRequest {
            part,
            earlier,
            timestamps,
            ..
        } = request;
        async move {
            let source = match part {
                LogPart::Lines(source) => source,
                LogPart::Stream(stream) => {
                    return Err(BackendError::NoSuchLog(format!(
                        "stream={} cannot be served on a cluster: the kubelet's log API gives a container's stdout and stderr merged (in the order the container runtime read them); leave stream out for both",
                        stream.as_str()
                    )));
                }
            };
            let init = match source {
                Source::Runtime | Source::All if earlier.is_none() => {
                    self.init_log(pod, timestamps).await.ok()
                }
                _ => None,
            };
            let main = match (init, self.main_log(pod, request).await) {
                (Some(init), Ok(main)) => Ok(init.chain(main).boxed()),
                // The main container has not started: the init container's log is all
                // there is.
                (Some(init), Err(_)) => Ok(init),
                (None, main) => main,
            };
            main.map(|stream| split_log(stream, source, timestamps))
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
            let key = format!("{pod}/{lines}/{max_bytes}");
            if let Some((_, text)) = self
                .tails
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&key)
                .filter(|(read, _)| read.elapsed() < TAIL_TTL)
            {
                return Ok(text.clone());
            }
            let params = LogParams {
                container: Some(MAIN_CONTAINER.to_string()),
                tail_lines: Some(i64::try_from(lines).unwrap_or(i64::MAX)),
                limit_bytes: Some(i64::try_from(max_bytes).unwrap_or(i64::MAX)),
                ..LogParams::default()
            };
            let text = match self.pods.logs(pod, &params).await {
                Ok(text) => {
                    self.answered();
                    text.into_bytes()
                }
                // The pod is gone: what was kept of its log.
                Err(kube::Error::Api(s)) if s.code == 404 => self
                    .kept_now(pod)
                    .await
                    .map(|k| k.main)
                    .ok_or(BackendError::NotFound)?,
                Err(e) => return Err(self.error(e)),
            };
            let tail = pai_backend::backend::last_lines(&text, lines, max_bytes);
            let mut tails = self.tails.lock().unwrap_or_else(|p| p.into_inner());
            if tails.len() >= TAILS_KEPT {
                tails.retain(|_, (read, _)| read.elapsed() < TAIL_TTL);
            }
            if tails.len() < TAILS_KEPT {
                tails.insert(key, (Instant::now(), tail.clone()));
            }
            Ok(tail)
        }
        .boxed()
    }

    /// A subscription to the copy's changes: no watch of the API server of its own.
    fn watch<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<FrameworkStream, BackendError>> {
        async move {
            self.serving()?;
            if self.store.get(name).is_none()
                && let Some(archive) = &self.archive
                && archive.get(name).is_some()
            {
                // In the history: it ended; its last state is all there is to follow.
                let last = self.get(name).await?;
                return Ok(futures::stream::iter([Ok(last)]).boxed());
            }
            Ok(crate::store::follow(&self.store, name).map(Ok).boxed())
        }
        .boxed()
    }

    fn delete<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), BackendError>> {
        async move {
            // The Framework first, then its record: a deletion that fails between the
            // two leaves the job in the history, where a second delete finds it.
            let recorded = self.archive.as_ref().is_some_and(|a| a.get(name).is_some());
            let changes = self.store.subscribe();
            match self
                .api
                .delete(name, &DeleteParams::background())
                .await
                .inspect(|_| self.answered())
                .map_err(|e| self.error(e))
            {
                Ok(_) => {}
                // Only the history has it.
                Err(BackendError::NotFound) if recorded => {}
                Err(e) => return Err(e),
            }
            if let Some(archive) = &self.archive {
                archive
                    .delete(name)
                    .await
                    .map_err(|e| BackendError::History(e.to_string()))?;
            }
            self.visible(changes, name, |f| {
                f.is_none_or(|f| f.metadata.deletion_timestamp.is_some())
            })
            .await;
            Ok(())
        }
        .boxed()
    }
}
