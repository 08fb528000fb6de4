//! Pages for people: the job list, a job's page, a task's whole log, the API's routes,
//! and a sign-in. Rendered on the server with handlebars from the templates in
//! `server/templates/` (carried in the binary), readable without JavaScript; a page
//! of something still running refreshes itself. Pages follow the API's rule: a user sees
//! only their own jobs (another's is "not found"), an admin every job; with a token
//! file, the token comes from the sign-in's HttpOnly cookie or a bearer header.

pub mod docs;
pub mod submit;
pub mod view;

use std::sync::LazyLock;

use axum::Form;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use handlebars::Handlebars;
use pai_api::routes;
use serde::{Deserialize, Serialize};

use crate::auth::{self, Caller};
use crate::error::ApiError;
use crate::extract::Job;
use crate::jobs;
use crate::state::AppState;
use pai_api::status::JobState;
use view::{Frame, Tail};

/// How many tasks' last lines a job page reads (the rest: their log links).
pub const TAILS_PER_PAGE: usize = 16;
/// Lines, and bytes at most, of a task's log on its job's page.
const TAIL_LINES: usize = 12;
const TAIL_BYTES: usize = 4096;

static TEMPLATES: LazyLock<Handlebars<'static>> = LazyLock::new(|| {
    let mut registry = Handlebars::new();
    registry.set_strict_mode(false);
    registry.register_helper("route", Box::new(route_helper));
    let templates = [
        ("layout", include_str!("../../templates/layout.hbs")),
        ("jobs", include_str!("../../templates/jobs.hbs")),
        ("job", include_str!("../../templates/job.hbs")),
        ("sign_in", include_str!("../../templates/sign_in.hbs")),
        ("error", include_str!("../../templates/error.hbs")),
        ("docs", include_str!("../../templates/docs.hbs")),
        ("guide", include_str!("../../templates/guide.hbs")),
        ("submit", include_str!("../../templates/submit.hbs")),
    ];
    for (name, text) in templates {
        // The templates are part of the binary and rendered in tests: a broken one
        // fails every test that renders a page, not a user's request.
        if let Err(e) = registry.register_template_string(name, text) {
            tracing::error!(template = name, error = %e, "a page template does not parse");
        }
    }
    registry
});

