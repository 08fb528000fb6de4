//! rest-lite's integration tests, as one test binary.
//!
//! Every test binary links all of the crate's dependencies (kube, axum, k8s-openapi:
//! some 75 MB each); one binary per crate, one module per feature, keeps a clean
//! build's disk and link time to a fraction of one binary per file.

mod common;

mod backends;
mod cli;
mod closed;
mod code_dir;
mod config_reload;
mod containers;
mod deploy;
mod docs;
mod gang;
mod gpus;
mod history;
mod job_access;
mod layout;
mod local;
mod local_safety;
mod memory;
mod output;
mod pages;
mod peers;
mod portal;
mod ports;
mod printed_commands;
mod real_cluster;
mod retries;
mod sdk;
mod serve_command;
mod server_restarts;
mod storages;
mod tokens;
mod training;
mod v2;
