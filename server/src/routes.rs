//! The jobs API handlers: extract (`extract`), call the service (`jobs`), map the
//! result. Every error is an [`ApiError`]; the documented responses are shared sets.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::Deserialize;

use super::auth::Caller;
use super::error::{ApiError, ErrorBody, ErrorCode};
use super::extract::{ApiJson, ApiPath, ApiQuery, Job, JobPath, Owner, SpecBody, UserPath};
use super::jobs::{self, Submitted};
use super::ssh;
use crate::state::AppState;
use pai_api::jobs::{Execution, JobSummary, Message};
use pai_api::ssh::SshInfo;
use pai_api::status::JobState;
use pai_api::status::JobView;
use pai_backend::backend::{BackendError, LogPart, LogRequest};
use pai_translate::spec::SpecFormat;
use pai_translate::spec::schema::JobSpecDocument;

type ApiResult = Result<Response, ApiError>;

fn accepted(message: String) -> Response {
    (StatusCode::ACCEPTED, Json(Message::new(message))).into_response()
}

/// The errors of a route that only needs a token.
#[derive(utoipa::IntoResponses)]
pub enum TokenErrors {
    /// No or unknown bearer token.
    #[response(status = 401)]
    Unauthorized(#[to_schema] ErrorBody),
}

/// The errors of a route that lists jobs.
#[derive(utoipa::IntoResponses)]
pub enum ListErrors {
    /// A malformed query, or a user name that breaks `^[A-Za-z0-9\-._~]+$`: the message
    /// names the parameter and the rule.
    #[response(status = 400)]
    BadRequest(#[to_schema] ErrorBody),
    /// No or unknown bearer token.
    #[response(status = 401)]
    Unauthorized(#[to_schema] ErrorBody),
    /// The cluster cannot be reached.
    #[response(status = 503)]
    Unavailable(#[to_schema] ErrorBody),
}

/// The errors of a route of one job.
#[derive(utoipa::IntoResponses)]
pub enum JobErrors {
    /// A malformed path or query, or a user name that breaks `^[A-Za-z0-9\-._~]+$`: the
    /// message names the parameter and the rule.
    #[response(status = 400)]
    BadRequest(#[to_schema] ErrorBody),
    /// No or unknown bearer token.
    #[response(status = 401)]
    Unauthorized(#[to_schema] ErrorBody),
    /// No such job, or not the caller's (`NoJobError`).
    #[response(status = 404)]
    NotFound(#[to_schema] ErrorBody),
    /// The cluster cannot be reached.
    #[response(status = 503)]
    Unavailable(#[to_schema] ErrorBody),
}

/// The errors of a submission.
#[derive(utoipa::IntoResponses)]
pub enum SubmitErrors {
    /// A bad spec or parameter: the message names every broken rule with its field.
    #[response(status = 400)]
    BadRequest(#[to_schema] ErrorBody),
    /// No or unknown bearer token.
    #[response(status = 401)]
    Unauthorized(#[to_schema] ErrorBody),
    /// The caller may not act for this user.
    #[response(status = 403)]
    Forbidden(#[to_schema] ErrorBody),
    /// A job of that name exists (`ConflictJobError`).
    #[response(status = 409)]
    Conflict(#[to_schema] ErrorBody),
    /// The body is larger than the server's limit.
    #[response(status = 413)]
    TooLarge(#[to_schema] ErrorBody),
    /// The body is not JSON or YAML.
    #[response(status = 415)]
    UnsupportedType(#[to_schema] ErrorBody),
    /// The cluster cannot be reached.
    #[response(status = 503)]
    Unavailable(#[to_schema] ErrorBody),
}

#[derive(Deserialize, Default, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct SubmitQuery {
    /// Validate and transform only: answer with the Framework, create nothing.
    #[serde(default)]
    dry_run: bool,
}

fn submitted(result: Submitted) -> Response {
    match result {
        Submitted::Created { job, warnings } => (
            StatusCode::ACCEPTED,
            Json(Message {
                message: format!("job {job} submitted"),
                warnings,
            }),
        )
            .into_response(),
        Submitted::DryRun { framework, .. } => Json(framework).into_response(),
    }
}

/// `POST /api/v1/user/{user}/jobs`: submits a job; its name comes from the spec.
#[utoipa::path(
    post,
    path = pai_api::routes::USER_JOBS.template(),
    tag = "jobs",
    params(UserPath, SubmitQuery),
    request_body(description = "the job spec, JSON or YAML (contracts §1); what a schema cannot say is checked by the server, which answers 400 naming every broken rule", content((JobSpecDocument = "application/json"), (JobSpecDocument = "application/yaml"))),
    responses(
        (status = 202, description = "accepted", body = Message),
        (status = 200, description = "dry run: the Framework that would be created", body = Object),
        SubmitErrors
    )
)]
pub async fn submit(
    State(state): State<AppState>,
    owner: Owner,
    ApiQuery(query): ApiQuery<SubmitQuery>,
    body: SpecBody,
) -> ApiResult {
    let result = jobs::submit(
        &state,
        &owner.caller,
        &owner.user,
        None,
        query.dry_run,
        &body,
    );
    Ok(submitted(result.await?))
}

/// `PUT /api/v1/user/{user}/jobs/{job}`: submits a job named in the path too, which
/// must be the spec's name.
#[utoipa::path(
    put,
    path = pai_api::routes::JOB.template(),
    tag = "jobs",
    params(JobPath, SubmitQuery),
    request_body(description = "the job spec; its jobName must be the path's", content((JobSpecDocument = "application/json"), (JobSpecDocument = "application/yaml"))),
    responses(
        (status = 202, description = "accepted", body = Message),
        (status = 200, description = "dry run: the Framework that would be created", body = Object),
        SubmitErrors
    )
)]
pub async fn submit_named(
    State(state): State<AppState>,
    owner: Owner,
    ApiPath(JobPath { job, .. }): ApiPath<JobPath>,
    ApiQuery(query): ApiQuery<SubmitQuery>,
    body: SpecBody,
) -> ApiResult {
    let result = jobs::submit(
        &state,
        &owner.caller,
        &owner.user,
        Some(&job),
        query.dry_run,
        &body,
    );
    Ok(submitted(result.await?))
}

/// Longest watch a client may ask for with `timeoutSeconds`.
const MAX_WATCH_SECONDS: u32 = 86_400;
/// How long a followed log streams at most; a task that still runs then is followed
/// again by asking again.
pub const MAX_FOLLOW: Duration = Duration::from_secs(86_400);

#[derive(Deserialize, Default, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct GetQuery {
    /// Stream the job's status on every change until it completes.
    #[serde(default)]
    watch: bool,
    /// With `watch`: end the stream after this many seconds even if the job has not
    /// completed (as Kubernetes' watches do; 1800 when not given); watch again to go on.
    #[param(minimum = 1, maximum = 86400)]
    timeout_seconds: Option<u32>,
}

/// `GET /api/v1/user/{user}/jobs/{job}`: the job as it is now, or its changes as they
/// come with `watch=true`.
#[utoipa::path(
    get,
    path = pai_api::routes::JOB.template(),
    tag = "jobs",
    params(JobPath, GetQuery),
    responses(
        (status = 200, description = "the job's status; with watch=true one JSON line per change (application/x-ndjson), ending after a final state or the deletion", content((JobView = "application/json"), (JobView = "application/x-ndjson"))),
        JobErrors
    )
)]
pub async fn get_job(
    State(state): State<AppState>,
    job: Job,
    ApiQuery(query): ApiQuery<GetQuery>,
) -> ApiResult {
    if let Some(seconds) = query.timeout_seconds
        && !(1..=MAX_WATCH_SECONDS).contains(&seconds)
    {
        return Err(ApiError::bad_request(format!(
            "timeoutSeconds: {seconds} is not from 1 to {MAX_WATCH_SECONDS}"
        )));
    }
    if !query.watch {
        let made = state.views.at(&job.framework, &job.url());
        return Ok((
            [(header::CONTENT_TYPE, "application/json")],
            made.json.clone(),
        )
            .into_response());
    }
    let changes = state.backend.watch(job.name()).await?;
    let lines = jobs::watch_lines(changes, state.views.clone(), job.url());
    let limit = query
        .timeout_seconds
        .map_or(state.watch_limit, |s| Duration::from_secs(u64::from(s)));
    let body = axum::body::Body::from_stream(lines.take_until(tokio::time::sleep(limit)));
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response())
}

/// `GET …/config`: the spec exactly as submitted.
#[utoipa::path(
    get,
    path = pai_api::routes::JOB_CONFIG.template(),
    tag = "jobs",
    params(JobPath),
    responses(
        (status = 200, description = "the spec exactly as submitted, in its media type", content((JobSpecDocument = "application/json"), (JobSpecDocument = "application/yaml"))),
        JobErrors
    )
)]
pub async fn get_config(job: Job) -> ApiResult {
    let (text, format) = job.framework.spec_text().unwrap_or(("", SpecFormat::Json));
    Ok((
        [(header::CONTENT_TYPE, format.media_type())],
        text.to_string(),
    )
        .into_response())
}

/// `GET …/ssh`: the tasks whose sshd answers now, and why each other task cannot be
/// logged in to (404 when no task can).
#[utoipa::path(
    get,
    path = pai_api::routes::JOB_SSH.template(),
    tag = "jobs",
    params(JobPath),
    responses(
        (status = 200, description = "the tasks one can log in to, and the others with the reason", body = SshInfo),
        JobErrors
    )
)]
pub async fn get_ssh(State(state): State<AppState>, job: Job) -> ApiResult {
    Ok(Json(ssh::ssh_info(&state, &job).await?).into_response())
}

/// `GET …/ssh/key`: the private half of the job's key pair (OpenSSH format), which
/// every task of the job accepts; for the job's owner and operators only.
#[utoipa::path(
    get,
    path = pai_api::routes::JOB_SSH_KEY.template(),
    tag = "jobs",
    params(JobPath),
    responses(
        (status = 200, description = "the job's private key", content_type = "application/x-pem-file", body = String),
        JobErrors
    )
)]
pub async fn get_ssh_key(State(state): State<AppState>, job: Job) -> ApiResult {
    let key = ssh::private_key(&state, &job).await?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-pem-file"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        key,
    )
        .into_response())
}

