//! The cluster-specific settings of a rest-lite installation, read from a YAML file.
//! Nothing cluster-specific is hard-coded elsewhere: every field has a default that works
//! on a plain cluster, and risky ones (host networking, extra capabilities) are off.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::ports::PortRange;
use pai_job::names::is_dns_label;

/// The most JSON of [`ClusterConfig::failure_patterns`].
pub const FAILURE_PATTERNS_MAX_BYTES: usize = 16 * 1024;

/// Cluster settings. See `deploy/rest-lite/config.yaml` for an annotated example.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// Namespace of every Framework.
    pub namespace: String,
    /// Image of the init container that runs kube-runtime.
    pub runtime_image: String,
    /// `Always`, `IfNotPresent` or `Never`; unset lets Kubernetes choose.
    pub runtime_image_pull_policy: Option<String>,
    /// Run tasks in the node's network namespace; ports then become host ports.
    pub host_network: bool,
    /// Secrets for pulling user and runtime images.
    pub image_pull_secrets: Vec<String>,
    /// Node directory that keeps task logs after pods are gone; unset keeps them in the pod.
    pub log_host_path: Option<String>,
    /// Linux capabilities added to the main container (e.g. `IPC_LOCK` for RDMA).
    pub extra_capabilities: Vec<String>,
    /// Value of `PAI_DEFAULT_FS_URI`.
    pub default_fs_uri: String,
    /// Ports handed out to requests without `beginAt`.
    pub port_range: PortRange,
    /// `KUBE_APISERVER_ADDRESS` for the barrier; empty: the in-cluster address.
    pub kube_apiserver_address: String,
    /// Seconds between SIGTERM and SIGKILL when a task is stopped.
    pub termination_grace_period_sec: i64,
    /// Seconds the runtime gives the user command between the TERM it passes on and its
    /// KILL (`PAI_KILL_GRACE_SEC`); at most `terminationGracePeriodSec`. Unset: the pod's
    /// grace period less 2 s (at least half of it), so the kubelet's KILL never comes
    /// before the runtime has ended the command and reported its status.
    pub kill_grace_sec: Option<i64>,
    /// Cap of each task's `user.log` in bytes (`PAI_LOG_MAX_BYTES`; the previous cap's
    /// worth is kept as `user.log.1`).
    pub user_log_max_bytes: u64,
    /// The last bytes of each task attempt's log kept at most after its pod is gone
    /// (`pai_contract::kept_logs`: the server reads them as the container ends). 0 keeps
    /// nothing (the cluster's log collector, if any).
    pub kept_log_bytes: u64,
    /// What one job keeps at most of its tasks' logs, all together: its one kept-log
    /// ConfigMap's bound, split evenly among its tasks. 0 keeps nothing.
    pub kept_log_bytes_per_job: u64,
    /// Seconds FrameworkController waits for a pod's graceful deletion before forcing it.
    pub pod_graceful_deletion_timeout_sec: Option<i64>,
    /// `BARRIER_CHECK_TIMEOUT_SEC` for the init container; unset: the barrier's default.
    pub barrier_timeout_sec: Option<u32>,
    /// Gang admission: which scheduler or queue admits a job's pods all together
    /// ([`crate::gang`]); none by default.
    pub gang: crate::gang::GangConfig,
    /// The cluster's priority class of each of OpenPAI's job priority classes
    /// ([`crate::priority`]).
    pub priority_classes: crate::priority::PriorityClasses,
    /// The operator's own failure patterns (`name`, `userLogRegex`, optional `exitCode`),
    /// ranked before the runtime's defaults when a task's failure is named from its
    /// output ([`pai_contract::failure`]); passed to every task.
    pub failure_patterns: Vec<pai_contract::failure::Pattern>,
    /// GPU types (`gpuType`) and, on this machine, its GPUs ([`crate::gpus`]).
    pub gpus: crate::gpus::GpuConfig,
    /// OpenPAI's team storages and who may use them ([`crate::storages`]).
    pub storages: Vec<crate::storages::StorageConfig>,
    /// The wait before the next attempt of a job whose attempts end quickly
    /// ([`pai_job::restarts`]).
    pub restart_backoff: RestartBackoffConfig,
    /// How many attempts' files (logs, working directories) the embedded default keeps
    /// per job: the latest, the current one included.
    pub kept_attempts: u32,
    /// The embedded default: the size past which a task's `container.log` rotates (the
    /// kubelet's `containerLogMaxSize`, 10 MiB).
    pub container_log_max_bytes: u64,
    /// The embedded default: a task's `container.log` files kept, the current one
    /// included (the kubelet's `containerLogMaxFiles`, 5).
    pub container_log_max_files: u32,
    /// How long finished jobs are kept ([`RetentionConfig`]).
    pub retention: RetentionConfig,
    /// On a cluster, where finished jobs' records outlive their Frameworks
    /// ([`HistoryConfig`]).
    pub history: HistoryConfig,
}

