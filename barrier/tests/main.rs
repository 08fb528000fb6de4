//! The barrier's integration tests, as one test binary.
//!
//! Every test binary links all of the crate's dependencies (kube, axum, k8s-openapi:
//! some 75 MB each); one binary per crate, one module per feature, keeps a clean
//! build's disk and link time to a fraction of one binary per file.

mod binary;
mod kube;
mod local;
mod published;
mod readiness;