/// `{{route NAME VALUE…}}`: the page route `NAME` ([`routes::PAGES`]) with `VALUE`s in
/// its segments, so that the templates write no path of their own.
fn route_helper(
    helper: &handlebars::Helper<'_>,
    _: &Handlebars<'_>,
    _: &handlebars::Context,
    _: &mut handlebars::RenderContext<'_, '_>,
    out: &mut dyn handlebars::Output,
) -> handlebars::HelperResult {
    let name = helper.param(0).and_then(|p| p.value().as_str()).ok_or(
        handlebars::RenderErrorReason::ParamNotFoundForIndex("route", 0),
    )?;
    let route = routes::page(name).ok_or_else(|| {
        handlebars::RenderErrorReason::Other(format!("no page route is called {name}"))
    })?;
    let values: Vec<String> = helper.params()[1..]
        .iter()
        .map(|p| match p.value() {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    out.write(&handlebars::html_escape(&route.with(&values)))?;
    Ok(())
}

/// Every page's route.
pub fn router() -> Router<AppState> {
    Router::new()
        .route(routes::HOME.template(), get(to_jobs))
        .route(routes::UI.template(), get(to_jobs))
        .route(routes::UI_JOBS.template(), get(job_list))
        .route(routes::UI_JOB.template(), get(job_page))
        .route(routes::UI_TASK_LOG.template(), get(task_log))
        .route(routes::UI_JOB_ACTION.template(), post(job_action))
        .route(
            routes::UI_SUBMIT.template(),
            get(submit_form).post(submit_job),
        )
        .route(
            routes::UI_SIGN_IN.template(),
            get(sign_in_form).post(sign_in),
        )
        .route(routes::UI_SIGN_OUT.template(), post(sign_out))
        .route(routes::DOCS.template(), get(docs))
        .route(routes::DOCS_PAGE.template(), get(docs_page))
}

/// A rendered page with the headers every page gets: no caching (it shows live state),
/// no framing, no script and no resource from elsewhere.
fn page(status: StatusCode, template: &str, data: &impl Serialize) -> Response {
    let body = match TEMPLATES.render(template, data) {
        Ok(body) => body,
        Err(e) => {
            tracing::error!(template, error = %e, "rendering a page failed");
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                "this page could not be rendered",
            )
                .into_response();
        }
    };
    with_headers((status, body).into_response(), "text/html; charset=utf-8")
}

/// `response` as `content_type`, with the headers every page gets.
fn with_headers(mut response: Response, content_type: &'static str) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    secure(headers);
    response
}

fn secure(headers: &mut HeaderMap) {
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // Not `no-referrer`: under it a browser posts this server's own forms with
    // `Origin: null`. Other sites learn nothing either way.
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
}

#[derive(Serialize)]
struct ErrorPage {
    #[serde(flatten)]
    frame: Frame,
    heading: String,
    message: String,
}

fn error_page(error: &ApiError, signed_in: Option<String>) -> Response {
    let heading = match error.status {
        StatusCode::NOT_FOUND => "Not found",
        StatusCode::SERVICE_UNAVAILABLE => "The cluster cannot be reached",
        _ => "Something went wrong",
    };
    page(
        error.status,
        "error",
        &ErrorPage {
            frame: Frame {
                title: heading.to_string(),
                refresh: None,
                signed_in,
            },
            heading: heading.to_string(),
            message: error.message.clone(),
        },
    )
}

fn see_other(location: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}

async fn to_jobs() -> Response {
    see_other(routes::UI_JOBS.template())
}

/// A place to go back to after signing in: one of our own pages, never another site.
fn safe_next(next: Option<&str>) -> String {
    next.filter(|n| routes::is_page(n) && !n.contains(['\\', '\r', '\n']))
        .unwrap_or(routes::UI_JOBS.template())
        .to_string()
}

/// The way to the sign-in page, coming back to a page afterwards.
struct ToSignIn(String);

impl IntoResponse for ToSignIn {
    fn into_response(self) -> Response {
        see_other(&self.0)
    }
}

/// The page's caller, or the way to the sign-in (coming back to `here`).
fn signed_in(state: &AppState, headers: &HeaderMap, here: &str) -> Result<Caller, ToSignIn> {
    auth::page_caller(&state.access, headers).ok_or_else(|| {
        let next = pai_api::path::path(here);
        ToSignIn(format!("{}?next={next}", routes::UI_SIGN_IN.template()))
    })
}

/// Shown in the header: who is signed in (nobody signs in to an open server).
fn who(state: &AppState, caller: &Caller) -> Option<String> {
    state.access.signs_in().then(|| caller.user.clone())
}

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

async fn job_list(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<view::ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    // A malformed query lists everything (the page is for people).
    let query = query.map(|q| q.0).unwrap_or_default();
    let caller = match signed_in(&state, &headers, routes::UI_JOBS.template()) {
        Ok(caller) => caller,
        Err(to_sign_in) => return to_sign_in.into_response(),
    };
    match jobs::visible_rows(&state, &caller, None).await {
        Ok(rows) => {
            let whose = (!caller.admin).then(|| caller.user.clone());
            let rows: Vec<&pai_api::jobs::JobSummary> = rows.iter().map(|r| &r.summary).collect();
            let mut data = view::jobs_page(&rows, whose, now_ms(), &query);
            data.frame.signed_in = who(&state, &caller);
            page(StatusCode::OK, "jobs", &data)
        }
        Err(e) => error_page(&e, who(&state, &caller)),
    }
}

/// Why a page of a job is not shown: no sign-in yet, or the API's error.
enum Refused {
    SignIn(ToSignIn),
    Error(ApiError, Option<String>),
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        match self {
            Self::SignIn(to_sign_in) => to_sign_in.into_response(),
            Self::Error(error, signed_in) => error_page(&error, signed_in),
        }
    }
}

