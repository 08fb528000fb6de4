//! Command-line parsing and dispatch; each command is a thin call into the library.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};

use rest_lite::config::ClusterConfig;
use rest_lite::ports::Seed;
use rest_lite::spec::{JobSpec, SpecFormat, UserName};
use rest_lite::transform::{Submission, Transformer};

/// Exit code for bad input: an invalid spec, config or argument.
const EXIT_BAD_INPUT: u8 = 2;

#[derive(Parser, Debug)]
#[command(
    name = "rest-lite",
    version,
    about = "OpenPAI-style multi-role jobs on Kubernetes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the FrameworkController Framework a job spec becomes.
    Transform(TransformArgs),
}

#[derive(clap::Args, Debug)]
struct TransformArgs {
    /// Job spec file (JSON or YAML); `-` reads standard input.
    spec: PathBuf,
    /// The submitting user [default: $USER, else "default"].
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

pub fn run() -> ExitCode {
    init_tracing();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Transform(args) => transform(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn transform(args: TransformArgs) -> Result<()> {
    let config = match &args.config {
        Some(path) => ClusterConfig::load(path)?,
        None => ClusterConfig::default(),
    };
    let user_name = args
        .user
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "default".to_string());
    let user = UserName::parse(&user_name)
        .map_err(|rule| anyhow::anyhow!("user name {user_name:?}: {rule}"))?;
    let text = read_spec(&args.spec)?;
    let format = format_of(&args.spec, &text);
    let spec = JobSpec::parse(&text, format)?;
    let seed = args.seed.map_or(Seed::Random, Seed::Fixed);
    let framework = Transformer::new(config).transform(
        Submission {
            user: &user,
            spec: &spec,
            spec_text: &text,
        },
        seed,
    )?;
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

fn read_spec(path: &Path) -> Result<String> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the spec from standard input")?;
        return Ok(text);
    }
    std::fs::read_to_string(path).with_context(|| format!("reading spec {}", path.display()))
}

/// By extension, else by content.
fn format_of(path: &Path, text: &str) -> SpecFormat {
    match path.extension().and_then(|e| e.to_str()) {
        Some("json") => SpecFormat::Json,
        Some("yaml" | "yml") => SpecFormat::Yaml,
        _ => SpecFormat::detect(text),
    }
}
