//! Logging of the programs inside a task (the barrier, the runtime): to standard error,
//! `info` unless `RUST_LOG` says otherwise, colours only on a terminal. Each line begins
//! with the runtime's mark for its level (`[runtime INFO] `,
//! [`pai_contract::log_lines`]), so that readers of the task's log can tell the
//! runtime's lines from the user command's output.

use std::io::Write;

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
        let _ = std::io::stderr().lock().write_all(&whole);
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
