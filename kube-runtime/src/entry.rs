//! `kube-runtime entry`, the init container: install the runtime into the shared volume,
//! run `prep/`, pass the barrier, and leave the env file, the peer table and `main.sh`
//! for the main container. Every failure is one log line and a FrameworkController code.

use std::ffi::OsStr;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tracing::info;

use pai_barrier::config::{FRAMEWORK_FILE_VAR, PEERS_FILE_VAR};
use pai_barrier::{BarrierConfig, BarrierError, Passed, Source, kube_source, local_source, output};
use pai_contract::env as names;
use pai_contract::exit::ExitCode;
use pai_contract::training::{self, Selection, files as training_files};

use crate::budget;
use crate::dynamic_env::{Class, DynamicEnvError, Me, Variable, own_env};
use crate::layout::{self, Layout, Task};
use crate::peer_files::PeerFiles;
use crate::shell;
use crate::training_env;

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

/// Runs the init container's work: `prep/`, the barrier, then every file the main
/// container reads (the env files, the peers, the training files, the user's script).
pub fn entry(layout: &Layout, assets: &Path) -> Result<(), EntryError> {
    let (task, user_cmd, selection) = identity()?;
    let log_dir = task.log_dir(layout);
    for dir in [
        layout.root().to_path_buf(),
        layout.init_dir(),
        log_dir.clone(),
    ] {
        std::fs::create_dir_all(&dir).map_err(|e| setup("cannot create", &dir, e))?;
    }
    // A main container that may run as another user (the image's: files for it are not
    // private) writes its logs here, as this container's root made it.
    if file_mode()? & 0o044 != 0 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&log_dir, std::fs::Permissions::from_mode(0o777))
            .map_err(|e| setup("cannot open to the main container's user", &log_dir, e))?;
    }
    install(layout, assets)?;
    // The ssh scripts' directory, private: made here once, not by a mkdir and a chmod
    // in each of them.
    create_private_dir(&layout.root().join("ssh"))?;
    let host_key_known = install_job_key(layout)?;
    let secrets = job_secrets()?;
    run_prep(layout, assets, &log_dir)?;

    let passed = pass_barrier()?;
    back_off(&passed.peers);
    let me = Me {
        kube_role: task.kube_role.clone(),
        index: task.index,
    };
    let vars = task_vars(&passed, &me, secrets.as_ref())?;
    let role = passed
        .peers
        .roles
        .iter()
        .position(|r| r.kube_name == me.kube_role)
        .unwrap_or_default();
    // The paths written into the task's files are the main container's: where it sees
    // this directory (another path when this runs outside it, as on the embedded default's
    // container mode).
    let main_root = layout.main_root();
    let known_hosts = main_root.join(training_files::SSH_KNOWN_HOSTS);
    let training = training_env::training(
        &passed.peers,
        role,
        me.index,
        &selection,
        &main_root,
        host_key_known.then_some(known_hosts.as_path()),
    );
    for note in &training.notes {
        tracing::warn!("{note}");
    }
    let mode = file_mode()?;
    let dynamic_count = vars.len();
    let fitted = write_environment(layout, &passed, vars, &training, mode)?;
    write_user_script(layout, &user_cmd, secrets.as_ref(), mode)?;
    info!(
        role = %task.kube_role,
        index = task.index,
        variables = dynamic_count + fitted.peers.count(),
        exported = fitted.exported_count(),
        bytes = fitted.bytes(),
        "entry done: env files, peers and main.sh written"
    );
    Ok(())
}

/// Which task this is, its command, and which training variables its job asked for.
fn identity() -> Result<(Task, std::ffi::OsString, Selection), EntryError> {
    let var = |k: &str| std::env::var(k).ok();
    let task = Task::from_env(var).map_err(EntryError::Identity)?;
    let user_cmd = std::env::var_os(names::USER_CMD).ok_or(EntryError::NoCommand)?;
    let selection = match std::env::var(training::FRAMEWORK_ENV_VAR) {
        Ok(text) => {
            let (selection, unknown) = Selection::read_leniently(&text);
            if !unknown.is_empty() {
                tracing::warn!(
                    parts = %unknown.join(","),
                    "{} names parts this runtime does not know: their variables are not derived (a runtime image of the server's version derives them)",
                    training::FRAMEWORK_ENV_VAR
                );
            }
            selection
        }
        Err(_) => Selection::none(),
    };
    Ok((task, user_cmd, selection))
}

