//! OpenPAI's v2 REST API, as its official SDK (`@microsoft/openpai-js-sdk`) and web
//! portal call it: submit (protocol v2 as `text/yaml`, or any spec the v1 route takes),
//! the job list with OpenPAI's filters, a job as `{user}~{job}`, its config (secrets
//! masked), start and stop, a task's attempts and where its log is. Each handler finds
//! the job by the same rule as v1 ([`Job::find`]) and calls the same service
//! ([`crate::jobs`]); only the paths and the answers' shapes are v2's.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use pai_api::jobs::{JobSummary, Message};
use pai_api::status::JobState;
use pai_api::v2::{
    JobListV2, JobSummariesWithTotalCount, JobSummaryV2, LogLocation, PodLogInfo, TaskStatusV2,
};
use pai_job::tags::Edit;

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{ApiJson, ApiPath, ApiQuery, Job, SpecBody, user_name};
use super::jobs::{self, Submitted};
use super::routes::{ChangeErrors, ExecutionBody, JobErrors, ListErrors, SubmitErrors};
use crate::state::AppState;
use pai_translate::spec::schema::JobSpecDocument;

type ApiResult = Result<Response, ApiError>;

/// `/api/v2/jobs/{job_id}…`.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct JobIdPath {
    /// `<user>~<job>`: the owner and the job's name, split at the first `~` (as OpenPAI
    /// splits it).
    #[param(pattern = r"^[A-Za-z0-9\-._]+~[A-Za-z0-9\-._~]+$")]
    pub job_id: String,
}

/// `/api/v2/jobs/{job_id}/attempts/{attempt_id}`.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct AttemptPath {
    /// `<user>~<job>`.
    #[param(pattern = r"^[A-Za-z0-9\-._]+~[A-Za-z0-9\-._~]+$")]
    pub job_id: String,
    /// The job's attempt, from 0: only the current one is kept.
    pub attempt_id: i32,
}

/// `/api/v2/jobs/{job_id}/attempts/{attempt_id}/taskRoles/{role}/taskIndex/{index}/attempts`.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct TaskPath {
    /// `<user>~<job>`.
    #[param(pattern = r"^[A-Za-z0-9\-._]+~[A-Za-z0-9\-._~]+$")]
    pub job_id: String,
    /// The job's attempt (the current one).
    pub attempt_id: i32,
    /// The role's name as in the spec.
    pub role: String,
    /// The task's index in its role.
    pub index: u32,
}

/// `…/attempts/{task_attempt_id}/logs`.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct TaskLogPath {
    /// `<user>~<job>`.
    #[param(pattern = r"^[A-Za-z0-9\-._]+~[A-Za-z0-9\-._~]+$")]
    pub job_id: String,
    /// The job's attempt.
    pub attempt_id: i32,
    /// The role's name as in the spec.
    pub role: String,
    /// The task's index in its role.
    pub index: u32,
    /// The task's attempt (its retries so far).
    pub task_attempt_id: i32,
}

/// The job `job_id` names, by the v1 rule (a 404 for anything the caller may not see).
async fn find(state: &AppState, caller: &Caller, job_id: &str) -> Result<Job, ApiError> {
    let Some((user, job)) = job_id.split_once('~') else {
        return Err(ApiError::bad_request(format!(
            "job id {job_id:?}: must be <user>~<job>"
        )));
    };
    Job::find(state, caller, user, job).await
}

/// A 404 for an attempt that is not the current one.
fn no_attempt(job: &Job, attempt: i32) -> ApiError {
    ApiError::no_task(format!(
        "job {}~{} has no attempt {attempt} kept: its current attempt is {} (an earlier attempt's end is in jobStatus.attempts)",
        job.user,
        job.job,
        job.framework.attempt_id()
    ))
}

