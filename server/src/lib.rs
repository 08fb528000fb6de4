//! `rest-lite serve`: the OpenPAI v1 jobs API over a [`pai_backend::Backend`] (a cluster's
//! API server, or this machine's embedded default), its pages and its metrics.

pub mod auth;
pub mod error;
pub mod extract;
pub mod guard;
pub mod index;
pub mod jobs;
pub mod live;
pub mod machine_token;
pub mod metrics;
pub mod openapi;
pub mod pages;
pub mod router;
pub mod routes;
pub mod ssh;
pub mod state;
pub mod storages;
pub mod tls;
pub mod v2;
pub mod views;

pub use router::{metrics_router, router};
pub use state::{AppState, DEFAULT_BODY_LIMIT};
