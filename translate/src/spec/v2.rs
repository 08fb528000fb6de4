//! OpenPAI's job protocol v2 (`protocolVersion: 2`), the second front door into the one
//! [`JobSpec`]: validated by the protocol's schema rules (every broken rule at once, each
//! with its field path), then rendered as OpenPAI's rest-server renders it (the
//! deployment's pre- and post-commands around the commands, `<% $parameters.… %>`,
//! `$script`, `$output` and `$data` templates, defaults) and with the runtime plugins
//! its runtime ran (`ssh`, `cmd`) folded into each role's command.
//!
//! Every field either acts as in OpenPAI or is named in a note (a warning at every
//! submission). `<% $secrets.… %>` stays in the command: the task's runtime renders it
//! from the job's secrets, which never enter the Framework.

use std::collections::{BTreeSet, HashMap};

use serde_json::{Map, Value, json};

use pai_contract::priority::JobPriority;
use pai_contract::template::{self, Piece};
use pai_contract::training::Selection;
use pai_job::names::{MAX_TASKS_PER_FRAMEWORK, MAX_TASKS_PER_ROLE};

use super::error::{Errors, FieldPath, SpecErrors};
use super::names::{JobName, PortLabel, RoleName};
use super::reader::{self, Object, kind};
use super::secrets::{RegistryAuth, Secrets};
use super::validate::{I32_MAX, image, pod_names_fit, training_ports, with_implicit_ports};
use super::{
    CompletionPolicy, JobSpec, LegacyDirs, PortRequest, PortStart, Protocol, Resources, TaskRole,
};
use crate::storages::StorageRequest;

