//! `rest-lite serve`: the jobs API over a cluster (FrameworkController) or over this
//! machine (the embedded default).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::ValueEnum;

use pai_backend::backend::Backend;
use pai_cluster::KubeBackend;
use pai_local::backend::LocalBackend;
use pai_local::task::Runtime;
use pai_local::{Assets, Settings};
use pai_server::auth::{Access, Caller, TokenTable, Tokens};
use pai_server::guard::Hosts;
use pai_server::{AppState, machine_token, metrics_router, router, tls};
use pai_translate::config::ClusterConfig;

/// How long open streams may delay the end of a server asked to stop.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
    /// Kubernetes when a cluster configuration is found, else this machine.
    Auto,
    /// A Kubernetes cluster with FrameworkController.
    Kube,
    /// This machine.
    Local,
}

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9186")]
    listen: std::net::SocketAddr,
    /// Where jobs run.
    #[arg(long, value_enum, default_value_t = BackendKind::Auto, env = "REST_LITE_BACKEND")]
    backend: BackendKind,
    /// Cluster config file (YAML); defaults apply without one.
    #[arg(long, short, env = "REST_LITE_CONFIG")]
    config: Option<PathBuf>,
    /// Bearer tokens (YAML: users with name, tokenSha256, admin), read again whenever
    /// the file changes. Without it the server accepts only this machine's token
    /// (<state dir>/token, made at the first start, readable by this user alone; the
    /// command line finds it there) and listens on loopback only.
    #[arg(long, env = "REST_LITE_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// A URL people and programs reach this server by (a DNS name behind a proxy or a
    /// Service, say); repeat or separate with commas. Requests naming another host are
    /// refused (DNS rebinding); IP addresses and localhost always work.
    #[arg(long, env = "REST_LITE_PUBLIC_URL", value_delimiter = ',')]
    public_url: Vec<String>,
    /// Serve HTTPS with this certificate chain (PEM), with --tls-key.
    #[arg(long, requires = "tls_key", env = "REST_LITE_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, requires = "tls_cert", env = "REST_LITE_TLS_KEY")]
    tls_key: Option<PathBuf>,
    /// Serve /metrics without a token on this address of its own (for Prometheus on an
    /// internal port); without it /metrics needs a token like the API.
    #[arg(long, env = "REST_LITE_METRICS_LISTEN")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// kubeconfig to use [default: in-cluster, $KUBECONFIG or ~/.kube/config].
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Namespace of the Frameworks (overrides the config's; in a cluster, the server's
    /// own namespace through the downward API).
    #[arg(long, short, env = "REST_LITE_NAMESPACE")]
    namespace: Option<String>,
    /// Largest request body, in bytes.
    #[arg(long, default_value_t = pai_server::DEFAULT_BODY_LIMIT)]
    max_body_bytes: usize,
    #[command(flatten)]
    local: LocalArgs,
}

/// Options of the embedded default.
#[derive(clap::Args, Debug, Clone)]
pub struct LocalArgs {
    /// State directory of jobs run on this machine [default: serve uses
    /// $XDG_STATE_HOME/rest-lite or ~/.local/state/rest-lite; run a new
    /// $TMPDIR/rest-lite-run-<random>, removed afterwards unless --keep].
    #[arg(long, env = "REST_LITE_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// A kube-runtime binary for the tasks [default: the runtime this binary carries].
    #[arg(long)]
    pub runtime: Option<PathBuf>,
    /// Directory with the runtime's prep/ and init/ scripts [default: the ones this
    /// binary carries, written to <state dir>/assets].
    #[arg(long)]
    pub assets: Option<PathBuf>,
    /// The most tasks this machine runs at once, and so the most one job may have; a job
    /// that does not fit beside the running ones waits, whole [default: 500 per CPU
    /// core, at most one per 8 MiB of memory].
    #[arg(long, env = "REST_LITE_MAX_TASKS", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tasks: Option<u32>,
    /// The ports tasks are given, as BEGIN-END [default: 10000-29999, below the
    /// NodePort range and the kernel's range for outgoing connections].
    #[arg(long, env = "REST_LITE_PORT_RANGE", value_parser = port_range)]
    pub port_range: Option<std::ops::RangeInclusive<u16>>,
    /// Let the embedded default listen beyond loopback. Every caller with a token then
    /// runs commands on this machine as this server's OS user.
    #[arg(long)]
    pub local_listen_anywhere: bool,
    /// How tasks run on this machine: in their images as Podman containers (`podman`) or
    /// Docker Engine's (`docker`, at `DOCKER_HOST` or /var/run/docker.sock), as processes
    /// of this machine in no image (`host`), or the first of Podman and Docker that
    /// answers, else the host (`auto`).
    #[arg(long, env = "REST_LITE_ENGINE", default_value = "auto", value_parser = ["auto", "podman", "docker", "host"])]
    pub engine: String,
    /// The OCI runtime the engine uses (`runc`, `crun`) [default: the engine's own].
    #[arg(long, env = "REST_LITE_ENGINE_RUNTIME")]
    pub engine_runtime: Option<String>,
}

