//! What users see of a job: the Framework (spec and status) read as OpenPAI's job status,
//! plus Kubernetes-style conditions. One pure function of the Framework, used by every
//! backend.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use pai_contract::exit::codes;
use pai_contract::framework::{
    CompletionStatus, ExecutionType, Framework, FrameworkState, TaskStatus,
};
use pai_contract::ports::PortPlan;

/// The job states OpenPAI shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum JobState {
    Waiting,
    Running,
    Succeeded,
    Failed,
    Stopped,
    Unknown,
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl JobState {
    /// Its name as the API writes it (`RUNNING`).
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Waiting => "WAITING",
            JobState::Running => "RUNNING",
            JobState::Succeeded => "SUCCEEDED",
            JobState::Failed => "FAILED",
            JobState::Stopped => "STOPPED",
            JobState::Unknown => "UNKNOWN",
        }
    }

    /// Every state, in the order of a job's life.
    pub const ALL: [JobState; 6] = [
        JobState::Waiting,
        JobState::Running,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Stopped,
        JobState::Unknown,
    ];

    /// Whether the job is in the state a job waiting for it wants (`dependsOn`).
    pub fn is(self, wanted: pai_job::depends::Wanted) -> bool {
        use pai_job::depends::Wanted;
        matches!(
            (self, wanted),
            (JobState::Succeeded, Wanted::Succeeded)
                | (JobState::Failed, Wanted::Failed)
                | (JobState::Stopped, Wanted::Stopped)
        )
    }

    /// Whether the job ended: nothing changes any more but its deletion.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Stopped
        )
    }
}

/// `START` or `STOP`, the values of `PUT …/executionType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
pub enum Execution {
    /// Keep (or let) the job run; a completed or stopping job cannot start again.
    #[serde(rename = "START")]
    Start,
    /// Stop every task: TERM, then KILL after the grace period; the job ends STOPPED.
    #[serde(rename = "STOP")]
    Stop,
}

/// `GET /api/v1/user/:u/jobs/:j`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobView {
    pub name: String,
    pub job_status: JobStatus,
    /// By role, in the order the spec gives them (as OpenPAI's API answered).
    pub task_roles: RoleViews,
    pub conditions: Vec<Condition>,
}

/// A job's roles by name, in the spec's order.
pub type RoleViews = indexmap::IndexMap<String, RoleView>;

impl JobView {
    /// The condition of type `kind` (`Admitted`, `Running`, …).
    pub fn condition(&self, kind: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.kind == kind)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobStatus {
    pub username: String,
    pub state: JobState,
    /// The Framework's own state, e.g. `AttemptRunning`.
    pub sub_state: String,
    /// `START` or `STOP`.
    #[schema(value_type = String)]
    pub execution_type: Execution,
    pub retries: i32,
    pub created_time: Option<i64>,
    pub completed_time: Option<i64>,
    pub app_exit_code: Option<i32>,
    pub app_exit_diagnostics: Option<String>,
    /// The role and index of the task whose completion ended the attempt.
    pub app_exit_trigger_task_role_name: Option<String>,
    pub app_exit_trigger_task_index: Option<i32>,
    /// Why the task that ended the job failed, as its output said
    /// ([`TaskView::container_exit_cause`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_exit_cause: Option<ExitCause>,
    pub total_task_number: u32,
    /// GPUs of all its tasks together.
    #[serde(default)]
    pub total_gpu_number: u32,
    /// The virtual cluster (queue) it runs in: the one its spec named, else `default`.
    #[serde(default)]
    pub virtual_cluster: String,
    /// The protocol its spec was written in: `1` (a job config) or `2`.
    #[serde(default)]
    pub protocol_version: String,
    /// The priority class it runs as (`prod`, `test`, `oppo`: its
    /// `extras.hivedScheduler.jobPriorityClass`, or the config's default); null: none.
    #[serde(default)]
    pub job_priority: Option<String>,
    /// Its tags, in the order added (OpenPAI's v2 API adds and removes them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Tasks whose user command runs now.
    #[serde(default)]
    pub running_task_number: u32,
    pub total_task_role_number: usize,
    /// Why the job waits and since when, while it is `WAITING`: in the words of what
    /// holds it (the gang scheduler, the queue, the scheduler's verdict on its pods, this
    /// machine's task slots) or, when nothing says more, of its Framework's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<crate::waiting::Waiting>,
    /// How each attempt ended, oldest first (the latest 20): its code and what it means,
    /// the task that ended it. The current attempt is last once it ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<AttemptView>,
}

/// How one attempt of the job ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttemptView {
    /// The attempt's number, from 0.
    pub attempt: i32,
    pub exit_code: i32,
    /// FrameworkController's phrase for the code (`ContainerTransientConflictFailed`).
    pub phrase: String,
    /// What the code means, in words.
    pub meaning: String,
    pub diagnostics: Option<String>,
    /// Who ended it, when it was not the job (a preemption, an eviction, a drained node),
    /// in the engine's words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_by: Option<String>,
    /// The task whose end ended the attempt.
    pub trigger_task_role_name: Option<String>,
    pub trigger_task_index: Option<i32>,
    /// When it ended (ms since the epoch).
    pub completed_time: Option<i64>,
    /// Whether another attempt follows (or will, after `retryDelaySeconds`).
    pub retried: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_delay_seconds: Option<i64>,
}

