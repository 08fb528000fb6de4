//! Where Frameworks live: a Kubernetes cluster (FrameworkController runs them; crate
//! `pai-cluster`), or this machine (the embedded default; crate `pai-local`). The server
//! holds no state of its own, and asks only what both do.

use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::BoxStream;

use pai_api::status::{JobState, job_state};
use pai_contract::Framework;
use pai_contract::framework::ExecutionType;
use pai_job::ssh_key::JobKey;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BackendError {
    #[error("{0}")]
    Conflict(String),
    #[error("not found")]
    NotFound,
    /// It existed and is no longer kept (an earlier attempt's pod on a cluster): the
    /// message says why.
    #[error("{0}")]
    Gone(String),
    /// The backend has no such view of a log (one stream alone, where it keeps them
    /// merged): the message says what it has instead.
    #[error("{0}")]
    NoSuchLog(String),
    #[error("the cluster rejected the Framework: {0}")]
    Invalid(String),
    /// The backend will not run the job (too large for this machine, …): the message
    /// names the limit and the setting.
    #[error("{0}")]
    Refused(String),
    #[error("the cluster at {address} cannot be reached: {message}")]
    Unavailable { address: String, message: String },
    /// The cluster answers but refuses this server's credentials: the message says
    /// since when, the likely causes and what the server does meanwhile.
    #[error("{0}")]
    CredentialsRefused(String),
    /// The job history (a cluster's database) cannot be read or written now: the
    /// message says where and why.
    #[error("{0}")]
    History(String),
    /// A change of a job's tags that cannot be made.
    #[error(transparent)]
    Tag(#[from] pai_job::tags::TagError),
    #[error("{0}")]
    Other(String),
}

/// Which part of a task's log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogPart {
    /// Its lines as `Source` keeps them: the user command's output, the runtime's lines
    /// (the init container's first, where the backend keeps them apart), or all.
    Lines(pai_contract::log_lines::Source),
    /// One stream of the user command's output (its stdout or its stderr alone), from
    /// the ordered log the runtime keeps.
    Stream(pai_contract::ordered_log::Stream),
}

/// What of a task's log a reader asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogRequest {
    pub part: LogPart,
    /// Goes on as the task writes.
    pub follow: bool,
    /// That earlier attempt's log instead of the current one's (complete: there is
    /// nothing to follow).
    pub earlier: Option<i32>,
    /// Each line begins with the time it was written (RFC 3339) and a space, as
    /// `kubectl logs --timestamps` shows it.
    pub timestamps: bool,
}

/// A task's log, chunk by chunk.
pub type LogStream = BoxStream<'static, Result<Bytes, std::io::Error>>;

/// A Framework as it changes: its state now, then after every change; `None` once it
/// is deleted, and then the stream ends.
pub type FrameworkStream = BoxStream<'static, Result<Option<Arc<Framework>>, BackendError>>;

/// A Framework that changed (or went away), by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Changed {
    pub name: String,
    /// Whether it names jobs it waits for (`dependsOn`): only such a job is looked at
    /// for itself; any job is looked at as what others wait for.
    pub waits: bool,
}

/// What a job is now, as a job that waits for it asks: its state and its Framework's
/// UID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    pub state: JobState,
    pub uid: Option<String>,
}

impl Seen {
    /// What `framework` is now.
    pub fn of(framework: &Framework) -> Self {
        Self {
            state: job_state(framework),
            uid: framework.metadata.uid.clone(),
        }
    }
}

