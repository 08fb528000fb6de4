//! Reading a task's container log: its end, or the whole of it, followed until the task
//! completes. Reads only: the driver (`controller.rs`) never waits for a reader.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use pai_contract::framework::{Framework, FrameworkState, TaskStatus};
use tokio::io::AsyncReadExt;
use tokio::sync::watch;

use super::task;
use crate::error::{Error, LogStream};
use crate::job::{Inner, Job};

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

/// The job's name and its current attempt (`NotFound` before it has one).
fn current_attempt(job: &Job) -> Result<(String, i32), Error> {
    let framework = job.framework();
    let attempt = framework
        .status
        .as_ref()
        .map(|s| s.attempt_status.id)
        .ok_or(Error::NotFound)?;
    Ok((framework.metadata.name.clone().unwrap_or_default(), attempt))
}

/// The last `max_bytes` of a task's log in the current attempt (read from the end of
/// the file: a long log costs nothing more).
pub(crate) fn log_end(
    inner: &Arc<Inner>,
    job: &Job,
    role: &str,
    index: u32,
    max_bytes: u64,
) -> Result<Vec<u8>, Error> {
    use std::io::{Read, Seek, SeekFrom};
    let (name, attempt) = current_attempt(job)?;
    let path = task::container_log(&inner.store.task_root(&name, attempt, role, index));
    let mut file = std::fs::File::open(&path).map_err(|_| Error::NotFound)?;
    let length = file
        .metadata()
        .map_err(|e| Error::Other(e.to_string()))?
        .len();
    file.seek(SeekFrom::Start(length.saturating_sub(max_bytes)))
        .map_err(|e| Error::Other(e.to_string()))?;
    let mut end = Vec::new();
    file.take(max_bytes)
        .read_to_end(&mut end)
        .map_err(|e| Error::Other(e.to_string()))?;
    Ok(end)
}

pub(crate) fn log_stream(
    inner: &Arc<Inner>,
    job: Arc<Job>,
    role: String,
    index: u32,
    follow: bool,
    earlier: Option<i32>,
) -> Result<LogStream, Error> {
    let (name, current) = current_attempt(&job)?;
    let (attempt, follow) = match earlier {
        // An earlier attempt's log is complete: nothing to follow.
        Some(attempt) if attempt < current => (attempt, false),
        _ => (current, follow),
    };
    let path = task::container_log(&inner.store.task_root(&name, attempt, &role, index));
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
            || framework.metadata.deletion_timestamp.is_some()
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
