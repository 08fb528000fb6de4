//! Protocol v2's `extras`: the runtime plugins of the job, gang allocation, HiveD's
//! priority class and the storages the tasks mount.

use serde_json::Value;

use pai_contract::priority::JobPriority;

use super::fields::{PLUGIN_FIELDS, PLUGINS, shown};
use crate::spec::error::{Errors, FieldPath};
use crate::spec::reader::{self, Object, kind};
use crate::storages::StorageRequest;

/// A runtime plugin of `extras`, with the roles it is for (all when `None`).
pub(super) struct ExtraPlugin {
    pub(super) name: String,
    pub(super) parameters: Value,
    pub(super) ignore_failure: bool,
    pub(super) roles: Option<Vec<String>>,
    pub(super) path: FieldPath,
}

pub(super) struct Extras {
    pub(super) plugins: Vec<ExtraPlugin>,
    pub(super) gang_allocation: bool,
    /// `extras.storages`, or the `teamwise_storage` plugin's names.
    pub(super) storages: Option<Vec<StorageRequest>>,
    /// `extras.hivedScheduler.jobPriorityClass`.
    pub(super) priority: Option<JobPriority>,
}

impl Default for Extras {
    fn default() -> Self {
        Self {
            plugins: Vec::new(),
            gang_allocation: true,
            storages: None,
            priority: None,
        }
    }
}

/// `extras.hivedScheduler`: its `jobPriorityClass` is the job's priority class; HiveD's
/// placement hints (`taskRoles`, `gangReleaseEnable`, …) are named as not used.
fn hived(
    value: &Value,
    path: &FieldPath,
    errors: &mut Errors,
    notes: &mut Vec<String>,
) -> Option<JobPriority> {
    let map = match value {
        Value::Null => return None,
        Value::Object(map) => map,
        other => {
            errors.push(path, format!("must be an object, got {}", kind(other)));
            return None;
        }
    };
    let mut priority = None;
    for (key, v) in map {
        let p = path.field(key);
        match (key.as_str(), v) {
            ("jobPriorityClass", Value::Null) => {}
            ("jobPriorityClass", Value::String(name)) => match name.parse::<JobPriority>() {
                Ok(class) => priority = Some(class),
                Err(e) => errors.push(&p, e.to_string()),
            },
            ("jobPriorityClass", other) => errors.push(
                &p,
                format!(
                    "must be one of prod, test, oppo (OpenPAI's job priority classes), got {}",
                    kind(other)
                ),
            ),
            _ => notes.push(format!(
                "{p}: HiveD's placement hints are not used: the cluster's scheduler and gang engine place the job"
            )),
        }
    }
    priority
}

/// The fields of an item of `extras.storages`.
const STORAGE_FIELDS: &[&str] = &["name", "mountPath", "share", "readOnly"];

/// `extras.storages`: names given once, mount paths absolute, distinct and outside the
/// runtime's directory.
fn storages(value: &Value, path: &FieldPath, errors: &mut Errors) -> Vec<StorageRequest> {
    let Some(items) = reader::list(value, path, errors) else {
        return Vec::new();
    };
    let mut out: Vec<StorageRequest> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let p = path.index(i);
        let Some(obj) = Object::new(item, p.clone(), STORAGE_FIELDS, errors) else {
            continue;
        };
        let name = obj
            .required("name", errors)
            .and_then(|(v, p)| reader::text(v, &p, errors))
            .map(str::to_string);
        let flag = |key: &str, errors: &mut Errors| match obj.optional(key) {
            Some((Value::Bool(b), _)) => Some(*b),
            Some((other, p)) => {
                errors.push(&p, format!("must be true or false, got {}", kind(other)));
                None
            }
            None => None,
        };
        let share = flag("share", errors);
        let read_only = flag("readOnly", errors);
        let mount_path = match obj.optional("mountPath") {
            Some((v, p)) => reader::text(v, &p, errors).and_then(|m| {
                let inside_runtime = m == pai_contract::paths::RUNTIME_ROOT
                    || m.starts_with(&format!("{}/", pai_contract::paths::RUNTIME_ROOT));
                if !m.starts_with('/') || m.split('/').any(|part| part == "..") || inside_runtime {
                    errors.push(
                        &p,
                        format!(
                            "{m:?} is not a place to mount a storage: an absolute path, without '..', outside {}",
                            pai_contract::paths::RUNTIME_ROOT
                        ),
                    );
                    None
                } else {
                    Some(m.to_string())
                }
            }),
            None => None,
        };
        obj.finish(errors);
        let Some(name) = name else { continue };
        let request = StorageRequest {
            name,
            mount_path,
            share,
            read_only,
        };
        if out.iter().any(|o| o.name == request.name) {
            errors.push(
                &p.field("name"),
                format!("storage {} is named twice", request.name),
            );
        } else if out.iter().any(|o| o.mount_path() == request.mount_path()) {
            errors.push(
                &p.field("mountPath"),
                format!(
                    "{} is the mount path of another storage",
                    request.mount_path()
                ),
            );
        } else {
            out.push(request);
        }
    }
    out
}