/// The caller of a job's page (at `here`) and the job, if they may see it: the API's
/// own rule ([`Job::find`]), so a page of someone else's job is the API's 404.
async fn caller_and_job(
    state: &AppState,
    headers: &HeaderMap,
    here: &str,
    user: &str,
    job: &str,
) -> Result<(Caller, Job), Refused> {
    let caller = signed_in(state, headers, here).map_err(Refused::SignIn)?;
    match Job::find(state, &caller, user, job).await {
        Ok(found) => Ok((caller, found)),
        // A malformed name in a page's path is a page that does not exist.
        Err(e) if e.status == StatusCode::BAD_REQUEST => Err(Refused::Error(
            ApiError::no_job(user, job),
            who(state, &caller),
        )),
        Err(e) => Err(Refused::Error(e, who(state, &caller))),
    }
}

async fn job_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((user, job)): Path<(String, String)>,
    query: Result<axum::extract::Query<view::TaskPage>, axum::extract::rejection::QueryRejection>,
) -> Response {
    // A malformed paging query shows the first page (the page is for people).
    let paging = query.map(|q| q.0).unwrap_or_default();
    let here = view::job_url(&user, &job);
    let (caller, found) = match caller_and_job(&state, &headers, &here, &user, &job).await {
        Ok(found) => found,
        Err(refused) => return refused.into_response(),
    };
    let framework = found.framework;
    let made = state.views.of(&framework);
    let job_view = &made.view;
    let mut tails = read_tails(&state, &framework, job_view).await;
    let mut tail_of = |role: &str, index: u32| {
        tails.remove(&(role.to_string(), index)).unwrap_or_else(|| {
            let waiting = job_view
                .task_roles
                .get(role)
                .and_then(|r| r.task_statuses.get(index as usize))
                .is_some_and(|t| t.task_state == JobState::Waiting);
            if waiting {
                Tail::Missing("not started".to_string())
            } else {
                Tail::NotRead
            }
        })
    };
    let mut data = view::job_page(job_view, &mut tail_of, &caller.user, now_ms(), &paging);
    data.frame.signed_in = who(&state, &caller);
    data.resources = view::resources(&framework);
    data.spec = framework.spec_text().map(|(text, _)| text.to_string());
    // The commands work as printed from another terminal: they name this server unless it
    // is the command line's default (the guard let only this server's own names through).
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    let server = format!("{}://{host}", if state.tls { "https" } else { "http" });
    if !host.is_empty() && server != "http://127.0.0.1:9186" {
        data.flags = format!(" --server {server}{}", data.flags);
    }
    page(StatusCode::OK, "job", &data)
}

/// The last lines of the first tasks that started, read side by side, by role and index.
async fn read_tails(
    state: &AppState,
    framework: &pai_contract::Framework,
    job_view: &pai_api::status::JobView,
) -> std::collections::HashMap<(String, u32), Tail> {
    let started: Vec<(String, u32)> = job_view
        .task_roles
        .iter()
        .flat_map(|(role, r)| {
            r.task_statuses
                .iter()
                .filter(|t| t.task_state != JobState::Waiting)
                .map(move |t| (role.clone(), t.task_index))
        })
        .take(TAILS_PER_PAGE)
        .collect();
    let reads = started.iter().map(|(role, index)| {
        let backend = state.backend.clone();
        let pod = framework
            .role(role)
            .map(|r| framework.pod_name(r, *index))
            .unwrap_or_default();
        // Read more than is shown: the runtime's lines are shown apart from the user's.
        async move {
            let tail = backend.log_tail(&pod, TAIL_LINES * 4, TAIL_BYTES * 4).await;
            (tail, backend.log_rotated(&pod).await)
        }
    });
    let read = futures::future::join_all(reads).await;
    started
        .into_iter()
        .zip(read)
        .map(|(key, (result, rotated))| {
            let tail = match result {
                Ok(lines) => {
                    use pai_contract::log_lines::{Source, keep};
                    let last = |source| {
                        pai_backend::backend::last_lines(
                            keep(&lines, source).as_bytes(),
                            TAIL_LINES,
                            TAIL_BYTES,
                        )
                    };
                    Tail::Lines {
                        user: last(Source::User),
                        runtime: last(Source::Runtime),
                        rotated,
                    }
                }
                // A task that never ran says why it never will have one, not "yet".
                Err(pai_backend::backend::BackendError::NotFound) => Tail::Missing(
                    pai_api::status::never_started(framework, &key.0, key.1)
                        .unwrap_or_else(|| "no log yet".to_string()),
                ),
                Err(e) => Tail::Missing(format!("log not available: {e}")),
            };
            (key, tail)
        })
        .collect()
}