const JOB_FIELDS: &[&str] = &[
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
const ROLE_FIELDS: &[&str] = &[
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
const RESOURCE_FIELDS: &[&str] = &["cpu", "memoryMB", "gpu", "ports"];
const COMPLETION_FIELDS: &[&str] = &[
    "minFailedInstances",
    "minSucceededInstances",
    // v1's names, which early v2 files wrote (OpenPAI's schema then let them through).
    "minFailedTaskCount",
    "minSucceededTaskCount",
];
const IMAGE_FIELDS: &[&str] = &[
    "protocolVersion",
    "name",
    "type",
    "version",
    "contributor",
    "description",
    "auth",
    "uri",
];
const AUTH_FIELDS: &[&str] = &["username", "password", "registryuri"];
const DEPLOYMENT_ROLE_FIELDS: &[&str] = &["preCommands", "postCommands"];
const PLUGIN_FIELDS: &[&str] = &["plugin", "parameters", "failurePolicy", "taskroles"];

/// OpenPAI's pattern for job, prerequisite and deployment names.
const NAME_CHARS: &str = "^[a-zA-Z0-9_-]+$";
const MAX_V2_NAME: usize = 255;
/// `extras` key of the runtime plugins, and the prefix of a plugin prerequisite's `plugin`.
pub const PLUGINS: &str = "com.microsoft.pai.runtimeplugin";
/// `/dev/shm` when `extraContainerOptions.shmMB` is not given (OpenPAI v2's default).
pub const DEFAULT_SHM_MB: u32 = 512;
/// Where Docker's clients log in when a registry is not named.
const DOCKER_HUB: &str = "https://index.docker.io/v1/";

/// The kinds of prerequisites, and the role field naming one of each.
const KINDS: [(&str, &str); 4] = [
    ("script", "script"),
    ("output", "output"),
    ("data", "data"),
    ("dockerimage", "dockerImage"),
];

/// A prerequisite as declared: its kind, and the whole object (the template scope
/// `$data`, `$script`, `$output` is the object itself).
struct Prerequisite<'a> {
    value: &'a Value,
    path: FieldPath,
}

/// A runtime plugin a role runs.
struct PluginUse {
    name: String,
    parameters: Value,
    ignore_failure: bool,
    path: FieldPath,
}

/// Commands run around the user's, as OpenPAI's runtime ran plugin commands: each block
/// in its own shell, failing the task unless its policy is `ignore`.
#[derive(Default)]
struct Around {
    pre: Vec<(String, bool)>,
    post: Vec<(String, bool)>,
}

/// Reads a v2 document into a [`JobSpec`]: `value` is the document, `order` its roles'
/// names as written.
// Long: protocol v2's top-level fields in the order the protocol lists them, then the
// roles; each step is a few lines.
pub(super) fn job(value: &Value, order: &[String]) -> Result<JobSpec, SpecErrors> {
    let mut errors = Errors::default();
    let mut notes = Vec::new();
    let Some(obj) = Object::new(value, FieldPath::root(), JOB_FIELDS, &mut errors) else {
        return Err(errors.into_spec_errors());
    };
    let name = job_header(&obj, &mut errors);
    let prerequisites = match obj.optional("prerequisites") {
        Some((v, p)) => prerequisites(v, &p, &mut errors, &mut notes),
        None => HashMap::new(),
    };
    let parameters = match obj.optional("parameters") {
        Some((v @ Value::Object(_), _)) => v.clone(),
        Some((v, p)) => {
            errors.push(&p, format!("must be an object, got {}", kind(v)));
            Value::Null
        }
        None => Value::Null,
    };
    let secrets = match obj.optional("secrets") {
        Some((v @ Value::Object(_), _)) => Some(Secrets::new(v.clone())),
        Some((v, p)) => {
            errors.push(&p, format!("must be an object, got {}", kind(v)));
            None
        }
        None => None,
    };
    let retry_count = match obj.optional("jobRetryCount") {
        Some((v, p)) => reader::integer(v, &p, 0, I32_MAX, &mut errors).map(|n| n as u32),
        None => Some(0),
    };
    let deployments = match obj.optional("deployments") {
        Some((v, p)) => deployments(v, &p, &mut errors, &mut notes),
        None => Vec::new(),
    };
    let (deployment, virtual_cluster) = match obj.optional("defaults") {
        Some((v, p)) => defaults(v, &p, &deployments, &mut errors, &mut notes),
        None => (None, None),
    };
    for (name, path, _) in &deployments {
        if deployment.as_ref().is_none_or(|(d, _)| d != name) {
            notes.push(format!(
                "{path}: deployment {name:?} is not applied: defaults.deployment does not name it (as in OpenPAI)"
            ));
        }
    }
    let extras = match obj.optional("extras") {
        Some((v, p)) => extras(v, &p, &mut errors, &mut notes),
        None => Extras::default(),
    };
    let roles_value = obj.required("taskRoles", &mut errors);
    obj.finish(&mut errors);

    let context = Context {
        parameters: &parameters,
        prerequisites: &prerequisites,
        secrets: secrets.as_ref(),
        deployment: deployment.as_ref().map(|(_, roles)| *roles),
    };
    let mut auths: Vec<(String, RegistryAuth)> = Vec::new();
    let mut user_keys: BTreeSet<String> = BTreeSet::new();
    let mut roles = Vec::new();
    if let Some((v, p)) = roles_value {
        let mut read = RoleReading {
            context: &context,
            extras: &extras,
            auths: &mut auths,
            user_keys: &mut user_keys,
            errors: &mut errors,
            notes: &mut notes,
        };
        roles = read.all(v, &p, order);
    }
    for (i, plugin) in extras.plugins.iter().enumerate() {
        for role in plugin.roles.iter().flatten() {
            if !roles.iter().any(|r| r.name.as_str() == role) {
                notes.push(format!(
                    "extras.{PLUGINS}[{i}].taskroles names {role:?}, which is not a role of the job"
                ));
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors.into_spec_errors());
    }
    let (Some(name), Some(retry_count)) = (name, retry_count) else {
        return Err(SpecErrors::single(&FieldPath::root(), "is not a valid job"));
    };
    let selection = Selection::all();
    training_ports(
        &mut roles,
        &selection,
        &FieldPath::root().field("taskRoles"),
        &mut errors,
    );
    if !errors.is_empty() {
        return Err(errors.into_spec_errors());
    }
    let mut job_envs = Vec::new();
    if !user_keys.is_empty() {
        let keys: Vec<String> = user_keys.into_iter().collect();
        job_envs.push((pai_contract::env::SSH_PUB_KEY.to_string(), keys.join("\n")));
    }
    // A plugin for several roles says the same thing once.
    let mut seen = BTreeSet::new();
    notes.retain(|n| seen.insert(n.clone()));
    let image = roles
        .first()
        .and_then(|r: &TaskRole| r.image.clone())
        .unwrap_or_default();
    Ok(JobSpec {
        name,
        image,
        roles,
        job_envs,
        retries: super::Retries::Count(retry_count),
        legacy: LegacyDirs::default(),
        framework_env: selection,
        virtual_cluster,
        depends_on: Vec::new(),
        protocol: Protocol::V2,
        notes,
        secrets,
        registry_auths: auths.into_iter().map(|(_, a)| a).collect(),
        gang_allocation: extras.gang_allocation,
        gpu_type: None,
        priority: extras.priority,
        storages: extras.storages,
    })
}

/// The job's own fields: `protocolVersion`, `name`, `type`, `version`, `contributor`,
/// `description`; the name when it is valid.
fn job_header(obj: &Object<'_>, errors: &mut Errors) -> Option<JobName> {
    match obj.optional("protocolVersion") {
        Some((Value::Number(n), _)) if n.as_u64() == Some(2) => {}
        Some((Value::String(s), _)) if s == "2" => {}
        Some((v, p)) => errors.push(
            &p,
            format!("must be 2 (OpenPAI's job protocol v2), got {}", shown(v)),
        ),
        None => errors.push(&obj.path("protocolVersion"), "must be 2, got null"),
    }
    let name = obj
        .required("name", errors)
        .and_then(|(v, p)| v2_name(v, &p, errors).map(|s| (s, p)))
        .and_then(|(s, p)| JobName::parse(s).map_err(|rule| errors.push(&p, rule)).ok());
    match obj.required("type", errors) {
        Some((Value::String(s), _)) if s == "job" => {}
        Some((v, p)) => errors.push(&p, format!("must be \"job\", got {}", shown(v))),
        None => {}
    }
    if let Some((v, p)) = obj.optional("version")
        && !(v.is_string() || v.is_number())
    {
        errors.push(&p, format!("must be a string or a number, got {}", kind(v)));
    }
    for key in ["contributor", "description"] {
        if let Some((v, p)) = obj.optional(key) {
            reader::string(v, &p, errors);
        }
    }
    name
}

/// What reading the roles shares: the job's context, and what the roles add to.
struct RoleReading<'a> {
    context: &'a Context<'a>,
    extras: &'a Extras,
    auths: &'a mut Vec<(String, RegistryAuth)>,
    user_keys: &'a mut BTreeSet<String>,
    errors: &'a mut Errors,
    notes: &'a mut Vec<String>,
}

impl RoleReading<'_> {
    /// `taskRoles` (`v` at `p`), in `order`: every role, their names apart, the tasks
    /// within FrameworkController's bound.
    fn all(&mut self, v: &Value, p: &FieldPath, order: &[String]) -> Vec<TaskRole> {
        let mut roles = Vec::new();
        match v {
            Value::Object(map) if !map.is_empty() => {
                for key in ordered(map, order) {
                    let path = p.field(key);
                    if let Some(role) = role(
                        key,
                        &map[key],
                        &path,
                        self.context,
                        self.extras,
                        self.auths,
                        self.user_keys,
                        self.errors,
                        self.notes,
                    ) {
                        roles.push(role);
                    }
                }
                check_names(&roles, p, self.errors);
                let tasks: u64 = roles.iter().map(|r| u64::from(r.task_number)).sum();
                if tasks > u64::from(MAX_TASKS_PER_FRAMEWORK) {
                    self.errors.push(
                        p,
                        format!(
                            "the job has {tasks} tasks; FrameworkController runs at most {MAX_TASKS_PER_FRAMEWORK} in one Framework"
                        ),
                    );
                }
            }
            Value::Object(_) => self.errors.push(p, "must name at least one role"),
            other => self.errors.push(
                p,
                format!(
                    "must be an object of role names to roles, got {}",
                    kind(other)
                ),
            ),
        }
        roles
    }
}

fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        Value::Number(n) => n.to_string(),
        other => kind(other).to_string(),
    }
}

/// A job, prerequisite or deployment name: `^[a-zA-Z0-9_-]+$`, at most 255 characters.
fn v2_name<'a>(value: &'a Value, path: &FieldPath, errors: &mut Errors) -> Option<&'a str> {
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
fn ordered<'m>(map: &'m Map<String, Value>, order: &[String]) -> Vec<&'m str> {
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
fn objects<'a>(
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

/// `prerequisites`: the declared ones by (kind, name).
// Long: one arm per prerequisite kind (dockerimage, script, output, data), each short.
fn prerequisites<'a>(
    value: &'a Value,
    path: &FieldPath,
    errors: &mut Errors,
    notes: &mut Vec<String>,
) -> HashMap<(&'static str, String), Prerequisite<'a>> {
    let mut out = HashMap::new();
    for (p, item, map) in objects(value, path, "prerequisite", errors) {
        let name = match map.get("name") {
            Some(v) => v2_name(v, &p.field("name"), errors),
            None => {
                errors.push(&p.field("name"), "is required");
                None
            }
        };
        let kind_name = match map.get("type") {
            Some(Value::String(t)) => KINDS.iter().find(|(k, _)| k == t).map(|(k, _)| *k),
            _ => None,
        };
        let Some(kind_name) = kind_name else {
            errors.push(
                &p.field("type"),
                "is required: one of script, output, data, dockerimage",
            );
            continue;
        };
        match kind_name {
            "dockerimage" => {
                if let Some(obj) = Object::new(item, p.clone(), IMAGE_FIELDS, errors) {
                    if let Some((v, up)) = obj.required("uri", errors) {
                        image(v, &up, errors);
                    }
                    if let Some((v, ap)) = obj.optional("auth")
                        && let Some(auth) = Object::new(v, ap, AUTH_FIELDS, errors)
                    {
                        for key in AUTH_FIELDS {
                            if let Some((v, kp)) = auth.optional(key) {
                                reader::string(v, &kp, errors);
                            }
                        }
                        auth.finish(errors);
                    }
                    obj.finish(errors);
                }
            }
            "data" => {
                if let Some(uri) = map.get("uri")
                    && !uri.is_null()
                    && !uri
                        .as_array()
                        .is_some_and(|a| a.iter().all(Value::is_string))
                {
                    errors.push(&p.field("uri"), "must be a list of strings");
                }
            }
            _ => {
                if let Some(uri) = map.get("uri")
                    && !uri.is_null()
                    && !uri.is_string()
                {
                    errors.push(&p.field("uri"), "must be a string");
                }
            }
        }
        if let Some(plugin) = map.get("plugin")
            && !plugin.is_string()
        {
            errors.push(&p.field("plugin"), "must be a string");
        }
        let Some(name) = name else { continue };
        if kind_name != "dockerimage"
            && map
                .get("plugin")
                .and_then(Value::as_str)
                .is_none_or(|p| !p.starts_with(PLUGINS))
        {
            let what = match kind_name {
                "data" => "data is not fetched for you",
                "output" => "no output is uploaded for you",
                _ => "no script is fetched for you",
            };
            notes.push(format!(
                "{p}: {kind_name} prerequisite {name:?} is only a value for <% ${kind_name}.… %> templates here, as in OpenPAI: {what}"
            ));
        }
        if out
            .insert(
                (kind_name, name.to_string()),
                Prerequisite {
                    value: item,
                    path: p.clone(),
                },
            )
            .is_some()
        {
            errors.push(
                &p.field("name"),
                format!("duplicate {kind_name} prerequisite {name:?}"),
            );
        }
    }
    out
}

/// A deployment's commands around one role's: `preCommands`, `postCommands`.
#[derive(Default)]
struct Wrap<'a> {
    pre: Vec<&'a str>,
    post: Vec<&'a str>,
}

/// A deployment's roles by name.
type DeploymentRoles<'a> = HashMap<String, Wrap<'a>>;

/// One deployment: its name, path and roles.
type Deployment<'a> = (String, FieldPath, DeploymentRoles<'a>);

fn deployments<'a>(
    value: &'a Value,
    path: &FieldPath,
    errors: &mut Errors,
    notes: &mut Vec<String>,
) -> Vec<Deployment<'a>> {
    let mut out: Vec<Deployment<'a>> = Vec::new();
    for (p, _, map) in objects(value, path, "deployment", errors) {
        for key in map.keys() {
            if !["protocolVersion", "name", "taskRoles"].contains(&key.as_str()) {
                notes.push(format!("{}: not used", p.field(key)));
            }
        }
        let name = match map.get("name") {
            Some(v) => v2_name(v, &p.field("name"), errors),
            None => {
                errors.push(&p.field("name"), "is required");
                None
            }
        };
        let rp = p.field("taskRoles");
        let mut roles = HashMap::new();
        match map.get("taskRoles") {
            Some(Value::Object(m)) if !m.is_empty() => {
                for (role, v) in m {
                    let rp = rp.field(role);
                    let Some(obj) = Object::new(v, rp.clone(), DEPLOYMENT_ROLE_FIELDS, errors)
                    else {
                        continue;
                    };
                    let pre = obj
                        .optional("preCommands")
                        .and_then(|(v, p)| commands(v, &p, errors))
                        .unwrap_or_default();
                    let post = obj
                        .optional("postCommands")
                        .and_then(|(v, p)| commands(v, &p, errors))
                        .unwrap_or_default();
                    obj.finish(errors);
                    roles.insert(role.clone(), Wrap { pre, post });
                }
            }
            Some(_) => errors.push(&rp, "must be an object naming at least one role"),
            None => errors.push(&rp, "is required"),
        }
        if let Some(name) = name {
            if out.iter().any(|(n, _, _)| n == name) {
                errors.push(&p.field("name"), format!("duplicate deployment {name:?}"));
            } else {
                out.push((name.to_string(), p, roles));
            }
        }
    }
    out
}