/// The errors of a change of a job (its execution type, its tags) beside a job route's.
#[derive(utoipa::IntoResponses)]
pub enum ChangeErrors {
    /// The change conflicts with the job (`ConflictJobError`): a job that completed or is
    /// stopping cannot be started again; a tag change kept meeting other changes.
    #[response(status = 409)]
    Conflict(#[to_schema] ErrorBody),
    /// The body is larger than the server's limit.
    #[response(status = 413)]
    TooLarge(#[to_schema] ErrorBody),
    /// The body is not application/json.
    #[response(status = 415)]
    UnsupportedType(#[to_schema] ErrorBody),
}

/// The body of `PUT …/executionType`.
#[derive(Deserialize, utoipa::ToSchema)]
pub struct ExecutionBody {
    /// `START` or `STOP`.
    value: Execution,
}

/// `PUT …/executionType`: stops the job, or keeps it running:
/// `{"value": "START" | "STOP"}`.
#[utoipa::path(
    put,
    path = pai_api::routes::JOB_EXECUTION.template(),
    tag = "jobs",
    params(JobPath),
    request_body = ExecutionBody,
    responses(
        (status = 202, description = "accepted", body = Message),
        ChangeErrors,
        JobErrors
    )
)]
pub async fn set_execution(
    State(state): State<AppState>,
    job: Job,
    ApiJson(body): ApiJson<ExecutionBody>,
) -> ApiResult {
    let message = execute(&state, &job, body).await?;
    Ok((StatusCode::ACCEPTED, Json(message)).into_response())
}

/// Starts or stops `job` as `body` asks (v1's and v2's route alike).
pub async fn execute(
    state: &AppState,
    job: &Job,
    body: ExecutionBody,
) -> Result<Message, ApiError> {
    jobs::set_execution(state, job, body.value).await?;
    let doing = match body.value {
        Execution::Start => "starting",
        Execution::Stop => "stopping",
    };
    Ok(Message::new(format!("job {} is {doing}", job.job)))
}

/// `DELETE /api/v1/user/{user}/jobs/{job}`: deletes the job: its Framework and, with
/// it, its pods.
#[utoipa::path(
    delete,
    path = pai_api::routes::JOB.template(),
    tag = "jobs",
    params(JobPath),
    responses(
        (status = 202, description = "the job and its tasks are being removed", body = Message),
        JobErrors
    )
)]
pub async fn delete_job(State(state): State<AppState>, job: Job) -> ApiResult {
    jobs::delete(&state, &job).await?;
    Ok(accepted(format!("job {} is being deleted", job.job)))
}

