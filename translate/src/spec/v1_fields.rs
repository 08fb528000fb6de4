//! Every field of an OpenPAI v1 job config and what it does here: the one list the
//! validator knows fields by (a field missing here is an unknown field) and the table
//! docs/reference.md shows (rendered by [`markdown`], compared with that page by a test, so
//! neither can drift). The rules are OpenPAI's own (microsoft/pai,
//! `src/rest-server/src/config/job.js` and `middlewares/job.js`): defaults where it had
//! defaults, refusals where it refused.

use std::sync::LazyLock;

/// One field: where it sits, what it takes, and what it does here.
pub struct Field {
    pub name: &'static str,
    /// Its type and rule, with OpenPAI's default.
    pub takes: &'static str,
    /// What it does here; "warned" where it is accepted without doing what OpenPAI did.
    pub here: &'static str,
}

const fn field(name: &'static str, takes: &'static str, here: &'static str) -> Field {
    Field { name, takes, here }
}

/// The job's fields.
pub const JOB: &[Field] = &[
    field(
        "jobName",
        r"string, `^[A-Za-z0-9\-._~]+$`, required",
        "The job's name among the user's jobs; `PAI_JOB_NAME` is `<user>~<jobName>`.",
    ),
    field(
        "image",
        "string without white space, required",
        "Every task's image. On this machine no image is used: commands run on the host (warned).",
    ),
    field(
        "taskRoles",
        "list of roles, at least one",
        "The roles (below), at most 10,000 tasks in all.",
    ),
    field(
        "codeDir",
        "string",
        "Copied into each task's working directory under its own name before the command runs (`cd code && …`), at most 200 MB, as OpenPAI's container script did; `PAI_CODE_DIR`. This machine: a local directory (absolute path or `file://`), or `hdfs://` when an `hdfs` client is on `PATH`. A cluster: `hdfs://` when `defaultFsUri` is configured, fetched with `hdfs dfs -get` in the task's container (the image needs Hadoop's client, as OpenPAI's images had). Anything else is refused at submission.",
    ),
    field(
        "dataDir",
        "string",
        "`PAI_DATA_DIR`; nothing is fetched (nor was it by OpenPAI).",
    ),
    field(
        "outputDir",
        "string",
        "`PAI_OUTPUT_DIR`; nothing is created (OpenPAI on YARN made one on HDFS when absent; not here).",
    ),
    field(
        "virtualCluster",
        "string: letters, digits, `-`, `_`, `.`; default `default`",
        "The gang engine's queue (a Volcano Queue, a Kueue LocalQueue); a queue the cluster does not have is refused. Where there are no queues (this machine, no engine, coscheduling) any name other than `default` is warned.",
    ),
    field(
        "retryCount",
        "integer ≥ −2; default 0",
        "Retries of the job's attempt: n counted failures (transient ones uncounted, permanent ones never); −1 failures forever; −2 always, also after success (FrameworkController's `maxRetryCount`, as OpenPAI's launcher).",
    ),
    field(
        "jobEnvs",
        "object of names to strings, numbers or booleans",
        "Exported to every task as written. `PAI_*` names the platform sets keep the platform's value (warned); `FC_*`, `USER_CMD`, `KUBE_APISERVER_ADDRESS` and the runtime's own settings are refused. OpenPAI's platform flags `isDebug` and `paiAzRDMA` are only variables here (warned).",
    ),
    field(
        "killAllOnCompletedTaskNumber",
        "integer; obsolete in OpenPAI",
        "n above 0: as its documentation said, the job ends once n tasks completed; FrameworkController counts per role, so every role without its own `minSucceededTaskCount` gets min(n, `taskNumber`): exact when one role's tasks complete (a ps/worker job's workers). Warned: say it with `minSucceededTaskCount`. 0: nothing (warned).",
    ),
    field(
        "gpuType",
        "string",
        "The GPU model (OpenPAI's SKU name) the roles that ask for GPUs run on, where the config maps it (`gpus.types`): the node selector of its nodes on a cluster, only devices of that model on this machine (a job that cannot get them is refused). Not mapped: warned, any GPU takes the task.",
    ),
    field(
        "authFile",
        "string",
        "Warned: not read (OpenPAI read registry credentials from this HDFS file); use the cluster's `imagePullSecrets` or a v2 spec's `auth`.",
    ),
    field("extras", "object", "Warned: kept in the spec, not used."),
    field(
        "frameworkEnv",
        "list of `tensorflow`, `pytorch`, `mpi`, `jax`, `xgboost` (this project's)",
        "What the runtime derives for training programs: `TF_CONFIG`, PyTorch's variables, an MPI hostfile, JAX's coordinator, XGBoost's tracker; all five when absent.",
    ),
    field(
        "dependsOn",
        "list of `{job, state}` (this project's)",
        "Jobs of the same user this one waits for.",
    ),
];

