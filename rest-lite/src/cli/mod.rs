//! Command-line parsing and dispatch; each command is a thin call into the library.

/// A line on standard output that a reader who went away (`| head`) does not turn into
/// a panic: `println!` panics on a closed pipe. The commands but `serve` and `run` end
/// by SIGPIPE there as other Unix tools do; `run` carries its job to the end quietly.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// [`say!`] on standard error.
macro_rules! tell {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod client;
mod config_reload;
mod exit_status;
mod follow;
mod hints;
mod human;
mod in_order;
mod invocation;
mod run;
mod serve;
mod spec_file;
mod token;
mod wait;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};

use pai_translate::config::ClusterConfig;
use pai_translate::ports::Seed;
use pai_translate::spec::{JobSpec, UserName};
use pai_translate::transform::{Submission, Transformer};

/// Exit code for bad input: an invalid spec, config or argument.
const EXIT_BAD_INPUT: u8 = 2;

#[derive(Parser, Debug)]
#[command(
    name = "rest-lite",
    version,
    about = "OpenPAI-style multi-role jobs on Kubernetes, or on this machine with the same runtime"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a job on this machine and follow it to its end (the embedded default, no
    /// server to start): every task's output, then the job's state; exits 0 when it
    /// succeeded.
    Run(run::RunArgs),
    /// Serve the jobs API (OpenPAI's v1, and v2 as its SDK calls it) and the pages, over a
    /// Kubernetes cluster or on this machine.
    Serve(serve::ServeArgs),
    /// Submit a job to a server.
    Submit(client::SubmitArgs),
    /// List jobs.
    Jobs(client::JobsArgs),
    /// Show a job's state and tasks.
    Status(client::StatusArgs),
    /// Print a task's output.
    Logs(client::LogsArgs),
    /// Print the results the job's tasks left in $PAI_RESULT_FILE.
    Results(client::StatusArgs),
    /// Stop a job.
    Stop(client::JobArgs),
    /// Delete a job and its tasks.
    Delete(client::JobArgs),
    /// Log in to a task of a job over ssh (runs ssh with the job's key; --print prints
    /// the commands instead).
    Ssh(client::SshArgs),
    /// Print the FrameworkController Framework a job spec becomes.
    Transform(TransformArgs),
    /// Make a token for a user of a server: adds its hash to the token file and prints
    /// the token, once.
    Token(token::TokenArgs),
}

#[derive(clap::Args, Debug)]
struct TransformArgs {
    /// Job spec file (JSON or YAML); `-` reads standard input.
    spec: PathBuf,
    /// The submitting user [default: this Unix user, as `serve` names it].
    #[arg(long, short)]
    user: Option<String>,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = Output::Yaml)]
    output: Output,
    /// Cluster config file (YAML); defaults apply without one.
    #[arg(long, short, env = "REST_LITE_CONFIG")]
    config: Option<PathBuf>,
    /// Seed for port allocation, for reproducible output; random without one.
    #[arg(long)]
    seed: Option<u64>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Output {
    Yaml,
    Json,
}

/// Restores SIGPIPE's default action (Rust ignores it, so that a write to a closed pipe
/// is an error to print): the process then ends at once, silently, as `cat` or `git`
/// do under `| head`.
fn quiet_on_closed_pipe() {
    use nix::sys::signal::{SigHandler, Signal, signal};
    #[allow(unsafe_code)]
    // SAFETY: the default action is no handler (nothing runs in signal context); called
    // at start, before any thread.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
}

