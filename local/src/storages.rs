//! Team storages on this machine: a PersistentVolumeClaim volume the main container
//! mounts becomes, in container mode, a bind mount of the directory the config gives the
//! storage whose claim it is (`storages[].path`), at the same place, with the user's
//! sub-directory where the storage is not shared, read-only where asked. On the host
//! there is nothing to mount it on (the command would see this machine's own `/mnt`), so
//! a job with storages is refused there, saying so.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use pai_contract::Framework;
use pai_translate::storages::StorageConfig;

/// One storage mount of a main container, as its pod says it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Claimed {
    claim: String,
    mount_path: String,
    sub_path: Option<String>,
    read_only: bool,
}

fn claimed(pod: &PodSpec, main: &Container) -> Vec<Claimed> {
    let volumes = pod.volumes.as_deref().unwrap_or_default();
    main.volume_mounts
        .iter()
        .flatten()
        .filter_map(|m| {
            let volume = volumes.iter().find(|v| v.name == m.name)?;
            let claim = volume.persistent_volume_claim.as_ref()?;
            Some(Claimed {
                claim: claim.claim_name.clone(),
                mount_path: m.mount_path.clone(),
                sub_path: m.sub_path.clone().filter(|s| !s.is_empty()),
                read_only: m.read_only == Some(true) || claim.read_only == Some(true),
            })
        })
        .collect()
}

/// The main container's storages as bind mounts: (directory of this machine, path in
/// the container, read-only). A sub-directory not there yet is made (as a kubelet makes
/// a missing `subPath`).
pub fn bind_mounts(
    pod: &PodSpec,
    main: &Container,
    storages: &[StorageConfig],
) -> Result<Vec<(PathBuf, String, bool)>, String> {
    claimed(pod, main)
        .into_iter()
        .map(|c| {
            let dir = directory(&c.claim, storages)?;
            let host = match &c.sub_path {
                Some(sub) if sub.split('/').all(|p| !p.is_empty() && p != "..") => {
                    let sub_dir = dir.join(sub);
                    std::fs::create_dir_all(&sub_dir)
                        .map_err(|e| format!("cannot make {}: {e}", sub_dir.display()))?;
                    sub_dir
                }
                Some(sub) => return Err(format!("{sub:?} is not a sub-directory")),
                None => dir,
            };
            Ok((host, c.mount_path, c.read_only))
        })
        .collect()
}

/// The directory of the storage whose claim is `claim`.
fn directory(claim: &str, storages: &[StorageConfig]) -> Result<PathBuf, String> {
    let storage = storages
        .iter()
        .find(|s| s.claim() == claim)
        .ok_or_else(|| format!("no storage of this machine is claim {claim} (config storages)"))?;
    let path = storage.path.clone().ok_or_else(|| {
        format!(
            "storage {} has no directory on this machine (config storages[].path)",
            storage.name
        )
    })?;
    if !path.is_dir() {
        return Err(format!(
            "storage {}'s directory {} is not there",
            storage.name,
            path.display()
        ));
    }
    Ok(path)
}

/// Why `framework` cannot have its storages here, if it cannot: on the host at all, or a
/// storage without a directory.
pub fn refusal(
    framework: &Framework,
    storages: &[StorageConfig],
    in_containers: bool,
) -> Option<String> {
    for role in &framework.spec.task_roles {
        let Some(pod) = role.task.pod.spec.as_ref() else {
            continue;
        };
        let Some(main) = pod
            .containers
            .iter()
            .find(|c| c.name == pai_contract::framework::MAIN_CONTAINER)
        else {
            continue;
        };
        let claimed = claimed(pod, main);
        let Some(first) = claimed.first() else {
            continue;
        };
        if !in_containers {
            return Some(format!(
                "the job mounts storages ({} at {}, …), which this machine gives only to tasks in their images (`--engine podman`, of `rest-lite run` as of `rest-lite serve`): on the host, {} would be this machine's own",
                first.claim, first.mount_path, first.mount_path
            ));
        }
        for c in &claimed {
            if let Err(why) = directory(&c.claim, storages) {
                return Some(why);
            }
        }
    }
    None
}
