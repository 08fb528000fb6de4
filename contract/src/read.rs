//! What a Framework means, read back out of it: every value rest-lite writes as text into
//! a Framework (ports, GPU counts, original names, the spec) is parsed here and nowhere
//! else. Frameworks written by hand, without rest-lite's annotations and variables, read
//! with the documented fallbacks.

use std::collections::HashMap;
use std::io::Read;

use base64::Engine;
use flate2::read::GzDecoder;
use k8s_openapi::api::core::v1::Container;

use crate::framework::{
    Framework, GPU_RESOURCE, MAIN_CONTAINER, TaskRoleSpec, TaskRoleStatus, pod_name,
};
use crate::ports::PortPlan;
use crate::{env, meta};

/// How a job spec is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecFormat {
    /// `application/json`.
    Json,
    /// `application/yaml`.
    Yaml,
}

impl SpecFormat {
    /// JSON when the text starts with `{`, YAML otherwise (for text whose format nobody
    /// stated).
    pub fn detect(text: &str) -> Self {
        if text.trim_start().starts_with('{') {
            SpecFormat::Json
        } else {
            SpecFormat::Yaml
        }
    }

    /// The value of [`meta::ANNOTATION_SPEC_FORMAT`].
    pub fn as_str(self) -> &'static str {
        match self {
            SpecFormat::Json => "json",
            SpecFormat::Yaml => "yaml",
        }
    }

    /// The media type of text in this format.
    pub fn media_type(self) -> &'static str {
        match self {
            SpecFormat::Json => "application/json",
            SpecFormat::Yaml => "application/yaml",
        }
    }

    /// Reads [`SpecFormat::as_str`] back.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "json" => Some(SpecFormat::Json),
            "yaml" => Some(SpecFormat::Yaml),
            _ => None,
        }
    }
}

impl TaskRoleSpec {
    /// The role's name as the user wrote it (the one in `PAI_*` variable names): the pod
    /// template's [`meta::ANNOTATION_ROLE`], else the Framework's task-role name.
    pub fn pai_name(&self) -> &str {
        self.task
            .pod
            .metadata
            .as_ref()
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(meta::ANNOTATION_ROLE))
            .map_or(&self.name, |name| name)
    }

    /// The container that runs the user's command: the one named [`MAIN_CONTAINER`],
    /// else the first.
    pub fn main_container(&self) -> Option<&Container> {
        let containers = &self.task.pod.spec.as_ref()?.containers;
        containers
            .iter()
            .find(|c| c.name == MAIN_CONTAINER)
            .or(containers.first())
    }

    /// The main container's template value of variable `name`, as written (kubelet
    /// escaping included).
    pub fn template_env(&self, name: &str) -> Option<&str> {
        self.main_container()?
            .env
            .as_ref()?
            .iter()
            .find(|v| v.name == name)?
            .value
            .as_deref()
    }

    /// The role's ports (`PAI_CONTAINER_HOST_PORT_LIST` of its template); empty when the
    /// template has none.
    pub fn port_plan(&self) -> PortPlan {
        self.template_env(env::CONTAINER_HOST_PORT_LIST)
            .and_then(|text| text.parse().ok())
            .unwrap_or_default()
    }

    /// GPUs each task has (the main container's `nvidia.com/gpu` limit); 0 without one.
    pub fn gpu_count(&self) -> u32 {
        self.main_container()
            .and_then(|c| c.resources.as_ref())
            .and_then(|r| r.limits.as_ref())
            .and_then(|l| l.get(GPU_RESOURCE))
            .and_then(|q| q.0.parse().ok())
            .unwrap_or(0)
    }

    /// The role's task count (0 for a negative number).
    pub fn tasks(&self) -> u32 {
        u32::try_from(self.task_number).unwrap_or(0)
    }
}

/// Each task's own ports by task-role name and index, where a Framework gives them
/// ([`meta::ANNOTATION_TASK_PORTS`], the embedded default's): tasks sharing a host cannot
/// share ports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskPorts(HashMap<String, Vec<PortPlan>>);

impl TaskPorts {
    /// Ports of every task, by task-role name and index.
    pub fn new(plans: HashMap<String, Vec<PortPlan>>) -> Self {
        Self(plans)
    }

