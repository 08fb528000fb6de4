//! One task on this machine, as a pod would run it: the init container's command
//! (`kube-runtime entry`) with the init container's environment, then the main
//! container's command (`<root>/run`) with the main container's, each environment being
//! FrameworkController's `FC_*` variables followed by the template's, expanded as the
//! kubelet expands `$(VAR)`. The output of both goes to the task's container log.

use std::ffi::OsString;
use std::io::{BufRead, Seek};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Container;
use tokio::sync::watch;

use pai_barrier::config::PEERS_FILE_VAR;
use pai_contract::env as names;
use pai_kube_runtime::layout::{ASSETS_VAR, ROOT_VAR};

use super::procs::{self, ProcessId};

/// The identity FrameworkController gives a task's pod, as `FC_*` variables.
#[derive(Clone, Debug)]
pub struct Identity {
    pub namespace: String,
    pub framework: String,
    pub framework_uid: String,
    pub attempt: i32,
    pub attempt_uid: String,
    pub role: String,
    pub role_uid: String,
    pub index: u32,
    pub task_uid: String,
    pub task_attempt_uid: String,
    pub pod_name: String,
    pub pod_uid: String,
}

impl Identity {
    pub fn fc_env(&self) -> Vec<(String, String)> {
        let configmap = pai_contract::framework::attempt_config_map(&self.framework);
        use pai_contract::env::fc;
        [
            (fc::FRAMEWORK_NAMESPACE, self.namespace.clone()),
            (fc::FRAMEWORK_NAME, self.framework.clone()),
            (fc::TASKROLE_NAME, self.role.clone()),
            (fc::TASK_INDEX, self.index.to_string()),
            (fc::CONFIGMAP_NAME, configmap),
            (fc::POD_NAME, self.pod_name.clone()),
            (fc::FRAMEWORK_UID, self.framework_uid.clone()),
            (fc::FRAMEWORK_ATTEMPT_ID, self.attempt.to_string()),
            (fc::FRAMEWORK_ATTEMPT_INSTANCE_UID, self.attempt_uid.clone()),
            (fc::CONFIGMAP_UID, self.attempt_uid.clone()),
            (fc::TASKROLE_UID, self.role_uid.clone()),
            (fc::TASK_UID, self.task_uid.clone()),
            (fc::TASK_ATTEMPT_ID, "0".to_string()),
            (fc::TASK_ATTEMPT_INSTANCE_UID, self.task_attempt_uid.clone()),
            (fc::POD_UID, self.pod_uid.clone()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

/// A container's environment as the kubelet builds it: `first` (FrameworkController's
/// variables), then the container's own, each value's `$(VAR)` expanded from the
/// variables before it and `$$` unescaped.
pub fn container_env(first: Vec<(String, String)>, container: &Container) -> Vec<(String, String)> {
    let mut env = first;
    for var in container.env.iter().flatten() {
        let Some(value) = var.value.as_deref() else {
            tracing::warn!(name = %var.name, "valueFrom is not supported on this machine; variable left out");
            continue;
        };
        let expanded = names::kubelet_expand(value, |name| {
            env.iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        });
        env.push((var.name.clone(), expanded));
    }
    env
}

/// How to start the runtime: its program and the arguments before `entry`.
#[derive(Clone, Debug)]
pub struct Runtime {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

/// Everything a task needs to start.
#[derive(Clone, Debug)]
pub struct Launch {
    pub runtime: Runtime,
    /// The task's runtime root (the pod's shared volume).
    pub root: PathBuf,
    /// The directory with `prep/` and `init/`.
    pub assets: PathBuf,
    /// The attempt's peer table, which the barrier reads.
    pub peers_file: PathBuf,
    /// Where the task's process is recorded for a restarted server
    /// ([`crate::store::Store::pid_file`]), outside the task's own directory.
    pub pid_record: PathBuf,
    /// Variables passed from the server's environment (`PATH`, `HOME`, …).
    pub host_env: Vec<(String, String)>,
    pub init_env: Vec<(String, String)>,
    pub main_env: Vec<(String, String)>,
    /// Between TERM and KILL when the task is stopped.
    pub grace: Duration,
    /// Where its processes are started.
    pub spawner: procs::Spawner,
    /// The CPU cgroup its processes join ([`crate::cpu_group`]).
    pub cpu_group: Option<std::sync::Arc<crate::cpu_group::TaskGroup>>,
    /// The GPUs it holds (in container mode, the devices the engine gives it).
    pub gpus: Vec<crate::gpus::GpuDevice>,
    /// Who keeps its `container.log` to its bound while it runs.
    pub logs: std::sync::Arc<crate::log_rotation::Logs>,
    /// Its ports, bound by the server until its main container starts.
    pub ports: crate::ports::HeldPorts,
    /// Its ssh port, handed to the main container bound and listening.
    pub ssh_port: Option<u16>,
    /// Its two steps as containers, in container mode (else host processes).
    pub containers: Option<Containers>,
}

/// A task's main container, of an engine (its init step runs on this machine, as the
/// runtime image's would: the same static binary and scripts).
#[derive(Clone, Debug)]
pub struct Containers {
    pub engine: std::sync::Arc<crate::containers::Engine>,
    /// `run`, PID 1 of the main container.
    pub main: crate::containers::Step,
}

impl Launch {
    pub fn container_log(&self) -> PathBuf {
        container_log(&self.root)
    }

    /// Where its main step runs ([`MainPlace`]).
    fn main_place(&self) -> &dyn MainPlace {
        match &self.containers {
            Some(containers) => containers,
            None => &Host,
        }
    }
}

pub fn container_log(root: &Path) -> PathBuf {
    root.join(CONTAINER_LOG)
}

/// The task's container log's name, in its directory.
pub const CONTAINER_LOG: &str = "container.log";

/// Written in the task's directory just before its main container is started: a
/// restarted server that finds no container of the task can tell a task that was still in
/// its init step (which then runs again) from one whose container is gone (whose end
/// cannot be known).
pub const MAIN_STARTED: &str = ".main-started";

/// What a task reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// The main container started.
    Running,
    Completed {
        code: i32,
        diagnostics: String,
        /// The main container's termination message (its result), if it wrote one.
        message: Option<String>,
        /// Its reason, as a kubelet gives it (`OOMKilled`, `ErrImagePull`), when known.
        reason: Option<String>,
    },
}

/// Why a task is being ended, and the completion code it then gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StopRequest {
    pub code: i32,
    pub reason: String,
}

/// Runs the task to its end, reporting through `report`; a stop request ends it with
/// TERM, then KILL of its whole tree after `grace`.
// Long: one task's life in order (spawn, report, stop with TERM then KILL, reap), sharing
// its process group.
pub async fn run(
    launch: Launch,
    report: impl Fn(Progress),
    mut stop: watch::Receiver<Option<StopRequest>>,
) {
    let completed = |code, diagnostics| Progress::Completed {
        code,
        diagnostics,
        message: None,
        reason: None,
    };
    let _rotated = launch.logs.watch(launch.container_log());
    // The init container: on this machine, in both modes.
    let mut init_env = launch.init_env.clone();
    init_env.push((
        PEERS_FILE_VAR.to_string(),
        launch.peers_file.display().to_string(),
    ));
    init_env.push((ASSETS_VAR.to_string(), launch.assets.display().to_string()));
    let mut entry = host_command(&launch, &launch.runtime.program, &init_env);
    entry
        .args(&launch.runtime.args)
        .arg(pai_contract::paths::commands::ENTRY)
        .stdin(Stdio::null());
    let status = match start_and_wait(&launch, entry, &mut stop, || {}, None).await {
        Outcome::Exited(status) => status,
        Outcome::Stopped(request) => return report(completed(request.code, request.reason)),
        Outcome::CannotStart(message) => return report(completed(1, message)),
    };
    if !status.success() {
        let code = exit_code(status);
        return report(completed(
            code,
            format!(
                "the init container (kube-runtime entry) exited with code {code}: {}",
                last_line(&launch.container_log())
            ),
        ));
    }
    // The main container: the runtime takes the ssh port over as it is held (on its
    // standard input, never free in between) where the engine's client hands it over;
    // its processes bind the others from now on.
    let place = launch.main_place();
    let hands_over = place.hands_over();
    let ssh_listener = launch
        .ssh_port
        .filter(|_| hands_over)
        .and_then(|port| launch.ports.hand_over(port));
    launch.ports.release();
    let mut main_env = launch.main_env.clone();
    if ssh_listener.is_some() {
        main_env.push((
            pai_contract::env::runtime::SSH_LISTENER.to_string(),
            pai_contract::env::runtime::SSH_LISTENER_STDIN.to_string(),
        ));
    }
    let stopped = stop.borrow().clone();
    if let Some(request) = stopped {
        return report(completed(request.code, request.reason));
    }
    let (mut run, main_container) = match place.start(&launch, &main_env).await {
        Ok(MainStarted::Process(command, container)) => (*command, container),
        Ok(MainStarted::Followed { engine, name }) => {
            report(Progress::Running);
            let ended = until_container_ends(engine, name, &launch.root, launch.grace, &mut stop);
            return report(ended.await);
        }
        Err(message) => return report(completed(1, message)),
    };
    match ssh_listener {
        Some(listener) => {
            run.stdin(Stdio::from(std::os::fd::OwnedFd::from(listener)));
        }
        None => {
            run.stdin(Stdio::null());
        }
    }
    let started = {
        let report = &report;
        move || report(Progress::Running)
    };
    let outcome = start_and_wait(&launch, run, &mut stop, started, main_container).await;
    place.ended().await;
    match outcome {
        Outcome::Exited(status) => report(main_ended(&launch.root, exit_code(status))),
        Outcome::Stopped(request) => report(Progress::Completed {
            code: request.code,
            diagnostics: request.reason,
            message: termination_message(&launch.root),
            reason: None,
        }),
        Outcome::CannotStart(message) => report(completed(1, message)),
    }
}

/// Where a task's main step runs on this machine: the seam between the task's life (its
/// init step, its stop with TERM, grace, then KILL, its end and result), which is the
/// same wherever it runs, and how its main step starts and is followed. Two
/// implementations: a process of the host ([`Host`]) and an engine's container
/// ([`Containers`], each engine behind [`crate::containers::Driver`]). A new way to run
/// tasks is a new implementation, not a branch through [`run`].
trait MainPlace: Send + Sync {
    /// Whether the ssh port's listener goes to the main step on its standard input, as
    /// held (else the runtime binds it itself once the server has released it).
    fn hands_over(&self) -> bool;
    /// Starts the main step of `launch` with the environment `env`: how it is followed.
    fn start<'a>(
        &'a self,
        launch: &'a Launch,
        env: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<MainStarted<'a>, String>>;
    /// After the main step's end was read.
    fn ended(&self) -> BoxFuture<'_, ()>;
}

/// How a started main step is followed.
enum MainStarted<'a> {
    /// Through a process of the server's, still to be spawned, whose end is the step's
    /// (on the host, the runtime itself; else the engine's attached client, the
    /// container's start being the engine saying it runs).
    Process(Box<tokio::process::Command>, Option<StepContainer<'a>>),
    /// Through the engine alone: its container `name` runs already.
    Followed {
        engine: &'a crate::containers::Engine,
        name: &'a str,
    },
}

/// The main step as a process of this machine's host, the runtime's `run` of the task's
/// directory.
struct Host;

impl MainPlace for Host {
    fn hands_over(&self) -> bool {
        true
    }

    fn start<'a>(
        &'a self,
        launch: &'a Launch,
        env: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<MainStarted<'a>, String>> {
        let run = launch.root.join(pai_contract::paths::files::RUN);
        let command = host_command(launch, &run, env);
        Box::pin(std::future::ready(Ok(MainStarted::Process(
            Box::new(command),
            None,
        ))))
    }

    fn ended(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }
}

impl MainPlace for Containers {
    fn hands_over(&self) -> bool {
        self.engine.hands_over()
    }

    fn start<'a>(
        &'a self,
        launch: &'a Launch,
        env: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<MainStarted<'a>, String>> {
        Box::pin(async move {
            let step = main_step(launch, self);
            prepare_container(launch, &step, env)?;
            let mark = launch.root.join(MAIN_STARTED);
            std::fs::write(&mark, b"")
                .map_err(|e| format!("cannot write {}: {e}", mark.display()))?;
            match self.engine.start(&step).await? {
                crate::containers::Start::Attached(mut command) => {
                    command
                        .env_clear()
                        .envs(launch.host_env.iter().map(|(k, v)| (k, v)))
                        .current_dir(&launch.root);
                    let container = StepContainer {
                        engine: &self.engine,
                        name: &self.main.name,
                    };
                    Ok(MainStarted::Process(command, Some(container)))
                }
                crate::containers::Start::Detached => Ok(MainStarted::Followed {
                    engine: &self.engine,
                    name: &self.main.name,
                }),
            }
        })
    }

    fn ended(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            // Its end is read: a container that outlives its client goes.
            if self.engine.outlive_server {
                self.engine
                    .remove(std::slice::from_ref(&self.main.name))
                    .await;
            }
        })
    }
}

