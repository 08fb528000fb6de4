//! Whose a line of a task's log is. A container has one log, where the user command's
//! output and the runtime's own lines (`barrier passed`, `user command started`) meet.
//! The runtime begins each of its lines with a mark naming its level; readers split the
//! log by the marks: the user's output is what people read by default, the runtime's
//! lines are served apart, and its warnings and errors (the runtime itself failing) are
//! shown with the user's output too.
//!
//! A user line that happens to begin with a mark is taken for the runtime's: it is still
//! served, with the runtime's lines.

/// What a reader wants of a log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Source {
    /// The user command's output, and the runtime's warnings and errors.
    #[default]
    User,
    /// The runtime's lines only.
    Runtime,
    /// Everything, as written.
    All,
}

impl Source {
    /// Its name in the API's `source` parameter.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::User => "user",
            Source::Runtime => "runtime",
            Source::All => "all",
        }
    }
}

/// The mark the runtime puts before a line of `level` (`INFO`, `WARN`, …).
pub fn mark(level: &str) -> String {
    format!("{PREFIX}{level}] ")
}

/// What every mark begins with.
pub const PREFIX: &str = "[runtime ";

/// The marks and whether their lines are shown with the user's output.
const MARKS: &[(&str, bool)] = &[
    ("[runtime ERROR] ", true),
    ("[runtime WARN] ", true),
    ("[runtime INFO] ", false),
    ("[runtime DEBUG] ", false),
    ("[runtime TRACE] ", false),
];

/// The class of a line, once its start has been read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    User,
    /// The runtime's; `loud`: a warning or an error.
    Runtime {
        loud: bool,
    },
}

impl Class {
    fn kept_by(self, source: Source) -> bool {
        match (source, self) {
            (Source::All, _) => true,
            (Source::User, Class::User) => true,
            (Source::User, Class::Runtime { loud }) => loud,
            (Source::Runtime, Class::Runtime { .. }) => true,
            (Source::Runtime, Class::User) => false,
        }
    }
}

/// Splits a log that arrives in chunks: `feed` returns the bytes of each chunk that
/// `source` keeps. A line's start is held only while it could still be a mark (a few
/// bytes), so a user's output without a newline (a progress bar) is not held back.
#[derive(Debug)]
pub struct Split {
    source: Source,
    /// Whether each line begins with its time and a space (`kubectl logs --timestamps`):
    /// the mark is looked for after it.
    stamped: bool,
    /// The time at the current line's start, while it is read.
    stamp: Vec<u8>,
    /// Whether the current line's time has been read (always, where lines have none).
    past_stamp: bool,
    /// The start of the current line, while it could still be a mark.
    held: Vec<u8>,
    /// The class of the current line once known; `None` at a line's start.
    line: Option<Class>,
}

impl Split {
    /// A splitter keeping `source`'s lines; the log starts at a line's start.
    pub fn new(source: Source) -> Self {
        Self {
            source,
            stamped: false,
            stamp: Vec::new(),
            past_stamp: true,
            held: Vec::new(),
            line: None,
        }
    }

    /// A splitter of a log whose lines each begin with their time and a space.
    pub fn stamped(source: Source) -> Self {
        Self {
            stamped: true,
            past_stamp: false,
            ..Self::new(source)
        }
    }

    /// Whose the line that ended here was is known: the next one begins.
    fn line_ended(&mut self) {
        self.line = None;
        self.past_stamp = !self.stamped;
    }

