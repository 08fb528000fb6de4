//! The failures the server answers with, as a real API server words them: a Kubernetes
//! `Status` of a code and reason (404, 409 for a stale resourceVersion, 422 for an object
//! validation refuses, 400 for a body that is not JSON).

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::key::Key;

/// A Kubernetes `Status` failure.
pub(super) struct Failure {
    code: u16,
    reason: &'static str,
    message: String,
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let body = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": self.message, "reason": self.reason, "code": self.code,
        });
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (code, axum::Json(body)).into_response()
    }
}

/// A `Status` failure of `code`, `reason` and `message`.
pub(super) fn status(code: u16, reason: &'static str, message: String) -> Response {
    Failure {
        code,
        reason,
        message,
    }
    .into_response()
}

/// 409: a write named a resourceVersion that is no longer the object's.
pub(super) fn stale(key: &Key) -> Response {
    status(
        409,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on {} \"{}\": the object has been modified; please apply your changes to the latest version and try again",
            key.resource, key.name
        ),
    )
}

/// 404: no object at `key`.
pub(super) fn not_found(key: &Key) -> Response {
    status(
        404,
        "NotFound",
        format!("{} \"{}\" not found", key.resource, key.name),
    )
}

/// 422: the object is refused as [`crate::validation::admit`] refused it.
pub(super) fn unprocessable(invalid: &crate::validation::Invalid) -> Response {
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        axum::Json(invalid.status()),
    )
        .into_response()
}

/// A request's JSON body, or 400.
pub(super) fn parse_body(body: &Bytes) -> Result<Value, Failure> {
    serde_json::from_slice(body).map_err(|e| Failure {
        code: 400,
        reason: "BadRequest",
        message: format!("invalid body: {e}"),
    })
}
