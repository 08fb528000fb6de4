//! This machine's task slots and GPUs: gang admission of the embedded default. A job's
//! attempt starts only when every one of its tasks has a slot and the GPUs it asks for,
//! and holds them until each of its tasks has ended; one that does not fit waits, in
//! submission order (a job at the head of the queue is not overtaken by smaller ones
//! behind it, so it cannot starve), and says so. The slots are `--max-tasks`, the most
//! tasks one job may have here: as many as this machine runs at once. GPUs are whole
//! devices, each held by one task at a time, as a device plugin gives them to pods.
//!
//! Priority classes ([`JobPriority`]): waiting jobs are in order of class, then of
//! submission. The job at the head that does not fit asks running jobs of a lower class
//! to give way (the lowest class first, the most recently started first, only as many as
//! make room for it, never a job of its own class or above): each such job's attempt
//! ends as a preemption (TERM, its grace, KILL; not counted against its retries), and it
//! waits again, behind the job it made room for.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use pai_contract::priority::JobPriority;

use crate::gpus::{Assignment, GpuDevice, Gpus, Held as HeldGpu};

/// Why a job waits before its tasks start (this machine's slots or GPUs, or its images
/// being pulled), since when (RFC 3339).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Queued {
    /// The reason, as the job's WAITING state names it.
    pub reason: &'static str,
    pub message: String,
    pub since: String,
}

/// The reason of a job waiting for this machine's task slots or GPUs.
pub const QUEUED: &str = "Queued";
/// The reason of a job whose images are being pulled (a kubelet's pod says `Pulling`).
pub const PULLING_IMAGE: &str = "PullingImage";

/// What an attempt asks for.
#[derive(Clone, Debug, Default)]
pub(crate) struct Need {
    /// The job as people know it (`alice~train`), named to those waiting behind it.
    pub(crate) job: String,
    /// Its tasks in order: role, index, GPUs.
    pub(crate) tasks: Vec<(String, u32, u32)>,
    /// The GPU type it asked for (`gpuType`).
    pub(crate) gpu_type: Option<String>,
    /// The GPUs its tasks held before (saved on its Framework): taken again where free,
    /// so a task rerun after a restart keeps its devices.
    pub(crate) before: Option<Assignment>,
    /// Its priority class: its place in the queue, and whom it may preempt.
    pub(crate) priority: JobPriority,
}

impl Need {
    fn gpus(&self) -> u32 {
        self.tasks.iter().map(|t| t.2).sum()
    }
}

/// The machine's slots and GPUs.
pub(crate) struct Slots {
    state: Arc<Mutex<State>>,
    capacity: u32,
    gpus: Arc<Gpus>,
}

struct State {
    free: u32,
    /// The job holding each GPU, by its place in [`Gpus::devices`].
    gpu_holders: Vec<Option<Arc<str>>>,
    /// What each grant held now holds, by its id: whom a waiting job may preempt.
    grants: HashMap<u64, Holding>,
    /// Waiting jobs, in order of class, then of submission.
    queue: VecDeque<InQueue>,
    next_id: u64,
}

/// What one held grant holds, and how to ask its job to give it back.
struct Holding {
    job: Arc<str>,
    priority: JobPriority,
    tasks: u32,
    gpus: Vec<usize>,
    /// Taken once its job is asked to give way.
    preempt: Option<tokio::sync::oneshot::Sender<String>>,
}

impl Holding {
    /// Counts what this grant holds as free in `free` and `holders`.
    fn release(&self, free: &mut u32, holders: &mut [Option<Arc<str>>]) {
        *free += self.tasks;
        for &p in &self.gpus {
            if let Some(slot) = holders.get_mut(p) {
                *slot = None;
            }
        }
    }
}

struct InQueue {
    id: u64,
    need: Need,
    allowed: Vec<bool>,
    tx: tokio::sync::oneshot::Sender<Grant>,
}

