//! Daemon scripts (`init/`): each run by `/bin/sh`, its output into a log of its own.

use std::path::Path;

use nix::unistd::Pid;

use super::spawn::{self, Environment, Stream, Streams};
use crate::logs::{CappedLog, copy_to_log};

/// Starts a daemon script, its output (both streams) into `init-<name>.log` in
/// `log_dir`, capped and rotated as the user log is.
pub fn start_script(
    name: &str,
    script: &Path,
    env: &Environment,
    log_dir: &Path,
    log_cap: u64,
) -> std::io::Result<Pid> {
    let log = CappedLog::create(&log_dir.join(format!("init-{name}.log")), log_cap)?;
    let (reader, writer) = std::io::pipe()?;
    let null = std::fs::File::open("/dev/null")?;
    let pid = spawn::spawn(
        Path::new("/bin/sh"),
        &[script.as_os_str()],
        env,
        Streams {
            stdin: Stream::To(null.into()),
            stdout: Stream::To(writer.try_clone()?.into()),
            stderr: Stream::To(writer.into()),
        },
    )?;
    // Ends when the script and everything it started have closed the pipe.
    drop(copy_to_log(reader, log));
    Ok(pid)
}
