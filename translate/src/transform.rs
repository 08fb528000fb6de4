//! A valid job → the FrameworkController `Framework` that runs it.
//!
//! The Framework grows with the number of roles, never with the number of tasks: every
//! per-task value is derived by the runtime from role-level data (see
//! [`pai_contract::env`]). And it grows linearly with the roles: each role's family of
//! variables is in its own template alone ([`crate::env::role_family_env`]), and the
//! runtime hands it to the other roles. Repeating every role's family in every role's
//! template made a 1,000-task job of 50 roles a 1.09 MB Framework (0.19 MB so), near the
//! API server's ~1.5 MiB for one object.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapProjection, Container, ContainerPort, DownwardAPIProjection,
    DownwardAPIVolumeFile, EmptyDirVolumeSource, EnvVar, HostPathVolumeSource, KeyToPath,
    LocalObjectReference, ObjectFieldSelector, PersistentVolumeClaimVolumeSource,
    PodSchedulingGate, PodSpec, PodTemplateSpec, ProjectedVolumeSource, ResourceRequirements,
    SecretVolumeSource, SecurityContext, ServiceAccountTokenProjection, Volume, VolumeMount,
    VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use pai_contract::env as names;
use pai_contract::env::barrier;
use pai_contract::framework::{
    CompletionPolicySpec, ExecutionType, Framework, FrameworkSpec, GPU_RESOURCE, INIT_CONTAINER,
    MAIN_CONTAINER, RetryPolicySpec, TaskRoleSpec, TaskSpec,
};
use pai_contract::{PortPlan, access, meta, paths, training};

use crate::config::ClusterConfig;
use crate::env::{job_env, role_env};
use crate::ports::{Seed, allocate};
use crate::spec::names::framework_name;
use crate::spec::{JobSpec, SpecErrors, SpecFormat, TaskRole, UserName};

const RUNTIME_VOLUME: &str = "pai-runtime";
const LOGS_VOLUME: &str = "pai-logs";
const SHM_VOLUME: &str = "dshm";
const JOB_SSH_VOLUME: &str = "job-ssh";
const TOKEN_VOLUME: &str = "job-token";

/// One job submission: who, what, and the text exactly as submitted.
#[derive(Clone, Copy, Debug)]
pub struct Submission<'a> {
    pub user: &'a UserName,
    pub spec: &'a JobSpec,
    /// Kept verbatim in an annotation, so `config` returns what the user sent.
    pub spec_text: &'a str,
    /// The text's format, kept beside it.
    pub format: SpecFormat,
}

/// What every role of one job shares.
struct JobParts<'a> {
    image: &'a str,
    /// The team storages its main containers mount.
    storages: Vec<crate::storages::Mount>,
    /// The node labels of the GPU type the job asks for, where the config maps it.
    gpu_nodes: Option<BTreeMap<String, String>>,
    protocol: crate::spec::Protocol,
    /// The job's own pull Secret, when its images need credentials.
    pull_secret: Option<String>,
    /// The Framework's name.
    name: &'a str,
    selection: String,
    /// Whether the main container links the job's MPI hostfile where DeepSpeed looks.
    job_hostfile: bool,
    env: Vec<(String, String)>,
    labels: BTreeMap<String, String>,
    /// What the gang engine reads on every pod.
    gang: crate::gang::PodMarks,
    /// Whether the pods wait for other jobs (a scheduling gate until released).
    gated: bool,
}

/// Builds Frameworks for one cluster configuration.
#[derive(Clone, Debug)]
pub struct Transformer {
    config: ClusterConfig,
}

impl Transformer {
    pub fn new(config: ClusterConfig) -> Self {
        Self { config }
    }

    /// The configuration Frameworks are made by.
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    /// The same with the storages `storages` (the config's as it is now).
    pub fn with_storages(&self, storages: Vec<crate::storages::StorageConfig>) -> Self {
        let mut config = self.config.clone();
        config.storages = storages;
        Self { config }
    }

