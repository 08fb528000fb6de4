//! The times of a task's container log, for a reader that asks for them
//! (`timestamps=true`). The file itself has none: the runtime (host mode) or the engine
//! (container mode) writes plain lines into it, as a container's output is. The times
//! are elsewhere: the runtime's ordered log (`user.log`, [`pai_contract::ordered_log`])
//! has the time of every part of the user command's output, and the runtime's own lines
//! say theirs after their mark. Each line gets:
//!
//! - a line of the runtime: its own time;
//! - a line of the user command's output: the time of its first part in the ordered
//!   log, found by its bytes (the runtime writes the same bytes, in the same order, into
//!   both files);
//! - a line the ordered log cannot hold yet (read to its end, it holds no more than the
//!   line's start past the lines before): the moment it is read, never earlier. It was
//!   written before it was read, and its record, if it has one, is not there yet; the
//!   line before's time would date it too early, and a follower that merges tasks by
//!   time would print it before lines written earlier. (The runtime writes a record
//!   before its bytes reach the container log, [`pai_kube_runtime::output`]: this is for
//!   what has no record.)
//! - any other line (the engine's own words, a line the ordered log no longer holds,
//!   where the ordered log goes on past it): the time of the line before it.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Read;
use std::path::PathBuf;

use pai_backend::backend::LogStream;
use pai_contract::log_lines::runtime_time;
use pai_contract::ordered_log::Record;

/// How far ahead in the ordered log a line is looked for when it is not next.
const LOOK_AHEAD: usize = 16 * 1024;

/// Lines shorter than this are taken only where they are next: looked for ahead, an
/// empty line or a `}` would be found anywhere.
const SHORTEST_LOOKED_FOR: usize = 8;

/// Bytes of the ordered log read at a time.
const READ_SIZE: usize = 64 * 1024;

/// The container log's lines, each begun with its time and a space.
pub(crate) fn stamped(stream: LogStream, ordered: PathBuf) -> LogStream {
    pai_backend::backend::rewritten(stream, Stamper::new(ordered))
}

/// Gives the lines of a container log their times, as they arrive.
struct Stamper {
    ordered: OrderedOutput,
    /// The start of a line not yet ended.
    line: Vec<u8>,
    /// The time given to the line before.
    last: Option<String>,
}

impl pai_backend::backend::Rewrite for Stamper {
    fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        Stamper::feed(self, chunk)
    }

    fn finish(&mut self) -> Vec<u8> {
        Stamper::finish(self)
    }
}

impl Stamper {
    fn new(ordered: PathBuf) -> Self {
        Self {
            ordered: OrderedOutput::new(ordered),
            line: Vec::new(),
            last: None,
        }
    }

    /// The whole lines `chunk` ends, stamped (a line's start waits for its end).
    fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut rest = chunk;
        while let Some(i) = rest.iter().position(|&b| b == b'\n') {
            let line = if self.line.is_empty() {
                rest[..=i].to_vec()
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(&rest[..=i]);
                line
            };
            self.stamp(&line, &mut out);
            rest = &rest[i + 1..];
        }
        self.line.extend_from_slice(rest);
        out
    }

    /// The line left unended at the log's end, stamped.
    fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        let line = std::mem::take(&mut self.line);
        if !line.is_empty() {
            self.stamp(&line, &mut out);
        }
        out
    }

    fn stamp(&mut self, line: &[u8], out: &mut Vec<u8>) {
        let time = match runtime_time(line) {
            Some(own) => Some(String::from_utf8_lossy(own).into_owned()),
            None => self.ordered.take(line).or_else(|| self.unmatched(line)),
        };
        if let Some(time) = time {
            self.last = Some(time);
        }
        let time = match &self.last {
            Some(time) => time.clone(),
            // Nothing known yet: the line is older than whatever comes next.
            None => jiff::Timestamp::UNIX_EPOCH.to_string(),
        };
        out.extend_from_slice(time.as_bytes());
        out.push(b' ');
        out.extend_from_slice(line);
    }

    /// The time of a line not found in the ordered log: where the ordered log, read to its
    /// end, cannot hold it, the moment it is read (or the line before's time, if that is
    /// later); else none (the line before's time is given).
    fn unmatched(&self, line: &[u8]) -> Option<String> {
        if !self.ordered.ends_before(line) {
            return None;
        }
        let now = jiff::Timestamp::now();
        let before = self.last.as_deref().and_then(|t| t.parse().ok());
        Some(
            before
                .map_or(now, |before: jiff::Timestamp| before.max(now))
                .to_string(),
        )
    }
}

/// The user command's output as the ordered log holds it, read as far as needed: its
/// bytes not yet matched to a line, and the time of each part among them.
struct OrderedOutput {
    path: PathBuf,
    /// The file being read: the rotated one (`.1`) first, then the current one.
    file: Option<File>,
    /// Whether the current file (not `.1`) is the one being read.
    on_current: bool,
    /// A record cut by a read's end.
    partial: Vec<u8>,
    /// Output bytes not yet matched.
    bytes: VecDeque<u8>,
    /// The place in the whole output of `bytes`' first byte.
    base: u64,
    /// The parts of the output from the one that holds `bytes`' first byte on: where
    /// each starts in the whole output, and its time.
    parts: VecDeque<(u64, String)>,
    buf: Vec<u8>,
}

