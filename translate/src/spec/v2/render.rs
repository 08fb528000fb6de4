//! The templates of a role's commands: what they may name (the job's parameters, the
//! role's prerequisites, the secrets) and their rendering, as OpenPAI's rest-server
//! renders them.

use std::collections::HashMap;

use serde_json::{Map, Value};

use pai_contract::template::{self, Piece};

use super::fields::{MAX_COMMAND_BYTES, too_long};
use super::prerequisites::{DeploymentRoles, Prerequisite};
use crate::spec::error::{Errors, FieldPath};
use crate::spec::secrets::Secrets;

/// What a role's templates may name.
pub(super) struct Context<'a> {
    pub(super) parameters: &'a Value,
    pub(super) prerequisites: &'a HashMap<(&'static str, String), Prerequisite<'a>>,
    pub(super) secrets: Option<&'a Secrets>,
    pub(super) deployment: Option<&'a DeploymentRoles<'a>>,
}

impl Context<'_> {
    /// The scopes a role's commands are rendered with at submission.
    pub(super) fn scopes(&self, role: &Map<String, Value>) -> Value {
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
pub(super) fn render(
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
