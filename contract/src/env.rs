//! Names of every environment variable of the contract, and who writes it.
//!
//! | writer | when | variables |
//! |---|---|---|
//! | rest-lite (pod template of the role's main container) | submission | the job-level names below, the role's own [`role_family`], the `PAI_CURRENT_*` names, `PAI_CONTAINER_HOST_<label>_PORT_LIST`, and every `jobEnvs` entry |
//! | rest-lite (init container) | submission | `USER_CMD`, `KUBE_APISERVER_ADDRESS` |
//! | kube-runtime (env file) | after the barrier | `PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX`, `PAI_TASK_ROLE_INDEX`, `PAI_HOST_IP_<role>_<i>`, `PAI_TASK_ROLE_<role>_HOST_LIST`, `PAI_<role>_<i>_<label>_PORT`, the per-task `PAI_PORT_LIST_<role>_<i>_<label>`, and the [`role_family`] of every other role |
//!
//! Some of the runtime's variables are known at submission, but written into the
//! Framework they would make it grow with the number of tasks (`PAI_PORT_LIST_…`, once
//! per task) or with the square of the number of roles (every role's family in every
//! role's template). The runtime derives them from role-level data the Framework carries
//! once: each role's [`CONTAINER_HOST_PORT_LIST`] and family in its own template.

/// `<user>~<job>`, the original (not normalised) names.
pub const JOB_NAME: &str = "PAI_JOB_NAME";
/// `<user>` as given.
pub const USER_NAME: &str = "PAI_USER_NAME";
/// The cluster's default file system (config `defaultFsUri`).
pub const DEFAULT_FS_URI: &str = "PAI_DEFAULT_FS_URI";
/// How many roles the job has.
pub const TASK_ROLE_COUNT: &str = "PAI_TASK_ROLE_COUNT";
/// Comma-separated role names, in spec order.
pub const TASK_ROLE_LIST: &str = "PAI_TASK_ROLE_LIST";
/// The task's role, as the user wrote it.
pub const CURRENT_TASK_ROLE_NAME: &str = "PAI_CURRENT_TASK_ROLE_NAME";
/// Legacy `dataDir`.
pub const DATA_DIR: &str = "PAI_DATA_DIR";
/// Legacy `outputDir`.
pub const OUTPUT_DIR: &str = "PAI_OUTPUT_DIR";
/// Legacy `codeDir`.
pub const CODE_DIR: &str = "PAI_CODE_DIR";
/// Tasks of the task's role.
pub const CURRENT_TASK_ROLE_TASK_COUNT: &str = "PAI_CURRENT_TASK_ROLE_TASK_COUNT";
/// CPUs of each task of the role.
pub const CURRENT_TASK_ROLE_CPU_COUNT: &str = "PAI_CURRENT_TASK_ROLE_CPU_COUNT";
/// Memory of each task of the role, MiB.
pub const CURRENT_TASK_ROLE_MEM_MB: &str = "PAI_CURRENT_TASK_ROLE_MEM_MB";
/// `/dev/shm` of each task of the role, MiB.
pub const CURRENT_TASK_ROLE_SHM_MB: &str = "PAI_CURRENT_TASK_ROLE_SHM_MB";
/// GPUs of each task of the role.
pub const CURRENT_TASK_ROLE_GPU_COUNT: &str = "PAI_CURRENT_TASK_ROLE_GPU_COUNT";
/// The role's `minFailedTaskCount` (−1: unset).
pub const CURRENT_TASK_ROLE_MIN_FAILED_TASK_COUNT: &str =
    "PAI_CURRENT_TASK_ROLE_MIN_FAILED_TASK_COUNT";
/// The role's `minSucceededTaskCount` (−1: unset).
pub const CURRENT_TASK_ROLE_MIN_SUCCEEDED_TASK_COUNT: &str =
    "PAI_CURRENT_TASK_ROLE_MIN_SUCCEEDED_TASK_COUNT";
