//! Following a job from the command line (`rest-lite run`, `rest-lite submit --follow`):
//! every task's output as it comes, then the job's outcome as the exit code.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use axum::body::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::sync::{mpsc, watch};

use super::in_order::Told;

use pai_api::status::{JobState, JobView};
use pai_client::{Client, ClientError};

/// What Ctrl-C does to a followed job.
pub enum OnInterrupt {
    /// Stops it, and follows it to its end (`run`: the job lives in this process).
    Stop,
    /// Leaves it running and stops following, as `kubectl logs -f` does (`submit
    /// --follow`: the job is the server's); `flags` reach the same server and user.
    Detach { flags: String },
}

/// Follows `job` to its end: every task's output (with `verbose`, the runtime's lines
/// too), line by line with its name in front, then the job's state on standard error.
/// Ctrl-C does what `interrupt` says. Returns the exit status for the job's outcome
/// ([`super::exit_status`]; 130 when left here).
// Long: one loop of the job's changes and Ctrl-C, beside the task followers it starts.
pub async fn follow(
    client: &Client,
    user: &str,
    job: &str,
    verbose: bool,
    interrupt: OnInterrupt,
) -> Result<ExitCode> {
    let source = if verbose {
        pai_client::Source::All
    } else {
        pai_client::Source::User
    };
    // In place before any output, so a Ctrl-C once something shows is never the default
    // death.
    let mut ctrl_c = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut changes = client.watch(user, job).await?;
    let first = match changes.next().await {
        Some(view) => view?,
        None => anyhow::bail!("job {job} went away before it could be followed"),
    };
    let mut notes = super::human::Notes::default();
    notes.see(job, &first);
    let (views, latest) = watch::channel(first.clone());
    let (tell, printer) = super::in_order::printer(std::io::stdout());
    let mut followers = Vec::new();
    for (role, detail) in &first.task_roles {
        for index in 0..detail.task_statuses.len() as u32 {
            followers.push(tokio::spawn(print_task(
                client.clone(),
                Task {
                    user: user.to_string(),
                    job: job.to_string(),
                    role: role.clone(),
                    index,
                },
                source,
                latest.clone(),
                tell.clone(),
            )));
        }
    }
    drop((latest, tell));
    let mut interrupted = false;
    let mut last = Some(first);
    loop {
        tokio::select! {
            _ = ctrl_c.recv(), if !interrupted => {
                interrupted = true;
                match &interrupt {
                    OnInterrupt::Stop => {
                        tell!("rest-lite: stopping {job}");
                        client.stop(user, job).await?;
                    }
                    OnInterrupt::Detach { flags } => {
                        use super::invocation::command;
                        tell!(
                            "rest-lite: no longer following {job}; it goes on. {}{flags} shows it, {}{flags} stops it",
                            command(&["status", job]),
                            command(&["stop", job]),
                        );
                        return Ok(ExitCode::from(super::exit_status::STOPPED_HERE));
                    }
                }
            }
            change = changes.next() => match change {
                Some(view) => {
                    let view = view?;
                    notes.see(job, &view);
                    views.send_replace(view.clone());
                    last = Some(view);
                }
                None => break,
            }
        }
    }
    // Followers print what is left of their logs, then end.
    drop(views);
    notes.summary(job);
    let view = last.ok_or_else(|| anyhow::anyhow!("job {job} was deleted while it ran"))?;
    // The followers end with their tasks' logs; the printer once they all have.
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        futures::future::join_all(followers).await;
        let _ = printer.await;
    })
    .await;
    let status = &view.job_status;
    let state = status.state;
    if !state.is_final() {
        anyhow::bail!(
            "job {job} went away while {state} (deleted, or the server stopped answering)"
        );
    }
    // `run` said at its start where the job runs: its diagnostics' note on it is not
    // said again.
    let said_where = matches!(interrupt, OnInterrupt::Stop);
    Ok(outcome(job, &view, interrupted, said_where))
}