/// `history`: on a cluster, a PostgreSQL database that keeps each finished job's record
/// (its Framework as it ended, its attempts, its tasks' kept logs), so that its
/// Framework can be deleted from the cluster without losing the job from any read.
/// Without one, finished Frameworks stay in the cluster until `retention` deletes the
/// job. Ignored on this machine, where the state directory keeps the history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct HistoryConfig {
    /// The database, as a libpq connection string or URL
    /// (`postgresql://rest-lite@postgres.pai.svc/rest_lite`); a password is better in
    /// `databaseFile`.
    pub database: Option<String>,
    /// A file that holds the connection string (a mounted Secret's key).
    pub database_file: Option<PathBuf>,
    /// Seconds a finished job's Framework stays in the cluster once its record is
    /// written (its pods' objects, Events and kept-log ConfigMaps go with it).
    pub framework_kept_sec: u64,
}

/// A finished Framework stays in the cluster an hour once its record is written.
pub const DEFAULT_FRAMEWORK_KEPT_SEC: u64 = 3600;

impl Default for HistoryConfig {
    fn default() -> Self {
        Self {
            database: None,
            database_file: None,
            framework_kept_sec: DEFAULT_FRAMEWORK_KEPT_SEC,
        }
    }
}

impl HistoryConfig {
    /// The connection string, from `database` or read from `databaseFile`; `None`: no
    /// history database.
    pub fn connection(&self) -> Result<Option<String>, ConfigError> {
        match (&self.database, &self.database_file) {
            (Some(_), Some(_)) => Err(ConfigError::Invalid {
                field: "history.databaseFile",
                rule: "give database or databaseFile, not both".to_string(),
            }),
            (Some(inline), None) => Ok(Some(inline.clone())),
            (None, Some(path)) => std::fs::read_to_string(path)
                .map(|text| Some(text.trim().to_string()))
                .map_err(|source| ConfigError::Read {
                    path: path.clone(),
                    source,
                }),
            (None, None) => Ok(None),
        }
    }

    /// How long a finished Framework stays once its record is written.
    pub fn framework_kept(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.framework_kept_sec)
    }
}

/// `retention`: finished jobs past these bounds are deleted, oldest end first (their
/// files, their Framework, every read of them). Running and waiting jobs are never
/// deleted by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// The most finished jobs kept, the newest ends; 0: no bound by count.
    pub finished_jobs: u32,
    /// Finished jobs that ended longer ago than this many days are deleted; 0: no bound
    /// by age.
    pub finished_job_days: u32,
    /// Seconds after a job's end that its tasks keep the files they needed to run (their
    /// scripts, environment files, ssh setup), for a person to look into; then only
    /// their logs and results stay. 0: they go at the job's end.
    pub task_files_kept_sec: u64,
}

/// Finished jobs kept unless configured.
pub const DEFAULT_FINISHED_JOBS: u32 = 10_000;

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            finished_jobs: DEFAULT_FINISHED_JOBS,
            finished_job_days: 0,
            task_files_kept_sec: 3600,
        }
    }
}

/// `restartBackoff`: the kubelet's numbers unless set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct RestartBackoffConfig {
    /// The wait after the first quick attempt; 0 turns the back-off off.
    pub first_sec: u64,
    /// The longest wait.
    pub cap_sec: u64,
    /// An attempt that ran this long starts the count again.
    pub reset_after_sec: u64,
}

