//! The server library's integration tests, by feature, as one test binary.
//!
//! Every test binary links all of the crate's dependencies (kube, axum, k8s-openapi:
//! some 75 MB each); one binary per crate, one module per feature, keeps a clean
//! build's disk and link time to a fraction of one binary per file.

mod support;

mod auth;
mod control;
mod copy;
mod cost;
mod events;
mod job_page;
mod lists;
mod logs;
mod operations;
mod ssh;
mod submit;
mod watch;
