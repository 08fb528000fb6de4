//! Starting the supervisor's children with `posix_spawn`, never a fork, and with their
//! environment assembled once.
//!
//! Per task this is on the path of every job's start, multiplied by its task count: with
//! a pre-exec closure (or the standard library's `Command` with one) the runtime forks,
//! and the child copies this process's page tables and faults its pages in until it
//! execs; `posix_spawn` starts the program without either. And `Command::env` copies a
//! large environment three times (into its map, into the map it captures at spawn, into
//! `envp`): OpenPAI's contract gives a 1,000-task job's user command some 5,000
//! variables. Here each variable is one `NAME=value` string, made once.
//!
//! Every child starts as the standard library starts one: no signal blocked (the
//! supervisor blocks them all for its signalfd), `SIGPIPE` at its default (Rust's
//! runtime ignores it), and in a new process group of its own.

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::spawn::{PosixSpawnAttr, PosixSpawnFileActions, PosixSpawnFlags, posix_spawn};
use nix::sys::signal::{SigSet, Signal};
use nix::unistd::Pid;

/// A child's environment: `NAME=value` strings, as `execve` takes them.
#[derive(Clone, Debug, Default)]
pub struct Environment(Vec<CString>);

impl Environment {
    /// From `(name, value)` pairs, sorted by name as the standard library's `Command`
    /// hands them over (the order matters to a shell: dash imports 5,000 variables in
    /// the order of a 1,000-task job's files about 0.5 ms slower than sorted); of two
    /// pairs with one name the later one is kept, as `Command::env` keeps it (a shell
    /// would take the last of two, a libc the first). A name or value with a NUL byte
    /// (which no environment can carry) is refused, naming the variable.
    pub fn new<'a>(
        vars: impl IntoIterator<Item = (&'a OsString, &'a OsString)>,
    ) -> std::io::Result<Self> {
        let mut vars: Vec<(&OsString, &OsString)> = vars.into_iter().collect();
        // Stable: of one name, the later pair stays later, and is the one kept. The
        // names are compared as they are (no scan for `=` per comparison), and runs
        // already in order (the job's files are written sorted) are merged, not sorted.
        vars.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        vars.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                std::mem::swap(later, kept);
            }
            same
        });
        let mut entries = Vec::with_capacity(vars.len());
        for (name, value) in vars {
            let mut entry = Vec::with_capacity(name.len() + value.len() + 2);
            entry.extend_from_slice(name.as_bytes());
            entry.push(b'=');
            entry.extend_from_slice(value.as_bytes());
            let entry = CString::new(entry).map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "the variable {} has a NUL byte, which no environment can carry",
                        name.to_string_lossy()
                    ),
                )
            })?;
            entries.push(entry);
        }
        Ok(Self(entries))
    }
}

/// Where one of a child's standard streams goes.
#[derive(Debug)]
pub enum Stream {
    /// This process's own.
    Inherit,
    /// This descriptor (closed here once the child has its copy).
    To(OwnedFd),
}

/// The child's standard input, output and error.
#[derive(Debug)]
pub struct Streams {
    pub stdin: Stream,
    pub stdout: Stream,
    pub stderr: Stream,
}

/// Starts `program` with `args` (after `argv[0]`, which is the program's path) and
/// exactly `env`, in a process group of its own; returns its pid. The caller reaps it.
pub fn spawn(
    program: &Path,
    args: &[&OsStr],
    env: &Environment,
    streams: Streams,
) -> std::io::Result<Pid> {
    let mut actions = PosixSpawnFileActions::init()?;
    for (stream, target) in [
        (&streams.stdin, 0),
        (&streams.stdout, 1),
        (&streams.stderr, 2),
    ] {
        if let Stream::To(fd) = stream {
            // dup2 onto the standard descriptor clears its close-on-exec flag (and
            // posix_spawn clears it too when the descriptor already is the target).
            actions.add_dup2(fd.as_raw_fd(), target)?;
        }
    }
    let mut attr = PosixSpawnAttr::init()?;
    attr.set_flags(
        PosixSpawnFlags::POSIX_SPAWN_SETPGROUP
            | PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK
            | PosixSpawnFlags::POSIX_SPAWN_SETSIGDEF,
    )?;
    attr.set_pgroup(Pid::from_raw(0))?;
    attr.set_sigmask(&SigSet::empty())?;
    attr.set_sigdefault(&catchable())?;
    let program_c = c_string(program.as_os_str())?;
    let mut argv = Vec::with_capacity(args.len() + 1);
    argv.push(program_c.clone());
    for arg in args {
        argv.push(c_string(arg)?);
    }
    let pid = posix_spawn(program_c.as_c_str(), &actions, &attr, &argv, &env.0)?;
    // The child has its copies of the streams now; ours close here.
    drop(streams);
    Ok(pid)
}

