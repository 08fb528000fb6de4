//! FrameworkController's life cycle of one Framework, as a pure state machine: [`step`]
//! applies one [`Event`] to the Framework's status and returns the [`Effect`]s the
//! job loop (`job_loop/`) must carry out. Nothing here starts a process, reads a
//! clock or touches a file, so every rule is tested as a table (see the tests below).
//!
//! Framework and task states and their timestamps change only in
//! [`transition_framework`] and [`transition_task`], as FrameworkController writes them
//! only in `TransitionFrameworkState` and `TransitionTaskState`.

use std::time::Duration;

use pai_contract::exit::{ExitCode, codes};
use pai_contract::framework::{
    CompletionStatus, ContainerCompletionStatus, ExecutionType, Framework, FrameworkAttemptStatus,
    FrameworkState, FrameworkStatus, MAIN_CONTAINER, PodCompletionStatus, RetryPolicyStatus,
    TaskAttemptStatus, TaskRoleStatus, TaskStatus, attempt_config_map, instance_uid,
};

use crate::policy;

/// What the machine needs besides the Framework: the time, the delay of a transient
/// conflict's retry, and fresh UIDs.
pub struct Context<'a> {
    /// RFC 3339, written into every timestamp this step sets.
    pub now: String,
    pub conflict_delay: Duration,
    /// The wait before the next attempt of a job whose attempts end quickly.
    pub restart: pai_job::restarts::RestartBackoff,
    pub uid: &'a mut dyn FnMut() -> String,
    /// Added to every attempt's completion diagnostics (the embedded default says the
    /// images were not used).
    pub note: &'a str,
}

/// Where a task of the attempt runs, as the driver placed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub role: String,
    pub index: u32,
    pub pod_uid: String,
    pub address: String,
    pub node: String,
}

/// What happened to the Framework.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The job loop starts: for a new Framework (no status yet) or one a previous
    /// server left, whatever its state (its processes were ended before this).
    Resumed,
    /// The current attempt's tasks have their ports and addresses.
    Placed(Vec<Placement>),
    /// The current attempt cannot start (no ports, its peer table or the attempt could
    /// not be written): it completes with `code`, no task having run.
    NotStarted { code: i32, message: String },
    /// Task `index` of `role` in attempt `attempt` started its main container.
    TaskRunning {
        attempt: i32,
        role: String,
        index: u32,
    },
    /// Task `index` of `role` in attempt `attempt` ended.
    TaskCompleted {
        attempt: i32,
        role: String,
        index: u32,
        code: i32,
        diagnostics: String,
        /// The main container's termination message (the task's result).
        message: Option<String>,
        /// The main container's reason (`OOMKilled`, …), when known.
        reason: Option<String>,
    },
    /// `executionType` became `Stop`.
    Stop,
    /// A waiting job of a higher priority class asks for what the running attempt holds
    /// ([`crate::slots`]): its tasks end as FrameworkController's do when others delete
    /// their pods (a transient failure, retried without counting).
    Preempted { message: String },
    /// The Framework is deleted: every task ends, then it is removed.
    Delete,
    /// The delay before a retry (an [`Effect::Schedule`]) elapsed.
    RetryDelayElapsed,
}

/// What the driver must do, in this order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Give each task of the current attempt its ports and address, then tell
    /// [`Event::Placed`] (or [`Event::NotStarted`]).
    Place,
    /// Start every task of the current attempt (after the save before it succeeded).
    Launch,
    /// End these tasks: TERM, KILL after their grace period; each then reports
    /// [`Event::TaskCompleted`] with `code`.
    Signal {
        tasks: Vec<(String, u32)>,
        code: i32,
        reason: String,
    },
    /// Save the Framework: `durable` for a decision (synced before going on), else
    /// progress a restart re-derives.
    Persist { durable: bool },
    /// Tell [`Event::RetryDelayElapsed`] after this long.
    Schedule(Duration),
    /// Every task has ended after a deletion: remove the Framework and its files.
    Remove,
}

/// Applies `event`; returns what must be done.
// Long: FrameworkController's transition table as one match over (state, event), tested as
// a table.
pub fn step(framework: &mut Framework, event: Event, cx: &mut Context<'_>) -> Vec<Effect> {
    let mut effects = Vec::new();
    match event {
        Event::Resumed => resume(framework, cx, &mut effects),
        Event::Placed(placements) => {
            if state(framework) != Some(FrameworkState::AttemptCreationPending) {
                return effects;
            }
            place(framework, &placements, &cx.now);
            effects.extend([Effect::Persist { durable: true }, Effect::Launch]);
        }
        Event::NotStarted { code, message } => {
            if !attempt_unfinished(framework) {
                return effects;
            }
            let reason = format!("not started: {message}");
            for task in tasks_mut(framework).filter(|t| t.state != FrameworkState::Completed) {
                complete_task(task, CompletionStatus::of(code, reason.clone()), &cx.now);
            }
            decide_completion(framework, CompletionStatus::of(code, message));
            attempt_completed(framework, cx, &mut effects);
        }
        Event::TaskRunning {
            attempt,
            role,
            index,
        } => {
            if current_attempt(framework) != Some(attempt) {
                return effects;
            }
            let now = cx.now.clone();
            let Some(task) = task_mut(framework, &role, index) else {
                return effects;
            };
            if matches!(
                task.state,
                FrameworkState::AttemptPreparing | FrameworkState::AttemptCreationPending
            ) {
                transition_task(task, FrameworkState::AttemptRunning, &now);
            }
            if let Some(status) = framework.status.as_mut()
                && status.state == FrameworkState::AttemptPreparing
            {
                transition_framework(status, FrameworkState::AttemptRunning, &now);
            }
            effects.push(Effect::Persist { durable: false });
        }
        Event::TaskCompleted {
            attempt,
            role,
            index,
            code,
            diagnostics,
            message,
            reason,
        } => {
            if current_attempt(framework) != Some(attempt) {
                return effects;
            }
            let mut completion = CompletionStatus::of(code, diagnostics);
            // As FrameworkController copies the pod's containers' ends.
            if message.is_some() || reason.is_some() {
                completion.pod = Some(PodCompletionStatus {
                    containers: vec![ContainerCompletionStatus {
                        name: MAIN_CONTAINER.to_string(),
                        message,
                        reason,
                        code,
                        ..Default::default()
                    }],
                    ..Default::default()
                });
            }
            task_completed(framework, &role, index, completion, cx, &mut effects);
        }
        Event::Stop => stop(framework, cx, &mut effects),
        Event::Preempted { message } => preempt(framework, &message, cx, &mut effects),
        Event::Delete => delete(framework, cx, &mut effects),
        Event::RetryDelayElapsed => {
            if state(framework) == Some(FrameworkState::AttemptCompleted) {
                retry_now(framework, cx, &mut effects);
            }
        }
    }
    effects
}