/// The role's `http` port.
pub const CURRENT_CONTAINER_PORT: &str = "PAI_CURRENT_CONTAINER_PORT";
/// The role's `ssh` port.
pub const CONTAINER_SSH_PORT: &str = "PAI_CONTAINER_SSH_PORT";
/// `label:p1,p2;label:p3`, every label of the role; parsed by [`crate::PortPlan`].
pub const CONTAINER_HOST_PORT_LIST: &str = "PAI_CONTAINER_HOST_PORT_LIST";
/// The public key that may log in over ssh; arrives through `jobEnvs`.
pub const SSH_PUB_KEY: &str = "PAI_SSH_PUB_KEY";

/// Dynamic: index of this task within its role.
pub const CURRENT_TASK_ROLE_CURRENT_TASK_INDEX: &str = "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX";
/// Dynamic: index of this task's role in [`TASK_ROLE_LIST`].
pub const TASK_ROLE_INDEX: &str = "PAI_TASK_ROLE_INDEX";

/// Written by rest-lite into every main container: seconds between the TERM the runtime
/// passes to the user command and its KILL, below the pod's grace period so that the
/// runtime, not the kubelet, ends the command and reports its status.
pub const KILL_GRACE_SEC: &str = "PAI_KILL_GRACE_SEC";
/// Written by rest-lite into every main container: the cap of `user.log` in bytes.
pub const LOG_MAX_BYTES: &str = "PAI_LOG_MAX_BYTES";

/// Init container only: the user's command, written to `main.sh` by the runtime.
pub const USER_CMD: &str = "USER_CMD";
/// Init container only: the API server the barrier talks to (empty: in-cluster config).
pub const KUBE_APISERVER_ADDRESS: &str = "KUBE_APISERVER_ADDRESS";
/// Init container only: the mode (octal) of the files the runtime writes that hold the
/// environment or the command (`env.sh`, `main.sh`); unset: `600`, readable by the
/// runtime's own user alone. rest-lite writes `644` into pods, whose main container
/// may run as another user than the init container and whose volume is the pod's own.
pub const ENV_FILE_MODE: &str = "PAI_ENV_FILE_MODE";

