//! The user command's stdout and stderr, read as one stream in the order they were
//! written.
//!
//! Two pipes read by two threads (or by one that polls both) lose the order between
//! them: `echo 1; echo 2 >&2; echo 3` writes three times before the reader wakes up, and
//! the reader then finds both pipes full and cannot tell which came first. The kernel
//! knows the order, and tells it when asked: each pipe is in packet mode (`O_DIRECT`:
//! every `write` stays a packet of its own, and a read returns one), and its read end
//! raises a queued real-time signal on every write (`F_SETSIG` with `O_ASYNC`), inside the
//! writer's `write` call, aimed at the reader thread alone (`F_SETOWN_EX`). The signals
//! queue in the order of the writes; for each one the reader takes the packet of that
//! pipe. The output so comes out in the order it was written, whatever the scheduler did.
//!
//! When the order cannot be known it degrades, never loses output: a write of more than
//! a page becomes several packets of one signal (the reader takes packets while they are
//! whole pages); a program that reopens `/dev/stdout` writes without packets (its writes
//! merge in the pipe); if the signal queue fills up (`RLIMIT_SIGPENDING`) the kernel sends
//! SIGIO instead, and the reader then takes all there is of stdout, then of stderr; a
//! second without a signal does the same. Where arming fails (no packet mode, a kernel
//! without `F_SETOWN_EX`), the reader polls both pipes.
//!
//! Each chunk read goes to the ordered log ([`pai_contract::ordered_log`], `user.log`) as
//! a record with the time it was read, to the runtime's own stdout or stderr (the
//! container's log), and line by line to the failure [`Detector`]. The records of a round
//! (the writes whose signals were queued together) are written to the ordered log first,
//! then its chunks are echoed, in the order read: a reader of the container log
//! ([`pai_contract::ordered_log`]'s readers give each line the time of its record) never
//! finds a line there before its record. Echoed the other way round, a reader that came
//! between the two dated the line with the line before's time, and a follower that merges
//! tasks by time printed a client's answer before the server's greeting. Each chunk is
//! still echoed as one write of its own, as it was read: the log's rotation looks after
//! each write, so that no kept file passes its size by more than one read, and the newest
//! bytes stay in the current file.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use pai_barrier::logging;
use pai_contract::failure::Detector;
use pai_contract::ordered_log::{self, Stream};

use crate::logs::{CappedLog, EchoBudget};

/// A page: the largest packet a packet-mode pipe gives in one read.
const PAGE: usize = 4096;

/// How long the reader waits for a signal before it looks at the pipes itself, in ms.
const SAFETY_PERIOD_MS: u16 = 1000;

/// Bytes of records (or of output to echo) held before they are written: every 256 KiB,
/// not only at a round's end, since a writer that keeps the pipe full makes one long round
/// (holding all its records grew the supervisor to 232 MiB over 256 MiB of output).
const RECORDS_HELD: usize = 256 * 1024;

/// Bytes read from a pipe at most at once.
const READ_SIZE: usize = 64 * 1024;

/// Bytes of a line the detector waits for before it reads the line as it is.
const LINE_MAX: usize = 16 * 1024;

