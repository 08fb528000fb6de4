//! What the embedded default's operations fail with, and the streams they answer.

use bytes::Bytes;
use futures::stream::BoxStream;
use pai_contract::Framework;

/// Why an operation of the embedded default failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The name is taken (or still being freed).
    #[error("{0}")]
    Conflict(String),
    /// No such job (or task).
    #[error("not found")]
    NotFound,
    /// The job cannot run here (too large for this machine, …): the message says why.
    #[error("{0}")]
    Refused(String),
    /// It existed and its files are no longer kept (an old attempt's log).
    #[error("{0}")]
    Gone(String),
    /// Anything else (I/O on the state directory, …).
    #[error("{0}")]
    Other(String),
}

/// A task's container log, as it grows.
pub type LogStream = BoxStream<'static, Result<Bytes, std::io::Error>>;

/// A Framework as it changes: its state now, then after every change; `None` once it
/// is deleted, and then the stream ends.
pub type FrameworkStream = BoxStream<'static, Result<Option<std::sync::Arc<Framework>>, Error>>;
