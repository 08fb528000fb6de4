//! `rest-lite serve`: the OpenPAI v1 jobs API over a [`backend::Backend`].

pub mod auth;
pub mod backend;
pub mod error;
pub mod extract;
pub mod jobs;
pub mod kube_backend;
pub mod metrics;
pub mod openapi;
pub mod publisher;
pub mod routes;
pub mod ssh;

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
    /// `None`: no token file, every caller may do everything (the server then listens
    /// on loopback only).
    pub tokens: Option<Arc<auth::Tokens>>,
    pub metrics: Arc<metrics::Metrics>,
}

impl AppState {
    /// A server over `backend` making Frameworks by `config`: the default body limit, no
    /// token file, fresh metrics.
    pub fn new(backend: Arc<dyn backend::Backend>, config: crate::config::ClusterConfig) -> Self {
        Self {
            backend,
            transformer: Arc::new(Transformer::new(config)),
            body_limit: DEFAULT_BODY_LIMIT,
            tokens: None,
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
        )
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ))
        .layer(DefaultBodyLimit::max(limit));
    Router::new()
        .route("/healthz", get(routes::healthz))
        .route("/readyz", get(routes::readyz))
        .route("/metrics", get(routes::metrics))
        .route(openapi::DOCUMENT_PATH, get(openapi::openapi_json))
        .merge(api)
        .merge(crate::pages::router())
        .fallback(routes::no_route)
        .method_not_allowed_fallback(routes::no_method)
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::count,
        ))
        .with_state(state)
}