/// `defaults`: the deployment applied (which must exist) and the virtual cluster.
fn defaults<'d, 'a>(
    value: &Value,
    path: &FieldPath,
    deployments: &'d [Deployment<'a>],
    errors: &mut Errors,
    notes: &mut Vec<String>,
) -> (Option<(String, &'d DeploymentRoles<'a>)>, Option<String>) {
    let Value::Object(map) = value else {
        errors.push(path, format!("must be an object, got {}", kind(value)));
        return (None, None);
    };
    let mut deployment = None;
    let mut cluster = None;
    for (key, v) in map {
        let p = path.field(key);
        match key.as_str() {
            "deployment" if v.is_null() => {}
            "deployment" => {
                let Some(name) = reader::string(v, &p, errors) else {
                    continue;
                };
                match deployments.iter().find(|(n, _, _)| n == name) {
                    Some((n, _, roles)) => deployment = Some((n.clone(), roles)),
                    None => errors.push(&p, format!("names no deployment: {name:?}")),
                }
            }
            "virtualCluster" if v.is_null() => {}
            "virtualCluster" => {
                let Some(s) = reader::string(v, &p, errors) else {
                    continue;
                };
                // OpenPAI's virtual clusters are named by its operators (`VC1`); a name
                // that cannot be a queue of the cluster's gang engine is refused at
                // submission there, where the queue is looked up.
                if pai_job::names::is_label_value(s) && !s.is_empty() {
                    cluster = Some(s.to_string());
                } else {
                    errors.push(
                        &p,
                        format!(
                            "{s:?} is not a virtual cluster's name: letters, digits, '-', '_' and '.', at most 63, starting and ending with a letter or digit"
                        ),
                    );
                }
            }
            _ => notes.push(format!("{p}: not used")),
        }
    }
    (deployment, cluster)
}

/// A runtime plugin of `extras`, with the roles it is for (all when `None`).
struct ExtraPlugin {
    name: String,
    parameters: Value,
    ignore_failure: bool,
    roles: Option<Vec<String>>,
    path: FieldPath,
}

struct Extras {
    plugins: Vec<ExtraPlugin>,
    gang_allocation: bool,
    /// `extras.storages`, or the `teamwise_storage` plugin's names.
    storages: Option<Vec<StorageRequest>>,
    /// `extras.hivedScheduler.jobPriorityClass`.
    priority: Option<JobPriority>,
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

fn extras(value: &Value, path: &FieldPath, errors: &mut Errors, notes: &mut Vec<String>) -> Extras {
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
fn failure_policy(value: Option<(&Value, FieldPath)>, errors: &mut Errors) -> Option<bool> {
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

/// A non-empty list of strings.
fn commands<'a>(value: &'a Value, path: &FieldPath, errors: &mut Errors) -> Option<Vec<&'a str>> {
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

/// What a role's templates may name.
struct Context<'a> {
    parameters: &'a Value,
    prerequisites: &'a HashMap<(&'static str, String), Prerequisite<'a>>,
    secrets: Option<&'a Secrets>,
    deployment: Option<&'a DeploymentRoles<'a>>,
}

impl Context<'_> {
    /// The scopes a role's commands are rendered with at submission.
    fn scopes(&self, role: &Map<String, Value>) -> Value {
        let mut scopes = Map::new();
        if !self.parameters.is_null() {
            scopes.insert("$parameters".into(), self.parameters.clone());
        }
        for kind in ["script", "output", "data"] {
            if let Some(Value::String(name)) = role.get(kind)
                && let Some(p) = self.prerequisites.get(&(kind, name.clone()))
            {
                scopes.insert(format!("${kind}"), p.value.clone());
            }
        }
        Value::Object(scopes)
    }
}

/// Renders `text` with `scopes`, noting names that name nothing and refusing tags
/// OpenPAI cannot render. `$secrets` names stay for the runtime; one naming no secret
/// is noted.
fn render(
    text: &str,
    scopes: &Value,
    secrets: Option<&Secrets>,
    path: &FieldPath,
    errors: &mut Errors,
    notes: &mut Vec<String>,
) -> String {
    for piece in template::parse(text) {
        match piece {
            Piece::Malformed(tag) => errors.push(
                path,
                format!(
                    "{tag:?} is not a template OpenPAI renders: write <% $parameters.name %> (or $secrets, $data, $script, $output), closed by %>"
                ),
            ),
            Piece::Name(name) if name == "$secrets" || name.starts_with("$secrets.") => {
                let rest = name.strip_prefix("$secrets").unwrap_or_default();
                let found = secrets.is_some_and(|s| {
                    rest.is_empty()
                        || template::lookup(s.value(), rest.trim_start_matches('.')).is_some()
                });
                if !found {
                    notes.push(format!(
                        "{path}: <% {name} %> names no secret of the job's secrets: the command keeps it as written"
                    ));
                }
            }
            Piece::Name(name) if template::lookup(scopes, &name).is_none() => notes.push(format!(
                "{path}: <% {name} %> names nothing (no such parameter or prerequisite field): the command keeps it as written, as OpenPAI does"
            )),
            _ => {}
        }
    }
    match template::render_within(text, scopes, MAX_COMMAND_BYTES) {
        Ok(text) => text,
        Err(e) => {
            errors.push(path, too_long(e.limit));
            String::new()
        }
    }
}

/// The longest command a role may have: the init container gets it in `USER_CMD`, and
/// Linux takes at most 128 KiB for one `NAME=value` of a process's environment.
const MAX_COMMAND_BYTES: usize = pai_contract::training::MAX_VARIABLE_BYTES - "USER_CMD=".len() - 1;

fn too_long(limit: usize) -> String {
    format!(
        "rendered (with its deployment's and plugins' commands), the command is over {limit} bytes: the task gets it in one environment variable (USER_CMD), which Linux holds to 128 KiB"
    )
}

