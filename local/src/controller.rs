//! One job's controller: FrameworkController's life cycle on this machine. It starts an
//! attempt (ports, addresses, every task), applies task reports and stop/delete
//! requests, completes the attempt by the roles' completion policies, and retries it by
//! the retry policy. Every change is saved before the next step.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, watch};

use pai_contract::exit::codes;
use pai_contract::framework::{
    CompletionStatus, ExecutionType, Framework, FrameworkAttemptStatus, FrameworkState,
    FrameworkStatus, RetryPolicyStatus, TaskAttemptStatus, TaskRoleStatus, TaskStatus,
};
use pai_contract::meta;

use super::procs::{self, ProcessId};
use super::task::{self, Identity, Launch, Progress, StopRequest};
use super::{Command, Inner, Job, attempt_open, policy, ports, uid};
use pai_kube_runtime::layout::{Layout, Task as RuntimeTask};
use pai_kube_runtime::logs::USER_LOG;

use crate::{Error, LogStream};
use pai_contract::framework::INIT_CONTAINER;

/// Where tasks of this machine are.
const LOCAL_ADDRESS: &str = "127.0.0.1";

fn now() -> String {
    jiff::Timestamp::now().to_string()
}

fn statuses(framework: &mut Framework) -> &mut Vec<TaskRoleStatus> {
    let status = framework
        .status
        .get_or_insert_with(FrameworkStatus::default);
    status
        .attempt_status
        .task_role_statuses
        .get_or_insert_with(Vec::new)
}

fn task_mut<'a>(
    framework: &'a mut Framework,
    role: &str,
    index: u32,
) -> Option<&'a mut TaskStatus> {
    statuses(framework)
        .iter_mut()
        .find(|r| r.name == role)?
        .task_statuses
        .iter_mut()
        .find(|t| t.index == index as i32)
}

fn task_status<'a>(framework: &'a Framework, role: &str, index: u32) -> Option<&'a TaskStatus> {
    framework
        .status
        .as_ref()?
        .attempt_status
        .task_role_statuses
        .as_ref()?
        .iter()
        .find(|r| r.name == role)?
        .task_statuses
        .iter()
        .find(|t| t.index == index as i32)
}

fn set_state(status: &mut FrameworkStatus, state: FrameworkState) {
    if status.state != state {
        status.state = state;
        status.transition_time = Some(now());
    }
}

