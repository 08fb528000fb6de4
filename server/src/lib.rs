//! `rest-lite serve`: the OpenPAI v1 jobs API over a [`backend::Backend`] (a cluster's
//! API server, or this machine's embedded default), its pages and its metrics.

pub mod admission;
pub mod auth;
pub mod backend;
pub mod backoff;
pub mod depends;
pub mod error;
pub mod events;
pub mod extract;
pub mod guard;
pub mod history;
pub mod job_access;
pub mod jobs;
pub mod kube_backend;
pub mod local;
pub mod log_keeper;
pub mod machine_token;
pub mod metrics;
pub mod openapi;
pub mod pages;
pub mod pod_log;
pub mod publisher;
pub mod router;
pub mod routes;
pub mod ssh;
pub mod state;
pub mod store;
pub mod tls;
pub mod v2;
pub mod views;

pub use router::{metrics_router, router};
pub use state::{AppState, DEFAULT_BODY_LIMIT};
