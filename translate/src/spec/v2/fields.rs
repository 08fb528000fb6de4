//! Protocol v2's field lists and the small reads its readers share: names by the
//! protocol's pattern, keys in the order written, lists of objects, lists of commands,
//! the longest command a role may have.

use serde_json::{Map, Value};

use crate::spec::error::{Errors, FieldPath};
use crate::spec::reader::{self, kind};

pub(super) const JOB_FIELDS: &[&str] = &[
    "protocolVersion",
    "name",
    "type",
    "version",
    "contributor",
    "description",
    "prerequisites",
    "parameters",
    "secrets",
    "jobRetryCount",
    "taskRoles",
    "deployments",
    "defaults",
    "extras",
];
pub(super) const ROLE_FIELDS: &[&str] = &[
    "protocolVersion",
    "instances",
    "completion",
    "taskRetryCount",
    "prerequisites",
    "dockerImage",
    "data",
    "output",
    "script",
    "extraContainerOptions",
    "resourcePerInstance",
    "commands",
];
pub(super) const RESOURCE_FIELDS: &[&str] = &["cpu", "memoryMB", "gpu", "ports"];
pub(super) const COMPLETION_FIELDS: &[&str] = &[
    "minFailedInstances",
    "minSucceededInstances",
    // v1's names, which early v2 files wrote (OpenPAI's schema then let them through).
    "minFailedTaskCount",
    "minSucceededTaskCount",
];
pub(super) const IMAGE_FIELDS: &[&str] = &[
    "protocolVersion",
    "name",
    "type",
    "version",
    "contributor",
    "description",
    "auth",
    "uri",
];
pub(super) const AUTH_FIELDS: &[&str] = &["username", "password", "registryuri"];
pub(super) const DEPLOYMENT_ROLE_FIELDS: &[&str] = &["preCommands", "postCommands"];
pub(super) const PLUGIN_FIELDS: &[&str] = &["plugin", "parameters", "failurePolicy", "taskroles"];

/// OpenPAI's pattern for job, prerequisite and deployment names.
const NAME_CHARS: &str = "^[a-zA-Z0-9_-]+$";
const MAX_V2_NAME: usize = 255;
/// `extras` key of the runtime plugins, and the prefix of a plugin prerequisite's `plugin`.
pub const PLUGINS: &str = "com.microsoft.pai.runtimeplugin";
/// `/dev/shm` when `extraContainerOptions.shmMB` is not given (OpenPAI v2's default).
pub const DEFAULT_SHM_MB: u32 = 512;

/// The kinds of prerequisites, and the role field naming one of each.
pub(super) const KINDS: [(&str, &str); 4] = [
    ("script", "script"),
    ("output", "output"),
    ("data", "data"),
    ("dockerimage", "dockerImage"),
];

pub(super) fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        Value::Number(n) => n.to_string(),
        other => kind(other).to_string(),
    }
}

/// A job, prerequisite or deployment name: `^[a-zA-Z0-9_-]+$`, at most 255 characters.
pub(super) fn v2_name<'a>(
    value: &'a Value,
    path: &FieldPath,
    errors: &mut Errors,
) -> Option<&'a str> {
    let s = reader::string(value, path, errors)?;
    let ok = !s.is_empty()
        && s.len() <= MAX_V2_NAME
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Some(s)
    } else {
        errors.push(
            path,
            format!("{s:?} breaks {NAME_CHARS} (at most {MAX_V2_NAME} characters)"),
        );
        None
    }
}

/// The keys of `map` in `order`, then any the order missed.
pub(super) fn ordered<'m>(map: &'m Map<String, Value>, order: &[String]) -> Vec<&'m str> {
    let mut keys: Vec<&str> = order
        .iter()
        .filter_map(|k| map.get_key_value(k).map(|(k, _)| k.as_str()))
        .collect();
    for k in map.keys() {
        if !keys.contains(&k.as_str()) {
            keys.push(k);
        }
    }
    keys
}

/// The items of a list that must hold at least one object when given (`what` names
/// them), each with its path; what is not an object is an error.
pub(super) fn objects<'a>(
    value: &'a Value,
    path: &FieldPath,
    what: &str,
    errors: &mut Errors,
) -> Vec<(FieldPath, &'a Value, &'a Map<String, Value>)> {
    let Some(items) = reader::list(value, path, errors) else {
        return Vec::new();
    };
    if items.is_empty() {
        errors.push(path, format!("must list at least one {what} when given"));
    }
    items
        .iter()
        .enumerate()
        .filter_map(|(i, item)| match item {
            Value::Object(map) => Some((path.index(i), item, map)),
            other => {
                errors.push(
                    &path.index(i),
                    format!("must be an object, got {}", kind(other)),
                );
                None
            }
        })
        .collect()
}

/// A non-empty list of strings.
pub(super) fn commands<'a>(
    value: &'a Value,
    path: &FieldPath,
    errors: &mut Errors,
) -> Option<Vec<&'a str>> {
    let items = reader::list(value, path, errors)?;
    if items.is_empty() {
        errors.push(path, "must list at least one command");
        return None;
    }
    let before = errors.len();
    let out: Vec<&str> = items
        .iter()
        .enumerate()
        .filter_map(|(i, v)| reader::string(v, &path.index(i), errors))
        .collect();
    (errors.len() == before).then_some(out)
}

/// The longest command a role may have: the init container gets it in `USER_CMD`, and
/// Linux takes at most 128 KiB for one `NAME=value` of a process's environment.
pub(super) const MAX_COMMAND_BYTES: usize =
    pai_contract::training::MAX_VARIABLE_BYTES - "USER_CMD=".len() - 1;

pub(super) fn too_long(limit: usize) -> String {
    format!(
        "rendered (with its deployment's and plugins' commands), the command is over {limit} bytes: the task gets it in one environment variable (USER_CMD), which Linux holds to 128 KiB"
    )
}
