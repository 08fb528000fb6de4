//! rest-lite: OpenPAI v1 multi-role job specs in, FrameworkController Frameworks out.
//!
//! The data path: spec text → [`spec::JobSpec`] (valid by construction) →
//! [`ports::allocate`] → [`transform::Transformer`] builds the [`pai_contract::Framework`],
//! whose pod templates carry the static environment of [`env`].

pub mod client;
pub mod config;
pub mod env;
pub mod local;
pub mod pages;
pub mod ports;
pub mod server;
pub mod spec;
pub mod status;
pub mod transform;
pub mod warnings;