impl AttemptView {
    /// One line for people: `attempt 0 failed: task worker-0: a conflict: a port taken,
    /// or the barrier timed out; retried later (exit code 201): port 44438 … in use;
    /// retried as attempt 1`.
    pub fn line(&self) -> String {
        use std::fmt::Write;
        let mut line = format!(
            "attempt {} {}",
            self.attempt,
            if self.exit_code == 0 {
                "succeeded"
            } else {
                "failed"
            }
        );
        if let (Some(role), Some(index)) = (&self.trigger_task_role_name, self.trigger_task_index) {
            let _ = write!(line, ": task {role}-{index}");
        }
        let _ = write!(line, ": {}", self.meaning);
        if !pai_contract::exit::meaning_says_code(self.exit_code) {
            let _ = write!(line, " (exit code {})", self.exit_code);
        }
        if let Some(d) = self.diagnostics.as_deref().filter(|d| !d.is_empty()) {
            let _ = write!(line, ": {d}");
        }
        if let Some(by) = &self.ended_by {
            let _ = write!(line, "; ended by {by}");
        }
        if self.retried {
            match self.retry_delay_seconds {
                Some(delay) => {
                    let _ = write!(
                        line,
                        "; retrying in {delay} s (attempt {})",
                        self.attempt + 1
                    );
                }
                None => {
                    let _ = write!(line, "; retried as attempt {}", self.attempt + 1);
                }
            }
        }
        line
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleView {
    pub task_role_status: RoleName,
    pub task_statuses: Vec<TaskView>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RoleName {
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskView {
    pub task_index: u32,
    pub task_state: JobState,
    /// The pod's UID.
    pub container_id: Option<String>,
    pub container_ip: Option<String>,
    /// Label → comma-separated ports (shared by the tasks of a role that have the
    /// role's ports: one map per role, not per task). Empty for a task whose attempt has
    /// a status and no pod (not placed yet, or ended before it was: nothing drew its
    /// ports); a task with no status yet shows the role's planned ports.
    #[schema(value_type = BTreeMap<String, String>)]
    pub container_ports: std::sync::Arc<BTreeMap<String, String>>,
    /// OpenPAI's bit per GPU the task holds, by the machine's index: the GPUs it holds
    /// on the embedded default; on a cluster, whose device plugin does not say which
    /// ones, the lowest as many as it asked for (as OpenPAI without HiveD said it).
    pub container_gpus: u64,
    /// The GPUs it holds, by index and UUID (the embedded default; empty on a cluster).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<Object>)]
    pub gpus: Vec<pai_job::gpus::Held>,
    /// Where this task's log is served.
    pub container_log: String,
    pub container_exit_code: Option<i32>,
    /// What the exit code means: who ended the task and why (`stopped by the platform:
    /// the job's attempt ended …` for −220).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_exit_meaning: Option<String>,
    /// Whether this task's end decided the job's outcome.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub decided_outcome: bool,
    pub retries: i32,
    /// What the task's user command left in `$PAI_RESULT_FILE` (any JSON value of at most
    /// 4,000 bytes), once the task ended in this attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// Why the task's result could not be sent (not JSON, too large, unreadable); the
    /// task's outcome is the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_error: Option<String>,
    /// Why the task failed, as its output said: the line the runtime picked by its
    /// failure patterns (a Python exception, CUDA's out of memory, an MPI rank's end), else
    /// the last meaningful line of stderr.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_exit_cause: Option<ExitCause>,
}

/// The line of a task's output that says why it failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExitCause {
    /// The failure pattern that picked it (`python-exception`, `cuda-out-of-memory`,
    /// `mpi`, `killed`, an operator's own), or `last-stderr-line`, `last-stdout-line`,
    /// `signal`.
    pub pattern: String,
    /// The line.
    pub line: String,
}

impl From<pai_contract::failure::Cause> for ExitCause {
    fn from(cause: pai_contract::failure::Cause) -> Self {
        Self {
            pattern: cause.pattern,
            line: cause.line,
        }
    }
}

/// A Kubernetes-style condition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `Submitted`, `Admitted`, `Running`, `Succeeded`, `Failed` or `Stopped`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `True` or `False`.
    pub status: String,
    pub reason: String,
    pub message: String,
    /// When `status` last changed (RFC 3339): for a condition that never held, the
    /// Framework's creation.
    pub last_transition_time: String,
}

use crate::waiting::{Waiting, millis};

/// The user-facing state of a Framework.
pub fn job_state(framework: &Framework) -> JobState {
    let Some(status) = &framework.status else {
        return JobState::Waiting;
    };
    let stopping = framework.spec.execution_type == ExecutionType::Stop;
    match status.state {
        FrameworkState::AttemptCreationPending
        | FrameworkState::AttemptCreationRequested
        | FrameworkState::AttemptPreparing => {
            if stopping {
                JobState::Running
            } else {
                JobState::Waiting
            }
        }
        // An attempt ended and its retry is scheduled after a delay: the job waits for it
        // (OpenPAI's rest-server read `AttemptCompleted` with a `retryDelaySec` so).
        FrameworkState::AttemptCompleted if framework.retry_scheduled().is_some() => {
            JobState::Waiting
        }
        // An attempt that is ending: the job still runs until it completes or retries.
        FrameworkState::AttemptRunning
        | FrameworkState::AttemptDeletionPending
        | FrameworkState::AttemptDeletionRequested
        | FrameworkState::AttemptDeleting
        | FrameworkState::AttemptCompleted => JobState::Running,
        FrameworkState::Completed => {
            let code = status
                .attempt_status
                .completion_status
                .as_ref()
                .map(|c| c.code);
            match code {
                Some(0) => JobState::Succeeded,
                // Stopped by the server because a job it waited for ended otherwise.
                _ if pai_job::depends::failed(framework).is_some() => JobState::Failed,
                _ if pai_contract::exit::stopped_by_user(stopping, code) => JobState::Stopped,
                Some(_) => JobState::Failed,
                None => JobState::Unknown,
            }
        }
    }
}

fn task_state(task: &TaskStatus, stopping: bool) -> JobState {
    match task.state {
        FrameworkState::AttemptCreationPending
        | FrameworkState::AttemptCreationRequested
        | FrameworkState::AttemptPreparing => JobState::Waiting,
        FrameworkState::AttemptRunning
        | FrameworkState::AttemptDeletionPending
        | FrameworkState::AttemptDeletionRequested
        | FrameworkState::AttemptDeleting
        | FrameworkState::AttemptCompleted => JobState::Running,
        FrameworkState::Completed => match task
            .attempt_status
            .completion_status
            .as_ref()
            .map(|c| c.code)
        {
            Some(0) => JobState::Succeeded,
            // Ended by a stop, by the end of the job's attempt (another task decided it),
            // or by its deletion: the platform's doing, not a failure of the task.
            Some(
                codes::STOP_FRAMEWORK_REQUESTED
                | codes::FRAMEWORK_ATTEMPT_COMPLETION
                | codes::DELETE_TASK_REQUESTED,
            ) => JobState::Stopped,
            _ if stopping => JobState::Stopped,
            Some(_) => JobState::Failed,
            None => JobState::Unknown,
        },
    }
}

/// The job as OpenPAI shows it, from its Framework alone. `logs_base` is the job's URL
/// (`/api/v1/user/u/jobs/j`).
pub fn job_view(framework: &Framework, logs_base: &str) -> JobView {
    job_view_held(framework, logs_base, None)
}

/// The job as OpenPAI shows it; `held`: why it waits, as what holds it says (the
/// Framework's own state speaks when that is `None`). Used only while it is `WAITING`.
// Long: mostly the JobStatus literal, one line per field of OpenPAI's view.
pub fn job_view_held(framework: &Framework, logs_base: &str, held: Option<&Waiting>) -> JobView {
    let name = framework.job_name().unwrap_or(framework.name()).to_string();
    let username = framework.user_name().unwrap_or_default().to_string();
    let state = job_state(framework);
    let stopping = framework.spec.execution_type == ExecutionType::Stop;
    let status = framework.status.as_ref();
    let completion: Option<&CompletionStatus> =
        status.and_then(|s| s.attempt_status.completion_status.as_ref());
    let completed = state != JobState::Running && state != JobState::Waiting;
    let statuses = framework.task_role_statuses().unwrap_or_default();

    // The task whose completion ended the attempt (its Kubernetes role name and index).
    let trigger_task: Option<(String, i32)> = completion
        .and_then(|c| c.trigger.as_ref())
        .and_then(|t| t.task_role_name.clone().zip(t.task_index));
    let trigger_task = trigger_task.as_ref().map(|(r, i)| (r.as_str(), *i));
    let facts = TaskFacts {
        logs_base,
        stopping,
        attempt_code: completion.map(|a| a.code),
        trigger_task,
    };
    let roles = role_views(framework, &facts, &statuses);
    let (task_roles, total_tasks, total_gpus, running_task_number) =
        (roles.views, roles.tasks, roles.gpus, roles.running);
    let created = framework
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_millisecond());
    let completed_time = completed
        .then(|| millis(status.and_then(|s| s.completion_time.as_deref())))
        .flatten();
    let trigger = completion.and_then(|c| c.trigger.as_ref());
    let job_status = JobStatus {
        username,
        state,
        sub_state: status.map_or("AttemptCreationPending".to_string(), |s| {
            format!("{:?}", s.state)
        }),
        execution_type: match framework.spec.execution_type {
            ExecutionType::Start => Execution::Start,
            ExecutionType::Stop => Execution::Stop,
        },
        retries: status.map_or(0, |s| s.retry_policy_status.total_retried_count),
        created_time: created,
        completed_time,
        app_exit_code: completed.then(|| completion.map(|c| c.code)).flatten(),
        app_exit_diagnostics: completed
            .then(|| {
                pai_job::depends::failed(framework)
                    .map(String::from)
                    .or_else(|| completion.and_then(|c| c.diagnostics.clone()))
            })
            .flatten(),
        app_exit_trigger_task_role_name: trigger.and_then(|t| t.task_role_name.clone()).map(
            |kube| {
                framework
                    .task_role(&kube)
                    .map_or(kube.clone(), |r| r.pai_name().to_string())
            },
        ),
        app_exit_trigger_task_index: trigger.and_then(|t| t.task_index),
        app_exit_cause: trigger_task
            .filter(|_| completed && completion.is_some_and(|c| c.code != 0))
            .and_then(|(role, index)| {
                let role = framework.task_role(role)?.pai_name();
                let task = task_roles
                    .get(role)?
                    .task_statuses
                    .get(usize::try_from(index).ok()?)?;
                task.container_exit_cause.clone()
            }),
        total_task_number: total_tasks,
        total_gpu_number: total_gpus,
        virtual_cluster: framework.virtual_cluster().to_string(),
        protocol_version: framework.protocol_version().to_string(),
        job_priority: pai_contract::priority::JobPriority::of(framework).map(|c| c.to_string()),
        tags: pai_job::tags::of(framework.metadata.annotations.as_ref()),
        running_task_number,
        total_task_role_number: framework.spec.task_roles.len(),
        attempts: attempt_views(framework),
        waiting: (state == JobState::Waiting).then(|| {
            held.cloned().unwrap_or_else(|| {
                crate::waiting::of_framework(framework, running_task_number, total_tasks)
            })
        }),
    };
    let conditions = conditions(framework, &job_status);
    JobView {
        name,
        job_status,
        task_roles,
        conditions,
    }
}

/// Every role's view, with the job's counts.
struct Roles {
    views: RoleViews,
    tasks: u32,
    gpus: u32,
    running: u32,
}

/// The roles of `framework` in its spec's order, each task's view from `statuses`.
fn role_views(
    framework: &Framework,
    facts: &TaskFacts<'_>,
    statuses: &[pai_contract::framework::TaskRoleStatus],
) -> Roles {
    let own_ports = framework.task_ports();
    // The embedded default's, for the attempt shown.
    let attempt = framework.status.as_ref().map(|s| s.attempt_status.id);
    let held = pai_job::gpus::Assignment::of(framework)
        .filter(|a| Some(a.attempt) == attempt)
        .unwrap_or_default();
    // The ports of every task that has no pod: none.
    let no_ports = std::sync::Arc::new(BTreeMap::new());
    let mut task_roles = RoleViews::new();
    let mut total_tasks = 0;
    let mut total_gpus = 0u32;
    let mut running_task_number = 0;
    for role in &framework.spec.task_roles {
        let pai_name = role.pai_name().to_string();
        let gpus = role.gpu_count();
        let tasks = role.tasks();
        // The role's ports, read once; a task's own (the embedded default's) over them.
        let role_ports = ports_view(&role.port_plan());
        let own = own_ports.role(&role.name);
        total_tasks += tasks;
        total_gpus = total_gpus.saturating_add(gpus.saturating_mul(tasks));
        // Each task's status by index, in one pass: the view is linear in the tasks.
        let mut by_index: Vec<Option<&TaskStatus>> = vec![None; tasks as usize];
        if let Some(observed) = statuses.iter().find(|r| r.name == role.name) {
            for task in &observed.task_statuses {
                if let Some(slot) = usize::try_from(task.index)
                    .ok()
                    .and_then(|i| by_index.get_mut(i))
                {
                    *slot = Some(task);
                }
            }
        }
        let task_statuses = (0..tasks)
            .map(|index| {
                let status = by_index[index as usize];
                let ports = match status {
                    Some(task) if !had_pod(task) => no_ports.clone(),
                    _ => own
                        .get(index as usize)
                        .map_or_else(|| role_ports.clone(), ports_view),
                };
                let place = TaskPlace {
                    kube_role: &role.name,
                    pai_role: &pai_name,
                    index,
                    gpus,
                    held: held.task(&role.name, index),
                };
                task_view(facts, &place, status, ports)
            })
            .collect::<Vec<TaskView>>();
        running_task_number += task_statuses
            .iter()
            .filter(|t| t.task_state == JobState::Running)
            .count() as u32;
        task_roles.insert(
            pai_name.clone(),
            RoleView {
                task_role_status: RoleName { name: pai_name },
                task_statuses,
            },
        );
    }

    Roles {
        views: task_roles,
        tasks: total_tasks,
        gpus: total_gpus,
        running: running_task_number,
    }
}

/// Whether `task`'s current attempt has (or had) a pod: its UID or an address. A task
/// whose attempt has none was never placed: no ports were drawn for it, it ran nothing.
pub fn had_pod(task: &TaskStatus) -> bool {
    let attempt = &task.attempt_status;
    attempt.pod_uid.as_deref().is_some_and(|u| !u.is_empty())
        || attempt.pod_ip.as_deref().is_some_and(|ip| !ip.is_empty())
        || attempt
            .pod_host_ip
            .as_deref()
            .is_some_and(|ip| !ip.is_empty())
}

/// Why task `index` of role `pai_role` has no log in the current attempt and will get
/// none there: the attempt ended before the task had a pod (its image not pulled, its
/// slots refused, its pod never made). The sentence, naming the task, the job, the
/// attempt and what ended it: `task client-1 of job alice~hello never started: attempt 0
/// ended before it ran (ErrImagePull: …)`. `None` while it may still run, or once it ran.
pub fn never_started(framework: &Framework, pai_role: &str, index: u32) -> Option<String> {
    let role = framework.role(pai_role)?;
    let statuses = framework.task_role_statuses().ok()?;
    let task = statuses
        .iter()
        .find(|r| r.name == role.name)?
        .task_statuses
        .iter()
        .find(|t| i64::from(t.index) == i64::from(index))?;
    let attempt = &task.attempt_status;
    let ended = task.state == FrameworkState::Completed || attempt.completion_status.is_some();
    if !ended || attempt.run_time.is_some() || had_pod(task) {
        return None;
    }
    // The task's own words (`not started: ErrImagePull: …`), else the attempt's.
    let why = attempt
        .completion_status
        .as_ref()
        .and_then(|c| c.diagnostics.as_deref())
        .or_else(|| {
            framework
                .status
                .as_ref()
                .and_then(|s| s.attempt_status.completion_status.as_ref())
                .and_then(|c| c.diagnostics.as_deref())
        })
        .map(|d| d.strip_prefix("not started: ").unwrap_or(d).trim())
        .filter(|d| !d.is_empty());
    let user = framework.user_name().unwrap_or_default();
    let job = framework.job_name().unwrap_or(framework.name());
    let mut sentence = format!(
        "task {pai_role}-{index} of job {user}~{job} never started: attempt {} ended before it ran",
        framework.attempt_id()
    );
    if let Some(why) = why {
        sentence.push_str(&format!(" ({why})"));
    }
    Some(sentence)
}

/// What every task's view of one job reads.
struct TaskFacts<'a> {
    /// The job's URL, the base of its task log links.
    logs_base: &'a str,
    /// A stop was asked.
    stopping: bool,
    /// How the job's attempt ended, when it did.
    attempt_code: Option<i32>,
    /// The task whose end decided the attempt (its Kubernetes role name and index).
    trigger_task: Option<(&'a str, i32)>,
}

/// Which task a view is of.
struct TaskPlace<'a> {
    kube_role: &'a str,
    pai_role: &'a str,
    index: u32,
    gpus: u32,
    /// The GPUs it holds, where the backend says (the embedded default).
    held: &'a [pai_job::gpus::Held],
}