/// The write ends the user command gets as its stdout and stderr.
pub struct Writers {
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

/// Two pipes in packet mode (plain ones where the kernel has none): the write ends, and
/// the read ends (not inherited, not blocking) for [`start`].
pub fn pipes() -> std::io::Result<(Writers, [OwnedFd; 2])> {
    let pipe = || -> std::io::Result<(OwnedFd, OwnedFd)> {
        let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_DIRECT)
            .or_else(|_| nix::unistd::pipe2(OFlag::O_CLOEXEC))?;
        let flags = OFlag::from_bits_truncate(fcntl(&read, FcntlArg::F_GETFL)?);
        fcntl(&read, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
        Ok((read, write))
    };
    let (out_read, stdout) = pipe()?;
    let (err_read, stderr) = pipe()?;
    Ok((Writers { stdout, stderr }, [out_read, err_read]))
}

/// Where the output goes.
pub struct Sinks {
    /// The ordered log, if it could be created.
    pub log: Option<Arc<Mutex<CappedLog>>>,
    /// How much may still be echoed to the container's log.
    pub budget: Arc<EchoBudget>,
    pub detector: Detector,
}

/// Starts the reader of the pipes' read ends; returns once it is armed, so that the
/// command's first write is already seen in order. The thread ends at both pipes' end
/// and gives back the detector.
pub fn start(pipes_read: [OwnedFd; 2], sinks: Sinks) -> JoinHandle<Detector> {
    let (armed_tx, armed_rx) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        let order = Order::arm(&pipes_read)
            .inspect_err(|e| {
                tracing::info!(error = %e, "the output's order between stdout and stderr is the order read");
            })
            .ok();
        let _ = armed_tx.send(());
        let mut reader = Reader::new(sinks);
        reader.run(&pipes_read, order.as_ref());
        reader.finish()
    });
    let _ = armed_rx.recv();
    handle
}

/// The signal that tells of each write, aimed at the reader thread.
struct Order {
    signals: SignalFd,
    signal: i32,
}

impl Order {
    /// Arms both read ends to signal this thread on every write.
    fn arm(read: &[OwnedFd; 2]) -> std::io::Result<Self> {
        // glibc keeps the first real-time signals for itself.
        let signal = libc::SIGRTMIN() + 4;
        let mask = fasync::mask(signal);
        // Blocked in this thread whatever the process did: a real-time signal's default
        // action ends the process.
        nix::sys::signal::pthread_sigmask(
            nix::sys::signal::SigmaskHow::SIG_BLOCK,
            Some(&mask),
            None,
        )?;
        let signals = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        let tid = nix::unistd::gettid().as_raw();
        let set_async = |fd: &OwnedFd, on: bool| -> nix::Result<()> {
            let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
            let flags = if on {
                flags | OFlag::O_ASYNC
            } else {
                flags - OFlag::O_ASYNC
            };
            fcntl(fd, FcntlArg::F_SETFL(flags)).map(drop)
        };
        let armed = read.iter().try_for_each(|fd| {
            fasync::aim(fd.as_fd(), signal, tid)?;
            set_async(fd, true).map_err(std::io::Error::from)
        });
        if let Err(e) = armed {
            // Half armed is not armed: no signal keeps queueing for a reader that polls.
            for fd in read {
                let _ = set_async(fd, false);
            }
            return Err(e);
        }
        Ok(Self { signals, signal })
    }
}

/// The few `fcntl` commands and signal sets nix does not wrap.
#[allow(unsafe_code)]
mod fasync {
    use std::os::fd::{AsRawFd, BorrowedFd};

    use nix::sys::signal::{SigSet, Signal};

    // Linux's values (include/uapi/asm-generic/fcntl.h), the same on x86-64 and arm64;
    // the libc crate does not define them for glibc targets.
    const F_SETSIG: libc::c_int = 10;
    const F_SETOWN_EX: libc::c_int = 15;
    const F_OWNER_TID: libc::c_int = 0;

    #[repr(C)]
    struct OwnerEx {
        kind: libc::c_int,
        pid: libc::pid_t,
    }