/// `GET /api/v1/user/{user}/jobs`.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// Only jobs in this state.
    state: Option<JobState>,
    /// At most this many jobs (1 to 1000); the `Link` header (`rel="next"`) then names
    /// the next page. All of them without it.
    limit: Option<usize>,
    /// Where the previous page ended: the token its `Link` header gave (empty: the
    /// first page).
    #[serde(rename = "continue")]
    #[param(rename = "continue")]
    continue_: Option<String>,
}

impl PageQuery {
    fn filter(self) -> jobs::ListFilter {
        jobs::ListFilter {
            state: self.state,
            limit: self.limit,
            after: self.continue_,
        }
    }
}

/// A page of jobs as JSON, with the next page's address in a `Link` header (RFC 8288).
fn page_of(path: &str, query: &[(&str, Option<String>)], page: jobs::Page) -> Response {
    let mut response = Json(page.jobs).into_response();
    if let Some(next) = page.next {
        let mut pairs: Vec<String> = query
            .iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", encode(v))))
            .collect();
        pairs.push(format!("continue={}", encode(&next)));
        let link = format!("<{path}?{}>; rel=\"next\"", pairs.join("&"));
        if let Ok(value) = header::HeaderValue::from_str(&link) {
            response.headers_mut().insert(header::LINK, value);
        }
    }
    response
}