#[derive(Deserialize, Default)]
struct LogPageQuery {
    #[serde(default)]
    source: crate::routes::LogSource,
}

/// A task's whole log in the current attempt, as plain text (never HTML: a task writes
/// what it likes): the user command's output; the runtime's lines with
/// `?source=runtime`, both with `?source=all`.
async fn task_log(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((user, job, role, index)): Path<(String, String, String, String)>,
    query: Result<axum::extract::Query<LogPageQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    // The API's `source`; a page for people: an unknown one shows the output.
    let source: pai_contract::log_lines::Source =
        query.map(|q| q.0.source).unwrap_or_default().into();
    let here = format!("{}/logs/{role}/{index}", view::job_url(&user, &job));
    let (caller, framework) = match caller_and_job(&state, &headers, &here, &user, &job).await {
        Ok((caller, found)) => (caller, found.framework),
        Err(refused) => return refused.into_response(),
    };
    let no_task = || {
        ApiError::no_job(&user, &job)
            .with_message(format!("job {user}~{job} has no task {role}-{index}"))
    };
    let (pod, number) = match (framework.role(&role), index.parse::<u32>()) {
        (Some(r), Ok(i)) if i < r.tasks() => (framework.pod_name(r, i), i),
        _ => return error_page(&no_task(), who(&state, &caller)),
    };
    let request = pai_backend::backend::LogRequest {
        part: pai_backend::backend::LogPart::Lines(source),
        follow: false,
        earlier: None,
        timestamps: false,
    };
    let main = state.backend.log(&pod, request).await;
    match main {
        Ok(stream) => with_headers(
            Body::from_stream(stream).into_response(),
            "text/plain; charset=utf-8",
        ),
        // As the API says it: a task that never ran says why it never will have one.
        Err(pai_backend::backend::BackendError::NotFound) => error_page(
            &pai_api::status::never_started(&framework, &role, number).map_or_else(
                || {
                    ApiError::no_job(&user, &job).with_message(format!(
                        "task {role}-{index} of job {user}~{job} has no log yet"
                    ))
                },
                crate::routes::never_started,
            ),
            who(&state, &caller),
        ),
        Err(e) => error_page(&e.into(), who(&state, &caller)),
    }
}

/// `POST /ui/jobs/{user}/{job}/stop` (the API's stop, then back to the job's page) and
/// `…/delete` (the API's delete, then the job list).
async fn job_action(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path((user, job, action)): Path<(String, String, String)>,
) -> Response {
    let here = view::job_url(&user, &job);
    let (caller, found) = match caller_and_job(&state, &headers, &here, &user, &job).await {
        Ok(found) => found,
        Err(refused) => return refused.into_response(),
    };
    let done = match action.as_str() {
        "stop" => jobs::set_execution(&state, &found, pai_api::jobs::Execution::Stop)
            .await
            .map(|()| here),
        "delete" => jobs::delete(&state, &found)
            .await
            .map(|()| routes::UI_JOBS.with(&[])),
        _ => Err(ApiError::no_route(&format!("{here}/{action}"))),
    };
    match done {
        Ok(next) => see_other(&next),
        Err(e) => error_page(&e, who(&state, &caller)),
    }
}

