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
//!
//! Here the entry, `job`, reads the top-level fields; beside it: `fields` (the field
//! lists and the small reads they share), `prerequisites` (with `deployments` and
//! `defaults`), `extras`, `render` (what a command's templates may name), `role` (one
//! role and the roles together) and `plugins` (the runtime plugins around a command).

mod extras;
mod fields;
mod plugins;
mod prerequisites;
mod render;
mod role;

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

use pai_contract::training::Selection;

use super::error::{Errors, FieldPath, SpecErrors};
use super::names::JobName;
use super::reader::{self, Object, kind};
use super::secrets::{RegistryAuth, Secrets};
use super::validate::{I32_MAX, training_ports};
use super::{JobSpec, LegacyDirs, Protocol, TaskRole};
use extras::{Extras, extras};
pub use fields::{DEFAULT_SHM_MB, PLUGINS};
use fields::{JOB_FIELDS, shown, v2_name};
use prerequisites::{applied, deployments, prerequisites};
use render::Context;
use role::RoleReading;

/// Reads a v2 document into a [`JobSpec`]: `value` is the document, `order` its roles'
/// names as written. Protocol v2's top-level fields are read in the order the protocol
/// lists them, then the roles; `assemble` makes the spec of them.
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
    let (deployment, virtual_cluster) = applied(
        obj.optional("defaults"),
        &deployments,
        &mut errors,
        &mut notes,
    );
    let extras = match obj.optional("extras") {
        Some((v, p)) => extras(v, &p, &mut errors, &mut notes),
        None => Extras::default(),
    };
    let roles_value = obj.required("taskRoles", &mut errors);
    obj.finish(&mut errors);

    let parts = Parts {
        name,
        retry_count,
        secrets,
        virtual_cluster,
        extras,
    };
    let context = Context {
        parameters: &parameters,
        prerequisites: &prerequisites,
        secrets: parts.secrets.as_ref(),
        deployment: deployment.as_ref().map(|(_, roles)| *roles),
    };
    let mut auths: Vec<(String, RegistryAuth)> = Vec::new();
    let mut user_keys: BTreeSet<String> = BTreeSet::new();
    let mut roles = Vec::new();
    if let Some((v, p)) = roles_value {
        let mut read = RoleReading {
            context: &context,
            extras: &parts.extras,
            auths: &mut auths,
            user_keys: &mut user_keys,
            errors: &mut errors,
            notes: &mut notes,
        };
        roles = read.all(v, &p, order);
    }
    assemble(parts, roles, auths, user_keys, errors, notes)
}

/// The job's fields beside its roles, as read.
struct Parts {
    name: Option<JobName>,
    retry_count: Option<u32>,
    secrets: Option<Secrets>,
    virtual_cluster: Option<String>,
    extras: Extras,
}

/// The [`JobSpec`] of the job's `parts` and `roles` (`auths`, the registries'
/// credentials; `user_keys`, the users' public keys), when reading them found no error
/// and the roles' ports fit the training environment.
fn assemble(
    parts: Parts,
    mut roles: Vec<TaskRole>,
    auths: Vec<(String, RegistryAuth)>,
    user_keys: BTreeSet<String>,
    mut errors: Errors,
    mut notes: Vec<String>,
) -> Result<JobSpec, SpecErrors> {
    let Parts {
        name,
        retry_count,
        secrets,
        virtual_cluster,
        extras,
    } = parts;
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