impl OrderedOutput {
    fn new(path: PathBuf) -> Self {
        let older = File::open(crate::log_rotation::numbered(&path, 1)).ok();
        Self {
            on_current: older.is_none(),
            file: older.or_else(|| File::open(&path).ok()),
            path,
            partial: Vec::new(),
            bytes: VecDeque::new(),
            base: 0,
            parts: VecDeque::new(),
            buf: Vec::new(),
        }
    }

    /// The time of `line` where it is the next output (or a little ahead: what is
    /// before it is passed over); `None` where it is not found.
    fn take(&mut self, line: &[u8]) -> Option<String> {
        while self.bytes.len() < line.len() && self.read_more() {}
        let at = if self.next_is(line) {
            0
        } else if line.len() >= SHORTEST_LOOKED_FOR {
            while self.bytes.len() < LOOK_AHEAD + line.len() && self.read_more() {}
            let bytes = self.bytes.make_contiguous();
            let window = &bytes[..bytes.len().min(LOOK_AHEAD + line.len())];
            memchr::memmem::find(window, line)?
        } else {
            return None;
        };
        let time = self.time_at(self.base + at as u64);
        self.consume(at + line.len());
        time
    }

    /// Whether the ordered log, after [`Self::take`] of `line` found nothing, ends before
    /// it could hold `line`: read to its end, what it holds past the lines matched is at
    /// most the start of this one (`take` read on while it was shorter than the line).
    /// The line is then newer than all of it.
    fn ends_before(&self, line: &[u8]) -> bool {
        self.bytes.len() < line.len() && self.bytes.iter().eq(&line[..self.bytes.len()])
    }

    fn next_is(&self, line: &[u8]) -> bool {
        self.bytes.len() >= line.len() && self.bytes.range(..line.len()).eq(line.iter())
    }

    /// The time of the part that holds byte `at` of the whole output.
    fn time_at(&self, at: u64) -> Option<String> {
        let after = self.parts.partition_point(|(start, _)| *start <= at);
        after
            .checked_sub(1)
            .and_then(|i| self.parts.get(i))
            .map(|(_, time)| time.clone())
    }

    /// Drops the first `n` bytes (matched, or passed over), and the parts wholly
    /// before what is left.
    fn consume(&mut self, n: usize) {
        self.bytes.drain(..n);
        self.base += n as u64;
        while self.parts.len() > 1 && self.parts[1].0 <= self.base {
            self.parts.pop_front();
        }
    }

    /// Reads the next records; false when there is nothing more now.
    fn read_more(&mut self) -> bool {
        let Some(file) = self.file.as_mut() else {
            // Not there when the reader came: it may be now.
            self.file = File::open(&self.path).ok();
            self.on_current = true;
            return self.file.is_some() && self.read_more();
        };
        self.buf.resize(READ_SIZE, 0);
        match file.read(&mut self.buf) {
            Ok(n) if n > 0 => {
                let chunk = std::mem::take(&mut self.buf);
                self.records(&chunk[..n]);
                self.buf = chunk;
                true
            }
            _ if !self.on_current => {
                // The rotated file is read: on to the current one.
                self.on_current = true;
                self.file = File::open(&self.path).ok();
                self.file.is_some()
            }
            _ => {
                // At the end: rotated meanwhile, the rest is in a new file.
                let rotated = {
                    use std::os::unix::fs::MetadataExt;
                    let open = file.metadata().map(|m| m.ino()).ok();
                    let now = std::fs::metadata(&self.path).map(|m| m.ino()).ok();
                    now.is_some() && open != now
                };
                if rotated {
                    self.file = File::open(&self.path).ok();
                }
                rotated
            }
        }
    }

