//! The jobs API handlers: extract, call the domain, map the result.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use pai_contract::Framework;
use pai_contract::framework::{ExecutionType, FrameworkState};

use super::AppState;
use super::auth::Caller;
use super::backend::BackendError;
use super::error::{ApiError, ErrorBody};
use crate::ports::Seed;
use crate::spec::names::framework_name;
use crate::spec::{JobName, JobSpec, SpecFormat, UserName};
use crate::status::{JobState, JobStatus, JobView, job_view};
use crate::transform::Submission;

type ApiResult = Result<Response, ApiError>;

/// `/api/v1/user/{user}/…`.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct UserPath {
    /// The jobs' owner.
    user: String,
}

/// `/api/v1/user/{user}/jobs/{job}…`.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct JobPath {
    /// The job's owner.
    user: String,
    /// The job's name (`jobName`).
    job: String,
}

/// The body of a 202.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Message {
    message: String,
}

fn accepted(message: String) -> Response {
    (StatusCode::ACCEPTED, Json(Message { message })).into_response()
}

fn user_name(user: &str) -> Result<UserName, ApiError> {
    UserName::parse(user)
        .map_err(|rule| ApiError::bad_request(format!("user name {user:?}: {rule}")))
}

/// Maps what the backend said to what the API says.
fn backend_error(error: BackendError, user: &str, job: &str) -> ApiError {
    match error {
        BackendError::NotFound => ApiError::no_job(user, job),
        BackendError::Conflict(_) => ApiError::conflict(format!("job {user}~{job} already exists")),
        BackendError::Invalid(reason) => {
            ApiError::bad_request(format!("the cluster rejected the job: {reason}"))
        }
        e @ BackendError::Unavailable { .. } => ApiError::unavailable(e.to_string()),
        BackendError::Other(message) => ApiError::internal(message),
    }
}

#[derive(Deserialize, Default, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct SubmitQuery {
    /// Validate and transform only: answer with the Framework, create nothing.
    #[serde(default)]
    dry_run: bool,
}

fn spec_format(headers: &HeaderMap, text: &str) -> Result<SpecFormat, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "application/json" => Ok(SpecFormat::Json),
        "application/yaml" | "application/x-yaml" | "text/yaml" | "text/x-yaml" => {
            Ok(SpecFormat::Yaml)
        }
        "" | "text/plain" | "application/octet-stream" => Ok(SpecFormat::detect(text)),
        _ => Err(ApiError::unsupported_type(content_type)),
    }
}

/// `POST /api/v1/user/{user}/jobs`: the job's name comes from the spec.
#[utoipa::path(
    post,
    path = "/api/v1/user/{user}/jobs",
    tag = "jobs",
    params(UserPath, SubmitQuery),
    request_body(description = "the job spec, JSON or YAML (contracts §1)", content((String = "application/json"), (String = "application/yaml"))),
    responses(
        (status = 202, description = "accepted", body = Message),
        (status = 200, description = "dry run: the Framework that would be created", body = Object),
        (status = 400, description = "bad spec or parameter: the message names the field and the rule", body = ErrorBody),
        (status = 401, description = "no or unknown bearer token", body = ErrorBody),
        (status = 403, description = "the caller may not act for this user", body = ErrorBody),
        (status = 409, description = "a job of that name exists, or the job cannot be started again", body = ErrorBody),
        (status = 413, description = "the body is larger than the server's limit", body = ErrorBody),
        (status = 415, description = "the body is not JSON or YAML", body = ErrorBody),
        (status = 503, description = "the cluster cannot be reached", body = ErrorBody)
    )
)]
pub async fn submit(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(UserPath { user }): Path<UserPath>,
    Query(query): Query<SubmitQuery>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    submit_job(&state, &caller, &user, None, query.dry_run, &headers, body).await
}