/// The runtime's own variables, set by rest-lite or the runtime for the task's processes.
pub mod runtime {
    /// Prefix of most of the runtime's own settings.
    pub const PREFIX: &str = "PAI_RUNTIME_";
    /// Where the runtime's files of this task are (`--root` wins; default `/usr/local/pai`).
    pub const ROOT: &str = "PAI_RUNTIME_ROOT";
    /// The directory of the task's logs, for the `init/` daemons' scripts.
    pub const LOG_DIR: &str = "PAI_LOG_DIR";
    /// The directory with `prep/` and `init/` (default: the runtime binary's).
    pub const ASSETS: &str = "PAI_RUNTIME_ASSETS";
    /// Set by the embedded default to its process id: the runtime arms the parent-death
    /// signal (SIGTERM) itself, so the server starts it without a fork of its own large
    /// address space (a `posix_spawn`), and ends at once if that parent is gone already.
    /// Removed from the environment before anything else sees it.
    pub const PARENT_PID: &str = "PAI_RUNTIME_PARENT_PID";
    /// Set by the embedded default to the `cgroup.procs` file of its tasks' CPU group:
    /// the runtime moves itself there before it starts anything, so that all it starts
    /// is in the group (the server's own move of the process after its spawn may come
    /// after the runtime's first fork). Removed from the environment before anything
    /// else sees it.
    pub const CPU_GROUP: &str = "PAI_RUNTIME_CPU_GROUP";
    /// Set by the embedded default to the bound of the task's container log
    /// ([`crate::log_rotation::Rotation::to_env`]): where the runtime's standard output is
    /// that log (a file, not a container engine's pipe), the runtime rotates it as it
    /// echoes the user command's output, so the log never passes its size by more than
    /// one write, however fast the command writes. Removed from the environment before
    /// anything else sees it.
    pub const LOG_ROTATION: &str = "PAI_RUNTIME_LOG_ROTATION";
    /// Set by the embedded default in a container whose engine's daemon, not a process of
    /// the server's, holds its standard streams (Docker): the task's container log, as a
    /// path in the container. The runtime makes it its standard output and error (opened
    /// to append) before anything is written, so the task's output is one ordered file as
    /// where the server hands the file over (host mode, Podman), and the engine keeps no
    /// copy of its own. Removed from the environment before anything else sees it.
    pub const LOG_FILE: &str = "PAI_RUNTIME_LOG_FILE";
    /// Where the user command may write its result (JSON, [`crate::results`]); set by
    /// the runtime for the user command.
    pub const RESULT_FILE: &str = "PAI_RESULT_FILE";
    /// A directory the tasks of one host share for the files that are the same in many
    /// of them (set by the embedded default for `entry`; see the runtime's `shared`).
    pub const SHARED_DIR: &str = "PAI_RUNTIME_SHARED_DIR";
    /// Where the runtime writes the task's termination message: set by the embedded
    /// default; in a pod the kubelet's `/dev/termination-log`.
    pub const TERMINATION_LOG: &str = "PAI_TERMINATION_LOG";
    /// Set (`1`) by the embedded default for `entry`: the server keeps the task's ports
    /// bound from their allocation until the task's main container starts, so `entry`
    /// does not check that they are free (they are held for it, not taken).
    pub const PORTS_HELD: &str = "PAI_RUNTIME_PORTS_HELD";
    /// The address a task's ports are bound on: set by the embedded default to the
    /// task's own (`127.0.0.1`), never wider; unset in a pod, whose ports are its network
    /// namespace's (every address of it).
    pub const BIND_ADDRESS: &str = "PAI_RUNTIME_BIND_ADDRESS";
    /// Set (`stdin`) by the embedded default for `run`: the task's ssh port, bound and
    /// listening, is the runtime's standard input (as systemd's socket activation hands a
    /// service its socket), passed from the server's hold to the runtime's without a
    /// moment in which the port is free for anyone else.
    pub const SSH_LISTENER: &str = "PAI_RUNTIME_SSH_LISTENER";
    /// Set by the embedded default in container mode: a file (in the task's own volume)
    /// holding the container's environment as `NAME=VALUE` records, each ended by a NUL.
    /// The runtime sets them and removes the file before anything else runs, so a value
    /// of any bytes (a multi-line command, a secret) never passes through the engine's
    /// command line or its process environment, and no other task or user reads it.
    pub const ENV_FROM: &str = "PAI_RUNTIME_ENV_FROM";
    /// Set by the embedded default in container mode for `entry`, which runs on the machine
    /// and writes the task's directory where the server keeps it: the path the main
    /// container sees that directory at (`/usr/local/pai`), for the paths written into
    /// the task's files (its ssh aliases, the MPI hostfile's variable).
    pub const MAIN_ROOT: &str = "PAI_RUNTIME_MAIN_ROOT";
    /// Seconds a task whose ssh setup found no sshd closes ssh connections before a
    /// connection runs the setup again (an sshd installed in the running task is found
    /// then); unset: 10.
    pub const SSH_RETRY_SEC: &str = "PAI_RUNTIME_SSH_RETRY_SEC";
    /// [`SSH_LISTENER`]'s value: the listener is standard input.
    pub const SSH_LISTENER_STDIN: &str = "stdin";
}

/// The barrier's settings (frameworkbarrier's names, and ours for the peer table).
pub mod barrier {
    /// How long to wait for every address, in seconds.
    pub const TIMEOUT: &str = "BARRIER_CHECK_TIMEOUT_SEC";
    /// frameworkbarrier's default of [`TIMEOUT`], in seconds.
    pub const DEFAULT_TIMEOUT_SEC: u32 = 600;
    /// frameworkbarrier's polling period; here only a safety re-read period.
    pub const INTERVAL: &str = "BARRIER_CHECK_INTERVAL_SEC";
    /// Set by the embedded executor: wait on this Framework file, not the API server.
    pub const FRAMEWORK_FILE: &str = "BARRIER_FRAMEWORK_FILE";
    /// Set by the embedded executor: wait on this peer-table file, not the API server.
    pub const PEERS_FILE: &str = "BARRIER_PEERS_FILE";
    /// `published` (rest-lite publishes each attempt's peer table; wait for it) or
    /// `framework` (watch the Framework itself). Unset: `framework`.
    pub const PEERS_SOURCE: &str = "BARRIER_PEERS_SOURCE";
    /// [`PEERS_SOURCE`]'s value when rest-lite publishes the peer table.
    pub const SOURCE_PUBLISHED: &str = "published";
    /// [`PEERS_SOURCE`]'s value when the barrier watches the Framework.
    pub const SOURCE_FRAMEWORK: &str = "framework";
}

