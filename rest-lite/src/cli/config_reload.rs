//! The config file read again while the server runs: every [`RELOAD_INTERVAL`] its file
//! is looked at, and where the server runs in a pod that mounts it from a ConfigMap, the
//! ConfigMap is watched through the API (the kubelet replaces the mounted file only at
//! its next sync of the pod, a minute by default); when it changed, what changed is said
//! and taken:
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

use pai_backend::backend::Backend;
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
    "keptLogBytesPerJob",
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

/// Where the server's pod can be read, to follow the ConfigMap its config file is
/// mounted from.
pub struct Mounted {
    pub client: kube::Client,
    pub namespace: String,
    /// The server's pod (`POD_NAME`).
    pub pod: String,
}

/// Watches `path`, and where it is mounted from a ConfigMap (`mounted`), that
/// ConfigMap through the API: the kubelet replaces the file only at its next sync of
/// the pod (a minute by default), the API says the change at once. `read` is the file as
/// read at start, `started` the config the server started with (`read` and the command
/// line's flags).
pub fn watch(
    path: PathBuf,
    read: ClusterConfig,
    started: ClusterConfig,
    running: Running,
    mounted: Option<Mounted>,
) {
    let (texts_tx, mut texts) = tokio::sync::mpsc::channel::<String>(4);
    if let Some(mounted) = mounted {
        tokio::spawn(follow_config_map(mounted, path.clone(), texts_tx));
    }
    let mut seen = file_stamp(&path);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(RELOAD_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_read = read;
        let mut last_refused: Option<String> = None;
        loop {
            let text = tokio::select! {
                _ = tick.tick() => {
                    let stamp = file_stamp(&path);
                    if stamp == seen {
                        continue;
                    }
                    seen = stamp;
                    match std::fs::read_to_string(&path) {
                        Ok(text) => text,
                        Err(e) => {
                            tracing::error!(file = %path.display(), error = %e, "the config changed and cannot be read: the last good one stays");
                            continue;
                        }
                    }
                }
                Some(text) = texts.recv() => text,
            };
            let (Some(storages), Some(transformer), Some(backend)) = (
                running.storages.upgrade(),
                running.transformer.upgrade(),
                running.backend.upgrade(),
            ) else {
                return;
            };
            let new = match ClusterConfig::read(&text, &path) {
                Ok(new) => new,
                Err(e) => {
                    // Said once, whether the file or the ConfigMap said it first.
                    let said = e.to_string();
                    if last_refused.as_deref() != Some(said.as_str()) {
                        tracing::error!(file = %path.display(), error = %said, "the config changed and does not read: the last good one stays");
                        last_refused = Some(said);
                    }
                    continue;
                }
            };
            last_refused = None;
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

/// Sends the text of `path`'s key in the ConfigMap the server's pod mounts it from, at
/// every change of it; nothing where the file is not mounted from a ConfigMap.
async fn follow_config_map(
    mounted: Mounted,
    path: PathBuf,
    texts: tokio::sync::mpsc::Sender<String>,
) {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};
    use kube::runtime::{WatchStreamExt, watcher};
    let pods: kube::Api<Pod> = kube::Api::namespaced(mounted.client.clone(), &mounted.namespace);
    let pod = match pods.get(&mounted.pod).await {
        Ok(pod) => pod,
        Err(e) => {
            tracing::warn!(pod = %mounted.pod, error = %e, "cannot read this server's pod: its config is read again from the file alone, as the kubelet replaces it");
            return;
        }
    };
    let Some((name, key)) = mounted_from(&pod, &path) else {
        tracing::debug!(file = %path.display(), "the config file is not mounted from a ConfigMap: read again from the file alone");
        return;
    };
    tracing::info!(config_map = %name, key = %key, "the config's ConfigMap is followed: a change counts at once");
    let maps: kube::Api<ConfigMap> = kube::Api::namespaced(mounted.client, &mounted.namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut changes = watcher::watcher(maps, config)
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(change) = changes.next().await {
        let Ok(map) = change else {
            continue;
        };
        if map.metadata.name.as_deref() != Some(name.as_str()) {
            continue;
        }
        let text = map
            .data
            .and_then(|mut data| data.remove(&key))
            .unwrap_or_default();
        if texts.send(text).await.is_err() {
            return;
        }
    }
}

/// The ConfigMap `path` is mounted from in `pod`, and its key: the volume mounted at
/// `path`'s directory (no subPath), and the key its items name `path`'s file (itself,
/// where no item names it).
fn mounted_from(
    pod: &k8s_openapi::api::core::v1::Pod,
    path: &std::path::Path,
) -> Option<(String, String)> {
    let dir = path.parent()?;
    let file = path.file_name()?.to_str()?;
    let spec = pod.spec.as_ref()?;
    let volume = spec.containers.iter().find_map(|container| {
        container.volume_mounts.as_ref()?.iter().find(|m| {
            std::path::Path::new(&m.mount_path) == dir
                && m.sub_path.as_deref().unwrap_or("").is_empty()
        })
    })?;
    let map = spec
        .volumes
        .as_ref()?
        .iter()
        .find(|v| v.name == volume.name)?
        .config_map
        .as_ref()?;
    let key = match &map.items {
        Some(items) => items.iter().find(|i| i.path == file)?.key.clone(),
        None => file.to_string(),
    };
    Some((map.name.clone(), key))
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