/// A role's fields.
pub const ROLE: &[Field] = &[
    field(
        "name",
        r"string, `^[A-Za-z0-9\-._~]+$`, required",
        "Part of variable names (`PAI_HOST_IP_<role>_<i>`), with `_` for each `-`, `.` and `~`, which no shell allows in a name (warned; OpenPAI refused `-` from April 2018 on for that reason).",
    ),
    field("taskNumber", "integer ≥ 1; default 1", "Tasks of the role."),
    field("cpuNumber", "integer ≥ 1; default 1", "CPUs per task."),
    field(
        "memoryMB",
        "integer ≥ 1; default 100",
        "Memory per task, MiB.",
    ),
    field(
        "shmMB",
        "integer ≥ 1, at most `memoryMB`; default 64",
        "`/dev/shm` per task, MiB.",
    ),
    field("gpuNumber", "integer ≥ 0; default 0", "GPUs per task."),
    field(
        "portList",
        "list of ports; labels unique",
        "Each task's labelled ports; `http` and `ssh` are added when absent.",
    ),
    field(
        "command",
        "string, required",
        "Run by bash in the task's working directory (by `sh` where the image has no bash), as OpenPAI's container script ran it.",
    ),
    field(
        "minFailedTaskCount",
        "integer ≥ 1 or null, at most `taskNumber`; default 1",
        "Failed tasks that fail the job's attempt; null: failed tasks never fail it (OpenPAI's launcher).",
    ),
    field(
        "minSucceededTaskCount",
        "integer ≥ 1 or null, at most `taskNumber`; default null",
        "Succeeded tasks that succeed the job's attempt; null: every task must complete.",
    ),
];

/// A port's fields.
pub const PORT: &[Field] = &[
    field(
        "label",
        "string, `^[A-Za-z_][A-Za-z0-9_]*$`, required",
        "Part of variable names (`PAI_PORT_LIST_<role>_<i>_<label>`).",
    ),
    field(
        "beginAt",
        "integer, 0 or 1024–65535; default 0",
        "0: any free ports; else exactly these.",
    ),
    field("portNumber", "integer ≥ 1; default 1", "How many ports."),
];

fn names(fields: &[Field]) -> Vec<&'static str> {
    fields.iter().map(|f| f.name).collect()
}

/// The names of each list, as the validator knows fields by.
pub static JOB_NAMES: LazyLock<Vec<&'static str>> = LazyLock::new(|| names(JOB));
pub static ROLE_NAMES: LazyLock<Vec<&'static str>> = LazyLock::new(|| names(ROLE));
pub static PORT_NAMES: LazyLock<Vec<&'static str>> = LazyLock::new(|| names(PORT));

/// docs/reference.md's table of every v1 field.
pub fn markdown() -> String {
    let mut out = String::from(
        "| Field | Takes (OpenPAI's rule and default) | What it does here |\n|---|---|---|\n",
    );
    for (prefix, fields) in [
        ("", JOB),
        ("taskRoles[].", ROLE),
        ("taskRoles[].portList[].", PORT),
    ] {
        for f in fields {
            out.push_str(&format!(
                "| `{prefix}{}` | {} | {} |\n",
                f.name, f.takes, f.here
            ));
        }
    }
    out
}
