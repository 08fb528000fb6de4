//! Frameworks in a Kubernetes cluster, through its API server. FrameworkController runs
//! them; this backend only creates, reads, patches and deletes the objects.

mod jobs;
mod logs;
mod objects;

use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::ListParams;
use kube::{Api, Client};

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pai_contract::Framework;

use pai_backend::backend::{Backend, BackendError};

use crate::errors::ApiErrors;
use crate::store::KubeStore;

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