/// The only writer of the Framework's state and its timestamps.
fn transition_framework(status: &mut FrameworkStatus, to: FrameworkState, now: &str) {
    if status.state == to {
        return;
    }
    status.state = to;
    status.transition_time = Some(now.to_string());
    match to {
        FrameworkState::AttemptRunning => {
            status.attempt_status.run_time = Some(now.to_string());
            status.run_time.get_or_insert_with(|| now.to_string());
        }
        FrameworkState::AttemptCompleted => {
            status.attempt_status.completion_time = Some(now.to_string());
        }
        FrameworkState::Completed => {
            status.completion_time = Some(now.to_string());
            status.retry_policy_status.retry_delay_sec = None;
        }
        _ => {}
    }
}

/// The only writer of a task's state and its timestamps.
fn transition_task(task: &mut TaskStatus, to: FrameworkState, now: &str) {
    if task.state == to {
        return;
    }
    task.state = to;
    task.transition_time = Some(now.to_string());
    match to {
        FrameworkState::AttemptPreparing => {
            task.attempt_status.start_time = Some(now.to_string());
        }
        FrameworkState::AttemptRunning => task.attempt_status.run_time = Some(now.to_string()),
        FrameworkState::Completed => {
            task.attempt_status.completion_time = Some(now.to_string());
        }
        _ => {}
    }
}

fn state(framework: &Framework) -> Option<FrameworkState> {
    framework.status.as_ref().map(|s| s.state)
}

fn current_attempt(framework: &Framework) -> Option<i32> {
    framework.status.as_ref().map(|s| s.attempt_status.id)
}

/// Whether the current attempt has yet to complete.
fn attempt_unfinished(framework: &Framework) -> bool {
    state(framework).is_some_and(|s| {
        !matches!(
            s,
            FrameworkState::AttemptCompleted | FrameworkState::Completed
        )
    })
}

/// Whether the current attempt has started its tasks and not completed: what a
/// restarted server must end before the attempt is failed and retried.
pub fn tasks_started(framework: &Framework) -> bool {
    attempt_unfinished(framework)
        && state(framework) != Some(FrameworkState::AttemptCreationPending)
}

fn deleting(framework: &Framework) -> bool {
    framework.metadata.deletion_timestamp.is_some()
}

fn roles_mut(framework: &mut Framework) -> impl Iterator<Item = &mut TaskRoleStatus> {
    framework
        .status
        .as_mut()
        .and_then(|s| s.attempt_status.task_role_statuses.as_mut())
        .into_iter()
        .flatten()
}

fn tasks_mut(framework: &mut Framework) -> impl Iterator<Item = &mut TaskStatus> {
    roles_mut(framework).flat_map(|r| r.task_statuses.iter_mut())
}

fn tasks(framework: &Framework) -> impl Iterator<Item = (&str, &TaskStatus)> {
    framework
        .status
        .as_ref()
        .and_then(|s| s.attempt_status.task_role_statuses.as_ref())
        .into_iter()
        .flatten()
        .flat_map(|r| r.task_statuses.iter().map(move |t| (r.name.as_str(), t)))
}

/// Task `index` of `role`: found at its index (statuses are made in index order).
fn task_mut<'a>(
    framework: &'a mut Framework,
    role: &str,
    index: u32,
) -> Option<&'a mut TaskStatus> {
    let statuses = &mut roles_mut(framework).find(|r| r.name == role)?.task_statuses;
    let at = usize::try_from(index).ok()?;
    if statuses.get(at).is_some_and(|t| t.index == index as i32) {
        return statuses.get_mut(at);
    }
    statuses.iter_mut().find(|t| t.index == index as i32)
}

fn complete_task(task: &mut TaskStatus, completion: CompletionStatus, now: &str) {
    task.attempt_status.completion_status = Some(completion);
    transition_task(task, FrameworkState::Completed, now);
}

/// The attempt's completion, once decided (the first decision stays).
fn decide_completion(framework: &mut Framework, completion: CompletionStatus) {
    if let Some(status) = framework.status.as_mut() {
        status
            .attempt_status
            .completion_status
            .get_or_insert(completion);
    }
}

fn decided(framework: &Framework) -> bool {
    framework
        .status
        .as_ref()
        .is_some_and(|s| s.attempt_status.completion_status.is_some())
}

/// A new attempt `id`: every task waiting to be placed.
fn new_attempt(framework: &Framework, id: i32, cx: &mut Context<'_>) -> FrameworkAttemptStatus {
    let name = framework.metadata.name.clone().unwrap_or_default();
    let roles = framework
        .spec
        .task_roles
        .iter()
        .map(|role| TaskRoleStatus {
            name: role.name.clone(),
            instance_uid: Some((cx.uid)()),
            task_statuses: (0..role.task_number.max(0))
                .map(|index| TaskStatus {
                    index,
                    state: FrameworkState::AttemptCreationPending,
                    transition_time: Some(cx.now.clone()),
                    attempt_status: TaskAttemptStatus {
                        pod_name: Some(pai_contract::framework::pod_name(
                            &name,
                            &role.name,
                            index as u32,
                        )),
                        ..TaskAttemptStatus::default()
                    },
                    ..TaskStatus::default()
                })
                .collect(),
        })
        .collect();
    FrameworkAttemptStatus {
        id,
        start_time: Some(cx.now.clone()),
        instance_uid: Some(instance_uid(id, &(cx.uid)())),
        config_map_name: Some(attempt_config_map(&name)),
        task_role_statuses: Some(roles),
        ..FrameworkAttemptStatus::default()
    }
}

