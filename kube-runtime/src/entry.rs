//! `kube-runtime entry`, the init container: install the runtime into the shared volume,
//! run `prep/`, pass the barrier, and leave the env file, the peer table and `main.sh`
//! for the main container. Every failure is one log line and a FrameworkController code.

use std::ffi::OsStr;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tracing::info;

use pai_barrier::config::{FRAMEWORK_FILE_VAR, PEERS_FILE_VAR};
use pai_barrier::{BarrierConfig, BarrierError, Passed, Source, kube_source, local_source, output};
use pai_contract::env as names;
use pai_contract::exit::ExitCode;

use crate::dynamic_env::{DynamicEnvError, Me, dynamic_env};
use crate::layout::{self, Layout, Task};
use crate::shell;

#[derive(Debug, thiserror::Error)]
pub enum EntryError {
    #[error("the pod is not set up as FrameworkController sets it up: {0}")]
    Identity(String),
    #[error("USER_CMD is not set: there is no command to run")]
    NoCommand,
    #[error("cannot set up the runtime: {0}")]
    Setup(String),
    #[error("prep script {name} failed ({status}); its output is in {log}")]
    Prep {
        name: String,
        status: String,
        log: String,
    },
    #[error("barrier: {0}")]
    Barrier(#[from] BarrierError),
    #[error("port {port} (label {label}) is already in use on this host")]
    PortTaken { port: u16, label: String },
    #[error("the Framework does not describe this task: {0}")]
    Peers(#[from] DynamicEnvError),
}

impl EntryError {
    pub fn exit_code(&self) -> ExitCode {
        match self {
            EntryError::Identity(_) | EntryError::NoCommand | EntryError::Peers(_) => {
                ExitCode::PermanentFailure
            }
            EntryError::Setup(_) | EntryError::Prep { .. } => ExitCode::TransientFailure,
            EntryError::PortTaken { .. } => ExitCode::TransientConflict,
            EntryError::Barrier(e) => match e {
                // The one override of the barrier's codes: a task whose account may not
                // read its Framework, or that lacks the settings to find it, will not
                // succeed on a retry; the pod fails for good, naming the rule.
                BarrierError::Forbidden(_) | BarrierError::Config(_) => ExitCode::PermanentFailure,
                other => other.exit_code(),
            },
        }
    }
}

fn setup(what: &str, path: &Path, e: impl std::fmt::Display) -> EntryError {
    EntryError::Setup(format!("{what} {}: {e}", path.display()))
}

/// Runs the init container's work.
pub fn entry(layout: &Layout, assets: &Path) -> Result<(), EntryError> {
    let var = |k: &str| std::env::var(k).ok();
    let task = Task::from_env(var).map_err(EntryError::Identity)?;
    let user_cmd = std::env::var_os(names::USER_CMD).ok_or(EntryError::NoCommand)?;
    let log_dir = task.log_dir(layout);
    for dir in [
        layout.root().to_path_buf(),
        layout.init_dir(),
        log_dir.clone(),
    ] {
        std::fs::create_dir_all(&dir).map_err(|e| setup("cannot create", &dir, e))?;
    }
    install(layout, assets)?;
    run_prep(layout, assets, &log_dir)?;

    let passed = pass_barrier()?;
    let me = Me {
        kube_role: task.kube_role.clone(),
        index: task.index,
    };
    let vars = dynamic_env(&passed.peers, &me)?;
    check_ports(&passed, &me)?;

    output::write(layout.root(), passed.framework.as_deref(), &passed.peers)
        .map_err(|e| setup("cannot write the peer table into", layout.root(), e))?;
    let text = shell::render(vars.iter().map(|(k, v)| (OsStr::new(k), OsStr::new(v))))
        .map_err(|e| EntryError::Setup(format!("cannot render the env file: {e}")))?;
    let mode = file_mode()?;
    write_file(&layout.env_file(), &text, mode)?;
    let mut script = std::os::unix::ffi::OsStrExt::as_bytes(user_cmd.as_os_str()).to_vec();
    script.push(b'\n');
    write_file(&layout.main_sh(), &script, mode)?;
    info!(role = %task.kube_role, index = task.index, variables = vars.len(), "entry done: env file, peers and main.sh written");
    Ok(())
}

/// Copies this binary to `<root>/run` and `init/` scripts to `<root>/init/`.
fn install(layout: &Layout, assets: &Path) -> Result<(), EntryError> {
    let me = std::env::current_exe()
        .map_err(|e| EntryError::Setup(format!("cannot find the runtime binary: {e}")))?;
    let run = layout.run();
    let same = std::fs::canonicalize(&run).ok() == std::fs::canonicalize(&me).ok();
    if !same {
        let tmp = run.with_extension("tmp");
        let _ = std::fs::remove_file(&tmp);
        // A hard link costs nothing (many tasks on one host, the embedded default); a copy
        // when the root is on another file system (the shared volume of a pod).
        std::fs::hard_link(&me, &tmp)
            .or_else(|_| std::fs::copy(&me, &tmp).map(drop))
            .map_err(|e| setup("cannot install the runtime as", &run, e))?;
        std::fs::rename(&tmp, &run).map_err(|e| setup("cannot install the runtime as", &run, e))?;
    }
    let scripts = layout::scripts(&assets.join("init"))
        .map_err(|e| setup("cannot read", &assets.join("init"), e))?;
    for (name, path) in scripts {
        let to = layout.init_dir().join(&name);
        std::fs::copy(&path, &to).map_err(|e| setup("cannot install", &to, e))?;
    }
    Ok(())
}

/// Runs every `prep/` script in name order, each logging to `prep-<name>.log`.
fn run_prep(layout: &Layout, assets: &Path, log_dir: &Path) -> Result<(), EntryError> {
    let prep = assets.join("prep");
    for (name, script) in layout::scripts(&prep).map_err(|e| setup("cannot read", &prep, e))? {
        let log_path = log_dir.join(format!("prep-{name}.log"));
        let log =
            std::fs::File::create(&log_path).map_err(|e| setup("cannot create", &log_path, e))?;
        let err_log = log
            .try_clone()
            .map_err(|e| setup("cannot open", &log_path, e))?;
        let status = Command::new("/bin/sh")
            .arg(&script)
            .env(layout::ROOT_VAR, layout.root())
            .env("PAI_LOG_DIR", log_dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err_log)
            .status()
            .map_err(|e| setup("cannot run", &script, e))?;
        if !status.success() {
            return Err(EntryError::Prep {
                name,
                status: status.to_string(),
                log: log_path.display().to_string(),
            });
        }
        info!(script = %name, "prep done");
    }
    Ok(())
}

fn pass_barrier() -> Result<Passed, EntryError> {
    let config = BarrierConfig::from_env(|k| std::env::var(k).ok())?;
    if let Some(file) = std::env::var_os(PEERS_FILE_VAR).filter(|f| !f.is_empty()) {
        let instance = match &config.source {
            Source::Published(attempt) => Some(attempt.instance_uid.as_str()),
            Source::Framework => None,
        };
        return Ok(local_source::wait_table(
            &PathBuf::from(file),
            config.timeout,
            instance,
        )?);
    }
    if let Some(file) = std::env::var_os(FRAMEWORK_FILE_VAR).filter(|f| !f.is_empty()) {
        return Ok(local_source::wait(&PathBuf::from(file), config.timeout)?);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| EntryError::Setup(format!("cannot start the async runtime: {e}")))?;
    let apiserver = std::env::var(names::KUBE_APISERVER_ADDRESS).ok();
    Ok(runtime.block_on(async {
        let client = kube_source::client(apiserver.as_deref()).await?;
        kube_source::wait(client, &config).await
    })?)
}

/// Every port of this task must be free on this host (host networking, or several tasks
/// on one machine); one that is not fails the attempt as a conflict, to be retried.
fn check_ports(passed: &Passed, me: &Me) -> Result<(), EntryError> {
    let Some(task) = passed
        .peers
        .roles
        .iter()
        .find(|r| r.kube_name == me.kube_role)
        .and_then(|r| r.task(me.index))
    else {
        return Ok(());
    };
    for (label, ports) in task.ports.iter() {
        for &port in ports {
            if let Err(e) = TcpListener::bind((Ipv4Addr::UNSPECIFIED, port))
                && e.kind() == std::io::ErrorKind::AddrInUse
            {
                return Err(EntryError::PortTaken {
                    port,
                    label: label.to_string(),
                });
            }
        }
    }
    Ok(())
}

/// The mode of `env.sh` and `main.sh` ([`pai_contract::env::ENV_FILE_MODE`]).
fn file_mode() -> Result<u32, EntryError> {
    let name = pai_contract::env::ENV_FILE_MODE;
    match std::env::var(name) {
        Err(_) => Ok(0o600),
        Ok(text) => u32::from_str_radix(text.trim(), 8)
            .ok()
            .filter(|mode| *mode <= 0o777)
            .ok_or_else(|| {
                EntryError::Setup(format!(
                    "{name}={text:?} is not a file mode in octal (e.g. 600)"
                ))
            }),
    }
}

/// Writes `bytes` to `path` whole (temporary file created with `mode`, rename). Not
/// synced: the shared volume lives as long as the pod, which a machine's crash ends
/// anyway.
fn write_file(path: &Path, bytes: &[u8], mode: u32) -> Result<(), EntryError> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let tmp = path.with_extension("tmp");
    let write = || -> std::io::Result<()> {
        let _ = std::fs::remove_file(&tmp);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        // The umask may have taken bits away; the mode is what was asked.
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        file.write_all(bytes)?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| setup("cannot write", path, e))
}