/// `POST /api/v2/jobs`: submits a job for the token's user.
#[utoipa::path(
    post,
    path = pai_api::routes::V2_JOBS.template(),
    operation_id = "createJob",
    tag = "v2",
    request_body(description = "an OpenPAI job protocol v2 document (or a v1 job config), as the SDK sends it (text/yaml) or as JSON", content((JobSpecDocument = "text/yaml"), (JobSpecDocument = "application/yaml"), (JobSpecDocument = "application/json"))),
    responses(
        (status = 202, description = "accepted, with what is not done as the spec asks", body = Message),
        SubmitErrors
    )
)]
pub async fn submit(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    body: SpecBody,
) -> ApiResult {
    if caller.user.is_empty() {
        return Err(ApiError::bad_request(
            "the token names no user: submit with /api/v1/user/{user}/jobs",
        ));
    }
    let user = user_name(&caller.user)?;
    match jobs::submit(&state, &caller, &user, None, false, &body).await? {
        Submitted::Created { job, warnings } => Ok((
            StatusCode::ACCEPTED,
            Json(Message {
                message: format!("job {job} submitted"),
                warnings,
            }),
        )
            .into_response()),
        Submitted::DryRun { framework, .. } => Ok(Json(framework).into_response()),
    }
}

/// `GET /api/v2/jobs` query: OpenPAI's filters.
#[derive(Deserialize, Default, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only this user's jobs.
    username: Option<String>,
    /// Only jobs of this virtual cluster.
    vc: Option<String>,
    /// Only jobs in this state.
    state: Option<JobState>,
    /// Only jobs whose user, name or virtual cluster contains this.
    keyword: Option<String>,
    /// Only jobs with at least one of these tags (comma separated).
    tags_contain: Option<String>,
    /// Only jobs with none of these tags (comma separated).
    tags_not_contain: Option<String>,
    /// Only jobs of this priority class: `prod`, `test`, `oppo`, or `default` for those
    /// that name none.
    job_priority: Option<String>,
    /// Jobs to skip.
    #[param(minimum = 0)]
    offset: Option<usize>,
    /// At most this many (5000 by default, at most 50000).
    #[param(minimum = 1, maximum = 50000)]
    limit: Option<usize>,
    /// `<field>,<ASC|DESC>`: jobName, submissionTime (the default, DESC), username, vc,
    /// retries, totalTaskNumber, totalGpuNumber, state, jobPriority.
    order: Option<String>,
    /// `true`: `{totalCount, data}` instead of a list.
    with_total_count: Option<String>,
}

const DEFAULT_LIMIT: usize = 5000;
const MAX_LIMIT: usize = 50_000;

/// How a list is ordered.
fn order_of(order: Option<&str>) -> Result<(String, bool), ApiError> {
    let Some(order) = order else {
        return Ok(("submissionTime".to_string(), true));
    };
    let (field, direction) = order.split_once(',').unwrap_or((order, "ASC"));
    let descending = match direction.to_ascii_uppercase().as_str() {
        "ASC" => false,
        "DESC" => true,
        _ => {
            return Err(ApiError::bad_request(format!(
                "order: {direction:?} is not ASC or DESC"
            )));
        }
    };
    const FIELDS: [&str; 9] = [
        "jobName",
        "submissionTime",
        "username",
        "vc",
        "retries",
        "totalTaskNumber",
        "totalGpuNumber",
        "state",
        "jobPriority",
    ];
    if !FIELDS.contains(&field) {
        return Err(ApiError::bad_request(format!(
            "order: {field:?} is not one of {}",
            FIELDS.join(", ")
        )));
    }
    Ok((field.to_string(), descending))
}

fn compare(a: &JobSummary, b: &JobSummary, field: &str) -> std::cmp::Ordering {
    let (x, y) = (&a.status, &b.status);
    match field {
        "jobName" => a.name.cmp(&b.name),
        "username" => x.username.cmp(&y.username),
        "vc" => x.virtual_cluster.cmp(&y.virtual_cluster),
        "retries" => x.retries.cmp(&y.retries),
        "totalTaskNumber" => x.total_task_number.cmp(&y.total_task_number),
        "totalGpuNumber" => x.total_gpu_number.cmp(&y.total_gpu_number),
        "state" => x.state.as_str().cmp(y.state.as_str()),
        // By rank (oppo < test < prod), jobs naming none first.
        "jobPriority" => rank(x).cmp(&rank(y)),
        _ => x.created_time.cmp(&y.created_time),
    }
    .then_with(|| a.name.cmp(&b.name))
}

/// A job's priority class as a rank, for ordering.
fn rank(status: &pai_api::status::JobStatus) -> Option<pai_contract::priority::JobPriority> {
    status.job_priority.as_deref()?.parse().ok()
}

