//! The embedded default behind the jobs API: [`crate::Machine`] (which knows nothing of
//! HTTP) as a [`Backend`], with its dependency controller started by the backend itself.

use std::sync::Arc;

use futures::future::BoxFuture;

use pai_backend::backend::{
    Backend, BackendError, Changed, FrameworkStream, LogPart, LogRequest, LogStream, split_log,
};
use pai_backend::controller::Event;
use pai_contract::Framework;
use pai_contract::framework::ExecutionType;
use pai_job::ssh_key::JobKey;

use crate::Settings;

/// Runs Frameworks on this machine.
pub struct LocalBackend(crate::Machine);

impl LocalBackend {
    /// How tasks run here: in their images through an engine, or on the host (and why).
    pub fn isolation(&self) -> String {
        self.0.isolation().describe()
    }

    /// Whether tasks run in containers of an engine (else on this machine's host).
    pub fn in_containers(&self) -> bool {
        self.0.isolation().engine().is_some()
    }

    /// The machine it runs Frameworks on.
    pub fn machine(&self) -> &crate::Machine {
        &self.0
    }

    /// Opens the state directory (see [`crate::Machine::open`]) and starts the
    /// dependency controller of its jobs; it runs as long as the backend is kept.
    pub async fn open(settings: Settings) -> Result<Arc<Self>, crate::Error> {
        let backend = Arc::new(Self(crate::Machine::open(settings).await?));
        let dependencies: Arc<dyn Backend> = backend.clone();
        pai_backend::depends::start(&dependencies);
        Ok(backend)
    }
}

impl From<crate::Error> for BackendError {
    fn from(error: crate::Error) -> Self {
        match error {
            crate::Error::Conflict(message) => Self::Conflict(message),
            crate::Error::NotFound => Self::NotFound,
            crate::Error::Refused(message) => Self::Refused(message),
            crate::Error::Gone(message) => Self::Gone(message),
            crate::Error::Other(message) => Self::Other(message),
        }
    }
}

impl Backend for LocalBackend {
    fn describe(&self) -> String {
        self.0.describe()
    }

    fn runs_here(&self) -> bool {
        true
    }

    fn warnings(&self, spec: &pai_translate::spec::JobSpec) -> Vec<String> {
        let mut gpus: Vec<String> = self
            .0
            .gpus()
            .unmapped(spec.gpu_type())
            .into_iter()
            .collect();
        if !self.0.gpus().devices.is_empty() {
            // The machine's own say which GPUs a task has: set after the job's variables.
            for (name, _) in spec.job_envs() {
                if crate::gpus::TASK_VARIABLES.contains(&name.as_str()) {
                    gpus.push(format!(
                        "jobEnvs sets {name}: tasks get the GPUs this machine gives each of them instead"
                    ));
                }
            }
        }
        if self.0.isolation().engine().is_some() {
            // In its images: the programs are the images', the limits the engine's, a v2
            // job's registry credentials its pulls'.
            return gpus;
        }
        let mut images: Vec<&str> = Vec::new();
        for role in spec.roles() {
            let image = role.image_or(spec.image());
            if !images.contains(&image) {
                images.push(image);
            }
        }
        // Why there is no engine, said once (the line before the warning says the rest).
        let why = match self.0.isolation() {
            crate::containers::Isolation::Host { why } => why.as_str(),
            crate::containers::Isolation::Containers(_) => "",
        };
        let mut out = vec![format!(
            "this machine runs the job without images or containers: every command runs here as user {}, with this machine's programs (image {} is not used{}: {why})",
            self.task_user(),
            images.join(", "),
            if spec.registry_auths().is_empty() {
                ""
            } else {
                ", nor its registry credentials"
            },
        )];
        out.extend(gpus);
        out.extend(pai_translate::warnings::missing_programs(
            spec,
            &std::env::var("PATH").unwrap_or_default(),
        ));
        out
    }

    fn write_metrics(&self, out: &mut String) {
        self.0.observed().write(out);
    }

    fn held(&self, framework: &Framework) -> Option<Arc<pai_api::waiting::Waiting>> {
        let queued = self.0.queued(framework.name())?;
        Some(Arc::new(pai_api::waiting::Waiting {
            reason: queued.reason.to_string(),
            message: queued.message,
            since: queued
                .since
                .parse::<jiff::Timestamp>()
                .ok()
                .map(|t| t.as_millisecond()),
            until: None,
        }))
    }