pub fn run() -> ExitCode {
    let cli = Cli::parse();
    // A server (`serve`, and `run`, which serves its job), before any thread: without the
    // allocator's per-thread caches (`pai_backend::memory`).
    let caches = matches!(cli.command, Command::Serve(_) | Command::Run(_))
        .then(pai_backend::memory::thread_caches::off_then_continue);
    // The server tells what it does; the other commands speak only of trouble.
    init_tracing(match cli.command {
        Command::Serve(_) => "info",
        _ => "warn",
    });
    if let Some(caches) = caches {
        caches.log();
    }
    // A command whose output is cut short (`rest-lite status JOB | head -1`) ends quietly,
    // as other Unix tools do, killed by SIGPIPE; not the server, nor `run` with the job it
    // carries, which must outlive a reader that went away.
    if !matches!(cli.command, Command::Serve(_) | Command::Run(_)) {
        quiet_on_closed_pipe();
    }
    // A 400 of these is about the spec they sent.
    let named_job = match &cli.command {
        Command::Ssh(args) => Some(args.job().to_string()),
        _ => None,
    };
    let spec_path = match &cli.command {
        Command::Submit(args) => Some(args.spec_path().to_path_buf()),
        Command::Run(args) => Some(args.spec_path().to_path_buf()),
        _ => None,
    };
    let result = match cli.command {
        Command::Transform(args) => transform(args).map(|()| ExitCode::SUCCESS),
        Command::Serve(args) => serve::serve(args).map(|()| ExitCode::SUCCESS),
        Command::Run(args) => run::run(args),
        Command::Submit(args) => client::submit(args),
        Command::Jobs(args) => client::jobs(args),
        Command::Status(args) => client::status(args),
        Command::Logs(args) => client::logs(args),
        Command::Results(args) => client::results(args),
        Command::Stop(args) => client::stop(args),
        Command::Delete(args) => client::delete(args),
        Command::Ssh(args) => client::ssh(args),
        Command::Token(args) => token::token(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            tell!("error: {err:#}");
            let job = spec_path
                .as_deref()
                .and_then(spec_file::job_name)
                .or(named_job);
            // A spec that becomes a Framework here was refused for what it asks of the
            // server's place (its GPUs, storages, task limit), which the message names.
            let spec = spec_path
                .as_deref()
                .map(|p| !spec_file::transforms(p).unwrap_or(false));
            if let Some(hint) = hints::next_step(&err, spec, job.as_deref(), server_here()) {
                tell!("hint: {}", invocation::typed_here(&hint));
            }
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

/// Whether the server the command talked to is on this machine: `--server URL` (or
/// `--server=URL`), else `REST_LITE_SERVER`, else the default (loopback).
fn server_here() -> bool {
    let args: Vec<String> = std::env::args().collect();
    let named = args
        .iter()
        .position(|a| a == "--server")
        .and_then(|i| args.get(i + 1).cloned())
        .or_else(|| {
            args.iter()
                .find_map(|a| a.strip_prefix("--server=").map(str::to_string))
        })
        .or_else(|| std::env::var("REST_LITE_SERVER").ok());
    named.is_none_or(|url| pai_server::machine_token::on_this_machine(&url))
}

fn init_tracing(default: &str) {
    let mut filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // The client library says every failed request and watch retry, ten lines a second
    // when the credentials are refused; the server says it once a minute
    // (pai_cluster::credentials). A RUST_LOG that names kube keeps them.
    if !std::env::var("RUST_LOG").is_ok_and(|v| v.contains("kube")) {
        for target in pai_cluster::credentials::QUIET_TARGETS {
            if let Ok(directive) = format!("{target}=off").parse() {
                filter = filter.add_directive(directive);
            }
        }
    }
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| LossyStderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// Standard error that drops what it cannot write. A server whose log reader went away
/// must keep answering requests; the logging library panics on a failed write.
struct LossyStderr;

impl Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

fn transform(args: TransformArgs) -> Result<()> {
    let config = match &args.config {
        Some(path) => ClusterConfig::load(path)?,
        None => ClusterConfig::default(),
    };
    let user_name = args.user.unwrap_or_else(serve::unix_user);
    let user = UserName::parse(&user_name)
        .map_err(|rule| anyhow::anyhow!("user name {user_name:?}: {rule}"))?;
    let text = spec_file::read(&args.spec)?;
    let format = spec_file::format_of(&args.spec, &text);
    let spec = JobSpec::parse(&text, format)?;
    let seed = args.seed.map_or(Seed::Random, Seed::Fixed);
    // A Framework is for a cluster: its code and virtual cluster are checked for one.
    let place_warnings =
        pai_translate::place::check(&spec, &user, pai_translate::place::Place::Cluster(&config))?;
    let framework = Transformer::new(config).transform(
        Submission {
            user: &user,
            spec: &spec,
            spec_text: &text,
            format,
        },
        seed,
    )?;
    // What the spec asks that is not done as it asks: on stderr, the Framework on stdout.
    for warning in pai_translate::warnings::spec_warnings(&spec)
        .into_iter()
        .chain(place_warnings)
    {
        tell!("rest-lite: warning: {warning}");
    }
    let rendered = match args.output {
        Output::Yaml => serde_saphyr::to_string(&framework).context("rendering YAML")?,
        Output::Json => {
            let mut s = serde_json::to_string_pretty(&framework).context("rendering JSON")?;
            s.push('\n');
            s
        }
    };
    std::io::stdout()
        .write_all(rendered.as_bytes())
        .context("writing to standard output")
}
