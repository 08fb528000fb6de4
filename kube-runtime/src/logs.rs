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
}

/// Copies `source` to `echo` and `log` until it closes. Failing to write the log never
/// stops the copy to the container's output.
pub fn tee(
    mut source: impl Read + Send + 'static,
    echo: Echo,
    log: Option<Arc<Mutex<CappedLog>>>,
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
            let _ = match echo {
                Echo::Stdout => std::io::stdout().lock().write_all(chunk),
                Echo::Stderr => std::io::stderr().lock().write_all(chunk),
            };
            if let Some(log) = &log
                && !log_failed
            {
                let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
                if let Err(e) = log.write(chunk) {
                    tracing::warn!(error = %e, "cannot write the user log; output still goes to the container log");
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
