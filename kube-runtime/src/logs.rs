//! Log files that never grow past their cap (at the cap one becomes `<name>.1` and a new
//! file starts, so at most twice the cap is kept), and how much of the user command's
//! output the runtime may still echo to its own stdout and stderr. The user command's
//! output itself is read by [`crate::output`].

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use pai_contract::log_rotation::Rotation;

/// Default cap of `user.log`: 64 MiB.
pub const DEFAULT_CAP: u64 = 64 * 1024 * 1024;

/// The user command's output in order, both streams, as records
/// ([`pai_contract::ordered_log`]), in the task attempt's log directory.
pub const USER_LOG: &str = "user.log";

/// A file that rotates once it would pass `cap` bytes.
pub struct CappedLog {
    path: PathBuf,
    file: File,
    written: u64,
    cap: u64,
}

impl CappedLog {
    pub fn create(path: &Path, cap: u64) -> std::io::Result<Self> {
        Ok(Self {
            path: path.to_path_buf(),
            file: File::create(path)?,
            written: 0,
            cap: cap.max(1),
        })
    }

    pub fn write(&mut self, mut bytes: &[u8]) -> std::io::Result<()> {
        while !bytes.is_empty() {
            if self.written >= self.cap {
                self.rotate()?;
            }
            let room = usize::try_from(self.cap - self.written).unwrap_or(usize::MAX);
            let (now, later) = bytes.split_at(bytes.len().min(room));
            self.file.write_all(now)?;
            self.written += now.len() as u64;
            bytes = later;
        }
        Ok(())
    }

    /// Writes whole records (lines): the file rotates between two records, never within
    /// one; a record longer than the cap is cut to it, its newline kept.
    pub fn write_records(&mut self, mut records: &[u8]) -> std::io::Result<()> {
        let cap = usize::try_from(self.cap).unwrap_or(usize::MAX);
        while !records.is_empty() {
            // As many whole records as fit in what is left (at least one per file).
            let room = cap.saturating_sub(usize::try_from(self.written).unwrap_or(usize::MAX));
            let fits = records[..records.len().min(room)]
                .iter()
                .rposition(|&b| b == b'\n')
                .map(|i| i + 1);
            match fits {
                Some(n) => {
                    self.file.write_all(&records[..n])?;
                    self.written += n as u64;
                    records = &records[n..];
                }
                None if self.written > 0 => self.rotate()?,
                None => {
                    // One record longer than the cap, in a file of its own: cut.
                    let end = records
                        .iter()
                        .position(|&b| b == b'\n')
                        .map_or(records.len(), |i| i + 1);
                    let kept = cap.saturating_sub(1).min(end);
                    self.file.write_all(&records[..kept])?;
                    self.file.write_all(b"\n")?;
                    self.written += kept as u64 + 1;
                    records = &records[end..];
                }
            }
        }
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        std::fs::rename(
            &self.path,
            pai_contract::log_rotation::numbered(&self.path, 1),
        )?;
        self.file = File::create(&self.path)?;
        self.written = 0;
        Ok(())
    }
}

/// How much more the runtime may echo to its own stdout and stderr, and the rotation of
/// the file they are.
#[derive(Debug)]
pub struct EchoBudget {
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    /// A pipe (a container runtime's, which the kubelet or the engine keeps): all of it.
    Unbounded,
    /// A plain file (the embedded default's `container.log`) with its bound: all of it,
    /// the file rotated as it passes its size.
    Rotated { path: PathBuf, rotation: Rotation },
    /// A plain file nobody rotates: the same cap as the user log, and past it one line
    /// that says that the rest is in the user log.
    Capped { left: Mutex<u64>, cap: u64 },
}

impl EchoBudget {
    pub fn unbounded() -> Arc<Self> {
        Arc::new(Self {
            kind: Kind::Unbounded,
        })
    }

    pub fn capped(cap: u64) -> Arc<Self> {
        Arc::new(Self {
            kind: Kind::Capped {
                left: Mutex::new(cap),
                cap,
            },
        })
    }

    /// Unbounded when this process's stdout is not a regular file; rotated with
    /// `rotation` when it is and one is given; else capped at `cap`.
    pub fn for_stdout(cap: u64, rotation: Option<Rotation>) -> Arc<Self> {
        use std::os::unix::fs::FileTypeExt;
        let is_file = std::fs::metadata("/proc/self/fd/1")
            .map(|m| m.file_type().is_file() && !m.file_type().is_fifo())
            .unwrap_or(false);
        if !is_file {
            return Self::unbounded();
        }
        match (rotation, std::fs::read_link("/proc/self/fd/1")) {
            (Some(rotation), Ok(path)) => Arc::new(Self {
                kind: Kind::Rotated { path, rotation },
            }),
            _ => Self::capped(cap),
        }
    }