/// Every signal a child gets back at its default action, as a container's PID 1 starts
/// its command: whatever was ignored where the runtime was started (`nohup`'s SIGHUP,
/// Rust's SIGPIPE, a shell's SIGINT for a background job) is not ignored in the task.
/// SIGKILL and SIGSTOP have no other action.
fn catchable() -> SigSet {
    // The real-time ones too; glibc keeps its own two (32 and 33) out of every set and
    // sets them itself.
    let mut all = SigSet::all();
    all.remove(Signal::SIGKILL);
    all.remove(Signal::SIGSTOP);
    all
}

fn c_string(s: &OsStr) -> std::io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} has a NUL byte", s.to_string_lossy()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::wait::{WaitStatus, waitpid};
    use std::io::Read;

    fn wait(pid: Pid) -> i32 {
        match waitpid(pid, None).expect("waitpid") {
            WaitStatus::Exited(_, code) => code,
            other => panic!("unexpected {other:?}"),
        }
    }

    fn run_sh(script: &str, env: &Environment) -> (i32, String) {
        let (mut reader, writer) = std::io::pipe().expect("pipe");
        let pid = spawn(
            Path::new("/bin/sh"),
            &[OsStr::new("-c"), OsStr::new(script)],
            env,
            Streams {
                stdin: Stream::Inherit,
                stdout: Stream::To(writer.into()),
                stderr: Stream::Inherit,
            },
        )
        .expect("spawn");
        let mut out = String::new();
        reader.read_to_string(&mut out).expect("read");
        (wait(pid), out)
    }

    #[test]
    fn the_child_gets_exactly_the_environment_and_its_own_group() {
        let vars: Vec<(OsString, OsString)> = vec![
            ("EMPTY".into(), "".into()),
            ("B".into(), "two words = and more".into()),
            ("A".into(), "1".into()),
        ];
        let env = Environment::new(vars.iter().map(|(k, v)| (k, v))).expect("env");
        let (code, out) = run_sh(
            "env | LC_ALL=C sort | grep -v '^PWD='; ps -o pgid= -p $$; echo $$; exit 7",
            &env,
        );
        assert_eq!(code, 7);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            &lines[..3],
            &["A=1", "B=two words = and more", "EMPTY="],
            "{out}"
        );
        // Its process group is its own pid.
        assert_eq!(lines[3].trim(), lines[4].trim(), "{out}");
    }

    #[test]
    fn sorted_by_name_and_the_later_of_a_name_kept() {
        let vars: Vec<(OsString, OsString)> = vec![
            ("PAI_B".into(), "first".into()),
            ("PAI_A_X".into(), "1".into()),
            ("PAI_A".into(), "2".into()),
            ("PAI_B".into(), "second".into()),
        ];
        let env = Environment::new(vars.iter().map(|(k, v)| (k, v))).expect("env");
        let entries: Vec<&str> = env.0.iter().map(|e| e.to_str().expect("utf-8")).collect();
        assert_eq!(entries, ["PAI_A=2", "PAI_A_X=1", "PAI_B=second"]);
        let (_, out) = run_sh("printf '%s' \"$PAI_B\"", &env);
        assert_eq!(out, "second");
    }

    #[test]
    fn no_signal_blocked_or_ignored_in_the_child() {
        // This test process ignores SIGPIPE (Rust's runtime) and blocks SIGUSR1 now; a
        // server started under `nohup` ignores SIGHUP the same way (the end-to-end test
        // `local::a_task_of_a_server_that_ignores_sighup_still_dies_of_it`).
        let mut blocked = SigSet::empty();
        blocked.add(Signal::SIGUSR1);
        blocked.thread_block().expect("block");
        let (code, out) = run_sh(
            "grep -E '^Sig(Blk|Ign):' /proc/self/status",
            &Environment::default(),
        );
        blocked.thread_unblock().expect("unblock");
        assert_eq!(code, 0);
        assert!(out.contains("SigBlk:\t0000000000000000"), "{out}");
        // Signals 1 to 31 (bits 0 to 30); 32 and 33 are glibc's own.
        let ignored = out
            .lines()
            .find_map(|l| l.strip_prefix("SigIgn:\t"))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .expect("SigIgn");
        assert_eq!(ignored & 0x7fff_ffff, 0, "nothing ignored: {out}");
    }

    #[test]
    fn a_nul_byte_is_refused_naming_the_variable() {
        let vars: Vec<(OsString, OsString)> = vec![("BAD".into(), "a\0b".into())];
        let err = Environment::new(vars.iter().map(|(k, v)| (k, v))).expect_err("refused");
        assert!(err.to_string().contains("BAD"), "{err}");
    }

    #[test]
    fn a_missing_program_is_an_error_not_a_child() {
        let err = spawn(
            Path::new("/nonexistent/program"),
            &[],
            &Environment::default(),
            Streams {
                stdin: Stream::Inherit,
                stdout: Stream::Inherit,
                stderr: Stream::Inherit,
            },
        )
        .expect_err("no such program");
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "{err}");
    }
}
