//! `kube-runtime run` (installed as `<root>/run`), PID 1 of the main container: load the
//! env file, hold the ssh port (sessions get the whole environment), then supervise the daemons and
//! the user command.

use std::ffi::{OsStr, OsString};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pai_contract::training::files as training_files;

use crate::layout::{self, Layout, Task};
use crate::logs::DEFAULT_CAP;
use crate::shell;
use crate::supervisor::signals::Signals;
use crate::supervisor::ssh::{SessionEnv, Sshd};
use crate::supervisor::{Ended, Plan, SuperviseError, supervise};

/// Seconds between TERM and KILL, written by rest-lite from the pod's grace period.
pub const GRACE_VAR: &str = pai_contract::env::KILL_GRACE_SEC;
/// Cap of `user.log` in bytes, written by rest-lite from its config.
pub const LOG_CAP_VAR: &str = pai_contract::env::LOG_MAX_BYTES;
/// The grace period of a Framework written without rest-lite (Kubernetes' default pod
/// grace period is 30 s; this leaves the runtime time to report).
const DEFAULT_GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot read {path} (did the init container run?): {source}")]
    EnvFile {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is damaged: {source}")]
    EnvSyntax {
        path: String,
        source: shell::EnvFileError,
    },
    #[error("the pod is not set up as FrameworkController sets it up: {0}")]
    Identity(String),
    #[error("{0}")]
    Settings(String),
    #[error(transparent)]
    Code(#[from] crate::code::CodeError),
    #[error(transparent)]
    Supervise(#[from] SuperviseError),
}

impl RunError {
    /// The task's exit code: code that cannot be put in place fails it for good (a retry
    /// finds the same), anything else may pass.
    pub fn exit_code(&self) -> pai_contract::exit::ExitCode {
        match self {
            Self::Code(_) => pai_contract::exit::ExitCode::PermanentFailure,
            // Placed where its port is taken: retried, elsewhere, without counting.
            Self::Supervise(SuperviseError::PortTaken { .. }) => {
                pai_contract::exit::ExitCode::TransientConflict
            }
            _ => pai_contract::exit::ExitCode::TransientFailure,
        }
    }
}

/// The user command's shell: bash, as OpenPAI's container script ran the command, where
/// the image has it; `sh` otherwise.
pub fn user_shell() -> &'static str {
    ["/bin/bash", "/usr/bin/bash"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .unwrap_or("/bin/sh")
}

/// Set for the user command unless the job sets it.
pub const UNBUFFERED: (&str, &str) = ("PYTHONUNBUFFERED", "1");

/// The grace period between TERM and KILL, and the user log's cap, as the environment
/// says (their defaults where it does not).
fn limits(get: &impl Fn(&str) -> Option<String>) -> Result<(Duration, u64), RunError> {
    let grace = match get(GRACE_VAR) {
        Some(v) => Duration::from_secs(v.parse().map_err(|_| {
            RunError::Settings(format!("{GRACE_VAR}={v:?} is not a number of seconds"))
        })?),
        None => DEFAULT_GRACE,
    };
    let log_cap = match get(LOG_CAP_VAR) {
        Some(v) => v.parse().map_err(|_| {
            RunError::Settings(format!("{LOG_CAP_VAR}={v:?} is not a number of bytes"))
        })?,
        None => DEFAULT_CAP,
    };
    Ok((grace, log_cap))
}

/// Loads the environment and supervises the task to its end.
/// `log_rotation`: the container log's bound, where the embedded default gave one.
pub fn run(
    layout: &Layout,
    signals: &Signals,
    log_rotation: Option<pai_contract::log_rotation::Rotation>,
) -> Result<Ended, RunError> {
    let env = environment(layout)?;
    let get = |name: &str| {
        env.iter()
            .rev()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.to_str())
            .map(str::to_string)
    };
    let task = Task::from_env(get).map_err(RunError::Identity)?;
    let result_file = get(pai_contract::env::runtime::RESULT_FILE).map(PathBuf::from);
    let (grace, log_cap) = limits(&get)?;
    // The runtime's, from the container's environment; not the user command's.
    let failure_patterns = std::env::var(pai_contract::failure::PATTERNS_VAR).ok();
    let user_key = get("PAI_SSH_PUB_KEY").is_some_and(|k| !k.is_empty());
    let ssh_port = get(pai_contract::env::CONTAINER_SSH_PORT).and_then(|p| p.parse().ok());
    // Taken off standard input whether or not ssh is served: the user command gets
    // `/dev/null` there, never the port.
    let handed = handed_listener(ssh_port);
    let daemons = layout::scripts(&layout.init_dir()).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "cannot list the init scripts; no daemon starts");
        Vec::new()
    });
    if let Some(code_dir) = get(pai_contract::env::CODE_DIR).filter(|c| !c.is_empty()) {
        let workdir = std::env::current_dir()
            .map_err(|e| RunError::Settings(format!("cannot read the working directory: {e}")))?;
        crate::code::fetch(&code_dir, &workdir)?;
    }
    if let Some(at) = get(pai_contract::training::JOB_HOSTFILE_VAR).filter(|p| !p.is_empty()) {
        link_job_hostfile(
            &layout.root().join(training_files::HOSTFILE),
            Path::new(&at),
        );
    }
    let daemon_env = daemon_environment(layout, &env);
    let env = std::sync::Arc::new(env);
    let ssh = ssh_port.and_then(|port| {
        ssh_on_demand(
            layout,
            port,
            handed,
            user_key,
            &task,
            &daemons,
            &daemon_env,
            &env,
        )
    });
    let plan = Plan {
        program: user_shell().into(),
        args: vec![layout.main_sh().into_os_string()],
        daemons,
        env,
        daemon_env,
        log_dir: task.log_dir(layout),
        log_cap,
        log_rotation,
        grace,
        failure_patterns,
        ssh,
    };
    let oom_kills = crate::oom::kills();
    let mut outcome = supervise(&plan, signals)?;
    // The kernel's OOM killer says more than any line of the output.
    // By SIGKILL, itself or a process its shell waited for (the shell's 137).
    let killed = outcome.ended.code() == 128 + nix::sys::signal::Signal::SIGKILL as i32;
    if let Some(oom) = crate::oom::cause(oom_kills, killed) {
        outcome.cause = Some(oom);
    }
    if let Some(cause) = &outcome.cause {
        tracing::info!(pattern = %cause.pattern, cause = %cause.line, "the user command failed");
    }
    report(result_file.as_deref(), outcome.cause);
    Ok(outcome.ended)
}