/// `PUT /api/v1/user/{user}/jobs/{job}`: the proof of concept's form; the path's job name
/// must be the spec's.
#[utoipa::path(
    put,
    path = "/api/v1/user/{user}/jobs/{job}",
    tag = "jobs",
    params(JobPath, SubmitQuery),
    request_body(description = "the job spec; its jobName must be the path's", content((String = "application/json"), (String = "application/yaml"))),
    responses(
        (status = 202, description = "accepted", body = Message),
        (status = 200, description = "dry run: the Framework that would be created", body = Object),
        (status = 400, description = "bad spec or parameter: the message names the field and the rule", body = ErrorBody),
        (status = 401, description = "no or unknown bearer token", body = ErrorBody),
        (status = 403, description = "the caller may not act for this user", body = ErrorBody),
        (status = 409, description = "a job of that name exists, or the job cannot be started again", body = ErrorBody),
        (status = 413, description = "the body is larger than the server's limit", body = ErrorBody),
        (status = 415, description = "the body is not JSON or YAML", body = ErrorBody),
        (status = 503, description = "the cluster cannot be reached", body = ErrorBody)
    )
)]
pub async fn submit_named(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(JobPath { user, job }): Path<JobPath>,
    Query(query): Query<SubmitQuery>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    submit_job(
        &state,
        &caller,
        &user,
        Some(&job),
        query.dry_run,
        &headers,
        body,
    )
    .await
}

async fn submit_job(
    state: &AppState,
    caller: &Caller,
    user: &str,
    path_job: Option<&str>,
    dry_run: bool,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    if !caller.may_act_for(user) {
        return Err(ApiError::forbidden(format!(
            "user {:?} may not submit jobs as {user:?}",
            caller.user
        )));
    }
    let user = user_name(user)?;
    let body = body.map_err(|rejection| match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::too_large(state.body_limit),
        _ => ApiError::bad_request(rejection.body_text()),
    })?;
    let text = std::str::from_utf8(&body)
        .map_err(|_| ApiError::bad_request("the job spec is not UTF-8 text"))?;
    let format = spec_format(headers, text)?;
    let spec = JobSpec::parse(text, format).map_err(|e| ApiError::bad_spec(&e))?;
    if let Some(job) = path_job
        && job != spec.name().as_str()
    {
        return Err(ApiError::bad_request(format!(
            "the job name in the path ({job:?}) is not the spec's jobName ({:?})",
            spec.name().as_str()
        )));
    }
    let submission = Submission {
        user: &user,
        spec: &spec,
        spec_text: text,
        format,
    };
    let framework = state
        .transformer
        .transform(submission, Seed::Random)
        .map_err(|e| ApiError::bad_spec(&e))?;
    if dry_run {
        return Ok(Json(framework).into_response());
    }
    let job = spec.name().as_str().to_string();
    state
        .backend
        .create(framework)
        .await
        .map_err(|e| backend_error(e, user.as_str(), &job))?;
    tracing::info!(user = %user, job = %job, "job submitted");
    Ok(accepted(format!("update job {job} successfully")))
}

/// The Framework of `job` of `user`, if it is really theirs and really that job (two job
/// names can share a Kubernetes name).
async fn find(
    state: &AppState,
    caller: &Caller,
    user: &str,
    job: &str,
) -> Result<Framework, ApiError> {
    if !caller.may_act_for(user) {
        return Err(ApiError::no_job(user, job));
    }
    let user_name = user_name(user)?;
    let job_name = JobName::parse(job).map_err(|_| ApiError::no_job(user, job))?;
    let framework = state
        .backend
        .get(&framework_name(&user_name, &job_name))
        .await
        .map_err(|e| backend_error(e, user, job))?
        .ok_or_else(|| ApiError::no_job(user, job))?;
    if framework.user_name() == Some(user) && framework.job_name() == Some(job) {
        Ok(framework)
    } else {
        Err(ApiError::no_job(user, job))
    }
}

fn job_url(user: &str, job: &str) -> String {
    format!("/api/v1/user/{user}/jobs/{job}")
}

