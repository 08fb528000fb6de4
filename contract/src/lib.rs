//! The contract between rest-lite (which writes Frameworks) and kube-runtime (which runs
//! inside their pods): the Framework type, environment variable names, paths, labels and
//! completion codes. Both sides depend on this crate and on nothing else of each other.

#![warn(missing_docs)]

pub mod access;
pub mod backoff;
pub mod code_dir;
pub mod env;
pub mod exit;
pub mod failure;
pub mod framework;
pub mod kept_logs;
pub mod log_lines;
pub mod log_rotation;
pub mod meta;
pub mod ordered_log;
pub mod paths;
pub mod ports;
pub mod priority;
pub mod read;
pub mod results;
pub mod template;
pub mod training;

pub use framework::{Framework, FrameworkSpec, FrameworkStatus};
pub use ports::PortPlan;
pub use read::{SpecFormat, TaskPorts};