/// Links the job's MPI hostfile `hostfile` (written by the init container when the job
/// asks for `mpi`) at `at`, where DeepSpeed's launcher looks without `--hostfile`. Only
/// where the platform says the task's file system is its own (a pod, an image's
/// container); a file the image has there already is left as it is.
fn link_job_hostfile(hostfile: &Path, at: &Path) {
    if !hostfile.exists() {
        return;
    }
    if std::fs::symlink_metadata(at).is_ok() {
        tracing::info!(path = %at.display(), "the image has its own file there; the job's hostfile is not linked to it");
        return;
    }
    let linked = at
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::os::unix::fs::symlink(hostfile, at));
    match linked {
        Ok(()) => tracing::info!(path = %at.display(), "the job's hostfile linked"),
        // Said in the runtime's lines alone: most jobs of an image whose user may not
        // write there never run DeepSpeed.
        Err(e) => tracing::info!(
            path = %at.display(),
            error = %e,
            "cannot link the job's hostfile there: give DeepSpeed --hostfile {}",
            hostfile.display()
        ),
    }
}

/// Sends the user command's result (the file it may have written) and the cause of its
/// failure as the container's termination message ([`pai_contract::results`]): where
/// `PAI_TERMINATION_LOG` says (the embedded default) or the kubelet's file in a pod. A
/// result that cannot be sent is reported as invalid; nothing here changes the task's
/// exit code.
fn report(result_file: Option<&Path>, cause: Option<pai_contract::failure::Cause>) {
    use pai_contract::results;
    let read = match result_file {
        Some(file) => std::fs::read(file),
        None => Err(ErrorKind::NotFound.into()),
    };
    let Some(message) = results::message(read, cause) else {
        return;
    };
    let target = std::env::var_os(pai_contract::env::runtime::TERMINATION_LOG)
        .map(PathBuf::from)
        .or_else(|| {
            let kubelet = Path::new(results::KUBELET_TERMINATION_LOG);
            kubelet.exists().then(|| kubelet.to_path_buf())
        });
    match target {
        Some(target) => match std::fs::write(&target, &message) {
            Ok(()) => tracing::info!(
                bytes = message.len(),
                "result and cause sent as the termination message"
            ),
            Err(e) => {
                tracing::warn!(path = %target.display(), error = %e, "cannot write the termination message; the result is not sent")
            }
        },
        None => tracing::warn!(
            "no termination message file (not in a pod, {} not set); the result and cause are not sent",
            pai_contract::env::runtime::TERMINATION_LOG
        ),
    }
    if let Some(pai_contract::results::Reported::Invalid(why)) = results::read(&message) {
        tracing::warn!("the result is not sent: {why}");
    }
}

