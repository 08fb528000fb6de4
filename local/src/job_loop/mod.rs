//! One job's loop: what carries [`crate::lifecycle`]'s decisions out. It feeds the state machine
//! what happens (task reports, stop and delete requests, the retry timer) and carries
//! out what it decides ([`effects`]): placing and starting tasks ([`placement`]),
//! signalling them, saving the Framework, waiting before a retry, removing a deleted job.
//! A restarted server takes up what the previous one left ([`adoption`]).

mod adoption;
mod effects;
mod placement;

use std::sync::Arc;

use tokio::sync::mpsc;

use pai_contract::framework::Framework;

use super::lifecycle::{self, Effect, Event};
use crate::job::{Command, Inner, Job, uid};
use crate::task::Progress;

use effects::{JobLoop, Next, Report, not_started};

pub(crate) use adoption::{Adoption, end_leftovers, follow_or_remove};
pub(crate) use placement::{LOCAL_ADDRESS, need_of};

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

/// How a job's loop starts.
pub(crate) enum Resume {
    /// Submitted now, or nothing of its attempt runs or is held.
    Fresh,
    /// Its attempt's containers outlived the previous server and are followed, and its
    /// tasks still in their init step start again ([`adoption`]), with what they hold,
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
    let mut job_loop = JobLoop::new(&inner, &job, reports_tx);
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
        let effects = decide(&inner, &job, &note, &mut events);
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
        if job_loop.is_finished() && close_if_idle(&job, &commands) {
            tracing::debug!(job = %name, "finished; its loop ends until a command comes");
            drop(job_loop);
            freeze(&inner, &job).await;
            return;
        }
        let timer = when_some(job_loop.timer.as_mut());
        let progress_due = when_some(job_loop.progress_due.as_mut());
        let admitted = when_some(job_loop.waiter.as_mut());
        let pulled = when_some(job_loop.pulling.as_mut());
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

/// Applies `events` to the job's Framework (the state machine's only input): what to do.
fn decide(inner: &Inner, job: &Job, note: &str, events: &mut Vec<Event>) -> Vec<Effect> {
    let mut guard = job.framework();
    let framework = Arc::make_mut(&mut guard);
    let mut uids = uid;
    let mut cx = lifecycle::Context {
        now: jiff::Timestamp::now().to_string(),
        conflict_delay: inner.settings.conflict_delay,
        restart: inner.settings.restart,
        uid: &mut uids,
        note,
    };
    events
        .drain(..)
        .flat_map(|event| lifecycle::step(framework, event, &mut cx))
        .collect()
}

/// Whether a finished job's loop may end: no command came meanwhile. Then its sender is
/// closed under the lock every sender takes, so none is lost in between: the next
/// command starts a loop again.
fn close_if_idle(job: &Job, commands: &mpsc::UnboundedReceiver<Command>) -> bool {
    let mut sender = job.commands();
    let idle = commands.is_empty();
    if idle {
        *sender = None;
    }
    idle
}

/// A finished job's loop has ended: what it keeps cold is made on the keeper's thread,
/// beside the other finished jobs' (see `pai_backend::memory::keeper`); what it held is
/// dropped here, where it was made, and its memory given back at the next look.
async fn freeze(inner: &Inner, job: &Arc<Job>) {
    let job = job.clone();
    if let Some(held) = pai_backend::memory::keeper::make(move || job.freeze()).await {
        drop(held);
        inner.trimmer.jobs_ended();
    }
}

/// `future`'s output, or never where there is none (a `select!` arm that cannot fire).
async fn when_some<F: std::future::Future + Unpin>(future: Option<&mut F>) -> F::Output {
    match future {
        Some(future) => future.await,
        None => std::future::pending().await,
    }
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
