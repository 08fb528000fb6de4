//! OpenPAI's team storages: the operator's (the config's `storages`, each a
//! PersistentVolumeClaim on a cluster and a directory on this machine, with who may use
//! it), what a job asks for (v2 `extras.storages`, or the `teamwise_storage` runtime
//! plugin's `storageConfigNames`), and the mounts that makes.
//!
//! OpenPAI's rules (rest-server `models/v2/job/k8s.js`, microsoft/pai a95d9420e): the
//! plugin's names mean `extras.storages` of those names when `extras.storages` is not
//! given; an empty list means the user's default storages; a name the user may not use
//! refuses the job; each storage becomes a volume `<name>-volume` of claim `<name>`,
//! mounted in the main container at `mountPath` (default `/mnt/<name>`), with the user's
//! name as its sub-path when it is not shared, read-only where the storage is.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One storage of the operator's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StorageConfig {
    /// Its name, as jobs and the API name it.
    pub name: String,
    /// On a cluster: the PersistentVolumeClaim in the jobs' namespace (default: `name`).
    #[serde(default)]
    pub claim_name: Option<String>,
    /// On this machine: the directory mounted in its place.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Shared by its users (default); `false`: each user gets a directory of their own
    /// in it, named as the user.
    #[serde(default = "yes")]
    pub share: bool,
    /// Mounted read-only, whatever a job asks.
    #[serde(default)]
    pub read_only: bool,
    /// Who may use it: these users, and the members of these groups (the token file's
    /// `groups`). Neither given: every user.
    #[serde(default)]
    pub users: Vec<String>,
    #[serde(default)]
    pub groups: Vec<String>,
    /// Mounted for a job whose storage list is empty (OpenPAI's default storages).
    #[serde(default)]
    pub default: bool,
}

fn yes() -> bool {
    true
}

impl StorageConfig {
    /// The claim that holds it on a cluster.
    pub fn claim(&self) -> &str {
        self.claim_name.as_deref().unwrap_or(&self.name)
    }

    /// Whether `who` may use it.
    pub fn allows(&self, who: &Who<'_>) -> bool {
        who.admin
            || (self.users.is_empty() && self.groups.is_empty())
            || self.users.iter().any(|u| u == who.user)
            || self.groups.iter().any(|g| who.groups.contains(g))
    }
}

/// The storages a server uses now: the config's, replaced when the config file changes
/// (`rest-lite serve` watches it as it watches the token file).
#[derive(Debug, Default)]
pub struct Registry {
    current: std::sync::RwLock<std::sync::Arc<Vec<StorageConfig>>>,
}

impl Registry {
    pub fn new(storages: Vec<StorageConfig>) -> Self {
        Self {
            current: std::sync::RwLock::new(std::sync::Arc::new(storages)),
        }
    }

    /// The storages now.
    pub fn current(&self) -> std::sync::Arc<Vec<StorageConfig>> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replaces them (a changed config).
    pub fn replace(&self, storages: Vec<StorageConfig>) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = std::sync::Arc::new(storages);
    }

    /// The storage `name`, if there is one.
    pub fn get(&self, name: &str) -> Option<StorageConfig> {
        self.current().iter().find(|s| s.name == name).cloned()
    }
}

/// A caller, as storages see them.
#[derive(Clone, Copy, Debug)]
pub struct Who<'a> {
    pub user: &'a str,
    pub groups: &'a [String],
    /// An administrator may use every storage.
    pub admin: bool,
}

/// Checks the config's `storages`; the error names the rule.
pub fn check(storages: &[StorageConfig]) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    for storage in storages {
        if !pai_job::names::is_dns_subdomain(&storage.name) || storage.name.is_empty() {
            return Err(format!(
                "{:?} is not a storage name: lowercase letters, digits, '-' and '.', as a PersistentVolumeClaim's",
                storage.name
            ));
        }
        if !seen.insert(storage.name.as_str()) {
            return Err(format!("{} is named twice", storage.name));
        }
        if !pai_job::names::is_dns_subdomain(storage.claim()) {
            return Err(format!(
                "{}: claimName {:?} is not a PersistentVolumeClaim's name",
                storage.name,
                storage.claim()
            ));
        }
        if let Some(path) = &storage.path
            && !path.is_absolute()
        {
            return Err(format!(
                "{}: path {} is not absolute",
                storage.name,
                path.display()
            ));
        }
    }
    Ok(())
}