/// A new attempt `id`: every task pending.
fn new_attempt(framework: &Framework, id: i32) -> FrameworkAttemptStatus {
    let name = framework.metadata.name.clone().unwrap_or_default();
    FrameworkAttemptStatus {
        id,
        start_time: Some(now()),
        instance_uid: Some(format!("{id}_{}", uid())),
        config_map_name: Some(format!("{name}-attempt")),
        task_role_statuses: Some(
            framework
                .spec
                .task_roles
                .iter()
                .map(|role| TaskRoleStatus {
                    name: role.name.clone(),
                    instance_uid: Some(uid()),
                    task_statuses: (0..role.task_number.max(0))
                        .map(|index| TaskStatus {
                            index,
                            state: FrameworkState::AttemptCreationPending,
                            transition_time: Some(now()),
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
                .collect(),
        ),
        ..FrameworkAttemptStatus::default()
    }
}

/// What the embedded default adds to every attempt's diagnostics.
fn local_note(framework: &Framework) -> String {
    let images: Vec<String> = framework
        .spec
        .task_roles
        .iter()
        .filter_map(|r| r.task.pod.spec.as_ref())
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .filter_map(|c| c.image.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    format!(
        "[ran on this machine by rest-lite's embedded default: the images ({}) were not used]",
        images.join(", ")
    )
}

fn with_note(mut completion: CompletionStatus, framework: &Framework) -> CompletionStatus {
    let note = local_note(framework);
    completion.diagnostics = Some(match completion.diagnostics.take() {
        Some(d) if !d.is_empty() => format!("{d} {note}"),
        _ => note,
    });
    completion
}

/// Completes the current attempt with `completion`.
fn complete_attempt(framework: &mut Framework, completion: CompletionStatus) {
    let completion = with_note(completion, framework);
    let status = framework
        .status
        .get_or_insert_with(FrameworkStatus::default);
    status.attempt_status.completion_status = Some(completion);
    status.attempt_status.completion_time = Some(now());
    set_state(status, FrameworkState::AttemptCompleted);
}

/// After a restart: ends what the previous server left of the running attempt and
/// completes it as failed (transient: retried by the fancy retry policy).
pub(super) async fn recover(inner: &Arc<Inner>, job: &Arc<Job>) {
    let framework = job.framework().clone();
    if !attempt_open(&framework) {
        return;
    }
    let name = framework.metadata.name.clone().unwrap_or_default();
    let attempt = framework.status.as_ref().map_or(0, |s| s.attempt_status.id);
    let mut left = Vec::new();
    for role in &framework.spec.task_roles {
        for index in 0..role.task_number.max(0) as u32 {
            let pod_uid = task_status(&framework, &role.name, index)
                .and_then(|t| t.attempt_status.pod_uid.clone())
                .unwrap_or_default();
            let record = inner.store.pid_file(&name, attempt, &role.name, index);
            let Some(process) = std::fs::read_to_string(&record)
                .ok()
                .and_then(|text| text.parse::<ProcessId>().ok())
            else {
                continue;
            };
            match process.leftover_task(&pod_uid) {
                Ok(()) => left.push(process),
                Err(why) => {
                    tracing::warn!(record = %record.display(), %process, why, "process record not believed; nothing signalled");
                }
            }
        }
    }
    if !left.is_empty() {
        tracing::warn!(job = %name, processes = left.len(), "tasks of the previous server still run; ending them");
        let _ = tokio::task::spawn_blocking(move || {
            for process in &left {
                procs::kill_tree(*process);
            }
            for process in left {
                procs::wait_gone(process, Duration::from_secs(10));
            }
        })
        .await;
    }
    let reason = "the server restarted while the task ran; its processes were ended";
    {
        let mut framework = job.framework();
        for role in statuses(&mut framework) {
            for task in &mut role.task_statuses {
                if task.state != FrameworkState::Completed {
                    complete_task(
                        task,
                        CompletionStatus::of(codes::POD_EXTERNAL_DELETED, reason),
                    );
                }
            }
        }
        let completion = if framework.spec.execution_type == ExecutionType::Stop {
            CompletionStatus::of(codes::STOP_FRAMEWORK_REQUESTED, "stop requested")
        } else {
            CompletionStatus::of(
                codes::POD_EXTERNAL_DELETED,
                "server restarted while this attempt ran",
            )
        };
        complete_attempt(&mut framework, completion);
    }
    tracing::info!(job = %name, attempt, "attempt completed as failed: the server restarted");
    if let Err(e) = inner.persist(job).await {
        tracing::error!(job = %name, error = %e, "cannot save the recovered job");
    }
}

fn complete_task(task: &mut TaskStatus, completion: CompletionStatus) {
    task.state = FrameworkState::Completed;
    task.transition_time = Some(now());
    task.attempt_status.completion_time = Some(now());
    task.attempt_status.completion_status = Some(completion);
}

fn task_root(
    inner: &Inner,
    name: &str,
    attempt: i32,
    role: &str,
    index: u32,
) -> std::path::PathBuf {
    inner
        .store
        .job_dir(name)
        .join("attempts")
        .join(attempt.to_string())
        .join(format!("{role}-{index}"))
}

/// The init container's environment for this machine: the files holding the
/// environment are private to the server's user (a pod's template asks for 644, for a
/// main container that may run as another user).
fn private_files(mut env: Vec<(String, String)>) -> Vec<(String, String)> {
    env.retain(|(name, _)| name != pai_contract::env::ENV_FILE_MODE);
    env
}

/// A task of the running attempt and the way to stop it.
type TaskStop = ((String, u32), watch::Sender<Option<StopRequest>>);

enum AttemptEnd {
    Completed,
    Deleted,
}

/// Drives the job until it is deleted.
pub(super) async fn drive(
    inner: Arc<Inner>,
    job: Arc<Job>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let name = job.name();
    loop {
        let state = job.framework().status.as_ref().map(|s| s.state);
        let step = match state {
            None => {
                {
                    let mut framework = job.framework();
                    let attempt = new_attempt(&framework, 0);
                    framework.status = Some(FrameworkStatus {
                        start_time: Some(now()),
                        state: FrameworkState::AttemptCreationPending,
                        transition_time: Some(now()),
                        retry_policy_status: RetryPolicyStatus::default(),
                        attempt_status: attempt,
                        ..FrameworkStatus::default()
                    });
                }
                Some(AttemptEnd::Completed)
            }
            Some(FrameworkState::Completed) => match commands.recv().await {
                Some(Command::Stop) => continue,
                Some(Command::Delete) | None => None,
            },
            Some(FrameworkState::AttemptCompleted) => decide(&inner, &job, &mut commands)
                .await
                .map(|()| AttemptEnd::Completed),
            Some(_) => Some(run_attempt(&inner, &job, &mut commands).await),
        };
        match step {
            Some(AttemptEnd::Completed) => {
                if let Err(e) = inner.persist(&job).await {
                    tracing::error!(job = %name, error = %e, "cannot save the job; its controller stops");
                    return;
                }
            }
            Some(AttemptEnd::Deleted) | None => break,
        }
    }
    // Deleted: every task has ended; the files go, then the name.
    let store = inner.store.clone();
    let dir_name = name.clone();
    match tokio::task::spawn_blocking(move || store.remove(&dir_name)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::error!(job = %name, error = %e, "cannot remove the job's files"),
        Err(e) => tracing::error!(job = %name, error = %e, "cannot remove the job's files"),
    }
    inner.jobs().remove(&name);
    job.gone.store(true, std::sync::atomic::Ordering::SeqCst);
    job.changed.send_modify(|v| *v += 1);
    tracing::info!(job = %name, "job deleted");
}

/// The retry decision on a completed attempt: a new attempt (after its delay), or the
/// job completes. `None`: the job was deleted meanwhile.
async fn decide(
    inner: &Arc<Inner>,
    job: &Arc<Job>,
    commands: &mut mpsc::UnboundedReceiver<Command>,
) -> Option<()> {
    let decision = {
        let framework = job.framework();
        let status = framework.status.as_ref()?;
        let completion = status
            .attempt_status
            .completion_status
            .clone()
            .unwrap_or_default();
        if framework.spec.execution_type == ExecutionType::Stop {
            None
        } else {
            Some(policy::retry_decision(
                &framework.spec.retry_policy,
                &status.retry_policy_status,
                &completion,
                inner.settings.conflict_delay,
            ))
        }
    };
    let name = job.name();
    match decision {
        Some(decision) if decision.retry => {
            tracing::info!(job = %name, reason = %decision.reason, delay_s = decision.delay.as_secs(), "retrying the attempt");
            if !decision.delay.is_zero() {
                {
                    let mut framework = job.framework();
                    if let Some(status) = framework.status.as_mut() {
                        status.retry_policy_status.retry_delay_sec =
                            Some(decision.delay.as_secs() as i64);
                    }
                }
                let _ = inner.persist(job).await;
                tokio::select! {
                    _ = tokio::time::sleep(decision.delay) => {}
                    command = commands.recv() => match command {
                        Some(Command::Stop) => {
                            finish(job);
                            return Some(());
                        }
                        Some(Command::Delete) | None => return None,
                    }
                }
            }
            let mut framework = job.framework();
            let next = framework
                .status
                .as_ref()
                .map_or(0, |s| s.attempt_status.id + 1);
            let attempt = new_attempt(&framework, next);
            let status = framework
                .status
                .get_or_insert_with(FrameworkStatus::default);
            status.retry_policy_status.total_retried_count += 1;
            if decision.accountable {
                status.retry_policy_status.accountable_retried_count += 1;
            }
            status.retry_policy_status.retry_delay_sec = None;
            status.attempt_status = attempt;
            set_state(status, FrameworkState::AttemptCreationPending);
        }
        Some(decision) => {
            tracing::info!(job = %name, reason = %decision.reason, "job completed");
            finish(job);
        }
        None => finish(job),
    }
    Some(())
}

fn finish(job: &Job) {
    let mut framework = job.framework();
    if let Some(status) = framework.status.as_mut() {
        status.completion_time = Some(now());
        status.retry_policy_status.retry_delay_sec = None;
        set_state(status, FrameworkState::Completed);
    }
}

/// Runs the current attempt until every task completed (the attempt is then
/// AttemptCompleted) or the job was deleted.
async fn run_attempt(
    inner: &Arc<Inner>,
    job: &Arc<Job>,
    commands: &mut mpsc::UnboundedReceiver<Command>,
) -> AttemptEnd {
    let name = job.name();
    if job.framework().spec.execution_type == ExecutionType::Stop {
        complete_attempt(
            &mut job.framework(),
            CompletionStatus::of(
                codes::STOP_FRAMEWORK_REQUESTED,
                "stop requested before the attempt started",
            ),
        );
        return AttemptEnd::Completed;
    }
    let launches = match prepare(inner, job) {
        Ok(launches) => launches,
        Err(message) => {
            tracing::error!(job = %name, %message, "cannot start the attempt");
            complete_attempt(
                &mut job.framework(),
                CompletionStatus::of(
                    pai_contract::exit::ExitCode::TransientConflict.code(),
                    message,
                ),
            );
            return AttemptEnd::Completed;
        }
    };
    // The attempt (addresses, pods) is on disk before any task starts: a restarted
    // server must find every task it would have to end. Without that, nothing starts.
    if let Err(e) = inner.persist(job).await {
        tracing::error!(job = %name, error = %e, "cannot save the attempt; no task is started");
        let mut framework = job.framework();
        for role in statuses(&mut framework) {
            for task in &mut role.task_statuses {
                complete_task(
                    task,
                    CompletionStatus::of(
                        pai_contract::exit::ExitCode::TransientConflict.code(),
                        "not started: the attempt could not be saved",
                    ),
                );
            }
        }
        complete_attempt(
            &mut framework,
            CompletionStatus::of(
                pai_contract::exit::ExitCode::TransientConflict.code(),
                format!("the attempt could not be saved before its tasks started: {e}"),
            ),
        );
        return AttemptEnd::Completed;
    }

    let (events, mut reports) = mpsc::unbounded_channel::<(String, u32, Progress)>();
    let mut stops = Vec::with_capacity(launches.len());
    for (role, index, launch) in launches {
        let (stop, stop_rx) = watch::channel(None);
        stops.push(((role.clone(), index), stop));
        let events = events.clone();
        tokio::spawn(task::run(
            launch,
            move |progress| {
                let _ = events.send((role.clone(), index, progress));
            },
            stop_rx,
        ));
    }
    drop(events);
    let attempt = job
        .framework()
        .status
        .as_ref()
        .map_or(0, |s| s.attempt_status.id);
    tracing::info!(job = %name, attempt, tasks = stops.len(), "attempt started");

    let mut remaining = stops.len();
    let mut completion: Option<CompletionStatus> = None;
    let mut deleted = false;
    let stop_all = |stops: &[TaskStop], job: &Job, request: StopRequest| {
        let mut framework = job.framework();
        for ((role, index), stop) in stops {
            if let Some(task) = task_mut(&mut framework, role, *index)
                && task.state != FrameworkState::Completed
            {
                task.state = FrameworkState::AttemptDeletionPending;
                task.transition_time = Some(now());
            }
            stop.send_if_modified(|current| {
                if current.is_some() {
                    return false;
                }
                *current = Some(request.clone());
                true
            });
        }
    };
    while remaining > 0 {
        let mut batch = Vec::new();
        tokio::select! {
            report = reports.recv() => match report {
                Some(report) => batch.push(report),
                None => break,
            },
            command = commands.recv() => match command {
                Some(Command::Stop) => {
                    tracing::info!(job = %name, "stop requested: ending every task");
                    if completion.is_none() {
                        completion = Some(CompletionStatus::of(codes::STOP_FRAMEWORK_REQUESTED, "stop requested"));
                    }
                    stop_all(&stops, job, StopRequest {
                        code: codes::STOP_FRAMEWORK_REQUESTED,
                        reason: "the job was stopped".to_string(),
                    });
                }
                Some(Command::Delete) | None => {
                    deleted = true;
                    stop_all(&stops, job, StopRequest {
                        code: codes::DELETE_TASK_REQUESTED,
                        reason: "the job was deleted".to_string(),
                    });
                }
            },
        }
        while let Ok(report) = reports.try_recv() {
            batch.push(report);
        }
        for (role, index, progress) in batch {
            let mut framework = job.framework();
            let Some(task) = task_mut(&mut framework, &role, index) else {
                continue;
            };
            match progress {
                Progress::Running => {
                    if task.state != FrameworkState::AttemptDeletionPending {
                        task.state = FrameworkState::AttemptRunning;
                        task.transition_time = Some(now());
                    }
                    task.attempt_status.run_time = Some(now());
                    if let Some(status) = framework.status.as_mut()
                        && status.state == FrameworkState::AttemptPreparing
                    {
                        status.attempt_status.run_time = Some(now());
                        status.run_time.get_or_insert_with(now);
                        set_state(status, FrameworkState::AttemptRunning);
                    }
                }
                Progress::Completed { code, diagnostics } => {
                    remaining -= 1;
                    complete_task(task, CompletionStatus::of(code, diagnostics));
                    tracing::info!(job = %name, role = %role, index, code, "task completed");
                    if completion.is_none() {
                        let roles = framework
                            .status
                            .as_ref()
                            .and_then(|s| s.attempt_status.task_role_statuses.as_deref())
                            .unwrap_or_default();
                        completion =
                            policy::attempt_completion(&framework.spec, roles, &role, index as i32);
                        if let Some(done) = &completion
                            && remaining > 0
                        {
                            let reason = format!(
                                "the attempt completed: {}",
                                done.trigger.as_ref().map_or("", |t| t.message.as_str())
                            );
                            drop(framework);
                            stop_all(
                                &stops,
                                job,
                                StopRequest {
                                    code: codes::FRAMEWORK_ATTEMPT_COMPLETION,
                                    reason,
                                },
                            );
                        }
                    }
                }
            }
        }
        if !deleted && let Err(e) = inner.record(job).await {
            tracing::error!(job = %name, error = %e, "cannot save the job");
        }
    }
    if deleted {
        return AttemptEnd::Deleted;
    }
    let completion = completion.unwrap_or_else(|| {
        CompletionStatus::of(
            codes::FRAMEWORK_ATTEMPT_COMPLETION,
            "the attempt ended without a completion",
        )
    });
    tracing::info!(job = %name, attempt, code = completion.code, "attempt completed");
    complete_attempt(&mut job.framework(), completion);
    AttemptEnd::Completed
}

/// Gives every task of the current attempt its ports and address, and returns how to
/// start each.
fn prepare(inner: &Inner, job: &Job) -> Result<Vec<(String, u32, Launch)>, String> {
    let mut framework = job.framework();
    let own_ports =
        ports::allocate(&framework).map_err(|e| format!("no free ports on this machine: {e}"))?;
    let ports_json = own_ports.to_annotation();
    framework
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(meta::ANNOTATION_TASK_PORTS.to_string(), ports_json);

    let name = framework.metadata.name.clone().unwrap_or_default();
    let namespace = framework.metadata.namespace.clone().unwrap_or_default();
    let framework_uid = framework.metadata.uid.clone().unwrap_or_default();
    let no_attempt = FrameworkAttemptStatus::default();
    let attempt_status = framework
        .status
        .as_ref()
        .map_or(&no_attempt, |s| &s.attempt_status);
    let attempt = attempt_status.id;
    let attempt_uid = attempt_status.instance_uid.clone().unwrap_or_default();
    // Each task's pod: how to start it, and the UIDs its status shows.
    let mut launches = Vec::new();
    let mut pods = Vec::new();
    for role in &framework.spec.task_roles {
        let role_uid = attempt_status
            .task_role_statuses
            .iter()
            .flatten()
            .find(|r| r.name == role.name)
            .and_then(|r| r.instance_uid.clone())
            .unwrap_or_default();
        let pod = role.task.pod.spec.clone().unwrap_or_default();
        let init = pod
            .init_containers
            .iter()
            .flatten()
            .find(|c| c.name == INIT_CONTAINER)
            .cloned()
            .unwrap_or_default();
        let main = role.main_container().cloned().unwrap_or_default();
        let grace = pod
            .termination_grace_period_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(inner.settings.default_grace, Duration::from_secs);
        for index in 0..role.task_number.max(0) as u32 {
            let pod_uid = uid();
            let identity = Identity {
                namespace: namespace.clone(),
                framework: name.clone(),
                framework_uid: framework_uid.clone(),
                attempt,
                attempt_uid: attempt_uid.clone(),
                role: role.name.clone(),
                role_uid: role_uid.clone(),
                index,
                task_uid: uid(),
                task_attempt_uid: format!("0_{pod_uid}"),
                pod_name: pai_contract::framework::pod_name(&name, &role.name, index),
                pod_uid: pod_uid.clone(),
            };
            let fc = identity.fc_env();
            let root = task_root(inner, &name, attempt, &role.name, index);
            // Where the runtime will put it: the same rule, from the same code.
            let user_log = RuntimeTask {
                framework_attempt: u32::try_from(attempt).unwrap_or(0),
                kube_role: role.name.clone(),
                index,
                task_attempt: 0,
            }
            .log_dir(&Layout::new(&root))
            .join(USER_LOG);
            let launch = Launch {
                runtime: inner.settings.runtime.clone(),
                user_log,
                root,
                assets: inner.settings.assets.clone(),
                peers_file: inner.store.peers_file(&name, attempt),
                pid_record: inner.store.pid_file(&name, attempt, &role.name, index),
                host_env: inner.host_env.clone(),
                init_env: private_files(task::container_env(fc.clone(), &init)),
                main_env: task::container_env(fc, &main),
                grace,
                spawner: inner.spawner.clone(),
            };
            pods.push((role.name.clone(), index, identity.task_attempt_uid, pod_uid));
            launches.push((role.name.clone(), index, launch));
        }
    }
    for (role, index, task_attempt_uid, pod_uid) in pods {
        if let Some(task) = task_mut(&mut framework, &role, index) {
            task.state = FrameworkState::AttemptPreparing;
            task.transition_time = Some(now());
            task.attempt_status.start_time = Some(now());
            task.attempt_status.instance_uid = Some(task_attempt_uid);
            task.attempt_status.pod_uid = Some(pod_uid);
            task.attempt_status.pod_ip = Some(LOCAL_ADDRESS.to_string());
            task.attempt_status.pod_host_ip = Some(LOCAL_ADDRESS.to_string());
            task.attempt_status.pod_node_name = Some("localhost".to_string());
        }
    }
    if let Some(status) = framework.status.as_mut() {
        set_state(status, FrameworkState::AttemptPreparing);
    }
    // Every address and port is known now: publish the attempt's table once, before any
    // task looks for it (each task reads it once; nothing rereads the Framework).
    let table = match pai_barrier::readiness(&framework) {
        Ok(pai_barrier::Readiness::Ready(table)) => table,
        Ok(pai_barrier::Readiness::Waiting(p)) => {
            return Err(format!("not every task has an address: {p}"));
        }
        Err(e) => return Err(format!("cannot read the task statuses: {e}")),
    };
    let path = inner.store.peers_file(&name, attempt);
    pai_barrier::output::write_json(&path, &table)
        .map_err(|e| format!("cannot write the peer table {}: {e}", path.display()))?;
    Ok(launches)
}

/// The container log of task `index` of `role` in the job's current attempt; with
/// `follow`, it goes on until the task completes.
pub(super) fn log_stream(
    inner: &Arc<Inner>,
    job: Arc<Job>,
    role: String,
    index: u32,
    follow: bool,
    earlier: Option<i32>,
) -> Result<LogStream, Error> {
    let (name, current) = {
        let framework = job.framework();
        let attempt = framework
            .status
            .as_ref()
            .map(|s| s.attempt_status.id)
            .ok_or(Error::NotFound)?;
        (framework.metadata.name.clone().unwrap_or_default(), attempt)
    };
    let (attempt, follow) = match earlier {
        // An earlier attempt's log is complete: nothing to follow.
        Some(attempt) if attempt < current => (attempt, false),
        _ => (current, follow),
    };
    let path = task::container_log(&task_root(inner, &name, attempt, &role, index));
    let file = std::fs::File::open(&path).map_err(|_| Error::NotFound)?;
    struct Tail {
        file: tokio::fs::File,
        changed: watch::Receiver<u64>,
        job: Arc<Job>,
        role: String,
        index: u32,
        attempt: i32,
        follow: bool,
        finished: bool,
    }
    let ended = |t: &Tail| {
        let framework = t.job.framework();
        let same_attempt = framework
            .status
            .as_ref()
            .is_some_and(|s| s.attempt_status.id == t.attempt);
        !same_attempt
            || t.job.is_deleting()
            || task_status(&framework, &t.role, t.index)
                .is_none_or(|task| task.state == FrameworkState::Completed)
    };
    let tail = Tail {
        file: tokio::fs::File::from_std(file),
        changed: job.changed.subscribe(),
        job: job.clone(),
        role,
        index,
        attempt,
        follow,
        finished: false,
    };
    let stream = futures::stream::unfold(tail, move |mut t| async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match t.file.read(&mut buf).await {
                Ok(0) => {}
                Ok(n) => {
                    buf.truncate(n);
                    return Some((Ok(Bytes::from(buf)), t));
                }
                Err(e) => {
                    return Some((
                        Err(e),
                        Tail {
                            finished: true,
                            ..t
                        },
                    ));
                }
            }
            if !t.follow || t.finished {
                return None;
            }
            if ended(&t) {
                // One more read: what the task wrote before it ended.
                t.finished = true;
                continue;
            }
            tokio::select! {
                _ = t.changed.changed() => {}
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
    });
    Ok(Box::pin(stream))
}
