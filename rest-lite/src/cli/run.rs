//! `rest-lite run SPEC`: the embedded default in one command. It serves the jobs API on
//! a loopback port for the job's lifetime (other commands can use it meanwhile), submits
//! the spec over it, prints every task's output as the task writes it, and exits with
//! the job's outcome: 0 when it succeeded, its exit code (or 1) otherwise. Ctrl-C stops
//! the job.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use futures::StreamExt;

use rest_lite::client::{Client, ClientError};
use rest_lite::local::LocalBackend;
use rest_lite::server::{AppState, router};
use rest_lite::spec::{JobSpec, UserName};
use rest_lite::transform::Transformer;

use super::serve::{LocalArgs, load_config};

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Job spec file (JSON or YAML); `-` reads standard input.
    spec: PathBuf,
    /// The submitting user [default: $USER, else "default"].
    #[arg(long, short)]
    user: Option<String>,
    /// Cluster config file (YAML): the same Framework as on the cluster is run here.
    #[arg(long, short, env = "REST_LITE_CONFIG")]
    config: Option<PathBuf>,
    /// Keep the state directory (logs, task files) after the job [default: kept only
    /// with --state-dir].
    #[arg(long)]
    keep: bool,
    #[command(flatten)]
    local: LocalArgs,
}

const FINAL_STATES: [&str; 3] = ["SUCCEEDED", "FAILED", "STOPPED"];

pub fn run(args: RunArgs) -> Result<ExitCode> {
    let text = super::read_spec(&args.spec)?;
    let spec = JobSpec::parse(&text, super::format_of(&args.spec, &text))?;
    let job = spec.name().as_str().to_string();
    let user_name = args
        .user
        .clone()
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "default".to_string());
    UserName::parse(&user_name)
        .map_err(|rule| anyhow::anyhow!("user name {user_name:?}: {rule}"))?;
    let config = load_config(args.config.as_deref())?;
    let (state_dir, keep) = match &args.local.state_dir {
        Some(dir) => (dir.clone(), true),
        None => (
            std::env::temp_dir().join(format!("rest-lite-run-{}", std::process::id())),
            args.keep,
        ),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let outcome = runtime.block_on(async {
        let backend = LocalBackend::open(args.local.settings(state_dir.clone())?)
            .await
            .with_context(|| format!("opening the state directory {}", state_dir.display()))?;
        let state = AppState {
            backend: Arc::new(backend),
            transformer: Arc::new(Transformer::new(config)),
            body_limit: rest_lite::server::DEFAULT_BODY_LIMIT,
            tokens: None,
            metrics: Default::default(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("listening on loopback")?;
        let url = format!("http://{}", listener.local_addr()?);
        tokio::spawn(async move { axum::serve(listener, router(state)).await });
        eprintln!(
            "rest-lite: running {job} on this machine; API at {url}, state in {}",
            state_dir.display()
        );
        follow_job(&Client::new(&url, None), &user_name, &job, &text).await
    });
    drop(runtime);
    if !keep {
        let _ = std::fs::remove_dir_all(&state_dir);
    }
    outcome
}

async fn follow_job(client: &Client, user: &str, job: &str, spec: &str) -> Result<ExitCode> {
    client.submit(user, spec).await?;
    let view = client.job(user, job).await?;
    let mut followers = Vec::new();
    for (role, detail) in view["taskRoles"].as_object().into_iter().flatten() {
        let tasks = detail["taskStatuses"].as_array().map_or(0, Vec::len);
        for index in 0..tasks as u32 {
            followers.push(tokio::spawn(print_task(
                client.clone(),
                user.to_string(),
                job.to_string(),
                role.clone(),
                index,
            )));
        }
    }
    let mut interrupted = false;
    let mut ctrl_c = Box::pin(tokio::signal::ctrl_c());
    let mut changes = client.watch(user, job).await?;
    let mut last = None;
    loop {
        tokio::select! {
            _ = &mut ctrl_c, if !interrupted => {
                interrupted = true;
                eprintln!("rest-lite: stopping {job}");
                client.stop(user, job).await?;
            }
            change = changes.next() => match change {
                Some(view) => last = Some(view?),
                None => break,
            }
        }
    }
    let view = last.ok_or_else(|| anyhow::anyhow!("job {job} was deleted while it ran"))?;
    // The followers end with their tasks' logs.
    let _ =
        tokio::time::timeout(Duration::from_secs(5), futures::future::join_all(followers)).await;
    let status = &view["jobStatus"];
    let state = status["state"].as_str().unwrap_or_default();
    eprintln!(
        "rest-lite: job {job} {state} (exit code {}, {} retries){}",
        status["appExitCode"],
        status["retries"],
        status["appExitDiagnostics"]
            .as_str()
            .map(|d| format!(": {d}"))
            .unwrap_or_default()
    );
    Ok(match state {
        "SUCCEEDED" => ExitCode::SUCCESS,
        _ if interrupted => ExitCode::from(130),
        _ => ExitCode::from(
            status["appExitCode"]
                .as_i64()
                .and_then(|c| u8::try_from(c).ok())
                .filter(|&c| c != 0)
                .unwrap_or(1),
        ),
    })
}

/// Prints one task's output, line by line with its name in front, attempt after
/// attempt.
async fn print_task(client: Client, user: String, job: String, role: String, index: u32) {
    let mut printed_attempt: Option<i64> = None;
    loop {
        let Ok(view) = client.job(&user, &job).await else {
            return;
        };
        let attempt = view["jobStatus"]["retries"].as_i64().unwrap_or(0);
        let done = FINAL_STATES.contains(&view["jobStatus"]["state"].as_str().unwrap_or_default());
        if printed_attempt != Some(attempt) {
            match client.logs(&user, &job, &role, index, true).await {
                Ok(stream) => {
                    printed_attempt = Some(attempt);
                    print_lines(stream, &format!("[{role}-{index}] ")).await;
                    continue;
                }
                Err(ClientError::Api { status: 404, .. }) if !done => {}
                Err(_) => return,
            }
        } else if done {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn print_lines(
    mut stream: futures::stream::BoxStream<'static, Result<axum::body::Bytes, ClientError>>,
    prefix: &str,
) {
    let mut pending: Vec<u8> = Vec::new();
    let emit = |line: &[u8]| {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(prefix.as_bytes());
        let _ = out.write_all(line);
        let _ = out.write_all(b"\n");
    };
    while let Some(Ok(chunk)) = stream.next().await {
        pending.extend_from_slice(&chunk);
        while let Some(end) = pending.iter().position(|&b| b == b'\n') {
            emit(&pending[..end]);
            pending.drain(..=end);
        }
    }
    if !pending.is_empty() {
        emit(&pending);
    }
}