/// Prefix reserved for the variables FrameworkController injects.
pub const FC_PREFIX: &str = "FC_";

/// The variables FrameworkController injects into every container of a task's pod
/// (contracts §3), in its order.
pub mod fc {
    /// The Framework's namespace.
    pub const FRAMEWORK_NAMESPACE: &str = "FC_FRAMEWORK_NAMESPACE";
    /// The Framework's name.
    pub const FRAMEWORK_NAME: &str = "FC_FRAMEWORK_NAME";
    /// The task-role name (the Framework's, not the user's).
    pub const TASKROLE_NAME: &str = "FC_TASKROLE_NAME";
    /// The task's index in its role.
    pub const TASK_INDEX: &str = "FC_TASK_INDEX";
    /// The attempt's ConfigMap.
    pub const CONFIGMAP_NAME: &str = "FC_CONFIGMAP_NAME";
    /// The task's pod.
    pub const POD_NAME: &str = "FC_POD_NAME";
    /// The Framework's UID.
    pub const FRAMEWORK_UID: &str = "FC_FRAMEWORK_UID";
    /// The Framework attempt's id.
    pub const FRAMEWORK_ATTEMPT_ID: &str = "FC_FRAMEWORK_ATTEMPT_ID";
    /// The Framework attempt's instance UID.
    pub const FRAMEWORK_ATTEMPT_INSTANCE_UID: &str = "FC_FRAMEWORK_ATTEMPT_INSTANCE_UID";
    /// The attempt ConfigMap's UID.
    pub const CONFIGMAP_UID: &str = "FC_CONFIGMAP_UID";
    /// The task role's UID.
    pub const TASKROLE_UID: &str = "FC_TASKROLE_UID";
    /// The task's UID.
    pub const TASK_UID: &str = "FC_TASK_UID";
    /// The task attempt's id.
    pub const TASK_ATTEMPT_ID: &str = "FC_TASK_ATTEMPT_ID";
    /// The task attempt's instance UID.
    pub const TASK_ATTEMPT_INSTANCE_UID: &str = "FC_TASK_ATTEMPT_INSTANCE_UID";
    /// The pod's UID.
    pub const POD_UID: &str = "FC_POD_UID";
}
/// This task's address (OpenPAI's runtime name; the same as `PAI_HOST_IP_<role>_<i>`).
pub const CURRENT_CONTAINER_IP: &str = "PAI_CURRENT_CONTAINER_IP";
/// This task's address (OpenPAI's other name).
pub const CONTAINER_HOST_IP: &str = "PAI_CONTAINER_HOST_IP";
/// This task's first `http` port (OpenPAI's runtime name).
pub const CONTAINER_HOST_PORT: &str = "PAI_CONTAINER_HOST_PORT";
/// This task's index in its role (OpenPAI protocol v2's name).
pub const TASK_INDEX: &str = "PAI_TASK_INDEX";
/// This task's pod (OpenPAI v1's runtime gave YARN's container id).
pub const CONTAINER_ID: &str = "PAI_CONTAINER_ID";

/// The names OpenPAI v1's runtime also gave (its container script's "backward
/// compatibility" block), with the same values as the names beside them.
pub mod v1 {
    /// This role's name (`PAI_CURRENT_TASK_ROLE_NAME`).
    pub const TASK_ROLE_NAME: &str = "PAI_TASK_ROLE_NAME";
    /// This role's task count (`PAI_CURRENT_TASK_ROLE_TASK_COUNT`).
    pub const TASK_ROLE_NUM: &str = "PAI_TASK_ROLE_NUM";
    /// CPUs per task of this role.
    pub const TASK_CPU_NUM: &str = "PAI_TASK_CPU_NUM";
    /// Memory per task of this role, MB.
    pub const TASK_MEM_MB: &str = "PAI_TASK_MEM_MB";
    /// GPUs per task of this role.
    pub const TASK_GPU_NUM: &str = "PAI_TASK_GPU_NUM";
    /// This role's resources, `<gpu>,<cpu>,<memoryMB>,<shmMB>`.
    pub const RESOURCE: &str = "PAI_RESOURCE";
}