/// The main container's step as its engine starts it: where the engine's daemon, not a
/// process of the server's, holds its streams, the runtime is told where the task's log
/// is in the container and its bound, and opens and rotates it itself.
fn main_step(launch: &Launch, containers: &Containers) -> crate::containers::Step {
    use pai_contract::env::runtime;
    let mut step = containers.main.clone();
    if !containers.engine.hands_over() {
        step.env.push((
            runtime::LOG_FILE.to_string(),
            format!("{}/{}", pai_contract::paths::RUNTIME_ROOT, CONTAINER_LOG),
        ));
        step.env.push((
            runtime::LOG_ROTATION.to_string(),
            launch.logs.rotation().to_env(),
        ));
    }
    step
}

/// What the runtime left as the main container's termination message (a result); at
/// most the kubelet's 4096 bytes are read, as it keeps no more.
fn termination_message(root: &Path) -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(root.join(pai_contract::results::TERMINATION_LOG_NAME))
        .ok()?
        .take(pai_contract::results::KUBELET_MAX_BYTES as u64)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// How the main container of the task whose root is `root` ended with `code`: its
/// result, the cause the runtime named (else the log's last line) and its reason.
fn main_ended(root: &Path, code: i32) -> Progress {
    let message = termination_message(root);
    let cause = message
        .as_deref()
        .and_then(pai_contract::results::read_message)
        .and_then(|m| m.cause);
    let reason = cause
        .as_ref()
        .filter(|c| c.pattern == pai_contract::failure::OOM_KILLED)
        .map(|_| pai_contract::failure::OOM_KILLED_REASON.to_string());
    let diagnostics = if code == 0 {
        "the main container exited with code 0".to_string()
    } else {
        // The runtime named the cause from the output; else (a runtime that could not
        // say) the log's last line.
        let cause = cause
            .map(|c| c.line)
            .unwrap_or_else(|| last_line(&container_log(root)));
        format!("the main container exited with code {code}: {cause}")
    };
    Progress::Completed {
        code,
        diagnostics,
        message,
        reason,
    }
}