/// `GET /api/v2/jobs`: the jobs the caller may see (a non-admin: their own), filtered,
/// ordered and paged as OpenPAI does.
#[utoipa::path(
    get,
    path = pai_api::routes::V2_JOBS.template(),
    operation_id = "listJobs",
    tag = "v2",
    params(ListQuery),
    responses(
        (status = 200, description = "the jobs; with withTotalCount=true, {totalCount, data}", body = JobListV2),
        ListErrors
    )
)]
pub async fn list(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> ApiResult {
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit: {limit} is not from 1 to {MAX_LIMIT}"
        )));
    }
    let (field, descending) = order_of(query.order.as_deref())?;
    let rows = jobs::visible_rows(&state, &caller, query.username.as_deref()).await?;
    let tags = |list: &Option<String>| -> Option<Vec<String>> {
        list.as_deref()
            .filter(|t| !t.is_empty())
            .map(|t| t.split(',').map(str::to_string).collect())
    };
    let (some_of, none_of) = (tags(&query.tags_contain), tags(&query.tags_not_contain));
    let priority = match query.job_priority.as_deref() {
        None => None,
        Some("default") => Some(None),
        Some(name) => match name.parse::<pai_contract::priority::JobPriority>() {
            Ok(class) => Some(Some(class.to_string())),
            Err(e) => {
                return Err(ApiError::bad_request(format!(
                    "jobPriority: {e}, or default for jobs that name none"
                )));
            }
        },
    };
    // Filtered and ordered on the rows the index keeps; summaries made for the page
    // alone.
    let mut matching: Vec<&JobSummary> = rows
        .iter()
        .map(|row| &row.summary)
        .filter(|j| {
            let s = &j.status;
            query.state.is_none_or(|state| s.state == state)
                && some_of
                    .as_ref()
                    .is_none_or(|wanted| s.tags.iter().any(|t| wanted.contains(t)))
                && none_of
                    .as_ref()
                    .is_none_or(|unwanted| !s.tags.iter().any(|t| unwanted.contains(t)))
                && query.vc.as_deref().is_none_or(|vc| s.virtual_cluster == vc)
                && priority
                    .as_ref()
                    .is_none_or(|wanted| &s.job_priority == wanted)
                && query.keyword.as_deref().is_none_or(|k| {
                    s.username.contains(k) || j.name.contains(k) || s.virtual_cluster.contains(k)
                })
        })
        .collect();
    // Mostly in order already (the index's is newest first): a sort of a run.
    matching.sort_by(|a, b| {
        let order = compare(a, b, &field);
        if descending { order.reverse() } else { order }
    });
    let total = matching.len();
    let data: Vec<JobSummaryV2> = matching
        .into_iter()
        .skip(query.offset.unwrap_or(0))
        .take(limit)
        .map(JobSummaryV2::of_summary)
        .collect();
    let list = if query.with_total_count.as_deref() == Some("true") {
        JobListV2::WithTotalCount(JobSummariesWithTotalCount {
            total_count: total,
            data,
        })
    } else {
        JobListV2::List(data)
    };
    Ok(Json(list).into_response())
}

/// `GET /api/v2/jobs/{job_id}`: the job with its current attempt.
#[utoipa::path(
    get,
    path = pai_api::routes::V2_JOB.template(),
    operation_id = "getJob",
    tag = "v2",
    params(JobIdPath),
    responses(
        (status = 200, description = "the job's status (the v1 job view)", body = pai_api::status::JobView),
        JobErrors
    )
)]
pub async fn get_job(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiPath(path): ApiPath<JobIdPath>,
) -> ApiResult {
    let job = find(&state, &caller, &path.job_id).await?;
    Ok(view(&state, &job))
}

fn view(state: &AppState, job: &Job) -> Response {
    let made = state.views.at(&job.framework, &job.url());
    (
        [(header::CONTENT_TYPE, "application/json")],
        made.json.clone(),
    )
        .into_response()
}