/// `GET /api/v1/user/{user}/jobs/{job}`.
#[utoipa::path(
    get,
    path = "/api/v1/user/{user}/jobs/{job}",
    tag = "jobs",
    params(JobPath, GetQuery),
    responses(
        (status = 200, description = "the job's status; with watch=true one JSON line per change (application/x-ndjson), ending after a final state or the deletion", content((JobView = "application/json"), (JobView = "application/x-ndjson"))),
        (status = 401, description = "no or unknown bearer token", body = ErrorBody),
        (status = 404, description = "no such job (or not the caller's)", body = ErrorBody),
        (status = 503, description = "the cluster cannot be reached", body = ErrorBody)
    )
)]
/// `GET /api/v1/user/{user}/jobs/{job}`, or its changes with `watch=true`.
pub async fn get_job(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(JobPath { user, job }): Path<JobPath>,
    Query(query): Query<GetQuery>,
) -> ApiResult {
    let framework = find(&state, &caller, &user, &job).await?;
    let url = job_url(&user, &job);
    if !query.watch {
        return Ok(Json(job_view(&framework, &url)).into_response());
    }
    let name = framework.metadata.name.clone().unwrap_or_default();
    let changes = state
        .backend
        .watch(&name)
        .await
        .map_err(|e| backend_error(e, &user, &job))?;
    // One line per change; the line of a final state is the last, and the stream ends
    // right after it (not at the next change, which may never come).
    let lines = changes
        .flat_map(move |change| {
            let line = change.ok().flatten().and_then(|framework| {
                let view = job_view(&framework, &url);
                let last = matches!(
                    view.job_status.state,
                    JobState::Succeeded | JobState::Failed | JobState::Stopped
                );
                let mut line = serde_json::to_vec(&view).ok()?;
                line.push(b'\n');
                Some((line, last))
            });
            // `None` ends the stream: deleted, unreadable, or after a final state.
            let items = match line {
                Some((line, true)) => vec![Some(Bytes::from(line)), None],
                Some((line, false)) => vec![Some(Bytes::from(line))],
                None => vec![None],
            };
            futures::stream::iter(items)
        })
        .take_while(|item| futures::future::ready(item.is_some()))
        .filter_map(|item| futures::future::ready(item.map(Ok::<_, std::io::Error>)));
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        axum::body::Body::from_stream(lines),
    )
        .into_response())
}

#[derive(Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct GetQuery {
    /// Stream the job's status on every change until it completes.
    #[serde(default)]
    watch: bool,
}

/// `GET …/config`: the spec exactly as submitted.
#[utoipa::path(
    get,
    path = "/api/v1/user/{user}/jobs/{job}/config",
    tag = "jobs",
    params(JobPath),
    responses(
        (status = 200, description = "the spec exactly as submitted", content((String = "application/json"), (String = "application/yaml"))),
        (status = 401, description = "no or unknown bearer token", body = ErrorBody),
        (status = 404, description = "no such job (or not the caller's)", body = ErrorBody),
        (status = 503, description = "the cluster cannot be reached", body = ErrorBody)
    )
)]
pub async fn get_config(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(JobPath { user, job }): Path<JobPath>,
) -> ApiResult {
    let framework = find(&state, &caller, &user, &job).await?;
    let (text, format) = framework.spec_text().unwrap_or(("", SpecFormat::Json));
    Ok((
        [(header::CONTENT_TYPE, format.media_type())],
        text.to_string(),
    )
        .into_response())
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SshContainer {
    /// `<role>-<index>`.
    id: String,
    ssh_ip: String,
    ssh_port: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct SshInfo {
    containers: Vec<SshContainer>,
}

/// `GET …/ssh`: where each running task's sshd listens.
#[utoipa::path(
    get,
    path = "/api/v1/user/{user}/jobs/{job}/ssh",
    tag = "jobs",
    params(JobPath),
    responses(
        (status = 200, description = "where each task's sshd listens", body = SshInfo),
        (status = 404, description = "no such job, or no task has an address yet (`NoJobSshInfoError`)", body = ErrorBody),
        (status = 401, description = "no or unknown bearer token", body = ErrorBody),
        (status = 503, description = "the cluster cannot be reached", body = ErrorBody)
    )
)]
pub async fn get_ssh(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(JobPath { user, job }): Path<JobPath>,
) -> ApiResult {
    let framework = find(&state, &caller, &user, &job).await?;
    let view = job_view(&framework, &job_url(&user, &job));
    let containers: Vec<SshContainer> = view
        .task_roles
        .iter()
        .flat_map(|(role, r)| {
            r.task_statuses.iter().filter_map(move |t| {
                Some(SshContainer {
                    id: format!("{role}-{}", t.task_index),
                    ssh_ip: t.container_ip.clone()?,
                    ssh_port: t
                        .container_ports
                        .get(pai_contract::ports::SSH_LABEL)?
                        .clone(),
                })
            })
        })
        .collect();
    if containers.is_empty() {
        return Err(ApiError::no_ssh(&user, &job, "no task has an address yet"));
    }
    Ok(Json(SshInfo { containers }).into_response())
}

#[derive(Deserialize, utoipa::ToSchema)]
pub struct ExecutionBody {
    /// `START` or `STOP`.
    #[schema(example = "STOP")]
    value: String,
}