/// The task runtime built statically by `build.rs`, for containers (empty when this
/// build has none).
static STATIC_RUNTIME: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kube-runtime"));

impl LocalArgs {
    /// The embedded default's settings; `outlive_server`: its containers outlive this
    /// process, and a restarted server follows them (`serve`), or end with it (`run`).
    /// `config`: its GPU section (the GPU types, and the machine's GPUs where the
    /// operator states them; else they are probed), the restarts' back-off and the
    /// attempts kept.
    pub fn settings(
        &self,
        state_dir: PathBuf,
        outlive_server: bool,
        config: &ClusterConfig,
        storages: Arc<pai_translate::storages::Registry>,
    ) -> Result<Settings> {
        let runtime = match &self.runtime {
            Some(path) => Runtime::binary(path),
            None => Runtime::embedded().context("finding this binary for the task runtime")?,
        };
        let assets = match &self.assets {
            Some(dir) => Assets::Dir(dir.clone()),
            None => Assets::Embedded,
        };
        Ok(Settings {
            state_dir,
            runtime,
            assets,
            default_grace: std::time::Duration::from_secs(30),
            conflict_delay: std::time::Duration::from_secs(5),
            max_tasks: self.max_tasks.unwrap_or_else(pai_local::default_max_tasks),
            ports: self.port_range.clone().unwrap_or(pai_local::DEFAULT_PORTS),
            containers: pai_local::ContainerSettings {
                choice: self.engine.parse().map_err(anyhow::Error::msg)?,
                oci_runtime: self.engine_runtime.clone(),
                // Containers need a static runtime: the one this binary carries (a
                // `--runtime` given by hand serves the host).
                runtime: (!STATIC_RUNTIME.is_empty()).then_some(STATIC_RUNTIME),
                outlive_server,
                on_host: super::invocation::this_on_host(),
            },
            gpus: std::sync::Arc::new(machine_gpus(&config.gpus)),
            storages,
            restart: config.restart_backoff.policy(),
            kept_attempts: config.kept_attempts,
            log_rotation: pai_local::log_rotation::Rotation {
                max_bytes: config.container_log_max_bytes,
                max_files: config.container_log_max_files,
            },
            retention: pai_local::retention::Retention {
                bounds: pai_backend::retention::Bounds::of(&config.retention),
                task_files_kept: std::time::Duration::from_secs(
                    config.retention.task_files_kept_sec,
                ),
            },
        })
    }
}

/// The machine's GPUs as the config states them, else as NVML or `nvidia-smi` find them;
/// said at start.
fn machine_gpus(config: &pai_translate::gpus::GpuConfig) -> pai_local::gpus::Gpus {
    use pai_local::gpus::Source;
    let (devices, source) = match &config.devices {
        Some(devices) => (devices.clone(), Source::Config),
        None => pai_local::gpus::probe(),
    };
    match &source {
        Source::None(why) => tracing::info!(
            "no GPU on this machine: jobs that ask for GPUs are refused here ({why})"
        ),
        found => tracing::info!(
            gpus = devices.len(),
            source = ?found,
            "{}",
            devices
                .iter()
                .map(|d| {
                    let mut line = format!("GPU {} {}", d.index, d.uuid);
                    if !d.model.is_empty() {
                        line.push_str(&format!(" {}", d.model));
                    }
                    if d.memory_mib > 0 {
                        line.push_str(&format!(" {} MiB", d.memory_mib));
                    }
                    line
                })
                .collect::<Vec<_>>()
                .join("; ")
        ),
    }
    pai_local::gpus::Gpus {
        devices,
        types: config.types.clone(),
    }
}