/// Follows a task whose main container a previous server started and left running (or
/// ended, unread): RUNNING at once, then its end as [`run`] reports it; a stop request
/// ends it through the engine with TERM, then KILL after `grace`.
pub async fn follow(
    engine: std::sync::Arc<crate::containers::Engine>,
    name: String,
    root: PathBuf,
    grace: Duration,
    report: impl Fn(Progress),
    mut stop: watch::Receiver<Option<StopRequest>>,
) {
    report(Progress::Running);
    report(until_container_ends(&engine, &name, &root, grace, &mut stop).await);
}

/// Follows the running container `name` of the task whose directory is `root` to its
/// end, which is read, then the container removed: how it ended. A stop request ends it
/// through the engine with TERM, then KILL after `grace`.
async fn until_container_ends(
    engine: &crate::containers::Engine,
    name: &str,
    root: &Path,
    grace: Duration,
    stop: &mut watch::Receiver<Option<StopRequest>>,
) -> Progress {
    let ended = tokio::select! {
        code = engine.wait(name) => Ok(code),
        request = wait_for_stop(stop) => {
            engine.kill(name, "TERM").await;
            if tokio::time::timeout(grace, engine.wait(name)).await.is_err() {
                tracing::warn!(container = %name, grace_s = grace.as_secs(), "task outlived its grace period; killing its container");
                engine.kill(name, "KILL").await;
                engine.wait(name).await;
            }
            Err(request)
        }
    };
    engine.remove(&[name.to_string()]).await;
    match ended {
        Ok(Some(code)) => main_ended(root, code),
        Ok(None) => Progress::Completed {
            code: pai_contract::exit::codes::POD_EXTERNAL_DELETED,
            diagnostics: format!("the main container {name} is gone, and how it ended with it"),
            message: None,
            reason: None,
        },
        Err(request) => Progress::Completed {
            code: request.code,
            diagnostics: request.reason,
            message: termination_message(root),
            reason: None,
        },
    }
}