/// This task's own dynamic variables, from the peer table the barrier passed with (the
/// peers' are the same in every task: [`PeerFiles`]).
fn task_vars(
    passed: &Passed,
    me: &Me,
    secrets: Option<&serde_json::Value>,
) -> Result<Vec<Variable>, EntryError> {
    let mut vars = own_env(&passed.peers, me)?;
    if let Ok(pod) = std::env::var(pai_contract::env::fc::POD_NAME) {
        vars.push(Variable::new(names::CONTAINER_ID, pod, Class::Own));
    }
    check_ports(passed, me)?;
    // A v2 job's public key may come from its secrets (`userssh: <% $secrets.key %>`):
    // the rendered key is this task's own variable, which the daemons (sshd) see.
    if let (Some(secrets), Ok(key)) = (secrets, std::env::var(names::SSH_PUB_KEY))
        && key.contains("<%")
    {
        let rendered = render_secrets(&key, secrets, names::SSH_PUB_KEY)?;
        vars.push(Variable::new(names::SSH_PUB_KEY, rendered, Class::Own));
    }
    Ok(vars)
}

/// Writes the task's environment: its own variables, its peers', the training files,
/// the peer table and the Framework; what is the same in many tasks once per host.
// Long: the files of a task's environment in the order `run` reads them.
fn write_environment(
    layout: &Layout,
    passed: &Passed,
    vars: Vec<Variable>,
    training: &training_env::Training,
    mode: u32,
) -> Result<budget::Fitted, EntryError> {
    // What is the same in many tasks is written once per host where they share one
    // (the embedded default), and hard-linked.
    let shared = std::env::var_os(pai_contract::env::runtime::SHARED_DIR).map(PathBuf::from);
    let shared = shared.as_deref();
    let root = layout.root();
    let put = |path: &Path, bytes: &[u8], mode: u32| {
        crate::shared::write(path, bytes, mode, shared).map_err(|e| setup("cannot write", path, e))
    };
    if let Some(framework) = passed.framework.as_deref() {
        output::write_json(
            &root.join(pai_contract::paths::files::FRAMEWORK_JSON),
            framework,
        )
        .map_err(|e| setup("cannot write the Framework into", root, e))?;
    }
    // What the peer table alone decides, made once per host where tasks share files.
    let peer_files = PeerFiles::new(&passed.peers, passed.table_bytes.as_deref(), shared)
        .map_err(|e| setup("cannot prepare the peers' files in", root, e))?;
    let peers_json = root.join(pai_contract::paths::files::PEERS_JSON);
    peer_files
        .write_table(&peers_json, 0o644)
        .map_err(|e| setup("cannot write", &peers_json, e))?;
    // `peer-env.sh`: the peers' variables (the same in every task) in a file it sources,
    // then this task's own training variables that list the job (`TF_CONFIG`).
    let common_path = root.join(training_files::PEER_ENV_COMMON);
    peer_files
        .write_common(&common_path, mode)
        .map_err(|e| setup("cannot write", &common_path, e))?;
    // Sourced in the main container: its path there.
    let common_seen = layout.main_root().join(training_files::PEER_ENV_COMMON);
    let mut peer_env = format!(
        "# Written by kube-runtime: every per-task and list variable of this job.\n. {}\n",
        String::from_utf8_lossy(&crate::shell::quote(
            common_seen.as_os_str().as_encoded_bytes()
        ))
    )
    .into_bytes();
    peer_env.extend(budget::peer_lines(&training.vars));
    let all: Vec<Variable> = vars
        .into_iter()
        .chain(training.vars.iter().cloned())
        .collect();
    let is_training = |v: &Variable| training.vars.iter().any(|t| t.name == v.name);
    let fitted = budget::fit(all, peer_files.sizes(), training::MAX_DYNAMIC_ENV_BYTES);
    if let Some(summary) = fitted.summary() {
        tracing::warn!("{summary}");
    }
    // `env.sh`: this task's own; `env-peers.sh`: the peers' (the same in every task);
    // `defaults.sh`: its training variables.
    let (defaults, own): (Vec<&Variable>, Vec<&Variable>) =
        fitted.exported.iter().partition(|v| is_training(v));
    write_file(&layout.env_file(), &render(&own)?, mode)?;
    let peers_env = layout.peers_env_file();
    peer_files
        .write_env(&peers_env, mode, |class| fitted.exports_peers(class))
        .map_err(|e| setup("cannot write", &peers_env, e))?;
    write_file(
        &root.join(training_files::DEFAULTS_ENV),
        &render(&defaults)?,
        mode,
    )?;
    write_file(&root.join(training_files::PEER_ENV), &peer_env, mode)?;
    if let Some(tf) = &training.tf_config {
        write_file(
            &root.join(training_files::TF_CONFIG_JSON),
            tf.as_bytes(),
            mode,
        )?;
    }
    if let Some(hostfile) = &training.hostfile {
        put(
            &root.join(training_files::HOSTFILE),
            hostfile.as_bytes(),
            mode,
        )?;
    }
    write_ssh_client(layout, &training.ssh_config, mode)?;
    Ok(fitted)
}

