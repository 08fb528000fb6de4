//! OpenPAI job specs in (v1 and job protocol v2), FrameworkController Frameworks out: no
//! HTTP, no Kubernetes client, so other tools can embed the translation.
//!
//! The data path: spec text (either version, [`spec`]) → [`spec::JobSpec`] (valid by
//! construction) →
//! [`ports::allocate`] → [`transform::Transformer`] builds the [`pai_contract::Framework`],
//! whose pod templates carry the static environment of [`env`], under the installation's
//! [`config::ClusterConfig`] (its GPU types, storages, gang engine and priority classes
//! shape the Framework; its retention and history sections are the server's, in the one
//! file an installation writes).

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
