//! `rest-lite run SPEC`: the embedded default in one command. It serves the jobs API on
//! a loopback port for the job's lifetime (other commands can use it meanwhile), submits
//! the spec over it, prints every task's output as the task writes it, and exits with
//! the job's outcome ([`super::exit_status`]). Ctrl-C stops the job.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};

use pai_client::Client;
use pai_local::backend::LocalBackend;
use pai_server::{AppState, router};
use pai_translate::spec::{JobSpec, UserName};

use super::serve::{LocalArgs, load_config, machine_access};

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Job spec file (JSON or YAML); `-` reads standard input.
    spec: PathBuf,
    /// The submitting user [default: this Unix user, as `serve` names it].
    #[arg(long, short)]
    user: Option<String>,
    /// Cluster config file (YAML): the same Framework as on the cluster is run here.
    #[arg(long, short, env = "REST_LITE_CONFIG")]
    config: Option<PathBuf>,
    /// Keep the state directory (logs, task files) after the job [default: kept only
    /// with --state-dir].
    #[arg(long)]
    keep: bool,
    /// Print the runtime's lines too (its steps, the barrier, the daemons it started),
    /// not only the user commands' output and the runtime's warnings and errors.
    #[arg(long, short)]
    verbose: bool,
    #[command(flatten)]
    local: LocalArgs,
}

impl RunArgs {
    /// The spec file it names.
    pub fn spec_path(&self) -> &std::path::Path {
        &self.spec
    }
}

pub fn run(args: RunArgs) -> Result<ExitCode> {
    let text = super::spec_file::read(&args.spec)?;
    let format = super::spec_file::format_of(&args.spec, &text);
    let spec = JobSpec::parse(&text, format)?;
    let job = spec.name().as_str().to_string();
    let user_name = args.user.clone().unwrap_or_else(super::serve::unix_user);
    let user = UserName::parse(&user_name)
        .map_err(|rule| anyhow::anyhow!("user name {user_name:?}: {rule}"))?;
    let config = load_config(args.config.as_deref())?;
    // What this machine cannot run is refused before anything starts or is said.
    pai_translate::place::check(
        &spec,
        &user,
        pai_translate::place::Place::ThisMachine {
            default_fs_uri: &config.default_fs_uri,
        },
    )?;
    let (state_dir, keep) = match &args.local.state_dir {
        Some(dir) => (dir.clone(), true),
        None => (fresh_private_dir()?, args.keep),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let outcome = runtime.block_on(async {
        let storages = Arc::new(pai_translate::storages::Registry::new(
            config.storages.clone(),
        ));
        let backend = LocalBackend::open(args.local.settings(
            state_dir.clone(),
            false,
            &config,
            storages.clone(),
        )?)
            .await
            .with_context(|| format!("opening the state directory {}", state_dir.display()))?;
        let (isolation, in_containers) = (backend.isolation(), backend.in_containers());
        // Closed like `serve`: only this user's token (in the run's private directory).
        let (access, token) = machine_access(&state_dir)?;
        let backend: Arc<dyn pai_backend::Backend> = backend;
        let state = AppState {
            storages,
            ..AppState::new(backend, config, access)
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("listening on loopback")?;
        let url = format!("http://{}", listener.local_addr()?);
        tokio::spawn(async move { axum::serve(listener, router(state)).await });
        // The commands printed below find the token in the state directory, sent only
        // to the server recorded there: this one.
        pai_server::machine_token::record_serving(&state_dir, &url)
            .context("recording where this run serves in its state directory")?;
        let client = Client::new(&url, Some(token));
        let submitted = client.submit(&user_name, &text, format).await?;
        // Said once the job is there, so that the command it prints finds it.
        tell!(
            "rest-lite: running {job} on this machine; API at {url}, state in {} (other commands meanwhile: {})",
            state_dir.display(),
            meanwhile(&url, &state_dir, &job)
        );
        // On the host, the job's warning says it (and why), once.
        in_containers.then(|| tell!("rest-lite: {isolation}"));
        super::client::warn(&submitted);
        super::follow::follow(
            &client,
            &user_name,
            &job,
            args.verbose,
            super::follow::OnInterrupt::Stop,
        )
        .await
    });
    drop(runtime);
    if !keep {
        let _ = std::fs::remove_dir_all(&state_dir);
    }
    outcome
}

/// The command that shows the job from another terminal meanwhile, as it is typed there.
fn meanwhile(url: &str, state_dir: &std::path::Path, job: &str) -> String {
    format!(
        "REST_LITE_SERVER={url} REST_LITE_STATE_DIR={} {}",
        super::human::shell_word(&state_dir.to_string_lossy()),
        super::invocation::command(&["status", job]),
    )
}

/// A new directory for one run's state, made here and now (never one that existed:
/// someone else could have made it), private to this user (0700).
fn fresh_private_dir() -> Result<std::path::PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let mut random = [0u8; 8];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut random)
        .map_err(|_| anyhow::anyhow!("no randomness for the run's directory name"))?;
    let suffix: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let dir = std::env::temp_dir().join(format!("rest-lite-run-{suffix}"));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("creating the run's state directory {}", dir.display()))?;
    Ok(dir)
}