/// A role's ports as a view shows them, shared by its tasks.
fn ports_view(plan: &PortPlan) -> std::sync::Arc<BTreeMap<String, String>> {
    std::sync::Arc::new(
        plan.iter()
            .map(|(label, p)| (label.to_string(), pai_contract::ports::join_ports(p)))
            .collect(),
    )
}

/// One task as the view shows it (`task`: its status, `None` before it has one).
fn task_view(
    facts: &TaskFacts<'_>,
    place: &TaskPlace<'_>,
    task: Option<&TaskStatus>,
    container_ports: std::sync::Arc<BTreeMap<String, String>>,
) -> TaskView {
    let index = place.index;
    let completion = task.and_then(|t| t.attempt_status.completion_status.as_ref());
    let message = completion
        .and_then(|c| c.main_message())
        .and_then(pai_contract::results::read_message)
        .unwrap_or_default();
    let (result, result_error) = match message.reported {
        Some(pai_contract::results::Reported::Result(value)) => (Some(value), None),
        Some(pai_contract::results::Reported::Invalid(why)) => (None, Some(why)),
        None => (None, None),
    };
    TaskView {
        task_index: index,
        task_state: task.map_or(JobState::Waiting, |t| task_state(t, facts.stopping)),
        container_id: task.and_then(|t| t.attempt_status.pod_uid.clone()),
        container_ip: task.and_then(|t| {
            t.attempt_status
                .pod_ip
                .clone()
                .filter(|ip| !ip.is_empty())
                .or_else(|| t.attempt_status.pod_host_ip.clone())
        }),
        container_ports,
        container_gpus: if place.held.is_empty() {
            // 2^n − 1, as OpenPAI's rest-server without HiveD.
            1u64.checked_shl(place.gpus).map_or(u64::MAX, |bit| bit - 1)
        } else {
            pai_job::gpus::Assignment::bits(place.held)
        },
        gpus: place.held.to_vec(),
        container_log: {
            use std::fmt::Write;
            let (base, role) = (facts.logs_base, place.pai_role);
            let mut log = String::with_capacity(base.len() + role.len() + 24);
            let _ = write!(log, "{base}/logs?role={role}&index={index}");
            log
        },
        container_exit_code: completion.map(|c| c.code),
        container_exit_meaning: completion
            .map(|c| pai_contract::exit::task_meaning(c.code, facts.attempt_code, facts.stopping)),
        decided_outcome: facts
            .trigger_task
            .is_some_and(|(r, i)| r == place.kube_role && i64::from(i) == i64::from(index)),
        retries: task.map_or(0, |t| t.retry_policy_status.total_retried_count),
        result,
        result_error,
        container_exit_cause: message.cause.map(ExitCause::from),
    }
}