/// `PUT …/executionType` `{"value": "START" | "STOP"}`.
#[utoipa::path(
    put,
    path = "/api/v1/user/{user}/jobs/{job}/executionType",
    tag = "jobs",
    params(JobPath),
    request_body = ExecutionBody,
    responses(
        (status = 202, description = "accepted", body = Message),
        (status = 400, description = "bad spec or parameter: the message names the field and the rule", body = ErrorBody),
        (status = 401, description = "no or unknown bearer token", body = ErrorBody),
        (status = 404, description = "no such job (or not the caller's)", body = ErrorBody),
        (status = 409, description = "a job of that name exists, or the job cannot be started again", body = ErrorBody),
        (status = 503, description = "the cluster cannot be reached", body = ErrorBody)
    )
)]
pub async fn set_execution(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(JobPath { user, job }): Path<JobPath>,
    body: Result<Json<ExecutionBody>, axum::extract::rejection::JsonRejection>,
) -> ApiResult {
    let Json(body) = body.map_err(|e| {
        ApiError::bad_request(format!(
            "expected {{\"value\": \"START\" | \"STOP\"}}: {}",
            e.body_text()
        ))
    })?;
    let framework = find(&state, &caller, &user, &job).await?;
    let completed = framework
        .status
        .as_ref()
        .is_some_and(|s| s.state == FrameworkState::Completed);
    match body.value.as_str() {
        "STOP" => {
            if !completed {
                state
                    .backend
                    .set_execution(
                        framework.metadata.name.as_deref().unwrap_or_default(),
                        ExecutionType::Stop,
                    )
                    .await
                    .map_err(|e| backend_error(e, &user, &job))?;
                tracing::info!(user = %user, job = %job, "stop requested");
            }
            Ok(accepted(format!("execute job {job} successfully")))
        }
        "START" if completed => Err(ApiError::conflict(format!(
            "job {user}~{job} has completed and cannot be started again: submit it anew"
        ))),
        "START" if framework.spec.execution_type == ExecutionType::Stop => {
            Err(ApiError::conflict(format!(
                "job {user}~{job} is stopping and cannot be started again: submit it anew once it stopped"
            )))
        }
        "START" => Ok(accepted(format!("execute job {job} successfully"))),
        other => Err(ApiError::bad_request(format!(
            "value {other:?} is not START or STOP"
        ))),
    }
}

/// `DELETE /api/v1/user/{user}/jobs/{job}`: the Framework and, with it, its pods.
#[utoipa::path(
    delete,
    path = "/api/v1/user/{user}/jobs/{job}",
    tag = "jobs",
    params(JobPath),
    responses(
        (status = 202, description = "the job and its tasks are being removed", body = Message),
        (status = 401, description = "no or unknown bearer token", body = ErrorBody),
        (status = 404, description = "no such job (or not the caller's)", body = ErrorBody),
        (status = 503, description = "the cluster cannot be reached", body = ErrorBody)
    )
)]
pub async fn delete_job(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(JobPath { user, job }): Path<JobPath>,
) -> ApiResult {
    let framework = find(&state, &caller, &user, &job).await?;
    state
        .backend
        .delete(framework.metadata.name.as_deref().unwrap_or_default())
        .await
        .map_err(|e| backend_error(e, &user, &job))?;
    tracing::info!(user = %user, job = %job, "job deleted");
    Ok(accepted(format!("delete job {job} successfully")))
}

/// One job in a list.
#[derive(Serialize, utoipa::ToSchema)]
pub struct JobSummary {
    name: String,
    #[serde(flatten)]
    status: JobStatus,
}

async fn list(state: &AppState, caller: &Caller, user: Option<&str>) -> ApiResult {
    // Others' jobs are invisible: a non-admin lists only their own.
    let user = match user {
        _ if caller.admin => user,
        Some(u) if u != caller.user => return Ok(Json(Vec::<JobSummary>::new()).into_response()),
        _ => Some(caller.user.as_str()),
    };
    let kube_user = match user {
        Some(u) => Some(user_name(u)?.label().to_string()),
        None => None,
    };
    let frameworks = state
        .backend
        .list(kube_user.as_deref())
        .await
        .map_err(|e| backend_error(e, user.unwrap_or("*"), "*"))?;
    let mut jobs: Vec<JobSummary> = frameworks
        .iter()
        .map(|f| job_view(f, ""))
        // Two users can share a Kubernetes user name; show each only their own.
        .filter(|v| user.is_none_or(|u| v.job_status.username == u))
        .map(|v| JobSummary {
            name: v.name,
            status: v.job_status,
        })
        .collect();
    jobs.sort_by(|a, b| {
        b.status
            .created_time
            .cmp(&a.status.created_time)
            .then(a.name.cmp(&b.name))
    });
    Ok(Json(jobs).into_response())
}