    /// The part of `chunk` that may still be echoed, and whether this chunk used the
    /// budget up (the caller then says so, once).
    pub(crate) fn take<'a>(&self, chunk: &'a [u8]) -> (&'a [u8], bool) {
        let Kind::Capped { left, .. } = &self.kind else {
            return (chunk, false);
        };
        let mut left = left.lock().unwrap_or_else(|p| p.into_inner());
        if *left == 0 {
            return (&[], false);
        }
        let n = usize::try_from(*left)
            .unwrap_or(usize::MAX)
            .min(chunk.len());
        *left -= n as u64;
        (&chunk[..n], *left == 0)
    }

    /// After an echo: rotates the file it went to where it passed its size. A failure is
    /// told once and the echo goes on (the server's sweep still bounds the log).
    pub(crate) fn echoed(&self, failed_before: &mut bool) {
        let Kind::Rotated { path, rotation } = &self.kind else {
            return;
        };
        // One `fstat` per echo; the rotation itself (a copy of the log) holds up the
        // reader, and so the writer, while it runs: the log cannot outrun it.
        let past = nix::sys::stat::fstat(std::io::stdout().as_fd())
            .is_ok_and(|m| u64::try_from(m.st_size).is_ok_and(|size| size > rotation.max_bytes));
        if !past {
            return;
        }
        if let Err(e) = pai_contract::log_rotation::rotate_if_needed(path, *rotation)
            && !std::mem::replace(failed_before, true)
        {
            tracing::warn!(log = %path.display(), error = %e, "cannot rotate the container log");
        }
    }

    /// The line that says the echo stopped at its cap.
    pub(crate) fn used_up_note(&self) -> String {
        let cap = match &self.kind {
            Kind::Capped { cap, .. } => *cap,
            _ => 0,
        };
        format!(
            "\n[rest-lite] this log reached its cap of {cap} bytes; the output goes on in {USER_LOG} (the last {cap} bytes are kept)\n"
        )
    }
}

/// Copies `source` (a daemon's output) to `log` until it ends.
pub fn copy_to_log(mut source: impl Read + Send + 'static, log: CappedLog) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut log = log;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match source.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            if let Err(e) = log.write(&buf[..n]) {
                tracing::warn!(error = %e, "cannot write a daemon's log; the rest of its output is dropped");
                // Read on, so that the daemon never blocks on a full pipe.
                while matches!(source.read(&mut buf), Ok(n) if n > 0) {}
                return;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_echo_stops_at_its_budget_once() {
        let budget = EchoBudget::capped(10);
        assert_eq!(budget.take(b"0123"), (&b"0123"[..], false));
        assert_eq!(budget.take(b"456789abc"), (&b"456789"[..], true));
        assert_eq!(budget.take(b"more"), (&b""[..], false));
        let open = EchoBudget::unbounded();
        assert_eq!(open.take(b"anything"), (&b"anything"[..], false));
    }

    /// A fresh directory for one test (removed with it, a failing test's too), and the
    /// log's path in it.
    fn log_in(name: &str) -> (pai_test_support::scratch::TempDir, PathBuf) {
        let dir = pai_test_support::scratch(name);
        let path = dir.path().join("user.log");
        (dir, path)
    }

    #[test]
    fn records_rotate_between_records_and_a_long_one_is_cut() {
        let (dir, path) = log_in("records");
        let mut log = CappedLog::create(&path, 10).expect("create");
        log.write_records(b"aaaa\nbbbb\ncc\n").expect("write");
        assert_eq!(
            std::fs::read(dir.path().join("user.log.1")).expect("old"),
            b"aaaa\nbbbb\n"
        );
        assert_eq!(std::fs::read(&path).expect("new"), b"cc\n");
        log.write_records(b"0123456789abcdef\nz\n").expect("write");
        assert_eq!(
            std::fs::read(dir.path().join("user.log.1")).expect("old"),
            b"012345678\n"
        );
        assert_eq!(std::fs::read(&path).expect("new"), b"z\n");
    }

    #[test]
    fn the_log_rotates_at_its_cap() {
        let (dir, path) = log_in("capped");
        let mut log = CappedLog::create(&path, 10).expect("create");
        log.write(b"0123456789abcdef").expect("write");
        log.write(b"ghij").expect("write");
        assert_eq!(
            std::fs::read(dir.path().join("user.log.1")).expect("old"),
            b"0123456789"
        );
        assert_eq!(std::fs::read(&path).expect("new"), b"abcdefghij");
        log.write(b"k").expect("write");
        assert_eq!(
            std::fs::read(dir.path().join("user.log.1")).expect("old"),
            b"abcdefghij"
        );
        assert_eq!(std::fs::read(&path).expect("new"), b"k");
    }
}
