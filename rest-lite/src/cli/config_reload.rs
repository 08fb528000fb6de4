//! The config file read again while the server runs: every [`RELOAD_INTERVAL`] its file
//! is looked at (a ConfigMap mounted as a directory is replaced whole by the kubelet,
//! within about a minute of its change); when it changed, what changed is said and
//! taken:
//!
//! - the team storages, and everything a spec is made into a Framework by (images,
//!   ports, GPU types, failure patterns, grace periods), from the next submission;
//! - what the backend takes while it runs ([`Backend::reconfigure`]: on a cluster the
//!   retention's bounds, from a sweep that starts at once);
//! - the fields read only at start ([`AT_START`]) are said, and the running values stay
//!   until a restart.
//!
//! A config that does not read (YAML, an unknown field, a rule broken) keeps the last
//! good one, and the log says why.

use std::path::PathBuf;
use std::sync::Weak;

use pai_engine::backend::Backend;
use pai_server::auth::{RELOAD_INTERVAL, file_stamp};
use pai_server::live::Live;
use pai_translate::config::ClusterConfig;
use pai_translate::storages::Registry;
use pai_translate::transform::Transformer;
use serde_json::Value;

/// The config's fields (as written in the file) that count from the server's start
/// only, unless the backend takes them while it runs.
pub const AT_START: &[&str] = &[
    "namespace",
    "gang",
    "history",
    "keptLogBytes",
    "keptAttempts",
    "restartBackoff",
    "containerLogMaxBytes",
    "containerLogMaxFiles",
    "retention",
];

/// What the running server holds of its config.
pub struct Running {
    pub storages: Weak<Registry>,
    pub transformer: Weak<Live<Transformer>>,
    pub backend: Weak<dyn Backend>,
}

/// What a changed config does to a running server.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Taken {
    /// The fields that changed and count from now on.
    pub now: Vec<String>,
    /// The fields that changed and count from the next start.
    pub at_start: Vec<String>,
}

/// Watches `path`; `read` is the file as read at start, `running` the config the server
/// started with (`read` and the command line's flags).
pub fn watch(path: PathBuf, read: ClusterConfig, started: ClusterConfig, running: Running) {
    let mut seen = file_stamp(&path);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(RELOAD_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_read = read;
        loop {
            tick.tick().await;
            let (Some(storages), Some(transformer), Some(backend)) = (
                running.storages.upgrade(),
                running.transformer.upgrade(),
                running.backend.upgrade(),
            ) else {
                return;
            };
            let stamp = file_stamp(&path);
            if stamp == seen {
                continue;
            }
            seen = stamp;
            let new = match ClusterConfig::load(&path) {
                Ok(new) => new,
                Err(e) => {
                    tracing::error!(file = %path.display(), error = %e, "the config changed and does not read: the last good one stays");
                    continue;
                }
            };
            let taken = take(
                &last_read,
                &new,
                &started,
                &storages,
                &transformer,
                &*backend,
            );
            if !taken.now.is_empty() {
                tracing::info!(file = %path.display(), changed = %taken.now.join(", "), "config read again: what changed counts from now on");
            }
            if !taken.at_start.is_empty() {
                tracing::warn!(file = %path.display(), changed = %taken.at_start.join(", "), "config changed where it is read at start only: the running values stay until the server restarts");
            }
            last_read = new;
        }
    });
}

/// Takes `new` (the file as read now; `before`, as read last) into the running server
/// (`started`: its config at start).
pub fn take(
    before: &ClusterConfig,
    new: &ClusterConfig,
    started: &ClusterConfig,
    storages: &Registry,
    transformer: &Live<Transformer>,
    backend: &dyn Backend,
) -> Taken {
    let changed = changed_fields(before, new);
    if changed.is_empty() {
        return Taken::default();
    }
    let by_backend = backend.reconfigure(new);
    let at_start: Vec<&str> = AT_START
        .iter()
        .copied()
        .filter(|f| !by_backend.contains(f))
        .collect();
    // What the server runs by: the new file, but what counts at start only as started.
    let mut effective = to_value(new);
    let started_value = to_value(started);
    for field in &at_start {
        effective[*field] = started_value[*field].clone();
    }
    let effective: ClusterConfig =
        serde_json::from_value(effective).unwrap_or_else(|_| new.clone());
    storages.replace(effective.storages.clone());
    transformer.replace(Transformer::new(effective));
    let (at_start, now) = changed
        .into_iter()
        .partition(|f| at_start.contains(&f.as_str()));
    Taken { now, at_start }
}

fn to_value(config: &ClusterConfig) -> Value {
    serde_json::to_value(config).unwrap_or(Value::Null)
}

/// The top-level fields whose values differ, as the file names them.
fn changed_fields(before: &ClusterConfig, after: &ClusterConfig) -> Vec<String> {
    let (Value::Object(before), Value::Object(after)) = (to_value(before), to_value(after)) else {
        return Vec::new();
    };
    let mut changed: Vec<String> = after
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(*v))
        .map(|(k, _)| k.clone())
        .collect();
    changed.sort();
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_named_at_start_is_one_of_the_configs() {
        let Value::Object(fields) = to_value(&ClusterConfig::default()) else {
            panic!("the config is an object");
        };
        for field in AT_START {
            assert!(fields.contains_key(*field), "{field} is no config field");
        }
    }

    #[test]
    fn the_changed_fields_are_named_as_the_file_names_them() {
        let before = ClusterConfig::default();
        let mut after = before.clone();
        after.retention.finished_jobs = 3;
        after.namespace = "other".to_string();
        assert_eq!(changed_fields(&before, &after), ["namespace", "retention"]);
        assert!(changed_fields(&before, &before).is_empty());
    }
}
