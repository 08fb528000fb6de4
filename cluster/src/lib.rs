//! The Kubernetes backend: Frameworks in a cluster's API server, which
//! FrameworkController runs. One watch of the namespace's Frameworks fills the server's
//! copy ([`store`]) that every read and every controller shares; the backend
//! ([`backend::KubeBackend`]) starts its controllers itself, each a reconcile function on
//! the one controller runtime ([`pai_backend::controller`]): the peer tables
//! ([`publisher`]), the attempts' history ([`history`]), Events ([`events`]), jobs that
//! wait for jobs ([`pai_backend::depends`]); beside them, kube's own watchers read the
//! admission verdicts ([`admission`], [`waiting`]) and keep finished tasks' logs
//! ([`log_keeper`]); under Kueue, the quota of jobs that ended is given back
//! ([`queue_release`]).

pub mod admission;
pub mod archive;
pub mod backend;
pub mod credentials;
pub mod disruptions;
pub mod errors;
pub mod events;
pub mod history;
pub mod job_access;
pub mod log_keeper;
pub mod pg_tls;
pub mod pod_log;
pub mod publisher;
pub mod queue_release;
pub mod retention;
pub mod store;
pub mod waiting;

pub use backend::KubeBackend;