#[derive(Deserialize, Default)]
struct SubmitQuery {
    /// `user/job`: a job whose spec fills the form, under a new name.
    clone: Option<String>,
}

/// `GET /ui/submit`: the form, empty or with a job's spec to clone.
async fn submit_form(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<SubmitQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let query = query.map(|q| q.0).unwrap_or_default();
    let here = match &query.clone {
        Some(from) => format!(
            "{}?clone={}",
            routes::UI_SUBMIT.template(),
            pai_api::path::path(from)
        ),
        None => routes::UI_SUBMIT.with(&[]),
    };
    let caller = match signed_in(&state, &headers, &here) {
        Ok(caller) => caller,
        Err(to_sign_in) => return to_sign_in.into_response(),
    };
    let mut data = match query.clone {
        Some(_) => submit::SubmitPage::new(String::new()),
        None => submit::SubmitPage::with_example(),
    };
    if let Some((user, job)) = query.clone.as_deref().and_then(|c| c.split_once('/')) {
        match Job::find(&state, &caller, user, job).await {
            Ok(found) => {
                let (text, format) = found
                    .framework
                    .spec_text()
                    .unwrap_or(("", pai_translate::spec::SpecFormat::Yaml));
                data.text = submit::renamed(text, format, job, &submit::clone_name(job));
                data.cloned_from = Some(format!("{user}/{job}"));
            }
            Err(e) => data.errors.push(e.message),
        }
    }
    data.frame.signed_in = who(&state, &caller);
    page(StatusCode::OK, "submit", &data)
}

/// `POST /ui/submit` (multipart: `spec`, `file`, `action`): the API's submission (or its
/// dry run with `action=check`) as the signed-in user; the form again with the errors
/// next to the spec's lines, or the new job's link and warnings.
async fn submit_job(
    State(state): State<AppState>,
    headers: HeaderMap,
    multipart: Result<axum::extract::Multipart, axum::extract::multipart::MultipartRejection>,
) -> Response {
    let caller = match signed_in(&state, &headers, routes::UI_SUBMIT.template()) {
        Ok(caller) => caller,
        Err(to_sign_in) => return to_sign_in.into_response(),
    };
    let sent = match multipart {
        Ok(multipart) => submit::read(multipart).await,
        Err(e) => Err(format!("the form could not be read: {e}")),
    };
    let signed_in = who(&state, &caller);
    let answer = |status, mut data: submit::SubmitPage| {
        data.frame.signed_in = signed_in.clone();
        page(status, "submit", &data)
    };
    let sent = match sent {
        Ok(sent) => sent,
        Err(why) => {
            let mut data = submit::SubmitPage::new(String::new());
            data.errors.push(why);
            return answer(StatusCode::BAD_REQUEST, data);
        }
    };
    let data = submit::SubmitPage::new(sent.text.clone());
    let format = pai_translate::spec::SpecFormat::detect(&sent.text);
    // The spec's own errors, placed on its lines; then the API's submission itself.
    let spec = match pai_translate::spec::JobSpec::parse(&sent.text, format) {
        Ok(spec) => spec,
        Err(errors) => return answer(StatusCode::BAD_REQUEST, data.with_spec_errors(&errors)),
    };
    let user = match crate::extract::user_name(&caller.user) {
        Ok(user) => user,
        Err(e) => {
            let mut data = data;
            data.errors.push(e.message);
            return answer(e.status, data);
        }
    };
    let body = crate::extract::SpecBody {
        text: sent.text,
        format,
    };
    let mut data = data;
    match jobs::submit(&state, &caller, &user, None, sent.check, &body).await {
        Ok(jobs::Submitted::DryRun {
            framework,
            warnings,
        }) => {
            let tasks: u32 = framework.spec.task_roles.iter().map(|r| r.tasks()).sum();
            data.valid = Some(format!(
                "job {} is valid: {tasks} task{} in {} role{}",
                spec.name().as_str(),
                if tasks == 1 { "" } else { "s" },
                framework.spec.task_roles.len(),
                if framework.spec.task_roles.len() == 1 {
                    ""
                } else {
                    "s"
                },
            ));
            data.warnings = warnings;
            answer(StatusCode::OK, data)
        }
        Ok(jobs::Submitted::Created { job, warnings }) => {
            data.warnings = warnings;
            data.submitted = Some(submit::Submitted {
                url: view::job_url(user.as_str(), &job),
                job,
            });
            answer(StatusCode::CREATED, data)
        }
        Err(e) => {
            data.errors.push(e.message);
            answer(e.status, data)
        }
    }
}