/// `GET /api/v2/jobs/{job_id}/attempts/{attempt_id}`: the job as of one attempt (the
/// current one; an earlier one's end is in `jobStatus.attempts`).
#[utoipa::path(
    get,
    path = pai_api::routes::V2_ATTEMPT.template(),
    operation_id = "getJobAttempt",
    tag = "v2",
    params(AttemptPath),
    responses(
        (status = 200, description = "the job's status in that attempt", body = pai_api::status::JobView),
        JobErrors
    )
)]
pub async fn get_attempt(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiPath(path): ApiPath<AttemptPath>,
) -> ApiResult {
    let job = find(&state, &caller, &path.job_id).await?;
    if path.attempt_id != job.framework.attempt_id() {
        return Err(no_attempt(&job, path.attempt_id));
    }
    Ok(view(&state, &job))
}

/// `GET /api/v2/jobs/{job_id}/config`: the spec as submitted, a v2 job's secrets masked
/// (`secrets: "******"`), as YAML (JSON is YAML too).
#[utoipa::path(
    get,
    path = pai_api::routes::V2_JOB_CONFIG.template(),
    operation_id = "getJobConfig",
    tag = "v2",
    params(JobIdPath),
    responses(
        (status = 200, description = "the spec as submitted, secrets masked", content((JobSpecDocument = "text/yaml"))),
        JobErrors
    )
)]
pub async fn get_config(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiPath(path): ApiPath<JobIdPath>,
) -> ApiResult {
    let job = find(&state, &caller, &path.job_id).await?;
    let text = job.framework.spec_text().map_or("", |(text, _)| text);
    Ok(([(header::CONTENT_TYPE, "text/yaml")], text.to_string()).into_response())
}

/// `PUT /api/v2/jobs/{job_id}/executionType`: stops the job, or keeps it running:
/// `{"value": "START" | "STOP"}`.
#[utoipa::path(
    put,
    path = pai_api::routes::V2_JOB_EXECUTION.template(),
    operation_id = "updateJobExecutionType",
    tag = "v2",
    params(JobIdPath),
    request_body = ExecutionBody,
    responses(
        (status = 202, description = "accepted", body = Message),
        ChangeErrors,
        JobErrors
    )
)]
pub async fn set_execution(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiPath(path): ApiPath<JobIdPath>,
    ApiJson(body): ApiJson<ExecutionBody>,
) -> ApiResult {
    let job = find(&state, &caller, &path.job_id).await?;
    let message = super::routes::execute(&state, &job, body).await?;
    Ok((StatusCode::ACCEPTED, Json(message)).into_response())
}

/// The body of `PUT` and `DELETE …/tag`.
#[derive(Deserialize, utoipa::ToSchema)]
pub struct TagBody {
    /// The tag: 1 to 64 characters, no ',' and no control characters.
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = r"^[^,\u0000-\u001f\u007f-\u009f]+$"
    )]
    value: String,
}

/// `PUT /api/v2/jobs/{job_id}/tag` `{"value": "<tag>"}`: adds a tag to the job (its
/// owner's or an operator's).
#[utoipa::path(
    put,
    path = pai_api::routes::V2_JOB_TAG.template(),
    operation_id = "addTag",
    tag = "v2",
    params(JobIdPath),
    request_body = TagBody,
    responses(
        (status = 200, description = "the tag is the job's", body = Message),
        ChangeErrors,
        JobErrors
    )
)]
pub async fn add_tag(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiPath(path): ApiPath<JobIdPath>,
    ApiJson(body): ApiJson<TagBody>,
) -> ApiResult {
    change_tags(&state, &caller, &path.job_id, Edit::Add(body.value)).await
}

/// `DELETE /api/v2/jobs/{job_id}/tag` `{"value": "<tag>"}`: removes one of the job's
/// tags (404 `NoTagError` when it has no such tag).
#[utoipa::path(
    delete,
    path = pai_api::routes::V2_JOB_TAG.template(),
    operation_id = "deleteTag",
    tag = "v2",
    params(JobIdPath),
    request_body = TagBody,
    responses(
        (status = 200, description = "the tag is removed", body = Message),
        ChangeErrors,
        JobErrors
    )
)]
pub async fn delete_tag(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiPath(path): ApiPath<JobIdPath>,
    ApiJson(body): ApiJson<TagBody>,
) -> ApiResult {
    change_tags(&state, &caller, &path.job_id, Edit::Remove(body.value)).await
}