    /// `signal` on every write to `fd`'s pipe, sent to thread `tid`.
    pub fn aim(fd: BorrowedFd<'_>, signal: i32, tid: i32) -> std::io::Result<()> {
        let owner = OwnerEx {
            kind: F_OWNER_TID,
            pid: tid,
        };
        // SAFETY: `fd` is open for the call (borrowed); F_SETOWN_EX reads one
        // `struct f_owner_ex`, which `owner` is laid out as and outlives the call;
        // F_SETSIG takes an int.
        let done = unsafe {
            libc::fcntl(fd.as_raw_fd(), F_SETOWN_EX, &owner as *const OwnerEx) == 0
                && libc::fcntl(fd.as_raw_fd(), F_SETSIG, signal) == 0
        };
        if done {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// The set of `signal` (a real-time one, which nix's `Signal` cannot name) and SIGIO.
    pub fn mask(signal: i32) -> SigSet {
        let mut set = SigSet::from(Signal::SIGIO);
        let mut raw: libc::sigset_t = *set.as_ref();
        // SAFETY: `raw` is an initialised set (a copy of nix's); sigaddset writes within
        // it and only fails for a signal number out of range, which leaves it as it was.
        unsafe {
            libc::sigaddset(&mut raw, signal);
            set = SigSet::from_sigset_t_unchecked(raw);
        }
        set
    }
}

/// What the reader keeps between reads.
struct Reader {
    sinks: Sinks,
    buf: Vec<u8>,
    /// The unended line of each stream, for the detector.
    lines: [Vec<u8>; 2],
    /// The ordered log's records of one round, written at once.
    records: Vec<u8>,
    /// The round's output, echoed once its records are written: the bytes, and where
    /// each stream's run of them ends.
    echoes: Vec<u8>,
    echo_runs: Vec<(Stream, usize)>,
    ended: [bool; 2],
    budget_told: bool,
    rotation_failed: bool,
}

const STREAMS: [Stream; 2] = [Stream::Stdout, Stream::Stderr];

impl Reader {
    fn new(sinks: Sinks) -> Self {
        Self {
            sinks,
            buf: vec![0; READ_SIZE],
            lines: [Vec::new(), Vec::new()],
            records: Vec::new(),
            // Past the bound by one read at most: never grown by doubling.
            echoes: Vec::with_capacity(RECORDS_HELD + READ_SIZE),
            echo_runs: Vec::new(),
            ended: [false, false],
            budget_told: false,
            rotation_failed: false,
        }
    }

    fn run(&mut self, read: &[OwnedFd; 2], order: Option<&Order>) {
        while !(self.ended[0] && self.ended[1]) {
            match order {
                Some(order) => self.round_in_order(read, order),
                None => self.round_polled(read),
            }
            self.flush();
        }
    }

    /// Waits for the next writes' signals and takes their packets in order.
    fn round_in_order(&mut self, read: &[OwnedFd; 2], order: &Order) {
        let mut fds = [PollFd::new(order.signals.as_fd(), PollFlags::POLLIN)];
        let woke = poll(&mut fds, PollTimeout::from(SAFETY_PERIOD_MS)).unwrap_or(0);
        if woke == 0 {
            // No output for a while: runtime lines held for an unended user line go out
            // (with output, the echo itself lets them go).
            logging::release_held(false);
            // A second without a signal: take whatever is there (writes without a
            // signal cannot happen, but nothing is ever left behind).
            self.drain(read);
            return;
        }
        while let Ok(Some(info)) = order.signals.read_signal() {
            let signo = info.ssi_signo as i32;
            if signo == order.signal {
                if let Some(i) = read.iter().position(|fd| fd.as_raw_fd() == info.ssi_fd) {
                    self.take_write(i, read[i].as_fd());
                }
            } else {
                // SIGIO: the queue of signals overflowed; the order of what is in the
                // pipes now is lost.
                self.drain(read);
            }
        }
    }

    /// Polls both pipes and takes what each has.
    fn round_polled(&mut self, read: &[OwnedFd; 2]) {
        let mut fds: Vec<PollFd> = read
            .iter()
            .map(|fd| PollFd::new(fd.as_fd(), PollFlags::POLLIN))
            .collect();
        if poll(&mut fds, PollTimeout::from(SAFETY_PERIOD_MS)).unwrap_or(0) == 0 {
            logging::release_held(false);
        }
        self.drain(read);
    }

    /// Takes everything each pipe holds, stdout first.
    fn drain(&mut self, read: &[OwnedFd; 2]) {
        for (i, fd) in read.iter().enumerate() {
            while !self.ended[i] && self.take_packet(i, fd.as_fd()) > 0 {}
        }
    }

    /// Takes one write of pipe `i`: its packet, and the next ones while they are whole
    /// pages (a write larger than a page).
    fn take_write(&mut self, i: usize, fd: BorrowedFd<'_>) {
        while !self.ended[i] && self.take_packet(i, fd) == PAGE {}
    }

    /// Reads once from pipe `i` and passes it on; returns the bytes read (0 at its end or
    /// when it is empty).
    fn take_packet(&mut self, i: usize, fd: BorrowedFd<'_>) -> usize {
        let n = loop {
            match nix::unistd::read(fd, &mut self.buf) {
                Ok(0) => {
                    self.end(i);
                    return 0;
                }
                Ok(n) => break n,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(nix::errno::Errno::EAGAIN) => return 0,
                Err(e) => {
                    tracing::warn!(stream = STREAMS[i].as_str(), error = %e, "cannot read the user command's output");
                    self.end(i);
                    return 0;
                }
            }
        };
        let chunk = std::mem::take(&mut self.buf);
        self.pass_on(i, &chunk[..n]);
        self.buf = chunk;
        n
    }

    fn pass_on(&mut self, i: usize, chunk: &[u8]) {
        let stream = STREAMS[i];
        if self.sinks.log.is_some() {
            let time = jiff::Timestamp::now().to_string();
            ordered_log::append(&mut self.records, &time, stream, chunk);
        }
        self.hold_echo(stream, chunk);
        // A round can last as long as a writer keeps the pipe full: written as it goes,
        // the round never holds more than this in memory.
        if self.records.len() >= RECORDS_HELD || self.echoes.len() >= RECORDS_HELD {
            self.flush();
        }
        // Line by line to the detector.
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            let line = &mut self.lines[i];
            if line.is_empty() {
                self.sinks.detector.line(stream, &rest[..end]);
            } else {
                line.extend_from_slice(&rest[..end]);
                let whole = std::mem::take(line);
                self.sinks.detector.line(stream, &whole);
            }
            rest = &rest[end + 1..];
        }
        let line = &mut self.lines[i];
        line.extend_from_slice(&rest[..rest.len().min(LINE_MAX.saturating_sub(line.len()))]);
    }

    /// Keeps `chunk` to echo once the round's records are written, as a write of its own.
    fn hold_echo(&mut self, stream: Stream, chunk: &[u8]) {
        self.echoes.extend_from_slice(chunk);
        self.echo_runs.push((stream, self.echoes.len()));
    }

    fn echo(&mut self, stream: Stream, chunk: &[u8]) {
        let (echoed, used_up) = self.sinks.budget.take(chunk);
        logging::echo(stream, echoed);
        if used_up && !self.budget_told {
            self.budget_told = true;
            logging::echo(stream, self.sinks.budget.used_up_note().as_bytes());
        }
        self.sinks.budget.echoed(&mut self.rotation_failed);
    }

    /// Writes the round's records, then echoes its output: a line is in the container log
    /// only once its record is in the ordered log.
    fn flush(&mut self) {
        if !self.records.is_empty() {
            let written = self.sinks.log.as_ref().map(|log| {
                log.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .write_records(&self.records)
            });
            if let Some(Err(e)) = written {
                tracing::warn!(error = %e, "cannot write the user log; output still goes to the container log");
                self.sinks.log = None;
            }
            self.records.clear();
        }
        let (mut echoes, mut runs) = (
            std::mem::take(&mut self.echoes),
            std::mem::take(&mut self.echo_runs),
        );
        let mut start = 0;
        for &(stream, end) in &runs {
            self.echo(stream, &echoes[start..end]);
            start = end;
        }
        // Their room is kept for the next round.
        echoes.clear();
        runs.clear();
        (self.echoes, self.echo_runs) = (echoes, runs);
    }

    fn end(&mut self, i: usize) {
        self.ended[i] = true;
        let line = std::mem::take(&mut self.lines[i]);
        if !line.is_empty() {
            self.sinks.detector.line(STREAMS[i], &line);
        }
    }

    fn finish(mut self) -> Detector {
        self.flush();
        logging::release_held(true);
        self.sinks.detector
    }
}