enum Outcome {
    Exited(ExitStatus),
    Stopped(StopRequest),
    CannotStart(String),
}

/// `program` as one container of the task on the host: the server's variables, then
/// `env`, in the task's directory.
fn host_command(
    launch: &Launch,
    program: &Path,
    env: &[(String, String)],
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(program);
    command
        .env_clear()
        .envs(launch.host_env.iter().map(|(k, v)| (k, v)))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env(ROOT_VAR, &launch.root)
        .current_dir(&launch.root);
    command
}

/// What the main container `step` needs in the task's directory before its engine starts
/// it: the directory itself, its environment `env` in its file, the termination log.
fn prepare_container(
    launch: &Launch,
    step: &crate::containers::Step,
    env: &[(String, String)],
) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    // The pod's volume: writable by the image's user, whoever that is (an emptyDir is
    // 0777); no other user of this machine reaches it, `jobs/` above it being 0700.
    std::fs::create_dir_all(&launch.root)
        .and_then(|()| {
            std::fs::set_permissions(&launch.root, std::fs::Permissions::from_mode(0o777))
        })
        .map_err(|e| format!("cannot create {}: {e}", launch.root.display()))?;
    crate::containers::write_env_file(&step.env_file.0, env)
        .map_err(|e| format!("cannot write {}: {e}", step.env_file.0.display()))?;
    // The ssh files `entry` wrote (root's, private), given to the image's user where it is
    // not root: its sshd reads the host key and writes the authorized keys, its ssh client
    // reads the job's key.
    if let Some((uid, gid)) = step.user {
        let ssh = launch.root.join("ssh");
        give_to(&ssh, uid, gid)
            .map_err(|e| format!("cannot give {} to uid {uid}: {e}", ssh.display()))?;
    }
    // Files the container writes as the image's user, whoever that is: the termination
    // log (mounted in, so it must exist first, as the kubelet's does) and the task's log
    // where the runtime opens it itself.
    let log = launch.container_log();
    let mut writable: Vec<&Path> = vec![&log];
    for (host, inside, _) in &step.mounts {
        if inside == pai_contract::results::KUBELET_TERMINATION_LOG {
            writable.push(host);
        }
    }
    for path in writable {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|_| std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)))
            .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    }
    Ok(())
}