/// The operations the jobs API needs of a place that runs Frameworks. Every method is
/// each backend's own: none has a default that would quietly do nothing on one of them.
pub trait Backend: Send + Sync + 'static {
    /// A short description for the start-up line: which backend, where.
    fn describe(&self) -> String;
    /// Appends what the backend measured itself, in Prometheus' text format, to `out`
    /// (`/metrics`): the embedded default times the tasks it starts; on a cluster
    /// FrameworkController and the kubelet start them and export their own.
    fn write_metrics(&self, out: &mut String);
    /// The user tasks run as, the one to log in to them as over ssh.
    fn task_user(&self) -> String;
    /// Where this backend runs tasks: this machine's processes, or a cluster's pods (the
    /// place a job's code and virtual cluster are checked for).
    fn runs_here(&self) -> bool;
    /// What a user submitting `spec` here should know (see [`pai_translate::warnings`]).
    fn warnings(&self, spec: &pai_translate::spec::JobSpec) -> Vec<String>;
    /// Creates the Framework and keeps its ssh key pair where its pods find it (a Secret
    /// owned by the Framework, a private file of the job); both or neither.
    fn create(&self, framework: Framework, key: JobKey) -> BoxFuture<'_, Result<(), BackendError>>;
    /// One file of the job's key material (`training::JOB_KEY_FILE`, the private half
    /// of its key pair; `JOB_HOST_PUBLIC_KEY_FILE`, its tasks' host key; …); `None`: the
    /// job has none (made before keys, or host keys, were).
    fn ssh_key<'a>(
        &'a self,
        name: &'a str,
        file: &'static str,
    ) -> BoxFuture<'a, Result<Option<String>, BackendError>>;
    fn get<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Arc<Framework>>, BackendError>>;
    /// Every Framework rest-lite made, of one user (by the user label's value) or of all,
    /// but for the jobs [`Backend::archive`] gives.
    fn list<'a>(
        &'a self,
        user: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<Arc<Framework>>, BackendError>>;
    /// Why the job of `framework` waits, as what holds it says beside its Framework (the
    /// gang scheduler's group, the queue, the scheduler's verdict on its pods, this
    /// machine's task slots); `None`: nothing does, and its Framework's state speaks. The
    /// same `Arc` until the reason changes (a job's view is made again then).
    fn held(&self, framework: &Framework) -> Option<Arc<pai_api::waiting::Waiting>>;
    /// The Framework `name` as the backend holds it now, without asking anyone (the
    /// server's copy, the embedded default's jobs): what a job's dependencies are
    /// checked against. `None`: not there, or the backend cannot tell at once.
    fn peek(&self, name: &str) -> Option<Arc<Framework>>;
    /// What job (Framework) `name` is now, as [`Backend::peek`] would tell, without a
    /// copy of it: its state and UID.
    fn seen(&self, name: &str) -> Option<Seen>;
    /// Frameworks as they change, from now on; the stream ends with the backend. A job
    /// whose Framework went into the history ([`Backend::archived`]) changes too.
    fn changes(&self) -> BoxStream<'static, crate::controller::Event<Changed>>;
    /// The row of finished job (Framework) `name`, from memory, where the backend keeps
    /// it without its Framework at hand: a cluster's job history once retention deleted
    /// the Framework, this machine's finished jobs kept deflated while unused (cold).
    /// `None` otherwise ([`Backend::list`] has the job), or where there is no such job.
    fn archived(&self, name: &str) -> Option<Arc<pai_api::jobs::JobRow>>;
    /// Every job [`Backend::archived`] tells of, by Framework name.
    fn archive(&self) -> Vec<(String, Arc<pai_api::jobs::JobRow>)>;
    /// Lets the job `name`, which waited for other jobs, run: marks its dependencies met
    /// and lifts what held its tasks. Idempotent: called again while its pods may still
    /// be held.
    fn release<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), BackendError>>;
    /// Ends the job `name`, which waited for other jobs, FAILED: one of them will never
    /// reach its state (`why`).
    fn refuse<'a>(&'a self, name: &'a str, why: &'a str)
    -> BoxFuture<'a, Result<(), BackendError>>;
    /// Whether this backend can run `framework` at all (what a machine cannot give is
    /// refused with the numbers); a submission's dry run asks it too.
    fn admit(&self, _framework: &Framework) -> Result<(), BackendError> {
        Ok(())
    }
    /// Whether reads can be answered now; the reason when not.
    fn ready(&self) -> Result<(), BackendError>;
    /// Whether the server should take requests (`/readyz`): [`Backend::ready`], and not
    /// cut off from what it runs on (a cluster that refuses its credentials, whose
    /// reads are still answered from its copy for a while).
    fn taking_requests(&self) -> Result<(), BackendError> {
        self.ready()
    }
    fn set_execution<'a>(
        &'a self,
        name: &'a str,
        execution: ExecutionType,
    ) -> BoxFuture<'a, Result<(), BackendError>>;
    /// Changes Framework `name`'s tags by `edit` (read, changed and written as one
    /// change: an edit made meanwhile is never lost); returns once readers see it.
    fn edit_tags<'a>(
        &'a self,
        name: &'a str,
        edit: &'a pai_job::tags::Edit,
    ) -> BoxFuture<'a, Result<(), BackendError>>;
    /// What `request` asks of task `pod`'s log ([`LogRequest`]); an earlier attempt's
    /// is [`BackendError::Gone`] where the backend no longer has it;
    /// [`BackendError::Refused`] where the backend cannot give that part.
    fn log<'a>(
        &'a self,
        pod: &'a str,
        request: LogRequest,
    ) -> BoxFuture<'a, Result<LogStream, BackendError>>;
    /// The end of pod `pod`'s current log: its last `lines` lines, of its last
    /// `max_bytes` bytes at most (a page shows these; the whole log is `logs`).
    fn log_tail<'a>(
        &'a self,
        pod: &'a str,
        lines: usize,
        max_bytes: usize,
    ) -> BoxFuture<'a, Result<String, BackendError>>;
    /// What is missing from the start of pod `pod`'s current log, where the backend
    /// rotated part of it away (a page says so beside the log's end); `None` when nothing
    /// is, or the backend does not know (a kubelet rotates a pod's log unseen).
    fn log_rotated<'a>(&'a self, _pod: &'a str) -> BoxFuture<'a, Option<String>> {
        Box::pin(async { None })
    }
    /// Watches Framework `name` (which exists when the watch starts).
    fn watch<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<FrameworkStream, BackendError>>;
    /// Takes from `config`, read again while the server runs, what this backend can
    /// change without a restart; returns the names of the config's fields it took.
    fn reconfigure(&self, _config: &pai_translate::config::ClusterConfig) -> Vec<&'static str> {
        Vec::new()
    }
    /// Deletes the Framework (and so its pods); `NotFound` when there is none.
    fn delete<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), BackendError>>;
}