    /// The ports of task `index` of `role`: its own when given, else the role's.
    pub fn of(&self, role: &TaskRoleSpec, index: u32) -> PortPlan {
        self.0
            .get(&role.name)
            .and_then(|plans| plans.get(index as usize))
            .cloned()
            .unwrap_or_else(|| role.port_plan())
    }

    /// The ports given to the tasks of the task role `name`, by index.
    pub fn role(&self, name: &str) -> &[PortPlan] {
        self.0.get(name).map_or(&[], Vec::as_slice)
    }

    /// Every task's ports.
    pub fn plans(&self) -> impl Iterator<Item = &PortPlan> {
        self.0.values().flatten()
    }

    /// The annotation's text.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(&self.0).unwrap_or_default()
    }
}

impl Framework {
    fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }

    /// The Framework's name, or empty.
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// A reference to this Framework as the owner of an object made for it (its peer
    /// tables, its key Secret): the garbage collector deletes that object with it.
    pub fn owner_reference(
        &self,
    ) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: format!("{}/{}", crate::framework::GROUP, crate::framework::VERSION),
            kind: "Framework".to_string(),
            name: self.name().to_string(),
            uid: self.metadata.uid.clone().unwrap_or_default(),
            controller: Some(false),
            block_owner_deletion: Some(false),
        }
    }

    /// The user name exactly as given ([`meta::ANNOTATION_USER`]).
    pub fn user_name(&self) -> Option<&str> {
        self.annotation(meta::ANNOTATION_USER)
    }

    /// The job name exactly as given ([`meta::ANNOTATION_JOB`]).
    pub fn job_name(&self) -> Option<&str> {
        self.annotation(meta::ANNOTATION_JOB)
    }

    /// The job's virtual cluster: the one its spec named, else OpenPAI's default.
    pub fn virtual_cluster(&self) -> &str {
        self.annotation(meta::ANNOTATION_VIRTUAL_CLUSTER)
            .unwrap_or(meta::DEFAULT_VIRTUAL_CLUSTER)
    }

    /// The seconds after which FrameworkController starts the next attempt, once it
    /// scheduled a retry of the current one (`AttemptCompleted` with a `retryDelaySec`,
    /// the job not being stopped); `None` while no retry is scheduled.
    pub fn retry_scheduled(&self) -> Option<i64> {
        let status = self.status.as_ref()?;
        (status.state == crate::framework::FrameworkState::AttemptCompleted
            && self.spec.execution_type == crate::framework::ExecutionType::Start)
            .then_some(status.retry_policy_status.retry_delay_sec)
            .flatten()
    }

    /// Whether the Framework completed (its state `Completed`: no attempt will follow).
    pub fn is_completed(&self) -> bool {
        self.status
            .as_ref()
            .is_some_and(|s| s.state == crate::framework::FrameworkState::Completed)
    }

    /// The current attempt's id (0 before FrameworkController wrote a status).
    pub fn attempt_id(&self) -> i32 {
        self.status.as_ref().map_or(0, |s| s.attempt_status.id)
    }

    /// The protocol its spec was written in (`1` for Frameworks that do not say).
    pub fn protocol_version(&self) -> &str {
        self.annotation(meta::ANNOTATION_PROTOCOL).unwrap_or("1")
    }

    /// The spec exactly as submitted, with its format ([`meta::ANNOTATION_SPEC_FORMAT`];
    /// detected from the text for Frameworks that lack it).
    pub fn spec_text(&self) -> Option<(&str, SpecFormat)> {
        let text = self.annotation(meta::ANNOTATION_SPEC)?;
        let format = self
            .annotation(meta::ANNOTATION_SPEC_FORMAT)
            .and_then(SpecFormat::parse)
            .unwrap_or_else(|| SpecFormat::detect(text));
        Some((text, format))
    }

    /// Each task's own ports, where given; unreadable text counts as none given.
    pub fn task_ports(&self) -> TaskPorts {
        self.annotation(meta::ANNOTATION_TASK_PORTS)
            .and_then(|text| serde_json::from_str(text).ok())
            .map(TaskPorts)
            .unwrap_or_default()
    }

    /// The role the user calls `pai_name`.
    pub fn role(&self, pai_name: &str) -> Option<&TaskRoleSpec> {
        self.spec
            .task_roles
            .iter()
            .find(|r| r.pai_name() == pai_name)
    }

    /// The role whose task-role name is `name`.
    pub fn task_role(&self, name: &str) -> Option<&TaskRoleSpec> {
        self.spec.task_roles.iter().find(|r| r.name == name)
    }

    /// The pod name of task `index` of `role`.
    pub fn pod_name(&self, role: &TaskRoleSpec, index: u32) -> String {
        pod_name(self.name(), &role.name, index)
    }

    /// The task role statuses of the current attempt, plain or compressed; empty before
    /// the controller wrote any.
    pub fn task_role_statuses(
        &self,
    ) -> Result<std::borrow::Cow<'_, [TaskRoleStatus]>, StatusError> {
        use std::borrow::Cow;
        let Some(status) = &self.status else {
            return Ok(Cow::Borrowed(&[]));
        };
        let attempt = &status.attempt_status;
        if let Some(plain) = &attempt.task_role_statuses {
            return Ok(Cow::Borrowed(plain));
        }
        match &attempt.task_role_statuses_compressed {
            Some(compressed) => decompress(compressed).map(Cow::Owned),
            None => Ok(Cow::Borrowed(&[])),
        }
    }
}