/// What one attempt was given.
struct Grant {
    /// Its key in [`State::grants`].
    id: u64,
    tasks: u32,
    /// Where its job hears that a job of a higher class asks for it.
    preempted: Option<tokio::sync::oneshot::Receiver<String>>,
    job: Arc<str>,
    /// By task (the need's order): places in [`Gpus::devices`].
    gpus: Vec<Vec<usize>>,
}

/// Slots and GPUs held by one attempt; given back when dropped.
pub(crate) struct Held {
    grant: Grant,
    need: Vec<(String, u32)>,
    state: Arc<Mutex<State>>,
    gpus: Arc<Gpus>,
}

impl Held {
    /// Resolves, with the words for the job, when a waiting job of a higher class asks
    /// for what this holds; never, if none does.
    pub(crate) async fn preempted(&mut self) -> String {
        if let Some(asked) = self.grant.preempted.as_mut() {
            let said = asked.await;
            self.grant.preempted = None;
            if let Ok(why) = said {
                return why;
            }
        }
        std::future::pending().await
    }

    /// The GPUs each task holds, by role and index.
    pub(crate) fn by_task(&self) -> BTreeMap<(String, u32), Vec<GpuDevice>> {
        self.need
            .iter()
            .zip(&self.grant.gpus)
            .map(|(task, places)| {
                let devices = places
                    .iter()
                    .filter_map(|&p| self.gpus.devices.get(p).cloned())
                    .collect();
                (task.clone(), devices)
            })
            .collect()
    }

    /// What it holds, to be saved on the Framework for attempt `attempt`.
    pub(crate) fn assignment(&self, attempt: i32) -> Assignment {
        let mut out = Assignment {
            attempt,
            ..Assignment::default()
        };
        for (at, (role, index)) in self.need.iter().enumerate() {
            let tasks = out.tasks.entry(role.clone()).or_default();
            let index = *index as usize;
            if tasks.len() <= index {
                tasks.resize(index + 1, Vec::new());
            }
            tasks[index] = self.grant.gpus[at]
                .iter()
                .filter_map(|&p| self.gpus.devices.get(p))
                .map(|d| HeldGpu {
                    index: d.index,
                    uuid: d.uuid.clone(),
                })
                .collect();
        }
        out
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut state = lock(&self.state);
        state.give_back(&self.grant);
        state.serve(&self.gpus);
    }
}

/// A place in the queue: resolves to the slots once they are free. Dropping it leaves
/// the queue.
pub(crate) type Waiter =
    std::pin::Pin<Box<dyn std::future::Future<Output = Option<Held>> + Send + Sync>>;

