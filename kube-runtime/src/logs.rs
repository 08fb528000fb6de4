//! The user command's output: copied to the container's own stdout/stderr and to a log
//! file that never grows past its cap (at the cap it becomes `<name>.1` and a new file
//! starts, so at most twice the cap is kept).

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Default cap of `user.log`: 64 MiB.
pub const DEFAULT_CAP: u64 = 64 * 1024 * 1024;

/// The user command's log, in the task attempt's log directory.
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

    fn rotate(&mut self) -> std::io::Result<()> {
        let mut old = self.path.clone().into_os_string();
        old.push(".1");
        std::fs::rename(&self.path, &old)?;
        self.file = File::create(&self.path)?;
        self.written = 0;
        Ok(())
    }
}

/// Where a stream of the user command goes besides the log.
#[derive(Clone, Copy, Debug)]
pub enum Echo {
    Stdout,
    Stderr,
    /// Nowhere: the log alone (a daemon's output).
    Nowhere,
}

/// How much more the runtime may echo to its own stdout and stderr. Unbounded when they
/// are a pipe (a container runtime's, which the kubelet rotates); when they are a plain
/// file (the embedded default's `container.log`) the same cap as the user log holds, and
/// past it one line says that the rest is in the user log.
#[derive(Debug)]
pub struct EchoBudget {
    left: Mutex<Option<u64>>,
    cap: u64,
}

impl EchoBudget {
    pub fn unbounded() -> Arc<Self> {
        Arc::new(Self {
            left: Mutex::new(None),
            cap: 0,
        })
    }

    pub fn capped(cap: u64) -> Arc<Self> {
        Arc::new(Self {
            left: Mutex::new(Some(cap)),
            cap,
        })
    }

    /// Capped at `cap` when this process's stdout is a regular file, else unbounded.
    pub fn for_stdout(cap: u64) -> Arc<Self> {
        use std::os::unix::fs::FileTypeExt;
        let is_file = std::fs::metadata("/proc/self/fd/1")
            .map(|m| m.file_type().is_file() && !m.file_type().is_fifo())
            .unwrap_or(false);
        if is_file {
            Self::capped(cap)
        } else {
            Self::unbounded()
        }
    }

    /// The part of `chunk` that may still be echoed, and whether this chunk used the
    /// budget up (the caller then says so, once).
    fn take<'a>(&self, chunk: &'a [u8]) -> (&'a [u8], bool) {
        let mut left = self.left.lock().unwrap_or_else(|p| p.into_inner());
        match left.as_mut() {
            None => (chunk, false),
            Some(0) => (&[], false),
            Some(room) => {
                let n = usize::try_from(*room)
                    .unwrap_or(usize::MAX)
                    .min(chunk.len());
                *room -= n as u64;
                (&chunk[..n], *room == 0)
            }
        }
    }
}

/// Copies `source` to `echo` (within `budget`) and to `log` until it ends.
pub fn tee(
    mut source: impl Read + Send + 'static,
    echo: Echo,
    log: Option<Arc<Mutex<CappedLog>>>,
    budget: Arc<EchoBudget>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        let mut log_failed = false;
        loop {
            let n = match source.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            let chunk = &buf[..n];
            let (echoed, used_up) = match echo {
                Echo::Nowhere => (&[][..], false),
                _ => budget.take(chunk),
            };
            let write = |bytes: &[u8]| match echo {
                Echo::Stdout => std::io::stdout().lock().write_all(bytes),
                Echo::Stderr => std::io::stderr().lock().write_all(bytes),
                Echo::Nowhere => Ok(()),
            };
            let _ = write(echoed);
            if used_up {
                let _ = write(
                    format!(
                        "\n[rest-lite] this log reached its cap of {} bytes; the output goes on in {USER_LOG} (the last {0} bytes are kept)\n",
                        budget.cap
                    )
                    .as_bytes(),
                );
            }
            if let Some(log) = &log
                && !log_failed
            {
                let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
                if let Err(e) = log.write(chunk) {
                    tracing::warn!(error = %e, "cannot write the log; output still goes to the container log");
                    log_failed = true;
                }
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

    #[test]
    fn the_log_rotates_at_its_cap() {
        let dir = std::env::temp_dir().join(format!("capped-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("user.log");
        let mut log = CappedLog::create(&path, 10).expect("create");
        log.write(b"0123456789abcdef").expect("write");
        log.write(b"ghij").expect("write");
        assert_eq!(
            std::fs::read(dir.join("user.log.1")).expect("old"),
            b"0123456789"
        );
        assert_eq!(std::fs::read(&path).expect("new"), b"abcdefghij");
        log.write(b"k").expect("write");
        assert_eq!(
            std::fs::read(dir.join("user.log.1")).expect("old"),
            b"abcdefghij"
        );
        assert_eq!(std::fs::read(&path).expect("new"), b"k");
        std::fs::remove_dir_all(&dir).ok();
    }
}
