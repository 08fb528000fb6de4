//! The translation's integration tests, as one test binary.
//!
//! Every test binary links all of the crate's dependencies (kube, axum, k8s-openapi:
//! some 75 MB each); one binary per crate, one module per feature, keeps a clean
//! build's disk and link time to a fraction of one binary per file.

/// The specs the tests write, shared by every crate's tests.
use pai_test_support::specs as common;

mod bad_specs;
mod framework;
mod names;
mod properties;
mod snapshots;
mod v1_real;
mod v2_bad_specs;
mod v2_real;