/// `BEGIN-END`: ports from 1024 to 65535, BEGIN ≤ END.
fn port_range(text: &str) -> std::result::Result<std::ops::RangeInclusive<u16>, String> {
    let (begin, end) = text
        .split_once('-')
        .ok_or_else(|| format!("{text:?} is not BEGIN-END (10000-29999)"))?;
    let port = |p: &str| {
        p.trim()
            .parse::<u16>()
            .ok()
            .filter(|p| *p >= 1024)
            .ok_or_else(|| format!("{p:?} is not a port from 1024 to 65535"))
    };
    let (begin, end) = (port(begin)?, port(end)?);
    if begin > end {
        return Err(format!("{begin} is after {end}"));
    }
    Ok(begin..=end)
}

pub fn load_config(path: Option<&Path>) -> Result<ClusterConfig> {
    Ok(match path {
        Some(path) => ClusterConfig::load(path)?,
        None => ClusterConfig::default(),
    })
}

/// This user's name, for the admin the machine's token stands for.
pub fn unix_user() -> String {
    nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map(|u| u.name)
        .or_else(|| std::env::var("USER").ok())
        .filter(|name| pai_translate::spec::UserName::parse(name).is_ok())
        .unwrap_or_else(|| "default".to_string())
}

/// This machine's token in `state_dir` (made when missing), admitting this user as the
/// admin of the server's jobs.
pub fn machine_access(state_dir: &Path) -> Result<(Access, String)> {
    let token = machine_token::load_or_create(state_dir)
        .context("keeping this machine's token in the state directory")?;
    let caller = Caller {
        user: unix_user(),
        admin: true,
        groups: Vec::new(),
    };
    let access = Access::Tokens(TokenTable::fixed(Tokens::single(&token, caller)));
    Ok((access, token))
}

