//! The routes: the API behind the token, the pages, the probes and the OpenAPI document,
//! with the guard in front of them all.

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, put};

use crate::state::AppState;
use crate::{auth, guard, metrics, openapi, routes, v2};

/// Every route of the API.
pub fn router(state: AppState) -> Router {
    let limit = state.body_limit;
    let api = Router::new()
        .route("/api/v1/jobs", get(routes::list_jobs))
        .route(
            "/api/v1/user/{user}/jobs",
            get(routes::list_user_jobs).post(routes::submit),
        )
        .route(
            "/api/v1/user/{user}/jobs/{job}",
            get(routes::get_job)
                .put(routes::submit_named)
                .delete(routes::delete_job),
        )
        .route(
            "/api/v1/user/{user}/jobs/{job}/config",
            get(routes::get_config),
        )
        .route("/api/v1/user/{user}/jobs/{job}/ssh", get(routes::get_ssh))
        .route(
            "/api/v1/user/{user}/jobs/{job}/ssh/key",
            get(routes::get_ssh_key),
        )
        .route("/api/v1/user/{user}/jobs/{job}/logs", get(routes::get_logs))
        .route("/api/v1/whoami", get(routes::whoami))
        // OpenPAI's v2 REST API, as its SDK calls it.
        .route("/api/v2/jobs", get(v2::list).post(v2::submit))
        .route("/api/v2/jobs/{job_id}", get(v2::get_job))
        .route("/api/v2/jobs/{job_id}/config", get(v2::get_config))
        .route(
            "/api/v2/jobs/{job_id}/tag",
            put(v2::add_tag).delete(v2::delete_tag),
        )
        .route(
            "/api/v2/jobs/{job_id}/executionType",
            put(v2::set_execution),
        )
        .route(
            "/api/v2/jobs/{job_id}/attempts/{attempt_id}",
            get(v2::get_attempt),
        )
        .route(
            "/api/v2/jobs/{job_id}/attempts/{attempt_id}/taskRoles/{role}/taskIndex/{index}/attempts",
            get(v2::get_task),
        )
        .route(
            "/api/v2/jobs/{job_id}/attempts/{attempt_id}/taskRoles/{role}/taskIndex/{index}/attempts/{task_attempt_id}/logs",
            get(v2::get_task_logs),
        )
        .route(
            "/api/v1/user/{user}/jobs/{job}/executionType",
            put(routes::set_execution),
        );
    // Job counts by state are no one's business but the server's callers'.
    let api = if state.metrics_elsewhere {
        api
    } else {
        api.route("/metrics", get(routes::metrics))
    };
    let api = api
        .layer(axum::middleware::from_fn_with_state(
            state.access.clone(),
            auth::authenticate,
        ))
        .layer(DefaultBodyLimit::max(limit));
    Router::new()
        .route("/healthz", get(routes::healthz))
        .route("/readyz", get(routes::readyz))
        .route(openapi::DOCUMENT_PATH, get(openapi::openapi_json))
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
        .route("/metrics", get(routes::metrics))
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