    /// The part of `chunk` (the next bytes of the log) to keep, in order.
    pub fn feed(&mut self, mut chunk: &[u8]) -> Vec<u8> {
        if self.source == Source::All {
            return chunk.to_vec();
        }
        let mut out = Vec::new();
        while !chunk.is_empty() {
            match self.line {
                Some(class) => {
                    let end = chunk
                        .iter()
                        .position(|&b| b == b'\n')
                        .map_or(chunk.len(), |i| i + 1);
                    if class.kept_by(self.source) {
                        out.extend_from_slice(&chunk[..end]);
                    }
                    if chunk[end - 1] == b'\n' {
                        self.line_ended();
                    }
                    chunk = &chunk[end..];
                }
                None if !self.past_stamp => {
                    let byte = chunk[0];
                    chunk = &chunk[1..];
                    self.stamp.push(byte);
                    match byte {
                        b' ' => self.past_stamp = true,
                        // A line of its time alone: nobody's mark.
                        b'\n' => {
                            let stamp = std::mem::take(&mut self.stamp);
                            if Class::User.kept_by(self.source) {
                                out.extend_from_slice(&stamp);
                            }
                            self.line_ended();
                        }
                        _ => {}
                    }
                }
                None => {
                    self.held.push(chunk[0]);
                    chunk = &chunk[1..];
                    if let Some(class) = self.classify() {
                        self.line = Some(class);
                        let stamp = std::mem::take(&mut self.stamp);
                        let held = std::mem::take(&mut self.held);
                        if class.kept_by(self.source) {
                            out.extend_from_slice(&stamp);
                            out.extend_from_slice(&held);
                        }
                        if held.last() == Some(&b'\n') {
                            self.line_ended();
                        }
                    }
                }
            }
        }
        out
    }

    /// What is held at the log's end (a line cut short that looked like a mark): the
    /// user's.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut held = std::mem::take(&mut self.stamp);
        held.append(&mut self.held);
        if self.line.is_none() && Class::User.kept_by(self.source) {
            held
        } else {
            Vec::new()
        }
    }

    /// The class of the held line start, once it is a whole mark or no mark's start.
    fn classify(&self) -> Option<Class> {
        let mut could_be = false;
        for (mark, loud) in MARKS {
            let mark = mark.as_bytes();
            if self.held == mark {
                return Some(Class::Runtime { loud: *loud });
            }
            could_be |= mark.starts_with(&self.held);
        }
        (!could_be).then_some(Class::User)
    }
}

/// The time a line of the runtime says it was written: the word after its mark, where
/// that is a time.
pub fn runtime_time(line: &[u8]) -> Option<&[u8]> {
    let (mark, _) = MARKS
        .iter()
        .find(|(mark, _)| line.starts_with(mark.as_bytes()))?;
    let after = &line[mark.len()..];
    let word = &after[..after
        .iter()
        .position(|b| b.is_ascii_whitespace())
        .unwrap_or(after.len())];
    std::str::from_utf8(word)
        .ok()?
        .parse::<jiff::Timestamp>()
        .is_ok()
        .then_some(word)
}

/// A whole log whose lines have no times of their own, each line begun with the best
/// time known for it (`kubectl logs --timestamps`' form): a line of the runtime its own;
/// any other line that of the runtime's line before it (before the first, the first's;
/// with none at all, `fallback`).
pub fn stamp_lines(text: &[u8], fallback: &str) -> Vec<u8> {
    let lines = || text.split_inclusive(|&b| b == b'\n');
    let mut last = lines()
        .find_map(runtime_time)
        .unwrap_or(fallback.as_bytes());
    let mut out = Vec::with_capacity(text.len() + text.len() / 8);
    for line in lines() {
        if let Some(time) = runtime_time(line) {
            last = time;
        }
        out.extend_from_slice(last);
        out.push(b' ');
        out.extend_from_slice(line);
    }
    out
}

