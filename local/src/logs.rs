//! Reading a task's container log (its end, or the whole of it, followed until the task
//! completes), or one stream of its ordered log (the user command's stdout or stderr
//! alone, [`pai_contract::ordered_log`]). Reads only: the job loop (`job_loop/`) never
//! waits for a reader.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use pai_contract::framework::{Framework, FrameworkState, TaskStatus};
use pai_contract::ordered_log::{self, Stream};
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
    let framework = job.current();
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
    let end_of = |path: &Path, max_bytes: u64| -> std::io::Result<Vec<u8>> {
        let mut file = std::fs::File::open(path)?;
        let length = file.metadata()?.len();
        file.seek(SeekFrom::Start(length.saturating_sub(max_bytes)))?;
        let mut end = Vec::new();
        file.take(max_bytes).read_to_end(&mut end)?;
        Ok(end)
    };
    let end = end_of(&path, max_bytes).map_err(|_| Error::NotFound)?;
    // Just rotated: the end of the file before it comes first.
    let short = max_bytes.saturating_sub(end.len() as u64);
    if short > 0
        && let Ok(mut before) = end_of(&crate::log_rotation::numbered(&path, 1), short)
    {
        before.extend(end);
        return Ok(before);
    }
    Ok(end)
}

/// What was rotated away of a task's current log beyond its kept files, as a page says
/// it; `None` when nothing was.
pub(crate) fn rotated_away(
    inner: &Arc<Inner>,
    job: &Job,
    role: &str,
    index: u32,
) -> Option<String> {
    let (name, attempt) = current_attempt(job).ok()?;
    let path = task::container_log(&inner.store.task_root(&name, attempt, role, index));
    let dropped = crate::log_rotation::dropped(&path);
    (dropped > 0).then(|| {
        let rotation = inner.settings.log_rotation;
        format!(
            "{dropped} bytes of its earlier output were rotated away (a task's log is kept in {} files of {} KiB)",
            rotation.max_files,
            rotation.max_bytes / 1024
        )
    })
}

/// Which of a task's logs a reader wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    /// The container's log: the user command's output, both streams in order, and the
    /// runtime's lines.
    Container,
    /// One stream of the user command's output, from the ordered log.
    Stream(Stream),
}

/// What of a task's log a reader asks for.
#[derive(Clone, Copy, Debug)]
pub struct Reading {
    pub which: Which,
    /// Goes on while the task runs.
    pub follow: bool,
    /// That earlier attempt's log, whole, instead of the current one's.
    pub earlier: Option<i32>,
    /// Each line begun with its time ([`crate::log_times`]).
    pub timestamps: bool,
}

/// The ordered log of a task whose runtime root is `root`, in attempt `attempt`.
fn ordered_log(root: &Path, attempt: i32, role: &str, index: u32) -> PathBuf {
    pai_kube_runtime::layout::Task {
        framework_attempt: u32::try_from(attempt).unwrap_or(0),
        kube_role: role.to_string(),
        index,
        task_attempt: 0,
    }
    .log_dir(&pai_kube_runtime::layout::Layout::new(root))
    .join(pai_kube_runtime::logs::USER_LOG)
}