    fn records(&mut self, chunk: &[u8]) {
        let mut rest = chunk;
        while let Some(i) = rest.iter().position(|&b| b == b'\n') {
            let record = if self.partial.is_empty() {
                rest[..i].to_vec()
            } else {
                let mut record = std::mem::take(&mut self.partial);
                record.extend_from_slice(&rest[..i]);
                record
            };
            if let Some(record) = Record::parse(&record) {
                let start = self.base + self.bytes.len() as u64;
                self.parts
                    .push_back((start, String::from_utf8_lossy(record.time).into_owned()));
                self.bytes.extend(record.content);
                if record.whole {
                    self.bytes.push_back(b'\n');
                }
            }
            rest = &rest[i + 1..];
        }
        self.partial.extend_from_slice(rest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pai_contract::ordered_log::{Stream, append};

    fn stamps(out: &[u8]) -> Vec<String> {
        String::from_utf8_lossy(out)
            .lines()
            .map(|l| l.split_once(' ').unwrap().0.to_string())
            .collect()
    }

    /// The time the only line of `out` was given.
    fn time_of(out: &[u8]) -> jiff::Timestamp {
        let [time] = &stamps(out)[..] else {
            panic!("one line: {}", String::from_utf8_lossy(out));
        };
        time.parse().expect("a time")
    }

    #[test]
    fn each_line_gets_the_time_its_writer_gave_it() {
        let dir = tempfile::tempdir().unwrap();
        let ordered = dir.path().join("user.log");
        let mut records = Vec::new();
        append(&mut records, "T1", Stream::Stdout, b"listening\nhal");
        append(&mut records, "T2", Stream::Stderr, b"warning: x\n");
        append(&mut records, "T3", Stream::Stdout, b"f done\n");
        std::fs::write(&ordered, &records).unwrap();
        let container = "[runtime INFO] 2026-11-27T10:00:00Z user command started pid=7\n\
            listening\n\
            halwarning: x\n\
            Error: the engine's own words\n\
            f done\n\
            [runtime INFO] 2026-11-27T10:00:09Z user command ended code=0\n";
        let whole = {
            let mut stamper = Stamper::new(ordered.clone());
            let mut out = stamper.feed(container.as_bytes());
            out.extend(stamper.finish());
            out
        };
        assert_eq!(
            stamps(&whole),
            [
                "2026-11-27T10:00:00Z",
                "T1",
                "T1",
                "T1",
                "T3",
                "2026-11-27T10:00:09Z"
            ]
        );
        // The lines themselves are as written.
        let without: String = String::from_utf8_lossy(&whole)
            .split_inclusive('\n')
            .map(|l| l.split_once(' ').unwrap().1.to_string())
            .collect();
        assert_eq!(without, container);
        // Cut anywhere, the same.
        for size in 1..container.len() {
            let mut stamper = Stamper::new(ordered.clone());
            let mut out = Vec::new();
            for chunk in container.as_bytes().chunks(size) {
                out.extend(stamper.feed(chunk));
            }
            out.extend(stamper.finish());
            assert_eq!(out, whole, "chunks of {size}");
        }
    }

    #[test]
    fn a_line_written_later_is_found_once_it_is_there() {
        let dir = tempfile::tempdir().unwrap();
        let ordered = dir.path().join("user.log");
        let mut stamper = Stamper::new(ordered.clone());
        // Before the ordered log exists: the moment it is read.
        let before = jiff::Timestamp::now();
        let first = stamper.feed(b"early engine line\n");
        assert!(
            time_of(&first) >= before,
            "{}",
            String::from_utf8_lossy(&first)
        );
        let mut records = Vec::new();
        append(&mut records, "T5", Stream::Stdout, b"epoch 1 of 3\n");
        std::fs::write(&ordered, &records).unwrap();
        assert_eq!(stamps(&stamper.feed(b"epoch 1 of 3\n")), ["T5"]);
        // Rotated: the rest is in a new file.
        std::fs::rename(&ordered, crate::log_rotation::numbered(&ordered, 1)).unwrap();
        let mut records = Vec::new();
        append(&mut records, "T6", Stream::Stdout, b"epoch 2 of 3\n");
        std::fs::write(&ordered, &records).unwrap();
        assert_eq!(stamps(&stamper.feed(b"epoch 2 of 3\n")), ["T6"]);
    }

    /// A line read before its record (a reader between the two writes): dated when it
    /// was read, not with the line before's time, which a follower merging tasks by time
    /// would have printed before lines written earlier.
    #[test]
    fn a_line_whose_record_is_not_there_yet_is_never_dated_before_it_was_read() {
        let dir = tempfile::tempdir().unwrap();
        let ordered = dir.path().join("user.log");
        let mut records = Vec::new();
        append(
            &mut records,
            "2026-11-27T10:00:01Z",
            Stream::Stdout,
            b"client 0 started\n",
        );
        std::fs::write(&ordered, &records).unwrap();
        let mut stamper = Stamper::new(ordered.clone());
        let started = stamper.feed(
            b"[runtime INFO] 2026-11-27T10:00:00Z user command started pid=7\nclient 0 started\n",
        );
        assert_eq!(
            stamps(&started),
            ["2026-11-27T10:00:00Z", "2026-11-27T10:00:01Z"]
        );
        let before = jiff::Timestamp::now();
        let heard = stamper.feed(b"client 0 heard: hello\n");
        let after = jiff::Timestamp::now();
        let time = time_of(&heard);
        assert!(
            before <= time && time <= after,
            "{time} is when it was read, between {before} and {after}"
        );
        // Its record, once there, and the next line's are read past it.
        append(
            &mut records,
            &before.to_string(),
            Stream::Stdout,
            b"client 0 heard: hello\n",
        );
        append(
            &mut records,
            "2026-11-27T10:00:05Z",
            Stream::Stdout,
            b"client 0 done\n",
        );
        std::fs::write(&ordered, &records).unwrap();
        assert_eq!(
            stamps(&stamper.feed(b"client 0 done\n")),
            ["2026-11-27T10:00:05Z"]
        );
    }
}
