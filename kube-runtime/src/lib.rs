//! kube-runtime: the program inside every task.
//!
//! - `entry` ([`entry::entry`]), the init container: install, `prep/`, barrier, env file,
//!   peer table, `main.sh`.
//! - `run` ([`run::run`]), PID 1 of the main container: env file, `init/` daemons, the
//!   user command under a supervisor that forwards signals, reaps zombies and exits with
//!   the user command's status.
//! - [`kept_log`]: each keeps its log's end in the task's ConfigMap as it ends.

pub mod budget;
pub mod cli;
pub mod code;
pub mod dynamic_env;
pub mod entry;
pub mod kept_log;
pub mod layout;
pub mod logs;
pub mod oom;
pub mod output;
pub mod peer_files;
pub mod procfs;
pub mod run;
pub mod shared;
pub mod shell;
pub mod supervisor;
pub mod training_env;