// Long: start-up in order (config, hosts, TLS, tokens, backend, listeners, shutdown), as an
// operator reads it.
pub fn serve(args: ServeArgs) -> Result<()> {
    let mut config = load_config(args.config.as_deref())?;
    // As the file says it, before the command line's flags: a reread compares like with
    // like.
    let as_read = config.clone();
    if let Some(namespace) = &args.namespace {
        config.namespace = namespace.clone();
        config.check()?;
    }
    let hosts = Hosts::from_urls(&args.public_url)?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(tls::server_config(cert, key)?),
        _ => None,
    };
    if args.token_file.is_none() && !args.listen.ip().is_loopback() {
        anyhow::bail!(
            "without --token-file the server only listens on loopback, not {}: give it a token file (rest-lite token USER --file F) or listen on 127.0.0.1",
            args.listen
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let token_hint = match &args.token_file {
            // Not the file's path: this page is shown to anyone who reaches the server.
            Some(_) => "Ask this server's operator for a token: they make one for you with rest-lite token YOUR_NAME --file TOKEN_FILE, and the server reads its token file again by itself. The same token works with rest-lite --token.".to_string(),
            None => format!(
                "This server made its own token: it is in the file {} on the machine the server runs on, readable by the server's user alone (the rest-lite command of that user reads it by itself). The sign-in link rest-lite serve printed carries it.",
                machine_token::path(
                    &args
                        .local
                        .state_dir
                        .clone()
                        .unwrap_or_else(pai_local::default_state_dir)
                )
                .display()
            ),
        };
        let (access, machine) = match &args.token_file {
            Some(path) => (Access::Tokens(TokenTable::watch_file(path)?), None),
            None => {
                let state_dir = args
                    .local
                    .state_dir
                    .clone()
                    .unwrap_or_else(pai_local::default_state_dir);
                let (access, token) = machine_access(&state_dir)?;
                (access, Some((token, machine_token::path(&state_dir))))
            }
        };
        let storages = Arc::new(pai_translate::storages::Registry::new(
            config.storages.clone(),
        ));
        let (backend, kube_client) = backend(
            args.listen,
            args.backend,
            args.kubeconfig.as_deref(),
            &config,
            &args.local,
            storages.clone(),
        )
        .await?;
        let describe = backend.describe();
        let started = config.clone();
        let namespace = config.namespace.clone();
        let state = AppState {
            body_limit: args.max_body_bytes,
            hosts: Arc::new(hosts),
            tls: tls.is_some(),
            metrics_elsewhere: args.metrics_listen.is_some(),
            token_hint: token_hint.into(),
            storages,
            ..AppState::new(backend, config, access)
        };
        if let Some(path) = &args.config {
            super::config_reload::watch(
                path.clone(),
                as_read,
                started,
                super::config_reload::Running {
                    storages: Arc::downgrade(&state.storages),
                    transformer: Arc::downgrade(&state.transformer),
                    backend: Arc::downgrade(&state.backend),
                },
                // In a pod (the Deployment names it): the ConfigMap the file comes from.
                kube_client
                    .zip(std::env::var("POD_NAME").ok().filter(|p| !p.is_empty()))
                    .map(|(client, pod)| super::config_reload::Mounted {
                        client,
                        namespace: namespace.clone(),
                        pod,
                    }),
            );
        }
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("listening on {}", args.listen))?;
        let bound = listener.local_addr().context("reading the bound address")?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{bound}");
        if let Some(state_dir) = machine.as_ref().and_then(|(_, path)| path.parent()) {
            // Where the command line of this user sends this machine's token, and nowhere else.
            machine_token::record_serving(state_dir, &url)
                .context("recording where this server serves, beside its token")?;
        }
        if let Some(metrics) = args.metrics_listen {
            let metrics_listener = tokio::net::TcpListener::bind(metrics)
                .await
                .with_context(|| format!("listening for /metrics on {metrics}"))?;
            let app = metrics_router(state.clone());
            tracing::info!(address = %metrics, "serving /metrics without a token");
            tokio::spawn(async move { axum::serve(metrics_listener, app).await });
        }
        let stopped = shutdown();
        tracing::info!(url = %url, backend = %describe, "rest-lite serving");
        if let Some((token, path)) = &machine {
            // As Jupyter does: the one link that signs this user's browser in. Only this
            // user reads this output and the token file.
            tracing::info!(
                token_file = %path.display(),
                "pages: {url}{}?token={token} (the command line of this user finds the token itself)",
                pai_api::routes::UI_SIGN_IN.template()
            );
        }
        // Requests in flight finish; open streams (watches, followed logs) get a few
        // seconds, then the server leaves anyway.
        let (begun, shutting_down) = tokio::sync::oneshot::channel();
        let stop = async move {
            stopped.await;
            let _ = begun.send(());
        };
        let app = router(state);
        let serving = async move {
            match tls {
                Some(config) => {
                    tls::serve(listener, config, app, stop).await;
                    Ok(())
                }
                None => axum::serve(listener, app)
                    .with_graceful_shutdown(stop)
                    .await
                    .context("serving"),
            }
        };
        let result = tokio::select! {
            result = serving => result,
            () = async {
                if shutting_down.await.is_err() {
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep(SHUTDOWN_GRACE).await;
            } => {
                tracing::warn!(grace_s = SHUTDOWN_GRACE.as_secs(), "open streams outlived the shutdown grace; leaving");
                Ok(())
            }
        };
        result
    })
}

