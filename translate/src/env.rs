//! The static environment of each role: every variable of contracts §2 known at
//! submission, in a stable order. Values are plain text here; the transformer escapes
//! them for the kubelet. Per-task and dynamic variables are the runtime's (see
//! [`pai_contract::env`] for who writes which).

use pai_contract::PortPlan;
use pai_contract::env as names;
use pai_contract::ports::{HTTP_LABEL, SSH_LABEL, join_ports};

use crate::spec::{JobSpec, Protocol, TaskRole, UserName};

/// `-1`, FrameworkController's "disabled", for a count the spec leaves unset.
const UNSET_COUNT: i64 = -1;

/// The variables every role of the job shares.
pub fn job_env(user: &UserName, spec: &JobSpec, default_fs_uri: &str) -> Vec<(String, String)> {
    let roles = spec.roles();
    let legacy = spec.legacy();
    let dir = |value: &str| crate::place::resolve_dir(value, user, spec.name(), default_fs_uri);
    // The job's own variables first: where the platform sets the same name, its value,
    // later in the list, is the one a task sees.
    let mut env: Vec<(String, String)> = spec.job_envs().to_vec();
    env.extend([
        (
            names::JOB_NAME.to_string(),
            format!("{}~{}", user.as_str(), spec.name().as_str()),
        ),
        (names::USER_NAME.to_string(), user.as_str().to_string()),
        (
            names::DEFAULT_FS_URI.to_string(),
            default_fs_uri.to_string(),
        ),
        (names::TASK_ROLE_COUNT.to_string(), roles.len().to_string()),
        (
            names::TASK_ROLE_LIST.to_string(),
            roles
                .iter()
                .map(|r| r.name().as_str())
                .collect::<Vec<_>>()
                .join(","),
        ),
        (names::DATA_DIR.to_string(), dir(&legacy.data_dir)),
        (names::OUTPUT_DIR.to_string(), dir(&legacy.output_dir)),
        (names::CODE_DIR.to_string(), dir(&legacy.code_dir)),
    ]);
    // OpenPAI v1's runtime gave these too (they are v2's names as well).
    {
        let tasks: u32 = roles.iter().map(TaskRole::task_number).sum();
        let job = format!("{}~{}", user.as_str(), spec.name().as_str());
        let list = roles
            .iter()
            .map(|r| r.name().as_str())
            .collect::<Vec<_>>()
            .join(",");
        env.extend([
            (names::v2::FRAMEWORK_NAME.to_string(), job),
            (
                names::v2::VIRTUAL_CLUSTER.to_string(),
                spec.virtual_cluster_or_default().to_string(),
            ),
            (names::v2::USERNAME.to_string(), user.as_str().to_string()),
            (names::v2::TASKS_NUM.to_string(), tasks.to_string()),
            (names::v2::JOB_TASK_COUNT.to_string(), tasks.to_string()),
            (
                names::v2::TASK_ROLES_NUM.to_string(),
                roles.len().to_string(),
            ),
            (
                names::v2::JOB_TASK_ROLE_COUNT.to_string(),
                roles.len().to_string(),
            ),
            (names::v2::JOB_TASK_ROLE_LIST.to_string(), list),
        ]);
    }
    env
}

/// The variables that describe `role` to the whole job ([`names::role_family`]). Only
/// the role's own template carries them; the runtime hands them to the other roles.
pub fn role_family_env(role: &TaskRole, protocol: Protocol) -> Vec<(String, String)> {
    let (min_failed, min_succeeded) = min_counts(role);
    let res = role.resources();
    let [
        task_count,
        failed_instance,
        succeeded_instance,
        failed_count,
        succeeded_count,
        resource,
    ] = names::role_family(role.name().as_str());
    vec![
        (task_count, role.task_number().to_string()),
        (failed_instance, min_failed.to_string()),
        (succeeded_instance, min_succeeded.to_string()),
        (failed_count, min_failed.to_string()),
        (succeeded_count, min_succeeded.to_string()),
        (
            resource,
            match protocol {
                Protocol::V1 => format!(
                    "cpu_count:{},memMB:{},shmMB:{},gpu_count:{}",
                    res.cpu, res.memory_mb, res.shm_mb, res.gpu
                ),
                // OpenPAI v2's form (runtime-env.js).
                Protocol::V2 => {
                    format!("{},{},{},{}", res.gpu, res.cpu, res.memory_mb, res.shm_mb)
                }
            },
        ),
    ]
}

/// The variables of one role, added to [`job_env`] in its tasks: its family, the
/// `PAI_CURRENT_*` names and its ports.
pub fn role_env(role: &TaskRole, plan: &PortPlan, protocol: Protocol) -> Vec<(String, String)> {
    let res = role.resources();
    let (min_failed, min_succeeded) = min_counts(role);
    let first_port = |label| plan.first(label).map(|p| p.to_string()).unwrap_or_default();
    let mut env = role_family_env(role, protocol);
    env.extend([
        (
            names::CURRENT_TASK_ROLE_NAME.to_string(),
            role.name().as_str().to_string(),
        ),
        (
            names::CURRENT_TASK_ROLE_TASK_COUNT.to_string(),
            role.task_number().to_string(),
        ),
        (
            names::CURRENT_TASK_ROLE_CPU_COUNT.to_string(),
            res.cpu.to_string(),
        ),
        (
            names::CURRENT_TASK_ROLE_MEM_MB.to_string(),
            res.memory_mb.to_string(),
        ),
        (
            names::CURRENT_TASK_ROLE_SHM_MB.to_string(),
            res.shm_mb.to_string(),
        ),
        (
            names::CURRENT_TASK_ROLE_GPU_COUNT.to_string(),
            res.gpu.to_string(),
        ),
        (
            names::CURRENT_TASK_ROLE_MIN_FAILED_TASK_COUNT.to_string(),
            min_failed.to_string(),
        ),
        (
            names::CURRENT_TASK_ROLE_MIN_SUCCEEDED_TASK_COUNT.to_string(),
            min_succeeded.to_string(),
        ),
        (
            names::CURRENT_CONTAINER_PORT.to_string(),
            first_port(HTTP_LABEL),
        ),
        (names::CONTAINER_SSH_PORT.to_string(), first_port(SSH_LABEL)),
        // OpenPAI v1's older names for the same.
        (
            names::v1::TASK_ROLE_NAME.to_string(),
            role.name().as_str().to_string(),
        ),
        (
            names::v1::TASK_ROLE_NUM.to_string(),
            role.task_number().to_string(),
        ),
        (names::v1::TASK_CPU_NUM.to_string(), res.cpu.to_string()),
        (
            names::v1::TASK_MEM_MB.to_string(),
            res.memory_mb.to_string(),
        ),
        (names::v1::TASK_GPU_NUM.to_string(), res.gpu.to_string()),
        (
            names::v1::RESOURCE.to_string(),
            format!("{},{},{},{}", res.gpu, res.cpu, res.memory_mb, res.shm_mb),
        ),
    ]);
    for (label, ports) in plan.iter() {
        env.push((
            names::container_host_label_port_list(label),
            join_ports(ports),
        ));
    }
    env.push((
        names::CONTAINER_HOST_PORT_LIST.to_string(),
        plan.to_string(),
    ));
    env
}

/// The role's completion counts as the environment shows them, −1 for one that is off
/// (`minSucceededTaskCount` unset: every task must complete).
fn min_counts(role: &TaskRole) -> (i64, i64) {
    let c = role.completion();
    (
        c.min_failed.map_or(UNSET_COUNT, i64::from),
        c.min_succeeded.map_or(UNSET_COUNT, i64::from),
    )
}
