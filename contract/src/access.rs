//! What a job's pods may do in the cluster, and the names that say it.
//!
//! Each job has a ServiceAccount of its own, bound to a Role that may only `get`, `list`
//! and `watch` (`list` and `watch` by a `metadata.name` field selector, which RBAC checks
//! against `resourceNames`) two objects: the job's own Framework and its peer table. The
//! table has one name for every attempt (each attempt's table
//! replaces the last; the barrier takes only the one of its attempt's instance UID), so
//! one Role covers every attempt and no grant changes while the job runs.
//!
//! Only the init container mounts a short-lived token, projected by the kubelet: its
//! barrier reads with it. The main container, where the user command runs, has none: the
//! server keeps the tasks' logs ([`crate::kept_logs`]), so a job can write nothing in the
//! API, and read nothing beyond what its tasks are given anyway.

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
