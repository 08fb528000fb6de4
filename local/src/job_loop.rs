//! One job's loop: what carries [`crate::lifecycle`]'s decisions out. It feeds the state machine
//! what happens (task reports, stop and delete requests, the retry timer) and carries
//! out what it decides: placing and starting tasks, signalling them, saving the
//! Framework, waiting before a retry, removing a deleted job.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use pai_contract::framework::{Framework, FrameworkAttemptStatus};
use pai_contract::meta;

use super::lifecycle::{self, Effect, Event, Placement};
use super::procs::{self, ProcessId};
use super::task::{self, Identity, Launch, Progress, StopRequest};
use crate::job::{Command, Inner, Job, uid};
use crate::ports;

use crate::error::Error;
use pai_contract::framework::INIT_CONTAINER;

/// Where tasks of this machine are: their address, and the one their ports are bound on.
pub(crate) const LOCAL_ADDRESS: std::net::Ipv4Addr = std::net::Ipv4Addr::LOCALHOST;

fn now() -> String {
    jiff::Timestamp::now().to_string()
}

/// How the embedded default's note on where a job ran begins, at the end of its
/// diagnostics (a reader who said so already leaves it out).
pub const WHERE_IT_RAN: &str = "[ran on this machine by rest-lite's embedded default";

/// What the embedded default adds to every attempt's diagnostics.
fn local_note(framework: &Framework, isolation: &crate::containers::Isolation) -> String {
    // The job's own images: the runtime's init image is never used here (its binary is
    // this server's), and a newcomer never named it.
    let images: Vec<String> = framework
        .spec
        .task_roles
        .iter()
        .filter_map(|r| r.task.pod.spec.as_ref())
        .flat_map(|s| s.containers.iter())
        .filter_map(|c| c.image.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    match isolation {
        crate::containers::Isolation::Host { why } => format!(
            "{}: the images ({}) were not used; {why}]",
            WHERE_IT_RAN,
            images.join(", ")
        ),
        crate::containers::Isolation::Containers(engine) => format!(
            "{}, in the images ({}) as containers of {}]",
            WHERE_IT_RAN,
            images.join(", "),
            engine.version
        ),
    }
}

/// The main containers' images of every role, as the engine names them, once each.
fn images_of(framework: &Framework) -> Vec<String> {
    let mut images: Vec<String> = framework
        .spec
        .task_roles
        .iter()
        .filter_map(|role| role.main_container()?.image.as_deref())
        .map(crate::containers::normalize_image)
        .collect();
    images.sort();
    images.dedup();
    images
}

/// How a restarted server takes up an open attempt whose containers outlived the previous
/// server, instead of failing and retrying it.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Adoption {
    /// Tasks whose main container runs (or ran, its end kept by the engine): followed.
    /// Role, index, container.
    pub follow: Vec<(String, u32, String)>,
    /// Tasks the previous server left in their init step (on this machine, ended with
    /// it): the init step runs again, then the main container, with the same pod, ports
    /// and GPUs, as a kubelet restarts an init container. Role, index, pod UID.
    pub again: Vec<(String, u32, String)>,
}

/// After a restart, in container mode: how the open attempt's unfinished tasks are taken
/// up ([`Adoption`]), when each of them either has its main container among `existing`
/// (a previous server started it and it outlived it) or had not reached its main step
/// (`task_root`'s [`task::MAIN_STARTED`] missing). A task whose container is gone after it
/// started has an end nobody can read: the attempt is then failed and retried.
pub(super) fn adoptable(
    framework: &Framework,
    existing: &std::collections::HashSet<String>,
    task_root: impl Fn(&str, u32) -> std::path::PathBuf,
) -> Option<Adoption> {
    if framework.metadata.deletion_timestamp.is_some() || !lifecycle::tasks_started(framework) {
        return None;
    }
    let mut adoption = Adoption::default();
    for (role, index, pod_uid) in unfinished_tasks(framework) {
        let pod_uid = pod_uid?;
        let name = crate::containers::main_name(&pod_uid);
        if existing.contains(&name) {
            adoption.follow.push((role, index, name));
        } else if !task_root(&role, index).join(task::MAIN_STARTED).exists() {
            adoption.again.push((role, index, pod_uid));
        } else {
            return None;
        }
    }
    (!adoption.follow.is_empty() || !adoption.again.is_empty()).then_some(adoption)
}

/// At start, the containers a previous server left: where containers outlive servers,
/// the jobs whose open attempt can be taken up ([`adoptable`]) keep theirs and are
/// returned with how; every other container of this server goes (its attempt is then
/// failed and retried, as host processes' are).
pub(super) async fn follow_or_remove(
    inner: &Inner,
    engine: &crate::containers::Engine,
    frameworks: &[Framework],
) -> HashMap<String, Adoption> {
    let mut adopted = HashMap::new();
    let existing: std::collections::HashSet<String> = match engine.names(true).await {
        Ok(names) => names.into_iter().collect(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot list the previous server's containers");
            return adopted;
        }
    };
    let mut kept = std::collections::HashSet::new();
    if engine.outlive_server {
        for framework in frameworks {
            let name = framework.metadata.name.clone().unwrap_or_default();
            let attempt = framework.attempt_id();
            let root = |role: &str, index| inner.store.task_root(&name, attempt, role, index);
            if let Some(adoption) = adoptable(framework, &existing, root) {
                kept.extend(adoption.follow.iter().map(|(_, _, c)| c.clone()));
                adopted.insert(name, adoption);
            }
        }
    }
    let gone: Vec<String> = existing.into_iter().filter(|n| !kept.contains(n)).collect();
    if !gone.is_empty() {
        tracing::warn!(
            containers = gone.len(),
            "containers of a previous server that no job follows; removing them"
        );
        engine.remove(&gone).await;
    }
    if !adopted.is_empty() {
        tracing::info!(
            jobs = adopted.len(),
            containers = kept.len(),
            "following the running containers of a previous server"
        );
    }
    adopted
}

/// The open attempt's tasks that have not completed: role, index, pod UID.
fn unfinished_tasks(
    framework: &Framework,
) -> impl Iterator<Item = (String, u32, Option<String>)> + '_ {
    framework
        .status
        .as_ref()
        .and_then(|s| s.attempt_status.task_role_statuses.as_deref())
        .unwrap_or_default()
        .iter()
        .flat_map(|role| {
            role.task_statuses
                .iter()
                .filter(|t| t.state != pai_contract::framework::FrameworkState::Completed)
                .filter_map(move |t| {
                    Some((
                        role.name.clone(),
                        u32::try_from(t.index).ok()?,
                        t.attempt_status.pod_uid.clone(),
                    ))
                })
        })
}