#[allow(clippy::too_many_arguments)]
// Long: a role's fields in the protocol's order; the long parts (name, prerequisites,
// image, command) are functions of their own.
fn role(
    key: &str,
    value: &Value,
    path: &FieldPath,
    context: &Context<'_>,
    extras: &Extras,
    auths: &mut Vec<(String, RegistryAuth)>,
    user_keys: &mut BTreeSet<String>,
    errors: &mut Errors,
    notes: &mut Vec<String>,
) -> Option<TaskRole> {
    let before = errors.len();
    let name = role_name(key, path, errors);
    let obj = Object::new(value, path.clone(), ROLE_FIELDS, errors)?;
    let Value::Object(map) = value else {
        return None;
    };
    if let Some((v, p)) = obj.optional("protocolVersion")
        && !(v == &json!(2) || v == &json!("2"))
    {
        errors.push(&p, format!("must be 2, got {}", shown(v)));
    }
    let instances = match obj.optional("instances") {
        Some((v, p)) => reader::integer(v, &p, 1, i64::from(MAX_TASKS_PER_ROLE), errors),
        None => Some(1),
    };
    if let (Some(name), Some(n)) = (&name, instances) {
        pod_names_fit(name, n, path, errors);
    }
    let completion = completion(obj.optional("completion"), instances, errors, notes);
    let gang = extras.gang_allocation;
    if let Some((v, p)) = obj.optional("taskRetryCount")
        && let Some(n) = reader::integer(v, &p, i64::from(i32::MIN), I32_MAX, errors)
        && n != 0
    {
        notes.push(if gang {
            format!("{p}: {n} is not used: OpenPAI retries single tasks only with extras.gangAllocation: false; the job's attempt is retried by jobRetryCount")
        } else {
            format!("{p}: {n}: a task is not retried alone here (its peers found it at the barrier); the job's attempt is retried by jobRetryCount")
        });
    }
    let mut plugins = role_prerequisites(&obj, context, errors);
    let image = role_image(&obj, context, auths, errors);
    let (shm, extra_notes) = match obj.optional("extraContainerOptions") {
        Some((v, p)) => container_options(v, &p, errors),
        None => (None, Vec::new()),
    };
    notes.extend(extra_notes);
    let resources = obj
        .required("resourcePerInstance", errors)
        .and_then(|(v, p)| resources(v, &p, shm, errors, notes));
    let scopes = context.scopes(map);
    let command = obj
        .required("commands", errors)
        .and_then(|(v, p)| commands(v, &p, errors).map(|c| (c, p)))
        .map(|(lines, p)| role_command(key, &lines, &p, &scopes, context, errors, notes));
    obj.finish(errors);

    // The runtime plugins for this role: those of extras (filtered by taskroles), then
    // those of its prerequisites.
    let mut uses: Vec<PluginUse> = extras
        .plugins
        .iter()
        .filter(|p| p.roles.as_ref().is_none_or(|r| r.iter().any(|r| r == key)))
        .map(|p| PluginUse {
            name: p.name.clone(),
            parameters: p.parameters.clone(),
            ignore_failure: p.ignore_failure,
            path: p.path.clone(),
        })
        .collect();
    uses.append(&mut plugins);
    let mut around = Around::default();
    for plugin in &uses {
        apply_plugin(
            plugin,
            key,
            &scopes,
            context,
            extras.gang_allocation,
            &mut around,
            user_keys,
            errors,
            notes,
        );
    }
    if errors.len() > before {
        return None;
    }
    let mut ports = resources.as_ref()?.1.clone();
    ports = with_implicit_ports(std::mem::take(&mut ports));
    let command = compose(&command?, &around);
    if command.len() > MAX_COMMAND_BYTES {
        errors.push(&path.field("commands"), too_long(MAX_COMMAND_BYTES));
        return None;
    }
    Some(TaskRole {
        name: name?,
        task_number: instances? as u32,
        resources: resources?.0,
        ports,
        command,
        completion: completion?,
        image,
    })
}

/// A role's name, by protocol v2's rule (a letter or '_', then letters, digits, '_').
fn role_name(key: &str, path: &FieldPath, errors: &mut Errors) -> Option<RoleName> {
    if key.starts_with(|c: char| c.is_ascii_digit()) {
        errors.push(
            path,
            "a role name starts with a letter or '_' (^[a-zA-Z_][a-zA-Z0-9_]*$)",
        );
        None
    } else if let Some(c) = key
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || c == '_'))
    {
        errors.push(
            path,
            format!("a role name is letters, digits and '_' (^[a-zA-Z_][a-zA-Z0-9_]*$); {c:?} is not allowed"),
        );
        None
    } else {
        RoleName::parse(key)
            .map_err(|rule| errors.push(path, rule))
            .ok()
    }
}

/// The prerequisites a role names: they must exist; the runtime plugins among them
/// run. Each kind's field (`dockerImage`, …) must name one of its kind.
fn role_prerequisites(
    obj: &Object<'_>,
    context: &Context<'_>,
    errors: &mut Errors,
) -> Vec<PluginUse> {
    let mut plugins = Vec::new();
    if let Some((v, p)) = obj.optional("prerequisites")
        && let Some(items) = reader::list(v, &p, errors)
    {
        for (i, item) in items.iter().enumerate() {
            let ip = p.index(i);
            let Some(wanted) = reader::string(item, &ip, errors) else {
                continue;
            };
            let found: Vec<&Prerequisite<'_>> = context
                .prerequisites
                .iter()
                .filter(|((_, n), _)| n == wanted)
                .map(|(_, p)| p)
                .collect();
            if found.is_empty() {
                errors.push(&ip, format!("prerequisite {wanted:?} does not exist"));
            }
            for prerequisite in found {
                if let Some(plugin) = plugin_of_prerequisite(prerequisite, errors) {
                    plugins.push(plugin);
                }
            }
        }
    }
    for (kind_name, field) in KINDS {
        if let Some((v, p)) = obj.optional(field)
            && let Some(wanted) = reader::string(v, &p, errors)
            && !context
                .prerequisites
                .contains_key(&(kind_name, wanted.to_string()))
        {
            errors.push(&p, format!("names no {kind_name} prerequisite: {wanted:?}"));
        }
    }
    plugins
}