/// Every ended attempt of `framework`, as people read it.
fn attempt_views(framework: &Framework) -> Vec<AttemptView> {
    let Some(status) = framework.status.as_ref() else {
        return Vec::new();
    };
    let current = status.attempt_status.id;
    // The current attempt ended and waits for its retry.
    let delay = framework.retry_scheduled();
    pai_job::attempts::ended(framework)
        .into_iter()
        .map(|end| {
            let row = pai_contract::exit::completion(end.code);
            let pending = end.attempt == current && delay.is_some();
            AttemptView {
                attempt: end.attempt,
                exit_code: end.code,
                phrase: row.phrase.to_string(),
                meaning: pai_contract::exit::meaning(end.code),
                diagnostics: end.diagnostics,
                ended_by: end.ended_by,
                trigger_task_role_name: end.trigger_role.map(|kube| {
                    framework
                        .task_role(&kube)
                        .map_or(kube.clone(), |r| r.pai_name().to_string())
                }),
                trigger_task_index: end.trigger_index,
                completed_time: millis(end.time.as_deref()),
                retried: end.attempt < current || pending,
                retry_delay_seconds: if pending { delay } else { None },
            }
        })
        .collect()
}

fn conditions(framework: &Framework, job: &JobStatus) -> Vec<Condition> {
    let status = framework.status.as_ref();
    let attempt = status.map(|s| &s.attempt_status);
    let moments = Moments {
        created: framework
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .or_else(|| status.and_then(|s| s.start_time.clone()))
            .unwrap_or_default(),
        changed: status.and_then(|s| s.transition_time.clone()),
        ended: status
            .and_then(|s| s.completion_time.clone())
            .or_else(|| attempt.and_then(|a| a.completion_time.clone())),
    };
    let diagnostics = job.app_exit_diagnostics.clone().unwrap_or_default();
    let outcome = |kind, state: JobState, reason: String, message: String| {
        let on = job.state == state;
        let (reason, message) = if on {
            (reason, message)
        } else {
            not_so(job, state)
        };
        condition(
            kind,
            on,
            reason,
            message,
            moments.since(on, moments.ended.clone(), None),
        )
    };
    let (failed_reason, failed_message) = failed_words(framework, job);
    vec![
        condition(
            "Submitted",
            true,
            "Accepted".into(),
            "the Framework was created".into(),
            moments.created.clone(),
        ),
        admitted(attempt, job, &moments),
        running(attempt, job, &moments),
        outcome(
            "Succeeded",
            JobState::Succeeded,
            "Succeeded".into(),
            diagnostics.clone(),
        ),
        outcome("Failed", JobState::Failed, failed_reason, failed_message),
        outcome(
            "Stopped",
            JobState::Stopped,
            "StoppedByUser".into(),
            diagnostics,
        ),
    ]
}