/// A storage a job asks for (`extras.storages[i]`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StorageRequest {
    pub name: String,
    /// Where in the container (default `/mnt/<name>`).
    pub mount_path: Option<String>,
    /// `false`: the user's own directory in it, even if the storage is shared.
    pub share: Option<bool>,
    /// `true`: read-only, even if the storage is not.
    pub read_only: Option<bool>,
}

impl StorageRequest {
    /// Where it is mounted in the main container.
    pub fn mount_path(&self) -> String {
        self.mount_path
            .clone()
            .unwrap_or_else(|| format!("/mnt/{}", self.name))
    }
}

/// Why a job cannot have its storages: the index in its list, the storage, and the rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Denied {
    /// No such storage.
    Unknown { index: usize, name: String },
    /// The caller may not use it (OpenPAI answered 403 `ForbiddenUserError`).
    Forbidden { index: usize, name: String },
}

impl std::fmt::Display for Denied {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Denied::Unknown { name, .. } => write!(
                f,
                "storage {name} is not found (GET /api/v2/storages lists the ones you may use)"
            ),
            Denied::Forbidden { name, .. } => write!(
                f,
                "you are not allowed to use storage {name} (GET /api/v2/storages lists the ones you may use)"
            ),
        }
    }
}

impl Denied {
    /// The field it is about.
    pub fn index(&self) -> usize {
        match self {
            Denied::Unknown { index, .. } | Denied::Forbidden { index, .. } => *index,
        }
    }
}

/// The storages `requests` asks for as `who` may have them: an empty list becomes the
/// caller's default storages; every name must be one the caller may use.
pub fn resolve(
    requests: &[StorageRequest],
    who: &Who<'_>,
    storages: &[StorageConfig],
) -> Result<Vec<StorageRequest>, Denied> {
    if requests.is_empty() {
        return Ok(storages
            .iter()
            .filter(|s| s.default && s.allows(who))
            .map(|s| StorageRequest {
                name: s.name.clone(),
                ..StorageRequest::default()
            })
            .collect());
    }
    for (index, request) in requests.iter().enumerate() {
        let name = request.name.clone();
        match storages.iter().find(|s| s.name == request.name) {
            None => return Err(Denied::Unknown { index, name }),
            Some(s) if !s.allows(who) => return Err(Denied::Forbidden { index, name }),
            Some(_) => {}
        }
    }
    Ok(requests.to_vec())
}

/// One storage in the main container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// The pod's volume: `<name>-volume`.
    pub volume: String,
    /// The claim that holds it on a cluster.
    pub claim: String,
    /// Where in the container.
    pub mount_path: String,
    /// The user's own directory in it, when it is not shared.
    pub sub_path: Option<String>,
    pub read_only: bool,
}