/// The lines of `stream` that `source` keeps ([`pai_contract::log_lines`]), as they come;
/// `stamped`: each line begins with its time.
pub fn split_log(
    stream: LogStream,
    source: pai_contract::log_lines::Source,
    stamped: bool,
) -> LogStream {
    use pai_contract::log_lines::{Source, Split};
    if source == Source::All {
        return stream;
    }
    let split = if stamped {
        Split::stamped(source)
    } else {
        Split::new(source)
    };
    rewritten(stream, split)
}

/// What rewrites a log as it streams: the output of each chunk, and at the end what it
/// still held (a line cut short).
pub trait Rewrite: Send + 'static {
    fn feed(&mut self, chunk: &[u8]) -> Vec<u8>;
    fn finish(&mut self) -> Vec<u8>;
}

impl Rewrite for pai_contract::log_lines::Split {
    fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        pai_contract::log_lines::Split::feed(self, chunk)
    }

    fn finish(&mut self) -> Vec<u8> {
        pai_contract::log_lines::Split::finish(self)
    }
}

/// `stream` as `rewrite` makes it, chunk by chunk as it comes; an error ends it.
pub fn rewritten(stream: LogStream, rewrite: impl Rewrite) -> LogStream {
    use futures::StreamExt;
    let state = (stream, Some(rewrite));
    futures::stream::unfold(state, |(mut stream, mut rewrite)| async move {
        loop {
            let rewriter = rewrite.as_mut()?;
            match stream.next().await {
                Some(Ok(chunk)) => {
                    let out = rewriter.feed(&chunk);
                    if !out.is_empty() {
                        return Some((Ok(Bytes::from(out)), (stream, rewrite)));
                    }
                }
                Some(Err(e)) => return Some((Err(e), (stream, None))),
                None => {
                    let rest = rewriter.finish();
                    return (!rest.is_empty()).then(|| (Ok(Bytes::from(rest)), (stream, None)));
                }
            }
        }
    })
    .boxed()
}

/// The last `lines` lines of `bytes` (of its last `max_bytes` at most), as text.
pub fn last_lines(bytes: &[u8], lines: usize, max_bytes: usize) -> String {
    let bytes = &bytes[bytes.len().saturating_sub(max_bytes)..];
    let text = String::from_utf8_lossy(bytes);
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let start = text
        .rmatch_indices('\n')
        .nth(lines.saturating_sub(1))
        .map_or(0, |(i, _)| i + 1);
    text[start..].to_string()
}

#[cfg(test)]
mod tests {
    use super::last_lines;

    #[test]
    fn the_tail_is_the_last_lines_of_the_last_bytes() {
        assert_eq!(last_lines(b"a\nb\nc\n", 2, 100), "b\nc");
        assert_eq!(last_lines(b"a\nb\nc", 5, 100), "a\nb\nc");
        assert_eq!(last_lines(b"0123456789\nxy\n", 5, 5), "9\nxy");
        assert_eq!(last_lines(b"", 3, 10), "");
    }
}