/// The start of the job loop: a first attempt, or what a restart leaves to do.
fn resume(framework: &mut Framework, cx: &mut Context<'_>, effects: &mut Vec<Effect>) {
    if deleting(framework) {
        // Deleted before the restart: the previous server's tasks were ended; what is
        // left is to remove it.
        effects.push(Effect::Remove);
        return;
    }
    match state(framework) {
        None => {
            let attempt = new_attempt(framework, 0, cx);
            framework.status = Some(FrameworkStatus {
                start_time: Some(cx.now.clone()),
                state: FrameworkState::AttemptCreationPending,
                transition_time: Some(cx.now.clone()),
                retry_policy_status: RetryPolicyStatus::default(),
                attempt_status: attempt,
                ..FrameworkStatus::default()
            });
            begin_attempt(framework, cx, effects);
        }
        Some(FrameworkState::Completed) => {}
        Some(FrameworkState::AttemptCompleted) => after_attempt(framework, cx, effects),
        Some(FrameworkState::AttemptCreationPending) if !decided(framework) => {
            // Saved before its tasks were placed: nothing of it ran.
            begin_attempt(framework, cx, effects);
        }
        Some(_) => {
            // The previous server's tasks were ended: the attempt failed (transient).
            let reason = "the server restarted while the task ran; its processes were ended";
            for task in tasks_mut(framework).filter(|t| t.state != FrameworkState::Completed) {
                complete_task(
                    task,
                    CompletionStatus::of(codes::POD_EXTERNAL_DELETED, reason),
                    &cx.now,
                );
            }
            let completion = if framework.spec.execution_type == ExecutionType::Stop {
                CompletionStatus::of(codes::STOP_FRAMEWORK_REQUESTED, "stop requested")
            } else {
                CompletionStatus::of(
                    codes::POD_EXTERNAL_DELETED,
                    "server restarted while this attempt ran",
                )
            };
            decide_completion(framework, completion);
            attempt_completed(framework, cx, effects);
        }
    }
}

/// The current attempt (AttemptCreationPending) begins: placed, or, stopped already,
/// completed at once.
fn begin_attempt(framework: &mut Framework, cx: &mut Context<'_>, effects: &mut Vec<Effect>) {
    if framework.spec.execution_type == ExecutionType::Stop {
        let message = "stop requested before the attempt started";
        for task in tasks_mut(framework) {
            complete_task(
                task,
                CompletionStatus::of(codes::STOP_FRAMEWORK_REQUESTED, message),
                &cx.now,
            );
        }
        decide_completion(
            framework,
            CompletionStatus::of(codes::STOP_FRAMEWORK_REQUESTED, message),
        );
        attempt_completed(framework, cx, effects);
        return;
    }
    effects.extend([Effect::Persist { durable: true }, Effect::Place]);
}

fn place(framework: &mut Framework, placements: &[Placement], now: &str) {
    for p in placements {
        if let Some(task) = task_mut(framework, &p.role, p.index) {
            task.attempt_status.instance_uid = Some(instance_uid(0, &p.pod_uid));
            task.attempt_status.pod_uid = Some(p.pod_uid.clone());
            task.attempt_status.pod_ip = Some(p.address.clone());
            task.attempt_status.pod_host_ip = Some(p.address.clone());
            task.attempt_status.pod_node_name = Some(p.node.clone());
            transition_task(task, FrameworkState::AttemptPreparing, now);
        }
    }
    if let Some(status) = framework.status.as_mut() {
        transition_framework(status, FrameworkState::AttemptPreparing, now);
    }
}

/// Ends every task still running and not yet being ended with `code`; they become
/// AttemptDeletionPending, and so does the attempt.
fn end_tasks(
    framework: &mut Framework,
    code: i32,
    reason: &str,
    cx: &Context<'_>,
    effects: &mut Vec<Effect>,
) {
    let mut ending = Vec::new();
    // A task already being ended keeps its first request (its code is its completion).
    let names: Vec<(String, u32)> = tasks(framework)
        .filter(|(_, t)| {
            !matches!(
                t.state,
                FrameworkState::Completed | FrameworkState::AttemptDeletionPending
            )
        })
        .map(|(role, t)| (role.to_string(), t.index as u32))
        .collect();
    for (role, index) in names {
        if let Some(task) = task_mut(framework, &role, index) {
            transition_task(task, FrameworkState::AttemptDeletionPending, &cx.now);
            ending.push((role, index));
        }
    }
    if let Some(status) = framework.status.as_mut() {
        transition_framework(status, FrameworkState::AttemptDeletionPending, &cx.now);
    }
    if !ending.is_empty() {
        effects.push(Effect::Signal {
            tasks: ending,
            code,
            reason: reason.to_string(),
        });
    }
}

fn task_completed(
    framework: &mut Framework,
    role: &str,
    index: u32,
    completion: CompletionStatus,
    cx: &mut Context<'_>,
    effects: &mut Vec<Effect>,
) {
    let code = completion.code;
    let now = cx.now.clone();
    let Some(task) = task_mut(framework, role, index) else {
        return;
    };
    if task.state == FrameworkState::Completed {
        return;
    }
    complete_task(task, completion, &now);
    tracing::info!(role, index, code, "task completed");
    if !decided(framework) && !deleting(framework) {
        let roles = framework
            .status
            .as_ref()
            .and_then(|s| s.attempt_status.task_role_statuses.as_deref())
            .unwrap_or_default();
        if let Some(completion) =
            policy::attempt_completion(&framework.spec, roles, role, index as i32)
        {
            let reason = format!(
                "the attempt completed: {}",
                completion
                    .trigger
                    .as_ref()
                    .map_or("", |t| t.message.as_str())
            );
            decide_completion(framework, completion);
            end_tasks(
                framework,
                codes::FRAMEWORK_ATTEMPT_COMPLETION,
                &reason,
                cx,
                effects,
            );
        }
    }
    if tasks(framework).all(|(_, t)| t.state == FrameworkState::Completed) {
        decide_completion(
            framework,
            CompletionStatus::of(
                codes::FRAMEWORK_ATTEMPT_COMPLETION,
                "the attempt ended without a completion",
            ),
        );
        attempt_completed(framework, cx, effects);
    } else {
        effects.push(Effect::Persist { durable: false });
    }
}