/// When a job's conditions changed.
struct Moments {
    created: String,
    /// The Framework's last transition.
    changed: Option<String>,
    /// When the job (or its attempt) ended.
    ended: Option<String>,
}

impl Moments {
    /// A condition that holds changed when its event happened; one that does not, when
    /// it stopped holding (the end of a run) or, if it never held, at creation.
    fn since(&self, on: bool, event: Option<String>, off: Option<String>) -> String {
        if on {
            event.or_else(|| self.changed.clone())
        } else {
            off
        }
        .unwrap_or_else(|| self.created.clone())
    }
}

fn condition(kind: &str, on: bool, reason: String, message: String, time: String) -> Condition {
    Condition {
        kind: kind.to_string(),
        status: if on { "True" } else { "False" }.to_string(),
        reason,
        message,
        last_transition_time: time,
    }
}

/// An ending condition that does not hold: why, in words that are true of the job now.
fn not_so(job: &JobStatus, state: JobState) -> (String, String) {
    match job.state {
        JobState::Waiting | JobState::Running if job.execution_type == Execution::Stop => (
            "Stopping".into(),
            "a stop was requested: the tasks end within their grace period".into(),
        ),
        JobState::Waiting | JobState::Running => {
            ("NotEnded".into(), "the job has not ended".into())
        }
        other if other == state => (String::new(), String::new()),
        other => (
            match other {
                JobState::Succeeded => "Succeeded",
                JobState::Failed => "Failed",
                JobState::Stopped => "Stopped",
                _ => "Unknown",
            }
            .into(),
            format!("the job ended {other}"),
        ),
    }
}

