//! OpenPAI v1 job specs in, FrameworkController Frameworks out: no HTTP, no Kubernetes
//! client, so other tools can embed the translation.
//!
//! The data path: spec text → [`spec::JobSpec`] (valid by construction) →
//! [`ports::allocate`] → [`transform::Transformer`] builds the [`pai_contract::Framework`],
//! whose pod templates carry the static environment of [`env`].

pub mod config;
pub mod env;
pub mod gang;
pub mod gpus;
pub mod place;
pub mod ports;
pub mod priority;
pub mod spec;
pub mod storages;
pub mod transform;
pub mod warnings;
