//! The client commands: `submit`, `jobs`, `status`, `logs`, `stop`, `delete`, `ssh`,
//! each one request to a server.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use futures::StreamExt;
use serde::Serialize;

use super::human::shell_word;
use pai_api::jobs::Message;
use pai_client::{Client, ClientError};

/// Where the server is and who is asking.
#[derive(clap::Args, Debug, Clone)]
pub struct Connection {
    /// The server's URL.
    #[arg(long, env = "REST_LITE_SERVER", default_value = DEFAULT_SERVER)]
    pub server: String,
    /// Bearer token [default: this machine's server's own, from <state dir>/token, when
    /// this user may read it].
    #[arg(long, env = "REST_LITE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// State directory of this machine's server, where its token is [default:
    /// $XDG_STATE_HOME/rest-lite or ~/.local/state/rest-lite].
    #[arg(long, env = "REST_LITE_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Trust this CA certificate (PEM) for an https:// server, besides the system's.
    #[arg(long, env = "REST_LITE_CA_CERT")]
    pub ca_cert: Option<PathBuf>,
    /// The user whose jobs these are [default: the one the token stands for (the server
    /// says, `GET /api/v1/whoami`), else this Unix user, as `serve` names it].
    #[arg(long, short)]
    pub user: Option<String>,
}

/// The server's address when none is given.
const DEFAULT_SERVER: &str = "http://127.0.0.1:9186";

impl Connection {
    /// The user to act as: the one given, else the one `client`'s token stands for (the
    /// server says), else `$USER`, else "default".
    pub fn user(&self, client: &Client) -> String {
        if let Some(user) = &self.user {
            return user.clone();
        }
        // Without a token there is nobody for the server to name.
        client
            .has_token()
            .then(|| block_on(async { Ok(client.whoami().await?) }).ok())
            .flatten()
            .map(|who| who.user)
            .filter(|user| !user.is_empty())
            .unwrap_or_else(super::serve::unix_user)
    }

    /// What a printed command needs to reach the same server as the same user:
    /// ` --server URL` unless it is the default, ` -u USER` when one was given.
    pub fn flags(&self) -> String {
        let mut flags = String::new();
        if self.server.trim_end_matches('/') != DEFAULT_SERVER {
            flags.push_str(" --server ");
            flags.push_str(&shell_word(&self.server));
        }
        if let Some(user) = &self.user {
            flags.push_str(" -u ");
            flags.push_str(&shell_word(user));
        }
        flags
    }

    /// The token to send: the one given, else this machine's server's own, and that one
    /// only to where that server serves.
    fn token(&self) -> Option<String> {
        self.token.clone().or_else(|| {
            let state_dir = self
                .state_dir
                .clone()
                .unwrap_or_else(pai_local::default_state_dir);
            if !pai_server::machine_token::serves(&state_dir, &self.server) {
                tracing::debug!(server = %self.server, "not this machine's server: its token is not sent");
                return None;
            }
            pai_server::machine_token::read(&state_dir)
        })
    }

    fn client(&self) -> Result<Client> {
        Ok(Client::with_tls(
            &self.server,
            self.token(),
            self.ca_cert.as_deref(),
        )?)
    }
}

#[derive(clap::Args, Debug)]
pub struct SubmitArgs {
    /// Job spec file (JSON or YAML); `-` reads standard input.
    spec: PathBuf,
    /// Then follow the job to its end: every task's output, and the job's outcome as the
    /// exit code (Ctrl-C stops following and leaves the job running).
    #[arg(long, short, conflicts_with = "wait")]
    follow: bool,
    /// With --follow: the runtime's lines too (its steps, the barrier, the daemons), not
    /// only the user commands' output and the runtime's warnings and errors.
    #[arg(long, short, requires = "follow")]
    verbose: bool,
    /// Then show each role's tasks starting, until every task runs (exit 0) or the job
    /// ends first (its outcome as the exit code).
    #[arg(long, short)]
    wait: bool,
    /// With --wait: how long every task must have run before the job counts as started,
    /// in seconds (as Kubernetes' minReadySeconds); a command that fails at once fails
    /// within it, and --wait ends with the job's outcome.
    #[arg(long, default_value_t = 2.0, requires = "wait", value_parser = settle_seconds)]
    settle: f64,
    #[command(flatten)]
    connection: Connection,
}

impl SubmitArgs {
    /// The spec file it names.
    pub fn spec_path(&self) -> &std::path::Path {
        &self.spec
    }
}