/// The role's image and, when its prerequisite has one, the registry's credentials
/// (each registry's once, in `auths`).
fn role_image(
    obj: &Object<'_>,
    context: &Context<'_>,
    auths: &mut Vec<(String, RegistryAuth)>,
    errors: &mut Errors,
) -> Option<String> {
    let Some((Value::String(wanted), _)) = obj.required("dockerImage", errors) else {
        return None;
    };
    let prerequisite = context
        .prerequisites
        .get(&("dockerimage", wanted.clone()))?;
    let uri = prerequisite.value.get("uri")?.as_str()?.to_string();
    if let Some(auth) = prerequisite.value.get("auth")
        && !auths.iter().any(|(n, _)| n == wanted)
        && let Some(auth) = registry_auth(auth, &prerequisite.path.field("auth"), context, errors)
    {
        auths.push((wanted.clone(), auth));
    }
    Some(uri)
}

/// The role's commands with its deployment's before and after them, rendered.
fn role_command(
    key: &str,
    lines: &[&str],
    path: &FieldPath,
    scopes: &Value,
    context: &Context<'_>,
    errors: &mut Errors,
    notes: &mut Vec<String>,
) -> String {
    let (pre, post) = context
        .deployment
        .and_then(|d| d.get(key))
        .map(|w| (w.pre.as_slice(), w.post.as_slice()))
        .unwrap_or_default();
    let joined: Vec<&str> = pre
        .iter()
        .chain(lines)
        .chain(post)
        .map(|c| c.trim())
        .collect();
    render(
        &joined.join("\n"),
        scopes,
        context.secrets,
        path,
        errors,
        notes,
    )
    .trim()
    .to_string()
}

/// The role's completion policy as OpenPAI sets it: `minFailedInstances` null or 0 is 1,
/// −1 turns it off; `minSucceededInstances` null or 0 is the role's instances (the job
/// succeeds once they all succeeded), −1 turns it off (every task must complete).
fn completion(
    value: Option<(&Value, FieldPath)>,
    instances: Option<i64>,
    errors: &mut Errors,
    notes: &mut Vec<String>,
) -> Option<CompletionPolicy> {
    let tasks = instances.unwrap_or(1);
    let mut policy = CompletionPolicy {
        min_failed: Some(1),
        min_succeeded: Some(tasks as u32),
    };
    let Some((v, p)) = value else {
        return Some(policy);
    };
    let obj = Object::new(v, p, COMPLETION_FIELDS, errors)?;
    let mut ok = true;
    for (key, v1) in [
        ("minFailedInstances", "minFailedTaskCount"),
        ("minSucceededInstances", "minSucceededTaskCount"),
    ] {
        let found = match (obj.optional(key), obj.optional(v1)) {
            (Some(given), old) => {
                if let Some((_, op)) = old {
                    notes.push(format!("{op}: not used: {key} is given"));
                }
                Some(given)
            }
            (None, Some((v, op))) => {
                notes.push(format!(
                    "{op}: v1's name, read as {key} (OpenPAI's rest-server ignored it; write {key})"
                ));
                Some((v, op))
            }
            (None, None) => None,
        };
        let Some((v, kp)) = found else {
            continue;
        };
        let Some(n) = reader::integer(v, &kp, -1, I32_MAX, errors) else {
            ok = false;
            continue;
        };
        let count = match n {
            // FrameworkController never reaches a count above the role's tasks: off.
            n if n > tasks => {
                notes.push(format!(
                    "{kp}: {n} is more than instances ({tasks}) and can never be reached: it is off, as on FrameworkController"
                ));
                None
            }
            -1 => None,
            0 if key == "minFailedInstances" => Some(1),
            0 => Some(tasks as u32),
            n => Some(n as u32),
        };
        if key == "minFailedInstances" {
            policy.min_failed = count;
        } else {
            policy.min_succeeded = count;
        }
    }
    obj.finish(errors);
    ok.then_some(policy)
}

/// `extraContainerOptions`: `shmMB`, and notes for what is not done.
fn container_options(
    value: &Value,
    path: &FieldPath,
    errors: &mut Errors,
) -> (Option<(i64, FieldPath)>, Vec<String>) {
    let Value::Object(map) = value else {
        errors.push(path, format!("must be an object, got {}", kind(value)));
        return (None, Vec::new());
    };
    let mut shm = None;
    let mut notes = Vec::new();
    for (key, v) in map {
        let p = path.field(key);
        match key.as_str() {
            "shmMB" if v.is_null() => {}
            "shmMB" => shm = reader::integer(v, &p, 1, I32_MAX, errors).map(|n| (n, p)),
            "infiniband" if v == &Value::Bool(false) || v.is_null() => {}
            "infiniband" => notes.push(format!(
                "{p}: no InfiniBand device (rdma/hca) is asked for the tasks here"
            )),
            _ => notes.push(format!("{p}: not used here")),
        }
    }
    (shm, notes)
}

/// `resourcePerInstance`: the resources and the labelled ports.
fn resources(
    value: &Value,
    path: &FieldPath,
    shm: Option<(i64, FieldPath)>,
    errors: &mut Errors,
    notes: &mut Vec<String>,
) -> Option<(Resources, Vec<PortRequest>)> {
    let obj = Object::new(value, path.clone(), RESOURCE_FIELDS, errors)?;
    let cpu = obj
        .required("cpu", errors)
        .and_then(|(v, p)| reader::integer(v, &p, 1, I32_MAX, errors));
    let memory = obj
        .required("memoryMB", errors)
        .and_then(|(v, p)| reader::integer(v, &p, 1, I32_MAX, errors));
    let gpu = obj
        .required("gpu", errors)
        .and_then(|(v, p)| reader::integer(v, &p, 0, I32_MAX, errors));
    let mut ports = Vec::new();
    if let Some((v, p)) = obj.optional("ports") {
        match v {
            Value::Object(map) if !map.is_empty() => {
                for (label, count) in map {
                    let lp = p.field(label);
                    let label = PortLabel::parse(label).map_err(|rule| errors.push(&lp, rule));
                    let count = reader::integer(count, &lp, 0, 65535 - 1024 + 1, errors);
                    if count == Some(0) {
                        notes.push(format!("{lp}: 0 ports asked for: none is given"));
                        continue;
                    }
                    if let (Ok(label), Some(count)) = (label, count) {
                        ports.push(PortRequest {
                            label,
                            count: count as u16,
                            start: PortStart::Any,
                        });
                    }
                }
            }
            Value::Object(_) => errors.push(&p, "must name at least one port label when given"),
            other => errors.push(
                &p,
                format!(
                    "must be an object of labels to port counts, got {}",
                    kind(other)
                ),
            ),
        }
    }
    obj.finish(errors);
    let memory = memory?;
    let shm = match shm {
        Some((shm, p)) if shm > memory => {
            errors.push(
                &p,
                format!("must be at most resourcePerInstance.memoryMB ({memory}), got {shm}"),
            );
            return None;
        }
        Some((shm, _)) => shm,
        None => i64::from(DEFAULT_SHM_MB).min(memory),
    };
    Some((
        Resources {
            cpu: cpu? as u32,
            memory_mb: memory as u32,
            shm_mb: shm as u32,
            gpu: gpu? as u32,
        },
        ports,
    ))
}