/// The task's ssh port `port`, served on demand, when the job can log in (its key pair, or
/// `PAI_SSH_PUB_KEY`) and the task has a port.
#[allow(clippy::too_many_arguments)]
fn ssh_on_demand(
    layout: &Layout,
    port: u16,
    handed: Option<std::sync::Arc<std::net::TcpListener>>,
    user_key: bool,
    task: &Task,
    daemons: &[(String, PathBuf)],
    daemon_env: &[(OsString, OsString)],
    env: &std::sync::Arc<Vec<(OsString, OsString)>>,
) -> Option<Sshd> {
    let dir = layout.root().join("ssh");
    let keyed = user_key || std::fs::metadata(dir.join("job_key.pub")).is_ok_and(|m| m.len() > 0);
    // What an earlier run of this container said is not this run's.
    let _ = std::fs::remove_file(dir.join(crate::supervisor::ssh::SSHD_PATH_FILE));
    keyed.then(|| Sshd {
        port,
        address: crate::layout::bind_address(),
        listener: handed,
        dir,
        log: task.log_dir(layout).join(crate::supervisor::ssh::SSHD_LOG),
        env: daemon_env.to_vec(),
        session: SessionEnv::new(layout.env_all_file(), env.clone()),
        setup: daemons
            .iter()
            .find(|(name, _)| name == crate::supervisor::ssh::SETUP_SCRIPT)
            .map(|(_, path)| path.clone()),
    })
}

/// The ssh port's listener, when the embedded default handed it over on standard input
/// ([`pai_contract::env::runtime::SSH_LISTENER`]); standard input is `/dev/null` after
/// (what the user command and the daemons inherit). `None`, with a warning, when what is
/// there is not a socket listening on `port`.
fn handed_listener(port: Option<u16>) -> Option<std::sync::Arc<std::net::TcpListener>> {
    use pai_contract::env::runtime::{SSH_LISTENER, SSH_LISTENER_STDIN};
    use std::os::fd::AsFd;
    if std::env::var_os(SSH_LISTENER).is_none_or(|v| v != SSH_LISTENER_STDIN) {
        return None;
    }
    let listener = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map(std::net::TcpListener::from);
    if let Ok(null) = std::fs::File::open("/dev/null") {
        let _ = nix::unistd::dup2_stdin(null);
    }
    match listener {
        Ok(listener) if listener.local_addr().is_ok_and(|a| Some(a.port()) == port) => {
            Some(std::sync::Arc::new(listener))
        }
        _ => {
            tracing::warn!(
                ?port,
                "{SSH_LISTENER}={SSH_LISTENER_STDIN}, but standard input is not the ssh port's listener; binding it"
            );
            None
        }
    }
}