    /// The Framework that runs `submission`. Fails when the ports cannot be allocated
    /// (a valid spec's names always fit FrameworkController's rules).
    // Long: the Framework's fields in its own order (metadata, roles, annotations), each a
    // few lines.
    pub fn transform(
        &self,
        submission: Submission<'_>,
        seed: Seed,
    ) -> Result<Framework, SpecErrors> {
        let Submission {
            user,
            spec,
            spec_text,
            format,
        } = submission;
        let name = framework_name(user, spec.name());
        let plans = allocate(spec, self.config.port_range, seed)?;

        let tasks: u32 = spec.roles().iter().map(TaskRole::task_number).sum();
        let storages = match spec.storages() {
            Some(requests) => {
                crate::storages::mounts(requests, user.as_str(), &self.config.storages).map_err(
                    |(index, rule)| {
                        SpecErrors::single(
                            &crate::spec::FieldPath::root()
                                .field("extras")
                                .field("storages")
                                .index(index)
                                .field("name"),
                            rule,
                        )
                    },
                )?
            }
            None => Vec::new(),
        };
        let job = JobParts {
            image: spec.image(),
            storages,
            gpu_nodes: spec
                .gpu_type()
                .and_then(|kind| self.config.gpus.types.get(kind))
                .map(|kind| kind.node_selector.clone())
                .filter(|labels| !labels.is_empty()),
            protocol: spec.protocol(),
            pull_secret: (!spec.registry_auths().is_empty())
                .then(|| training::job_registry_secret(&name)),
            name: &name,
            selection: spec.framework_env().to_string(),
            job_hostfile: spec.framework_env().mpi,
            env: job_env(user, spec, &self.config.default_fs_uri),
            labels: BTreeMap::from_iter(
                [
                    (meta::LABEL_USER.to_string(), user.label().to_string()),
                    (meta::LABEL_JOB.to_string(), spec.name().label().to_string()),
                    (
                        meta::LABEL_MANAGED_BY.to_string(),
                        meta::MANAGED_BY.to_string(),
                    ),
                ]
                .into_iter()
                .chain(
                    self.config
                        .priority_classes
                        .class_of(spec.priority())
                        .map(|class| {
                            (pai_contract::priority::LABEL.to_string(), class.to_string())
                        }),
                ),
            ),
            // A v2 job may turn gang allocation off: its pods are then placed one by
            // one (by the engine's scheduler, without a group).
            gang: {
                let mut marks = if spec.gang_allocation() {
                    crate::gang::pod_marks(
                        &self.config.gang,
                        &name,
                        self.config.gang.queue(spec.virtual_cluster()),
                        tasks,
                    )
                } else {
                    crate::gang::PodMarks {
                        scheduler_name: self.config.gang.scheduler().map(str::to_string),
                        ..crate::gang::PodMarks::default()
                    }
                };
                let classes = &self.config.priority_classes;
                if let Some(class) = classes.class_of(spec.priority()) {
                    marks.prioritise(self.config.gang.engine, class, classes.name(class));
                }
                marks
            },
            gated: !spec.depends_on().is_empty(),
        };
        let task_roles = spec
            .roles()
            .iter()
            .zip(&plans)
            .map(|(role, plan)| self.task_role(role, plan, &job))
            .collect();

        let mut framework = Framework::new(
            &name,
            FrameworkSpec {
                description: Some(format!("{}~{}", user.as_str(), spec.name().as_str())),
                execution_type: ExecutionType::Start,
                // With the fancy policy permanent failures (210) are never retried,
                // conflicts (201) are retried without counting; other failures count
                // against retryCount. Its −2 retries always, without it (as OpenPAI).
                retry_policy: {
                    let (fancy_retry_policy, max_retry_count) = spec.retries().policy();
                    RetryPolicySpec {
                        fancy_retry_policy,
                        max_retry_count,
                    }
                },
                task_roles,
            },
        );
        framework.metadata = ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(self.config.namespace.clone()),
            labels: Some(job.labels),
            annotations: Some(BTreeMap::from([
                (meta::ANNOTATION_USER.to_string(), user.as_str().to_string()),
                (
                    meta::ANNOTATION_JOB.to_string(),
                    spec.name().as_str().to_string(),
                ),
                // Never the secrets: their values are masked as OpenPAI masks them.
                (
                    meta::ANNOTATION_SPEC.to_string(),
                    stored_text(spec, spec_text, format),
                ),
                (
                    meta::ANNOTATION_SPEC_FORMAT.to_string(),
                    format.as_str().to_string(),
                ),
            ])),
            ..ObjectMeta::default()
        };
        if let Some(annotations) = framework.metadata.annotations.as_mut() {
            annotations.insert(
                meta::ANNOTATION_PROTOCOL.to_string(),
                spec.protocol().as_str().to_string(),
            );
            if let Some(kind) = spec.gpu_type() {
                annotations.insert(meta::ANNOTATION_GPU_TYPE.to_string(), kind.to_string());
            }
            if let Some(cluster) = spec.virtual_cluster() {
                annotations.insert(
                    meta::ANNOTATION_VIRTUAL_CLUSTER.to_string(),
                    cluster.to_string(),
                );
            }
        }
        if !spec.depends_on().is_empty() {
            let dependencies: Vec<pai_job::depends::Dependency> = spec
                .depends_on()
                .iter()
                .map(|(job, state)| pai_job::depends::Dependency {
                    job: job.as_str().to_string(),
                    state: *state,
                    uid: None,
                })
                .collect();
            if let (Some(annotations), Ok(text)) = (
                framework.metadata.annotations.as_mut(),
                serde_json::to_string(&dependencies),
            ) {
                annotations.insert(pai_job::depends::ANNOTATION.to_string(), text);
            }
        }
        Ok(framework)
    }

    fn task_role(&self, role: &TaskRole, plan: &PortPlan, job: &JobParts<'_>) -> TaskRoleSpec {
        let completion = role.completion();
        TaskRoleSpec {
            name: role.name().task_role().to_string(),
            task_number: i32::try_from(role.task_number()).unwrap_or(i32::MAX),
            framework_attempt_completion_policy: CompletionPolicySpec {
                min_failed_task_count: completion
                    .min_failed
                    .map_or(-1, |n| i32::try_from(n).unwrap_or(i32::MAX)),
                min_succeeded_task_count: completion
                    .min_succeeded
                    .map_or(-1, |n| i32::try_from(n).unwrap_or(i32::MAX)),
            },
            task: TaskSpec {
                // The whole attempt is retried, never a single task: peers found at the
                // barrier must stay the peers of the run.
                retry_policy: RetryPolicySpec::default(),
                pod_graceful_deletion_timeout_sec: self.config.pod_graceful_deletion_timeout_sec,
                pod: self.pod(role, plan, job),
            },
        }
    }

    /// A role's pod: the runtime's init container, the main container, their volumes,
    /// and where the pod runs.
    fn pod(&self, role: &TaskRole, plan: &PortPlan, job: &JobParts<'_>) -> PodTemplateSpec {
        let cfg = &self.config;
        let mut labels = job.labels.clone();
        labels.extend(job.gang.labels.clone());
        let mut annotations = BTreeMap::from([(
            meta::ANNOTATION_ROLE.to_string(),
            role.name().as_str().to_string(),
        )]);
        annotations.extend(job.gang.annotations.clone());
        PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(labels),
                annotations: Some(annotations),
                // No finalizer: the server reads a task's log as it ends
                // (pai_contract::kept_logs), and no pod ever waits for it.
                ..ObjectMeta::default()
            }),
            spec: Some(PodSpec {
                restart_policy: Some("Never".to_string()),
                scheduler_name: job.gang.scheduler_name.clone(),
                // Held until the jobs it waits for reached their states.
                scheduling_gates: job.gated.then(|| {
                    vec![PodSchedulingGate {
                        name: pai_job::depends::GATE.to_string(),
                    }]
                }),
                priority_class_name: job.gang.priority_class_name.clone(),
                // The job's gpuType, for the roles that ask for GPUs.
                node_selector: job.gpu_nodes.clone().filter(|_| role.resources().gpu > 0),
                // The job's own account, which may read the job's Framework and peer
                // table and nothing else; no token is mounted into the user's container.
                service_account_name: Some(access::job_account(job.name)),
                automount_service_account_token: Some(false),
                host_network: cfg.host_network.then_some(true),
                image_pull_secrets: {
                    let names: Vec<LocalObjectReference> = cfg
                        .image_pull_secrets
                        .iter()
                        .chain(&job.pull_secret)
                        .map(|name| LocalObjectReference { name: name.clone() })
                        .collect();
                    (!names.is_empty()).then_some(names)
                },
                termination_grace_period_seconds: Some(cfg.termination_grace_period_sec),
                init_containers: Some(vec![self.init_container(role, job)]),
                containers: vec![self.main_container(role, plan, job)],
                volumes: Some(self.volumes(role, job)),
                ..PodSpec::default()
            }),
        }
    }

    /// The runtime's `entry`: `prep/`, the barrier, the files the main container reads.
    fn init_container(&self, role: &TaskRole, job: &JobParts<'_>) -> Container {
        let cfg = &self.config;
        let mut init_env = vec![
            env_var(names::USER_CMD, role.command()),
            env_var(names::KUBE_APISERVER_ADDRESS, &cfg.kube_apiserver_address),
            // rest-lite publishes every attempt's peer table: the barrier waits for it
            // instead of watching the whole Framework.
            env_var(barrier::PEERS_SOURCE, barrier::SOURCE_PUBLISHED),
            // The main container may run as another user (the image's); the volume
            // holding these files is the pod's alone.
            env_var(names::ENV_FILE_MODE, "644"),
            env_var(training::FRAMEWORK_ENV_VAR, &job.selection),
            // The job's key pair, a Secret rest-lite creates beside the Framework.
            env_var(training::JOB_SSH_DIR_VAR, training::JOB_SSH_MOUNT),
        ];
        // The prep scripts make ssh host keys only for jobs that can log in.
        if let Some((_, key)) = job.env.iter().find(|(k, _)| k == names::SSH_PUB_KEY) {
            init_env.push(env_var(names::SSH_PUB_KEY, key));
        }
        if let Some(timeout) = cfg.barrier_timeout_sec {
            init_env.push(env_var(barrier::TIMEOUT, &timeout.to_string()));
        }
        let mut mounts = shared_mounts();
        mounts.push(VolumeMount {
            read_only: Some(true),
            ..mount(JOB_SSH_VOLUME, training::JOB_SSH_MOUNT)
        });
        // The barrier's token.
        mounts.push(token_mount());
        Container {
            name: INIT_CONTAINER.to_string(),
            image: Some(cfg.runtime_image.clone()),
            image_pull_policy: cfg.runtime_image_pull_policy.clone(),
            command: Some(vec![
                paths::RUNTIME_BINARY_IN_IMAGE.to_string(),
                paths::commands::ENTRY.to_string(),
            ]),
            env: Some(init_env),
            volume_mounts: Some(mounts),
            ..Container::default()
        }
    }

    /// The user's image with the runtime's `run` as PID 1, the whole environment, the
    /// role's resources and ports.
    // Long: one container's fields in the order a reader of the pod spec meets them.
    fn main_container(&self, role: &TaskRole, plan: &PortPlan, job: &JobParts<'_>) -> Container {
        let cfg = &self.config;
        let role_vars = role_env(role, plan, job.protocol);
        let mut runtime_vars = vec![
            (
                names::KILL_GRACE_SEC.to_string(),
                cfg.kill_grace().to_string(),
            ),
            (
                names::LOG_MAX_BYTES.to_string(),
                cfg.user_log_max_bytes.to_string(),
            ),
        ];
        if !cfg.failure_patterns.is_empty()
            && let Ok(json) = serde_json::to_string(&cfg.failure_patterns)
        {
            runtime_vars.push((pai_contract::failure::PATTERNS_VAR.to_string(), json));
        }
        // A pod's file system is its own: the hostfile where DeepSpeed's launcher looks.
        if job.job_hostfile {
            runtime_vars.push((
                training::JOB_HOSTFILE_VAR.to_string(),
                training::DEEPSPEED_HOSTFILE.to_string(),
            ));
        }
        let env = job
            .env
            .iter()
            .chain(&role_vars)
            .chain(&runtime_vars)
            .map(|(k, v)| env_var(k, v))
            .collect();
        let res = role.resources();
        let mut amounts = BTreeMap::from([
            ("cpu".to_string(), Quantity(res.cpu.to_string())),
            (
                "memory".to_string(),
                Quantity(format!("{}Mi", res.memory_mb)),
            ),
        ]);
        if res.gpu > 0 {
            amounts.insert(GPU_RESOURCE.to_string(), Quantity(res.gpu.to_string()));
        }
        let ports = plan
            .all_ports()
            .map(|p| ContainerPort {
                container_port: i32::from(p),
                host_port: cfg.host_network.then_some(i32::from(p)),
                protocol: Some("TCP".to_string()),
                ..ContainerPort::default()
            })
            .collect();
        let mut mounts = shared_mounts();
        mounts.push(mount(SHM_VOLUME, paths::DEV_SHM));
        // No token: the server keeps the log's end (pai_contract::kept_logs), and the
        // user command can do nothing in the API.
        mounts.extend(job.storages.iter().map(|s| VolumeMount {
            name: s.volume.clone(),
            mount_path: s.mount_path.clone(),
            sub_path: s.sub_path.clone(),
            read_only: s.read_only.then_some(true),
            ..VolumeMount::default()
        }));
        Container {
            name: MAIN_CONTAINER.to_string(),
            image: Some(role.image_or(job.image).to_string()),
            command: Some(vec![paths::RUN.to_string()]),
            env: Some(env),
            resources: Some(ResourceRequirements {
                requests: Some(amounts.clone()),
                limits: Some(amounts),
                ..ResourceRequirements::default()
            }),
            ports: Some(ports),
            volume_mounts: Some(mounts),
            security_context: (!cfg.extra_capabilities.is_empty()).then(|| SecurityContext {
                capabilities: Some(Capabilities {
                    add: Some(cfg.extra_capabilities.clone()),
                    drop: None,
                }),
                ..SecurityContext::default()
            }),
            ..Container::default()
        }
    }

    /// The pod's volumes: the runtime's files, the logs, `/dev/shm`, the job's key, the
    /// barrier's token.
    fn volumes(&self, role: &TaskRole, job: &JobParts<'_>) -> Vec<Volume> {
        let logs = match &self.config.log_host_path {
            Some(path) => Volume {
                name: LOGS_VOLUME.to_string(),
                host_path: Some(HostPathVolumeSource {
                    path: path.clone(),
                    type_: Some("DirectoryOrCreate".to_string()),
                }),
                ..Volume::default()
            },
            None => empty_dir(LOGS_VOLUME, None, None),
        };
        vec![
            empty_dir(RUNTIME_VOLUME, None, None),
            logs,
            empty_dir(
                SHM_VOLUME,
                Some("Memory"),
                Some(Quantity(format!("{}Mi", role.resources().shm_mb))),
            ),
            Volume {
                name: JOB_SSH_VOLUME.to_string(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some(training::job_ssh_secret(job.name)),
                    // Read by the init container's user alone; it copies the key for
                    // the task's user.
                    default_mode: Some(0o400),
                    ..SecretVolumeSource::default()
                }),
                ..Volume::default()
            },
            token_volume(),
        ]
        .into_iter()
        .chain(storage_volumes(&job.storages))
        .collect()
    }
}

