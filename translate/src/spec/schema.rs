//! The job spec's shape for the OpenAPI document: the fields, types and bounds a JSON
//! schema can state. The rules it cannot (unique role and label names, `shmMB ≤
//! memoryMB`, the room left for pod names, reserved variable names, port ranges that
//! fit) are checked by `validate`, which answers 400 naming each. Documentation only:
//! parsing never goes through these types. An optional field given as `null` counts as
//! not given.
//!
//! The names' patterns and the task limits are not written here: [`state_rules`] puts
//! them into the document from the constants validation itself uses.

use std::collections::BTreeMap;

use pai_job::names::{MAX_TASKS_PER_ROLE, max_task_role_name};
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa::ToSchema;

use super::names::{LABEL_PATTERN, MAX_NAME_LEN, NAME_PATTERN, ROLE_PATTERN};

/// An OpenPAI v1 job spec, as JSON (or the same document in YAML).
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)]
pub struct JobSpecDocument {
    /// Unique among the user's jobs.
    job_name: String,
    /// Image of every task (one with white space is refused where images are pulled).
    #[schema(min_length = 1)]
    image: String,
    /// The roles; names unique.
    #[schema(min_items = 1)]
    task_roles: Vec<TaskRoleDocument>,
    /// Exported to every task exactly as written (names are shell identifiers; `PAI_*`,
    /// `FC_*`, `USER_CMD` and `KUBE_APISERVER_ADDRESS` are reserved but for
    /// `PAI_SSH_PUB_KEY`).
    job_envs: Option<BTreeMap<String, EnvValue>>,
    /// What the runtime derives for training programs from the peer table: `TF_CONFIG`
    /// (`tensorflow`, by the first port of label `http` or the one named), PyTorch's and
    /// torchrun's variables (`pytorch`), an MPI hostfile (`mpi`). All three without
    /// the field; `[]` for none. Variables the job sets in `jobEnvs` win.
    framework_env: Option<Vec<FrameworkEnvItem>>,
    /// Jobs of the same user that must reach a state before this one runs: it waits
    /// (`WAITING`, reason `Dependencies`) until then, and ends `FAILED` if one ends in
    /// another state or is deleted. Each job must exist when this one is submitted.
    #[schema(max_items = 16)]
    depends_on: Option<Vec<DependencyDocument>>,
    /// Retries of the job's attempt: n counted failures; −1 failures forever; −2 always.
    #[schema(minimum = -2, maximum = 2147483647)]
    retry_count: Option<i64>,
    /// Obsolete in OpenPAI: above 0, the first task to succeed ends the job in roles that
    /// give no `minSucceededTaskCount` (warned).
    kill_all_on_completed_task_number: Option<i64>,
    /// `PAI_DATA_DIR`.
    data_dir: Option<String>,
    /// `PAI_OUTPUT_DIR`.
    output_dir: Option<String>,
    /// Copied into each task's working directory (a directory of this machine, or
    /// `hdfs://`); `PAI_CODE_DIR`.
    code_dir: Option<String>,
    /// The gang engine's queue.
    virtual_cluster: Option<String>,
    /// Not used (warned).
    gpu_type: Option<String>,
    /// Not read (warned).
    auth_file: Option<String>,
    /// Kept, not used (warned).
    #[schema(value_type = Option<Object>)]
    extras: Option<serde_json::Value>,
}

/// A job this one waits for.
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)]
pub struct DependencyDocument {
    /// The job's name (of the same user; not this job).
    job: String,
    /// The state it must reach (default `SUCCEEDED`).
    state: Option<DependencyState>,
}

/// The state a dependency must reach.
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "UPPERCASE")]
#[allow(dead_code)]
pub enum DependencyState {
    Succeeded,
    Failed,
    Stopped,
}

/// One part of `frameworkEnv`.
#[derive(Deserialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum FrameworkEnvItem {
    /// A part by name, with its defaults.
    Name(FrameworkEnvName),
    /// TensorFlow with the label of the port `TF_CONFIG` names.
    Tensorflow(TensorflowItem),
}

/// The parts.
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum FrameworkEnvName {
    /// `TF_CONFIG`.
    Tensorflow,
    /// `MASTER_ADDR`, `RANK`, `PET_*`, ….
    Pytorch,
    /// The hostfile and Open MPI's variables.
    Mpi,
    /// `JAX_COORDINATOR_ADDRESS`, `JAX_NUM_PROCESSES`, `JAX_PROCESS_ID`.
    Jax,
    /// `DMLC_TRACKER_URI`, `DMLC_TRACKER_PORT`, `DMLC_TASK_ID`, `DMLC_NUM_WORKER`.
    Xgboost,
}

/// `{tensorflow: {portLabel: grpc}}`.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct TensorflowItem {
    /// The options.
    tensorflow: TensorflowOptions,
}

/// TensorFlow's options.
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)]
pub struct TensorflowOptions {
    /// The label of the port each task is addressed by (`http` when not given).
    port_label: Option<String>,
}

/// A `jobEnvs` value: text, a number or a boolean.
#[derive(Deserialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum EnvValue {
    /// Text.
    Text(String),
    /// A number.
    Number(f64),
    /// A boolean.
    Flag(bool),
}

