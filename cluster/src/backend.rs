//! Frameworks in a Kubernetes cluster, through its API server. FrameworkController runs
//! them; this backend only creates, reads, patches and deletes the objects.

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pai_contract::framework::ExecutionType;
use pai_contract::{Framework, meta, training};
use pai_job::ssh_key::JobKey;

use pai_backend::backend::{
    Backend, BackendError, Changed, FrameworkStream, LogPart, LogRequest, LogStream, split_log,
};
use pai_backend::controller::Event;
use pai_contract::log_lines::Source;

use crate::errors::ApiErrors;
use crate::job_access::JobAccess;
use crate::store::KubeStore;
use pai_contract::framework::MAIN_CONTAINER;

pub struct KubeBackend {
    api: Api<Framework>,
    pods: Api<Pod>,
    /// Where a task's log is kept once its pod is gone ([`crate::log_keeper`]).
    config_maps: Api<k8s_openapi::api::core::v1::ConfigMap>,
    secrets: Api<Secret>,
    accounts: Api<ServiceAccount>,
    roles: Api<Role>,
    bindings: Api<RoleBinding>,
    /// PodGroups of scheduler-plugins' coscheduling and of Volcano (gang admission).
    coscheduling_groups: Api<kube::api::DynamicObject>,
    volcano_groups: Api<kube::api::DynamicObject>,
    /// Every Framework rest-lite made, as its one watch keeps them: what reads read.
    store: KubeStore,
    /// Why waiting jobs wait (see [`KubeBackend::admitting`]).
    admission: Option<crate::admission::Admission>,
    /// Volcano's Queues (cluster-wide) and Kueue's LocalQueues, to refuse a job naming
    /// one that does not exist.
    volcano_queues: Api<kube::api::DynamicObject>,
    kueue_queues: Api<kube::api::DynamicObject>,
    /// The cluster's PriorityClasses and Kueue's WorkloadPriorityClasses, to refuse a job
    /// naming one that does not exist.
    priority_classes: Api<k8s_openapi::api::scheduling::v1::PriorityClass>,
    kueue_priority_classes: Api<kube::api::DynamicObject>,
    errors: Arc<ApiErrors>,
    /// The last log tails read, by pod: a page shown to many readers reads each pod's
    /// log once per [`TAIL_TTL`].
    tails: std::sync::Mutex<HashMap<String, (Instant, String)>>,
    /// The job history beyond the Frameworks ([`crate::archive`]), if configured.
    archive: Option<Arc<crate::archive::Archive>>,
    /// The retention's bounds as the config says them now (read again when it changes).
    retention: tokio::sync::watch::Sender<pai_backend::retention::Bounds>,
    /// Who deleted jobs' pods ([`crate::disruptions`]): noted by the log keeper's watch,
    /// written into the attempts' ends by the historian.
    disruptions: crate::disruptions::Disruptions,
}

/// A kept log as a stream, followed by why it is incomplete when it is.
/// `stamped`: each line begins with the best time known for it (the kept copy has no
/// times but the runtime's own lines').
fn kept_stream(bytes: Vec<u8>, lost: &str, stamped: bool) -> LogStream {
    let mut bytes = bytes;
    if !lost.is_empty() {
        bytes.extend_from_slice(
            format!("{}{lost}\n", pai_contract::log_lines::mark("WARN")).as_bytes(),
        );
    }
    if stamped {
        let now = jiff::Timestamp::now().to_string();
        bytes = pai_contract::log_lines::stamp_lines(&bytes, &now);
    }
    futures::stream::once(async move { Ok(bytes::Bytes::from(bytes)) }).boxed()
}