/// A PersistentVolumeClaim volume per storage (one, if a job mounts it twice); read-only
/// where every mount of it is.
fn storage_volumes(storages: &[crate::storages::Mount]) -> Vec<Volume> {
    let mut out: Vec<Volume> = Vec::new();
    for storage in storages {
        if out.iter().any(|v| v.name == storage.volume) {
            continue;
        }
        let read_only = storages
            .iter()
            .filter(|s| s.volume == storage.volume)
            .all(|s| s.read_only);
        out.push(Volume {
            name: storage.volume.clone(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: storage.claim.clone(),
                read_only: read_only.then_some(true),
            }),
            ..Volume::default()
        });
    }
    out
}

/// What both containers mount: the runtime's files and the logs.
fn shared_mounts() -> Vec<VolumeMount> {
    vec![
        mount(RUNTIME_VOLUME, paths::RUNTIME_ROOT),
        mount(LOGS_VOLUME, paths::LOGS),
    ]
}

/// The text kept in the Framework and read back as the job's config: as submitted, with
/// a v2 job's secrets masked.
fn stored_text(spec: &JobSpec, text: &str, format: SpecFormat) -> String {
    if spec.secrets().is_some() {
        crate::spec::masked(text, format)
    } else {
        text.to_string()
    }
}

/// The init container's ServiceAccount token, short-lived and renewed by the kubelet,
/// with the cluster's CA and the namespace: what Kubernetes' automount would give every
/// container, given to one.
fn token_volume() -> Volume {
    Volume {
        name: TOKEN_VOLUME.to_string(),
        projected: Some(ProjectedVolumeSource {
            default_mode: Some(0o444),
            sources: Some(vec![
                VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        path: "token".to_string(),
                        expiration_seconds: Some(access::TOKEN_EXPIRATION_SECONDS),
                        audience: None,
                    }),
                    ..VolumeProjection::default()
                },
                VolumeProjection {
                    config_map: Some(ConfigMapProjection {
                        name: access::ROOT_CA_CONFIG_MAP.to_string(),
                        items: Some(vec![KeyToPath {
                            key: "ca.crt".to_string(),
                            path: "ca.crt".to_string(),
                            mode: None,
                        }]),
                        optional: None,
                    }),
                    ..VolumeProjection::default()
                },
                VolumeProjection {
                    downward_api: Some(DownwardAPIProjection {
                        items: Some(vec![DownwardAPIVolumeFile {
                            path: "namespace".to_string(),
                            field_ref: Some(ObjectFieldSelector {
                                api_version: Some("v1".to_string()),
                                field_path: "metadata.namespace".to_string(),
                            }),
                            ..DownwardAPIVolumeFile::default()
                        }]),
                    }),
                    ..VolumeProjection::default()
                },
            ]),
        }),
        ..Volume::default()
    }
}

/// The job's token where Kubernetes' clients look for it, read-only.
fn token_mount() -> VolumeMount {
    VolumeMount {
        read_only: Some(true),
        ..mount(TOKEN_VOLUME, access::TOKEN_MOUNT)
    }
}

/// A container env entry whose value the kubelet leaves exactly as written.
fn env_var(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value: Some(names::kubelet_escape(value)),
        value_from: None,
    }
}

fn mount(volume: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: volume.to_string(),
        mount_path: path.to_string(),
        ..VolumeMount::default()
    }
}

fn empty_dir(name: &str, medium: Option<&str>, size: Option<Quantity>) -> Volume {
    Volume {
        name: name.to_string(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: medium.map(str::to_string),
            size_limit: size,
        }),
        ..Volume::default()
    }
}
