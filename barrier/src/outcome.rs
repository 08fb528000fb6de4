//! How a barrier ends: passed, with its peers, or an error with the exit code
//! FrameworkController understands.

use pai_contract::Framework;
use pai_contract::exit::ExitCode;

use crate::peers::PeerTable;

/// The barrier passed: its peers, and the Framework as last seen when the barrier read
/// the Framework itself (not when it read a published table).
#[derive(Clone, Debug)]
pub struct Passed {
    pub framework: Option<Box<Framework>>,
    pub peers: PeerTable,
    /// The bytes of the file the table was read from (the embedded default's peer table):
    /// what the tasks of a host compute from the table once is named by them.
    pub table_bytes: Option<Vec<u8>>,
}

#[derive(Debug, thiserror::Error)]
pub enum BarrierError {
    #[error("timed out after {seconds} s: {progress}")]
    Timeout { seconds: u64, progress: String },
    #[error("framework {namespace}/{name} {what}")]
    NotFound {
        namespace: String,
        name: String,
        what: &'static str,
    },
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    Config(String),
    #[error("{0}")]
    Other(String),
}

impl BarrierError {
    /// frameworkbarrier's codes, the one mapping of barrier errors: a timeout is a
    /// transient conflict (201, retried with back-off), a missing Framework permanent
    /// (210), every other error unknown (1, retried while `retryCount` allows). The
    /// runtime's `entry` overrides one case, documented and tested there.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            BarrierError::Timeout { .. } => ExitCode::TransientConflict,
            BarrierError::NotFound { .. } => ExitCode::PermanentFailure,
            BarrierError::Forbidden(_) | BarrierError::Config(_) | BarrierError::Other(_) => {
                ExitCode::Unknown
            }
        }
    }
}
