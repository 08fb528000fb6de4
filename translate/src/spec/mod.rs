//! OpenPAI job specs: text (JSON or YAML) in, a [`JobSpec`] that cannot hold an invalid
//! job out, or every broken rule at once. Two front doors, one job: a v1 job config
//! (`validate`) and a job protocol v2 document (`v2`, told apart by `protocolVersion`)
//! both become the same [`JobSpec`], which the rest of the crate translates alike.

mod error;
pub mod names;
mod parse;
mod reader;
pub mod schema;
pub mod secrets;
pub mod v1_fields;
pub mod v2;
mod validate;

pub use error::{FieldPath, SpecError, SpecErrors};
pub use names::{JobName, PortLabel, RoleName, UserName};
pub use reader::value as document;

/// Largest spec text accepted: it is kept verbatim in an annotation of the Framework,
/// and Kubernetes allows 256 KiB for all annotations of an object together.
pub const MAX_SPEC_BYTES: usize = 200 * 1024;
/// Default size of `/dev/shm` when a role gives no `shmMB`.
pub const DEFAULT_SHM_MB: u32 = 64;

pub use pai_contract::SpecFormat;
pub use secrets::{RegistryAuth, Secrets, masked};

/// Which door a spec came in by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// An OpenPAI v1 job config (`jobName`, `taskRoles` as a list).
    V1,
    /// OpenPAI's job protocol v2 (`protocolVersion: 2`).
    V2,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V1 => "1",
            Self::V2 => "2",
        }
    }
}

/// A valid job: every rule of the spec holds.
#[derive(Clone, Debug, PartialEq)]
pub struct JobSpec {
    name: JobName,
    image: String,
    roles: Vec<TaskRole>,
    job_envs: Vec<(String, String)>,
    retries: Retries,
    legacy: LegacyDirs,
    framework_env: pai_contract::training::Selection,
    /// OpenPAI's `virtualCluster`: the queue the gang engine admits the job from.
    virtual_cluster: Option<String>,
    /// `dependsOn`: jobs of the same user that must reach a state before this one runs.
    depends_on: Vec<(JobName, pai_job::depends::Wanted)>,
    protocol: Protocol,
    /// What the spec asks that is not done here as it asks, each naming the field: told
    /// at every submission (never a silent drop).
    notes: Vec<String>,
    /// Protocol v2's `secrets`: kept out of the Framework, rendered into the command by
    /// the runtime inside the task.
    secrets: Option<Secrets>,
    /// Credentials of the registries the roles' images come from (v2 `auth`).
    registry_auths: Vec<RegistryAuth>,
    /// Whether the job's tasks are admitted together (v2 `extras.gangAllocation`).
    gang_allocation: bool,
    /// OpenPAI v1's `gpuType`: the GPU model (its SKU name) the tasks must run on.
    gpu_type: Option<String>,
    /// Protocol v2's `extras.hivedScheduler.jobPriorityClass` (v1 has none).
    priority: Option<pai_contract::priority::JobPriority>,
    /// The storages it mounts (v2 `extras.storages` or the `teamwise_storage` plugin):
    /// `None` none, an empty list the user's defaults.
    storages: Option<Vec<crate::storages::StorageRequest>>,
}

/// How often the job's attempt is retried (`retryCount`, `jobRetryCount`), as
/// FrameworkController's retry policy says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retries {
    /// Up to n counted failures (the fancy policy: transient failures are not counted,
    /// permanent ones never retried).
    Count(u32),
    /// Failures forever (`-1`, with the fancy policy).
    FailuresForever,
    /// Always, also after success (`-2`; OpenPAI turned the fancy policy off for it).
    Always,
}

impl Retries {
    /// FrameworkController's `(fancyRetryPolicy, maxRetryCount)`.
    pub fn policy(self) -> (bool, i32) {
        match self {
            Self::Count(n) => (true, i32::try_from(n).unwrap_or(i32::MAX)),
            Self::FailuresForever => (true, -1),
            Self::Always => (false, -2),
        }
    }
}

/// The legacy directory fields, exported as `PAI_DATA_DIR`, `PAI_OUTPUT_DIR`, `PAI_CODE_DIR`
/// (empty when not given).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LegacyDirs {
    pub data_dir: String,
    pub output_dir: String,
    pub code_dir: String,
}

/// A valid role.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskRole {
    name: RoleName,
    task_number: u32,
    resources: Resources,
    ports: Vec<PortRequest>,
    command: String,
    completion: CompletionPolicy,
    /// The role's own image (v2's per-role `dockerImage`); the job's otherwise.
    image: Option<String>,
}

/// What each task of a role asks for. `shm_mb ≤ memory_mb`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resources {
    pub cpu: u32,
    pub memory_mb: u32,
    pub shm_mb: u32,
    pub gpu: u32,
}

