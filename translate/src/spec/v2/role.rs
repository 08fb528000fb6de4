//! One role of `taskRoles` (its name, instances, completion, image, resources and
//! command, with its deployment's and plugins' commands around it), and the roles
//! together.

use std::collections::{BTreeSet, HashMap};

use serde_json::{Value, json};

use pai_contract::template::{self, Piece};
use pai_job::names::{MAX_TASKS_PER_FRAMEWORK, MAX_TASKS_PER_ROLE};

use super::extras::Extras;
use super::fields::{
    COMPLETION_FIELDS, DEFAULT_SHM_MB, KINDS, MAX_COMMAND_BYTES, RESOURCE_FIELDS, ROLE_FIELDS,
    commands, ordered, shown, too_long,
};
use super::plugins::{self, Around, PluginRun, PluginUse, compose, plugin_of_prerequisite};
use super::prerequisites::Prerequisite;
use super::render::{Context, render};
use crate::spec::error::{Errors, FieldPath};
use crate::spec::names::{PortLabel, RoleName};
use crate::spec::reader::{self, Object, kind};
use crate::spec::secrets::RegistryAuth;
use crate::spec::validate::{I32_MAX, pod_names_fit, with_implicit_ports};
use crate::spec::{CompletionPolicy, PortRequest, PortStart, Resources, TaskRole};

/// What reading the roles shares: the job's context, and what the roles add to.
pub(super) struct RoleReading<'a> {
    pub(super) context: &'a Context<'a>,
    pub(super) extras: &'a Extras,
    pub(super) auths: &'a mut Vec<(String, RegistryAuth)>,
    pub(super) user_keys: &'a mut BTreeSet<String>,
    pub(super) errors: &'a mut Errors,
    pub(super) notes: &'a mut Vec<String>,
}

impl RoleReading<'_> {
    /// `taskRoles` (`v` at `p`), in `order`: every role, their names apart, the tasks
    /// within FrameworkController's bound.
    pub(super) fn all(&mut self, v: &Value, p: &FieldPath, order: &[String]) -> Vec<TaskRole> {
        let mut roles = Vec::new();
        match v {
            Value::Object(map) if !map.is_empty() => {
                for key in ordered(map, order) {
                    let path = p.field(key);
                    if let Some(role) = self.role(key, &map[key], &path) {
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

    /// Role `key` (`value` at `path`): its fields in the protocol's order (the long
    /// parts are functions of their own), then its runtime plugins around its command.
    fn role(&mut self, key: &str, value: &Value, path: &FieldPath) -> Option<TaskRole> {
        let (context, extras) = (self.context, self.extras);
        let (errors, notes) = (&mut *self.errors, &mut *self.notes);
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
        task_retry(
            obj.optional("taskRetryCount"),
            extras.gang_allocation,
            errors,
            notes,
        );
        let of_prerequisites = role_prerequisites(&obj, context, errors);
        let image = role_image(&obj, context, self.auths, errors);
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

        let mut run = PluginRun {
            role: key,
            scopes: &scopes,
            secrets: context.secrets,
            gang: extras.gang_allocation,
            around: Around::default(),
            user_keys: self.user_keys,
            errors,
            notes,
        };
        for plugin in &plugins::for_role(extras, key, of_prerequisites) {
            run.apply_plugin(plugin);
        }
        let around = run.around;
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
}

/// `taskRetryCount` (`found`): an integer, not used here; a note says how the job is
/// retried instead (`gang`: whether its tasks are admitted together).
fn task_retry(
    found: Option<(&Value, FieldPath)>,
    gang: bool,
    errors: &mut Errors,
    notes: &mut Vec<String>,
) {
    if let Some((v, p)) = found
        && let Some(n) = reader::integer(v, &p, i64::from(i32::MIN), I32_MAX, errors)
        && n != 0
    {
        notes.push(if gang {
            format!("{p}: {n} is not used: OpenPAI retries single tasks only with extras.gangAllocation: false; the job's attempt is retried by jobRetryCount")
        } else {
            format!("{p}: {n}: a task is not retried alone here (its peers found it at the barrier); the job's attempt is retried by jobRetryCount")
        });
    }
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

/// Where Docker's clients log in when a registry is not named.
const DOCKER_HUB: &str = "https://index.docker.io/v1/";

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
