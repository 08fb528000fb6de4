//! Waiting without a cluster, on files replaced atomically, woken by inotify:
//!
//! - the attempt's peer table, which the embedded executor writes once, when it has given
//!   every task its address and ports ([`wait_table`]): one read per task;
//! - or the Framework, status included, which the embedded executor rewrites on every
//!   change ([`wait`]): the readiness rule on each replacement; a missing or deleted
//!   file is "not found".
//!
//! The same timeout and exit semantics hold as on a cluster.

use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tracing::{debug, info};

use pai_contract::Framework;

use crate::outcome::{BarrierError, Passed};
use crate::peers::PeerTable;
use crate::readiness::{Readiness, readiness};

/// Waits until every task of the Framework in `path` has an address.
pub fn wait(path: &Path, timeout: Duration) -> Result<Passed, BarrierError> {
    wait_for(path, timeout, true, |bytes| {
        let framework: Framework = serde_json::from_slice(bytes)
            .map_err(|e| format!("{} is not a Framework: {e}", path.display()))?;
        match readiness(&framework).map_err(|e| e.to_string())? {
            Readiness::Ready(peers) => Ok(Ok(Passed {
                framework: Some(Box::new(framework)),
                peers,
                table_bytes: None,
            })),
            Readiness::Waiting(p) => Ok(Err(p.to_string())),
        }
    })
}

/// Waits until the peer table in `path` exists and, given `instance_uid`, belongs to that
/// attempt instance.
pub fn wait_table(
    path: &Path,
    timeout: Duration,
    instance_uid: Option<&str>,
) -> Result<Passed, BarrierError> {
    wait_for(path, timeout, false, |bytes| {
        let peers: PeerTable = serde_json::from_slice(bytes)
            .map_err(|e| format!("{} is not a peer table: {e}", path.display()))?;
        match instance_uid {
            Some(uid) if peers.attempt_instance_uid.as_deref() != Some(uid) => Ok(Err(format!(
                "{} belongs to attempt instance {:?}, not {uid:?}",
                path.display(),
                peers.attempt_instance_uid
            ))),
            _ => Ok(Ok(Passed {
                framework: None,
                peers,
                table_bytes: Some(bytes.to_vec()),
            })),
        }
    })
}

/// What one read of the file tells: passed, or why not yet (`Ok(Err(progress))`), or that
/// the file cannot be used (`Err`, waited past as well: it may be replaced).
type Verdict = Result<Result<Passed, String>, String>;

/// Reads `path` on every replacement until `judge` passes it. A missing file is "not
/// found" when `must_exist`, else waited for.
fn wait_for(
    path: &Path,
    timeout: Duration,
    must_exist: bool,
    mut judge: impl FnMut(&[u8]) -> Verdict,
) -> Result<Passed, BarrierError> {
    let started = Instant::now();
    let (dir, file_name) = match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => (
            if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            },
            name,
        ),
        _ => {
            return Err(BarrierError::Config(format!(
                "{} is not a file path",
                path.display()
            )));
        }
    };
    let not_found = |what| BarrierError::NotFound {
        namespace: "local".to_string(),
        name: path.display().to_string(),
        what,
    };
    let inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK)
        .map_err(|e| BarrierError::Other(format!("inotify: {e}")))?;
    // Watch before the first read, so no replacement falls between the two.
    inotify
        .add_watch(
            dir,
            AddWatchFlags::IN_MOVED_TO
                | AddWatchFlags::IN_CLOSE_WRITE
                | AddWatchFlags::IN_DELETE
                | AddWatchFlags::IN_MOVED_FROM,
        )
        .map_err(|e| match e {
            nix::errno::Errno::ENOENT => not_found("does not exist"),
            e => BarrierError::Other(format!("cannot watch {}: {e}", dir.display())),
        })?;

    let mut first = true;
    loop {
        let progress = match std::fs::read(path) {
            Ok(bytes) => match judge(&bytes) {
                Ok(Ok(passed)) => {
                    info!(
                        path = %path.display(),
                        waited_ms = started.elapsed().as_millis() as u64,
                        "barrier passed: every task has an address"
                    );
                    return Ok(passed);
                }
                // A half-written file cannot appear (atomic replace); anything else is
                // reported and waited past.
                Ok(Err(progress)) | Err(progress) => progress,
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if must_exist {
                    return Err(not_found(if first {
                        "does not exist"
                    } else {
                        "was deleted while waiting"
                    }));
                }
                format!("{} does not exist yet", path.display())
            }
            Err(e) => format!("cannot read {}: {e}", path.display()),
        };
        first = false;
        debug!(%progress, "not passed yet");
        wait_for_change(&inotify, file_name, started, timeout, &progress)?;
    }
}

/// Blocks until an event names `file_name`, or fails with a timeout.
fn wait_for_change(
    inotify: &Inotify,
    file_name: &std::ffi::OsStr,
    started: Instant,
    timeout: Duration,
    progress: &str,
) -> Result<(), BarrierError> {
    loop {
        let left = timeout.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Err(BarrierError::Timeout {
                seconds: timeout.as_secs(),
                progress: progress.to_string(),
            });
        }
        let millis = i32::try_from(left.as_millis().max(1)).unwrap_or(i32::MAX);
        let mut fds = [PollFd::new(inotify.as_fd(), PollFlags::POLLIN)];
        match poll(
            &mut fds,
            PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX),
        ) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => {
                return Err(BarrierError::Other(format!(
                    "waiting for the Framework file: {e}"
                )));
            }
        }
        match inotify.read_events() {
            Ok(events) if events.iter().any(|e| e.name.as_deref() == Some(file_name)) => {
                return Ok(());
            }
            Ok(_) | Err(nix::errno::Errno::EAGAIN) => continue,
            Err(e) => return Err(BarrierError::Other(format!("reading inotify events: {e}"))),
        }
    }
}