/// `GET /api/v1/user/{user}/jobs`.
#[utoipa::path(
    get,
    path = "/api/v1/user/{user}/jobs",
    tag = "jobs",
    params(UserPath),
    responses(
        (status = 200, description = "the user's jobs, newest first", body = [JobSummary]),
        (status = 401, description = "no or unknown bearer token", body = ErrorBody),
        (status = 503, description = "the cluster cannot be reached", body = ErrorBody)
    )
)]
pub async fn list_user_jobs(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(UserPath { user }): Path<UserPath>,
) -> ApiResult {
    list(&state, &caller, Some(&user)).await
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only this user's jobs.
    username: Option<String>,
}

/// `GET /api/v1/jobs?username=`.
#[utoipa::path(
    get,
    path = "/api/v1/jobs",
    tag = "jobs",
    params(ListQuery),
    responses(
        (status = 200, description = "jobs, newest first (a non-admin sees only their own)", body = [JobSummary]),
        (status = 401, description = "no or unknown bearer token", body = ErrorBody),
        (status = 503, description = "the cluster cannot be reached", body = ErrorBody)
    )
)]
pub async fn list_jobs(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<ListQuery>,
) -> ApiResult {
    list(&state, &caller, query.username.as_deref()).await
}

/// `GET /healthz`.
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, description = "the process serves", body = String)))]
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
    /// Keep streaming while the task runs.
    #[serde(default)]
    follow: bool,
}

/// `GET …/logs?role=&index=&follow=`: one task's output, streamed while it runs when
/// following.
#[utoipa::path(
    get,
    path = "/api/v1/user/{user}/jobs/{job}/logs",
    tag = "jobs",
    params(JobPath, LogQuery),
    responses(
        (status = 200, description = "the task's output; streamed while it runs with follow=true", content_type = "text/plain", body = String),
        (status = 400, description = "bad spec or parameter: the message names the field and the rule", body = ErrorBody),
        (status = 401, description = "no or unknown bearer token", body = ErrorBody),
        (status = 404, description = "no such job (or not the caller's)", body = ErrorBody),
        (status = 503, description = "the cluster cannot be reached", body = ErrorBody)
    )
)]
pub async fn get_logs(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(JobPath { user, job }): Path<JobPath>,
    Query(query): Query<LogQuery>,
) -> ApiResult {
    let framework = find(&state, &caller, &user, &job).await?;
    let no_task = || {
        ApiError::no_job(&user, &job).with_message(format!(
            "job {user}~{job} has no task {}-{}",
            query.role, query.index
        ))
    };
    let role = framework.role(&query.role).ok_or_else(no_task)?;
    if query.index >= role.tasks() {
        return Err(no_task());
    }
    let pod = framework.pod_name(role, query.index);
    let logs = state
        .backend
        .logs(&pod, query.follow)
        .await
        .map_err(|e| match e {
            BackendError::NotFound => ApiError::no_job(&user, &job).with_message(format!(
                "task {}-{} of job {user}~{job} has no log yet (its pod {pod} does not exist)",
                query.role, query.index
            )),
            other => backend_error(other, &user, &job),
        })?;
    Ok((
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        axum::body::Body::from_stream(logs),
    )
        .into_response())
}

/// `GET /readyz`: ready when the backend answers.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    responses(
        (status = 200, description = "the backend answers", body = String),
        (status = 503, description = "the cluster cannot be reached", body = ErrorBody)
    )
)]
pub async fn readyz(State(state): State<AppState>) -> ApiResult {
    match state.backend.get("rest-lite-readiness-probe").await {
        Ok(_) => Ok("ok".into_response()),
        Err(e) => Err(backend_error(e, "-", "-")),
    }
}

/// `GET /metrics`: Prometheus text format.
#[utoipa::path(get, path = "/metrics", tag = "operations", responses((status = 200, description = "Prometheus text format", content_type = "text/plain", body = String)))]
pub async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}
