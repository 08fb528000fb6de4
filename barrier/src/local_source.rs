//! Waiting without a cluster: the embedded executor keeps the Framework, status included,
//! in a JSON file that it replaces atomically on every change. The barrier applies the
//! same readiness rule to it, woken by inotify on each replacement; the same timeout and
//! exit semantics hold (missing or deleted file: not found).

use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tracing::{debug, info};

use pai_contract::Framework;

use crate::readiness::{Readiness, readiness};
use crate::{BarrierError, Passed};

/// Waits until every task of the Framework in `path` has an address.
pub fn wait(path: &Path, timeout: Duration) -> Result<Passed, BarrierError> {
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

    let mut progress: String;
    let mut first = true;
    loop {
        let framework = match read(path) {
            Ok(Some(framework)) => framework,
            Ok(None) if first => return Err(not_found("does not exist")),
            Ok(None) => return Err(not_found("was deleted while waiting")),
            Err(e) => {
                // A half-written file cannot appear (atomic replace); anything else is
                // reported and waited past.
                progress = e;
                debug!(%progress, "cannot read the Framework file yet");
                first = false;
                wait_for_change(&inotify, file_name, started, timeout, &progress)?;
                continue;
            }
        };
        first = false;
        match readiness(&framework) {
            Ok(Readiness::Ready(peers)) => {
                info!(
                    path = %path.display(),
                    waited_ms = started.elapsed().as_millis() as u64,
                    "barrier passed: every task has an address"
                );
                return Ok(Passed {
                    framework: Box::new(framework),
                    peers,
                });
            }
            Ok(Readiness::Waiting(p)) => progress = p.to_string(),
            Err(e) => progress = e.to_string(),
        }
        wait_for_change(&inotify, file_name, started, timeout, &progress)?;
    }
}

fn read(path: &Path) -> Result<Option<Framework>, String> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("{} is not a Framework: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
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
