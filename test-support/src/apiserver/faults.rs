//! The faults tests inject ([`Fault`]: 401/403 for a while, 429 with Retry-After, 5xx,
//! slow answers), and what the server answers in place of serving while one is set.

use std::time::Duration;

use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::answers::status;

/// What the server answers every request with while it is set ([`ApiServer::fault`]).
///
/// [`ApiServer::fault`]: super::ApiServer::fault
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// 401 Unauthorized or 403 Forbidden (an API server whose authenticator or
    /// authorizer caches are still filling after a restart answers so for a while).
    Deny(u16),
    /// 429 Too Many Requests with `Retry-After` (and the Status's `retryAfterSeconds`).
    TooManyRequests { retry_after: u32 },
    /// A 5xx Status (500, 503, …).
    ServerError(u16),
    /// Every answer comes this late.
    Slow(Duration),
}

impl Fault {
    /// The answer to `method` on `path` in place of serving it, or `None` for
    /// [`Fault::Slow`], which serves (late).
    pub(super) fn refusal(self, method: &Method, path: &str) -> Option<Response> {
        let response = match self {
            Fault::Slow(_) => return None,
            Fault::Deny(401) => status(401, "Unauthorized", "Unauthorized".to_string()),
            Fault::Deny(code) => status(
                code,
                "Forbidden",
                format!(
                    "{method} {path} is forbidden: User \"system:serviceaccount:test:job\" cannot do it"
                ),
            ),
            Fault::TooManyRequests { retry_after } => {
                // As the API server's priority and fairness answers: the header and the
                // Status's details both say when to come back.
                let body = json!({
                    "kind": "Status", "apiVersion": "v1", "metadata": {},
                    "status": "Failure", "message": "Too many requests, please try again later.",
                    "reason": "TooManyRequests", "code": 429,
                    "details": {"retryAfterSeconds": retry_after},
                });
                let mut response =
                    (StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response();
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, retry_after.into());
                response
            }
            Fault::ServerError(code) => status(
                code,
                if code == 503 {
                    "ServiceUnavailable"
                } else {
                    "InternalError"
                },
                "the server is not ready to answer (an etcd leader election, say)".to_string(),
            ),
        };
        Some(response)
    }
}