/// How a command prints what it read.
#[derive(Clone, Copy, Debug, Default, clap::ValueEnum)]
pub enum Format {
    /// For people.
    #[default]
    Text,
    /// The API's JSON.
    Json,
    /// The API's view as YAML.
    Yaml,
}

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// The job's name.
    job: String,
    #[arg(long, short, value_enum, default_value_t)]
    output: Format,
    #[command(flatten)]
    connection: Connection,
}

#[derive(clap::Args, Debug)]
pub struct JobsArgs {
    /// Every user's jobs the token may see, not only the user's.
    #[arg(long)]
    all: bool,
    #[arg(long, short, value_enum, default_value_t)]
    output: Format,
    #[command(flatten)]
    connection: Connection,
}

#[derive(clap::Args, Debug)]
pub struct JobArgs {
    /// The job's name.
    job: String,
    #[command(flatten)]
    connection: Connection,
}

#[derive(clap::Args, Debug)]
pub struct SshArgs {
    /// The job's name.
    job: String,
    /// The task's role [default: the first task one can log in to].
    role: Option<String>,
    /// The task's index in its role.
    #[arg(requires = "role")]
    index: Option<u32>,
    /// Your own private key instead of the job's (its public half in PAI_SSH_PUB_KEY).
    #[arg(long, short = 'i')]
    identity: Option<PathBuf>,
    /// Print, instead of running ssh, a command for every task one can log in to (and
    /// why not the others): they work as printed, with the job's key and host key kept
    /// in a private directory of yours (or your own key with -i).
    #[arg(long)]
    print: bool,
    /// A command to run instead of a shell (after `--`), as ssh runs it.
    #[arg(last = true)]
    command: Vec<String>,
    #[command(flatten)]
    connection: Connection,
}

impl SshArgs {
    /// The job it names.
    pub fn job(&self) -> &str {
        &self.job
    }
}

#[derive(clap::Args, Debug)]
pub struct LogsArgs {
    /// The job's name.
    job: String,
    /// The task role [default: the job's only role; a job of several says its tasks].
    #[arg(long, short)]
    role: Option<String>,
    /// The task's index in its role [default: 0, said when the role has more tasks].
    #[arg(long, short)]
    index: Option<u32>,
    /// Keep printing while the task runs.
    #[arg(long, short, conflicts_with = "attempt")]
    follow: bool,
    /// The log of this attempt of the job (from 0; `status` shows the retries) instead
    /// of the current one's.
    #[arg(long)]
    attempt: Option<u32>,
    /// The runtime's own lines instead of the user command's output (its steps, the
    /// barrier, the daemons it started; its warnings and errors are in both).
    #[arg(long, conflicts_with = "all")]
    runtime: bool,
    /// The user command's output and the runtime's lines, as written.
    #[arg(long)]
    all: bool,
    /// One stream of the user command's output alone (without it: both, in the order
    /// written). Kept apart on this machine; a cluster's kubelet merges them.
    #[arg(long, value_parser = ["stdout", "stderr"], conflicts_with_all = ["runtime", "all"])]
    stream: Option<String>,
    /// Each line begins with the time it was written (RFC 3339, UTC), as `kubectl logs
    /// --timestamps` shows it.
    #[arg(long)]
    timestamps: bool,
    #[command(flatten)]
    connection: Connection,
}

impl LogsArgs {
    fn lines(&self) -> pai_client::Asked {
        let lines = match self.stream.as_deref().and_then(pai_client::Stream::parse) {
            Some(stream) => pai_client::Lines::Stream(stream),
            None => pai_client::Lines::Source(match (self.runtime, self.all) {
                (true, _) => pai_client::Source::Runtime,
                (_, true) => pai_client::Source::All,
                _ => pai_client::Source::User,
            }),
        };
        pai_client::Asked {
            lines,
            timestamps: self.timestamps,
        }
    }
}

fn settle_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if (0.0..=3600.0).contains(&s) => Ok(s),
        _ => Err("a number of seconds from 0 to 3600".to_string()),
    }
}

fn block_on<T>(future: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(future)
}

