//! What a job's pods may do in the cluster, and the names that say it.
//!
//! Each job has a ServiceAccount of its own, bound to a Role that may only `get`, `list`
//! and `watch` (`list` and `watch` by a `metadata.name` field selector, which RBAC checks
//! against `resourceNames`) two objects: the job's own Framework and its peer table; and
//! `get` and `update` its own tasks' kept-log ConfigMaps ([`crate::kept_logs`]), which
//! the server makes. The table has one name for every attempt (each attempt's table
//! replaces the last; the barrier takes only the one of its attempt's instance UID), so
//! one Role covers every attempt and no grant changes while the job runs.
//!
//! Both containers mount a short-lived token, projected by the kubelet: the init
//! container's barrier reads with it, and the runtime of each container writes its log's
//! end with it as it ends. The user command can read the token too (it is the same
//! user): with it, it can read what its own job's tasks are given anyway and rewrite its
//! own job's kept logs; nothing of another job, nothing it could create.

/// The job's ServiceAccount, Role and RoleBinding (one name for the three).
pub fn job_account(framework: &str) -> String {
    format!("{framework}-job")
}

/// The ConfigMap holding the job's peer table, every attempt's in turn.
pub fn peer_table(framework: &str) -> String {
    format!("{framework}-peers")
}

/// Where the init container's token is mounted: where Kubernetes' clients look for an
/// in-cluster configuration (`token`, `ca.crt`, `namespace`).
pub const TOKEN_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// How long the init container's token is valid: the shortest the API server accepts.
/// The kubelet replaces it before it expires, and clients read it again.
pub const TOKEN_EXPIRATION_SECONDS: i64 = 600;
/// The ConfigMap every namespace holds with the cluster's CA (`ca.crt`).
pub const ROOT_CA_CONFIG_MAP: &str = "kube-root-ca.crt";
/// What the job's Role allows on its Framework and its peer table.
pub const VERBS: &[&str] = &["get", "list", "watch"];
/// What the job's Role allows on its tasks' kept-log ConfigMaps (`create` cannot be
/// limited to names: the server makes them).
pub const KEPT_LOG_VERBS: &[&str] = &["get", "update"];