/// After a restart, before the job's loop starts: ends whatever the previous
/// server left running of the open attempt (the state machine then completes that
/// attempt as failed and retries it by the retry policy).
pub(super) async fn end_leftovers(inner: &Arc<Inner>, job: &Arc<Job>) {
    end_leftovers_of(inner, &job.current(), |_, _| true).await;
}

/// Ends what the previous server left running of the open attempt's tasks that `which`
/// takes (role, index).
async fn end_leftovers_of(inner: &Inner, framework: &Framework, which: impl Fn(&str, u32) -> bool) {
    if !lifecycle::tasks_started(framework) {
        return;
    }
    let name = framework.metadata.name.clone().unwrap_or_default();
    let attempt = framework.attempt_id();
    let mut left = Vec::new();
    let roles = framework
        .status
        .as_ref()
        .and_then(|s| s.attempt_status.task_role_statuses.as_deref())
        .unwrap_or_default();
    // Each task's record, with the pod UID the task was started with (in one pass).
    for role in roles {
        for task in &role.task_statuses {
            let Ok(index) = u32::try_from(task.index) else {
                continue;
            };
            if !which(&role.name, index) {
                continue;
            }
            let pod_uid = task.attempt_status.pod_uid.clone().unwrap_or_default();
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
                    // Its leader gone, what it started may be left in its group.
                    let orphans = process.orphans(&pod_uid);
                    if orphans.is_empty() {
                        tracing::warn!(record = %record.display(), %process, why, "process record not believed; nothing signalled");
                    }
                    left.extend(orphans);
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
}

/// The init container's environment for this machine: the files holding the
/// environment are private to the server's user (a pod's template asks for 644, for a
/// main container that may run as another user), and the job's key pair is read from
/// the job's directory.
fn init_env(inner: &Inner, job: &str, mut env: Vec<(String, String)>) -> Vec<(String, String)> {
    use pai_contract::training::{JOB_KEY_FILE, JOB_SSH_DIR_VAR};
    // In container mode the main container's user is the image's: the files are for it,
    // as the pod template says (the directories above are private all the same).
    let private = inner.isolation.engine().is_none();
    env.retain(|(name, _)| {
        (!private || name != pai_contract::env::ENV_FILE_MODE) && name != JOB_SSH_DIR_VAR
    });
    // The key pair is a file of the job's directory here, not a Secret's volume.
    let keys = inner.store.job_key_dir(job);
    if keys.join(JOB_KEY_FILE).exists() {
        env.push((JOB_SSH_DIR_VAR.to_string(), keys.display().to_string()));
    }
    env
}

/// A task's report: its attempt, role and index, and what happened.
type Report = (i32, String, u32, Progress);

/// How a job's loop starts.
pub(crate) enum Resume {
    /// Submitted now, or nothing of its attempt runs or is held.
    Fresh,
    /// Its attempt's containers outlived the previous server and are followed, and its
    /// tasks still in their init step start again ([`adoptable`]), with what they hold,
    /// instead of the attempt being failed and retried.
    Follow(crate::slots::Held, Adoption),
    /// Its attempt ended with the previous server, holding these slots and GPUs: the
    /// attempt that replaces it takes them, before any other job may.
    Carry(crate::slots::Held),
}

/// Drives the job until it is deleted.
// Long: the job's event loop: one select over commands, reports and the timer; each arm
// hands off to a function.
/// `resume`: how a restarted server takes the job up again.
pub(super) async fn drive(
    inner: Arc<Inner>,
    job: Arc<Job>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    resume: Resume,
) {
    let name = job.name();
    let note = local_note(&job.framework(), &inner.isolation);
    let (reports_tx, mut reports) = mpsc::unbounded_channel::<Report>();
    let mut job_loop = JobLoop {
        inner: &inner,
        job: &job,
        reports: reports_tx,
        placed: Vec::new(),
        running: HashMap::new(),
        timer: None,
        placing_since: None,
        started: None,
        held: None,
        carried: None,
        waiter: None,
        waits_for_jobs: false,
        pulling: None,
        progress_due: None,
        progress_written: None,
        all_started: false,
        preempted: false,
    };
    let mut events = match resume {
        Resume::Follow(held, adoption) => {
            job_loop.adopt(held, adoption).await;
            Vec::new()
        }
        Resume::Carry(held) => {
            job_loop.carried = Some(held);
            vec![Event::Resumed]
        }
        Resume::Fresh => vec![Event::Resumed],
    };
    // Deletions asked for in this batch of events, answered once it is carried out.
    let mut deletions: Vec<tokio::sync::oneshot::Sender<()>> = Vec::new();
    loop {
        let effects: Vec<Effect> = {
            let mut guard = job.framework();
            let framework = Arc::make_mut(&mut guard);
            let mut uids = uid;
            let mut cx = lifecycle::Context {
                now: now(),
                conflict_delay: inner.settings.conflict_delay,
                restart: inner.settings.restart,
                uid: &mut uids,
                note: &note,
            };
            events
                .drain(..)
                .flat_map(|event| lifecycle::step(framework, event, &mut cx))
                .collect()
        };
        let next = job_loop.carry_out(effects).await;
        job_loop.settle();
        if !deletions.is_empty() {
            // Saved (and invisible) now: tell watchers, then the callers.
            job.changed.send_modify(|v| *v += 1);
            for saved in deletions.drain(..) {
                let _ = saved.send(());
            }
        }
        match next {
            Next::Events(more) if !more.is_empty() => {
                events = more;
                continue;
            }
            Next::Events(_) => {}
            Next::Removed => break,
        }
        if job_loop.is_finished() {
            // Nothing runs, waits or is held: the loop ends, its memory with it,
            // unless a command came meanwhile; the next command starts one again (under
            // the lock every sender takes, so none is lost in between).
            let ended = {
                let mut sender = job.commands();
                let idle = commands.is_empty();
                if idle {
                    *sender = None;
                }
                idle
            };
            if ended {
                tracing::debug!(job = %name, "finished; its loop ends until a command comes");
                drop(job_loop);
                // What it keeps cold is made on the keeper's thread, beside the other
                // finished jobs' (see `pai_backend::memory::keeper`); what it held is dropped
                // here, where it was made.
                let job = job.clone();
                if let Some(held) = pai_backend::memory::keeper::make(move || job.freeze()).await {
                    drop(held);
                    // Its memory is free now: the next look gives it back.
                    inner.trimmer.jobs_ended();
                }
                return;
            }
        }
        let timer = async {
            match job_loop.timer.as_mut() {
                Some(timer) => timer.await,
                None => std::future::pending().await,
            }
        };
        let progress_due = async {
            match job_loop.progress_due.as_mut() {
                Some(due) => due.await,
                None => std::future::pending().await,
            }
        };
        let admitted = async {
            match job_loop.waiter.as_mut() {
                Some(waiter) => waiter.await,
                None => std::future::pending().await,
            }
        };
        let pulled = async {
            match job_loop.pulling.as_mut() {
                Some(pulling) => pulling.await,
                None => std::future::pending().await,
            }
        };
        // Heard once the attempt's tasks are started (until then it stays in the channel):
        // an attempt still being created (its images pulled, its dependencies awaited)
        // keeps the request for when it runs.
        let started = matches!(
            job.framework().status.as_ref().map(|s| s.state),
            Some(
                pai_contract::framework::FrameworkState::AttemptPreparing
                    | pai_contract::framework::FrameworkState::AttemptRunning
            )
        );
        let preempted = async {
            match job_loop.held.as_mut().filter(|_| started) {
                Some(held) => held.preempted().await,
                None => std::future::pending().await,
            }
        };
        let released = async {
            if job_loop.waits_for_jobs {
                job.released.notified().await
            } else {
                std::future::pending().await
            }
        };
        tokio::select! {
            pulled = pulled => {
                job_loop.pulling = None;
                job_loop.job.set_queued(None);
                events.push(match pulled {
                    Ok(Ok(())) => job_loop.place_now().await,
                    Ok(Err(message)) => Event::NotStarted {
                        code: pai_contract::exit::codes::POD_CREATION_PERMANENT_ERROR,
                        message,
                    },
                    Err(e) => not_started(format!("pulling the images failed: {e}")),
                });
            }
            message = preempted => {
                tracing::info!(job = %name, %message, "preempted");
                job_loop.preempted = true;
                events.push(Event::Preempted { message });
            }
            () = released => {
                job_loop.waits_for_jobs = false;
                events.extend(job_loop.take_slots().await);
            }
            held = admitted => {
                job_loop.waiter = None;
                job.set_queued(None);
                match held {
                    Some(held) => {
                        job_loop.held = Some(held);
                        events.push(job_loop.place_now().await);
                    }
                    None => events.push(not_started("this machine's task slots are closed".into())),
                }
            }
            Some(report) = reports.recv() => {
                job_loop.observe(&report);
                events.push(report_event(report));
                while let Ok(report) = reports.try_recv() {
                    job_loop.observe(&report);
                    events.push(report_event(report));
                }
            }
            command = commands.recv() => events.push(match command {
                Some(Command::Stop) => {
                    tracing::info!(job = %name, "stop requested");
                    Event::Stop
                }
                Some(Command::Delete(saved)) => {
                    deletions.push(saved);
                    Event::Delete
                }
                None => Event::Delete,
            }),
            () = timer => {
                job_loop.timer = None;
                events.push(Event::RetryDelayElapsed);
            }
            () = progress_due => job_loop.write_progress().await,
        }
    }
    remove(&inner, &job).await;
}

/// A deleted job whose tasks have all ended: its files go, then its name.
pub(super) async fn remove(inner: &Arc<Inner>, job: &Job) {
    let name = job.name();
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
    let _ = inner.changes.send((job.shared_name(), false));
    tracing::info!(job = %name, "job deleted");
}

fn report_event((attempt, role, index, progress): Report) -> Event {
    match progress {
        Progress::Running => Event::TaskRunning {
            attempt,
            role,
            index,
        },
        Progress::Completed {
            code,
            diagnostics,
            message,
            reason,
        } => Event::TaskCompleted {
            attempt,
            role,
            index,
            code,
            diagnostics,
            message,
            reason,
        },
    }
}

/// What follows a batch of effects.
enum Next {
    /// Events the effects produced (placement, a failure to start), to apply at once.
    Events(Vec<Event>),
    /// The job is deleted and every task ended.
    Removed,
}

/// Progress is written at most once per this many times its last write's cost.
const PROGRESS_SPACING: u32 = 100;
/// And never later than this after it happened.
const MAX_PROGRESS_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

/// What a batch of effects leaves to write, the most that any asked: a later save of a
/// decision writes the progress before it too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
enum Unsaved {
    #[default]
    Nothing,
    /// A task running, a task's end that decides nothing: written spaced.
    Progress,
    /// A state the job loop decided: written and synced at once.
    Decision,
}

/// What carries out the state machine's effects for one job.
struct JobLoop<'a> {
    inner: &'a Arc<Inner>,
    job: &'a Arc<Job>,
    reports: mpsc::UnboundedSender<Report>,
    /// How to start each task of the attempt being placed.
    placed: Vec<(String, u32, Launch)>,
    /// Each started task's stop request.
    running: HashMap<(String, u32), watch::Sender<Option<StopRequest>>>,
    timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    /// When the attempt being placed started.
    placing_since: Option<std::time::Instant>,
    /// The attempt whose tasks were started, and when it started.
    started: Option<(i32, std::time::Instant)>,
    /// This machine's task slots the current attempt holds (every task's), from its
    /// placement until each of its tasks has ended.
    held: Option<crate::slots::Held>,
    /// What the attempt a restart ended held, kept for the attempt that replaces it.
    carried: Option<crate::slots::Held>,
    /// The attempt's place in the queue for slots, while it waits.
    waiter: Option<crate::slots::Waiter>,
    /// The attempt waits for the jobs the job waits for (`dependsOn`).
    waits_for_jobs: bool,
    /// The attempt's images being pulled (container mode), before it is placed.
    pulling: Option<tokio::task::JoinHandle<Result<(), String>>>,
    /// Task progress not written yet, and when it is ([`JobLoop::save_spaced`]).
    progress_due: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    /// The last write of progress: when it ended and what it took.
    progress_written: Option<(tokio::time::Instant, std::time::Duration)>,
    /// Whether every task of the current attempt was running (or past it) at the last
    /// batch: the batch that makes it so is written at once ([`JobLoop::save_spaced`]).
    all_started: bool,
    /// The attempt was preempted: what it held goes to the job it gave way to, and the
    /// next attempt asks again (rather than keeping it, as a retry does).
    preempted: bool,
}

impl JobLoop<'_> {
    /// The job completed and nothing of it runs, waits or is held.
    fn is_finished(&self) -> bool {
        self.job.framework().is_completed()
            && self.held.is_none()
            && self.carried.is_none()
            && self.waiter.is_none()
            && self.pulling.is_none()
            && self.timer.is_none()
            && self.progress_due.is_none()
            && !self.waits_for_jobs
            // Only the loop's own sender: every task's has gone with it.
            && self.reports.strong_count() == 1
    }

    /// A task of the started attempt runs its user command: how long that took.
    fn observe(&self, (attempt, _, _, progress): &Report) {
        if let (Progress::Running, Some((started, since))) = (progress, self.started)
            && started == *attempt
        {
            self.inner.observed.task_start.observe(since.elapsed());
        }
    }

    /// Carries out `effects` in order; saves are merged (one write per batch, synced
    /// when any asks for it) but always happen before tasks are placed or started.
    async fn carry_out(&mut self, effects: Vec<Effect>) -> Next {
        let name = self.job.name();
        let mut events = Vec::new();
        let mut unsaved = Unsaved::Nothing;
        for effect in effects {
            match effect {
                Effect::Persist { durable } => {
                    let this = if durable {
                        Unsaved::Decision
                    } else {
                        Unsaved::Progress
                    };
                    unsaved = unsaved.max(this);
                }
                Effect::Place => {
                    self.placing_since = Some(std::time::Instant::now());
                    if let Err(e) = self.save(std::mem::take(&mut unsaved)).await {
                        events.push(not_started(format!("the attempt could not be saved: {e}")));
                        continue;
                    }
                    // Not before the jobs it waits for reached their states.
                    if pai_job::depends::holds(&self.job.framework()) {
                        tracing::info!(job = %name, "waits for the jobs it depends on");
                        self.waits_for_jobs = true;
                        continue;
                    }
                    events.extend(self.take_slots().await);
                }
                Effect::Launch => {
                    // The attempt (addresses, pods) is on disk before any task starts: a
                    // restarted server must find every task it would have to end.
                    if let Err(e) = self.save(std::mem::take(&mut unsaved)).await {
                        tracing::error!(job = %name, error = %e, "cannot save the attempt; no task is started");
                        self.placed.clear();
                        events.push(not_started(format!(
                            "the attempt could not be saved before its tasks started: {e}"
                        )));
                        continue;
                    }
                    if let Err(message) = self.launch() {
                        events.push(not_started(message));
                    }
                }
                Effect::Signal {
                    tasks,
                    code,
                    reason,
                } => {
                    let request = StopRequest { code, reason };
                    for task in tasks {
                        if let Some(stop) = self.running.get(&task) {
                            stop.send_if_modified(|current| {
                                if current.is_some() {
                                    return false;
                                }
                                *current = Some(request.clone());
                                true
                            });
                        }
                    }
                }
                Effect::Schedule(delay) => {
                    self.timer = Some(Box::pin(tokio::time::sleep(delay)));
                }
                Effect::Remove => {
                    if let Err(e) = self.save(std::mem::take(&mut unsaved)).await {
                        tracing::error!(job = %name, error = %e, "cannot save the deletion");
                    }
                    return Next::Removed;
                }
            }
        }
        if let Err(e) = self.save_spaced(unsaved).await {
            tracing::error!(job = %name, error = %e, "cannot save the job");
        }
        Next::Events(events)
    }

    /// Takes up the open attempt's tasks as `adoption` says: those whose main containers
    /// a previous server started are followed; those it left in their init step start
    /// again. Their slots are taken again, and each reports as a started task does.
    async fn adopt(&mut self, held: crate::slots::Held, adoption: Adoption) {
        let Some(engine) = self.inner.isolation.engine().cloned() else {
            return;
        };
        let framework = self.job.framework().clone();
        let name = framework.metadata.name.clone().unwrap_or_default();
        let attempt = framework.attempt_id();
        let gpus = (!self.inner.slots.gpus().devices.is_empty()).then(|| held.by_task());
        self.held = Some(held);
        self.started = Some((attempt, std::time::Instant::now()));
        let followed = adoption.follow.len();
        for (role, index, container) in adoption.follow {
            let pod = framework
                .spec
                .task_roles
                .iter()
                .find(|r| r.name == role)
                .and_then(|r| r.task.pod.spec.as_ref());
            let grace = grace_of(self.inner, pod);
            let root = self.inner.store.task_root(&name, attempt, &role, index);
            let progress = self.reporter(attempt, &role, index);
            tokio::spawn(task::follow(
                engine.clone(),
                container,
                root,
                grace,
                progress,
                self.stop_channel(&role, index),
            ));
        }
        let again = adoption.again.len();
        if again > 0 {
            let tasks: std::collections::HashSet<(String, u32)> = adoption
                .again
                .iter()
                .map(|(role, index, _)| (role.clone(), *index))
                .collect();
            end_leftovers_of(self.inner, &framework, |role, index| {
                tasks.contains(&(role.to_string(), index))
            })
            .await;
            let inner = self.inner.clone();
            let relaunched = tokio::task::spawn_blocking(move || {
                launch_again(&inner, &framework, adoption.again, &gpus)
            })
            .await
            .unwrap_or_else(|e| {
                let message = format!("starting the task again failed: {e}");
                tasks
                    .iter()
                    .map(|(role, index)| Err((role.clone(), *index, message.clone())))
                    .collect()
            });
            for launched in relaunched {
                let (role, index, launch) = match launched {
                    Ok(launched) => launched,
                    Err((role, index, message)) => {
                        tracing::warn!(job = %name, %role, index, %message, "cannot start the task again");
                        let progress = self.reporter(attempt, &role, index);
                        progress(Progress::Completed {
                            code: 1,
                            diagnostics: message,
                            message: None,
                            reason: None,
                        });
                        continue;
                    }
                };
                let progress = self.reporter(attempt, &role, index);
                tokio::spawn(task::run(launch, progress, self.stop_channel(&role, index)));
            }
        }
        tracing::info!(job = %name, attempt, followed, again, "took up the tasks a previous server started");
    }

    /// How task `index` of `role` of `attempt` reports to this job_loop.
    fn reporter(&self, attempt: i32, role: &str, index: u32) -> impl Fn(Progress) + Send + 'static {
        let reports = self.reports.clone();
        let role = role.to_string();
        move |progress| {
            let _ = reports.send((attempt, role.clone(), index, progress));
        }
    }

    /// A new stop channel for task `index` of `role`, kept to stop it with: its receiving
    /// end, for the task.
    fn stop_channel(&mut self, role: &str, index: u32) -> watch::Receiver<Option<StopRequest>> {
        let (stop, stop_rx) = watch::channel(None);
        self.running.insert((role.to_string(), index), stop);
        stop_rx
    }

    /// Takes this machine's task slots for the attempt (queued when they are taken) and
    /// places it: the event that says so, if any yet.
    async fn take_slots(&mut self) -> Option<Event> {
        if std::mem::take(&mut self.preempted) {
            self.held = None;
            self.carried = None;
        }
        if self.held.is_none() {
            self.held = self.carried.take();
        }
        if self.held.is_none() {
            let need = need_of(&self.job.framework());
            let tasks = need.tasks.len();
            match self.inner.slots.ask(need).await {
                crate::slots::Asked::Held(held) => self.held = Some(held),
                crate::slots::Asked::Queued(waiter, queued) => {
                    tracing::info!(job = %self.job.name(), tasks, "queued for this machine's task slots or GPUs");
                    self.waiter = Some(waiter);
                    self.job.set_queued(Some(queued));
                    return None;
                }
                crate::slots::Asked::TooMany(message) => return Some(not_started(message)),
            }
        }
        self.pull_or_place().await
    }

    /// Places the attempt (its slots are held), once the images it names are on this
    /// machine: those that are not are pulled first, once each for all its tasks, the job
    /// WAITING `PullingImage` meanwhile (the engine's last line of progress in its
    /// message). The event that says so, if any yet.
    async fn pull_or_place(&mut self) -> Option<Event> {
        let Some(engine) = self.inner.isolation.engine().cloned() else {
            return Some(self.place_now().await);
        };
        let mut missing = Vec::new();
        let images = images_of(&self.job.framework());
        for image in images {
            match engine.has_image(&image).await {
                Ok(true) => {}
                Ok(false) => missing.push(image),
                Err(message) => return Some(not_started(message)),
            }
        }
        if missing.is_empty() {
            return Some(self.place_now().await);
        }
        let job = self.job.clone();
        let authfile = Some(self.inner.store.registry_auth(&job.name())).filter(|f| f.exists());
        self.pulling = Some(tokio::spawn(async move {
            for image in missing {
                let since = now();
                let tell = |line: &str| {
                    job.set_queued(Some(crate::slots::Queued {
                        reason: crate::slots::PULLING_IMAGE,
                        message: if line.is_empty() {
                            format!("pulling image {image}")
                        } else {
                            format!("pulling image {image}: {line}")
                        },
                        since: since.clone(),
                    }));
                };
                tell("");
                tracing::info!(job = %job.name(), %image, "pulling image");
                engine.fetch(&image, authfile.as_deref(), &tell).await?;
            }
            Ok(())
        }));
        None
    }

    /// Places the current attempt's tasks (its slots are held): the event that says so.
    async fn place_now(&mut self) -> Event {
        // The users the images run as, for the task's files that user must own (asked
        // once per image, the images being here now).
        if let Some(engine) = self.inner.isolation.engine() {
            let images = images_of(&self.job.framework());
            for image in images {
                if let Err(why) = engine.user_of(&image).await {
                    tracing::warn!(job = %self.job.name(), %image, %why, "cannot tell which user the image runs as; its tasks' ssh files stay root's");
                }
            }
        }
        // Off the async workers: a large job's placement binds a port per task, and the
        // server's other requests must not wait behind it.
        let (inner, job) = (self.inner.clone(), self.job.clone());
        let gpus = self.gpus_of_tasks();
        let placed = tokio::task::spawn_blocking(move || place(&inner, &job, &gpus))
            .await
            .unwrap_or_else(|e| Err(format!("placing the attempt failed: {e}")));
        match placed {
            Ok((placements, launches)) => {
                self.placed = launches;
                Event::Placed(placements)
            }
            Err(message) => {
                tracing::error!(job = %self.job.name(), %message, "cannot start the attempt");
                not_started(message)
            }
        }
    }

    /// The GPUs each task of the attempt holds (none on a machine without GPUs), saved
    /// on the Framework for the views and a restarted server.
    fn gpus_of_tasks(&self) -> Option<TaskGpus> {
        let held = self.held.as_ref()?;
        if self.inner.slots.gpus().devices.is_empty() {
            return None;
        }
        let mut framework = self.job.framework();
        let attempt = framework.attempt_id();
        held.assignment(attempt).save(Arc::make_mut(&mut framework));
        Some(held.by_task())
    }

    /// After a batch: an attempt that no longer waits to be placed (stopped, deleted)
    /// leaves the queue; one whose tasks have all ended gives its slots back.
    fn settle(&mut self) {
        use pai_contract::framework::FrameworkState;
        let state = self.job.framework().status.as_ref().map(|s| s.state);
        if state != Some(FrameworkState::AttemptCreationPending) && self.waiter.take().is_some() {
            self.job.set_queued(None);
        }
        if state != Some(FrameworkState::AttemptCreationPending) {
            self.waits_for_jobs = false;
            // Stopped or deleted while its images were pulled: the pull ends with it.
            if let Some(pulling) = self.pulling.take() {
                pulling.abort();
                self.job.set_queued(None);
            }
        }
        if matches!(
            state,
            None | Some(FrameworkState::AttemptCompleted | FrameworkState::Completed)
        ) {
            self.held = None;
        }
        if matches!(state, None | Some(FrameworkState::Completed)) {
            self.carried = None;
        }
    }

    /// Saves now if anything is unsaved, progress too (before tasks are placed, started
    /// or removed): the result of a durable save matters.
    async fn save(&mut self, unsaved: Unsaved) -> Result<(), Error> {
        match unsaved {
            Unsaved::Decision => {
                self.progress_due = None;
                self.inner.persist(self.job).await
            }
            Unsaved::Progress => {
                self.write_progress().await;
                Ok(())
            }
            Unsaved::Nothing => Ok(()),
        }
    }

    /// As [`Self::save`] at the end of a batch of effects: a decision is written (and
    /// synced) at once, with any progress not written yet. Progress (a task running, a
    /// task's end that decides nothing) is written at once unless progress was written
    /// less than [`PROGRESS_SPACING`] times that write's cost ago; it is written then,
    /// with everything that came meanwhile. A write costs what the whole Framework does,
    /// so without this a 1,000-task job's start wrote its Framework once per task (O(N²)
    /// bytes, half the server's CPU in its start); with it, progress costs at most about
    /// 1 % of a core, and a small job's is written within milliseconds. Either way it is
    /// told only once written. The batch that leaves no task waiting to run is written at
    /// once: a job's last task is shown running when it runs, not up to
    /// [`MAX_PROGRESS_DELAY`] later.
    async fn save_spaced(&mut self, unsaved: Unsaved) -> Result<(), Error> {
        if unsaved != Unsaved::Progress {
            return self.save(unsaved).await;
        }
        // The batch in which the last task started is what a reader waits for (the job
        // running whole): written and told at once, once per attempt.
        let all_started = self.all_started();
        let newly = all_started && !self.all_started;
        self.all_started = all_started;
        if newly {
            self.write_progress().await;
            return Ok(());
        }
        if self.progress_due.is_some() {
            return Ok(());
        }
        if let Some((written, cost)) = self.progress_written {
            let due = written + (cost * PROGRESS_SPACING).min(MAX_PROGRESS_DELAY);
            if due > tokio::time::Instant::now() {
                self.progress_due = Some(Box::pin(tokio::time::sleep_until(due)));
                return Ok(());
            }
        }
        self.write_progress().await;
        Ok(())
    }

    /// Whether every task of the job's current attempt runs or is past running.
    fn all_started(&self) -> bool {
        use pai_contract::framework::FrameworkState;
        let framework = self.job.framework().clone();
        let Ok(roles) = framework.task_role_statuses() else {
            return false;
        };
        let mut tasks = roles.iter().flat_map(|r| r.task_statuses.iter()).peekable();
        tasks.peek().is_some()
            && tasks.all(|t| {
                !matches!(
                    t.state,
                    FrameworkState::AttemptCreationPending
                        | FrameworkState::AttemptCreationRequested
                        | FrameworkState::AttemptPreparing
                )
            })
    }

    /// Writes the task progress now (not synced: a restart re-derives it).
    async fn write_progress(&mut self) {
        self.progress_due = None;
        let started = tokio::time::Instant::now();
        if let Err(e) = self.inner.record(self.job).await {
            tracing::error!(job = %self.job.name(), error = %e, "cannot save the job");
        }
        let now = tokio::time::Instant::now();
        self.progress_written = Some((now, now - started));
    }

    /// Publishes the attempt's peer table, then starts every placed task.
    fn launch(&mut self) -> Result<(), String> {
        let (name, attempt, table) = {
            let framework = self.job.framework();
            let attempt = framework.attempt_id();
            // Every address and port is known now: the table is written once, before any
            // task looks for it (each task reads it once; nothing rereads the Framework).
            let table = match pai_barrier::readiness(&framework) {
                Ok(pai_barrier::Readiness::Ready(table)) => table,
                Ok(pai_barrier::Readiness::Waiting(p)) => {
                    return Err(format!("not every task has an address: {p}"));
                }
                Err(e) => return Err(format!("cannot read the task statuses: {e}")),
            };
            (
                framework.metadata.name.clone().unwrap_or_default(),
                attempt,
                table,
            )
        };
        let path = self.inner.store.peers_file(&name, attempt);
        pai_barrier::output::write_json(&path, &table)
            .map_err(|e| format!("cannot write the peer table {}: {e}", path.display()))?;
        let since = self
            .placing_since
            .take()
            .unwrap_or_else(std::time::Instant::now);
        self.inner.observed.barrier_wait.observe(since.elapsed());
        self.started = Some((attempt, since));
        self.running.clear();
        let launches = std::mem::take(&mut self.placed);
        let count = launches.len();
        for (role, index, launch) in launches {
            let progress = self.reporter(attempt, &role, index);
            tokio::spawn(task::run(launch, progress, self.stop_channel(&role, index)));
        }
        tracing::info!(job = %name, attempt, tasks = count, "attempt started");
        Ok(())
    }
}

