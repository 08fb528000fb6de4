//! The one error type of the HTTP API: it owns the status code and the
//! `{"code": "<Name>Error", "message": …}` body. No handler builds an error body itself.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

pub use pai_api::error::{ErrorBody, ErrorCode};
use pai_backend::backend::BackendError;
use pai_translate::spec::SpecErrors;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: ErrorCode,
    pub message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    /// The same error with another message.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }

    pub fn bad_spec(errors: &SpecErrors) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidParametersError,
            errors.to_string(),
        )
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidParametersError,
            message,
        )
    }

    pub fn no_job(user: &str, job: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            ErrorCode::NoJobError,
            format!("job {user}~{job} was not found"),
        )
    }

    /// The job exists; the task, attempt or log asked for does not (`NoTaskError`).
    pub fn no_task(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, ErrorCode::NoTaskError, message)
    }

    pub fn no_ssh(user: &str, job: &str, why: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            ErrorCode::NoJobSshInfoError,
            format!("job {user}~{job} has no ssh information: {why}"),
        )
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, ErrorCode::ConflictJobError, message)
    }

    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::PayloadTooLargeError,
            format!("the request body is larger than {limit} bytes"),
        )
    }

    pub fn unsupported_type(content_type: &str) -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::UnsupportedMediaTypeError,
            format!(
                "content type {content_type:?} is not JSON or YAML: send the spec with Content-Type: application/json or application/yaml (curl: -H 'Content-Type: application/yaml' --data-binary @job.yaml)"
            ),
        )
    }

    /// A `Host` this server does not answer to (DNS rebinding).
    pub fn forbidden_host(host: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            ErrorCode::ForbiddenHostError,
            format!(
                "this server does not answer to host {host:?}: use its address, localhost, or a name its operator gave with --public-url"
            ),
        )
    }

    /// A state-changing request from another site's page.
    pub fn forbidden_origin(origin: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            ErrorCode::ForbiddenOriginError,
            format!(
                "a request from {origin:?} may not change anything here: only this server's own pages (or programs, which send no Origin) may"
            ),
        )
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            ErrorCode::UnauthorizedUserError,
            message,
        )
    }

    /// No such storage (OpenPAI's 404 `NoStorageError`).
    pub fn no_storage(name: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            ErrorCode::NoStorageError,
            format!("storage {name} is not found"),
        )
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            ErrorCode::ForbiddenUserError,
            message,
        )
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::ServiceUnavailableError,
            message,
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::UnknownError,
            message,
        )
    }

    /// No route at this path.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            ErrorCode::NotFoundError,
            format!("no route {path:?}: the API is under /api/v1 (see /api/v1/openapi.json)"),
        )
    }

    /// The route does not take this method.
    pub fn method_not_allowed(method: &str, path: &str) -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::MethodNotAllowedError,
            format!("{path:?} does not take {method} (see /api/v1/openapi.json)"),
        )
    }
}

/// What a backend said, as the API says it. The job's names are not known here; where a
/// message should name them, the caller words it (see `jobs::submit`).
impl From<pai_backend::depends::DependencyError> for ApiError {
    fn from(error: pai_backend::depends::DependencyError) -> Self {
        use pai_backend::depends::DependencyError;
        match error {
            DependencyError::Refused(message) => Self::bad_request(message),
            DependencyError::Backend(error) => error.into(),
        }
    }
}

impl From<BackendError> for ApiError {
    fn from(error: BackendError) -> Self {
        match error {
            BackendError::NotFound => Self::new(
                StatusCode::NOT_FOUND,
                ErrorCode::NoJobError,
                "the job was not found (deleted meanwhile?)",
            ),
            BackendError::Gone(message) | BackendError::NoSuchLog(message) => {
                Self::new(StatusCode::NOT_FOUND, ErrorCode::NoLogError, message)
            }
            BackendError::Conflict(message) => Self::conflict(message),
            BackendError::Invalid(reason) => {
                Self::bad_request(format!("the cluster rejected the job: {reason}"))
            }
            BackendError::Refused(reason) => Self::bad_request(reason),
            BackendError::Tag(e @ pai_job::tags::TagError::Missing(_)) => {
                Self::new(StatusCode::NOT_FOUND, ErrorCode::NoTagError, e.to_string())
            }
            BackendError::Tag(e @ pai_job::tags::TagError::TooMany) => {
                Self::conflict(e.to_string())
            }
            BackendError::Tag(e) => Self::bad_request(e.to_string()),
            e @ BackendError::Unavailable { .. } => Self::unavailable(e.to_string()),
            BackendError::History(message) | BackendError::CredentialsRefused(message) => {
                Self::unavailable(message)
            }
            BackendError::Other(message) => Self::internal(message),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            code: self.code,
            message: self.message,
        };
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            // The cluster (or this machine's store) is expected back: say when to ask.
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static(RETRY_AFTER_SECONDS),
            );
        }
        response
    }
}

/// What a 503 asks the client to wait before it asks again.
const RETRY_AFTER_SECONDS: &str = "2";