/// The `Failed` condition's reason and message: a dependency, the deciding task
/// (`worker-2`), or the job's exit code.
fn failed_words(framework: &Framework, job: &JobStatus) -> (String, String) {
    let diagnostics = job.app_exit_diagnostics.clone().unwrap_or_default();
    let trigger = job
        .app_exit_trigger_task_role_name
        .as_ref()
        .zip(job.app_exit_trigger_task_index)
        .map(|(role, index)| format!("{role}-{index}"));
    if pai_job::depends::failed(framework).is_some() {
        return ("DependencyFailed".to_string(), diagnostics);
    }
    match (trigger, job.app_exit_code) {
        (Some(task), Some(code)) => (
            "TaskFailed".to_string(),
            format!("task {task} ended with exit code {code}: {diagnostics}"),
        ),
        (Some(_), None) => ("TaskFailed".to_string(), diagnostics),
        (None, Some(code)) => (format!("ExitCode{code}"), diagnostics),
        (None, None) => ("Failed".to_string(), diagnostics),
    }
}

/// `Admitted`: what holds the job, or whether its attempt was placed.
fn admitted(
    attempt: Option<&pai_contract::framework::FrameworkAttemptStatus>,
    job: &JobStatus,
    moments: &Moments,
) -> Condition {
    if let Some(waiting) = &job.waiting {
        return condition(
            "Admitted",
            false,
            waiting.reason.clone(),
            waiting.message.clone(),
            waiting
                .since
                .map(crate::time::iso)
                .unwrap_or_else(|| moments.created.clone()),
        );
    }
    let ran = attempt.and_then(|a| a.run_time.clone());
    let on = ran.is_some() || job.state == JobState::Running;
    condition(
        "Admitted",
        on,
        if on { "Admitted" } else { "NotRun" }.into(),
        if on {
            format!(
                "attempt {} was placed and started",
                attempt.map_or(0, |a| a.id)
            )
        } else {
            "the job ended before its tasks ran".into()
        },
        moments.since(on, ran, None),
    )
}

