//! Test support shared by the crates' tests. Nothing here ships in a binary.

pub mod apiserver;
pub mod frameworks;
pub mod needs;
pub mod postgres;
pub mod rbac;
pub mod scratch;
pub mod validation;

pub use apiserver::{ApiServer, Fault};
pub use scratch::scratch;