fn not_started(message: String) -> Event {
    Event::NotStarted {
        code: lifecycle::not_started_code(),
        message,
    }
}

/// Gives every task of the current attempt its ports (the Framework's annotation), pod
/// and address; returns where each is and how to start it.
type Placed = (Vec<Placement>, Vec<(String, u32, Launch)>);

/// The GPUs of each task of an attempt, by role and index.
type TaskGpus = BTreeMap<(String, u32), Vec<crate::gpus::GpuDevice>>;

/// What `framework`'s current attempt asks of this machine: a slot per task, the GPUs its
/// pods' main containers ask for (of its `gpuType`), those its tasks held before first.
pub(crate) fn need_of(framework: &Framework) -> crate::slots::Need {
    let annotations = framework.metadata.annotations.clone().unwrap_or_default();
    let job = match (
        annotations.get(meta::ANNOTATION_USER),
        annotations.get(meta::ANNOTATION_JOB),
    ) {
        (Some(user), Some(job)) => format!("{user}~{job}"),
        _ => framework.metadata.name.clone().unwrap_or_default(),
    };
    crate::slots::Need {
        job,
        tasks: framework
            .spec
            .task_roles
            .iter()
            .flat_map(|role| {
                let gpus = role.gpu_count();
                (0..role.tasks()).map(move |index| (role.name.clone(), index, gpus))
            })
            .collect(),
        gpu_type: annotations.get(meta::ANNOTATION_GPU_TYPE).cloned(),
        before: crate::gpus::Assignment::of(framework),
        priority: pai_contract::priority::JobPriority::ranked(framework),
    }
}

