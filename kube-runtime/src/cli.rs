//! The command line of the runtime: `entry` (init container) and `run` (also reached as
//! `<root>/run`, the main container's command). Shared by the `kube-runtime` binary and
//! by `rest-lite`, which carries the same runtime for the embedded default.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::layout::{ASSETS_VAR, Layout};
use crate::supervisor::signals::Signals;
use crate::{entry, run};
use pai_contract::paths::commands;

/// The variable `name`, taken out of this process's environment: the runtime's own
/// settings, which neither the scripts nor the user command see. Runs before any thread
/// exists.
fn take_var(name: &str) -> Option<std::ffi::OsString> {
    let value = std::env::var_os(name)?;
    #[allow(unsafe_code)]
    // SAFETY: called first thing in main, before any thread exists: nothing reads the
    // environment concurrently.
    unsafe {
        std::env::remove_var(name)
    };
    Some(value)
}

/// With [`PARENT_PID`](pai_contract::env::runtime::PARENT_PID) set (the embedded default
/// sets it): SIGTERM when that parent dies, and an error if it is gone already. The
/// variable is removed first: neither the scripts nor the user command see it. Runs
/// before any thread exists.
fn die_with_parent() -> Result<(), String> {
    use pai_contract::env::runtime::PARENT_PID;
    let Some(value) = take_var(PARENT_PID) else {
        return Ok(());
    };
    let parent: i32 = value
        .to_str()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("{PARENT_PID}={value:?} is not a process id"))?;
    nix::sys::prctl::set_pdeathsig(Some(nix::sys::signal::Signal::SIGTERM))
        .map_err(|e| format!("cannot arm the parent-death signal: {e}"))?;
    if nix::unistd::getppid().as_raw() != parent {
        return Err("the server that started this task has ended".to_string());
    }
    Ok(())
}

/// With [`CPU_GROUP`](pai_contract::env::runtime::CPU_GROUP) set (the embedded default
/// sets it): this process joins that CPU cgroup before it starts anything. Best effort:
/// a task outside the group only competes with the server process by process, and the
/// server, which moves the process too, says when it cannot. Runs before any thread
/// exists.
fn join_cpu_group() {
    use pai_contract::env::runtime::CPU_GROUP;
    let Some(procs) = take_var(CPU_GROUP) else {
        return;
    };
    // "0": the writing process itself.
    let _ = std::fs::write(procs, "0");
}

/// With [`LOG_FILE`](pai_contract::env::runtime::LOG_FILE) set (the embedded default's
/// Docker containers): that file, opened to append, becomes this process's standard
/// output and error, before anything is written. Runs before any thread exists.
fn log_to_file() -> Result<(), String> {
    use pai_contract::env::runtime::LOG_FILE;
    let Some(path) = take_var(LOG_FILE) else {
        return Ok(());
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| format!("cannot open {LOG_FILE}={}: {e}", path.to_string_lossy()))?;
    let err = file
        .try_clone()
        .map_err(|e| format!("cannot open {LOG_FILE}: {e}"))?;
    nix::unistd::dup2_stdout(file).map_err(|e| format!("cannot write to {LOG_FILE}: {e}"))?;
    nix::unistd::dup2_stderr(err).map_err(|e| format!("cannot write to {LOG_FILE}: {e}"))?;
    Ok(())
}

/// [`LOG_ROTATION`](pai_contract::env::runtime::LOG_ROTATION), taken out of the
/// environment (the embedded default sets it): the bound of the container log where it
/// is this process's standard output. Runs before any thread exists.
fn take_log_rotation() -> Option<pai_contract::log_rotation::Rotation> {
    use pai_contract::env::runtime::LOG_ROTATION;
    let value = take_var(LOG_ROTATION)?;
    value
        .to_str()
        .and_then(pai_contract::log_rotation::Rotation::from_env)
}

/// With [`ENV_FROM`](pai_contract::env::runtime::ENV_FROM) set (the embedded default's
/// containers): the file's `NAME=VALUE\0` records become this process's environment, over
/// what the engine gave it (as a pod's variables go over its image's), and the file and
/// the variable are removed. Runs before any thread exists.
fn environment_from_file() -> Result<(), String> {
    use pai_contract::env::runtime::ENV_FROM;
    use std::os::unix::ffi::OsStrExt;
    let Some(path) = std::env::var_os(ENV_FROM) else {
        return Ok(());
    };
    let bytes = std::fs::read(&path)
        .map_err(|e| format!("cannot read {ENV_FROM}={}: {e}", path.to_string_lossy()))?;
    let mut records = Vec::new();
    for record in bytes.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        let at = record
            .iter()
            .position(|b| *b == b'=')
            .filter(|at| *at > 0)
            .ok_or_else(|| {
                format!(
                    "{ENV_FROM}: a record without NAME= ({} bytes)",
                    record.len()
                )
            })?;
        records.push((
            std::ffi::OsStr::from_bytes(&record[..at]).to_owned(),
            std::ffi::OsStr::from_bytes(&record[at + 1..]).to_owned(),
        ));
    }
    let _ = std::fs::remove_file(&path);
    #[allow(unsafe_code)]
    // SAFETY: called first thing in main, before any thread exists: nothing reads the
    // environment concurrently.
    unsafe {
        std::env::remove_var(ENV_FROM);
        for (name, value) in records {
            std::env::set_var(name, value);
        }
    }
    Ok(())
}

