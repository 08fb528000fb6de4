//! Test support shared by the crates' tests. Nothing here ships in a binary.

pub mod apiserver;
pub mod at_exit;
pub mod frameworks;
pub mod http;
pub mod images;
pub mod needs;
pub mod postgres;
pub mod rbac;
pub mod scratch;
#[cfg(feature = "specs")]
pub mod specs;
pub mod validation;

// What the benchmarks measured, and BENCHMARKS.md's tables made of it.
pub mod bench_page;
pub mod bench_results;

pub use apiserver::{ApiServer, Fault};
pub use scratch::scratch;

/// A TCP port on 127.0.0.1 that nothing listens on now (the system's pick).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
