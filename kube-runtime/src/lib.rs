//! kube-runtime: the program inside every task.
//!
//! - `entry` ([`entry::entry`]), the init container: install, `prep/`, barrier, env file,
//!   peer table, `main.sh`.
//! - `run` ([`run::run`]), PID 1 of the main container: env file, `init/` daemons, the
//!   user command under a supervisor that forwards signals, reaps zombies and exits with
//!   the user command's status.
//!
//! Neither writes to the API as it ends: the server reads each container's log as it
//! terminates and keeps its end ([`pai_contract::kept_logs`]).

pub mod budget;
pub mod cli;
pub mod code;
pub mod dynamic_env;
pub mod entry;
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