    /// Tasks run as the server's own user; in container mode as the image's, which the
    /// server does not read: root, as on a cluster (see the Kubernetes backend).
    fn task_user(&self) -> String {
        if self.0.isolation().engine().is_some() {
            return "root".to_string();
        }
        nix::unistd::User::from_uid(nix::unistd::getuid())
            .ok()
            .flatten()
            .map(|u| u.name)
            .or_else(|| std::env::var("USER").ok())
            .unwrap_or_else(|| nix::unistd::getuid().to_string())
    }

    fn create(&self, framework: Framework, key: JobKey) -> BoxFuture<'_, Result<(), BackendError>> {
        Box::pin(async move { Ok(self.0.create(framework, key).await?) })
    }

    fn admit(&self, framework: &Framework) -> Result<(), BackendError> {
        Ok(self.0.admit(framework)?)
    }

    fn ssh_key<'a>(
        &'a self,
        name: &'a str,
        file: &'static str,
    ) -> BoxFuture<'a, Result<Option<String>, BackendError>> {
        Box::pin(async move { Ok(self.0.ssh_key(name, file)) })
    }

    fn get<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Arc<Framework>>, BackendError>> {
        Box::pin(async move { Ok(self.peek(name)) })
    }

    fn peek(&self, name: &str) -> Option<Arc<Framework>> {
        self.0.get(name)
    }

    fn seen(&self, name: &str) -> Option<pai_backend::backend::Seen> {
        self.0.inspect(name, pai_backend::backend::Seen::of)
    }

    fn ready(&self) -> Result<(), BackendError> {
        Ok(())
    }

    fn changes(&self) -> futures::stream::BoxStream<'static, Event<Changed>> {
        pai_backend::controller::from_broadcast(self.0.changes(), |(name, waits)| Changed {
            name: name.to_string(),
            waits,
        })
    }

    /// A finished job here keeps its Framework until retention deletes the job, deflated
    /// while nothing uses it (cold): its list row is kept beside it.
    fn archived(&self, name: &str) -> Option<Arc<pai_api::jobs::JobRow>> {
        self.0.cold_row(name)
    }

    fn archive(&self) -> Vec<(String, Arc<pai_api::jobs::JobRow>)> {
        self.0.cold_rows()
    }

    fn release<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(async move { Ok(self.0.release(name).await?) })
    }

    fn refuse<'a>(
        &'a self,
        name: &'a str,
        why: &'a str,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(async move { Ok(self.0.refuse(name, why).await?) })
    }

    fn list<'a>(
        &'a self,
        user: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<Arc<Framework>>, BackendError>> {
        Box::pin(async move { Ok(self.0.list(user)) })
    }

    fn set_execution<'a>(
        &'a self,
        name: &'a str,
        execution: ExecutionType,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(async move { Ok(self.0.set_execution(name, execution).await?) })
    }

    fn edit_tags<'a>(
        &'a self,
        name: &'a str,
        edit: &'a pai_job::tags::Edit,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(async move {
            self.0
                .annotate(name, |annotations| pai_job::tags::apply(annotations, edit))
                .await?
                .map_err(BackendError::Tag)
                .map(drop)
        })
    }

    /// One log per task: the runtime's lines (`prep/`, the barrier) are in it, marked.
    fn log<'a>(
        &'a self,
        pod: &'a str,
        request: LogRequest,
    ) -> BoxFuture<'a, Result<LogStream, BackendError>> {
        Box::pin(async move {
            let which = match request.part {
                LogPart::Lines(_) => crate::LogWhich::Container,
                LogPart::Stream(stream) => crate::LogWhich::Stream(stream),
            };
            let reading = crate::LogReading {
                which,
                follow: request.follow,
                earlier: request.earlier,
                timestamps: request.timestamps,
            };
            let stream = self.0.logs(pod, reading)?;
            Ok(match request.part {
                LogPart::Lines(source) => split_log(stream, source, request.timestamps),
                LogPart::Stream(_) => stream,
            })
        })
    }

    fn log_tail<'a>(
        &'a self,
        pod: &'a str,
        lines: usize,
        max_bytes: usize,
    ) -> BoxFuture<'a, Result<String, BackendError>> {
        Box::pin(async move {
            let end = self.0.log_end(pod, max_bytes as u64)?;
            Ok(pai_backend::backend::last_lines(&end, lines, max_bytes))
        })
    }

    fn log_rotated<'a>(&'a self, pod: &'a str) -> BoxFuture<'a, Option<String>> {
        Box::pin(async move { self.0.log_rotated(pod) })
    }

    fn watch<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<FrameworkStream, BackendError>> {
        Box::pin(async move {
            use futures::StreamExt;
            let stream = self.0.watch(name)?;
            Ok(stream.map(|item| item.map_err(BackendError::from)).boxed())
        })
    }

    fn delete<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(async move { Ok(self.0.delete(name).await?) })
    }
}