/// `value` as a URL query's value: unreserved bytes as they are, the rest `%XX`.
pub(crate) fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `GET /api/v1/user/{user}/jobs`: the user's jobs, newest first, filtered by state and
/// paged with `limit`.
#[utoipa::path(
    get,
    path = pai_api::routes::USER_JOBS.template(),
    tag = "jobs",
    params(UserPath, PageQuery),
    responses(
        (status = 200, description = "the user's jobs, newest first; with `limit`, a `Link` header names the next page", body = [JobSummary]),
        ListErrors
    )
)]
pub async fn list_user_jobs(
    State(state): State<AppState>,
    owner: Owner,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult {
    let shown = [
        ("state", query.state.map(|s| s.to_string())),
        ("limit", query.limit.map(|l| l.to_string())),
    ];
    let page = jobs::list(
        &state,
        &owner.caller,
        Some(owner.user.as_str()),
        &query.filter(),
    )
    .await?;
    Ok(page_of(
        &pai_api::routes::USER_JOBS.with(&[owner.user.as_str()]),
        &shown,
        page,
    ))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only this user's jobs (OpenPAI's user name rule).
    username: Option<String>,
}

/// `GET /api/v1/whoami`: whom the token stands for, so that a client acts as that user
/// without being told.
#[utoipa::path(
    get,
    path = pai_api::routes::WHOAMI.template(),
    tag = "jobs",
    responses(
        (status = 200, description = "the user the bearer token stands for, and whether it may act on every user's jobs", body = pai_api::jobs::WhoAmI),
        TokenErrors
    )
)]
pub async fn whoami(
    axum::Extension(caller): axum::Extension<Caller>,
) -> Json<pai_api::jobs::WhoAmI> {
    Json(pai_api::jobs::WhoAmI {
        user: caller.user,
        admin: caller.admin,
    })
}

/// `GET /api/v1/jobs?username=`: the jobs the caller may see (an admin: everyone's),
/// newest first, or one user's with `username`.
#[utoipa::path(
    get,
    path = pai_api::routes::JOBS.template(),
    tag = "jobs",
    params(ListQuery, PageQuery),
    responses(
        (status = 200, description = "jobs, newest first (a non-admin sees only their own); with `limit`, a `Link` header names the next page", body = [JobSummary]),
        ListErrors
    )
)]
pub async fn list_jobs(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiQuery(query): ApiQuery<ListQuery>,
    ApiQuery(page): ApiQuery<PageQuery>,
) -> ApiResult {
    let shown = [
        ("username", query.username.clone()),
        ("state", page.state.map(|s| s.to_string())),
        ("limit", page.limit.map(|l| l.to_string())),
    ];
    let listed = jobs::list(&state, &caller, query.username.as_deref(), &page.filter()).await?;
    Ok(page_of(pai_api::routes::JOBS.template(), &shown, listed))
}