#[derive(Serialize)]
struct SignInPage {
    #[serde(flatten)]
    frame: Frame,
    next: String,
    error: Option<String>,
    /// Where this server's tokens are.
    token_hint: String,
}

fn sign_in_page(
    state: &AppState,
    status: StatusCode,
    next: String,
    error: Option<String>,
) -> Response {
    page(
        status,
        "sign_in",
        &SignInPage {
            frame: Frame {
                title: "Sign in".to_string(),
                ..Frame::default()
            },
            next,
            error,
            token_hint: state.token_hint.to_string(),
        },
    )
}

#[derive(Deserialize)]
struct SignInQuery {
    next: Option<String>,
    /// The sign-in link `rest-lite serve` prints carries the token, as Jupyter's does.
    token: Option<String>,
}

async fn sign_in_form(State(state): State<AppState>, Query(query): Query<SignInQuery>) -> Response {
    let next = safe_next(query.next.as_deref());
    if !state.access.signs_in() {
        // Nothing to sign in to: every caller of this server may do everything.
        return see_other(&next);
    }
    match query.token {
        Some(token) => signed_in_as(&state, token.trim(), next),
        None => sign_in_page(&state, StatusCode::OK, next, None),
    }
}

#[derive(Deserialize)]
struct SignInForm {
    token: String,
    next: Option<String>,
}

async fn sign_in(State(state): State<AppState>, Form(form): Form<SignInForm>) -> Response {
    let next = safe_next(form.next.as_deref());
    if !state.access.signs_in() {
        return see_other(&next);
    }
    signed_in_as(&state, form.token.trim(), next)
}

