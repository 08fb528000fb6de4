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
    /// Serve the OpenPAI v1 jobs API over a Kubernetes cluster.
    Serve(ServeArgs),
}

#[derive(clap::Args, Debug)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9186")]
    listen: std::net::SocketAddr,
    /// Cluster config file (YAML); defaults apply without one.
    #[arg(long, short, env = "REST_LITE_CONFIG")]
    config: Option<PathBuf>,
    /// Bearer tokens (YAML: users with name, tokenSha256, admin). Without it the server
    /// listens on loopback only and every caller may act as any user.
    #[arg(long, env = "REST_LITE_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// kubeconfig to use [default: in-cluster, $KUBECONFIG or ~/.kube/config].
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Namespace of the Frameworks (overrides the config's).
    #[arg(long, short)]
    namespace: Option<String>,
    /// Largest request body, in bytes.
    #[arg(long, default_value_t = rest_lite::server::DEFAULT_BODY_LIMIT)]
    max_body_bytes: usize,
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
        Command::Serve(args) => serve(args),
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

fn serve(args: ServeArgs) -> Result<()> {
    let mut config = match &args.config {
        Some(path) => ClusterConfig::load(path)?,
        None => ClusterConfig::default(),
    };
    if let Some(namespace) = args.namespace {
        config.namespace = namespace;
        config.check()?;
    }
    let tokens = match &args.token_file {
        Some(path) => Some(std::sync::Arc::new(rest_lite::server::auth::Tokens::load(
            path,
        )?)),
        None => {
            if !args.listen.ip().is_loopback() {
                anyhow::bail!(
                    "without --token-file the server only listens on loopback, not {}: give it a token file or listen on 127.0.0.1",
                    args.listen
                );
            }
            tracing::warn!(
                "no token file: every caller may act as any user; listening on loopback only"
            );
            None
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let (client, address) = kube_client(args.kubeconfig.as_deref()).await?;
        let backend = rest_lite::server::kube_backend::KubeBackend::new(client, &config.namespace, &address);
        let describe = rest_lite::server::backend::Backend::describe(&backend);
        let state = rest_lite::server::AppState {
            backend: std::sync::Arc::new(backend),
            transformer: std::sync::Arc::new(Transformer::new(config)),
            body_limit: args.max_body_bytes,
            tokens,
            metrics: Default::default(),
        };
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("listening on {}", args.listen))?;
        let bound = listener.local_addr().context("reading the bound address")?;
        tracing::info!(url = %format!("http://{bound}"), backend = %describe, "rest-lite serving; state lives in the cluster's Frameworks");
        axum::serve(listener, rest_lite::server::router(state))
            .with_graceful_shutdown(shutdown())
            .await
            .context("serving")
    })
}

/// A client for the cluster: `--kubeconfig`, else in-cluster, `$KUBECONFIG` or
/// `~/.kube/config`. Returns it with the API server's address.
async fn kube_client(kubeconfig: Option<&Path>) -> Result<(kube::Client, String)> {
    let config = match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
                .with_context(|| format!("using kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer().await.context(
            "no Kubernetes configuration found (in-cluster, $KUBECONFIG, ~/.kube/config or --kubeconfig); \
             running jobs on this machine without a cluster is not built yet",
        )?,
    };
    let address = config.cluster_url.to_string();
    let client = kube::Client::try_from(config).context("building the Kubernetes client")?;
    Ok((client, address))
}

async fn shutdown() {
    let terminate = async {
        if let Ok(mut signal) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            signal.recv().await;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate => {}
    }
    tracing::info!("shutting down");
}