/// The user's command as `main.sh`, a v2 job's secrets rendered into it.
fn write_user_script(
    layout: &Layout,
    user_cmd: &std::ffi::OsStr,
    secrets: Option<&serde_json::Value>,
    mode: u32,
) -> Result<(), EntryError> {
    let mut script = std::os::unix::ffi::OsStrExt::as_bytes(user_cmd).to_vec();
    if let Some(secrets) = secrets {
        let text = String::from_utf8_lossy(&script).into_owned();
        script = render_secrets(&text, secrets, names::USER_CMD)?.into_bytes();
    }
    script.push(b'\n');
    write_file(&layout.main_sh(), &script, mode)?;
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

fn render(vars: &[&Variable]) -> Result<Vec<u8>, EntryError> {
    shell::render(
        vars.iter()
            .map(|v| (OsStr::new(&v.name), OsStr::new(&v.value))),
    )
    .map_err(|e| EntryError::Setup(format!("cannot render an env file: {e}")))
}

/// A v2 job's secrets, when it has any: the JSON file beside the job's key pair
/// (`PAI_JOB_SSH_DIR`, the Secret's volume on a cluster), as the `$secrets` scope of the
/// templates it renders.
fn job_secrets() -> Result<Option<serde_json::Value>, EntryError> {
    let Some(dir) = std::env::var_os(training::JOB_SSH_DIR_VAR).filter(|d| !d.is_empty()) else {
        return Ok(None);
    };
    let path = PathBuf::from(dir).join(training::JOB_SECRETS_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(setup("cannot read the job's secrets", &path, e)),
    };
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| setup("the job's secrets are not JSON", &path, e))?;
    Ok(Some(serde_json::json!({ "$secrets": value })))
}