/// A prerequisite whose `plugin` is a runtime plugin: its other fields are the plugin's
/// parameters, as OpenPAI's runtime reads them.
fn plugin_of_prerequisite(p: &Prerequisite<'_>, errors: &mut Errors) -> Option<PluginUse> {
    let plugin = p.value.get("plugin")?.as_str()?;
    let name = plugin.strip_prefix(PLUGINS)?.strip_prefix('.')?;
    let Value::Object(map) = p.value else {
        return None;
    };
    let ignore_failure = failure_policy(
        map.get("failurePolicy")
            .map(|v| (v, p.path.field("failurePolicy"))),
        errors,
    )?;
    let mut parameters = map.clone();
    for key in ["plugin", "type", "failurePolicy"] {
        parameters.remove(key);
    }
    Some(PluginUse {
        name: name.to_string(),
        parameters: Value::Object(parameters),
        ignore_failure,
        path: p.path.clone(),
    })
}

#[allow(clippy::too_many_arguments)]
// Long: one arm per runtime plugin OpenPAI ships (ssh, tensorboard, cmd, …), each short;
// they read best side by side.
fn apply_plugin(
    plugin: &PluginUse,
    role: &str,
    scopes: &Value,
    context: &Context<'_>,
    gang: bool,
    around: &mut Around,
    user_keys: &mut BTreeSet<String>,
    errors: &mut Errors,
    notes: &mut Vec<String>,
) {
    let path = &plugin.path;
    let params = &plugin.parameters;
    let param = |key: &str| params.get(key).filter(|v| !v.is_null());
    match plugin.name.as_str() {
        "ssh" => {
            if let Some(Value::Object(map)) = Some(params) {
                for key in map.keys() {
                    if !["jobssh", "sshbarrier", "sshbarrierTimeout", "userssh"]
                        .contains(&key.as_str())
                    {
                        notes.push(format!("{}: not used", path.field("parameters").field(key)));
                    }
                }
            }
            let truth = |v: Option<&Value>| match v {
                Some(Value::Bool(b)) => *b,
                Some(Value::String(s)) => s.eq_ignore_ascii_case("true"),
                _ => false,
            };
            if param("jobssh").is_some() && !truth(param("jobssh")) {
                notes.push(format!(
                    "{path} (role {role}): jobssh is false, but tasks here can always ssh to each other with the job's key"
                ));
            }
            if truth(param("sshbarrier")) {
                if !gang {
                    notes.push(format!(
                        "{path}: sshbarrier without gang allocation: OpenPAI turns job ssh off then; here job ssh stays on and the barrier is kept"
                    ));
                }
                let minutes = match param("sshbarrierTimeout") {
                    None => Some(DEFAULT_SSH_BARRIER_MINUTES),
                    Some(v) => reader::integer(
                        v,
                        &path.field("parameters").field("sshbarrierTimeout"),
                        1,
                        I32_MAX,
                        errors,
                    ),
                };
                if let Some(minutes) = minutes {
                    around.pre.push((ssh_barrier(minutes), false));
                }
            }
            if let Some(user) = param("userssh") {
                let up = path.field("parameters").field("userssh");
                match user.get("value") {
                    Some(Value::String(key)) if !key.trim().is_empty() => {
                        let key = render(key, scopes, context.secrets, &up, errors, notes);
                        user_keys.insert(key.trim().to_string());
                    }
                    Some(Value::String(_)) | None => {}
                    Some(other) => errors.push(
                        &up.field("value"),
                        format!("must be a public key (a string), got {}", kind(other)),
                    ),
                }
                if let Some(t) = user.get("type")
                    && t != "custom"
                {
                    notes.push(format!(
                        "{up}.type: {} — only custom (the value is the public key) is known; the value is used as the key",
                        shown(t)
                    ));
                }
            }
        }
        "cmd" => {
            let mut blocks: Vec<(bool, Vec<String>, FieldPath)> = Vec::new();
            let pp = path.field("parameters");
            if let Some(callbacks) = param("callbacks") {
                let cp = pp.field("callbacks");
                let Some(items) = reader::list(callbacks, &cp, errors) else {
                    return;
                };
                for (i, item) in items.iter().enumerate() {
                    let ip = cp.index(i);
                    let event = item.get("event").and_then(Value::as_str);
                    let Some(lines) = item
                        .get("commands")
                        .and_then(|v| commands(v, &ip.field("commands"), errors))
                    else {
                        continue;
                    };
                    let lines = lines.iter().map(|s| s.to_string()).collect();
                    match event {
                        Some("taskStarts") => blocks.push((true, lines, ip)),
                        Some("taskSucceeds") => blocks.push((false, lines, ip)),
                        other => notes.push(format!(
                            "{ip}.event: {other:?} is not run: OpenPAI's cmd plugin knows taskStarts and taskSucceeds"
                        )),
                    }
                }
            } else {
                for (key, pre) in [("preCommands", true), ("postCommands", false)] {
                    if let Some(v) = param(key)
                        && let Some(lines) = commands(v, &pp.field(key), errors)
                    {
                        let lines = lines.iter().map(|s| s.to_string()).collect();
                        blocks.push((pre, lines, pp.field(key)));
                    }
                }
            }
            for (pre, lines, p) in blocks {
                let text = render(&lines.join("\n"), scopes, context.secrets, &p, errors, notes);
                let block = (text, plugin.ignore_failure);
                if pre {
                    around.pre.push(block);
                } else {
                    around.post.push(block);
                }
            }
        }
        "tensorboard" => notes.push(format!(
            "{path}: the tensorboard plugin is not run here: no TensorBoard is started for you; start it in the command, on a port of resourcePerInstance.ports"
        )),
        "git" => notes.push(format!(
            "{path}: the git plugin is not run here: no repository is cloned for you; clone it in the command"
        )),
        // Its storages are the job's (`extras.storages`), mounted in every task.
        "teamwise_storage" => {}
        other => notes.push(format!(
            "{path}: runtime plugin {other:?} is not known here and is not run"
        )),
    }
}