/// `Running`: whether the tasks of the current attempt run. An attempt that ended while
/// the job goes on (its pods being deleted, or its retry waiting) runs nothing, whatever
/// the job's state says.
fn running(
    attempt: Option<&pai_contract::framework::FrameworkAttemptStatus>,
    job: &JobStatus,
    moments: &Moments,
) -> Condition {
    let attempt_end = (!job.state.is_final())
        .then(|| attempt.and_then(|a| a.completion_status.as_ref().map(|c| (a, c))))
        .flatten();
    let running = job.state == JobState::Running && attempt_end.is_none();
    let run_time = attempt.and_then(|a| a.run_time.clone());
    let attempt_ended_at = attempt_end.and_then(|(a, _)| a.completion_time.clone());
    let since = moments.since(
        running,
        run_time.clone(),
        attempt_ended_at.or_else(|| run_time.and(moments.ended.clone())),
    );
    let (reason, message) = if running {
        (
            "TasksRunning",
            format!(
                "{} of {} tasks run (attempt {})",
                job.running_task_number,
                job.total_task_number,
                attempt.map_or(0, |a| a.id)
            ),
        )
    } else if job.state.is_final() {
        ("Ended", format!("the job ended {}", job.state))
    } else if let Some((a, c)) = attempt_end {
        let message = match &job.waiting {
            Some(w) => w.message.clone(),
            None => format!(
                "attempt {} ended with {} ({}); its tasks are being stopped",
                a.id,
                c.code,
                pai_contract::exit::meaning(c.code)
            ),
        };
        ("AttemptEnded", message)
    } else {
        ("NotStarted", "no attempt of the job runs yet".to_string())
    };
    condition("Running", running, reason.into(), message, since)
}
