//! `rest-lite serve`: the OpenPAI v1 jobs API over a [`backend::Backend`].

pub mod auth;
pub mod backend;
pub mod error;
pub mod extract;
pub mod guard;
pub mod job_access;
pub mod jobs;
pub mod kube_backend;
pub mod machine_token;
pub mod metrics;
pub mod openapi;
pub mod publisher;
pub mod routes;
pub mod ssh;
pub mod tls;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, put};

use crate::transform::Transformer;

/// Default limit of a request body: 1 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

#[derive(Clone)]
pub struct AppState {
    pub backend: Arc<dyn backend::Backend>,
    pub transformer: Arc<Transformer>,
    pub body_limit: usize,
    /// Who may call.
    pub access: auth::Access,
    /// The host names it answers to besides addresses and `localhost`.
    pub hosts: Arc<guard::Hosts>,
    /// Whether it is served over TLS (the sign-in cookie is then `Secure`).
    pub tls: bool,
    /// Whether `/metrics` is served on its own listener (`--metrics-listen`) and so not
    /// on this one.
    pub metrics_elsewhere: bool,
    /// How long a job watch lasts when the client gives no `timeoutSeconds`.
    pub watch_limit: std::time::Duration,
    pub metrics: Arc<metrics::Metrics>,
}

impl AppState {
    /// A server over `backend` making Frameworks by `config`, callers admitted by
    /// `access`: the default body limit, no other host names, plain HTTP, fresh metrics.
    pub fn new(
        backend: Arc<dyn backend::Backend>,
        config: crate::config::ClusterConfig,
        access: auth::Access,
    ) -> Self {
        Self {
            backend,
            transformer: Arc::new(Transformer::new(config)),
            body_limit: DEFAULT_BODY_LIMIT,
            access,
            hosts: Default::default(),
            tls: false,
            metrics_elsewhere: false,
            watch_limit: std::time::Duration::from_secs(u64::from(routes::DEFAULT_WATCH_SECONDS)),
            metrics: Default::default(),
        }
    }
}

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
            state.clone(),
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
            state.clone(),
            metrics::count,
        ))
        // Before anything else: a request a browser was tricked into sending runs nothing.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
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
            state.clone(),
            guard::check,
        ))
        .with_state(state)
}
