//! Logging of the programs inside a task (the barrier, the runtime): to standard error,
//! `info` unless `RUST_LOG` says otherwise, colours only on a terminal. Each line begins
//! with the runtime's mark for its level (`[runtime INFO] `,
//! [`pai_contract::log_lines`]), so that readers of the task's log can tell the
//! runtime's lines from the user command's output.
//!
//! The runtime's lines and the user command's output it echoes share the container's
//! log. A runtime line written while the echoed output is in the middle of a line would
//! land inside the user's line (`progress: [runtime INFO] … 42%`), and neither would read
//! as itself. So the echo goes through [`echo`], which knows whether the log is between
//! lines, and a runtime line that comes in the middle of one is held until the user's
//! line ends: at most [`HOLD_MAX`] (a progress bar that rewrites one line with `\r` for
//! an hour does not hold the runtime's lines that long; they then begin a line of their
//! own) and at most [`HELD_MAX_BYTES`].

use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pai_contract::ordered_log::Stream;

use tracing_subscriber::fmt::MakeWriter;

pub fn init() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(Marked)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .with_level(false)
        .init();
}

/// Standard error, each event's line behind its level's mark.
struct Marked;

/// One event's line: written at once with its mark in front, so that lines of threads
/// do not interleave; what cannot be written is dropped (a task must not fail because
/// its log reader went away).
struct MarkedLine {
    mark: String,
    line: Vec<u8>,
}

impl Write for MarkedLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.line.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for MarkedLine {
    fn drop(&mut self) {
        if self.line.is_empty() {
            return;
        }
        let mut whole = Vec::with_capacity(self.mark.len() + self.line.len());
        whole.extend_from_slice(self.mark.as_bytes());
        whole.extend_from_slice(&self.line);
        runtime_line(whole);
    }
}

/// How long a runtime line waits for the user's unended line to end.
pub const HOLD_MAX: Duration = Duration::from_secs(1);

/// How many bytes of runtime lines wait at most.
pub const HELD_MAX_BYTES: usize = 64 * 1024;

/// Whether the container's log is between lines, and the runtime's lines that wait for
/// it to be.
struct Gate {
    mid_line: bool,
    held: Vec<u8>,
    held_since: Option<Instant>,
}

static GATE: Mutex<Gate> = Mutex::new(Gate {
    mid_line: false,
    held: Vec::new(),
    held_since: None,
});

fn gate() -> std::sync::MutexGuard<'static, Gate> {
    GATE.lock().unwrap_or_else(|p| p.into_inner())
}

impl Gate {
    /// Writes the held lines; in the middle of the user's line they begin one of their
    /// own.
    fn release(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let mut err = std::io::stderr().lock();
        if self.mid_line {
            let _ = err.write_all(b"\n");
            self.mid_line = false;
        }
        let _ = err.write_all(&self.held);
        self.held.clear();
        self.held_since = None;
    }

    fn held_too_long(&self, now: Instant) -> bool {
        self.held_since
            .is_some_and(|since| now.duration_since(since) >= HOLD_MAX)
    }
}

/// A runtime line (mark and all): written now between lines, else held.
fn runtime_line(line: Vec<u8>) {
    let mut gate = gate();
    if !gate.mid_line && gate.held.is_empty() {
        let _ = std::io::stderr().lock().write_all(&line);
        return;
    }
    gate.held.extend_from_slice(&line);
    gate.held_since.get_or_insert_with(Instant::now);
    if gate.held.len() >= HELD_MAX_BYTES || gate.held_too_long(Instant::now()) {
        gate.release();
    }
}

/// Writes the user command's `bytes` to the runtime's own `stream` (the container's log);
/// the runtime lines held for the user's line to end follow once it has, or once they
/// have waited [`HOLD_MAX`].
pub fn echo(stream: Stream, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    let mut gate = gate();
    // Flushed at once: standard output buffers up to a newline, and a progress line
    // that never ends would never be seen.
    let _ = match stream {
        Stream::Stdout => {
            let mut out = std::io::stdout().lock();
            out.write_all(bytes).and_then(|()| out.flush())
        }
        Stream::Stderr => std::io::stderr().lock().write_all(bytes),
    };
    gate.mid_line = bytes.last() != Some(&b'\n');
    if !gate.mid_line || gate.held_too_long(Instant::now()) {
        gate.release();
    }
}

/// Writes the runtime lines that have waited [`HOLD_MAX`] (the echo calls it when it
/// wakes without output), or all of them with `all` (the output has ended).
pub fn release_held(all: bool) {
    let mut gate = gate();
    if all || gate.held_too_long(Instant::now()) {
        gate.release();
    }
}

impl<'a> MakeWriter<'a> for Marked {
    type Writer = MarkedLine;

    fn make_writer(&'a self) -> Self::Writer {
        MarkedLine {
            mark: pai_contract::log_lines::mark("INFO"),
            line: Vec::new(),
        }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        MarkedLine {
            mark: pai_contract::log_lines::mark(meta.level().as_str()),
            line: Vec::new(),
        }
    }
}
