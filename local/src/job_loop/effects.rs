//! What carries out the state machine's effects for one job ([`JobLoop`]): the slots it
//! holds, the images it pulls, its tasks started and stopped, and the Framework saved:
//! decisions at once and synced, progress spaced.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};

use pai_contract::framework::Framework;

use crate::error::Error;
use crate::job::{Inner, Job};
use crate::lifecycle::{self, Effect, Event};
use crate::task::{self, Launch, Progress, StopRequest};

use super::adoption::{Adoption, end_leftovers_of};
use super::placement::{TaskGpus, grace_of, launch_again, need_of, place};

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

/// A task's report: its attempt, role and index, and what happened.
pub(super) type Report = (i32, String, u32, Progress);

/// What follows a batch of effects.
pub(super) enum Next {
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
pub(super) struct JobLoop<'a> {
    pub(super) inner: &'a Arc<Inner>,
    pub(super) job: &'a Arc<Job>,
    pub(super) reports: mpsc::UnboundedSender<Report>,
    /// How to start each task of the attempt being placed.
    pub(super) placed: Vec<(String, u32, Launch)>,
    /// Each started task's stop request.
    pub(super) running: HashMap<(String, u32), watch::Sender<Option<StopRequest>>>,
    pub(super) timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    /// When the attempt being placed started.
    pub(super) placing_since: Option<std::time::Instant>,
    /// The attempt whose tasks were started, and when it started.
    pub(super) started: Option<(i32, std::time::Instant)>,
    /// This machine's task slots the current attempt holds (every task's), from its
    /// placement until each of its tasks has ended.
    pub(super) held: Option<crate::slots::Held>,
    /// What the attempt a restart ended held, kept for the attempt that replaces it.
    pub(super) carried: Option<crate::slots::Held>,
    /// The attempt's place in the queue for slots, while it waits.
    pub(super) waiter: Option<crate::slots::Waiter>,
    /// The attempt waits for the jobs the job waits for (`dependsOn`).
    pub(super) waits_for_jobs: bool,
    /// The attempt's images being pulled (container mode), before it is placed.
    pub(super) pulling: Option<tokio::task::JoinHandle<Result<(), String>>>,
    /// Task progress not written yet, and when it is ([`JobLoop::save_spaced`]).
    pub(super) progress_due: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    /// The last write of progress: when it ended and what it took.
    pub(super) progress_written: Option<(tokio::time::Instant, std::time::Duration)>,
    /// Whether every task of the current attempt was running (or past it) at the last
    /// batch: the batch that makes it so is written at once ([`JobLoop::save_spaced`]).
    pub(super) all_started: bool,
    /// The attempt was preempted: what it held goes to the job it gave way to, and the
    /// next attempt asks again (rather than keeping it, as a retry does).
    pub(super) preempted: bool,
}

impl<'a> JobLoop<'a> {
    /// The loop of `job`, nothing placed, held or waited for yet; its tasks report on
    /// `reports`.
    pub(super) fn new(
        inner: &'a Arc<Inner>,
        job: &'a Arc<Job>,
        reports: mpsc::UnboundedSender<Report>,
    ) -> Self {
        Self {
            inner,
            job,
            reports,
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
        }
    }

    /// The job completed and nothing of it runs, waits or is held.
    pub(super) fn is_finished(&self) -> bool {
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
    pub(super) fn observe(&self, (attempt, _, _, progress): &Report) {
        if let (Progress::Running, Some((started, since))) = (progress, self.started)
            && started == *attempt
        {
            self.inner.observed.task_start.observe(since.elapsed());
        }
    }

    /// Carries out `effects` in order; saves are merged (one write per batch, synced
    /// when any asks for it) but always happen before tasks are placed or started.
    pub(super) async fn carry_out(&mut self, effects: Vec<Effect>) -> Next {
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
    pub(super) async fn adopt(&mut self, held: crate::slots::Held, adoption: Adoption) {
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
    pub(super) async fn take_slots(&mut self) -> Option<Event> {
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
                let since = jiff::Timestamp::now().to_string();
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
    pub(super) async fn place_now(&mut self) -> Event {
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
    pub(super) fn settle(&mut self) {
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
    pub(super) async fn write_progress(&mut self) {
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

pub(super) fn not_started(message: String) -> Event {
    Event::NotStarted {
        code: lifecycle::not_started_code(),
        message,
    }
}
