//! The routes: the API behind the token, the pages, the probes and the OpenAPI document,
//! with the guard in front of them all.

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, put};

use pai_api::routes::*;

use crate::state::AppState;
use crate::{auth, guard, metrics, openapi, routes, storages, v2};

/// Every route of the API.
pub fn router(state: AppState) -> Router {
    let limit = state.body_limit;
    let api = Router::new()
        .route(JOBS.template(), get(routes::list_jobs))
        .route(
            USER_JOBS.template(),
            get(routes::list_user_jobs).post(routes::submit),
        )
        .route(
            JOB.template(),
            get(routes::get_job)
                .put(routes::submit_named)
                .delete(routes::delete_job),
        )
        .route(JOB_CONFIG.template(), get(routes::get_config))
        .route(JOB_SSH.template(), get(routes::get_ssh))
        .route(JOB_SSH_KEY.template(), get(routes::get_ssh_key))
        .route(JOB_LOGS.template(), get(routes::get_logs))
        .route(JOB_EXECUTION.template(), put(routes::set_execution))
        .route(WHOAMI.template(), get(routes::whoami))
        // OpenPAI's v2 REST API, as its SDK calls it.
        .route(V2_JOBS.template(), get(v2::list).post(v2::submit))
        .route(V2_JOB.template(), get(v2::get_job))
        .route(V2_JOB_CONFIG.template(), get(v2::get_config))
        .route(
            V2_JOB_TAG.template(),
            put(v2::add_tag).delete(v2::delete_tag),
        )
        .route(V2_JOB_EXECUTION.template(), put(v2::set_execution))
        .route(V2_ATTEMPT.template(), get(v2::get_attempt))
        .route(V2_TASK.template(), get(v2::get_task))
        .route(V2_TASK_LOGS.template(), get(v2::get_task_logs))
        .route(V2_STORAGES.template(), get(storages::list))
        .route(V2_STORAGE.template(), get(storages::get));
    // Job counts by state are no one's business but the server's callers'.
    let api = if state.metrics_elsewhere {
        api
    } else {
        api.route(METRICS.template(), get(routes::metrics))
    };
    let api = api
        .layer(axum::middleware::from_fn_with_state(
            (state.access.clone(), state.token_hint.clone()),
            auth::authenticate,
        ))
        .layer(DefaultBodyLimit::max(limit));
    Router::new()
        .route(HEALTHZ.template(), get(routes::healthz))
        .route(READYZ.template(), get(routes::readyz))
        .route(OPENAPI.template(), get(openapi::openapi_json))
        .merge(api)
        .merge(crate::pages::router())
        .fallback(routes::no_route)
        .method_not_allowed_fallback(routes::no_method)
        .route_layer(axum::middleware::from_fn_with_state(
            state.metrics.clone(),
            metrics::count,
        ))
        // Before anything else: a request a browser was tricked into sending runs nothing.
        .layer(axum::middleware::from_fn_with_state(
            site(&state),
            guard::check,
        ))
        .with_state(state)
}

/// `/metrics` alone, for its own listener (`--metrics-listen`): no token, as Prometheus
/// scrapes an internal port; the job counts it shows name no job or user.
pub fn metrics_router(state: AppState) -> Router {
    Router::new()
        .route(METRICS.template(), get(routes::metrics))
        .fallback(routes::no_route)
        .layer(axum::middleware::from_fn_with_state(
            site(&state),
            guard::check,
        ))
        .with_state(state)
}

fn site(state: &AppState) -> guard::Site {
    guard::Site {
        hosts: state.hosts.clone(),
        tls: state.tls,
    }
}
