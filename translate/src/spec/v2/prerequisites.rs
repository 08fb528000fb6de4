//! Protocol v2's `prerequisites` (the images, scripts, outputs and data a role names),
//! `deployments` (commands around a role's) and `defaults` (the deployment applied, the
//! virtual cluster).

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::fields::{
    AUTH_FIELDS, DEPLOYMENT_ROLE_FIELDS, IMAGE_FIELDS, KINDS, PLUGINS, commands, objects, v2_name,
};
use crate::spec::error::{Errors, FieldPath};
use crate::spec::reader::{self, Object, kind};
use crate::spec::validate::image;

/// A prerequisite as declared: its kind, and the whole object (the template scope
/// `$data`, `$script`, `$output` is the object itself).
pub(super) struct Prerequisite<'a> {
    pub(super) value: &'a Value,
    pub(super) path: FieldPath,
}

/// `prerequisites`: the declared ones by (kind, name).
pub(super) fn prerequisites<'a>(
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
        kind_fields(kind_name, item, map, &p, errors);
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

/// The fields of a prerequisite of kind `kind_name` (`item` at `p`): a dockerimage's
/// `uri` and `auth`, data's `uri` (a list of strings), another kind's `uri` (a string).
fn kind_fields(
    kind_name: &str,
    item: &Value,
    map: &Map<String, Value>,
    p: &FieldPath,
    errors: &mut Errors,
) {
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
}

/// A deployment's commands around one role's: `preCommands`, `postCommands`.
#[derive(Default)]
pub(super) struct Wrap<'a> {
    pub(super) pre: Vec<&'a str>,
    pub(super) post: Vec<&'a str>,
}

/// A deployment's roles by name.
pub(super) type DeploymentRoles<'a> = HashMap<String, Wrap<'a>>;

/// One deployment: its name, path and roles.
pub(super) type Deployment<'a> = (String, FieldPath, DeploymentRoles<'a>);

pub(super) fn deployments<'a>(
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

/// `defaults` when given (`found`): the deployment applied and the virtual cluster; a
/// note for each deployment it does not apply.
pub(super) fn applied<'d, 'a>(
    found: Option<(&Value, FieldPath)>,
    deployments: &'d [Deployment<'a>],
    errors: &mut Errors,
    notes: &mut Vec<String>,
) -> (Option<(String, &'d DeploymentRoles<'a>)>, Option<String>) {
    let (deployment, virtual_cluster) = match found {
        Some((v, p)) => defaults(v, &p, deployments, errors, notes),
        None => (None, None),
    };
    for (name, path, _) in deployments {
        if deployment.as_ref().is_none_or(|(d, _)| d != name) {
            notes.push(format!(
                "{path}: deployment {name:?} is not applied: defaults.deployment does not name it (as in OpenPAI)"
            ));
        }
    }
    (deployment, virtual_cluster)
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