fn stop(framework: &mut Framework, cx: &mut Context<'_>, effects: &mut Vec<Effect>) {
    match state(framework) {
        None | Some(FrameworkState::Completed) => {}
        Some(FrameworkState::AttemptCompleted) => {
            // Waiting to retry: the retry does not happen. The job ends as a stop, as a
            // running job stopped does; the attempt's own end stays in its history.
            if deleting(framework) {
                return;
            }
            if let Some(status) = framework.status.as_mut() {
                let ended = status
                    .attempt_status
                    .completion_status
                    .as_ref()
                    .map(|c| {
                        format!(
                            " (attempt {} had ended with code {})",
                            status.attempt_status.id, c.code
                        )
                    })
                    .unwrap_or_default();
                status.attempt_status.completion_status = Some(CompletionStatus::of(
                    codes::STOP_FRAMEWORK_REQUESTED,
                    format!("stopped while it waited to restart{ended}"),
                ));
            }
            finish(framework, cx, effects);
        }
        Some(FrameworkState::AttemptCreationPending) => {
            if deleting(framework) {
                return;
            }
            begin_attempt(framework, cx, effects);
        }
        Some(_) => {
            if deleting(framework) {
                return;
            }
            decide_completion(
                framework,
                CompletionStatus::of(codes::STOP_FRAMEWORK_REQUESTED, "stop requested"),
            );
            end_tasks(
                framework,
                codes::STOP_FRAMEWORK_REQUESTED,
                "the job was stopped",
                cx,
                effects,
            );
            effects.push(Effect::Persist { durable: true });
        }
    }
}

/// The running attempt gives way to a job of a higher class: it completes with
/// `PodExternalDeleted`, every task ended (TERM, its grace, KILL), and is retried as the
/// policy retries a transient failure. An attempt that is ending already (stopped,
/// deleted, decided) or has not started is left as it is.
fn preempt(
    framework: &mut Framework,
    message: &str,
    cx: &mut Context<'_>,
    effects: &mut Vec<Effect>,
) {
    let running = matches!(
        state(framework),
        Some(FrameworkState::AttemptPreparing | FrameworkState::AttemptRunning)
    );
    if !running
        || deleting(framework)
        || decided(framework)
        || framework.spec.execution_type == ExecutionType::Stop
    {
        return;
    }
    decide_completion(
        framework,
        CompletionStatus::of(codes::POD_EXTERNAL_DELETED, message),
    );
    end_tasks(framework, codes::POD_EXTERNAL_DELETED, message, cx, effects);
    effects.push(Effect::Persist { durable: true });
}

fn delete(framework: &mut Framework, cx: &mut Context<'_>, effects: &mut Vec<Effect>) {
    if deleting(framework) {
        return;
    }
    framework.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            cx.now.parse().unwrap_or(jiff::Timestamp::UNIX_EPOCH),
        ));
    // Saved before anything is done about it: a server killed from here on finishes the
    // deletion when it starts again, and never shows the job again.
    effects.push(Effect::Persist { durable: true });
    let running = tasks_started(framework)
        && tasks(framework).any(|(_, t)| t.state != FrameworkState::Completed);
    if running {
        end_tasks(
            framework,
            codes::DELETE_TASK_REQUESTED,
            "the job was deleted",
            cx,
            effects,
        );
    } else {
        effects.push(Effect::Remove);
    }
}

/// Every task of the attempt completed: the attempt completes, then the retry policy
/// decides (or the deletion goes on).
fn attempt_completed(framework: &mut Framework, cx: &mut Context<'_>, effects: &mut Vec<Effect>) {
    if let Some(status) = framework.status.as_mut() {
        transition_framework(status, FrameworkState::AttemptCompleted, &cx.now);
    }
    // Kept on the Framework: the next attempt replaces this one's status.
    pai_job::attempts::record(framework);
    // Where it ran, said once: on the attempt's status now (the job's, if it is the
    // last), not on each attempt the history keeps.
    if let Some(completion) = framework
        .status
        .as_mut()
        .and_then(|s| s.attempt_status.completion_status.as_mut())
        && !cx.note.is_empty()
    {
        completion.diagnostics = Some(match completion.diagnostics.take() {
            Some(d) if !d.is_empty() => format!("{d} {}", cx.note),
            _ => cx.note.to_string(),
        });
    }
    if deleting(framework) {
        effects.push(Effect::Remove);
        return;
    }
    after_attempt(framework, cx, effects);
}

/// The retry decision on a completed attempt.
fn after_attempt(framework: &mut Framework, cx: &mut Context<'_>, effects: &mut Vec<Effect>) {
    let Some(status) = framework.status.as_ref() else {
        return;
    };
    if framework.spec.execution_type == ExecutionType::Stop {
        finish(framework, cx, effects);
        return;
    }
    let completion = status
        .attempt_status
        .completion_status
        .clone()
        .unwrap_or_default();
    let decision = policy::retry_decision(
        &framework.spec.retry_policy,
        &status.retry_policy_status,
        platform_retries(framework),
        &completion,
        cx.conflict_delay,
    );
    if !decision.retry {
        tracing::info!(reason = %decision.reason, "job completed");
        finish(framework, cx, effects);
        return;
    }
    // An attempt the user's command ended quickly: the next one waits, as a kubelet
    // backs off a container that keeps exiting.
    let backoff = pai_job::restarts::wait(&pai_job::attempts::recorded(framework), &cx.restart)
        .map_or(Duration::ZERO, |w| w.delay);
    let delay = decision.delay.max(backoff);
    tracing::info!(reason = %decision.reason, delay_s = delay.as_secs(), "retrying the attempt");
    if delay.is_zero() {
        retry_now(framework, cx, effects);
    } else {
        if let Some(status) = framework.status.as_mut() {
            status.retry_policy_status.retry_delay_sec = Some(delay.as_secs() as i64);
        }
        effects.extend([Effect::Persist { durable: true }, Effect::Schedule(delay)]);
    }
}

/// The retries so far of attempts the platform ended (−101: preempted, or ended by the
/// server's restart), as the attempt history holds them (its last
/// [`pai_job::attempts::KEPT`]), the current attempt's end not included.
fn platform_retries(framework: &Framework) -> i32 {
    let current = framework.attempt_id();
    pai_job::attempts::recorded(framework)
        .iter()
        .filter(|end| end.attempt < current && end.code == codes::POD_EXTERNAL_DELETED)
        .count() as i32
}