/// `PAI_TASK_ROLE_<i>_HOST_LIST`: role `i`'s (by its place in the spec) host list, as
/// OpenPAI's first runtime named it before it named roles by their names (2018).
pub fn task_role_host_list_by_index(index: usize) -> String {
    format!("PAI_TASK_ROLE_{index}_HOST_LIST")
}
/// Prefix of the variables this contract defines.
pub const PAI_PREFIX: &str = "PAI_";

/// The variables that describe role `role` to every task of the job. rest-lite writes
/// them into the role's own pod template only; the runtime copies them from there into
/// the env file of every other role's tasks, so each template holds O(1) of them and the
/// Framework grows linearly with the number of roles.
pub fn role_family(role: &str) -> [String; 6] {
    [
        task_role_task_count(role),
        min_failed_instance(role),
        min_succeeded_instance(role),
        min_failed_task_count(role),
        min_succeeded_task_count(role),
        resource(role),
    ]
}

/// `PAI_TASK_ROLE_TASK_COUNT_<role>`: tasks of `role`.
pub fn task_role_task_count(role: &str) -> String {
    format!("PAI_TASK_ROLE_TASK_COUNT_{}", var_part(role))
}
/// `PAI_MIN_FAILED_INSTANCE_<role>`: `role`'s `minFailedTaskCount`.
pub fn min_failed_instance(role: &str) -> String {
    format!("PAI_MIN_FAILED_INSTANCE_{}", var_part(role))
}
/// `PAI_MIN_SUCCEEDED_INSTANCE_<role>`: `role`'s `minSucceededTaskCount`.
pub fn min_succeeded_instance(role: &str) -> String {
    format!("PAI_MIN_SUCCEEDED_INSTANCE_{}", var_part(role))
}
/// `PAI_MIN_FAILED_TASK_COUNT_<role>`: OpenPAI's other name of the same value.
pub fn min_failed_task_count(role: &str) -> String {
    format!("PAI_MIN_FAILED_TASK_COUNT_{}", var_part(role))
}
/// `PAI_MIN_SUCCEEDED_TASK_COUNT_<role>`: OpenPAI's other name of the same value.
pub fn min_succeeded_task_count(role: &str) -> String {
    format!("PAI_MIN_SUCCEEDED_TASK_COUNT_{}", var_part(role))
}
/// `cpu_count:<n>,memMB:<n>,shmMB:<n>,gpu_count:<n>`
pub fn resource(role: &str) -> String {
    format!("PAI_RESOURCE_{}", var_part(role))
}
/// The `gpu_count` of a [`resource`] value, in either protocol's form (v2 writes
/// `<gpu>,<cpu>,<memoryMB>,<shmMB>`).
pub fn resource_gpu_count(value: &str) -> Option<u32> {
    if let Some(n) = value
        .split(',')
        .find_map(|part| part.strip_prefix("gpu_count:"))
    {
        return n.parse().ok();
    }
    let parts: Vec<&str> = value.split(',').collect();
    match parts.as_slice() {
        [gpu, _, _, _] if parts.iter().all(|p| p.parse::<u64>().is_ok()) => gpu.parse().ok(),
        _ => None,
    }
}