/// How long the ssh plugin's `sshbarrier` waits when not told (OpenPAI's default).
const DEFAULT_SSH_BARRIER_MINUTES: i64 = 30;

/// The ssh plugin's `sshbarrier`: before the command, wait until every task of the job
/// (by its alias, `<role>-<index>`, with the job's key) answers over ssh, at most
/// `minutes`; the task fails if one never does. The roles and their sizes come from the
/// task's environment, so the text does not grow with the job.
fn ssh_barrier(minutes: i64) -> String {
    let seconds = minutes.saturating_mul(60);
    format!(
        r#"pai_deadline=$(( $(date +%s) + {seconds} ))
for pai_role in $(echo "$PAI_TASK_ROLE_LIST" | tr ',' ' '); do
  eval "pai_count=\$PAI_TASK_ROLE_TASK_COUNT_$pai_role"
  pai_i=0
  while [ "$pai_i" -lt "$pai_count" ]; do
    until ssh -o BatchMode=yes -o ConnectTimeout=10 "$pai_role-$pai_i" true </dev/null >/dev/null 2>&1; do
      if [ "$(date +%s)" -ge "$pai_deadline" ]; then
        echo "sshbarrier: task $pai_role-$pai_i did not answer over ssh within {minutes} minutes" >&2
        exit 1
      fi
      sleep 1
    done
    pai_i=$((pai_i + 1))
  done
done"#
    )
}

/// A dockerimage prerequisite's `auth`, rendered with the secrets (OpenPAI renders only
/// `$secrets` there); a template naming no secret is refused.
fn registry_auth(
    value: &Value,
    path: &FieldPath,
    context: &Context<'_>,
    errors: &mut Errors,
) -> Option<RegistryAuth> {
    let scopes = match context.secrets {
        Some(s) => json!({"$secrets": s.value()}),
        None => json!({}),
    };
    let field = |key: &str, errors: &mut Errors| -> Option<String> {
        let raw = value.get(key).and_then(Value::as_str)?;
        let rendered = template::render(raw, &scopes);
        if template::parse(&rendered)
            .iter()
            .any(|p| !matches!(p, Piece::Text(_)))
        {
            errors.push(
                &path.field(key),
                "names a secret the job's secrets do not hold",
            );
            return None;
        }
        Some(rendered)
    };
    let username = field("username", errors);
    let password = field("password", errors);
    let registry = field("registryuri", errors)
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| DOCKER_HUB.to_string());
    Some(RegistryAuth {
        registry,
        username: username.unwrap_or_default(),
        password: password.unwrap_or_default(),
    })
}

/// Role names must stay distinct as Kubernetes task-role names.
fn check_names(roles: &[TaskRole], path: &FieldPath, errors: &mut Errors) {
    let mut seen: HashMap<&str, &str> = HashMap::new();
    for role in roles {
        if let Some(other) = seen.insert(role.name.task_role(), role.name.as_str()) {
            errors.push(
                &path.field(role.name.as_str()),
                format!(
                    "{:?} and {other:?} both become the task-role name {:?} (lower-case, without '_')",
                    role.name.as_str(),
                    role.name.task_role()
                ),
            );
        }
    }
}

/// The user's command with the plugins' blocks around it, as OpenPAI's runtime ran
/// them: each pre block in its own shell before it (a failure ends the task unless its
/// policy is `ignore`); the post blocks only once it succeeded, each in its own shell.
fn compose(command: &str, around: &Around) -> String {
    if around.pre.is_empty() && around.post.is_empty() {
        return command.to_string();
    }
    let block = |out: &mut String, (text, ignore): &(String, bool)| {
        if *ignore {
            out.push_str(&format!("(\n{text}\n) || true\n"));
        } else {
            out.push_str(&format!("(\nset -e\n{text}\n) || exit $?\n"));
        }
    };
    let mut out = String::new();
    for b in &around.pre {
        block(&mut out, b);
    }
    if around.post.is_empty() {
        out.push_str(command);
        return out;
    }
    // In a shell of its own, so that its `exit` still lets the post blocks decide.
    out.push_str(&format!(
        "(\n{command}\n)\npai_status=$?\nif [ \"$pai_status\" -ne 0 ]; then exit \"$pai_status\"; fi\n"
    ));
    for b in &around.post {
        block(&mut out, b);
    }
    out.push_str("exit 0");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pre_and_post_blocks_surround_the_command() {
        let around = Around {
            pre: vec![("echo pre".into(), false), ("may-fail".into(), true)],
            post: vec![("echo post".into(), false)],
        };
        let out = compose("python train.py", &around);
        assert_eq!(
            out,
            "(\nset -e\necho pre\n) || exit $?\n(\nmay-fail\n) || true\n(\npython train.py\n)\npai_status=$?\nif [ \"$pai_status\" -ne 0 ]; then exit \"$pai_status\"; fi\n(\nset -e\necho post\n) || exit $?\nexit 0"
        );
        assert_eq!(compose("x", &Around::default()), "x");
    }
}