/// `text` with its `<% $secrets.… %>` names replaced (OpenPAI's runtime renders them
/// in the task). Only the count is logged, never a value; a name the secrets do not
/// hold stays as written, and is said.
fn render_secrets(text: &str, scope: &serde_json::Value, what: &str) -> Result<String, EntryError> {
    use pai_contract::template;
    let names: Vec<String> = template::names_in(text, "$secrets").collect();
    if names.is_empty() {
        return Ok(text.to_string());
    }
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| template::lookup(scope, n).is_none())
        .collect();
    if !missing.is_empty() {
        tracing::warn!(
            "{what}: {} name no secret of the job and stay as written",
            missing
                .iter()
                .map(|n| format!("<% {n} %>"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    info!(what, references = names.len(), "secrets rendered");
    // The scope holds `$secrets` alone: any other name stays as it was.
    template::render_within(text, scope, MAX_RENDERED_BYTES)
        .map_err(|e| EntryError::Setup(format!("{what} with the job's secrets: {e}")))
}

/// The most a command rendered with the job's secrets may grow to.
const MAX_RENDERED_BYTES: usize = 16 << 20;

/// The job's key pair, when the pod has one (`PAI_JOB_SSH_DIR`), copied to
/// `ssh/job_key` (0600, the task's user alone) and `ssh/job_key.pub`, where sshd
/// authorises it and the ssh aliases use it; and the job's host key, when it has one, as
/// the host key sshd presents (so prep/ makes none) with a `known_hosts` naming it for
/// every task. Returns whether the host key was installed.
fn install_job_key(layout: &Layout) -> Result<bool, EntryError> {
    let Some(dir) = std::env::var_os(training::JOB_SSH_DIR_VAR).filter(|d| !d.is_empty()) else {
        return Ok(false);
    };
    let dir = PathBuf::from(dir);
    let ssh = layout.root().join("ssh");
    create_private_dir(&ssh)?;
    let copy = |from: &str, to: &str, mode: u32| -> Result<(), EntryError> {
        let from = dir.join(from);
        let bytes =
            std::fs::read(&from).map_err(|e| setup("cannot read the job's key", &from, e))?;
        write_file(&layout.root().join(to), &bytes, mode)
    };
    copy(training::JOB_KEY_FILE, training_files::SSH_JOB_KEY, 0o600)?;
    copy(
        training::JOB_PUBLIC_KEY_FILE,
        training_files::SSH_JOB_PUBLIC_KEY,
        0o644,
    )?;
    // A job made before host keys were has none: its tasks make their own.
    if !dir.join(training::JOB_HOST_KEY_FILE).exists() {
        return Ok(false);
    }
    copy(
        training::JOB_HOST_KEY_FILE,
        training_files::SSH_HOST_KEY,
        0o600,
    )?;
    let public = std::fs::read_to_string(dir.join(training::JOB_HOST_PUBLIC_KEY_FILE))
        .map_err(|e| setup("cannot read the job's host key", &dir, e))?;
    // Every task of the job presents this key; the aliases' configuration reads this
    // file alone, so `*` names exactly the job's tasks.
    write_file(
        &layout.root().join(training_files::SSH_KNOWN_HOSTS),
        format!("* {}\n", public.trim()).as_bytes(),
        0o644,
    )?;
    Ok(true)
}

fn create_private_dir(dir: &Path) -> Result<(), EntryError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).map_err(|e| setup("cannot create", dir, e))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| setup("cannot restrict", dir, e))
}

/// `ssh/config` with the job's aliases, and `bin/ssh` that uses it.
fn write_ssh_client(layout: &Layout, config: &str, mode: u32) -> Result<(), EntryError> {
    let root = layout.root();
    create_private_dir(&root.join("ssh"))?;
    // ssh refuses a configuration others may write; `mode` never allows that.
    write_file(
        &root.join(training_files::SSH_CONFIG),
        config.as_bytes(),
        mode & 0o644,
    )?;
    let bin = root.join(training_files::BIN_DIR);
    std::fs::create_dir_all(&bin).map_err(|e| setup("cannot create", &bin, e))?;
    write_file(
        &bin.join("ssh"),
        &training_env::ssh_wrapper(&layout.main_root()),
        0o755,
    )
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
            .env(pai_contract::env::runtime::LOG_DIR, log_dir)
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

/// Waits until the table's `notBefore`, if it is still to come: the restart back-off of
/// a job whose previous attempt ended quickly (on a cluster the next attempt starts at
/// once; the server says when its commands may). The task is in its init step meanwhile,
/// as a pod in the kubelet's back-off is not running.
fn back_off(table: &pai_barrier::PeerTable) {
    let Some(at) = table
        .not_before
        .as_deref()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    else {
        return;
    };
    let now = jiff::Timestamp::now();
    let Ok(wait) = std::time::Duration::try_from(at.duration_since(now)) else {
        return;
    };
    if wait.is_zero() {
        return;
    }
    info!(
        seconds = wait.as_secs_f64().round(),
        until = %at,
        "restarting after a back-off: the attempt before this one ended quickly"
    );
    std::thread::sleep(wait);
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
    if std::env::var_os(pai_contract::env::runtime::PORTS_HELD).is_some_and(|v| v == "1") {
        // The server holds them for this task until its main container starts.
        return Ok(());
    }
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
            if let Err(e) = TcpListener::bind((crate::layout::bind_address(), port))
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
    crate::shared::own(path, bytes, mode).map_err(|e| setup("cannot write", path, e))
}