/// The next attempt, now.
fn retry_now(framework: &mut Framework, cx: &mut Context<'_>, effects: &mut Vec<Effect>) {
    let Some(status) = framework.status.as_ref() else {
        return;
    };
    let completion = status
        .attempt_status
        .completion_status
        .clone()
        .unwrap_or_default();
    let accountable = policy::retry_decision(
        &framework.spec.retry_policy,
        &status.retry_policy_status,
        platform_retries(framework),
        &completion,
        cx.conflict_delay,
    )
    .accountable;
    let next = new_attempt(framework, status.attempt_status.id + 1, cx);
    if let Some(status) = framework.status.as_mut() {
        status.retry_policy_status.total_retried_count += 1;
        if accountable {
            status.retry_policy_status.accountable_retried_count += 1;
        }
        status.retry_policy_status.retry_delay_sec = None;
        status.attempt_status = next;
        transition_framework(status, FrameworkState::AttemptCreationPending, &cx.now);
    }
    begin_attempt(framework, cx, effects);
}

fn finish(framework: &mut Framework, cx: &mut Context<'_>, effects: &mut Vec<Effect>) {
    if let Some(status) = framework.status.as_mut() {
        transition_framework(status, FrameworkState::Completed, &cx.now);
    }
    effects.push(Effect::Persist { durable: true });
}

/// The code of an attempt that could not start here (retried after the conflict delay
/// by the fancy retry policy).
pub fn not_started_code() -> i32 {
    ExitCode::TransientConflict.code()
}

#[cfg(test)]
mod tests {
    //! The rules as tables: no process, no clock, no file.

    use super::*;
    use pai_contract::framework::CompletionPolicySpec;

    const DELAY: Duration = Duration::from_secs(60);

    /// A Framework and the machine's context: the time and UIDs count up.
    struct Sim {
        framework: Framework,
        tick: u64,
        uids: u64,
        /// Off unless a test turns it on.
        restart: pai_job::restarts::RestartBackoff,
    }

    impl Sim {
        /// Roles `(name, tasks, minFailed, minSucceeded)`; rest-lite's retry policy
        /// (fancy) with `max_retry_count`.
        fn new(roles: &[(&str, u32, i32, i32)], fancy: bool, max_retry_count: i32) -> Self {
            let names: Vec<(&str, u32)> = roles.iter().map(|r| (r.0, r.1)).collect();
            let mut framework = pai_test_support::frameworks::framework("fw", &names);
            for (spec, role) in framework.spec.task_roles.iter_mut().zip(roles) {
                spec.framework_attempt_completion_policy = CompletionPolicySpec {
                    min_failed_task_count: role.2,
                    min_succeeded_task_count: role.3,
                };
            }
            framework.spec.retry_policy.fancy_retry_policy = fancy;
            framework.spec.retry_policy.max_retry_count = max_retry_count;
            Self {
                framework,
                tick: 0,
                uids: 0,
                restart: pai_job::restarts::RestartBackoff {
                    first: Duration::ZERO,
                    ..Default::default()
                },
            }
        }

        fn step(&mut self, event: Event) -> Vec<Effect> {
            self.tick += 1;
            let uids = &mut self.uids;
            let mut uid = || {
                *uids += 1;
                format!("uid-{uids}")
            };
            let mut cx = Context {
                now: format!("2026-11-22T10:00:{:02}Z", self.tick % 60),
                conflict_delay: DELAY,
                restart: self.restart,
                uid: &mut uid,
                note: "",
            };
            step(&mut self.framework, event, &mut cx)
        }

        fn status(&self) -> &FrameworkStatus {
            self.framework.status.as_ref().expect("a status")
        }

        fn state(&self) -> FrameworkState {
            self.status().state
        }

        fn attempt(&self) -> i32 {
            self.status().attempt_status.id
        }

        fn all_tasks(&self) -> Vec<(String, u32)> {
            tasks(&self.framework)
                .map(|(r, t)| (r.to_string(), t.index as u32))
                .collect()
        }

        /// Resumed and placed: the attempt's tasks may start.
        fn started(&mut self) {
            let first = self.step(Event::Resumed);
            assert_eq!(first, [Effect::Persist { durable: true }, Effect::Place]);
            self.placed();
        }

        fn placed(&mut self) {
            let placements = self
                .all_tasks()
                .into_iter()
                .map(|(role, index)| Placement {
                    pod_uid: format!("pod-{role}-{index}-{}", self.attempt()),
                    role,
                    index,
                    address: "127.0.0.1".into(),
                    node: "localhost".into(),
                })
                .collect();
            let effects = self.step(Event::Placed(placements));
            assert_eq!(effects, [Effect::Persist { durable: true }, Effect::Launch]);
            assert_eq!(self.state(), FrameworkState::AttemptPreparing);
        }

        fn running(&mut self) {
            for (role, index) in self.all_tasks() {
                let attempt = self.attempt();
                self.step(Event::TaskRunning {
                    attempt,
                    role,
                    index,
                });
            }
            assert_eq!(self.state(), FrameworkState::AttemptRunning);
        }

        fn exit(&mut self, role: &str, index: u32, code: i32) -> Vec<Effect> {
            let attempt = self.attempt();
            self.step(Event::TaskCompleted {
                attempt,
                role: role.into(),
                index,
                code,
                diagnostics: format!("exit {code}"),
                message: None,
                reason: None,
            })
        }

        /// Every task not completed yet ends with `code` (as a signalled task reports).
        fn rest_exit(&mut self, code: i32) -> Vec<Effect> {
            let left: Vec<(String, u32)> = tasks(&self.framework)
                .filter(|(_, t)| t.state != FrameworkState::Completed)
                .map(|(r, t)| (r.to_string(), t.index as u32))
                .collect();
            let mut last = Vec::new();
            for (role, index) in left {
                last = self.exit(&role, index, code);
            }
            last
        }

        fn completion(&self) -> &CompletionStatus {
            self.status()
                .attempt_status
                .completion_status
                .as_ref()
                .expect("the attempt's completion")
        }

        fn task(&self, role: &str, index: u32) -> &TaskStatus {
            tasks(&self.framework)
                .find(|(r, t)| *r == role && t.index == index as i32)
                .map(|(_, t)| t)
                .expect("task")
        }
    }

    fn signal(tasks: &[(&str, u32)], code: i32) -> impl Fn(&Effect) -> bool {
        let tasks: Vec<(String, u32)> = tasks.iter().map(|(r, i)| (r.to_string(), *i)).collect();
        move |effect| matches!(effect, Effect::Signal { tasks: t, code: c, .. } if *t == tasks && *c == code)
    }