/// Keeps `token` in the sign-in cookie and goes on to `next` (a page of ours, without
/// the token in its address); an unknown token gets the form again, with a 401.
fn signed_in_as(state: &AppState, token: &str, next: String) -> Response {
    if state.access.caller(Some(token)).is_none() {
        return sign_in_page(
            state,
            StatusCode::UNAUTHORIZED,
            next,
            Some("This token is not known to this server. Check it with the server's operator (rest-lite token makes one).".to_string()),
        );
    }
    let mut response = see_other(&next);
    if let Ok(cookie) = HeaderValue::from_str(&auth::session_cookie(Some(token), state.tls)) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

async fn sign_out(State(state): State<AppState>) -> Response {
    let mut response = see_other(routes::UI_SIGN_IN.template());
    if let Ok(cookie) = HeaderValue::from_str(&auth::session_cookie(None, state.tls)) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

/// `GET /docs`: the API's routes, each with its whole description as Markdown renders
/// it, from the same OpenAPI document the server serves.
async fn docs(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let mut data = docs::page();
    data.frame.signed_in = reader(&state, &headers);
    page(StatusCode::OK, "docs", &data)
}

/// Who reads a page anyone may read, for its header (the user and sign-out), if signed in.
fn reader(state: &AppState, headers: &HeaderMap) -> Option<String> {
    auth::page_caller(&state.access, headers).and_then(|caller| who(state, &caller))
}

/// `GET /docs/{page}`: a guide of `docs/` rendered (the same text as in the repository),
/// or a picture a guide shows.
async fn docs_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    if let Some(mut guide) = docs::guide(&name) {
        guide.frame.signed_in = reader(&state, &headers);
        return page(StatusCode::OK, "guide", &guide);
    }
    if let Some((_, bytes)) = docs::IMAGES.iter().find(|(n, _)| *n == name) {
        return with_headers(bytes.into_response(), "image/png");
    }
    error_page(&ApiError::no_route(&routes::DOCS_PAGE.with(&[&name])), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_signing_in_a_page_of_ours_and_never_another_site() {
        for ours in ["/ui/jobs", "/ui/jobs/alice/j?role=w", "/docs", "/docs#logs"] {
            assert_eq!(safe_next(Some(ours)), ours);
        }
        for elsewhere in [
            "//evil.example/ui/",
            "https://evil.example/ui/jobs",
            "/docsevil",
            "/ui/\\evil",
            "/api/v1/jobs",
        ] {
            assert_eq!(safe_next(Some(elsewhere)), "/ui/jobs", "{elsewhere}");
        }
    }

    /// A 10,000-task job (two roles) whose worker-7000 and worker-9000 failed.
    fn big() -> pai_api::status::JobView {
        let framework =
            pai_test_support::frameworks::framework("big", &[("ps", 2), ("worker", 9998)]);
        let mut view = pai_api::status::job_view(&framework, "/api/v1/user/alice/jobs/big");
        view.job_status.username = "alice".into();
        let worker = view.task_roles.get_mut("worker").expect("worker");
        for index in [7000, 9000] {
            worker.task_statuses[index].task_state = JobState::Failed;
        }
        // worker-7000 decided the outcome; worker-9000 was ended by the platform.
        worker.task_statuses[7000].decided_outcome = true;
        worker.task_statuses[7000].container_exit_code = Some(3);
        worker.task_statuses[9000].container_exit_code = Some(-220);
        worker.task_statuses[9000].container_exit_meaning = Some(pai_contract::exit::meaning(-220));
        view
    }

    fn rendered(view: &pai_api::status::JobView, paging: &view::TaskPage) -> String {
        let mut none = |_: &str, _: u32| view::Tail::NotRead;
        let data = view::job_page(view, &mut none, "alice", 0, paging);
        // Attribute values as a browser reads them (handlebars escapes `=` and `&`).
        TEMPLATES
            .render("job", &data)
            .expect("rendered")
            .replace("&#x3D;", "=")
            .replace("&amp;", "&")
    }

    #[test]
    fn a_ten_thousand_task_job_page_is_small_shows_the_failed_first_and_pages_the_rest() {
        let view = big();
        let html = rendered(&view, &view::TaskPage::default());
        assert!(html.len() < 200_000, "{} bytes", html.len());
        assert_eq!(
            html.matches("<tr id=\"task-").count(),
            2 + view::TASKS_PER_PAGE
        );
        // The failed ones first, whatever their index.
        let failed = html
            .find("id=\"task-worker-7000\"")
            .expect("worker-7000 shown");
        let first = html.find("id=\"task-worker-0\"").expect("worker-0 shown");
        assert!(failed < first);
        assert!(html.contains("id=\"task-worker-9000\""));
        // The task that decided the outcome is marked; the platform's code is explained.
        assert!(html.contains(
            "<tr id=\"task-worker-7000\" class=\"decided FAILED\">\n      <td><code>worker-7000</code><div class=\"note\">its end decided the job's outcome</div>"
        ));
        assert!(html.contains("<code>-220</code><div class=\"note\">stopped by the platform"));
        assert!(html.contains("2 FAILED, 9996 WAITING"), "the role's counts");
        assert!(html.contains("/ui/jobs/alice/big?role=worker&from=0"));

        // Paging through one role by index.
        let paged = view::TaskPage {
            role: Some("worker".into()),
            from: 100,
        };
        let html = rendered(&view, &paged);
        assert_eq!(html.matches("<tr id=\"task-").count(), view::TASKS_PER_PAGE);
        assert!(html.contains("id=\"task-worker-100\"") && html.contains("id=\"task-worker-199\""));
        assert!(
            !html.contains("id=\"task-ps-0\""),
            "only the role asked for"
        );
        assert!(html.contains("tasks 100–199 of 9998"));
        assert!(html.contains("?role=worker&from=0\">previous"));
        assert!(html.contains("?role=worker&from=200\">next"));
    }
}
