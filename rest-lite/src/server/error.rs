//! The one error type of the HTTP API: it owns the status code and the
//! `{"code": "<Name>Error", "message": …}` body. No handler builds an error body itself.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::spec::SpecErrors;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

/// The body of every error response.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ErrorBody<'a> {
    /// `<Name>Error`, e.g. `NoJobError`.
    code: &'a str,
    /// What went wrong, naming the field and the rule where there is one.
    message: &'a str,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
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
            "InvalidParametersError",
            errors.to_string(),
        )
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "InvalidParametersError", message)
    }

    pub fn no_job(user: &str, job: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "NoJobError",
            format!("job {user}~{job} was not found"),
        )
    }

    pub fn no_ssh(user: &str, job: &str, why: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "NoJobSshInfoError",
            format!("job {user}~{job} has no ssh information: {why}"),
        )
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "ConflictJobError", message)
    }

    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "PayloadTooLargeError",
            format!("the request body is larger than {limit} bytes"),
        )
    }

    pub fn unsupported_type(content_type: &str) -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaTypeError",
            format!("content type {content_type:?} is not JSON or YAML"),
        )
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "UnauthorizedUserError", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "ForbiddenUserError", message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailableError",
            message,
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "UnknownError", message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            code: self.code,
            message: &self.message,
        };
        (self.status, Json(body)).into_response()
    }
}