/// The container's environment with the env file's variables over it, the training
/// defaults under it (`jobEnvs` and the image's variables win), and the job's `bin/`
/// (its `ssh` with the task aliases) first on `PATH`.
fn environment(layout: &Layout) -> Result<Vec<(OsString, OsString)>, RunError> {
    let mut dynamic = read_env_file(&layout.env_file())?;
    // The peers' variables, apart (the same file in every task of a host); an older
    // runtime's `entry` wrote them all into `env.sh`.
    match read_env_file(&layout.peers_env_file()) {
        Ok(peers) => dynamic.extend(peers),
        Err(RunError::EnvFile { source, .. }) if source.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let defaults = match read_env_file(&layout.root().join(training_files::DEFAULTS_ENV)) {
        Ok(vars) => vars,
        // Written by every runtime that writes the aliases; an older init container's
        // task has none.
        Err(RunError::EnvFile { source, .. }) if source.kind() == ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    let mut env = container_env_under(&dynamic);
    // The runtime's own, not the user command's.
    env.retain(|(k, _)| {
        k != layout::ROOT_VAR
            && k != pai_contract::env::runtime::TERMINATION_LOG
            && k != pai_contract::failure::PATTERNS_VAR
            && k != pai_contract::env::runtime::SSH_LISTENER
    });
    env.push((
        layout::ROOT_VAR.into(),
        layout.root().as_os_str().to_owned(),
    ));
    // Where the user command may leave its result (a path of its own choosing, set in
    // `jobEnvs`, wins).
    if !env
        .iter()
        .any(|(k, _)| k == pai_contract::env::runtime::RESULT_FILE)
    {
        env.push((
            pai_contract::env::runtime::RESULT_FILE.into(),
            layout
                .root()
                .join(pai_contract::results::RESULT_FILE_NAME)
                .into_os_string(),
        ));
    }
    env.extend(dynamic);
    // Python writes as it prints, not when its buffer fills or it exits: its output then
    // reads in the order it was printed, a traceback after what came before it (a job's
    // own value wins).
    let defaults = defaults
        .into_iter()
        .chain([(UNBUFFERED.0.into(), UNBUFFERED.1.into())]);
    for (name, value) in defaults {
        if !env.iter().any(|(k, _)| *k == name) {
            env.push((name, value));
        }
    }
    let bin = layout.root().join(training_files::BIN_DIR);
    if bin.is_dir() {
        let path = env
            .iter()
            .position(|(k, _)| k == "PATH")
            .map(|i| env.remove(i).1);
        let mut value = bin.into_os_string();
        match path {
            Some(rest) if !rest.is_empty() => {
                value.push(":");
                value.push(rest);
            }
            // The default search path of a shell without PATH.
            _ => value.push(":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
        }
        env.push(("PATH".into(), value));
    }
    Ok(env)
}

/// The container's variables that the task's files (`dynamic`) do not set. Found by a set:
/// a 1,000-task job's files hold some 5,000 names, which were scanned once for each of the
/// container's variables, in every task.
fn container_env_under(dynamic: &[(OsString, OsString)]) -> Vec<(OsString, OsString)> {
    let names: std::collections::HashSet<&OsStr> =
        dynamic.iter().map(|(d, _)| d.as_os_str()).collect();
    std::env::vars_os()
        .filter(|(k, _)| !names.contains(k.as_os_str()))
        .collect()
}

/// What the `init/` daemons get: the container's own environment (the pod template's,
/// a few variables per role), the runtime root and this task's own dynamic variables
/// (`PAI_CONTAINER_SSH_PORT`, its index, …). Not the per-peer variables and training
/// files' contents: at 1,000 tasks those are 180 KB that each of the daemons' execs (a
/// shell, sshd) would copy. An ssh session gets the whole environment from
/// `env-all.sh`, as before.
fn daemon_environment(layout: &Layout, env: &[(OsString, OsString)]) -> Vec<(OsString, OsString)> {
    let container: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| k != layout::ROOT_VAR)
        .collect();
    let own = env.iter().filter(|(k, _)| {
        k.to_str().is_some_and(pai_contract::env::is_task_own)
            && !container.iter().any(|(c, _)| c == k)
    });
    let mut lean: Vec<(OsString, OsString)> = container
        .iter()
        .map(|(k, v)| {
            // This task's own value wins over the role's (the embedded default gives
            // each task its own ports). Only a task's own name is looked for among
            // the thousands of the whole environment.
            let own = k
                .to_str()
                .is_some_and(pai_contract::env::is_task_own)
                .then(|| env.iter().rev().find(|(e, _)| e == k))
                .flatten();
            let value = own.map_or(v, |(_, own)| own);
            (k.clone(), value.clone())
        })
        .collect();
    lean.extend(own.cloned());
    lean.push((
        layout::ROOT_VAR.into(),
        layout.root().as_os_str().to_owned(),
    ));
    lean
}

fn read_env_file(path: &Path) -> Result<Vec<(OsString, OsString)>, RunError> {
    let text = std::fs::read(path).map_err(|source| RunError::EnvFile {
        path: path.display().to_string(),
        source,
    })?;
    shell::parse(&text).map_err(|source| RunError::EnvSyntax {
        path: path.display().to_string(),
        source,
    })
}