fn print(
    value: &impl Serialize,
    format: Format,
    text: impl FnOnce() -> String,
) -> Result<ExitCode> {
    let out = match format {
        Format::Text => text(),
        Format::Json => {
            let mut out = serde_json::to_string_pretty(value).context("rendering JSON")?;
            out.push('\n');
            out
        }
        Format::Yaml => serde_saphyr::to_string(value).context("rendering YAML")?,
    };
    std::io::stdout().write_all(out.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

fn message(message: &Message) -> Result<ExitCode> {
    say!("{}", message.message);
    warn(message);
    Ok(ExitCode::SUCCESS)
}

/// A submission's warnings, one line each on standard error.
pub fn warn(message: &Message) {
    for warning in &message.warnings {
        tell!("rest-lite: warning: {warning}");
    }
}

pub fn submit(args: SubmitArgs) -> Result<ExitCode> {
    let text = super::spec_file::read(&args.spec)?;
    let format = super::spec_file::format_of(&args.spec, &text);
    let client = args.connection.client()?;
    let user = args.connection.user(&client);
    if !args.follow && !args.wait {
        return block_on(async { Ok(client.submit(&user, &text, format).await?) })
            .and_then(|m| message(&m));
    }
    let spec = pai_translate::spec::JobSpec::parse(&text, format)?;
    let job = spec.name().as_str().to_string();
    block_on(async {
        let submitted = client.submit(&user, &text, format).await?;
        if args.wait {
            message(&submitted)?;
            let page = format!(
                "{}{}",
                args.connection.server.trim_end_matches('/'),
                pai_api::routes::UI_JOB.with(&[&user, &job])
            );
            let flags = args.connection.flags();
            let settle = std::time::Duration::from_secs_f64(args.settle);
            return super::wait::until_running(&client, &user, &job, &page, &flags, settle).await;
        }
        warn(&submitted);
        let interrupt = super::follow::OnInterrupt::Detach {
            flags: args.connection.flags(),
        };
        super::follow::follow(&client, &user, &job, args.verbose, interrupt).await
    })
}

pub fn jobs(args: JobsArgs) -> Result<ExitCode> {
    let client = args.connection.client()?;
    let user = (!args.all).then(|| args.connection.user(&client));
    let jobs = block_on(async { Ok(client.jobs(user.as_deref()).await?) })?;
    print(&jobs, args.output, || super::human::jobs(&jobs, now_ms()))
}

pub fn status(args: StatusArgs) -> Result<ExitCode> {
    let client = args.connection.client()?;
    let user = args.connection.user(&client);
    let view = block_on(async { Ok(client.job(&user, &args.job).await?) })?;
    print(&view, args.output, || super::human::status(&view, now_ms()))
}

/// The results the job's tasks left: by task (`worker-0`), each the task's JSON value, or
/// `{"error": why}` where it could not be sent; a table for people.
pub fn results(args: StatusArgs) -> Result<ExitCode> {
    let client = args.connection.client()?;
    let user = args.connection.user(&client);
    let view = block_on(async { Ok(client.job(&user, &args.job).await?) })?;
    let results = super::human::results_of(&view);
    print(&results, args.output, || super::human::results(&view))
}

/// Stops a job; one that already ended is said so (exit 1: nothing was stopped).
pub fn stop(args: JobArgs) -> Result<ExitCode> {
    let client = args.connection.client()?;
    let user = args.connection.user(&client);
    let view = block_on(async { Ok(client.job(&user, &args.job).await?) })?;
    let status = &view.job_status;
    if status.state.is_final() {
        let code = status
            .app_exit_code
            .map(|c| format!(", exit code {c}"))
            .unwrap_or_default();
        tell!(
            "rest-lite: job {} already ended ({}{code}): nothing to stop",
            args.job,
            status.state
        );
        return Ok(ExitCode::FAILURE);
    }
    block_on(async { Ok(client.stop(&user, &args.job).await?) }).and_then(|m| message(&m))
}

pub fn delete(args: JobArgs) -> Result<ExitCode> {
    let client = args.connection.client()?;
    let user = args.connection.user(&client);
    block_on(async { Ok(client.delete(&user, &args.job).await?) }).and_then(|m| message(&m))
}

/// Logs in to a task of a job (the system's `ssh`, with the job's key), or prints
/// which tasks one can log in to.
pub fn ssh(args: SshArgs) -> Result<ExitCode> {
    let client = args.connection.client()?;
    let user = args.connection.user(&client);
    let info = block_on(async { Ok(client.ssh(&user, &args.job).await?) })?;
    if args.print {
        // Kept for the printed commands: a directory of this user's, per job.
        let files = PrivateDir::kept(&user, &args.job)?;
        let login = Login::prepare(&files, &client, &user, &args, &info)?;
        for c in &info.containers {
            say!(
                "{}: {}",
                c.id,
                login.command_line(&c.ssh_port, &c.ssh_user, &c.ssh_ip)
            );
        }
        for u in &info.unavailable {
            say!("{}: {}", u.id, u.reason);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let target = match (&args.role, args.index) {
        (None, _) => info.containers.first(),
        (Some(role), index) => {
            let id = format!("{role}-{}", index.unwrap_or(0));
            match info.containers.iter().find(|c| c.id == id) {
                Some(found) => Some(found),
                None => {
                    let why = info
                        .unavailable
                        .iter()
                        .find(|u| u.id == id)
                        .map(|u| u.reason.clone())
                        .unwrap_or_else(|| format!("job {} has no task {id}", args.job));
                    anyhow::bail!("cannot log in to {id}: {why}");
                }
            }
        }
    }
    .context("no task of the job can be logged in to now")?;
    // The job's key (unless -i names another) and the host key its tasks present, in a
    // directory of this user's alone, removed when ssh ends.
    let files = PrivateDir::create()?;
    let login = Login::prepare(&files, &client, &user, &args, &info)?;
    let mut command = std::process::Command::new("ssh");
    command
        .args(login.options())
        .args(["-p", &target.ssh_port])
        .arg(format!("{}@{}", target.ssh_user, target.ssh_ip));
    if !args.command.is_empty() {
        command.arg("--").args(&args.command);
    }
    let status = command
        .status()
        .context("running ssh (is openssh-client installed?)")?;
    drop(files);
    Ok(match status.code() {
        Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        None => ExitCode::FAILURE,
    })
}

/// How ssh logs in to a job's tasks: which key, which host key it checks.
struct Login {
    identity: PathBuf,
    /// `StrictHostKeyChecking=yes` with the job's host key; `no` for an older job whose
    /// tasks each made their own, which nothing can vouch for.
    check: &'static str,
    known_hosts: PathBuf,
}

impl Login {
    /// The job's key (unless -i names another) and host key, written into `files`.
    fn prepare(
        files: &PrivateDir,
        client: &pai_client::Client,
        user: &str,
        args: &SshArgs,
        info: &pai_api::ssh::SshInfo,
    ) -> Result<Self> {
        let identity = match &args.identity {
            Some(own) => own.clone(),
            None => {
                let key = block_on(async { Ok(client.ssh_key(user, &args.job).await?) })
                    .context("fetching the job's key (or give your own with -i)")?;
                files.write("id", &key)?
            }
        };
        let (check, known_hosts) = match &info.host_key {
            Some(key) => (
                "StrictHostKeyChecking=yes",
                files.write("known_hosts", &format!("* {key}\n"))?,
            ),
            None => ("StrictHostKeyChecking=no", PathBuf::from("/dev/null")),
        };
        Ok(Self {
            identity,
            check,
            known_hosts,
        })
    }

    /// ssh's options, before the port and the destination.
    fn options(&self) -> Vec<std::ffi::OsString> {
        let mut known = std::ffi::OsString::from("UserKnownHostsFile=");
        known.push(&self.known_hosts);
        [
            "-o".into(),
            self.check.into(),
            "-o".into(),
            known,
            "-o".into(),
            "LogLevel=ERROR".into(),
            "-o".into(),
            "IdentitiesOnly=yes".into(),
            "-i".into(),
            self.identity.clone().into_os_string(),
        ]
        .into()
    }

    /// The whole command, quoted for a POSIX shell.
    fn command_line(&self, port: &str, user: &str, ip: &str) -> String {
        let mut words: Vec<String> = vec!["ssh".into()];
        words.extend(
            self.options()
                .iter()
                .map(|w| shell_word(&w.to_string_lossy())),
        );
        words.extend([
            "-p".into(),
            shell_word(port),
            shell_word(&format!("{user}@{ip}")),
        ]);
        words.join(" ")
    }
}

/// A directory of this user's alone (0700): a new one removed with what it holds when
/// dropped, or one kept for a job's printed commands.
struct PrivateDir {
    path: PathBuf,
    keep: bool,
}

impl PrivateDir {
    /// This user's directory (0700) for job `job` of `user`, kept: under
    /// `$XDG_CACHE_HOME/rest-lite/ssh` (or `~/.cache/…`, or the temporary directory).
    fn kept(user: &str, job: &str) -> Result<Self> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .unwrap_or_else(std::env::temp_dir)
            .join("rest-lite")
            .join("ssh");
        let name: String = format!("{user}-{job}")
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let path = base.join(name);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("making {} private", path.display()))?;
        Ok(Self { path, keep: true })
    }

    /// A new directory, removed when dropped.
    fn create() -> Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let path =
            std::env::temp_dir().join(format!("rest-lite-ssh-{}-{nanos}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        Ok(Self { path, keep: false })
    }

    /// Writes `text` as file `name` (0600): a new file in a new directory; in a kept
    /// one, over what an earlier run wrote. Returns its path.
    fn write(&self, name: &str, text: &str) -> Result<PathBuf> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let path = self.path.join(name);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(!self.keep)
            .create(self.keep)
            .truncate(self.keep)
            .mode(0o600)
            .open(&path)
            .and_then(|mut file| {
                file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
                file.write_all(text.as_bytes())
            })
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// The task whose log `args` asks for: its role, else the job's only one (a job of
/// several roles is refused, naming its tasks); its index, else 0, which is said when
/// the role has more tasks.
async fn which_task(client: &Client, user: &str, args: &LogsArgs) -> Result<(String, u32)> {
    if let (Some(role), Some(index)) = (&args.role, args.index) {
        return Ok((role.clone(), index));
    }
    let (role, view) = match (&args.role, client.job(user, &args.job).await) {
        // The log's own request says what is wrong where the job cannot be read.
        (Some(role), view) => (role.clone(), view.ok()),
        (None, Ok(view)) => (only_role(&view, user, args)?, Some(view)),
        // Which role cannot be told without the job: why it cannot be read is the answer.
        (None, Err(e)) => return Err(e.into()),
    };
    let tasks = view
        .as_ref()
        .and_then(|v| v.task_roles.get(&role).map(|r| r.task_statuses.len()));
    let index = match args.index {
        Some(index) => index,
        // Which of several tasks is shown is said, not left to guess.
        None => {
            if let Some(tasks) = tasks.filter(|&n| n > 1) {
                tell!(
                    "rest-lite: the log of {role}-0, the first of {role}'s {tasks} tasks (-i INDEX for another)"
                );
            }
            0
        }
    };
    Ok((role, index))
}

/// The only role of the job `view` shows; for a job of several, a refusal naming its
/// tasks (ROLE-INDEX) and how to say which, with commands that run as printed.
fn only_role(view: &pai_api::status::JobView, user: &str, args: &LogsArgs) -> Result<String> {
    let job = args.job.as_str();
    let mut roles = view.task_roles.iter();
    match (roles.next(), roles.next()) {
        (Some((role, _)), None) => Ok(role.clone()),
        _ => {
            let tasks: Vec<String> = view
                .task_roles
                .iter()
                .map(|(role, r)| match r.task_statuses.len() {
                    0 => format!("{role} (no tasks)"),
                    1 => format!("{role}-0"),
                    2 => format!("{role}-0, {role}-1"),
                    n => format!("{role}-0 … {role}-{}", n - 1),
                })
                .collect();
            let first = view.task_roles.keys().next().map_or("ROLE", String::as_str);
            Err(super::hints::Refusal {
                message: format!(
                    "job {user}~{job} has {} roles: say whose log with -r ROLE -i INDEX (its tasks: {})",
                    view.task_roles.len(),
                    tasks.join(", ")
                ),
                hint: format!(
                    "`{program} status {job}{flags}` shows each task's state; `{program} logs {job} -r {first} -i 0{flags}` prints the first one's log",
                    program = super::invocation::program(),
                    job = shell_word(job),
                    first = shell_word(first),
                    flags = args.connection.flags(),
                ),
            }
            .into())
        }
    }
}

pub fn logs(args: LogsArgs) -> Result<ExitCode> {
    let client = args.connection.client()?;
    let user = args.connection.user(&client);
    block_on(async {
        let (role, index) = which_task(&client, &user, &args).await?;
        // Following a task that has not started yet waits for it, change by change.
        let mut changes = None;
        let mut stream = loop {
            if let Some(attempt) = args.attempt {
                break client
                    .attempt_logs(&user, &args.job, &role, index, attempt, args.lines())
                    .await?;
            }
            match client
                .logs(&user, &args.job, &role, index, args.follow, args.lines())
                .await
            {
                Ok(stream) => break stream,
                Err(ClientError::Api { status: 404, .. }) if args.follow => {
                    if changes.is_none() {
                        // Fails here when the job itself does not exist.
                        changes = Some(client.watch(&user, &args.job).await?);
                    }
                    let ended = match changes.as_mut() {
                        Some(changes) => changes.next().await.is_none(),
                        None => true,
                    };
                    if ended {
                        // The job completed or went away: one last look.
                        break client
                            .logs(&user, &args.job, &role, index, false, args.lines())
                            .await?;
                    }
                }
                Err(e) => return Err(e.into()),
            }
        };
        let mut stdout = std::io::stdout();
        while let Some(chunk) = stream.next().await {
            stdout.write_all(&chunk?)?;
            stdout.flush()?;
        }
        Ok(ExitCode::SUCCESS)
    })
}