/// `GET /healthz`: the process serves (liveness; `/readyz` says whether it can answer).
#[utoipa::path(get, path = pai_api::routes::HEALTHZ.template(), tag = "operations", responses((status = 200, description = "the process serves", body = String)))]
pub async fn healthz() -> &'static str {
    "ok"
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LogQuery {
    /// The task role's name as in the spec.
    role: String,
    /// The task's index in its role.
    #[serde(default)]
    index: u32,
    /// Keep streaming while the task runs (for a day at most; ask again to go on).
    #[serde(default)]
    follow: bool,
    /// The log of this attempt of the job (from 0) instead of the current one's, where
    /// it is still kept: on this machine until the job is deleted; on a cluster an
    /// earlier attempt's pod, and so its log, is gone (404 saying so).
    #[param(minimum = 0)]
    attempt: Option<u32>,
    /// Whose lines: `user` (the default: the user command's output, and the runtime's
    /// warnings and errors), `runtime` (the runtime's own lines: its steps, the barrier,
    /// the daemons it started) or `all` (both, as written).
    #[serde(default)]
    #[param(inline)]
    source: LogSource,
    /// One stream of the user command's output alone: `stdout` or `stderr` (without it,
    /// both, in the order they were written). Kept apart by the embedded default; on a
    /// cluster the kubelet merges them (400 saying so).
    #[param(inline)]
    stream: Option<OutputStream>,
    /// Each line begins with the time it was written (RFC 3339, UTC) and a space, as
    /// `kubectl logs --timestamps` shows it: the logs of several tasks can be put in
    /// the order they were written. Where a line's own time was not kept (a line the
    /// container engine wrote itself; a cluster's copy of a log whose pod is gone), it
    /// carries the time of the line before it.
    #[serde(default)]
    timestamps: bool,
}

/// One stream of the user command's output.
#[derive(Clone, Copy, Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum OutputStream {
    Stdout,
    Stderr,
}

impl From<OutputStream> for pai_contract::ordered_log::Stream {
    fn from(stream: OutputStream) -> Self {
        match stream {
            OutputStream::Stdout => Self::Stdout,
            OutputStream::Stderr => Self::Stderr,
        }
    }
}

/// Whose lines of a task's log.
#[derive(Clone, Copy, Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogSource {
    #[default]
    User,
    Runtime,
    All,
}

impl From<LogSource> for pai_contract::log_lines::Source {
    fn from(source: LogSource) -> Self {
        match source {
            LogSource::User => Self::User,
            LogSource::Runtime => Self::Runtime,
            LogSource::All => Self::All,
        }
    }
}