/// The lines of a whole text that `source` keeps.
pub fn keep(text: &str, source: Source) -> String {
    let mut split = Split::new(source);
    let mut kept = split.feed(text.as_bytes());
    kept.extend(split.finish());
    String::from_utf8_lossy(&kept).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "[runtime INFO] 2026-11-25T15:23:11Z barrier passed\n\
        hello from the user\n\
        [runtime WARN] 2026-11-25T15:23:12Z not exported: X\n\
        [runtime is what I print]\n\
        \n\
        [runtime ERROR] 2026-11-25T15:23:13Z user command could not start\n\
        progress 50%";

    #[test]
    fn the_user_sees_their_output_and_the_runtimes_alarms() {
        assert_eq!(
            keep(LOG, Source::User),
            "hello from the user\n\
             [runtime WARN] 2026-11-25T15:23:12Z not exported: X\n\
             [runtime is what I print]\n\
             \n\
             [runtime ERROR] 2026-11-25T15:23:13Z user command could not start\n\
             progress 50%"
        );
        assert_eq!(
            keep(LOG, Source::Runtime),
            "[runtime INFO] 2026-11-25T15:23:11Z barrier passed\n\
             [runtime WARN] 2026-11-25T15:23:12Z not exported: X\n\
             [runtime ERROR] 2026-11-25T15:23:13Z user command could not start\n"
        );
        assert_eq!(keep(LOG, Source::All), LOG);
    }

    #[test]
    fn chunks_cut_anywhere_split_the_same() {
        for source in [Source::User, Source::Runtime] {
            let whole = keep(LOG, source);
            for size in 1..LOG.len() {
                let mut split = Split::new(source);
                let mut out = Vec::new();
                for chunk in LOG.as_bytes().chunks(size) {
                    out.extend(split.feed(chunk));
                }
                out.extend(split.finish());
                assert_eq!(String::from_utf8(out).unwrap(), whole, "chunks of {size}");
            }
        }
    }

    #[test]
    fn stamped_lines_are_split_by_the_mark_after_their_time() {
        let stamped: String = LOG
            .split_inclusive('\n')
            .enumerate()
            .map(|(i, line)| format!("2026-11-25T15:23:1{i}.5Z {line}"))
            .collect();
        for source in [Source::User, Source::Runtime] {
            let unstamped = keep(LOG, source);
            for size in 1..stamped.len() {
                let mut split = Split::stamped(source);
                let mut out = Vec::new();
                for chunk in stamped.as_bytes().chunks(size) {
                    out.extend(split.feed(chunk));
                }
                out.extend(split.finish());
                let out = String::from_utf8(out).unwrap();
                let without: String = out
                    .split_inclusive('\n')
                    .map(|line| line.split_once(' ').unwrap().1)
                    .collect();
                assert_eq!(without, unstamped, "{source:?}, chunks of {size}");
            }
        }
    }

    #[test]
    fn lines_without_times_take_the_runtimes_before_them() {
        let stamped = String::from_utf8(stamp_lines(LOG.as_bytes(), "never")).unwrap();
        let times: Vec<&str> = stamped
            .lines()
            .map(|line| line.split_once(' ').unwrap().0)
            .collect();
        assert_eq!(
            times,
            [
                "2026-11-25T15:23:11Z",
                "2026-11-25T15:23:11Z",
                "2026-11-25T15:23:12Z",
                "2026-11-25T15:23:12Z",
                "2026-11-25T15:23:12Z",
                "2026-11-25T15:23:13Z",
                "2026-11-25T15:23:13Z"
            ]
        );
        assert_eq!(
            stamp_lines(b"no runtime here\n[runtime WARN] lost: 3 bytes\n", "T"),
            b"T no runtime here\nT [runtime WARN] lost: 3 bytes\n"
        );
    }

    #[test]
    fn a_line_without_an_end_is_not_held_back() {
        let mut split = Split::new(Source::User);
        assert_eq!(split.feed(b"epoch 1 "), b"epoch 1 ");
        assert_eq!(split.feed(b"10%\r"), b"10%\r");
        // Only a mark's possible start waits.
        assert_eq!(split.feed(b"\n[run"), b"\n");
        assert_eq!(split.feed(b"ning]"), b"[running]");
    }

    #[test]
    fn the_marks_are_what_the_runtime_writes() {
        for (mark, _) in MARKS {
            let level = &mark[PREFIX.len()..mark.len() - 2];
            assert_eq!(super::mark(level), *mark);
        }
    }
}