/// Largest decompressed status accepted: far above what the controller writes for the
/// largest jobs, small enough that a corrupt object cannot exhaust memory.
const MAX_DECOMPRESSED: u64 = 256 * 1024 * 1024;

/// Why compressed task statuses cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// Not base64.
    #[error("taskRoleStatusesCompressed is not base64: {0}")]
    Base64(#[from] base64::DecodeError),
    /// Not gzip.
    #[error("taskRoleStatusesCompressed is not gzip: {0}")]
    Gzip(std::io::Error),
    /// Larger than [`MAX_DECOMPRESSED`].
    #[error("taskRoleStatusesCompressed decompresses to more than {MAX_DECOMPRESSED} bytes")]
    TooLarge,
    /// Not the JSON list the controller writes.
    #[error("taskRoleStatusesCompressed is not a JSON list of task role statuses: {0}")]
    Json(#[from] serde_json::Error),
}

/// base64 → gzip → JSON, as the controller writes `taskRoleStatusesCompressed`.
pub fn decompress(compressed: &str) -> Result<Vec<TaskRoleStatus>, StatusError> {
    let gz = base64::engine::general_purpose::STANDARD.decode(compressed.trim())?;
    let mut json = Vec::new();
    GzDecoder::new(gz.as_slice())
        .take(MAX_DECOMPRESSED + 1)
        .read_to_end(&mut json)
        .map_err(StatusError::Gzip)?;
    if json.len() as u64 > MAX_DECOMPRESSED {
        return Err(StatusError::TooLarge);
    }
    Ok(serde_json::from_slice(&json)?)
}

/// The inverse of [`decompress`], as the controller does it (tests and the embedded
/// default).
pub fn compress(statuses: &[TaskRoleStatus]) -> String {
    use std::io::Write;
    let json = serde_json::to_vec(statuses).unwrap_or_default();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing to a Vec cannot fail.
    let _ = gz.write_all(&json);
    let bytes = gz.finish().unwrap_or_default();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::TaskStatus;

    #[test]
    fn compressed_statuses_round_trip() {
        let statuses = vec![TaskRoleStatus {
            name: "worker".into(),
            instance_uid: None,
            task_statuses: (0..3)
                .map(|i| TaskStatus {
                    index: i,
                    ..TaskStatus::default()
                })
                .collect(),
        }];
        assert_eq!(decompress(&compress(&statuses)).expect("decodes"), statuses);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(matches!(decompress("!!!"), Err(StatusError::Base64(_))));
        assert!(matches!(decompress("aGVsbG8="), Err(StatusError::Gzip(_))));
    }

    #[test]
    fn spec_formats_read_back() {
        for format in [SpecFormat::Json, SpecFormat::Yaml] {
            assert_eq!(SpecFormat::parse(format.as_str()), Some(format));
        }
        assert_eq!(SpecFormat::detect("  {\"a\": 1}"), SpecFormat::Json);
        assert_eq!(SpecFormat::detect("{a: 1}"), SpecFormat::Json);
        assert_eq!(SpecFormat::detect("a: 1"), SpecFormat::Yaml);
    }
}