/// The variables OpenPAI's protocol v2 rest-server adds for every task
/// (`runtime-env.js`), set for v2 jobs beside the v1 contract's.
pub mod v2 {
    /// `<user>~<job>`, as `PAI_JOB_NAME`.
    pub const FRAMEWORK_NAME: &str = "PAI_FRAMEWORK_NAME";
    /// The job's virtual cluster (`defaults.virtualCluster`; `default` without one).
    pub const VIRTUAL_CLUSTER: &str = "PAI_VIRTUAL_CLUSTER";
    /// The user, as `PAI_USER_NAME`.
    pub const USERNAME: &str = "PAI_USERNAME";
    /// Tasks of the job.
    pub const TASKS_NUM: &str = "PAI_TASKS_NUM";
    /// Tasks of the job.
    pub const JOB_TASK_COUNT: &str = "PAI_JOB_TASK_COUNT";
    /// Roles of the job.
    pub const TASK_ROLES_NUM: &str = "PAI_TASK_ROLES_NUM";
    /// Roles of the job.
    pub const JOB_TASK_ROLE_COUNT: &str = "PAI_JOB_TASK_ROLE_COUNT";
    /// The roles, comma separated, as `PAI_TASK_ROLE_LIST`.
    pub const JOB_TASK_ROLE_LIST: &str = "PAI_JOB_TASK_ROLE_LIST";
}
/// `PAI_CONTAINER_HOST_<label>_PORT_LIST`: this task's ports of `label`.
pub fn container_host_label_port_list(label: &str) -> String {
    format!("PAI_CONTAINER_HOST_{label}_PORT_LIST")
}
/// True for the dynamic variables about this task alone (its index, its role's index,
/// its own ports): the runtime gives the `init/` daemons these and the container's own
/// environment, never the per-peer variables, whose size grows with the job and which
/// every exec copies.
pub fn is_task_own(name: &str) -> bool {
    matches!(
        name,
        CURRENT_TASK_ROLE_CURRENT_TASK_INDEX
            | TASK_ROLE_INDEX
            | CONTAINER_HOST_PORT_LIST
            | CURRENT_CONTAINER_PORT
            | CONTAINER_SSH_PORT
            | CURRENT_CONTAINER_IP
            | CONTAINER_HOST_IP
            | CONTAINER_HOST_PORT
            | TASK_INDEX
            | CONTAINER_ID
            | SSH_PUB_KEY
    ) || name
        .strip_prefix("PAI_CONTAINER_HOST_")
        .and_then(|rest| rest.strip_suffix("_PORT_LIST"))
        .is_some_and(|label| !label.is_empty())
}

/// True for the names a job's own variables (`jobEnvs`) may not take: FrameworkController's
/// `FC_*`, and what the runtime reads as its settings (a task could otherwise point the
/// runtime at files of the machine that runs it).
pub fn is_reserved(name: &str) -> bool {
    name.starts_with(FC_PREFIX)
        || name.starts_with(runtime::PREFIX)
        || matches!(
            name,
            USER_CMD
                | KUBE_APISERVER_ADDRESS
                | KILL_GRACE_SEC
                | LOG_MAX_BYTES
                | ENV_FILE_MODE
                | runtime::LOG_DIR
                | runtime::RESULT_FILE
                | runtime::TERMINATION_LOG
        )
}

/// True for the `PAI_*` names the platform sets in a task (fixed names and the families
/// named after roles, tasks and labels), whose value wins over a job's own variable of the
/// same name. `PAI_SSH_PUB_KEY` is the job's to give.
pub fn is_set_by_platform(name: &str) -> bool {
    const FIXED: &[&str] = &[
        JOB_NAME,
        USER_NAME,
        DEFAULT_FS_URI,
        TASK_ROLE_COUNT,
        TASK_ROLE_LIST,
        CURRENT_TASK_ROLE_NAME,
        DATA_DIR,
        OUTPUT_DIR,
        CODE_DIR,
        TASK_ROLE_INDEX,
        TASK_INDEX,
        CONTAINER_ID,
        v1::TASK_ROLE_NAME,
        v1::TASK_ROLE_NUM,
        v1::TASK_CPU_NUM,
        v1::TASK_MEM_MB,
        v1::TASK_GPU_NUM,
        v1::RESOURCE,
        v2::FRAMEWORK_NAME,
        v2::VIRTUAL_CLUSTER,
        v2::USERNAME,
        v2::TASKS_NUM,
        v2::JOB_TASK_COUNT,
        v2::TASK_ROLES_NUM,
        v2::JOB_TASK_ROLE_COUNT,
        v2::JOB_TASK_ROLE_LIST,
    ];
    const FAMILIES: &[&str] = &[
        "PAI_CURRENT_",
        "PAI_CONTAINER_",
        "PAI_HOST_IP_",
        "PAI_PORT_LIST_",
        "PAI_TASK_ROLE_",
        "PAI_MIN_",
        "PAI_RESOURCE_",
    ];
    name != SSH_PUB_KEY
        && name.starts_with(PAI_PREFIX)
        && (FIXED.contains(&name)
            || FAMILIES.iter().any(|f| name.starts_with(f))
            // `PAI_<role>_<index>_<label>_PORT`
            || (name.ends_with("_PORT")
                && name.split('_').skip(2).any(|i| i.parse::<u32>().is_ok())))
}