/// The PodGroups of `api_version` (`group/version`) in `namespace`.
fn pod_groups(
    client: &Client,
    namespace: &str,
    api_version: &str,
) -> Api<kube::api::DynamicObject> {
    let resource =
        crate::admission::resource(api_version, "PodGroup", pai_translate::gang::PODGROUPS);
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// How long a writer waits for the server's copy to show its write (read-your-writes).
pub const WRITE_VISIBLE_BOUND: Duration = Duration::from_secs(2);
/// How long a log tail read for a page is shown to other readers: the pages refresh
/// every few seconds.
const TAIL_TTL: Duration = Duration::from_secs(3);
/// Log tails kept at most (the oldest go first).
const TAILS_KEPT: usize = 4096;

/// What the server runs on a cluster beside the jobs API.
#[derive(Clone, Debug)]
pub struct Settings {
    pub namespace: String,
    /// The API server's address, as errors name it.
    pub address: String,
    /// Whose groups and queues hold a job before it runs.
    pub engine: pai_translate::gang::Engine,
    /// What each job keeps of its tasks' logs once their pods are gone (`keptLogBytes`,
    /// `keptLogBytesPerJob`, `keptAttempts`; bytes 0: none).
    pub kept_logs: crate::log_keeper::Budget,
    /// This replica's name, as its Events' `reportingInstance`.
    pub instance: String,
    /// The back-off of a job whose attempts end quickly, published with each attempt's
    /// peer table for its tasks' runtimes to wait out (`restartBackoff`).
    pub restart: pai_job::restarts::RestartBackoff,
    /// Which finished jobs are kept (`retention`).
    pub retention: pai_backend::retention::Bounds,
    /// The job history, and how long a finished Framework stays in the cluster once the
    /// history holds it (`history`); `None`: the Frameworks are the history.
    pub history: Option<(Arc<crate::archive::Archive>, Duration)>,
}

impl KubeBackend {
    /// The backend with every controller the server runs on a cluster, each started
    /// here and nowhere else: the copy's watch, why jobs wait (admission), kept logs,
    /// and on the controller runtime the peer tables, the attempts' history, Events and
    /// jobs that wait for jobs. They run as long as the process (within a Tokio runtime).
    pub fn run(client: Client, settings: &Settings) -> Arc<Self> {
        let namespace = settings.namespace.as_str();
        let mut backend = Self::start(client.clone(), namespace, &settings.address);
        if let Some((archive, _)) = &settings.history {
            backend.archive = Some(archive.clone());
            tokio::spawn(archive.clone().keep_loading());
        }
        let backend = Arc::new(
            backend
                .admitting(client.clone(), namespace, settings.engine)
                .keeping_logs(client.clone(), namespace, settings.kept_logs),
        );
        let store = backend.store();
        tokio::spawn(backend.clone().probe_credentials());
        tokio::spawn(
            crate::publisher::Publisher::new(client.clone(), namespace)
                .restarting(settings.restart)
                .run(store.clone()),
        );
        tokio::spawn(
            crate::history::Historian::new(client.clone(), namespace, backend.disruptions.clone())
                .run(store.clone()),
        );
        if let Some((archive, _)) = &settings.history {
            tokio::spawn(
                crate::retention::Recorder {
                    archive: archive.clone(),
                    store: store.clone(),
                }
                .run(),
            );
        }
        tokio::spawn(
            crate::retention::Sweeper {
                bounds: {
                    backend.retention.send_replace(settings.retention);
                    backend.retention.subscribe()
                },
                api: Api::namespaced(client.clone(), namespace),
                pods: Api::namespaced(client.clone(), namespace),
                config_maps: Api::namespaced(client.clone(), namespace),
                store: store.clone(),
                archive: settings.history.as_ref().map(|(a, _)| a.clone()),
                framework_kept: settings
                    .history
                    .as_ref()
                    .map_or(Duration::ZERO, |(_, kept)| *kept),
                kept_attempts: settings.kept_logs.attempts,
            }
            .run(),
        );
        tokio::spawn(
            crate::events::Recorder::new(client, namespace, &settings.instance).run(store),
        );
        let dependencies: Arc<dyn Backend> = backend.clone();
        pai_backend::depends::start(&dependencies);
        backend
    }

    /// A backend on the API server `client` talks to (at `address`), in `namespace`;
    /// starts the watch that keeps its copy of the Frameworks (within a Tokio runtime).
    pub fn start(client: Client, namespace: &str, address: &str) -> Self {
        Self::with_stale_limit(
            client,
            namespace,
            address,
            crate::store::DEFAULT_STALE_LIMIT,
        )
    }

    /// [`KubeBackend::start`], serving a copy whose watch fails for `stale_limit` at most.
    pub fn with_stale_limit(
        client: Client,
        namespace: &str,
        address: &str,
        stale_limit: Duration,
    ) -> Self {
        let errors = ApiErrors::new(namespace, address);
        let api: Api<Framework> = Api::namespaced(client.clone(), namespace);
        Self {
            store: KubeStore::start(api.clone(), stale_limit, errors.clone()),
            pods: Api::namespaced(client.clone(), namespace),
            config_maps: Api::namespaced(client.clone(), namespace),
            secrets: Api::namespaced(client.clone(), namespace),
            accounts: Api::namespaced(client.clone(), namespace),
            roles: Api::namespaced(client.clone(), namespace),
            coscheduling_groups: pod_groups(
                &client,
                namespace,
                pai_translate::gang::COSCHEDULING_API,
            ),
            volcano_groups: pod_groups(&client, namespace, pai_translate::gang::VOLCANO_API),
            volcano_queues: Api::all_with(
                client.clone(),
                &crate::admission::resource(pai_translate::gang::VOLCANO_API, "Queue", "queues"),
            ),
            kueue_queues: Api::namespaced_with(
                client.clone(),
                namespace,
                &crate::admission::resource(
                    crate::admission::KUEUE_API,
                    "LocalQueue",
                    "localqueues",
                ),
            ),
            priority_classes: Api::all(client.clone()),
            kueue_priority_classes: Api::all_with(
                client.clone(),
                &crate::admission::resource(
                    crate::admission::KUEUE_API,
                    "WorkloadPriorityClass",
                    "workloadpriorityclasses",
                ),
            ),
            admission: None,
            bindings: Api::namespaced(client, namespace),
            api,
            errors,
            tails: Default::default(),
            archive: None,
            retention: tokio::sync::watch::channel(Default::default()).0,
            disruptions: Default::default(),
        }
    }

    /// Keeps why waiting jobs wait, from the pods' scheduling verdicts and `engine`'s
    /// groups (see [`crate::admission`]): two watches of `namespace`. Under Kueue, also
    /// gives the quota of the jobs that are over back ([`crate::queue_release`]).
    pub fn admitting(
        mut self,
        client: Client,
        namespace: &str,
        engine: pai_translate::gang::Engine,
    ) -> Self {
        if engine == pai_translate::gang::Engine::Kueue {
            tokio::spawn(
                crate::queue_release::QueueRelease::new(client.clone(), namespace)
                    .run(self.store.clone()),
            );
        }
        self.admission = Some(crate::admission::Admission::start(
            client,
            namespace,
            engine,
            self.store.clone(),
        ));
        self
    }

    /// Keeps the end of each task's log as its containers end, in one ConfigMap per job
    /// ([`crate::log_keeper`]); a `budget` of 0 bytes: none.
    pub fn keeping_logs(
        self,
        client: Client,
        namespace: &str,
        budget: crate::log_keeper::Budget,
    ) -> Self {
        if budget.task_bytes > 0 && budget.job_bytes > 0 {
            tokio::spawn(
                crate::log_keeper::LogKeeper::new(client, namespace, self.store.clone(), budget)
                    .noting(self.disruptions.clone())
                    .run(),
            );
        }
        self
    }

    /// What was kept of pod `pod`'s log in attempt `attempt` (its pod is gone).
    async fn kept(&self, pod: &str, attempt: i32) -> Option<crate::log_keeper::Kept> {
        if let Some(kept) = crate::log_keeper::kept(&self.config_maps, pod, attempt).await {
            return Some(kept);
        }
        let archive = self.archive.as_ref()?;
        archive
            .kept(&pai_contract::kept_logs::archive_key(pod, attempt))
            .await
            .inspect_err(
                |e| tracing::warn!(pod, error = %e, "cannot read a kept log from the history"),
            )
            .ok()
            .flatten()
    }

    /// The history's entry of the job of pod `pod`, where its Framework is gone.
    fn archived_pod(&self, pod: &str) -> Option<crate::archive::Archived> {
        let framework = pai_contract::kept_logs::framework_of(pod);
        if self.store.get(framework).is_some() {
            return None;
        }
        self.archive.as_ref()?.get(framework)
    }

    /// What was kept of pod `pod`'s log in its job's current attempt: in its kept-log
    /// ConfigMap, or in the history. The history holds it before its Framework goes, so
    /// a job whose deletion this copy has not seen yet still has its log there.
    async fn kept_now(&self, pod: &str) -> Option<crate::log_keeper::Kept> {
        let attempt = match self.archived_pod(pod) {
            Some(archived) => archived.attempt,
            None => self
                .store
                .get(pai_contract::kept_logs::framework_of(pod))?
                .attempt_id(),
        };
        self.kept(pod, attempt).await
    }

    /// Refuses a job whose pods name a queue the cluster does not have (a Volcano Queue,
    /// or one that is closed; a Kueue LocalQueue of the namespace). When the server
    /// cannot tell (not allowed to read queues, the API server failing), the job goes
    /// on, and waits with the engine's reason.
    async fn check_queue(&self, framework: &Framework) -> Result<(), BackendError> {
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
    async fn check_priority_class(&self, framework: &Framework) -> Result<(), BackendError> {
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
    async fn missing<K>(&self, api: &Api<K>, name: &str) -> Option<String>
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

    /// A copy of the Frameworks of `namespace` alone, without a backend (a publisher on
    /// its own).
    pub fn store_only(client: Client, namespace: &str, address: &str) -> KubeStore {
        let errors = ApiErrors::new(namespace, address);
        KubeStore::start(
            Api::namespaced(client, namespace),
            crate::store::DEFAULT_STALE_LIMIT,
            errors,
        )
    }

    /// The copy of the Frameworks, for the publisher and the event recorder.
    pub fn store(&self) -> KubeStore {
        self.store.clone()
    }

    fn error(&self, error: kube::Error) -> BackendError {
        self.errors.error(error)
    }

    /// The API server answered one of this server's requests: its identity is allowed.
    fn answered(&self) {
        crate::store::ApiVoice::answered(&*self.errors);
    }

    /// Whether reads may be answered from the copy; 503 with the reason if not.
    fn serving(&self) -> Result<(), BackendError> {
        self.store
            .serving()
            .map_err(|reason| self.errors.unavailable(reason.to_string()))?;
        // Its watches may stay open and quiet while its credentials are refused.
        match self.errors.credentials.refusal() {
            Some(refusal) if refusal.since.elapsed() > self.store.stale_limit() => {
                Err(BackendError::CredentialsRefused(format!(
                    "the server's copy of the jobs is out of date: {}",
                    refusal.explain()
                )))
            }
            _ => Ok(()),
        }
    }

    /// Asks the API server every [`crate::credentials::PROBE_EVERY`] whether it still
    /// accepts this server's credentials (one list of at most one Framework's metadata).
    async fn probe_credentials(self: Arc<Self>) {
        let params = ListParams::default().limit(1);
        loop {
            tokio::time::sleep(crate::credentials::PROBE_EVERY).await;
            match self.api.list_metadata(&params).await {
                Ok(_) => self.answered(),
                Err(e) => {
                    let _ = self.errors.frameworks_error(e);
                }
            }
        }
    }

    /// Waits (within [`WRITE_VISIBLE_BOUND`]) until the copy shows what `done` looks
    /// for in Framework `name`, so that the writer's next read sees its write.
    async fn visible(
        &self,
        changes: tokio::sync::broadcast::Receiver<crate::store::Change>,
        name: &str,
        done: impl Fn(Option<&Framework>) -> bool,
    ) {
        if !self
            .store
            .wait_until(changes, WRITE_VISIBLE_BOUND, done, name)
            .await
        {
            tracing::debug!(framework = %name, "the server's copy does not show the write yet");
        }
    }
}

impl KubeBackend {
    /// Creates `object`, one of the access objects of Framework `framework`. One that
    /// exists already is the same (the names and contents follow from the Framework's
    /// name): kept when no owner has it (left by an interrupted submission) or its owner
    /// still exists (the submission then fails on the Framework's 409); made again when
    /// its owner is gone and the garbage collector has yet to remove it.
    /// The API of `group`'s kind.
    fn groups_of(&self, group: &pai_translate::gang::Group) -> &Api<kube::api::DynamicObject> {
        if group.api_version == pai_translate::gang::VOLCANO_API {
            &self.volcano_groups
        } else {
            &self.coscheduling_groups
        }
    }

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

/// A task's two container logs, as the trait's `log` puts them together.
impl KubeBackend {
    /// The main container's log (`earlier`: that attempt's, kept once its pod went).
    fn main_log<'a>(
        &'a self,
        pod: &'a str,
        request: LogRequest,
    ) -> BoxFuture<'a, Result<LogStream, BackendError>> {
        let LogRequest {
            follow,
            earlier,
            timestamps,
            ..
        } = request;
        async move {
            if let Some(attempt) = earlier {
                return match self.kept(pod, attempt).await {
                    Some(kept) => Ok(kept_stream(kept.main, &kept.lost, timestamps)),
                    None => Err(BackendError::Gone(format!(
                        "the log of attempt {attempt} is no longer on the cluster: FrameworkController deleted its pod, and no copy of it was kept (keptLogBytes is 0, or the server was not running)"
                    ))),
                };
            }
            if self.archived_pod(pod).is_some() {
                // The job is in the history: its pods are long gone.
                return match self.kept_now(pod).await {
                    Some(kept) => Ok(kept_stream(kept.main, &kept.lost, timestamps)),
                    None => Err(BackendError::NotFound),
                };
            }
            let params = LogParams {
                container: Some(MAIN_CONTAINER.to_string()),
                follow,
                timestamps,
                ..LogParams::default()
            };
            match self.pods.log_stream(pod, &params).await {
                Ok(reader) => {
                    self.answered();
                    Ok(crate::pod_log::chunks(reader))
                }
                // Starting: a follower waits for the main container (see `pod_log`); a
                // reader gets what there is of the user's output, nothing yet, where
                // the container exists and has not started.
                Err(e) if crate::pod_log::not_started(&e) => {
                    self.answered();
                    if follow {
                        Ok(crate::pod_log::when_started(
                            self.pods.clone(),
                            self.config_maps.clone(),
                            self.store.clone(),
                            pod.to_string(),
                            params,
                        ))
                    } else if matches!(&e, kube::Error::Api(s) if s.code == 404) {
                        // Gone after it ended: what was kept of it.
                        match self.kept_now(pod).await {
                            Some(kept) => Ok(kept_stream(kept.main, &kept.lost, timestamps)),
                            None => Err(BackendError::NotFound),
                        }
                    } else {
                        Ok(futures::stream::empty().boxed())
                    }
                }
                Err(e) => Err(self.error(e)),
            }
        }
        .boxed()
    }

    /// Changes the tags of job `name`, whose Framework is gone, in its record.
    async fn edit_archived_tags(
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

    /// The init container's log: the runtime's `entry` (whole; it has ended or waits at
    /// the barrier), or what was kept of it once the pod is gone.
    fn init_log<'a>(
        &'a self,
        pod: &'a str,
        timestamps: bool,
    ) -> BoxFuture<'a, Result<LogStream, BackendError>> {
        async move {
            if self.archived_pod(pod).is_some() {
                return self
                    .kept_now(pod)
                    .await
                    .map(|k| kept_stream(k.init, "", timestamps))
                    .ok_or(BackendError::NotFound);
            }
            let params = LogParams {
                container: Some(pai_contract::framework::INIT_CONTAINER.to_string()),
                timestamps,
                ..LogParams::default()
            };
            let text = match self.pods.logs(pod, &params).await {
                Ok(text) => text,
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    return self
                        .kept_now(pod)
                        .await
                        .map(|k| kept_stream(k.init, "", timestamps))
                        .ok_or(BackendError::NotFound);
                }
                Err(e) => return Err(self.error(e)),
            };
            self.answered();
            Ok(futures::stream::once(async move { Ok(bytes::Bytes::from(text)) }).boxed())
        }
        .boxed()
    }
}

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

    // Long: creating a job is ordered (access, gang group, key Secret, Framework, owner
    // references) and undone in reverse on failure.
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
            // The job's own account and grant come first: FrameworkController creates
            // the pods as soon as the Framework exists, and they name the account.
            let access = JobAccess::of(&framework);
            self.ensure(&self.accounts, &access.account, framework.name())
                .await?;
            self.ensure(&self.roles, &access.role, framework.name())
                .await?;
            self.ensure(&self.bindings, &access.binding, framework.name())
                .await?;
            // The gang engine's group comes before the pods that name it too: a pod
            // whose group does not exist yet would be placed alone, or not at all.
            let group = match pai_translate::gang::group(&framework) {
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
            let owned_group = match &group {
                Some((api, name)) => api.patch(name, &params, &patch).await.map(drop),
                None => Ok(()),
            };
            for result in [owned.0.map(drop), owned.1.map(drop), owned.2.map(drop), owned_group] {
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
            if let Some(config) = &key.registry {
                let secret = registry_secret(&created, config);
                if let Err(e) = self.secrets.create(&PostParams::default(), &secret).await {
                    // The pods then pull without the credentials; say so, keep the job.
                    tracing::warn!(framework = %created.name(), error = %self.error(e), "cannot create the job's image pull Secret");
                }
            }
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
const TAG_WRITES: usize = 3;

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