/// Changes the tags of the job `job_id` names by `edit`, and says what was done.
async fn change_tags(state: &AppState, caller: &Caller, job_id: &str, edit: Edit) -> ApiResult {
    let job = find(state, caller, job_id).await?;
    state
        .backend
        .edit_tags(job.name(), &edit)
        .await
        .map_err(|e| match e {
            pai_backend::backend::BackendError::NotFound => job.not_found(),
            other => other.into(),
        })?;
    tracing::info!(user = %job.user, job = %job.job, edit = ?edit, "tags changed");
    let message = match &edit {
        Edit::Add(tag) => format!("job {} is tagged {tag:?}", job.job),
        Edit::Remove(tag) => format!("job {} is no longer tagged {tag:?}", job.job),
    };
    Ok(Json(Message::new(message)).into_response())
}

/// The task `path` names, in the job's view.
async fn task(
    state: &AppState,
    caller: &Caller,
    path: (&str, i32, &str, u32),
) -> Result<(Job, pai_api::status::TaskView, i32), ApiError> {
    let (job_id, attempt, role, index) = path;
    let job = find(state, caller, job_id).await?;
    if attempt != job.framework.attempt_id() {
        return Err(no_attempt(&job, attempt));
    }
    let made = state.views.at(&job.framework, &job.url());
    let task = made
        .view
        .task_roles
        .get(role)
        .and_then(|r| r.task_statuses.get(index as usize))
        .cloned()
        .ok_or_else(|| {
            ApiError::no_task(format!(
                "job {}~{} has no task {role}-{index}",
                job.user, job.job
            ))
        })?;
    Ok((job, task, attempt))
}

/// `GET …/attempts/{attempt_id}/taskRoles/{role}/taskIndex/{index}/attempts`: a task
/// and its attempts.
#[utoipa::path(
    get,
    path = pai_api::routes::V2_TASK.template(),
    operation_id = "getTask",
    tag = "v2",
    params(TaskPath),
    responses(
        (status = 200, description = "the task and its attempts (the current one)", body = TaskStatusV2),
        JobErrors
    )
)]
pub async fn get_task(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiPath(path): ApiPath<TaskPath>,
) -> ApiResult {
    let (job, task, attempt) = task(
        &state,
        &caller,
        (&path.job_id, path.attempt_id, &path.role, path.index),
    )
    .await?;
    Ok(Json(TaskStatusV2::of(
        &task,
        &path.role,
        job.user.as_str(),
        &job.job,
        attempt,
        task.retries,
    ))
    .into_response())
}

/// `GET …/attempts/{task_attempt_id}/logs`: where the task's log is read: `all` (the
/// user command's output with the runtime's warnings and errors) and `runtime` (the
/// runtime's own lines), absolute URLs on this server read with the same token. Only
/// the task's current attempt's log is kept.
#[utoipa::path(
    get,
    path = pai_api::routes::V2_TASK_LOGS.template(),
    operation_id = "getTaskLogs",
    tag = "v2",
    params(TaskLogPath),
    responses(
        (status = 200, description = "the task's log locations", body = PodLogInfo),
        JobErrors
    )
)]
pub async fn get_task_logs(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    headers: HeaderMap,
    ApiPath(path): ApiPath<TaskLogPath>,
) -> ApiResult {
    let (job, task, attempt) = task(
        &state,
        &caller,
        (&path.job_id, path.attempt_id, &path.role, path.index),
    )
    .await?;
    if path.task_attempt_id != task.retries {
        return Err(ApiError::no_task(format!(
            "task {}-{} of job {}~{} has no attempt {} kept: its current attempt is {}",
            path.role, path.index, job.user, job.job, path.task_attempt_id, task.retries
        )));
    }
    // The guard has checked the Host against the names this server answers to.
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    let scheme = if state.tls { "https" } else { "http" };
    let base = format!("{scheme}://{host}{}&attempt={attempt}", task.container_log);
    Ok(Json(PodLogInfo {
        locations: vec![
            LogLocation {
                name: "all".to_string(),
                uri: base.clone(),
            },
            LogLocation {
                name: "runtime".to_string(),
                uri: format!("{base}&source=runtime"),
            },
        ],
    })
    .into_response())
}