async fn backend(
    listen: std::net::SocketAddr,
    kind: BackendKind,
    kubeconfig: Option<&Path>,
    config: &ClusterConfig,
    local: &LocalArgs,
    storages: Arc<pai_translate::storages::Registry>,
) -> Result<(Arc<dyn Backend>, Option<kube::Client>)> {
    let kube = match kind {
        BackendKind::Local => None,
        BackendKind::Kube => Some(kube_config(kubeconfig).await?),
        BackendKind::Auto if kubeconfig.is_some() => Some(kube_config(kubeconfig).await?),
        BackendKind::Auto => match kube::Config::infer().await {
            Ok(found) => Some(found),
            Err(e) => {
                // Every machine without a cluster gets here: one short line, the whole
                // search (in-cluster, kubeconfig) at debug level.
                tracing::info!(
                    "no Kubernetes configuration (in-cluster or kubeconfig) found; jobs run on this machine"
                );
                tracing::debug!(reason = %e, "where the Kubernetes configuration was looked for");
                None
            }
        },
    };
    Ok(match kube {
        Some(kube_config) => {
            let address = kube_config.cluster_url.to_string();
            let client =
                kube::Client::try_from(kube_config).context("building the Kubernetes client")?;
            // The backend starts its controllers itself: the copy's watch, why waiting
            // jobs wait, kept logs, peer tables, attempt history, Events, dependencies.
            let settings = pai_cluster::backend::Settings {
                namespace: config.namespace.clone(),
                address,
                engine: config.gang.engine,
                kept_logs: pai_cluster::log_keeper::Budget {
                    task_bytes: config.kept_log_bytes,
                    job_bytes: config.kept_log_bytes_per_job,
                    attempts: config.kept_attempts,
                },
                instance: pai_cluster::events::instance_name(),
                restart: config.restart_backoff.policy(),
                retention: pai_backend::retention::Bounds::of(&config.retention),
                history: match config.history.connection()? {
                    Some(connection) => Some((
                        std::sync::Arc::new(history(&connection, &config.namespace).await?),
                        config.history.framework_kept(),
                    )),
                    None => None,
                },
            };
            (KubeBackend::run(client.clone(), &settings), Some(client))
        }
        None => {
            if !listen.ip().is_loopback() && !local.local_listen_anywhere {
                anyhow::bail!(
                    "jobs run on this machine, as this server's user ({}): rest-lite listens on loopback only for them, not on {listen}; listen on 127.0.0.1, or accept that every caller with a token runs commands as that user (--local-listen-anywhere)",
                    std::env::var("USER").unwrap_or_else(|_| "its user".to_string())
                );
            }
            let state_dir = local
                .state_dir
                .clone()
                .unwrap_or_else(pai_local::default_state_dir);
            let backend =
                LocalBackend::open(local.settings(state_dir.clone(), true, config, storages)?)
                    .await
                    .with_context(|| {
                        format!("opening the state directory {}", state_dir.display())
                    })?;
            (backend, None)
        }
    })
}

/// The job history in the database `connection` names, connected to once: a database
/// that refuses this server as configured (TLS, its certificate, the credentials) stops
/// the start with the reason and the way out; one not reachable yet is tried again
/// while the server runs.
async fn history(connection: &str, namespace: &str) -> Result<pai_cluster::archive::Archive> {
    use pai_cluster::archive::{Archive, ArchiveError};
    let archive = Archive::new(connection, namespace).context("history.database")?;
    match archive.connect().await {
        Ok(()) => {
            tracing::info!(history = %archive.place(), tls = %archive.checks(), "job history connected");
        }
        Err(e @ ArchiveError::Refused { .. }) => {
            return Err(e).context("history.database: change the connection string");
        }
        Err(e) => {
            tracing::warn!(error = %e, "the job history cannot be reached yet; trying again while serving");
        }
    }
    Ok(archive)
}

/// `--kubeconfig`, else in-cluster, `$KUBECONFIG` or `~/.kube/config`.
async fn kube_config(kubeconfig: Option<&Path>) -> Result<kube::Config> {
    match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
                .with_context(|| format!("using kubeconfig {}", path.display()))
        }
        None => kube::Config::infer().await.context(
            "no Kubernetes configuration found (in-cluster, $KUBECONFIG, ~/.kube/config or --kubeconfig); \
             use --backend local to run jobs on this machine",
        ),
    }
}

/// Completes at SIGINT or SIGTERM. The handlers are in place when this returns, not at
/// the first poll: a SIGTERM that comes as soon as the server says it serves is a stop,
/// not the default death.
pub fn shutdown() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt()).ok();
    let mut terminate = signal(SignalKind::terminate()).ok();
    async move {
        tokio::select! {
            _ = received(interrupt.as_mut()) => {}
            _ = received(terminate.as_mut()) => {}
        }
        tracing::info!("shutting down");
    }
}

/// The next delivery of `signal`; never where it could not be handled.
async fn received(signal: Option<&mut tokio::signal::unix::Signal>) {
    match signal {
        Some(signal) => {
            signal.recv().await;
        }
        None => std::future::pending().await,
    }
}