/// What asking gave.
pub(crate) enum Asked {
    Held(Held),
    /// In the queue, and why.
    Queued(Waiter, Queued),
    /// More than the machine has.
    TooMany(String),
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl State {
    fn give_back(&mut self, grant: &Grant) {
        self.free += grant.tasks;
        self.grants.remove(&grant.id);
        for &place in grant.gpus.iter().flatten() {
            if let Some(holder) = self.gpu_holders.get_mut(place)
                && holder.as_deref() == Some(&*grant.job)
            {
                *holder = None;
            }
        }
    }

    /// The GPUs for `need` among the free ones `allowed`, if enough are free: by task,
    /// the ones it held before where they are free, else the lowest free ones.
    fn pick(
        &self,
        need: &Need,
        allowed: &[bool],
        devices: &[GpuDevice],
    ) -> Option<Vec<Vec<usize>>> {
        pick_among(&self.gpu_holders, need, allowed, devices)
    }

    fn take(&mut self, need: &Need, gpus: Vec<Vec<usize>>) -> Grant {
        let tasks = need.tasks.len() as u32;
        let job: Arc<str> = Arc::from(need.job.as_str());
        self.free = self.free.saturating_sub(tasks);
        for &place in gpus.iter().flatten() {
            if let Some(holder) = self.gpu_holders.get_mut(place) {
                *holder = Some(job.clone());
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        let (preempt, preempted) = tokio::sync::oneshot::channel();
        self.grants.insert(
            id,
            Holding {
                job: job.clone(),
                priority: need.priority,
                tasks,
                gpus: gpus.iter().flatten().copied().collect(),
                preempt: Some(preempt),
            },
        );
        Grant {
            id,
            tasks,
            job,
            gpus,
            preempted: Some(preempted),
        }
    }

    /// Where a job of class `priority` joins the queue: behind every job of its class or
    /// above.
    fn place_in_queue(&self, priority: JobPriority) -> usize {
        self.queue
            .iter()
            .rposition(|q| q.need.priority >= priority)
            .map_or(0, |at| at + 1)
    }

    /// Asks running jobs of a lower class than the queue's head to give way, as few as
    /// make room for it ([`State::victims`]), when the head does not fit what is free and
    /// what jobs asked already will free. The jobs asked now.
    fn preempt_for_head(&mut self, devices: &[GpuDevice]) -> Vec<(Arc<str>, JobPriority)> {
        let Some(head) = self.queue.iter().find(|q| !q.tx.is_closed()) else {
            return Vec::new();
        };
        let Some(chosen) = self.victims(&head.need, &head.allowed, devices) else {
            return Vec::new();
        };
        let why = format!(
            "preempted on this machine by job {} of priority class {}, which waits for what this job held ({}); it waits again and runs once there is room",
            head.need.job,
            head.need.priority,
            if head.need.gpus() > 0 {
                "GPUs"
            } else {
                "task slots"
            },
        );
        let mut asked = Vec::new();
        for id in chosen {
            if let Some(holding) = self.grants.get_mut(&id)
                && let Some(tx) = holding.preempt.take()
            {
                let _ = tx.send(why.clone());
                asked.push((holding.job.clone(), holding.priority));
            }
        }
        asked
    }

    /// The running jobs of a lower class than `need`'s that, stopped, make room for it:
    /// the lowest class first, then the most recently started; then each spared that is
    /// not needed, the most valuable first. None when it fits without stopping any (once
    /// the jobs asked already have given way), or would not fit even with all of them.
    fn victims(&self, need: &Need, allowed: &[bool], devices: &[GpuDevice]) -> Option<Vec<u64>> {
        let tasks = need.tasks.len() as u32;
        // What is free once the jobs asked already have given way.
        let mut free = self.free;
        let mut holders = self.gpu_holders.clone();
        for holding in self.grants.values().filter(|h| h.preempt.is_none()) {
            holding.release(&mut free, &mut holders);
        }
        let fits = |free: u32, holders: &[Option<Arc<str>>]| {
            tasks <= free && pick_among(holders, need, allowed, devices).is_some()
        };
        if fits(free, &holders) {
            return None;
        }
        let base = (free, holders.clone());
        let mut lower: Vec<(&u64, &Holding)> = self
            .grants
            .iter()
            .filter(|(_, h)| h.preempt.is_some() && h.priority < need.priority)
            .collect();
        lower.sort_by_key(|(id, h)| (h.priority, std::cmp::Reverse(**id)));
        let mut chosen = Vec::new();
        for (id, holding) in lower {
            // Of use only if the head lacks slots, or it holds GPUs the head may take.
            let useful = free < tasks || holding.gpus.iter().any(|&p| allowed[p]);
            if !useful {
                continue;
            }
            holding.release(&mut free, &mut holders);
            chosen.push(*id);
            if fits(free, &holders) {
                break;
            }
        }
        if !fits(free, &holders) {
            return None;
        }
        // A later pick can make an earlier one needless: as Kubernetes' scheduler
        // reprieves victims, each is spared, the most valuable first, if the head fits
        // without it.
        let without = |victims: &[u64]| {
            let (mut free, mut holders) = (base.0, base.1.clone());
            for holding in victims.iter().filter_map(|id| self.grants.get(id)) {
                holding.release(&mut free, &mut holders);
            }
            fits(free, &holders)
        };
        for id in chosen.clone().into_iter().rev() {
            let rest: Vec<u64> = chosen.iter().copied().filter(|c| *c != id).collect();
            if without(&rest) {
                chosen = rest;
            }
        }
        Some(chosen)
    }

    /// Admits the jobs at the head of the queue while they fit; then the head that does
    /// not fit may preempt jobs of a lower class.
    fn serve(&mut self, gpus: &Gpus) {
        self.admit(gpus);
        for (job, priority) in self.preempt_for_head(&gpus.devices) {
            tracing::info!(%job, %priority, "asked to give way to a waiting job of a higher priority class");
        }
    }

    /// Admits the jobs at the head of the queue while they fit.
    fn admit(&mut self, gpus: &Gpus) {
        while let Some(head) = self.queue.front() {
            if head.tx.is_closed() {
                self.queue.pop_front();
                continue;
            }
            if head.need.tasks.len() as u32 > self.free {
                return;
            }
            let Some(picked) = self.pick(&head.need, &head.allowed, &gpus.devices) else {
                return;
            };
            let Some(head) = self.queue.pop_front() else {
                return;
            };
            let grant = self.take(&head.need, picked);
            if let Err(grant) = head.tx.send(grant) {
                // Left the queue as it was served.
                self.give_back(&grant);
            }
        }
    }
}

/// The GPUs for `need` among those `allowed` that no one of `holders` holds, if enough
/// are: by task, the ones it held before where they are free, else the lowest free ones.
fn pick_among(
    holders: &[Option<Arc<str>>],
    need: &Need,
    allowed: &[bool],
    devices: &[GpuDevice],
) -> Option<Vec<Vec<usize>>> {
    let mut taken: Vec<bool> = holders
        .iter()
        .zip(allowed)
        .map(|(holder, &ok)| holder.is_some() || !ok)
        .collect();
    let free = taken.iter().filter(|&&t| !t).count();
    if free < need.gpus() as usize {
        return None;
    }
    let place_of = |uuid: &str| devices.iter().position(|d| d.uuid == uuid);
    let mut out = Vec::with_capacity(need.tasks.len());
    for (role, index, count) in &need.tasks {
        let before: Vec<usize> = need
            .before
            .as_ref()
            .map(|b| b.task(role, *index))
            .unwrap_or_default()
            .iter()
            .filter_map(|h| place_of(&h.uuid))
            .collect();
        let mine = if before.len() == *count as usize && before.iter().all(|&p| !taken[p]) {
            before
        } else {
            (0..taken.len())
                .filter(|&p| !taken[p])
                .take(*count as usize)
                .collect()
        };
        for &p in &mine {
            taken[p] = true;
        }
        out.push(mine);
    }
    Some(out)
}

impl Slots {
    pub(crate) fn new(capacity: u32, gpus: Arc<Gpus>) -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                free: capacity,
                gpu_holders: vec![None; gpus.devices.len()],
                grants: HashMap::new(),
                queue: VecDeque::new(),
                next_id: 0,
            })),
            capacity,
            gpus,
        }
    }

    /// The machine's GPUs.
    pub(crate) fn gpus(&self) -> &Gpus {
        &self.gpus
    }

    /// Asks for what `need` says: held at once if it is free and nobody waits before;
    /// else a place in the queue.
    pub(crate) async fn ask(&self, need: Need) -> Asked {
        let tasks = need.tasks.len() as u32;
        if tasks > self.capacity {
            return Asked::TooMany(format!(
                "the job has {tasks} tasks; this machine runs at most {} tasks at once (rest-lite serve --max-tasks)",
                self.capacity
            ));
        }
        let per_task: Vec<u32> = need.tasks.iter().map(|t| t.2).collect();
        if let Some(why) = self.gpus.refusal(&per_task, need.gpu_type.as_deref()) {
            return Asked::TooMany(why);
        }
        let allowed = self.gpus.allowed(need.gpu_type.as_deref());
        let mut state = lock(&self.state);
        // Nobody of its class or above waits before it.
        let ahead = state.place_in_queue(need.priority);
        if ahead == 0
            && tasks <= state.free
            && let Some(picked) = state.pick(&need, &allowed, &self.gpus.devices)
        {
            let grant = state.take(&need, picked);
            return Asked::Held(self.held(grant, &need));
        }
        let mut message = self.why_waiting(&state, &need, &allowed, ahead);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let id = state.next_id;
        state.next_id += 1;
        let order: Vec<(String, u32)> = need.tasks.iter().map(|t| (t.0.clone(), t.1)).collect();
        state.queue.insert(
            ahead,
            InQueue {
                id,
                need,
                allowed,
                tx,
            },
        );
        let asked = state.preempt_for_head(&self.gpus.devices);
        drop(state);
        // Preempted for it only when it is the head.
        if ahead == 0 && !asked.is_empty() {
            let jobs: Vec<String> = asked
                .iter()
                .map(|(job, priority)| format!("{job} ({priority})"))
                .collect();
            message.push_str(&format!(
                "; the running jobs of a lower priority class that hold what it needs are preempted for it: {}",
                jobs.join(", ")
            ));
        }
        let mut pending = Pending {
            rx: Some(rx),
            id,
            state: self.state.clone(),
            gpus: self.gpus.clone(),
        };
        let (state, gpus) = (self.state.clone(), self.gpus.clone());
        let waiter: Waiter = Box::pin(async move {
            let grant = pending.receive().await?;
            Some(Held {
                grant,
                need: order,
                state,
                gpus,
            })
        });
        let queued = Queued {
            reason: QUEUED,
            message,
            since: jiff::Timestamp::now().to_string(),
        };
        Asked::Queued(waiter, queued)
    }

    fn held(&self, grant: Grant, need: &Need) -> Held {
        Held {
            grant,
            need: need.tasks.iter().map(|t| (t.0.clone(), t.1)).collect(),
            state: self.state.clone(),
            gpus: self.gpus.clone(),
        }
    }

    /// The slots and exactly the GPUs `need` held before, at once and whatever else holds
    /// them: a followed attempt's tasks (their containers outlived the previous server)
    /// run still and hold them.
    pub(crate) fn hold_exactly(&self, need: Need) -> Held {
        let mut state = lock(&self.state);
        let devices = &self.gpus.devices;
        let picked: Vec<Vec<usize>> = need
            .tasks
            .iter()
            .map(|(role, index, _)| {
                need.before
                    .as_ref()
                    .map(|b| b.task(role, *index))
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|h| devices.iter().position(|d| d.uuid == h.uuid))
                    .collect()
            })
            .collect();
        for &p in picked.iter().flatten() {
            if let Some(other) = &state.gpu_holders[p] {
                tracing::warn!(gpu = %devices[p].uuid, holder = %other, job = %need.job, "a followed task holds a GPU another job holds too");
            }
        }
        let grant = state.take(&need, picked);
        self.held(grant, &need)
    }

    /// Why `need` waits, as its WAITING state says it.
    fn why_waiting(&self, state: &State, need: &Need, allowed: &[bool], ahead: usize) -> String {
        let tasks = need.tasks.len() as u32;
        let behind = match ahead {
            0 => String::new(),
            1 => ", behind 1 other waiting job".to_string(),
            n => format!(", behind {n} other waiting jobs"),
        };
        let wanted = need.gpus() as usize;
        let free_gpus = state
            .gpu_holders
            .iter()
            .zip(allowed)
            .filter(|(h, ok)| h.is_none() && **ok)
            .count();
        if tasks <= state.free && free_gpus < wanted {
            let mut holders: Vec<(&str, usize)> = Vec::new();
            for holder in state
                .gpu_holders
                .iter()
                .zip(allowed)
                .filter_map(|(h, ok)| h.as_deref().filter(|_| *ok))
            {
                match holders.iter_mut().find(|(name, _)| *name == holder) {
                    Some((_, n)) => *n += 1,
                    None => holders.push((holder, 1)),
                }
            }
            let held_by = holders
                .iter()
                .map(|(name, n)| format!("{name} ({n})"))
                .collect::<Vec<_>>()
                .join(", ");
            let kind = need
                .gpu_type
                .as_deref()
                .filter(|t| self.gpus.types.contains_key(*t))
                .map_or(String::new(), |t| format!(" of type {t}"));
            return format!(
                "the job needs {}{kind}, {free_gpus} free (held by {held_by}) when it was queued{behind}: it starts, whole, when enough are freed",
                crate::gpus::count(wanted as u64)
            );
        }
        let in_use = self.capacity - state.free;
        format!(
            "this machine runs at most {} tasks at once (rest-lite serve --max-tasks); the job needs {tasks} and {in_use} were in use by {} {} when it was queued{behind}: it starts, whole, when enough end",
            self.capacity,
            state.grants.len(),
            if state.grants.len() == 1 {
                "job"
            } else {
                "jobs"
            },
        )
    }
}