    #[test]
    fn completion_policies_name_the_trigger_task_and_end_the_rest_with_220() {
        // (roles (name, tasks, minFailed, minSucceeded), the exits before the decision,
        // the deciding exit, the attempt's code, the tasks then ended with −220)
        type Row = (
            &'static [(&'static str, u32, i32, i32)],
            &'static [(&'static str, u32, i32)],
            (&'static str, u32, i32),
            i32,
            &'static [(&'static str, u32)],
        );
        let rows: &[Row] = &[
            // One failure fails the attempt (FrameworkController's default).
            (
                &[("ps", 1, 1, -1), ("worker", 2, 1, -1)],
                &[],
                ("worker", 1, 3),
                3,
                &[("ps", 0), ("worker", 0)],
            ),
            // The chief's success succeeds it.
            (
                &[("chief", 1, 1, 1), ("worker", 2, 1, -1)],
                &[],
                ("chief", 0, 0),
                0,
                &[("worker", 0), ("worker", 1)],
            ),
            // Below minFailedTaskCount nothing ends; the second failure does.
            (
                &[("worker", 3, 2, -1)],
                &[("worker", 0, 1)],
                ("worker", 2, 7),
                7,
                &[("worker", 1)],
            ),
        ];
        for (roles, before, (role, index, code), attempt_code, ended) in rows {
            let mut sim = Sim::new(roles, true, 0);
            sim.started();
            sim.running();
            for (r, i, c) in *before {
                let effects = sim.exit(r, *i, *c);
                assert_eq!(effects, [Effect::Persist { durable: false }], "{roles:?}");
            }
            let effects = sim.exit(role, *index, *code);
            assert!(
                effects
                    .iter()
                    .any(signal(ended, codes::FRAMEWORK_ATTEMPT_COMPLETION)),
                "{roles:?}: {effects:?}"
            );
            assert_eq!(sim.state(), FrameworkState::AttemptDeletionPending);
            let completion = sim.completion().clone();
            assert_eq!(completion.code, *attempt_code, "{roles:?}");
            let trigger = completion.trigger.expect("a trigger");
            assert_eq!(trigger.task_role_name.as_deref(), Some(*role));
            assert_eq!(trigger.task_index, Some(*index as i32));
            for (r, i) in *ended {
                assert_eq!(
                    sim.task(r, *i).state,
                    FrameworkState::AttemptDeletionPending
                );
            }
            // The ended tasks report −220; the attempt then completes with its decision.
            let last = sim.rest_exit(codes::FRAMEWORK_ATTEMPT_COMPLETION);
            assert_eq!(last, [Effect::Persist { durable: true }], "{roles:?}");
            assert_eq!(sim.state(), FrameworkState::Completed);
            assert_eq!(sim.completion().code, *attempt_code);
        }
    }

    #[test]
    fn every_task_succeeding_without_a_policy_reached_succeeds() {
        let mut sim = Sim::new(&[("worker", 2, 1, -1)], true, 0);
        sim.started();
        sim.running();
        assert_eq!(
            sim.exit("worker", 0, 0),
            [Effect::Persist { durable: false }]
        );
        assert_eq!(
            sim.exit("worker", 1, 0),
            [Effect::Persist { durable: true }]
        );
        assert_eq!(sim.state(), FrameworkState::Completed);
        assert_eq!(sim.completion().code, 0);
    }

    #[test]
    fn fancy_retry_by_completion_type() {
        // (task's exit code, maxRetryCount, retried now, retried after the conflict
        // delay, counted against maxRetryCount)
        let rows = [
            (codes::CONTAINER_TRANSIENT_FAILED, 0, true, false, false),
            (
                codes::CONTAINER_TRANSIENT_CONFLICT_FAILED,
                0,
                false,
                true,
                false,
            ),
            (codes::CONTAINER_PERMANENT_FAILED, 5, false, false, false),
            (1, 1, true, false, true),
            (1, 0, false, false, false),
            (0, 3, false, false, false),
        ];
        for (code, max, now, delayed, counted) in rows {
            let mut sim = Sim::new(&[("worker", 1, 1, -1)], true, max);
            sim.started();
            sim.running();
            let effects = sim.exit("worker", 0, code);
            if now {
                assert_eq!(
                    effects,
                    [Effect::Persist { durable: true }, Effect::Place],
                    "code {code}"
                );
                assert_eq!(sim.attempt(), 1);
                assert_eq!(sim.state(), FrameworkState::AttemptCreationPending);
            } else if delayed {
                assert_eq!(
                    effects,
                    [Effect::Persist { durable: true }, Effect::Schedule(DELAY)],
                    "code {code}"
                );
                assert_eq!(sim.status().retry_policy_status.retry_delay_sec, Some(60));
                assert_eq!(
                    sim.step(Event::RetryDelayElapsed),
                    [Effect::Persist { durable: true }, Effect::Place]
                );
                assert_eq!(sim.attempt(), 1);
                assert_eq!(sim.status().retry_policy_status.retry_delay_sec, None);
            } else {
                assert_eq!(effects, [Effect::Persist { durable: true }], "code {code}");
                assert_eq!(sim.state(), FrameworkState::Completed, "code {code}");
                assert_eq!(sim.attempt(), 0);
                continue;
            }
            // The ended attempt is kept on the Framework, with its code and task.
            let history = pai_job::attempts::recorded(&sim.framework);
            assert_eq!(history.len(), 1, "code {code}");
            assert_eq!(
                (
                    history[0].attempt,
                    history[0].code,
                    history[0].trigger_index
                ),
                (0, code, Some(0)),
                "code {code}"
            );
            let retries = &sim.status().retry_policy_status;
            assert_eq!(retries.total_retried_count, 1, "code {code}");
            assert_eq!(
                retries.accountable_retried_count,
                i32::from(counted),
                "code {code}"
            );
            // The new attempt's tasks are new: placed and run again.
            assert_eq!(
                sim.task("worker", 0).state,
                FrameworkState::AttemptCreationPending
            );
            sim.placed();
        }
    }

    #[test]
    fn a_service_that_exits_at_once_backs_off_doubling_to_the_cap() {
        // retryCount −2: restarted after a success too, as OpenPAI's services.
        let mut sim = Sim::new(&[("server", 1, 1, -1)], false, -2);
        sim.restart = pai_job::restarts::RestartBackoff {
            first: Duration::from_secs(10),
            cap: Duration::from_secs(40),
            reset_after: Duration::from_secs(600),
        };
        let mut delays = Vec::new();
        sim.started();
        for attempt in 0..5 {
            assert_eq!(sim.attempt(), attempt);
            sim.running();
            let effects = sim.exit("server", 0, 0);
            assert_eq!(sim.state(), FrameworkState::AttemptCompleted);
            let delay = sim.status().retry_policy_status.retry_delay_sec;
            let seconds = u64::try_from(delay.expect("a delay")).expect("positive");
            assert!(
                effects.contains(&Effect::Schedule(Duration::from_secs(seconds))),
                "{effects:?}"
            );
            delays.push(delay);
            let effects = sim.step(Event::RetryDelayElapsed);
            assert!(effects.contains(&Effect::Place), "{effects:?}");
            sim.placed();
        }
        assert_eq!(delays, [Some(10), Some(20), Some(40), Some(40), Some(40)]);
    }

    #[test]
    fn a_stop_during_the_retry_delay_completes_and_the_timer_does_nothing() {
        let mut sim = Sim::new(&[("worker", 1, 1, -1)], true, 0);
        sim.started();
        sim.running();
        sim.exit("worker", 0, codes::CONTAINER_TRANSIENT_CONFLICT_FAILED);
        assert_eq!(sim.state(), FrameworkState::AttemptCompleted);
        sim.framework.spec.execution_type = ExecutionType::Stop;
        assert_eq!(sim.step(Event::Stop), [Effect::Persist { durable: true }]);
        assert_eq!(sim.state(), FrameworkState::Completed);
        // Stopped as a running job is, whatever the last attempt's code.
        assert_eq!(sim.completion().code, codes::STOP_FRAMEWORK_REQUESTED);
        assert!(
            sim.completion()
                .diagnostics
                .as_deref()
                .is_some_and(|d| d.contains("attempt 0 had ended with code")),
            "{:?}",
            sim.completion()
        );
        assert_eq!(sim.status().retry_policy_status.retry_delay_sec, None);
        assert_eq!(sim.step(Event::RetryDelayElapsed), []);
        assert_eq!(sim.attempt(), 0);
    }

    #[test]
    fn a_stop_while_running_ends_every_task_with_210() {
        let mut sim = Sim::new(&[("ps", 1, 1, -1), ("worker", 2, 1, -1)], true, -1);
        sim.started();
        sim.running();
        sim.framework.spec.execution_type = ExecutionType::Stop;
        let effects = sim.step(Event::Stop);
        assert!(effects.iter().any(signal(
            &[("ps", 0), ("worker", 0), ("worker", 1)],
            codes::STOP_FRAMEWORK_REQUESTED
        )));
        assert!(effects.contains(&Effect::Persist { durable: true }));
        assert_eq!(sim.step(Event::Stop), [Effect::Persist { durable: true }]);
        // A task failing while it is being stopped does not change the decision.
        sim.exit("worker", 0, 9);
        let last = sim.rest_exit(codes::STOP_FRAMEWORK_REQUESTED);
        assert_eq!(last, [Effect::Persist { durable: true }]);
        assert_eq!(sim.state(), FrameworkState::Completed, "never retried");
        assert_eq!(sim.completion().code, codes::STOP_FRAMEWORK_REQUESTED);
    }

    #[test]
    fn a_preempted_attempt_ends_every_task_and_is_retried_without_counting() {
        // No retry left: a preemption is the platform's doing, not the job's.
        let mut sim = Sim::new(&[("worker", 2, 1, -1)], true, 0);
        let before = sim.step(Event::Preempted {
            message: "for prod".into(),
        });
        assert_eq!(before, [], "nothing started yet: nothing to give back");
        sim.started();
        sim.running();
        let effects = sim.step(Event::Preempted {
            message: "preempted by job alice~big".into(),
        });
        assert!(effects.iter().any(signal(
            &[("worker", 0), ("worker", 1)],
            codes::POD_EXTERNAL_DELETED
        )));
        let last = sim.rest_exit(codes::POD_EXTERNAL_DELETED);
        assert!(last.contains(&Effect::Place), "retried at once: {last:?}");
        assert_eq!(sim.attempt(), 1);
        let retries = &sim.status().retry_policy_status;
        assert_eq!(
            (
                retries.total_retried_count,
                retries.accountable_retried_count
            ),
            (1, 0)
        );
        let history = pai_job::attempts::recorded(&sim.framework);
        assert_eq!(history[0].code, codes::POD_EXTERNAL_DELETED);
        assert_eq!(
            history[0].diagnostics.as_deref(),
            Some("preempted by job alice~big")
        );
        // Preempted again and again: never the cap of transient retries.
        for attempt in 2..=policy::MAX_TRANSIENT_RETRIES + 2 {
            sim.started();
            sim.running();
            sim.step(Event::Preempted {
                message: "preempted again".into(),
            });
            let last = sim.rest_exit(codes::POD_EXTERNAL_DELETED);
            assert!(last.contains(&Effect::Place), "attempt {attempt}: {last:?}");
            assert_eq!(sim.attempt(), attempt);
        }
    }

    #[test]
    fn a_stop_before_placement_completes_with_nothing_started() {
        let mut sim = Sim::new(&[("worker", 2, 1, -1)], true, -1);
        sim.step(Event::Resumed);
        sim.framework.spec.execution_type = ExecutionType::Stop;
        assert_eq!(sim.step(Event::Stop), [Effect::Persist { durable: true }]);
        assert_eq!(sim.state(), FrameworkState::Completed);
        assert_eq!(sim.completion().code, codes::STOP_FRAMEWORK_REQUESTED);
        assert!(
            sim.all_tasks()
                .iter()
                .all(|(r, i)| sim.task(r, *i).state == FrameworkState::Completed)
        );
    }

    #[test]
    fn delete_during_start_removes_at_once_and_while_running_after_every_task() {
        let mut sim = Sim::new(&[("worker", 2, 1, -1)], true, -1);
        sim.step(Event::Resumed);
        assert_eq!(sim.step(Event::Delete), [SAVED, Effect::Remove]);

        let mut sim = Sim::new(&[("worker", 2, 1, -1)], true, -1);
        sim.started();
        sim.running();
        let effects = sim.step(Event::Delete);
        assert_eq!(
            effects.first(),
            Some(&SAVED),
            "saved before the tasks are told"
        );
        assert!(effects.iter().any(signal(
            &[("worker", 0), ("worker", 1)],
            codes::DELETE_TASK_REQUESTED
        )));
        assert!(sim.framework.metadata.deletion_timestamp.is_some());
        assert_eq!(sim.step(Event::Delete), [], "once");
        // A failure while deleting decides nothing and retries nothing.
        assert_eq!(
            sim.exit("worker", 0, 1),
            [Effect::Persist { durable: false }]
        );
        assert_eq!(
            sim.exit("worker", 1, codes::DELETE_TASK_REQUESTED),
            [Effect::Remove]
        );

        // Deleted while waiting to retry: removed, no retry.
        let mut sim = Sim::new(&[("worker", 1, 1, -1)], true, -1);
        sim.started();
        sim.exit("worker", 0, codes::CONTAINER_TRANSIENT_CONFLICT_FAILED);
        assert_eq!(sim.step(Event::Delete), [SAVED, Effect::Remove]);
    }

    /// The deletion's record, saved and synced.
    const SAVED: Effect = Effect::Persist { durable: true };

    #[test]
    fn a_restart_in_every_state_resumes_as_the_controller_would() {
        // Each state the Framework can be saved in, how to reach it, and what a
        // restarted server does.
        type Reach = fn(&mut Sim);
        let rows: &[(&str, Reach, &[Effect], i32, FrameworkState)] = &[
            (
                "new",
                |_| {},
                &[Effect::Persist { durable: true }, Effect::Place],
                0,
                FrameworkState::AttemptCreationPending,
            ),
            (
                "attempt created, not placed",
                |s| {
                    s.step(Event::Resumed);
                },
                &[Effect::Persist { durable: true }, Effect::Place],
                0,
                FrameworkState::AttemptCreationPending,
            ),
            (
                "placed",
                |s| s.started(),
                // Its tasks were ended: −101 (transient), retried at once.
                &[Effect::Persist { durable: true }, Effect::Place],
                1,
                FrameworkState::AttemptCreationPending,
            ),
            (
                "running",
                |s| {
                    s.started();
                    s.running();
                },
                &[Effect::Persist { durable: true }, Effect::Place],
                1,
                FrameworkState::AttemptCreationPending,
            ),
            (
                "being stopped",
                |s| {
                    s.started();
                    s.running();
                    s.framework.spec.execution_type = ExecutionType::Stop;
                    s.step(Event::Stop);
                },
                &[Effect::Persist { durable: true }],
                0,
                FrameworkState::Completed,
            ),
            (
                "waiting to retry",
                |s| {
                    s.started();
                    s.exit("worker", 0, codes::CONTAINER_TRANSIENT_CONFLICT_FAILED);
                    s.exit("worker", 1, codes::FRAMEWORK_ATTEMPT_COMPLETION);
                },
                &[Effect::Persist { durable: true }, Effect::Schedule(DELAY)],
                0,
                FrameworkState::AttemptCompleted,
            ),
            (
                "completed",
                |s| {
                    s.started();
                    s.exit("worker", 0, 0);
                    s.exit("worker", 1, 0);
                },
                &[],
                0,
                FrameworkState::Completed,
            ),
            (
                "deleted while its tasks ran",
                |s| {
                    s.started();
                    s.running();
                    s.step(Event::Delete);
                },
                &[Effect::Remove],
                0,
                FrameworkState::AttemptDeletionPending,
            ),
            (
                "deleted after it completed",
                |s| {
                    s.started();
                    s.exit("worker", 0, 0);
                    s.exit("worker", 1, 0);
                    s.step(Event::Delete);
                },
                &[Effect::Remove],
                0,
                FrameworkState::Completed,
            ),
        ];
        for (name, reach, effects, attempt, state) in rows {
            let mut sim = Sim::new(&[("worker", 2, 1, -1)], true, 0);
            reach(&mut sim);
            // What was saved, read back by a new server.
            let saved = serde_json::to_string(&sim.framework).expect("json");
            let mut restarted = Sim {
                framework: serde_json::from_str(&saved).expect("json"),
                tick: 100,
                uids: 100,
                restart: sim.restart,
            };
            assert_eq!(restarted.step(Event::Resumed), *effects, "{name}");
            assert_eq!(restarted.attempt(), *attempt, "{name}");
            assert_eq!(restarted.state(), *state, "{name}");
            if *attempt == 1 {
                let retries = &restarted.status().retry_policy_status;
                assert_eq!(
                    (
                        retries.total_retried_count,
                        retries.accountable_retried_count
                    ),
                    (1, 0),
                    "{name}: a restart is not the job's failure"
                );
            }
        }
    }

    #[test]
    fn reports_of_another_attempt_and_repeated_ones_change_nothing() {
        let mut sim = Sim::new(&[("worker", 2, 1, -1)], true, 0);
        sim.started();
        sim.running();
        let before = sim.framework.clone();
        let stale = sim.step(Event::TaskCompleted {
            attempt: 7,
            role: "worker".into(),
            index: 0,
            code: 1,
            diagnostics: String::new(),
            message: None,
            reason: None,
        });
        assert_eq!(stale, []);
        assert_eq!(sim.framework, before);
        sim.exit("worker", 0, 0);
        let again = sim.exit("worker", 0, 1);
        assert_eq!(again, []);
        assert_eq!(
            sim.task("worker", 0)
                .attempt_status
                .completion_status
                .as_ref()
                .map(|c| c.code),
            Some(0)
        );
    }

    #[test]
    fn only_the_transition_functions_write_states_and_their_times() {
        let mut sim = Sim::new(&[("worker", 1, 1, -1)], true, 0);
        sim.started();
        let placed_at = sim.task("worker", 0).transition_time.clone();
        sim.running();
        let task = sim.task("worker", 0);
        assert_eq!(task.state, FrameworkState::AttemptRunning);
        assert_ne!(task.transition_time, placed_at);
        assert_eq!(task.attempt_status.run_time, task.transition_time);
        assert!(sim.status().run_time.is_some());
        sim.exit("worker", 0, 0);
        let status = sim.status();
        assert_eq!(status.completion_time, status.transition_time);
        assert!(status.attempt_status.completion_time.is_some());
    }
}