pub(super) fn extras(
    value: &Value,
    path: &FieldPath,
    errors: &mut Errors,
    notes: &mut Vec<String>,
) -> Extras {
    let mut out = Extras::default();
    let Value::Object(map) = value else {
        errors.push(path, format!("must be an object, got {}", kind(value)));
        return out;
    };
    for (key, v) in map {
        let p = path.field(key);
        match key.as_str() {
            PLUGINS => {
                let Some(items) = reader::list(v, &p, errors) else {
                    continue;
                };
                for (i, item) in items.iter().enumerate() {
                    if let Some(plugin) = extra_plugin(item, &p.index(i), errors) {
                        out.plugins.push(plugin);
                    }
                }
            }
            "gangAllocation" => match v {
                Value::Bool(b) => {
                    out.gang_allocation = *b;
                    if !b {
                        notes.push(format!(
                            "{p}: false: the job's pods are not grouped for the gang engine; every task still waits at the barrier for all the others"
                        ));
                    }
                }
                other => errors.push(&p, format!("must be true or false, got {}", kind(other))),
            },
            "hivedScheduler" => out.priority = hived(v, &p, errors, notes),
            "storages" => out.storages = Some(storages(v, &p, errors)),
            _ => notes.push(format!("{p}: not used here")),
        }
    }
    // OpenPAI's older way: the teamwise_storage plugin's names, where `storages` is not
    // given (none: the user's default storages).
    if out.storages.is_none()
        && let Some(plugin) = out.plugins.iter().find(|p| p.name == "teamwise_storage")
    {
        let names = plugin.parameters.get("storageConfigNames");
        let p = plugin.path.field("parameters").field("storageConfigNames");
        let mut requests = Vec::new();
        match names {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    if let Some(name) = reader::text(item, &p.index(i), errors) {
                        requests.push(StorageRequest {
                            name: name.to_string(),
                            ..StorageRequest::default()
                        });
                    }
                }
            }
            Some(other) => errors.push(
                &p,
                format!("must be a list of storage names, got {}", kind(other)),
            ),
        }
        out.storages = Some(requests);
    }
    out
}

fn extra_plugin(value: &Value, path: &FieldPath, errors: &mut Errors) -> Option<ExtraPlugin> {
    let obj = Object::new(value, path.clone(), PLUGIN_FIELDS, errors)?;
    let name = obj
        .required("plugin", errors)
        .and_then(|(v, p)| reader::text(v, &p, errors))
        .map(str::to_string);
    let ignore_failure = failure_policy(obj.optional("failurePolicy"), errors);
    let roles = match obj.optional("taskroles") {
        Some((v, p)) => reader::list(v, &p, errors).map(|items| {
            items
                .iter()
                .enumerate()
                .filter_map(|(i, r)| reader::string(r, &p.index(i), errors).map(str::to_string))
                .collect()
        }),
        None => None,
    };
    let parameters = obj
        .optional("parameters")
        .map(|(v, _)| v.clone())
        .unwrap_or(Value::Null);
    obj.finish(errors);
    Some(ExtraPlugin {
        name: name?,
        parameters,
        ignore_failure: ignore_failure?,
        roles,
        path: path.clone(),
    })
}

/// `failurePolicy`: `fail` (the default) or `ignore`; `Some(true)` for ignore.
pub(super) fn failure_policy(
    value: Option<(&Value, FieldPath)>,
    errors: &mut Errors,
) -> Option<bool> {
    match value {
        None => Some(false),
        Some((Value::String(s), _)) if s.eq_ignore_ascii_case("fail") => Some(false),
        Some((Value::String(s), _)) if s.eq_ignore_ascii_case("ignore") => Some(true),
        Some((v, p)) => {
            errors.push(&p, format!("must be fail or ignore, got {}", shown(v)));
            None
        }
    }
}