/// `GET …/logs?role=&index=&follow=&attempt=&source=&timestamps=`: one task's output,
/// streamed while it runs when following; an earlier attempt's with `attempt`; the
/// runtime's lines apart with `source`; each line with its time with `timestamps`.
#[utoipa::path(
    get,
    path = pai_api::routes::JOB_LOGS.template(),
    tag = "jobs",
    params(JobPath, LogQuery),
    responses(
        (status = 200, description = "the task's output (by default the user command's, stdout and stderr in the order written; one of them with stream= (where the backend keeps them apart: on a cluster, whose kubelet merges them, 404 NoLogError); the runtime's lines with source=runtime); streamed while it runs with follow=true; a task of the current attempt that ended before it ran (its image not pulled, its pod never made) has none and never will: 404 NoLogError, saying what ended the attempt", content_type = "text/plain", body = String),
        JobErrors
    )
)]
pub async fn get_logs(
    State(state): State<AppState>,
    job: Job,
    ApiQuery(query): ApiQuery<LogQuery>,
) -> ApiResult {
    let task = format!("{}-{}", query.role, query.index);
    let no_task = || {
        ApiError::no_task(format!(
            "job {}~{} has no task {task} (its tasks: {})",
            job.user,
            job.job,
            job.framework
                .spec
                .task_roles
                .iter()
                .map(|r| format!("{} 0–{}", r.pai_name(), r.tasks().saturating_sub(1)))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    };
    let role = job.framework.role(&query.role).ok_or_else(no_task)?;
    if query.index >= role.tasks() {
        return Err(no_task());
    }
    let pod = job.framework.pod_name(role, query.index);
    let current = job.framework.attempt_id();
    let earlier = match query.attempt.map(|a| i32::try_from(a).unwrap_or(i32::MAX)) {
        Some(attempt) if attempt > current => {
            return Err(ApiError::no_task(format!(
                "job {}~{} has no attempt {attempt}: its current attempt is {current} (attempts count from 0)",
                job.user, job.job
            )));
        }
        Some(attempt) if attempt < current => Some(attempt),
        _ => None,
    };
    let part = match query.stream {
        Some(_) if !matches!(query.source, LogSource::User) => {
            return Err(ApiError::bad_request(
                "stream splits the user command's output: it goes with source=user (the default), not with the runtime's lines".to_string(),
            ));
        }
        Some(stream) => LogPart::Stream(stream.into()),
        None => LogPart::Lines(query.source.into()),
    };
    let request = LogRequest {
        part,
        follow: query.follow,
        earlier,
        timestamps: query.timestamps,
    };
    let logs = state
        .backend
        .log(&pod, request)
        .await
        .map_err(|e| match e {
            BackendError::NotFound => no_log(&job, &query, &pod, earlier),
            other => other.into(),
        })?;
    Ok((
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        axum::body::Body::from_stream(logs.take_until(tokio::time::sleep(MAX_FOLLOW))),
    )
        .into_response())
}

/// The answer where the backend has no log of the task `query` names (its pod `pod`),
/// in the current attempt or the `earlier` one: a task that never ran in the current
/// attempt says why it never will have one there, not "yet".
fn no_log(job: &Job, query: &LogQuery, pod: &str, earlier: Option<i32>) -> ApiError {
    let task = format!("{}-{}", query.role, query.index);
    if let Some(attempt) = earlier {
        return ApiError::no_task(format!(
            "task {task} of job {}~{} left no log in attempt {attempt}",
            job.user, job.job
        ));
    }
    pai_api::status::never_started(&job.framework, &query.role, query.index).map_or_else(
        || {
            ApiError::no_task(format!(
                "task {task} of job {}~{} has no log yet (its pod {pod} does not exist)",
                job.user, job.job
            ))
        },
        never_started,
    )
}

/// A task's log asked for where it never ran (`why`: [`pai_api::status::never_started`]).
pub(crate) fn never_started(why: String) -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        code: ErrorCode::NoLogError,
        message: why,
    }
}

/// `GET /readyz`: ready when the backend answers.
#[utoipa::path(
    get,
    path = pai_api::routes::READYZ.template(),
    tag = "operations",
    responses(
        (status = 200, description = "the backend answers", body = String),
        (status = 503, description = "the cluster cannot be reached", body = ErrorBody)
    )
)]
pub async fn readyz(State(state): State<AppState>) -> ApiResult {
    state.backend.taking_requests()?;
    Ok("ok".into_response())
}

/// `GET /metrics`: Prometheus text format.
#[utoipa::path(
    get,
    path = pai_api::routes::METRICS.template(),
    tag = "operations",
    description = "Needs a token, unless the server serves it on a listener of its own (`--metrics-listen`).",
    responses(
        (status = 200, description = "Prometheus text format", content_type = "text/plain", body = String),
        (status = 401, description = "no valid token", body = ErrorBody)
    )
)]
pub async fn metrics(State(state): State<AppState>) -> Response {
    let mut text = state.metrics.render();
    // The jobs as they are now; a backend that cannot list them leaves these out and
    // says so, the request counts still answer.
    match state.index.rows(None).await {
        Ok(rows) => {
            text.push_str(&super::metrics::render_jobs(&rows));
        }
        Err(e) => {
            tracing::warn!(error = %e, "metrics: cannot list the jobs");
            text.push_str(
                "# the jobs could not be listed: rest_lite_jobs and rest_lite_tasks are left out\n",
            );
        }
    }
    state.backend.write_metrics(&mut text);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// Any other path: the JSON 404.
pub async fn no_route(uri: axum::http::Uri) -> ApiError {
    ApiError::no_route(uri.path())
}

/// A known path with another method: the JSON 405.
pub async fn no_method(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::method_not_allowed(method.as_str(), uri.path())
}