/// One role of the job.
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)]
pub struct TaskRoleDocument {
    /// Part of variable names (`PAI_HOST_IP_<role>_<i>`); lower-cased without `_`, it
    /// names the role's pods, which must fit 63 characters.
    name: String,
    /// Tasks of the role (default 1; of the whole job: at most 10,000).
    #[schema(minimum = 1)]
    task_number: Option<i64>,
    /// CPUs per task (default 1).
    #[schema(minimum = 1, maximum = 2147483647)]
    cpu_number: Option<i64>,
    /// Memory per task, MiB (default 100).
    #[schema(minimum = 1, maximum = 2147483647)]
    #[serde(rename = "memoryMB")]
    memory_mb: Option<i64>,
    /// `/dev/shm` per task, MiB, at most `memoryMB` (default 64).
    #[schema(minimum = 1, maximum = 2147483647)]
    #[serde(rename = "shmMB")]
    shm_mb: Option<i64>,
    /// GPUs per task.
    #[schema(minimum = 0, maximum = 2147483647)]
    gpu_number: Option<i64>,
    /// Labelled ports each task needs (labels unique; `http` and `ssh` are added).
    port_list: Option<Vec<PortDocument>>,
    /// Run by bash (sh where the image has none) in the task's working directory.
    #[schema(min_length = 1)]
    command: String,
    /// Failed tasks that fail the job (absent: 1; null: failed tasks never fail it); at
    /// most `taskNumber`.
    #[schema(minimum = 1)]
    min_failed_task_count: Option<i64>,
    /// Succeeded tasks that succeed the job (null: every task must complete); at most
    /// `taskNumber`.
    #[schema(minimum = 1)]
    min_succeeded_task_count: Option<i64>,
}

/// A labelled group of ports.
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(dead_code)]
pub struct PortDocument {
    /// Part of variable names (`PAI_PORT_LIST_<role>_<i>_<label>`).
    label: String,
    /// 0 (the default): anywhere; else exactly `beginAt …`, at least 1024.
    #[schema(minimum = 0, maximum = 65535)]
    begin_at: Option<i64>,
    /// How many ports (default 1).
    #[schema(minimum = 1, maximum = 64512)]
    port_number: Option<i64>,
}

/// The JSON schema of a user or job name.
pub fn name_rule() -> Value {
    json!({"pattern": NAME_PATTERN, "minLength": 1, "maxLength": MAX_NAME_LEN})
}

/// The JSON schema of a role name: its pattern, and the longest name any role can have
/// (one of a single task: its pods' names then have the most room).
pub fn role_rule() -> Value {
    json!({"pattern": ROLE_PATTERN, "minLength": 1, "maxLength": max_task_role_name(1)})
}

/// The v1 fields whose integers may also be written as strings (OpenPAI's validator
/// converted `"2"` to 2).
const INTEGERS: &[(&str, &str)] = &[
    ("JobSpecDocument", "retryCount"),
    ("JobSpecDocument", "killAllOnCompletedTaskNumber"),
    ("TaskRoleDocument", "taskNumber"),
    ("TaskRoleDocument", "cpuNumber"),
    ("TaskRoleDocument", "memoryMB"),
    ("TaskRoleDocument", "shmMB"),
    ("TaskRoleDocument", "gpuNumber"),
    ("TaskRoleDocument", "minFailedTaskCount"),
    ("TaskRoleDocument", "minSucceededTaskCount"),
    ("PortDocument", "beginAt"),
    ("PortDocument", "portNumber"),
];

/// Writes the names' rules and the task limits into the spec's schemas of an OpenAPI
/// document (`components.schemas`), from the constants validation uses.
pub fn state_rules(schemas: &mut Value) {
    let label = json!({"pattern": LABEL_PATTERN, "minLength": 1});
    let tasks = json!({"maximum": MAX_TASKS_PER_ROLE});
    let rules = [
        ("JobSpecDocument", "jobName", name_rule()),
        ("DependencyDocument", "job", name_rule()),
        ("TensorflowOptions", "portLabel", label.clone()),
        ("TaskRoleDocument", "name", role_rule()),
        ("TaskRoleDocument", "taskNumber", tasks.clone()),
        ("TaskRoleDocument", "minFailedTaskCount", tasks.clone()),
        ("TaskRoleDocument", "minSucceededTaskCount", tasks),
        ("PortDocument", "label", label),
    ];
    for (schema, property, rule) in rules {
        let Some(target) = schemas
            .pointer_mut(&format!("/{schema}/properties/{property}"))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        // An optional property is `oneOf: [null, T]` or `type: [T, "null"]`: the rule
        // applies to the value, so it goes where the value's type is stated.
        let target = match target.get_mut("oneOf") {
            Some(Value::Array(variants)) => variants
                .iter_mut()
                .filter_map(Value::as_object_mut)
                .find(|v| v.get("type").is_some_and(|t| t != "null")),
            _ => Some(target),
        };
        if let (Some(target), Value::Object(rule)) = (target, rule) {
            target.extend(rule);
        }
    }
    integers_as_text(schemas);
}

/// Lets each of [`INTEGERS`] be a string of digits too (its range is then checked by the
/// validator, which answers 400 naming it).
fn integers_as_text(schemas: &mut Value) {
    let text = json!({"type": "string", "pattern": r"^\s*-?[0-9]+\s*$"});
    for (schema, property) in INTEGERS {
        let Some(target) = schemas.pointer_mut(&format!("/{schema}/properties/{property}")) else {
            continue;
        };
        let original = target.take();
        *target = json!({"oneOf": [original, text.clone()]});
    }
}