/// A role's name as it appears in variable names: `-`, `.` and `~` (which OpenPAI v1
/// allowed in role names, and no shell allows in a variable's name) written as `_`.
pub fn var_part(role: &str) -> std::borrow::Cow<'_, str> {
    if role.contains(['-', '.', '~']) {
        std::borrow::Cow::Owned(role.replace(['-', '.', '~'], "_"))
    } else {
        std::borrow::Cow::Borrowed(role)
    }
}

/// `PAI_PORT_LIST_<role>_<index>_<label>`: the ports of `label` of a task.
pub fn port_list(role: &str, index: u32, label: &str) -> String {
    format!("PAI_PORT_LIST_{}_{index}_{label}", var_part(role))
}
/// `PAI_HOST_IP_<role>_<index>`: the address of a task.
pub fn host_ip(role: &str, index: u32) -> String {
    format!("PAI_HOST_IP_{}_{index}", var_part(role))
}
/// `ip:port,ip:port`, port being the role's `http` port.
pub fn task_role_host_list(role: &str) -> String {
    format!("PAI_TASK_ROLE_{}_HOST_LIST", var_part(role))
}
/// `PAI_<role>_<index>_<label>_PORT`: the first port of `label` of a task.
pub fn task_port(role: &str, index: u32, label: &str) -> String {
    format!("PAI_{}_{index}_{label}_PORT", var_part(role))
}

/// Escapes a value for a container `env` entry, whose `$(NAME)` references the kubelet
/// expands and whose `$$` it reduces to `$`. A `$` followed by `$` or `(` is doubled, so
/// the process sees the value exactly as written (no substitution); every other `$`
/// (`$PAI_JOB_NAME` in a command) is left readable as it is.
pub fn kubelet_escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '$' && matches!(chars.peek(), Some('$' | '(')) {
            out.push('$');
        }
    }
    out
}

/// The kubelet's expansion of a container `env` value, given the variables defined
/// before it: `$$` is `$`, `$(NAME)` is NAME's value when defined and stays as written
/// otherwise, any other `$` stays. The embedded backend uses it to give its processes
/// the values a pod would see.
pub fn kubelet_expand(value: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let name = &inner[..end];
            match lookup(name) {
                Some(v) => out.push_str(&v),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// True for a POSIX shell identifier: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_shell_identifier(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn expansion_follows_the_kubelet() {
        let lookup = |n: &str| (n == "A").then(|| "x".to_string());
        assert_eq!(kubelet_expand("$(A)-$(B)", lookup), "x-$(B)");
        assert_eq!(kubelet_expand("$$(A)", lookup), "$(A)");
        assert_eq!(kubelet_expand("$A $", lookup), "$A $");
        assert_eq!(kubelet_expand("$(A", lookup), "$(A");
    }

    proptest! {
        #[test]
        fn escaped_values_survive_expansion(value in "([$()a-z]|.){0,40}") {
            let everything = |_: &str| Some("EXPANDED".to_string());
            prop_assert_eq!(kubelet_expand(&kubelet_escape(&value), everything), value);
        }
    }

    #[test]
    fn escaping_touches_only_what_the_kubelet_would_change() {
        assert_eq!(
            kubelet_escape("echo $PAI_JOB_NAME $"),
            "echo $PAI_JOB_NAME $"
        );
        assert_eq!(kubelet_escape("$(date) $$"), "$$(date) $$$");
    }

    #[test]
    fn the_gpu_count_reads_back() {
        assert_eq!(
            resource_gpu_count("cpu_count:2,memMB:1,shmMB:1,gpu_count:4"),
            Some(4)
        );
        assert_eq!(resource_gpu_count("cpu_count:2"), None);
        assert_eq!(resource_gpu_count("4,8,16384,512"), Some(4));
        assert_eq!(resource_gpu_count("4,8,x,512"), None);
    }

    #[test]
    fn identifiers() {
        assert!(is_shell_identifier("PAI_X_1"));
        assert!(is_shell_identifier("_a"));
        assert!(!is_shell_identifier("1A"));
        assert!(!is_shell_identifier("A-B"));
        assert!(!is_shell_identifier(""));
    }
}
