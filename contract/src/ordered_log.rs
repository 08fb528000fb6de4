//! The user command's output as one ordered stream, in the kubelet's CRI log format: each
//! line (or part of a line) a record with the time it was read, its stream and whether it
//! is whole:
//!
//! ```text
//! 2026-11-26T01:02:03.123456789Z stdout F 1 out
//! 2026-11-26T01:02:03.123460002Z stderr F 2 err
//! 2026-11-26T01:02:03.123471140Z stdout P 45%
//! ```
//!
//! `F` ends a line; `P` is a part that the next record of the same stream goes on (a
//! progress bar without a newline, or output of the other stream that came in between).
//! The runtime writes the file (`user.log`) in the order it read the two streams; readers
//! take one stream, or both in that order.

/// One of the user command's two output streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl Stream {
    /// Its name in a record and in the API's `stream` parameter.
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }

    /// The stream of that name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "stdout" => Some(Stream::Stdout),
            "stderr" => Some(Stream::Stderr),
            _ => None,
        }
    }
}

/// Appends the records of `chunk` (bytes of `stream` read at `time`, RFC 3339): one `F`
/// record per line it ends, and a `P` record for what it leaves unended.
pub fn append(out: &mut Vec<u8>, time: &str, stream: Stream, chunk: &[u8]) {
    let mut rest = chunk;
    while !rest.is_empty() {
        let (content, tag, after) = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => (&rest[..i], b'F', &rest[i + 1..]),
            None => (rest, b'P', &rest[rest.len()..]),
        };
        out.extend_from_slice(time.as_bytes());
        out.push(b' ');
        out.extend_from_slice(stream.as_str().as_bytes());
        out.push(b' ');
        out.push(tag);
        out.push(b' ');
        out.extend_from_slice(content);
        out.push(b'\n');
        rest = after;
    }
}

/// One record of the file: when its bytes were read, of which stream, whether it ends a
/// line, and the bytes (without the newline).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// RFC 3339.
    pub time: &'a [u8],
    /// Which of the two it was read from.
    pub stream: Stream,
    /// `F`: it ends a line.
    pub whole: bool,
    /// Its bytes, without the newline.
    pub content: &'a [u8],
}

impl<'a> Record<'a> {
    /// The record of one line of the file (without its newline); `None` for a line that
    /// is not a record of either stream.
    pub fn parse(line: &'a [u8]) -> Option<Self> {
        let mut fields = line.splitn(4, |&b| b == b' ');
        let (Some(time), Some(stream), Some(tag)) = (fields.next(), fields.next(), fields.next())
        else {
            return None;
        };
        let stream = std::str::from_utf8(stream).ok().and_then(Stream::parse)?;
        Some(Self {
            time,
            stream,
            whole: tag == b"F",
            content: fields.next().unwrap_or_default(),
        })
    }
}

/// Reads records that arrive in chunks and gives back the output they hold: of one
/// stream, or of both (`None`) in their order; `stamped`, each line begins with the time
/// of its first part and a space, as `kubectl logs --timestamps` shows it.
#[derive(Debug)]
pub struct Reader {
    want: Option<Stream>,
    stamped: bool,
    /// Whether the next byte out begins a line.
    at_line_start: bool,
    /// A record cut by the chunk's end.
    pending: Vec<u8>,
}

impl Reader {
    /// A reader of `want`'s output (`None`: both).
    pub fn new(want: Option<Stream>) -> Self {
        Self {
            want,
            stamped: false,
            at_line_start: true,
            pending: Vec::new(),
        }
    }

    /// A reader of `want`'s output whose lines begin with their time.
    pub fn stamped(want: Option<Stream>) -> Self {
        Self {
            stamped: true,
            ..Self::new(want)
        }
    }

    /// The output in `chunk`'s whole records (a record cut at its end waits for the rest).
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut rest = chunk;
        while let Some(i) = rest.iter().position(|&b| b == b'\n') {
            if self.pending.is_empty() {
                self.record(&rest[..i], &mut out);
            } else {
                self.pending.extend_from_slice(&rest[..i]);
                let record = std::mem::take(&mut self.pending);
                self.record(&record, &mut out);
            }
            rest = &rest[i + 1..];
        }
        self.pending.extend_from_slice(rest);
        out
    }

    fn record(&mut self, line: &[u8], out: &mut Vec<u8>) {
        let Some(record) = Record::parse(line) else {
            return;
        };
        if self.want.is_some_and(|w| w != record.stream) {
            return;
        }
        if self.stamped && self.at_line_start {
            out.extend_from_slice(record.time);
            out.push(b' ');
        }
        out.extend_from_slice(record.content);
        if record.whole {
            out.push(b'\n');
        }
        self.at_line_start = record.whole;
    }
}

/// The output of `want` (or of both) in a whole file of records.
pub fn output(file: &[u8], want: Option<Stream>) -> Vec<u8> {
    Reader::new(want).feed(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written() -> Vec<u8> {
        let mut log = Vec::new();
        append(&mut log, "t1", Stream::Stdout, b"1 out\n");
        append(&mut log, "t2", Stream::Stderr, b"2 err\n4");
        append(&mut log, "t3", Stream::Stdout, b"3 out\n");
        append(&mut log, "t4", Stream::Stderr, b" err: real error\n\n");
        log
    }

    #[test]
    fn records_are_the_kubelets() {
        assert_eq!(
            String::from_utf8(written()).unwrap(),
            "t1 stdout F 1 out\nt2 stderr F 2 err\nt2 stderr P 4\nt3 stdout F 3 out\n\
             t4 stderr F  err: real error\nt4 stderr F \n"
        );
    }

    #[test]
    fn both_streams_in_order_or_one_alone() {
        let log = written();
        assert_eq!(
            output(&log, None),
            b"1 out\n2 err\n43 out\n err: real error\n\n"
        );
        assert_eq!(output(&log, Some(Stream::Stdout)), b"1 out\n3 out\n");
        assert_eq!(
            output(&log, Some(Stream::Stderr)),
            b"2 err\n4 err: real error\n\n"
        );
    }

    #[test]
    fn stamped_lines_begin_with_the_time_of_their_first_part() {
        let mut reader = Reader::stamped(None);
        assert_eq!(
            String::from_utf8(reader.feed(&written())).unwrap(),
            "t1 1 out\nt2 2 err\nt2 43 out\nt4  err: real error\nt4 \n"
        );
        let mut reader = Reader::stamped(Some(Stream::Stderr));
        assert_eq!(
            String::from_utf8(reader.feed(&written())).unwrap(),
            "t2 2 err\nt2 4 err: real error\nt4 \n"
        );
    }

    #[test]
    fn chunks_cut_anywhere_read_the_same() {
        let log = written();
        for want in [None, Some(Stream::Stdout), Some(Stream::Stderr)] {
            let whole = output(&log, want);
            for size in 1..log.len() {
                let mut reader = Reader::new(want);
                let mut out = Vec::new();
                for chunk in log.chunks(size) {
                    out.extend(reader.feed(chunk));
                }
                assert_eq!(out, whole, "chunks of {size}");
            }
        }
    }
}