impl Default for RestartBackoffConfig {
    fn default() -> Self {
        let d = pai_job::restarts::RestartBackoff::default();
        Self {
            first_sec: d.first.as_secs(),
            cap_sec: d.cap.as_secs(),
            reset_after_sec: d.reset_after.as_secs(),
        }
    }
}

impl RestartBackoffConfig {
    pub fn policy(&self) -> pai_job::restarts::RestartBackoff {
        use std::time::Duration;
        pai_job::restarts::RestartBackoff {
            first: Duration::from_secs(self.first_sec),
            cap: Duration::from_secs(self.cap_sec),
            reset_after: Duration::from_secs(self.reset_after_sec),
        }
    }
}

/// Attempts whose files are kept unless configured.
pub const DEFAULT_KEPT_ATTEMPTS: u32 = 5;

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            namespace: "default".to_string(),
            runtime_image: "kube-runtime:0.1.0".to_string(),
            runtime_image_pull_policy: Some("IfNotPresent".to_string()),
            host_network: false,
            image_pull_secrets: Vec::new(),
            log_host_path: None,
            extra_capabilities: Vec::new(),
            default_fs_uri: String::new(),
            port_range: PortRange::default(),
            kube_apiserver_address: String::new(),
            termination_grace_period_sec: 30,
            kill_grace_sec: None,
            user_log_max_bytes: 64 * 1024 * 1024,
            kept_log_bytes: pai_contract::kept_logs::DEFAULT_BYTES,
            kept_log_bytes_per_job: pai_contract::kept_logs::JOB_BYTES,
            pod_graceful_deletion_timeout_sec: Some(1800),
            barrier_timeout_sec: None,
            gang: Default::default(),
            priority_classes: Default::default(),
            failure_patterns: Vec::new(),
            gpus: Default::default(),
            storages: Vec::new(),
            restart_backoff: Default::default(),
            kept_attempts: DEFAULT_KEPT_ATTEMPTS,
            container_log_max_bytes: 10 * 1024 * 1024,
            container_log_max_files: 5,
            retention: Default::default(),
            history: Default::default(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config {path} is not valid: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config field {field}: {rule}")]
    Invalid { field: &'static str, rule: String },
}

impl ClusterConfig {
    /// The runtime's grace period between TERM and KILL (see [`ClusterConfig::kill_grace_sec`]).
    pub fn kill_grace(&self) -> i64 {
        let pod = self.termination_grace_period_sec.max(0);
        self.kill_grace_sec
            .unwrap_or_else(|| (pod - 2).max(pod / 2))
    }

    /// Reads and checks a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::read(&text, path)
    }

    /// Reads and checks the text of a config (`path`: where it is, as errors say it).
    pub fn read(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let config: ClusterConfig = if text.trim().is_empty() {
            ClusterConfig::default()
        } else {
            serde_saphyr::from_str(text).map_err(|e| ConfigError::Parse {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?
        };
        config.check()?;
        Ok(config)
    }

    /// Checks every field's rule.
    // Long: one rule per field of the cluster config, in the file's order.
    pub fn check(&self) -> Result<(), ConfigError> {
        let invalid = |field, rule: String| Err(ConfigError::Invalid { field, rule });
        if !is_dns_label(&self.namespace) {
            return invalid(
                "namespace",
                format!("{:?} is not a Kubernetes namespace name", self.namespace),
            );
        }
        if self.runtime_image.trim().is_empty() || self.runtime_image.contains(char::is_whitespace)
        {
            return invalid(
                "runtimeImage",
                format!("{:?} is not an image reference", self.runtime_image),
            );
        }
        if let Some(policy) = &self.runtime_image_pull_policy
            && !matches!(policy.as_str(), "Always" | "IfNotPresent" | "Never")
        {
            return invalid(
                "runtimeImagePullPolicy",
                format!("{policy:?} is not Always, IfNotPresent or Never"),
            );
        }
        if let Some(cap) = self
            .extra_capabilities
            .iter()
            .find(|c| c.is_empty() || !c.chars().all(|ch| ch.is_ascii_uppercase() || ch == '_'))
        {
            return invalid(
                "extraCapabilities",
                format!("{cap:?} is not a capability name like IPC_LOCK"),
            );
        }
        if let Some(path) = &self.log_host_path
            && !path.starts_with('/')
        {
            return invalid("logHostPath", format!("{path:?} is not an absolute path"));
        }
        if self.termination_grace_period_sec < 0 {
            return invalid(
                "terminationGracePeriodSec",
                "must not be negative".to_string(),
            );
        }
        if let Some(kill) = self.kill_grace_sec
            && !(0..=self.termination_grace_period_sec).contains(&kill)
        {
            return invalid(
                "killGraceSec",
                format!(
                    "{kill} must be from 0 to terminationGracePeriodSec ({})",
                    self.termination_grace_period_sec
                ),
            );
        }
        if self.user_log_max_bytes == 0 {
            return invalid("userLogMaxBytes", "must be at least 1".to_string());
        }
        // A job's kept logs are one ConfigMap, which holds at most 1 MiB, names included.
        let most = pai_contract::kept_logs::MAP_BYTES;
        if self.kept_log_bytes_per_job > most {
            return invalid(
                "keptLogBytesPerJob",
                format!(
                    "{} is more than a job's one kept-log ConfigMap holds: at most {most}",
                    self.kept_log_bytes_per_job
                ),
            );
        }
        if self.kept_log_bytes > most {
            return invalid(
                "keptLogBytes",
                format!(
                    "{} is more than a job's one kept-log ConfigMap holds: at most {most}",
                    self.kept_log_bytes
                ),
            );
        }
        if let Err(e) = pai_contract::failure::check(&self.failure_patterns) {
            return invalid("failurePatterns", e.to_string());
        }
        // Every task's environment carries them.
        let size = serde_json::to_string(&self.failure_patterns).map_or(0, |j| j.len());
        if size > FAILURE_PATTERNS_MAX_BYTES {
            return invalid(
                "failurePatterns",
                format!(
                    "{size} bytes of JSON; at most {FAILURE_PATTERNS_MAX_BYTES} (every task's environment carries them)"
                ),
            );
        }
        if self.restart_backoff.cap_sec < self.restart_backoff.first_sec {
            return invalid(
                "restartBackoff.capSec",
                format!(
                    "{} is less than firstSec ({})",
                    self.restart_backoff.cap_sec, self.restart_backoff.first_sec
                ),
            );
        }
        if self.container_log_max_files < 2 {
            return invalid(
                "containerLogMaxFiles",
                "must be at least 2 (the current file and one before it)".to_string(),
            );
        }
        if self.container_log_max_bytes < 1024 {
            return invalid(
                "containerLogMaxBytes",
                format!("{} is less than 1024", self.container_log_max_bytes),
            );
        }
        if self.kept_attempts == 0 {
            return invalid(
                "keptAttempts",
                "must be at least 1 (the current attempt's files)".to_string(),
            );
        }
        if let Err(rule) = crate::storages::check(&self.storages) {
            return invalid("storages", rule);
        }
        if let Err((field, rule)) = self.gpus.check() {
            return invalid(field, rule);
        }
        let gang = &self.gang;
        for (field, value) in [
            ("gang.schedulerName", &gang.scheduler_name),
            ("gang.defaultQueue", &gang.default_queue),
            ("gang.priorityClassName", &gang.priority_class_name),
        ] {
            if let Some(value) = value
                && !is_dns_label(value)
            {
                return invalid(
                    field,
                    format!(
                        "{value:?} is not a name of lowercase letters, digits and '-' (at most 63)"
                    ),
                );
            }
        }
        for (field, name) in self.priority_classes.fields() {
            if !pai_job::names::is_dns_subdomain(name) {
                return invalid(
                    field,
                    format!("{name:?} is not a PriorityClass name (a DNS subdomain name)"),
                );
            }
        }
        if gang.engine == crate::gang::Engine::Kueue && gang.default_queue.is_none() {
            return invalid(
                "gang.defaultQueue",
                "kueue needs the LocalQueue of jobs that name no virtualCluster".to_string(),
            );
        }
        self.port_range
            .check()
            .map_err(|rule| ConfigError::Invalid {
                field: "portRange",
                rule,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        ClusterConfig::default().check().expect("defaults pass");
    }

    #[test]
    fn the_shipped_example_is_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/rest-lite/config.yaml");
        assert_eq!(
            ClusterConfig::load(&path).expect("loads"),
            ClusterConfig::default()
        );
    }

    #[test]
    fn unknown_fields_and_bad_values_are_errors() {
        use pai_contract::priority::JobPriority;
        let dir = pai_test_support::scratch("rest-lite-config");
        let path = dir.path().join("c.yaml");
        std::fs::write(&path, "hostNetwrk: true\n").expect("write");
        let err = ClusterConfig::load(&path).expect_err("typo");
        assert!(err.to_string().contains("hostNetwrk"), "{err}");
        std::fs::write(&path, "portRange: {begin: 80, end: 90}\n").expect("write");
        let err = ClusterConfig::load(&path).expect_err("low ports");
        assert!(err.to_string().contains("portRange"), "{err}");
        std::fs::write(&path, "gang: {engine: kueue}\n").expect("write");
        let err = ClusterConfig::load(&path).expect_err("kueue without a queue");
        assert!(err.to_string().contains("gang.defaultQueue"), "{err}");
        std::fs::write(&path, "gang: {engine: slurm}\n").expect("write");
        let err = ClusterConfig::load(&path).expect_err("unknown engine");
        assert!(err.to_string().contains("slurm"), "{err}");
        std::fs::write(&path, "gang: {engine: volcano, defaultQueue: Team_A}\n").expect("write");
        let err = ClusterConfig::load(&path).expect_err("queue name");
        assert!(err.to_string().contains("gang.defaultQueue"), "{err}");
        std::fs::write(&path, "priorityClasses: {prod: High_Priority}\n").expect("write");
        let err = ClusterConfig::load(&path).expect_err("a class name");
        assert!(
            err.to_string().contains("priorityClasses.prod")
                && err
                    .to_string()
                    .contains("\"High_Priority\" is not a PriorityClass name"),
            "{err}"
        );
        std::fs::write(&path, "priorityClasses: {urgent: high}\n").expect("write");
        let err = ClusterConfig::load(&path).expect_err("a class OpenPAI has not");
        assert!(err.to_string().contains("urgent"), "{err}");
        std::fs::write(&path, "priorityClasses: {default: low}\n").expect("write");
        let err = ClusterConfig::load(&path).expect_err("a default that is no OpenPAI class");
        assert!(err.to_string().contains("low"), "{err}");
        std::fs::write(&path, "priorityClasses: {prod: team.high, default: oppo}\n")
            .expect("write");
        let config = ClusterConfig::load(&path).expect("subdomain names are PriorityClass names");
        assert_eq!(config.priority_classes.name(JobPriority::Prod), "team.high");
        assert_eq!(
            config.priority_classes.class_of(None),
            Some(JobPriority::Oppo)
        );
        std::fs::write(
            &path,
            "failurePatterns:\n  - {name: bad, userLogRegex: '(unclosed'}\n",
        )
        .expect("write");
        let err = ClusterConfig::load(&path).expect_err("a regex that does not compile");
        assert!(
            err.to_string()
                .contains("failurePatterns: failurePatterns[0] (bad): userLogRegex"),
            "{err}"
        );
        std::fs::write(
            &path,
            "failurePatterns:\n  - {name: quota, userLogRegex: 'Disk quota exceeded', exitCode: 1, typo: 1}\n",
        )
        .expect("write");
        let err = ClusterConfig::load(&path).expect_err("an unknown field of a pattern");
        assert!(err.to_string().contains("typo"), "{err}");
        std::fs::write(&path, "namespace: jobs\nhostNetwork: true\n").expect("write");
        let config = ClusterConfig::load(&path).expect("valid");
        assert!(config.host_network);
        assert_eq!(config.namespace, "jobs");
    }
}