fn place(inner: &Inner, job: &Job, gpus: &Option<TaskGpus>) -> Result<Placed, String> {
    // A copy: binding a port per task takes a while for a large job, and the job's
    // readers (its status, the job list) must not wait for it. Only this job_loop changes
    // the attempt and its tasks, so what is read from the copy stays current.
    let framework = job.framework().clone();
    // The files of attempts older than the kept ones go before this one's come.
    let name = framework.metadata.name.clone().unwrap_or_default();
    let pruned =
        inner
            .store
            .prune_attempts(&name, framework.attempt_id(), inner.settings.kept_attempts);
    if pruned > 0 {
        tracing::debug!(job = %name, pruned, "removed old attempts' files");
    }
    let allocation = ports::allocate(&framework, &inner.ports)
        .map_err(|e| format!("no free ports on this machine: {e}"))?;
    let own_ports = &allocation.ports;
    Arc::make_mut(&mut job.framework())
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            meta::ANNOTATION_TASK_PORTS.to_string(),
            own_ports.to_annotation(),
        );

    // Each task's pod: how to start it, and the UIDs its status shows.
    let mut launches = Vec::new();
    let mut pods = Vec::new();
    for role in &framework.spec.task_roles {
        let role_of = RoleOf::new(inner, &framework, role);
        for index in 0..role.tasks() {
            let pod_uid = uid();
            let held = allocation.held(&role.name, index);
            let launch = role_of.launch(inner, index, &pod_uid, held, own_ports, gpus)?;
            pods.push(Placement {
                role: role.name.clone(),
                index,
                pod_uid,
                address: LOCAL_ADDRESS.to_string(),
                node: "localhost".to_string(),
            });
            launches.push((role.name.clone(), index, launch));
        }
    }
    Ok((pods, launches))
}

