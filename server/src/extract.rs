//! What a handler takes from a request, each with a typed rejection that is the API's
//! `{code, message}` body: path and query parameters, the spec body (media type, size,
//! UTF-8), the job a path names (names, the caller's right to it, ownership).

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use serde::de::DeserializeOwned;

use pai_contract::Framework;

use super::auth::Caller;
use super::error::ApiError;
use crate::state::AppState;
use pai_translate::spec::names::framework_name;
use pai_translate::spec::{JobName, SpecFormat, UserName};

/// Path parameters; a malformed path (not UTF-8, say) is a 400 with the JSON body.
pub struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(value)| Self(value))
            .map_err(|e| ApiError::bad_request(format!("the path: {}", e.body_text())))
    }
}

/// Query parameters; a malformed query is a 400 with the JSON body naming the parameter.
pub struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(value)| Self(value))
            .map_err(|e| ApiError::bad_request(format!("the query: {}", e.body_text())))
    }
}

/// A JSON body; a malformed one is a 400 (415 without the JSON media type, 413 when too
/// large) with the JSON body.
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(request, state).await {
            Ok(axum::Json(value)) => Ok(Self(value)),
            Err(e) => Err(match e.status() {
                StatusCode::UNSUPPORTED_MEDIA_TYPE => {
                    ApiError::unsupported_type("").with_message(e.body_text())
                }
                StatusCode::PAYLOAD_TOO_LARGE => ApiError::too_large(0).with_message(e.body_text()),
                _ => ApiError::bad_request(format!("the body: {}", e.body_text())),
            }),
        }
    }
}

/// The caller, put in the request by the authentication middleware.
fn caller(parts: &Parts) -> Caller {
    parts
        .extensions
        .get::<Caller>()
        .cloned()
        .unwrap_or_else(Caller::nobody)
}

/// Parses a user name from a path or query, as a 400 naming the rule.
pub fn user_name(user: &str) -> Result<UserName, ApiError> {
    UserName::parse(user)
        .map_err(|rule| ApiError::bad_request(format!("user name {user:?}: {rule}")))
}

/// `/api/v1/user/{user}/…`.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct UserPath {
    /// The jobs' owner (OpenPAI's user name rule).
    pub user: String,
}

/// `/api/v1/user/{user}/…`: a valid user name and who is asking.
pub struct Owner {
    pub user: UserName,
    pub caller: Caller,
}

impl FromRequestParts<AppState> for Owner {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let ApiPath(UserPath { user }) = ApiPath::from_request_parts(parts, state).await?;
        Ok(Self {
            user: user_name(&user)?,
            caller: caller(parts),
        })
    }
}

/// `/api/v1/user/{user}/jobs/{job}…`.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct JobPath {
    /// The job's owner (OpenPAI's user name rule).
    pub user: String,
    /// The job's name (`jobName`, OpenPAI's rule).
    pub job: String,
}

/// `/api/v1/user/{user}/jobs/{job}…`: the job, if the caller may see it and it is
/// really that user's job of that name. Any other case is the same 404, so that nobody
/// learns of another's job.
pub struct Job {
    pub user: UserName,
    pub job: String,
    pub framework: std::sync::Arc<Framework>,
}

impl Job {
    /// The job's URL, the base of its task log links.
    pub fn url(&self) -> String {
        pai_api::routes::JOB.with(&[self.user.as_str(), &self.job])
    }

    /// The 404 of this job.
    pub fn not_found(&self) -> ApiError {
        ApiError::no_job(self.user.as_str(), &self.job)
    }

    /// The Framework's name.
    pub fn name(&self) -> &str {
        self.framework.name()
    }
}

impl Job {
    /// The job `user`/`job` if `caller` may see it and it is really that user's job of
    /// that name; any other case is the same 404. The one rule of the API and the pages.
    pub async fn find(
        state: &AppState,
        caller: &Caller,
        user: &str,
        job: &str,
    ) -> Result<Self, ApiError> {
        let user = user_name(user)?;
        let not_found = || ApiError::no_job(user.as_str(), job);
        if !caller.may_act_for(user.as_str()) {
            return Err(not_found());
        }
        // A name no job can have names no job.
        let job_name = JobName::parse(job).map_err(|_| not_found())?;
        let framework = state
            .backend
            .get(&framework_name(&user, &job_name))
            .await?
            .ok_or_else(not_found)?;
        // The name is a digest: the annotations say whose job it really is.
        if framework.user_name() != Some(user.as_str()) || framework.job_name() != Some(job) {
            return Err(not_found());
        }
        Ok(Self {
            user,
            job: job.to_string(),
            framework,
        })
    }
}

impl FromRequestParts<AppState> for Job {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let ApiPath(JobPath { user, job }) = ApiPath::from_request_parts(parts, state).await?;
        Self::find(state, &caller(parts), &user, &job).await
    }
}

/// A job spec in the body: its text (UTF-8, within the body limit) and format, from its
/// media type, which must be JSON's or YAML's (415 otherwise, before the body is read).
pub struct SpecBody {
    pub text: String,
    pub format: SpecFormat,
}

/// The format a media type names; `None` for types that are no spec format.
fn format_of(content_type: &str) -> Option<SpecFormat> {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "application/json" => Some(SpecFormat::Json),
        "application/yaml" | "application/x-yaml" | "text/yaml" | "text/x-yaml" => {
            Some(SpecFormat::Yaml)
        }
        // Anything else, no type included: a page of any site may send text/plain or a
        // form without asking, so a spec must say it is one.
        _ => None,
    }
}

impl FromRequest<AppState> for SpecBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let content_type = request
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default();
        let format =
            format_of(&content_type).ok_or_else(|| ApiError::unsupported_type(&content_type))?;
        let bytes =
            Bytes::from_request(request, state)
                .await
                .map_err(|rejection| match rejection.status() {
                    StatusCode::PAYLOAD_TOO_LARGE => ApiError::too_large(state.body_limit),
                    _ => ApiError::bad_request(rejection.body_text()),
                })?;
        let text = String::from_utf8(bytes.to_vec())
            .map_err(|_| ApiError::bad_request("the job spec is not UTF-8 text"))?;
        Ok(Self { text, format })
    }
}