/// `path` and everything under it (links themselves, never what they name) owned by
/// `uid`:`gid`; nothing when it is not there.
fn give_to(path: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            give_to(&entry?.path(), uid, gid)?;
        }
    }
    Ok(())
}

/// Starts `command` as one container of the task, calls `started` once it runs (the
/// process started; in container mode, the engine's container `container` runs), and
/// waits for it to end or for a stop request.
async fn start_and_wait(
    launch: &Launch,
    mut command: tokio::process::Command,
    stop: &mut watch::Receiver<Option<StopRequest>>,
    started: impl FnOnce(),
    container: Option<StepContainer<'_>>,
) -> Outcome {
    if let Some(request) = stop.borrow().clone() {
        return Outcome::Stopped(request);
    }
    let root = launch.root.clone();
    let log_path = launch.container_log();
    let pid_record = launch.pid_record.clone();
    let cpu_group = launch.cpu_group.clone();
    // The runtime rotates the log as it echoes where the log is its standard output
    // (host mode); a container's engine ignores it.
    command.env(
        pai_contract::env::runtime::LOG_ROTATION,
        launch.logs.rotation().to_env(),
    );
    // The container's start is waited for from before it is started.
    // A host process runs once it is spawned.
    let running = match &container {
        Some(c) => c.engine.running(c.name),
        None => Box::pin(std::future::ready(())),
    };
    // Files, fork and exec on a spawning thread: none of it blocks the async workers.
    let started_process = launch
        .spawner
        .run(move || start(command, &root, &log_path, &pid_record, cpu_group.as_deref()))
        .await
        .unwrap_or_else(|| Err("the server is ending".to_string()));
    let (mut child, process) = match started_process {
        Ok(Started::Running(child, process)) => (child, process),
        Ok(Started::Ended(mut child)) => {
            // Ended already: nothing to record.
            return match child.wait().await {
                Ok(status) => Outcome::Exited(status),
                Err(e) => Outcome::CannotStart(e.to_string()),
            };
        }
        Err(message) => return Outcome::CannotStart(message),
    };
    let mut started = Some(started);
    tokio::pin!(running);
    loop {
        tokio::select! {
            status = child.wait() => return match status {
                Ok(status) => Outcome::Exited(status),
                Err(e) => Outcome::CannotStart(format!("lost the task's process: {e}")),
            },
            () = &mut running, if started.is_some() => {
                if let Some(started) = started.take() {
                    started();
                }
            }
            request = wait_for_stop(stop) => {
                terminate(&mut child, process, launch.grace, container.as_ref()).await;
                return Outcome::Stopped(request);
            }
        }
    }
}

