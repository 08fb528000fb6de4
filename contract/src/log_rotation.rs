//! A task's container log kept to a size, as the kubelet keeps a container's log
//! (`containerLogMaxSize` 10 MiB, `containerLogMaxFiles` 5): past the size, the file's
//! bytes move to `<log>.1` (the older ones to `.2`, …, the oldest beyond the count
//! dropped, their size added to `<log>.dropped`), and the file starts again empty.
//!
//! The task's processes hold the log open for appending, so it is copied and then emptied
//! in place (as logrotate's `copytruncate`): what a task writes between the copy and the
//! truncation, a moment, is lost. Two rotate the same log on the embedded default (the
//! runtime as it echoes, the server's sweep for what reaches the file past the runtime):
//! each rotation holds an exclusive lock on the log, and looks at its size under it, so a
//! log is never rotated twice for one overflow.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

/// The bound of one task's container log.
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

impl Rotation {
    /// As [`crate::env::runtime::LOG_ROTATION`] carries it: `<max_bytes>/<max_files>`.
    pub fn to_env(self) -> String {
        format!("{}/{}", self.max_bytes, self.max_files)
    }

    /// Reads [`Rotation::to_env`]'s text; `None` for anything else.
    pub fn from_env(value: &str) -> Option<Self> {
        let (bytes, files) = value.split_once('/')?;
        Some(Self {
            max_bytes: bytes.parse().ok().filter(|b| *b > 0)?,
            max_files: files.parse().ok().filter(|f| *f >= 2)?,
        })
    }
}

/// `path` with `suffix` added to its name.
pub fn suffixed(path: &Path, suffix: &str) -> PathBuf {
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
    let log = match OpenOptions::new().write(true).open(path) {
        Ok(log) => log,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    // Released when `log` closes.
    log.lock()?;
    if log.metadata()?.len() <= rotation.max_bytes {
        return Ok(false);
    }
    rotate_locked(path, &log, rotation)?;
    Ok(true)
}

fn rotate_locked(path: &Path, log: &File, rotation: Rotation) -> std::io::Result<()> {
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
    log.set_len(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_log_past_its_size_keeps_the_newest_files_and_counts_the_rest() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("container.log");
        let rotation = Rotation {
            max_bytes: 10,
            max_files: 3,
        };
        // A writer that appends, as a task's processes do.
        let mut writer = OpenOptions::new()
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

    #[test]
    fn a_rotation_reads_back_from_its_variable() {
        let rotation = Rotation {
            max_bytes: 1234,
            max_files: 3,
        };
        assert_eq!(Rotation::from_env(&rotation.to_env()), Some(rotation));
        for bad in ["", "1234", "0/3", "12/1", "x/3", "12/y", "-1/3"] {
            assert_eq!(Rotation::from_env(bad), None, "{bad:?}");
        }
    }
}