/// The mounts of `requests` for `user`; an error names the request and the rule. An
/// empty list is every default storage (the server has narrowed it to the caller's).
pub fn mounts(
    requests: &[StorageRequest],
    user: &str,
    storages: &[StorageConfig],
) -> Result<Vec<Mount>, (usize, String)> {
    let defaults: Vec<StorageRequest>;
    let requests = if requests.is_empty() {
        defaults = storages
            .iter()
            .filter(|s| s.default)
            .map(|s| StorageRequest {
                name: s.name.clone(),
                ..StorageRequest::default()
            })
            .collect();
        &defaults
    } else {
        requests
    };
    requests
        .iter()
        .enumerate()
        .map(|(index, request)| {
            let storage = storages
                .iter()
                .find(|s| s.name == request.name)
                .ok_or_else(|| {
                    (
                        index,
                        Denied::Unknown {
                            index,
                            name: request.name.clone(),
                        }
                        .to_string(),
                    )
                })?;
            let shared = storage.share && request.share != Some(false);
            Ok(Mount {
                volume: format!("{}-volume", storage.name),
                claim: storage.claim().to_string(),
                mount_path: request.mount_path(),
                sub_path: (!shared).then(|| user.to_string()),
                read_only: storage.read_only || request.read_only == Some(true),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn storage(name: &str) -> StorageConfig {
        StorageConfig {
            name: name.to_string(),
            claim_name: None,
            path: None,
            share: true,
            read_only: false,
            users: Vec::new(),
            groups: Vec::new(),
            default: false,
        }
    }

    fn ask(name: &str) -> StorageRequest {
        StorageRequest {
            name: name.to_string(),
            ..StorageRequest::default()
        }
    }

    #[test]
    fn who_may_use_a_storage() {
        let team = StorageConfig {
            groups: vec!["vision".to_string()],
            users: vec!["carol".to_string()],
            ..storage("team")
        };
        let groups = ["vision".to_string()];
        let alice = Who {
            user: "alice",
            groups: &groups,
            admin: false,
        };
        let bob = Who {
            user: "bob",
            groups: &[],
            admin: false,
        };
        assert!(team.allows(&alice));
        assert!(!team.allows(&bob));
        assert!(team.allows(&Who {
            user: "carol",
            ..bob
        }));
        assert!(team.allows(&Who { admin: true, ..bob }));
        assert!(storage("open").allows(&bob), "no list: everybody");
        let all = [team, storage("open")];
        assert_eq!(
            resolve(&[ask("open"), ask("team")], &bob, &all),
            Err(Denied::Forbidden {
                index: 1,
                name: "team".to_string()
            })
        );
        assert_eq!(
            resolve(&[ask("nope")], &alice, &all),
            Err(Denied::Unknown {
                index: 0,
                name: "nope".to_string()
            })
        );
    }

    #[test]
    fn an_empty_list_is_the_callers_defaults() {
        let all = [
            StorageConfig {
                default: true,
                ..storage("home")
            },
            StorageConfig {
                default: true,
                users: vec!["alice".to_string()],
                ..storage("alices")
            },
            storage("other"),
        ];
        let bob = Who {
            user: "bob",
            groups: &[],
            admin: false,
        };
        let names: Vec<String> = resolve(&[], &bob, &all)
            .expect("resolved")
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(names, ["home"]);
    }

    #[test]
    fn openpais_mount_rules() {
        let all = [
            storage("shared"),
            StorageConfig {
                share: false,
                read_only: true,
                claim_name: Some("pvc-private".to_string()),
                ..storage("private")
            },
        ];
        let asked = [
            StorageRequest {
                mount_path: Some("/data".to_string()),
                ..ask("shared")
            },
            ask("private"),
            StorageRequest {
                share: Some(false),
                read_only: Some(true),
                ..ask("shared")
            },
        ];
        let mounts = mounts(&asked, "alice", &all).expect("mounts");
        assert_eq!(
            mounts[0],
            Mount {
                volume: "shared-volume".to_string(),
                claim: "shared".to_string(),
                mount_path: "/data".to_string(),
                sub_path: None,
                read_only: false,
            }
        );
        assert_eq!(
            mounts[1],
            Mount {
                volume: "private-volume".to_string(),
                claim: "pvc-private".to_string(),
                mount_path: "/mnt/private".to_string(),
                sub_path: Some("alice".to_string()),
                read_only: true,
            }
        );
        assert_eq!(mounts[2].sub_path.as_deref(), Some("alice"));
        assert!(mounts[2].read_only);
    }

    #[test]
    fn bad_config_is_named() {
        assert!(check(&[storage("Bad Name")]).is_err());
        assert!(check(&[storage("a"), storage("a")]).is_err());
        let relative = StorageConfig {
            path: Some(PathBuf::from("data")),
            ..storage("a")
        };
        assert!(check(&[relative]).is_err());
        assert!(check(&[storage("a"), storage("b.c")]).is_ok());
    }
}