enum Started {
    Running(tokio::process::Child, ProcessId),
    Ended(tokio::process::Child),
}

/// On a spawning thread: the task's directory, its container log as stdout and
/// stderr, the process, and its record for a restarted server.
fn start(
    mut command: tokio::process::Command,
    root: &Path,
    log_path: &Path,
    pid_record: &Path,
    cpu_group: Option<&crate::cpu_group::TaskGroup>,
) -> Result<Started, String> {
    std::fs::create_dir_all(root).map_err(|e| format!("cannot create {}: {e}", root.display()))?;
    let (out, err) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .and_then(|log| Ok((log.try_clone()?, log)))
        .map_err(|e| format!("cannot open {}: {e}", log_path.display()))?;
    command.stdout(out).stderr(err);
    if let Some(group) = cpu_group {
        command.env(pai_contract::env::runtime::CPU_GROUP, group.procs());
    }
    let child = procs::spawn(&mut command)
        .map_err(|e| format!("cannot start {:?}: {e}", command.as_std().get_program()))?;
    if let (Some(group), Some(pid)) = (cpu_group, child.id()) {
        group.join(pid);
    }
    let Some(process) = child.id().and_then(|pid| ProcessId::of(pid as i32)) else {
        return Ok(Started::Ended(child));
    };
    if let Err(e) = crate::store::record_process(pid_record, process) {
        tracing::warn!(error = %e, "cannot record the task's process; a restarted server will not find it");
    }
    Ok(Started::Running(child, process))
}

async fn wait_for_stop(stop: &mut watch::Receiver<Option<StopRequest>>) -> StopRequest {
    loop {
        if let Some(request) = stop.borrow_and_update().clone() {
            return request;
        }
        if stop.changed().await.is_err() {
            // The job loop is gone: never stop on its behalf.
            std::future::pending::<()>().await;
        }
    }
}