/// Says how a job that reached its final state ended, on standard error, and returns the
/// exit status for it ([`super::exit_status`]).
/// `said_where`: where the job ran was said already (`run`), so the embedded default's
/// note on it is left out of the diagnostics.
pub fn outcome(job: &str, view: &JobView, interrupted: bool, said_where: bool) -> ExitCode {
    let status = &view.job_status;
    let state = status.state;
    let diagnostics = status.app_exit_diagnostics.as_deref().map(|d| {
        match d.find(pai_local::WHERE_IT_RAN).filter(|_| said_where) {
            Some(at) => d[..at].trim_end(),
            None => d,
        }
    });
    tell!(
        "rest-lite: job {job} {state} (exit code {}, {} retr{}){}",
        status
            .app_exit_code
            .map_or_else(|| "none".to_string(), |c| c.to_string()),
        status.retries,
        if status.retries == 1 { "y" } else { "ies" },
        diagnostics
            .filter(|d| !d.is_empty())
            .map(|d| format!(": {d}"))
            .unwrap_or_default()
    );
    if let Some(cause) = super::human::unsaid_cause(status) {
        tell!("rest-lite: cause ({}): {}", cause.pattern, cause.line);
    }
    super::exit_status::of(state, status.app_exit_code, interrupted)
}

/// A task of the followed job.
struct Task {
    user: String,
    job: String,
    role: String,
    index: u32,
}

/// Follows one task's output, line by line with its time, attempt after attempt, and
/// tells the printer each line with the task's name in front. `views` carries the job's
/// latest view (from the one watch of the job); it closes when the job has reached its
/// final state.
async fn print_task(
    client: Client,
    task: Task,
    source: pai_client::Source,
    mut views: watch::Receiver<JobView>,
    tell: mpsc::Sender<Told>,
) {
    let Task {
        user,
        job,
        role,
        index,
    } = task;
    let prefix: Arc<str> = Arc::from(format!("[{role}-{index}] "));
    let mut printed_attempt: Option<i32> = None;
    let mut closed = false;
    // Whether this task's log is not open while its attempt's tasks may be writing.
    let mut awaiting = false;
    let mut set_awaiting = async |now: bool| {
        if std::mem::replace(&mut awaiting, now) != now {
            let _ = tell.send(Told::Awaiting(now)).await;
        }
    };
    loop {
        let (attempt, started) = {
            let view = views.borrow_and_update();
            let state = view
                .task_roles
                .get(&role)
                .and_then(|r| r.task_statuses.get(index as usize))
                .map(|t| t.task_state);
            (
                view.job_status.retries,
                state.is_some_and(|s| s != JobState::Waiting),
            )
        };
        // The tasks of an attempt start together, behind its barrier: once one has started,
        // this one may be writing, whatever the view says of it yet.
        let peers_started = views.borrow().task_roles.values().any(|r| {
            r.task_statuses
                .iter()
                .any(|t| t.task_state != JobState::Waiting)
        });
        set_awaiting(printed_attempt != Some(attempt) && peers_started && !closed).await;
        if printed_attempt != Some(attempt) && (started || closed) {
            let _ = tell.send(Told::Opening).await;
            let asked = pai_client::Lines::Source(source).stamped();
            let opened = client.logs(&user, &job, &role, index, true, asked).await;
            let _ = tell.send(Told::Opened(opened.is_ok())).await;
            if let Ok(stream) = opened {
                printed_attempt = Some(attempt);
                set_awaiting(false).await;
                tell_lines(stream, &prefix, &tell).await;
                continue;
            }
        }
        if closed {
            set_awaiting(false).await;
            return;
        }
        // Closed: one last look at the final view, then leave.
        closed = views.changed().await.is_err();
    }
}

/// Tells the printer each line of `stream` (whose lines begin with their time).
async fn tell_lines(
    stream: BoxStream<'static, Result<Bytes, ClientError>>,
    prefix: &Arc<str>,
    tell: &mpsc::Sender<Told>,
) {
    let mut lines = pai_client::lines(stream);
    let mut last = jiff::Timestamp::UNIX_EPOCH;
    while let Some(Ok(line)) = lines.next().await {
        let (time, line) = match pai_client::stamp_of(&line) {
            Some((time, rest)) => (time, rest.to_vec()),
            // A line without a time: just after the one before, and never before it was
            // read (a line is read after it was written).
            None => (last.max(jiff::Timestamp::now()), line.to_vec()),
        };
        last = time;
        let told = Told::Line {
            prefix: prefix.clone(),
            time,
            line,
        };
        if tell.send(told).await.is_err() {
            return;
        }
    }
}
