//! The OpenPAI v1 job spec: text (JSON or YAML) in, a [`JobSpec`] that cannot hold an
//! invalid job out, or every broken rule at once. The types are here; reading them
//! from text ([`JobSpec::parse`]) is `validate`'s.

mod error;
pub mod names;
mod reader;
pub mod schema;
mod validate;

pub use error::{FieldPath, SpecError, SpecErrors};
pub use names::{JobName, PortLabel, RoleName, UserName};

/// Largest spec text accepted: it is kept verbatim in an annotation of the Framework,
/// and Kubernetes allows 256 KiB for all annotations of an object together.
pub const MAX_SPEC_BYTES: usize = 200 * 1024;
/// Default size of `/dev/shm` when a role gives no `shmMB`.
pub const DEFAULT_SHM_MB: u32 = 64;

pub use pai_contract::SpecFormat;

/// A valid job: every rule of the spec holds.
#[derive(Clone, Debug, PartialEq)]
pub struct JobSpec {
    name: JobName,
    image: String,
    roles: Vec<TaskRole>,
    job_envs: Vec<(String, String)>,
    retry_count: u32,
    legacy: LegacyDirs,
    framework_env: pai_contract::training::Selection,
    /// OpenPAI's `virtualCluster`: the queue the gang engine admits the job from.
    virtual_cluster: Option<String>,
    /// `dependsOn`: jobs of the same user that must reach a state before this one runs.
    depends_on: Vec<(JobName, pai_contract::depends::Wanted)>,
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
    /// Failed tasks that fail the attempt (≥ 1: a role whose tasks all fail always fails).
    pub min_failed: u32,
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
    pub fn retry_count(&self) -> u32 {
        self.retry_count
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
    pub fn depends_on(&self) -> &[(JobName, pai_contract::depends::Wanted)] {
        &self.depends_on
    }

    pub fn framework_env(&self) -> &pai_contract::training::Selection {
        &self.framework_env
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
}