/// TERM to the process group (the runtime passes it to the user command), then, after
/// `grace`, KILL of the whole tree. In container mode the step's container gets them
/// through the engine (its client would pass a TERM on, but not a KILL it receives); the
/// group's TERM only where the container is not there yet (the client then gives up
/// creating it).
async fn terminate(
    child: &mut tokio::process::Child,
    process: ProcessId,
    grace: Duration,
    container: Option<&StepContainer<'_>>,
) {
    let termed = match container {
        Some(c) => c.engine.kill(c.name, "TERM").await,
        None => false,
    };
    if !termed {
        procs::signal_group(process.pid, nix::sys::signal::Signal::SIGTERM);
    }
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        tracing::warn!(
            pid = process.pid,
            grace_s = grace.as_secs(),
            "task outlived its grace period; killing its processes"
        );
        if let Some(c) = container {
            c.engine.kill(c.name, "KILL").await;
        }
        // Reads /proc: off the async workers.
        let _ = tokio::task::spawn_blocking(move || procs::kill_tree(process)).await;
        let _ = child.wait().await;
    }
}

/// The container a step runs in: its start is the engine saying it runs.
struct StepContainer<'a> {
    engine: &'a std::sync::Arc<crate::containers::Engine>,
    name: &'a str,
}

fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

/// The last non-empty line of a log (at most its last 4 KiB are read).
fn last_line(path: &Path) -> String {
    let Ok(mut file) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(std::io::SeekFrom::Start(len.saturating_sub(4096)));
    std::io::BufReader::new(file)
        .split(b'\n')
        .map_while(Result::ok)
        .map(|line| String::from_utf8_lossy(&line).trim().to_string())
        .filter(|line| !line.is_empty())
        .last()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::EnvVar;

    fn var(name: &str, value: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: Some(value.into()),
            ..EnvVar::default()
        }
    }

    #[test]
    fn the_kubelet_expansion_sees_the_controllers_variables_and_earlier_ones() {
        let container = Container {
            env: Some(vec![
                var("A", "task $(FC_TASK_INDEX) of $(FC_TASKROLE_NAME)"),
                var("B", "$(A)!"),
                var("LITERAL", "$$(A) stays"),
                var("LATER", "$(C) is not defined yet"),
                var("C", "c"),
            ]),
            ..Container::default()
        };
        let first = vec![
            ("FC_TASK_INDEX".to_string(), "3".to_string()),
            ("FC_TASKROLE_NAME".to_string(), "worker".to_string()),
        ];
        let env = container_env(first, &container);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("A"), Some("task 3 of worker"));
        assert_eq!(get("B"), Some("task 3 of worker!"));
        assert_eq!(get("LITERAL"), Some("$(A) stays"));
        assert_eq!(get("LATER"), Some("$(C) is not defined yet"));
        assert_eq!(
            env[0].0, "FC_TASK_INDEX",
            "the controller's variables come first"
        );
    }

    #[test]
    fn the_identity_gives_every_fc_variable() {
        let identity = Identity {
            namespace: "default".into(),
            framework: "0123456789abcdef0123456789abcdef".into(),
            framework_uid: "f".into(),
            attempt: 2,
            attempt_uid: "a".into(),
            role: "worker".into(),
            role_uid: "r".into(),
            index: 1,
            task_uid: "t".into(),
            task_attempt_uid: "ta".into(),
            pod_name: "0123456789abcdef0123456789abcdef-worker-1".into(),
            pod_uid: "p".into(),
        };
        let env = identity.fc_env();
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        for name in [
            "FC_FRAMEWORK_NAMESPACE",
            "FC_FRAMEWORK_NAME",
            "FC_TASKROLE_NAME",
            "FC_TASK_INDEX",
            "FC_CONFIGMAP_NAME",
            "FC_POD_NAME",
            "FC_FRAMEWORK_UID",
            "FC_FRAMEWORK_ATTEMPT_ID",
            "FC_FRAMEWORK_ATTEMPT_INSTANCE_UID",
            "FC_CONFIGMAP_UID",
            "FC_TASKROLE_UID",
            "FC_TASK_UID",
            "FC_TASK_ATTEMPT_ID",
            "FC_TASK_ATTEMPT_INSTANCE_UID",
            "FC_POD_UID",
        ] {
            assert!(names.contains(&name), "{name} missing");
        }
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("FC_FRAMEWORK_ATTEMPT_ID"), Some("2"));
        assert_eq!(get("FC_TASK_INDEX"), Some("1"));
    }
}