/// The runtime's commands, as clap reads them.
#[derive(clap::Parser, Debug)]
#[command(
    name = "kube-runtime",
    about = "The program inside every task: `entry` in the init container, `run` as PID 1 of the main container."
)]
enum Command {
    /// The init container's work: `prep/`, the gang barrier, the task's env files and
    /// script.
    #[command(name = commands::ENTRY)]
    Entry {
        /// Where the task's files go (default: the runtime's root).
        #[arg(long, value_name = "DIR")]
        root: Option<PathBuf>,
        /// Where `prep/` and `init/` are (default: `$PAI_RUNTIME_ASSETS`, else beside
        /// this program).
        #[arg(long, value_name = "DIR")]
        assets: Option<PathBuf>,
    },
    /// PID 1 of the main container: the `init/` daemons, the user command, its signals
    /// and its exit code.
    #[command(name = commands::RUN)]
    Run {
        /// Where `entry` left the task's files.
        #[arg(long, value_name = "DIR")]
        root: Option<PathBuf>,
    },
    /// Prints `uid:gid` of the user this runs as (the embedded default asks an image's).
    #[command(name = commands::WHOAMI, hide = true)]
    Whoami,
}

/// Runs the runtime with `args` (`args[0]` is the program name; `run` as its file name
/// means the `run` command). Call before any thread starts: `run` blocks signals for
/// every thread it will have.
// Long: the steps before any thread exists, in their order, then one arm per command.
pub fn main(mut args: Vec<String>) -> ExitCode {
    // Where the engine holds no log of its own, nothing may be written before this.
    let logged = log_to_file();
    join_cpu_group();
    let log_rotation = take_log_rotation();
    // Failures before a command's own start are logged as its are.
    if let Err(message) = logged
        .and_then(|()| environment_from_file())
        .and_then(|()| die_with_parent())
    {
        pai_barrier::logging::init();
        return fail(1, &message);
    }
    // `run entry` is the runtime installed as `run` asked for `entry` (a container of the
    // embedded default starts its init step so).
    let invoked_as_run = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .is_some_and(|n| n == commands::RUN)
        && args
            .get(1)
            .is_none_or(|a| a != commands::ENTRY && a != commands::WHOAMI);
    if invoked_as_run {
        args.insert(1, commands::RUN.to_string());
    }
    // argv may be empty (execve allows it): then there is no command, a usage error.
    let command = match <Command as clap::Parser>::try_parse_from(&args) {
        Ok(command) => command,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    match command {
        Command::Whoami => {
            use std::io::Write;
            let line = format!("{}:{}\n", nix::unistd::getuid(), nix::unistd::getgid());
            match std::io::stdout().write_all(line.as_bytes()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(_) => ExitCode::FAILURE,
            }
        }
        Command::Run { root } => {
            // Before any thread exists, so that every thread inherits the blocked mask.
            let signals = match Signals::block() {
                Ok(s) => s,
                Err(e) => return fail(1, &format!("cannot set up signal handling: {e}")),
            };
            pai_barrier::logging::init();
            let layout = Layout::from_env(root);
            match run::run(&layout, &signals, log_rotation) {
                Ok(ended) => ExitCode::from(u8::try_from(ended.code()).unwrap_or(1)),
                Err(e) => fail(e.exit_code().code(), &e.to_string()),
            }
        }
        Command::Entry { root, assets } => {
            pai_barrier::logging::init();
            let assets = assets
                .or_else(|| std::env::var_os(ASSETS_VAR).map(PathBuf::from))
                .or_else(|| {
                    std::env::current_exe()
                        .ok()
                        .and_then(|p| p.parent().map(PathBuf::from))
                })
                .unwrap_or_else(|| PathBuf::from("."));
            match entry::entry(&Layout::from_env(root), &assets) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(e.exit_code().code(), &e.to_string()),
            }
        }
    }
}

fn fail(code: i32, message: &str) -> ExitCode {
    tracing::error!(exit_code = code, "{message}");
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_argv_is_a_usage_error_not_a_panic() {
        assert_eq!(
            format!("{:?}", main(Vec::new())),
            format!("{:?}", ExitCode::from(2))
        );
        assert_eq!(
            format!("{:?}", main(vec!["kube-runtime".into(), "--root".into()])),
            format!("{:?}", ExitCode::from(2))
        );
        assert_eq!(
            format!(
                "{:?}",
                main(vec!["kube-runtime".into(), "entry".into(), "--nope".into()])
            ),
            format!("{:?}", ExitCode::from(2))
        );
    }
}
