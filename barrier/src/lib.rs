//! The gang barrier: wait until every task of a Framework has an address, then hand out
//! the peer table.
//!
//! The rule is one pure function ([`readiness::readiness`]), applied where the addresses
//! are first known: by rest-lite, which publishes each attempt's table once
//! ([`published`]), or, for a Framework nobody publishes for, by each task itself. The
//! waiting is on the Kubernetes API ([`kube_source`]) or, with no cluster, on the files
//! the embedded executor writes ([`local_source`]). Every way ends alike: [`Passed`], or a
//! [`BarrierError`] whose [`BarrierError::exit_code`] FrameworkController understands.

pub mod config;
pub mod injector;
pub mod kube_source;
pub mod local_source;
pub mod logging;
pub mod outcome;
pub mod output;
pub mod peers;
pub mod published;
pub mod readiness;
pub mod retry;

pub use config::{Attempt, BarrierConfig, Source};
pub use outcome::{BarrierError, Passed};
pub use peers::{Peer, PeerTable, RolePeers};
pub use readiness::{Progress, Readiness, readiness};