/// Between TERM and KILL for a task of `pod`: its `terminationGracePeriodSeconds`, else
/// the server's default.
fn grace_of(inner: &Inner, pod: Option<&k8s_openapi::api::core::v1::PodSpec>) -> Duration {
    pod.and_then(|p| p.termination_grace_period_seconds)
        .and_then(|s| u64::try_from(s).ok())
        .map_or(inner.settings.default_grace, Duration::from_secs)
}

/// A task started again: its role, index and launch, or why it cannot be.
type Relaunched = Result<(String, u32, Launch), (String, u32, String)>;

/// The launches of the open attempt's tasks `again` (role, index, pod UID), which a
/// previous server left in their init step: the same pod, ports (held again) and GPUs
/// as their peers were told. A task that cannot have them again is returned with why.
fn launch_again(
    inner: &Inner,
    framework: &Framework,
    again: Vec<(String, u32, String)>,
    gpus: &Option<TaskGpus>,
) -> Vec<Relaunched> {
    let own_ports = framework.task_ports();
    let mut launches = Vec::with_capacity(again.len());
    for (role_name, index, pod_uid) in again {
        let Some(role) = framework
            .spec
            .task_roles
            .iter()
            .find(|r| r.name == role_name)
        else {
            launches.push(Err((role_name, index, "its task role is gone".to_string())));
            continue;
        };
        let launch = inner
            .ports
            .hold(own_ports.of(role, index).all_ports())
            .map_err(|e| format!("cannot hold its ports again: {e}"))
            .and_then(|held| {
                RoleOf::new(inner, framework, role)
                    .launch(inner, index, &pod_uid, held, &own_ports, gpus)
            });
        launches.push(match launch {
            Ok(launch) => Ok((role_name, index, launch)),
            Err(message) => Err((role_name, index, message)),
        });
    }
    launches
}

