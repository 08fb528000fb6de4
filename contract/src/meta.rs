//! Labels and annotations rest-lite puts on Frameworks and their pods.

/// Label: the owner's user name as a label value (`pai_job::names::label_value`).
pub const LABEL_USER: &str = "rest-lite.openpai.io/user";
/// Label: the job name as a label value (`pai_job::names::label_value`).
pub const LABEL_JOB: &str = "rest-lite.openpai.io/job";
/// Label on every object rest-lite creates.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Value of [`LABEL_MANAGED_BY`].
pub const MANAGED_BY: &str = "rest-lite";

/// The label selector of every object rest-lite creates (`LABEL_MANAGED_BY=MANAGED_BY`).
pub fn managed_by_selector() -> String {
    format!("{LABEL_MANAGED_BY}={MANAGED_BY}")
}
/// Annotation: the user name exactly as given.
pub const ANNOTATION_USER: &str = "rest-lite.openpai.io/user-name";
/// Annotation: the job name exactly as given.
pub const ANNOTATION_JOB: &str = "rest-lite.openpai.io/job-name";
/// Annotation: the job spec exactly as submitted (JSON or YAML text).
pub const ANNOTATION_SPEC: &str = "rest-lite.openpai.io/job-spec";
/// Annotation: the spec's format as submitted, `json` or `yaml`.
pub const ANNOTATION_SPEC_FORMAT: &str = "rest-lite.openpai.io/job-spec-format";
/// Annotation: the job's virtual cluster (`virtualCluster`, v2 `defaults.virtualCluster`),
/// when the spec names one.
pub const ANNOTATION_VIRTUAL_CLUSTER: &str = "rest-lite.openpai.io/virtual-cluster";
/// The virtual cluster of a job whose spec names none (OpenPAI's name for it).
pub const DEFAULT_VIRTUAL_CLUSTER: &str = "default";
/// Annotation: the protocol the spec was written in (`1`, `2`).
pub const ANNOTATION_PROTOCOL: &str = "rest-lite.openpai.io/protocol-version";
/// Annotation on a pod template: the role's name exactly as given.
pub const ANNOTATION_ROLE: &str = "rest-lite.openpai.io/role-name";
/// Annotation the embedded default puts on a Framework: each task's own ports, as JSON
/// `{"<role>": ["<label>:<ports>;…", …by index]}`. Tasks of one role share the host there,
/// so they cannot share ports; on Kubernetes each pod has its own address and the role's
/// ports hold for every task.
pub const ANNOTATION_TASK_PORTS: &str = "rest-lite.openpai.io/task-ports";
/// Annotation: the GPU type the job asked for (`gpuType`), on both backends.
pub const ANNOTATION_GPU_TYPE: &str = "rest-lite.openpai.io/gpu-type";
/// Annotation the embedded default puts on a Framework: the GPUs each task of the current
/// attempt holds (`pai_job::gpus::Assignment`). A cluster's device plugin chooses a pod's
/// GPUs on its node and tells the API server nothing of it, so a Framework on a cluster
/// has none.
pub const ANNOTATION_TASK_GPUS: &str = "rest-lite.openpai.io/task-gpus";
