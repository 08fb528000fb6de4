//! What runs Frameworks, as the server sees it: the [`backend::Backend`] trait that the
//! cluster's backend (`pai-cluster`) and the embedded default (`pai-local`) implement,
//! the one controller runtime every controller runs on ([`controller`]), and jobs that
//! wait for jobs ([`depends`]), on either backend; and the server's memory policy
//! ([`memory`]).

pub mod backend;
pub mod controller;
pub mod depends;
pub mod memory;
pub mod retention;

pub use backend::{Backend, BackendError};