/// What every task of one role of the open attempt shares: its pod, its init and main
/// containers, its grace, and the UIDs its tasks' environment names.
struct RoleOf<'a> {
    framework: &'a Framework,
    role: &'a pai_contract::framework::TaskRoleSpec,
    attempt: i32,
    attempt_uid: String,
    role_uid: String,
    pod: k8s_openapi::api::core::v1::PodSpec,
    init: k8s_openapi::api::core::v1::Container,
    main: k8s_openapi::api::core::v1::Container,
    grace: Duration,
}

impl<'a> RoleOf<'a> {
    fn new(
        inner: &Inner,
        framework: &'a Framework,
        role: &'a pai_contract::framework::TaskRoleSpec,
    ) -> Self {
        let no_attempt = FrameworkAttemptStatus::default();
        let attempt_status = framework
            .status
            .as_ref()
            .map_or(&no_attempt, |s| &s.attempt_status);
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
        let grace = grace_of(inner, Some(&pod));
        Self {
            framework,
            role,
            attempt: attempt_status.id,
            attempt_uid: attempt_status.instance_uid.clone().unwrap_or_default(),
            role_uid,
            pod,
            init,
            main,
            grace,
        }
    }

    /// How to start task `index`, whose pod is `pod_uid`, holding `held` of its ports
    /// (`own_ports`, every task's) and its GPUs of `gpus`.
    // Long: a task's two steps and environment in order, as the kubelet would build them
    // from the pod; container mode's additions at the end.
    fn launch(
        &self,
        inner: &Inner,
        index: u32,
        pod_uid: &str,
        held: ports::HeldPorts,
        own_ports: &pai_contract::TaskPorts,
        gpus: &Option<TaskGpus>,
    ) -> Result<Launch, String> {
        let framework = self.framework;
        let role = self.role;
        let name = framework.metadata.name.clone().unwrap_or_default();
        let attempt = self.attempt;
        let identity = Identity {
            namespace: framework.metadata.namespace.clone().unwrap_or_default(),
            framework: name.clone(),
            framework_uid: framework.metadata.uid.clone().unwrap_or_default(),
            attempt,
            attempt_uid: self.attempt_uid.clone(),
            role: role.name.clone(),
            role_uid: self.role_uid.clone(),
            index,
            task_uid: uid(),
            task_attempt_uid: pai_contract::framework::instance_uid(0, pod_uid),
            pod_name: pai_contract::framework::pod_name(&name, &role.name, index),
            pod_uid: pod_uid.to_string(),
        };
        let fc = identity.fc_env();
        let root = inner.store.task_root(&name, attempt, &role.name, index);
        let ssh_port = own_ports
            .role(&role.name)
            .get(index as usize)
            .and_then(|plan| plan.first(pai_contract::ports::SSH_LABEL));
        let mut launch = Launch {
            runtime: inner.settings.runtime.clone(),
            root: root.clone(),
            assets: inner.assets.clone(),
            peers_file: inner.store.peers_file(&name, attempt),
            pid_record: inner.store.pid_file(&name, attempt, &role.name, index),
            host_env: inner.host_env.clone(),
            init_env: {
                let mut env = init_env(inner, &name, task::container_env(fc.clone(), &self.init));
                env.push((
                    pai_contract::env::runtime::SHARED_DIR.to_string(),
                    inner.store.shared_dir(&name, attempt).display().to_string(),
                ));
                // Bound by this server until the main container starts.
                env.push((
                    pai_contract::env::runtime::PORTS_HELD.to_string(),
                    "1".to_string(),
                ));
                env
            },
            main_env: {
                let mut env = task::container_env(fc, &self.main);
                // Its ports on its own address; the ssh port handed over on stdin.
                env.push((
                    pai_contract::env::runtime::BIND_ADDRESS.to_string(),
                    LOCAL_ADDRESS.to_string(),
                ));
                env
            },
            grace: self.grace,
            spawner: inner.spawner.clone(),
            cpu_group: inner.cpu_group.clone(),
            gpus: Vec::new(),
            logs: inner.logs.clone(),
            ports: held,
            ssh_port,
            containers: None,
        };
        if let Some(gpus) = gpus {
            let devices = gpus
                .get(&(role.name.clone(), index))
                .map_or(&[][..], Vec::as_slice);
            launch.main_env.extend(crate::gpus::task_env(
                devices,
                inner.isolation.engine().is_some(),
            ));
            launch.gpus = devices.to_vec();
        }
        match inner.isolation.engine() {
            Some(engine) => {
                let storages = crate::storages::bind_mounts(
                    &self.pod,
                    &self.main,
                    &inner.settings.storages.current(),
                )?;
                in_containers(&mut launch, engine, &identity, &self.pod, &self.main);
                if let Some(containers) = launch.containers.as_mut() {
                    containers.main.mounts.extend(storages);
                }
            }
            None => {
                // The host's file system is not the task's: nothing at /job/hostfile.
                launch
                    .main_env
                    .retain(|(name, _)| name != pai_contract::training::JOB_HOSTFILE_VAR);
                // The runtime writes the task's result here, as the kubelet's file.
                launch.main_env.push((
                    pai_contract::env::runtime::TERMINATION_LOG.to_string(),
                    root.join(pai_contract::results::TERMINATION_LOG_NAME)
                        .display()
                        .to_string(),
                ));
            }
        }
        Ok(launch)
    }
}

