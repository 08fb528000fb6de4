//! The API's errors as they travel: every error answer is an [`ErrorBody`], whose `code`
//! is one of [`ErrorCode`] (OpenPAI's names, `<Name>Error`). The server writes them, the
//! client reads them back into the same type, and what either side decides on an error
//! it decides on the code, never on the message's words.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What kind of error an answer is. A code this build does not know (a newer server's)
/// reads as `UnknownError`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
pub enum ErrorCode {
    /// The request (a spec, a query, a body) breaks a rule: the message names it.
    InvalidParametersError,
    /// No such job, or not the caller's to see.
    NoJobError,
    /// The job exists; the task, attempt or log asked for does not.
    NoTaskError,
    /// The task has no such log and will not have it: it is no longer kept, the backend
    /// keeps no such view of it (one stream alone, on a cluster), or the task's attempt
    /// ended before it ran. The message says which.
    NoLogError,
    /// The job has no such tag.
    NoTagError,
    /// No task of the job can be logged in to.
    NoJobSshInfoError,
    /// No such storage.
    NoStorageError,
    /// The name is taken, or the change conflicts with the job's state.
    ConflictJobError,
    PayloadTooLargeError,
    /// A body that is not JSON or YAML.
    UnsupportedMediaTypeError,
    /// A `Host` this server does not answer to (DNS rebinding).
    ForbiddenHostError,
    /// A state change a page of another site (or port) asked for.
    ForbiddenOriginError,
    /// No token, or one this server does not know.
    UnauthorizedUserError,
    /// The caller may not do this (another user's job).
    ForbiddenUserError,
    /// The cluster (or this machine's store) cannot answer now: ask again.
    ServiceUnavailableError,
    /// No route at this path.
    NotFoundError,
    /// The route does not take this method.
    MethodNotAllowedError,
    /// Anything else (and any code this build does not know).
    #[serde(other)]
    UnknownError,
}

impl ErrorCode {
    /// Its name on the wire (`NoJobError`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidParametersError => "InvalidParametersError",
            Self::NoJobError => "NoJobError",
            Self::NoTaskError => "NoTaskError",
            Self::NoLogError => "NoLogError",
            Self::NoTagError => "NoTagError",
            Self::NoJobSshInfoError => "NoJobSshInfoError",
            Self::NoStorageError => "NoStorageError",
            Self::ConflictJobError => "ConflictJobError",
            Self::PayloadTooLargeError => "PayloadTooLargeError",
            Self::UnsupportedMediaTypeError => "UnsupportedMediaTypeError",
            Self::ForbiddenHostError => "ForbiddenHostError",
            Self::ForbiddenOriginError => "ForbiddenOriginError",
            Self::UnauthorizedUserError => "UnauthorizedUserError",
            Self::ForbiddenUserError => "ForbiddenUserError",
            Self::ServiceUnavailableError => "ServiceUnavailableError",
            Self::NotFoundError => "NotFoundError",
            Self::MethodNotAllowedError => "MethodNotAllowedError",
            Self::UnknownError => "UnknownError",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The body of every error answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// `<Name>Error`, e.g. `NoJobError`.
    #[schema(example = "NoJobError")]
    pub code: ErrorCode,
    /// What went wrong, naming the field and the rule where there is one.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_travel_by_their_names_and_unknown_ones_are_unknown() {
        let body = ErrorBody {
            code: ErrorCode::NoJobError,
            message: "job alice~x was not found".into(),
        };
        let text = serde_json::to_string(&body).expect("json");
        assert_eq!(
            text,
            r#"{"code":"NoJobError","message":"job alice~x was not found"}"#
        );
        assert_eq!(
            serde_json::from_str::<ErrorBody>(&text).expect("read"),
            body
        );
        let newer: ErrorBody =
            serde_json::from_str(r#"{"code":"SomeNewError","message":"m"}"#).expect("read");
        assert_eq!(newer.code, ErrorCode::UnknownError);
        for code in [ErrorCode::ForbiddenOriginError, ErrorCode::UnknownError] {
            assert_eq!(
                serde_json::to_value(code).expect("json"),
                serde_json::json!(code.as_str())
            );
        }
    }
}