/// A queued request until it is served: dropped unserved, it leaves the queue; dropped
/// with its grant sent but not read, it gives the grant back.
struct Pending {
    rx: Option<tokio::sync::oneshot::Receiver<Grant>>,
    id: u64,
    state: Arc<Mutex<State>>,
    gpus: Arc<Gpus>,
}

impl Pending {
    /// The grant, once sent; `None` when the queue is gone.
    async fn receive(&mut self) -> Option<Grant> {
        let grant = self.rx.as_mut()?.await.ok()?;
        self.rx = None;
        Some(grant)
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else {
            return;
        };
        rx.close();
        let mut state = lock(&self.state);
        if let Ok(grant) = rx.try_recv() {
            state.give_back(&grant);
        }
        state.queue.retain(|q| q.id != self.id);
        // The head may have left: whoever is behind it may fit now.
        state.serve(&self.gpus);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn need(job: &str, tasks: u32, gpus: u32) -> Need {
        Need {
            job: job.to_string(),
            tasks: (0..tasks)
                .map(|i| ("worker".to_string(), i, gpus))
                .collect(),
            ..Need::default()
        }
    }

    fn machine(gpus: u32) -> Arc<Gpus> {
        Arc::new(Gpus {
            devices: (0..gpus)
                .map(|index| GpuDevice {
                    index,
                    uuid: format!("GPU-{index}"),
                    memory_mib: 0,
                    model: "test".to_string(),
                })
                .collect(),
            types: Default::default(),
        })
    }

    fn of_class(mut need: Need, priority: JobPriority) -> Need {
        need.priority = priority;
        need
    }

    #[tokio::test]
    async fn waiting_jobs_start_by_class_then_submission() {
        let slots = Slots::new(2, machine(0));
        let Asked::Held(holder) = slots
            .ask(of_class(need("prod", 2, 0), JobPriority::Prod))
            .await
        else {
            panic!("held");
        };
        let ask = |name: &str, class| slots.ask(of_class(need(name, 2, 0), class));
        let Asked::Queued(mut oppo, _) = ask("oppo", JobPriority::Oppo).await else {
            panic!("queued");
        };
        let Asked::Queued(mut test, why) = ask("test", JobPriority::Test).await else {
            panic!("queued");
        };
        assert!(
            !why.message.contains("behind"),
            "ahead of oppo: {}",
            why.message
        );
        let Asked::Queued(mut later, why) = ask("test-later", JobPriority::Test).await else {
            panic!("queued");
        };
        assert!(why.message.contains("behind 1 other"), "{}", why.message);
        drop(holder);
        let first = test.as_mut().await.expect("test first");
        assert!(futures::poll!(oppo.as_mut()).is_pending());
        assert!(futures::poll!(later.as_mut()).is_pending());
        drop(first);
        let second = later.as_mut().await.expect("then the later test job");
        drop(second);
        assert!(oppo.await.is_some(), "oppo last");
    }

    #[tokio::test]
    async fn a_waiting_job_preempts_the_lowest_newest_holders_it_needs_and_no_equal() {
        let slots = Slots::new(8, machine(4));
        let held = |asked: Asked| match asked {
            Asked::Held(held) => held,
            _ => panic!("held at once"),
        };
        let mut old_oppo = held(
            slots
                .ask(of_class(need("old-oppo", 1, 1), JobPriority::Oppo))
                .await,
        );
        let mut new_oppo = held(
            slots
                .ask(of_class(need("new-oppo", 1, 1), JobPriority::Oppo))
                .await,
        );
        let mut test = held(
            slots
                .ask(of_class(need("test", 1, 1), JobPriority::Test))
                .await,
        );
        let mut prod = held(
            slots
                .ask(of_class(need("prod", 1, 1), JobPriority::Prod))
                .await,
        );
        // A test job waiting for 2 GPUs takes them from the oppo jobs, not from its equal.
        let Asked::Queued(waiter, why) = slots
            .ask(of_class(need("test-2", 1, 2), JobPriority::Test))
            .await
        else {
            panic!("queued");
        };
        assert!(
            why.message
                .contains("preempted for it: new-oppo (oppo), old-oppo (oppo)"),
            "{}",
            why.message
        );
        let said = new_oppo.preempted().await;
        assert!(
            said.contains("by job test-2 of priority class test"),
            "{said}"
        );
        old_oppo.preempted().await;
        for other in [&mut test, &mut prod] {
            assert!(futures::poll!(std::pin::pin!(other.preempted())).is_pending());
        }
        drop(new_oppo);
        drop(old_oppo);
        let given = waiter.await.expect("the GPUs the oppo jobs gave back");
        assert_eq!(given.by_task().values().flatten().count(), 2);
        // Only one lower job is needed for one GPU: the newest of the lowest class.
        let Asked::Queued(_waiter, why) = slots
            .ask(of_class(need("prod-2", 1, 1), JobPriority::Prod))
            .await
        else {
            panic!("queued");
        };
        assert!(why.message.ends_with("test-2 (test)"), "{}", why.message);
        assert!(futures::poll!(std::pin::pin!(test.preempted())).is_pending());
    }

    #[tokio::test]
    async fn a_victim_a_later_pick_makes_needless_is_spared() {
        let slots = Slots::new(3, machine(0));
        let Asked::Held(mut big) = slots
            .ask(of_class(need("big-test", 2, 0), JobPriority::Test))
            .await
        else {
            panic!("held at once");
        };
        let Asked::Held(mut small) = slots
            .ask(of_class(need("small-oppo", 1, 0), JobPriority::Oppo))
            .await
        else {
            panic!("held at once");
        };
        // The oppo job is picked first and frees 1 of the 2 slots needed; the test job
        // frees 2 alone, so the oppo job is spared.
        let Asked::Queued(_waiter, why) = slots
            .ask(of_class(need("prod", 2, 0), JobPriority::Prod))
            .await
        else {
            panic!("queued");
        };
        assert!(
            why.message.ends_with("preempted for it: big-test (test)"),
            "{}",
            why.message
        );
        big.preempted().await;
        assert!(futures::poll!(std::pin::pin!(small.preempted())).is_pending());
    }

    #[tokio::test]
    async fn jobs_are_admitted_whole_and_in_order() {
        let slots = Slots::new(10, machine(0));
        let Asked::Held(first) = slots.ask(need("a", 6, 0)).await else {
            panic!("6 of 10 free slots are held at once");
        };
        let Asked::Queued(mut big, why) = slots.ask(need("b", 8, 0)).await else {
            panic!("8 more do not fit");
        };
        assert!(
            why.message
                .contains("the job needs 8 and 6 were in use by 1 job"),
            "{}",
            why.message
        );
        // A small job behind the big one waits too, though 4 slots are free.
        let Asked::Queued(mut small, why) = slots.ask(need("c", 2, 0)).await else {
            panic!("a smaller job does not overtake the queue");
        };
        assert!(
            why.message.contains("behind 1 other waiting job"),
            "{}",
            why.message
        );
        assert!(futures::poll!(big.as_mut()).is_pending());
        drop(first);
        let held_big = big.await.expect("the big job gets its slots");
        assert!(
            futures::poll!(small.as_mut()).is_ready(),
            "2 of the 2 left fit"
        );
        drop(held_big);
        assert!(matches!(
            slots.ask(need("d", 11, 0)).await,
            Asked::TooMany(_)
        ));
        assert!(lock(&slots.state).queue.is_empty());
    }

    #[tokio::test]
    async fn a_job_that_leaves_the_queue_lets_the_next_go() {
        let slots = Slots::new(4, machine(0));
        let Asked::Held(held) = slots.ask(need("a", 4, 0)).await else {
            panic!()
        };
        let Asked::Queued(gone, _) = slots.ask(need("b", 3, 0)).await else {
            panic!()
        };
        let Asked::Queued(next, _) = slots.ask(need("c", 1, 0)).await else {
            panic!()
        };
        drop(gone);
        drop(held);
        assert!(next.await.is_some());
    }

    #[tokio::test]
    async fn gpus_are_disjoint_and_a_job_waits_for_them_naming_their_holder() {
        let slots = Slots::new(100, machine(3));
        let Asked::Held(first) = slots.ask(need("alice~a", 2, 1)).await else {
            panic!("2 of 3 GPUs are free");
        };
        let of = |held: &Held, index: u32| held.by_task()[&("worker".to_string(), index)].clone();
        let (zero, one) = (of(&first, 0), of(&first, 1));
        assert_eq!((zero.len(), one.len()), (1, 1));
        assert_ne!(zero[0].uuid, one[0].uuid);
        let Asked::Queued(second, why) = slots.ask(need("bob~b", 2, 1)).await else {
            panic!("1 GPU is left for 2 tasks");
        };
        assert!(
            why.message
                .contains("the job needs 2 GPUs, 1 free (held by alice~a (2))"),
            "{}",
            why.message
        );
        let freed: Vec<String> = [zero, one].concat().into_iter().map(|d| d.uuid).collect();
        drop(first);
        let second = second.await.expect("runs on the freed GPUs");
        let got: Vec<String> = [of(&second, 0), of(&second, 1)]
            .concat()
            .into_iter()
            .map(|d| d.uuid)
            .collect();
        assert_eq!(got, freed, "the lowest free ones");
        match slots.ask(need("carol~c", 1, 4)).await {
            Asked::TooMany(why) => assert!(why.contains("this machine has 3"), "{why}"),
            _ => panic!("4 GPUs never fit 3"),
        }
    }

    #[tokio::test]
    async fn a_rerun_takes_its_gpus_again_and_a_followed_one_exactly_them() {
        let slots = Slots::new(100, machine(3));
        let mut before = Assignment::default();
        before.tasks.insert(
            "worker".to_string(),
            vec![vec![HeldGpu {
                index: 2,
                uuid: "GPU-2".to_string(),
            }]],
        );
        let of = |held: &Held, index: u32| held.by_task()[&("worker".to_string(), index)].clone();
        let rerun = Need {
            before: Some(before.clone()),
            ..need("a", 1, 1)
        };
        let Asked::Held(held) = slots.ask(rerun).await else {
            panic!()
        };
        assert_eq!(of(&held, 0)[0].uuid, "GPU-2");
        assert_eq!(held.assignment(1).task("worker", 0)[0].index, 2);
        drop(held);
        let followed = Need {
            before: Some(before),
            ..need("a", 1, 1)
        };
        let held = slots.hold_exactly(followed);
        assert_eq!(of(&held, 0)[0].uuid, "GPU-2");
        // The others take the rest, not GPU-2.
        let Asked::Held(other) = slots.ask(need("b", 2, 1)).await else {
            panic!()
        };
        let uuids: Vec<String> = [of(&other, 0), of(&other, 1)]
            .concat()
            .into_iter()
            .map(|d| d.uuid)
            .collect();
        assert_eq!(uuids, ["GPU-0", "GPU-1"]);
    }
}
