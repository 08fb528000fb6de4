//! `GET /api/v2/storages` and `GET /api/v2/storages/{name}`: the team storages the caller
//! may use, as OpenPAI's v2 API listed them for its SDK (`client.storage`) and portal.
//! From the config (read again when it changes), not the cluster: a claim's volume is
//! the operator's business, the server shows what it mounts.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use pai_api::error::ErrorBody;
use pai_api::storages::{StorageDetail, StorageList, StorageSummary};
use pai_translate::storages::StorageConfig;

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{ApiPath, ApiQuery};
use crate::state::AppState;

/// `?default=true`: only the caller's default storages (the SDK's `getStorages(true)`).
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StorageQuery {
    pub default: Option<bool>,
}

/// `/api/v2/storages/{name}`.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct StoragePath {
    /// The storage's name.
    pub name: String,
}

/// The errors of the storage routes.
#[derive(utoipa::IntoResponses)]
pub enum StorageErrors {
    /// A malformed query.
    #[response(status = 400)]
    BadRequest(#[to_schema] ErrorBody),
    /// No or unknown bearer token.
    #[response(status = 401)]
    Unauthorized(#[to_schema] ErrorBody),
    /// The caller may not use the storage (`ForbiddenUserError`).
    #[response(status = 403)]
    Forbidden(#[to_schema] ErrorBody),
    /// No such storage (`NoStorageError`).
    #[response(status = 404)]
    NotFound(#[to_schema] ErrorBody),
}

fn summary(storage: &StorageConfig) -> StorageSummary {
    StorageSummary {
        name: storage.name.clone(),
        share: storage.share,
        volume_name: storage.claim().to_string(),
        default: storage.default,
    }
}

/// `GET /api/v2/storages`: the storages the caller may use.
#[utoipa::path(
    get,
    path = pai_api::routes::V2_STORAGES.template(),
    operation_id = "listStorages",
    tag = "v2",
    params(StorageQuery),
    responses(
        (status = 200, description = "the storages the caller may use", body = StorageList),
        StorageErrors
    )
)]
pub async fn list(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiQuery(query): ApiQuery<StorageQuery>,
) -> Response {
    let who = caller.who();
    let storages = state
        .storages
        .current()
        .iter()
        .filter(|s| s.allows(&who))
        .filter(|s| query.default != Some(true) || s.default)
        .map(summary)
        .collect();
    Json(StorageList { storages }).into_response()
}

/// `GET /api/v2/storages/{name}`: one storage, if the caller may use it.
#[utoipa::path(
    get,
    path = pai_api::routes::V2_STORAGE.template(),
    operation_id = "getStorage",
    tag = "v2",
    params(StoragePath),
    responses(
        (status = 200, description = "the storage", body = StorageDetail),
        StorageErrors
    )
)]
pub async fn get(
    State(state): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiPath(path): ApiPath<StoragePath>,
) -> Result<Response, ApiError> {
    let storage = state
        .storages
        .get(&path.name)
        .ok_or_else(|| ApiError::no_storage(&path.name))?;
    if !storage.allows(&caller.who()) {
        return Err(ApiError::forbidden(format!(
            "user {} is not allowed to use storage {}",
            caller.user, storage.name
        )));
    }
    let (kind, data) = match (&storage.path, state.backend.runs_here()) {
        (Some(path), true) => ("other", serde_json::json!({"path": path})),
        _ => ("unknown", serde_json::json!({"claimName": storage.claim()})),
    };
    Ok(Json(StorageDetail {
        summary: summary(&storage),
        kind: kind.to_string(),
        data,
        read_only: storage.read_only,
    })
    .into_response())
}