/// A task of container mode: its init step as in host mode but with the static runtime
/// (the cluster's init image holds the same binary), its main container in its image with
/// the task's directory as the pod's volume, the kubelet's termination-log file, and the
/// role's limits.
fn in_containers(
    launch: &mut Launch,
    engine: &Arc<crate::containers::Engine>,
    identity: &Identity,
    pod: &k8s_openapi::api::core::v1::PodSpec,
    main: &k8s_openapi::api::core::v1::Container,
) {
    use crate::containers::{LABEL_JOB, LABEL_POD_UID, LABEL_SERVER, Step};
    use pai_contract::paths::RUNTIME_ROOT;
    launch.runtime = task::Runtime::binary(&engine.runtime_binary);
    let image = crate::containers::normalize_image(main.image.as_deref().unwrap_or_default());
    launch.init_env.push((
        pai_contract::env::runtime::MAIN_ROOT.to_string(),
        RUNTIME_ROOT.to_string(),
    ));
    let root = &launch.root;
    launch.containers = Some(task::Containers {
        engine: engine.clone(),
        main: Step {
            name: crate::containers::main_name(&identity.pod_uid),
            image: image.clone(),
            hostname: identity.pod_name.clone(),
            address: LOCAL_ADDRESS.into(),
            labels: vec![
                (LABEL_SERVER.to_string(), engine.server_label.clone()),
                (LABEL_JOB.to_string(), identity.framework.clone()),
                (LABEL_POD_UID.to_string(), identity.pod_uid.clone()),
            ],
            mounts: vec![
                (root.clone(), RUNTIME_ROOT.to_string(), false),
                (
                    root.join(pai_contract::results::TERMINATION_LOG_NAME),
                    pai_contract::results::KUBELET_TERMINATION_LOG.to_string(),
                    false,
                ),
            ],
            env_file: (
                root.join(crate::containers::ENV_FILE),
                format!("{RUNTIME_ROOT}/{}", crate::containers::ENV_FILE),
            ),
            env: vec![(
                pai_contract::env::runtime::ENV_FROM.to_string(),
                format!("{RUNTIME_ROOT}/{}", crate::containers::ENV_FILE),
            )],
            limits: container_limits(pod, main),
            gpus: launch.gpus.iter().map(|d| d.index).collect(),
            user: engine.known_user(&image).filter(|(uid, _)| *uid != 0),
        },
    });
}

