//! A task's `container.log` (what `logs` serves, the container runtime's log of a pod)
//! kept to a size, as the kubelet keeps a container's log (`containerLogMaxSize` 10 MiB,
//! `containerLogMaxFiles` 5): past the size, the file's bytes move to `container.log.1`
//! (the older ones to `.2`, …, the oldest beyond the count dropped, their size added to
//! `container.log.dropped`), and the file starts again empty. The task's processes hold it
//! open for appending, so it is copied and then emptied in place (as logrotate's
//! `copytruncate`): what a task writes between the copy and the truncation, a moment,
//! is lost. One sweep every [`SWEEP_EVERY`] looks at every running task's log.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the running tasks' logs are looked at.
pub const SWEEP_EVERY: Duration = Duration::from_secs(2);

/// The bound of one task's log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rotation {
    /// The size past which the log rotates.
    pub max_bytes: u64,
    /// Files kept, the current one included (at least 2).
    pub max_files: u32,
}

impl Default for Rotation {
    /// The kubelet's: 10 MiB, 5 files.
    fn default() -> Self {
        Self {
            max_bytes: 10 * 1024 * 1024,
            max_files: 5,
        }
    }
}

/// The logs of the running tasks, and their bound.
#[derive(Debug)]
pub struct Logs {
    paths: Mutex<HashSet<PathBuf>>,
    rotation: Rotation,
}

/// A log looked after while it is held; forgotten when dropped.
pub struct Watched {
    logs: Arc<Logs>,
    path: PathBuf,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.logs.paths().remove(&self.path);
    }
}

impl Logs {
    pub fn new(rotation: Rotation) -> Arc<Self> {
        Arc::new(Self {
            paths: Mutex::default(),
            rotation,
        })
    }

    fn paths(&self) -> std::sync::MutexGuard<'_, HashSet<PathBuf>> {
        self.paths.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Looks after `path` until the guard is dropped.
    pub fn watch(self: &Arc<Self>, path: PathBuf) -> Watched {
        self.paths().insert(path.clone());
        Watched {
            logs: self.clone(),
            path,
        }
    }

    /// Rotates every watched log past its size (blocking: file I/O).
    pub fn sweep(&self) {
        let paths: Vec<PathBuf> = self.paths().iter().cloned().collect();
        for path in paths {
            if let Err(e) = rotate_if_needed(&path, self.rotation) {
                tracing::warn!(log = %path.display(), error = %e, "cannot rotate a task's log");
            }
        }
    }
}

/// `path` with `suffix` added to its name.
fn suffixed(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

/// `path.k`.
pub fn numbered(path: &Path, k: u32) -> PathBuf {
    suffixed(path, &format!(".{k}"))
}

/// Where the count of bytes rotated away is kept.
pub fn dropped_file(path: &Path) -> PathBuf {
    suffixed(path, ".dropped")
}

/// The bytes of `path`'s log rotated away, beyond the kept files.
pub fn dropped(path: &Path) -> u64 {
    std::fs::read_to_string(dropped_file(path))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

/// The kept older files of `path`, oldest first.
pub fn older_files(path: &Path) -> Vec<PathBuf> {
    let mut out: Vec<(u32, PathBuf)> = (1..64)
        .map(|k| (k, numbered(path, k)))
        .take_while(|(_, p)| p.exists())
        .collect();
    out.reverse();
    out.into_iter().map(|(_, p)| p).collect()
}

/// Rotates `path` if it is past `rotation.max_bytes`; whether it did.
pub fn rotate_if_needed(path: &Path, rotation: Rotation) -> std::io::Result<bool> {
    let len = match std::fs::metadata(path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    if len <= rotation.max_bytes {
        return Ok(false);
    }
    let keep = rotation.max_files.max(2) - 1;
    let oldest = numbered(path, keep);
    if let Ok(m) = std::fs::metadata(&oldest) {
        let total = dropped(path) + m.len();
        std::fs::write(dropped_file(path), total.to_string())?;
        std::fs::remove_file(&oldest)?;
    }
    for k in (1..keep).rev() {
        let from = numbered(path, k);
        if from.exists() {
            std::fs::rename(&from, numbered(path, k + 1))?;
        }
    }
    // Copied, then emptied in place: the writers append, so they go on at its new end.
    std::fs::copy(path, numbered(path, 1))?;
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .set_len(0)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_log_past_its_size_keeps_the_newest_files_and_counts_the_rest() {
        let dir = pai_test_support::scratch("log-rotation");
        let path = dir.path().join("container.log");
        let rotation = Rotation {
            max_bytes: 10,
            max_files: 3,
        };
        // A writer that appends, as a task's processes do.
        let mut writer = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .expect("log");
        for round in 0..5u8 {
            writer.write_all(&[b'a' + round; 16]).expect("write");
            assert!(rotate_if_needed(&path, rotation).expect("rotated"));
        }
        writer.write_all(b"tail").expect("write");
        assert!(!rotate_if_needed(&path, rotation).expect("under the size"));
        assert_eq!(std::fs::read(&path).expect("current"), b"tail");
        assert_eq!(
            older_files(&path),
            [numbered(&path, 2), numbered(&path, 1)],
            "two older files: three in all"
        );
        assert_eq!(std::fs::read(numbered(&path, 1)).expect(".1"), [b'e'; 16]);
        assert_eq!(std::fs::read(numbered(&path, 2)).expect(".2"), [b'd'; 16]);
        assert_eq!(dropped(&path), 48, "rounds a, b, c");
    }
}