/// When a role completes the job's attempt. Both counts are ≤ the role's task number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompletionPolicy {
    /// Failed tasks that fail the attempt. Always set for a v1 job (a role whose tasks
    /// all fail always fails it); `None` only where a v2 job says `minFailedInstances:
    /// -1` (failures never end the job, as OpenPAI meant it).
    pub min_failed: Option<u32>,
    /// Succeeded tasks that succeed the attempt; `None`: every task must complete.
    pub min_succeeded: Option<u32>,
}

/// A labelled group of ports each task of a role needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortRequest {
    pub label: PortLabel,
    pub count: u16,
    pub start: PortStart,
}

/// Where a port request's ports come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortStart {
    /// Any free ports of the configured range.
    Any,
    /// Exactly `port`, `port + 1`, …, `port + count − 1` (all ≥ 1024).
    At(u16),
}

impl JobSpec {
    /// The job name as given.
    pub fn name(&self) -> &JobName {
        &self.name
    }
    pub fn image(&self) -> &str {
        &self.image
    }
    /// Roles in spec order (never empty, names unique also as task-role names, whose pods'
    /// names fit 63 characters; at most 10,000 tasks in all).
    pub fn roles(&self) -> &[TaskRole] {
        &self.roles
    }
    /// `jobEnvs`, sorted by name, values rendered as text.
    pub fn job_envs(&self) -> &[(String, String)] {
        &self.job_envs
    }
    pub fn retries(&self) -> Retries {
        self.retries
    }
    pub fn legacy(&self) -> &LegacyDirs {
        &self.legacy
    }
    /// What the runtime derives for training programs (`frameworkEnv`; all without it).
    /// The queue the spec names (`virtualCluster`), a DNS label.
    pub fn virtual_cluster(&self) -> Option<&str> {
        self.virtual_cluster.as_deref()
    }

    /// The jobs this one waits for (`dependsOn`), each with the state it must reach.
    pub fn depends_on(&self) -> &[(JobName, pai_job::depends::Wanted)] {
        &self.depends_on
    }

    pub fn framework_env(&self) -> &pai_contract::training::Selection {
        &self.framework_env
    }

    /// The door the spec came in by.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// What the spec asks that is not done as it asks (warnings at submission).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The job's secrets (v2), if it has any.
    pub fn secrets(&self) -> Option<&Secrets> {
        self.secrets.as_ref()
    }

    /// Registry credentials for the roles' images (v2).
    pub fn registry_auths(&self) -> &[RegistryAuth] {
        &self.registry_auths
    }

    /// Whether the gang engine admits the job's tasks together (v2 may turn it off).
    pub fn gang_allocation(&self) -> bool {
        self.gang_allocation
    }

    /// The GPU type the job asks for (v1 `gpuType`).
    pub fn gpu_type(&self) -> Option<&str> {
        self.gpu_type.as_deref()
    }

    /// The priority class it names (`extras.hivedScheduler.jobPriorityClass`), if any.
    pub fn priority(&self) -> Option<pai_contract::priority::JobPriority> {
        self.priority
    }

    /// The storages it asks for: `None` none, an empty list the user's defaults.
    pub fn storages(&self) -> Option<&[crate::storages::StorageRequest]> {
        self.storages.as_deref()
    }

    /// The same job with its storages as the server resolved them for its caller (the
    /// defaults named, each one the caller may use): none left is no storage at all, not
    /// "the defaults" again.
    pub fn with_storages(mut self, storages: Vec<crate::storages::StorageRequest>) -> Self {
        self.storages = (!storages.is_empty()).then_some(storages);
        self
    }

    /// The queue's name as OpenPAI tells it to tasks (`PAI_VIRTUAL_CLUSTER`).
    pub fn virtual_cluster_or_default(&self) -> &str {
        self.virtual_cluster()
            .unwrap_or(pai_contract::meta::DEFAULT_VIRTUAL_CLUSTER)
    }
}

impl TaskRole {
    pub fn name(&self) -> &RoleName {
        &self.name
    }
    /// ≥ 1.
    pub fn task_number(&self) -> u32 {
        self.task_number
    }
    pub fn resources(&self) -> Resources {
        self.resources
    }
    /// The role's port requests, in spec order, with the implicit `http` and `ssh` ones
    /// appended when the spec lacks them. Labels are unique.
    pub fn ports(&self) -> &[PortRequest] {
        &self.ports
    }
    pub fn command(&self) -> &str {
        &self.command
    }
    pub fn completion(&self) -> CompletionPolicy {
        self.completion
    }
    /// The image the role's tasks run in.
    pub fn image_or<'a>(&'a self, job_image: &'a str) -> &'a str {
        self.image.as_deref().unwrap_or(job_image)
    }
}