/// The main container's CPU and memory limits and the pod's `/dev/shm` size.
fn container_limits(
    pod: &k8s_openapi::api::core::v1::PodSpec,
    main: &k8s_openapi::api::core::v1::Container,
) -> crate::containers::Limits {
    use crate::containers::quantity;
    let limit = |name: &str| {
        main.resources
            .as_ref()?
            .limits
            .as_ref()?
            .get(name)
            .and_then(|q| quantity(&q.0))
    };
    let shm = pod
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.empty_dir.as_ref())
        .find(|d| d.medium.as_deref() == Some("Memory"))
        .and_then(|d| d.size_limit.as_ref())
        .and_then(|q| quantity(&q.0));
    crate::containers::Limits {
        cpus: limit("cpu").filter(|c| *c > 0.0),
        memory: limit("memory").map(|m| m as u64).filter(|m| *m > 0),
        shm: shm.map(|s| s as u64).filter(|s| *s > 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `fw`'s three workers placed (pods `pod-0`…`pod-2`), task 2 completed when `ended`.
    fn placed(ended: bool) -> Framework {
        let mut framework = pai_test_support::frameworks::framework("fw", &[("worker", 3)]);
        let mut n = 0;
        let mut uid = || {
            n += 1;
            format!("uid-{n}")
        };
        let mut cx = lifecycle::Context {
            now: "2026-11-28T10:00:00Z".to_string(),
            conflict_delay: Duration::ZERO,
            restart: Default::default(),
            uid: &mut uid,
            note: "",
        };
        lifecycle::step(&mut framework, Event::Resumed, &mut cx);
        let placements = (0..3)
            .map(|index| Placement {
                role: "worker".into(),
                index,
                pod_uid: format!("pod-{index}"),
                address: LOCAL_ADDRESS.to_string(),
                node: "localhost".into(),
            })
            .collect();
        lifecycle::step(&mut framework, Event::Placed(placements), &mut cx);
        if ended {
            let completed = Event::TaskCompleted {
                attempt: framework.attempt_id(),
                role: "worker".into(),
                index: 2,
                code: 0,
                diagnostics: String::new(),
                message: None,
                reason: None,
            };
            lifecycle::step(&mut framework, completed, &mut cx);
        }
        framework
    }

    /// Whether each unfinished task's container is there or its main step was reached
    /// decides whether a restarted server takes the attempt up, and how.
    #[test]
    fn an_attempt_is_taken_up_when_each_task_is_followed_or_still_in_its_init_step() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let root = |_: &str, index: u32| dir.path().join(index.to_string());
        for index in 0..3 {
            std::fs::create_dir(root("worker", index)).expect("task directory");
        }
        let existing = |pods: &[u32]| -> std::collections::HashSet<String> {
            pods.iter()
                .map(|i| crate::containers::main_name(&format!("pod-{i}")))
                .collect()
        };
        let name = |i: u32| crate::containers::main_name(&format!("pod-{i}"));
        let worker = |i: u32, third: String| ("worker".to_string(), i, third);

        // Task 0 runs; tasks 1 and 2 never reached their main step: they start again.
        let adoption = adoptable(&placed(false), &existing(&[0]), root).expect("taken up");
        assert_eq!(adoption.follow, [worker(0, name(0))]);
        assert_eq!(
            adoption.again,
            [worker(1, "pod-1".into()), worker(2, "pod-2".into())]
        );
        // A completed task is neither followed nor started again.
        let adoption = adoptable(&placed(true), &existing(&[0]), root).expect("taken up");
        assert_eq!(adoption.again, [worker(1, "pod-1".into())]);
        // Task 1's container started and is gone: its end cannot be known.
        std::fs::write(root("worker", 1).join(task::MAIN_STARTED), "").expect("mark");
        assert_eq!(adoptable(&placed(false), &existing(&[0]), root), None);
        assert!(adoptable(&placed(false), &existing(&[0, 1]), root).is_some());
        // Deleted: nothing is taken up.
        let mut deleted = placed(false);
        deleted.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
        );
        assert_eq!(adoptable(&deleted, &existing(&[0, 1, 2]), root), None);
    }
}
