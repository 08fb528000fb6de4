//! Signals arrive through a signalfd: they are blocked for the whole process (before any
//! thread starts, so every thread inherits the mask) and read as data in the main loop.
//! Children must not inherit that mask (nor one our own parent left us: `unshare --fork`
//! blocks nearly everything): [`super::spawn`] starts every child with none blocked.

use std::os::fd::AsFd;
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};

/// Signals left to their default action, as tini leaves them: the synchronous ones, which
/// report a fault of this very process, and the terminal's SIGTTIN/SIGTTOU. SIGKILL and
/// SIGSTOP cannot be caught at all. Every other signal is taken here and passed on.
pub const NOT_TAKEN: [Signal; 9] = [
    Signal::SIGFPE,
    Signal::SIGILL,
    Signal::SIGSEGV,
    Signal::SIGBUS,
    Signal::SIGABRT,
    Signal::SIGTRAP,
    Signal::SIGSYS,
    Signal::SIGTTIN,
    Signal::SIGTTOU,
];

/// Whether a signal the runtime received goes on to the user command's process group:
/// all of them but SIGCHLD, which tells of the runtime's own children.
pub fn forwarded(signal: Signal) -> bool {
    signal != Signal::SIGCHLD
}

pub struct Signals {
    fd: SignalFd,
}

impl Signals {
    /// Blocks every signal but [`NOT_TAKEN`], and opens the fd that delivers them. Call
    /// before starting any thread.
    pub fn block() -> nix::Result<Self> {
        let mut mask = SigSet::all();
        for signal in NOT_TAKEN {
            mask.remove(signal);
        }
        // SETMASK, not BLOCK: whatever our parent blocked, exactly these are blocked now.
        pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&mask), None)?;
        let fd = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        Ok(Self { fd })
    }

    /// Waits up to `timeout` (forever with `None`) and returns every pending signal.
    pub fn wait(&self, timeout: Option<Duration>) -> nix::Result<Vec<Signal>> {
        let timeout = match timeout {
            None => PollTimeout::NONE,
            Some(t) => {
                let millis = i32::try_from(t.as_millis().max(1)).unwrap_or(i32::MAX);
                PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX)
            }
        };
        let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, timeout) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
        let mut signals = Vec::new();
        while let Some(info) = self.fd.read_signal()? {
            if let Ok(signal) = Signal::try_from(info.ssi_signo as i32) {
                signals.push(signal);
            }
        }
        Ok(signals)
    }
}