// Long: one state machine over a task's log files (which attempt, rotation, follow, the
// task's end); its states share every local.
pub(crate) fn log_stream(
    inner: &Arc<Inner>,
    job: Arc<Job>,
    role: String,
    index: u32,
    reading: Reading,
) -> Result<LogStream, Error> {
    let Reading {
        which,
        follow,
        earlier,
        timestamps,
    } = reading;
    let (name, current) = current_attempt(&job)?;
    let (attempt, follow) = match earlier {
        // An earlier attempt's log is complete: nothing to follow.
        Some(attempt) if attempt < current => (attempt, false),
        _ => (current, follow),
    };
    let kept = inner.settings.kept_attempts;
    if i64::from(attempt) <= i64::from(current) - i64::from(kept) {
        return Err(Error::Gone(format!(
            "attempt {attempt}'s log is no longer kept: this machine keeps the files of a job's last {kept} attempts (keptAttempts in the config); its summary is in the job's attempt history"
        )));
    }
    let root = inner.store.task_root(&name, attempt, &role, index);
    let ordered = ordered_log(&root, attempt, &role, index);
    let reader = |stream| match timestamps {
        true => ordered_log::Reader::stamped(stream),
        false => ordered_log::Reader::new(stream),
    };
    let (path, records) = match which {
        Which::Container => (task::container_log(&root), None),
        Which::Stream(stream) => (ordered.clone(), Some(reader(Some(stream)))),
    };
    let file = std::fs::File::open(&path).map_err(|_| Error::NotFound)?;
    // What is kept of the part before the current file comes first.
    let older = match which {
        // The container log's older files (it rotated past its size), and a word on what
        // was rotated away beyond them.
        Which::Container => container_log_before(&path, inner.settings.log_rotation),
        // The ordered log rotates at its cap, into `.1`.
        Which::Stream(_) => std::fs::read(crate::log_rotation::numbered(&path, 1)).ok(),
    };
    struct Tail {
        path: PathBuf,
        records: Option<ordered_log::Reader>,
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
        let framework = t.job.current();
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
        path,
        records,
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
                Ok(0) => {
                    // Rotated (the ordered log): go on in the new file.
                    if t.records.is_some()
                        && let Some(newer) = rotated(&t.file, &t.path).await
                    {
                        t.file = newer;
                        continue;
                    }
                    // Emptied in place (the container log past its size): go on from its
                    // new start.
                    if t.records.is_none() && emptied(&mut t.file).await {
                        continue;
                    }
                }
                Ok(n) => {
                    let out = match t.records.as_mut() {
                        Some(reader) => reader.feed(&buf[..n]),
                        None => buf[..n].to_vec(),
                    };
                    if out.is_empty() {
                        continue;
                    }
                    return Some((Ok(Bytes::from(out)), t));
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
    let whole: LogStream = match older {
        Some(bytes) if matches!(which, Which::Container) => {
            Box::pin(futures::stream::iter([Ok(Bytes::from(bytes))]).chain(stream))
        }
        Some(bytes) => {
            let first = reader(match which {
                Which::Stream(stream) => Some(stream),
                Which::Container => None,
            })
            .feed(&bytes);
            Box::pin(futures::stream::iter([Ok(Bytes::from(first))]).chain(stream))
        }
        None => Box::pin(stream),
    };
    Ok(match which {
        Which::Container if timestamps => crate::log_times::stamped(whole, ordered),
        _ => whole,
    })
}

/// Whether `file` was emptied under the reader (its length now short of the reader's
/// place): then the reader starts again at its beginning.
async fn emptied(file: &mut tokio::fs::File) -> bool {
    use tokio::io::AsyncSeekExt;
    let (Ok(at), Ok(meta)) = (file.stream_position().await, file.metadata().await) else {
        return false;
    };
    meta.len() < at && file.seek(std::io::SeekFrom::Start(0)).await.is_ok()
}

/// What the container log `path` holds before its current file: a line saying how much
/// was rotated away beyond the kept files, then the kept older files, oldest first.
fn container_log_before(path: &Path, rotation: crate::log_rotation::Rotation) -> Option<Vec<u8>> {
    let dropped = crate::log_rotation::dropped(path);
    let mut out = Vec::new();
    if dropped > 0 {
        out.extend(
            format!(
                "[rest-lite] {dropped} bytes of this task's earlier output were rotated away: this machine keeps a task's log in {} files of {} KiB (containerLogMaxFiles, containerLogMaxBytes)\n",
                rotation.max_files,
                rotation.max_bytes / 1024
            )
            .into_bytes(),
        );
    }
    for file in crate::log_rotation::older_files(path) {
        if let Ok(bytes) = std::fs::read(&file) {
            out.extend(bytes);
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The file now at `path`, if it is another than `file` (the log rotated).
async fn rotated(file: &tokio::fs::File, path: &Path) -> Option<tokio::fs::File> {
    use std::os::unix::fs::MetadataExt;
    let open = file.metadata().await.ok()?.ino();
    let now = tokio::fs::metadata(path).await.ok()?.ino();
    if open == now {
        return None;
    }
    tokio::fs::File::open(path).await.ok()
}
