//! The runtime plugins a role runs (OpenPAI's `ssh`, `cmd`, …), from `extras` or its
//! prerequisites, folded into its command as OpenPAI's runtime ran them.

use std::collections::BTreeSet;

use serde_json::Value;

use super::extras::{Extras, failure_policy};
use super::fields::{PLUGINS, commands, shown};
use super::prerequisites::Prerequisite;
use super::render::render;
use crate::spec::error::{Errors, FieldPath};
use crate::spec::reader::{self, kind};
use crate::spec::secrets::Secrets;
use crate::spec::validate::I32_MAX;

/// A runtime plugin a role runs.
pub(super) struct PluginUse {
    name: String,
    parameters: Value,
    ignore_failure: bool,
    path: FieldPath,
}

/// Commands run around the user's, as OpenPAI's runtime ran plugin commands: each block
/// in its own shell, failing the task unless its policy is `ignore`.
#[derive(Default)]
pub(super) struct Around {
    pre: Vec<(String, bool)>,
    post: Vec<(String, bool)>,
}

/// The runtime plugins role `role` runs: those of `extras` (filtered by `taskroles`),
/// then `of_prerequisites`, those of its prerequisites.
pub(super) fn for_role(
    extras: &Extras,
    role: &str,
    mut of_prerequisites: Vec<PluginUse>,
) -> Vec<PluginUse> {
    let mut uses: Vec<PluginUse> = extras
        .plugins
        .iter()
        .filter(|p| p.roles.as_ref().is_none_or(|r| r.iter().any(|r| r == role)))
        .map(|p| PluginUse {
            name: p.name.clone(),
            parameters: p.parameters.clone(),
            ignore_failure: p.ignore_failure,
            path: p.path.clone(),
        })
        .collect();
    uses.append(&mut of_prerequisites);
    uses
}

/// A prerequisite whose `plugin` is a runtime plugin: its other fields are the plugin's
/// parameters, as OpenPAI's runtime reads them.
pub(super) fn plugin_of_prerequisite(
    p: &Prerequisite<'_>,
    errors: &mut Errors,
) -> Option<PluginUse> {
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

/// What applying a role's runtime plugins shares: the role, the scopes its templates
/// are rendered with, and what the plugins add to.
pub(super) struct PluginRun<'r> {
    pub(super) role: &'r str,
    pub(super) scopes: &'r Value,
    pub(super) secrets: Option<&'r Secrets>,
    /// Whether the job's tasks are admitted together (`extras.gangAllocation`).
    pub(super) gang: bool,
    pub(super) around: Around,
    pub(super) user_keys: &'r mut BTreeSet<String>,
    pub(super) errors: &'r mut Errors,
    pub(super) notes: &'r mut Vec<String>,
}

impl PluginRun<'_> {
    /// Runs `plugin` for the role, as OpenPAI's runtime did: its commands go around the
    /// role's, its keys among the job's; a plugin not run here is named in a note.
    pub(super) fn apply_plugin(&mut self, plugin: &PluginUse) {
        let path = &plugin.path;
        match plugin.name.as_str() {
            "ssh" => self.ssh(plugin),
            "cmd" => self.cmd(plugin),
            "tensorboard" => self.notes.push(format!(
                "{path}: the tensorboard plugin is not run here: no TensorBoard is started for you; start it in the command, on a port of resourcePerInstance.ports"
            )),
            "git" => self.notes.push(format!(
                "{path}: the git plugin is not run here: no repository is cloned for you; clone it in the command"
            )),
            // Its storages are the job's (`extras.storages`), mounted in every task.
            "teamwise_storage" => {}
            other => self.notes.push(format!(
                "{path}: runtime plugin {other:?} is not known here and is not run"
            )),
        }
    }

    /// The ssh plugin: `jobssh` (always on here), `sshbarrier` (a wait before the
    /// command) and `userssh` (the user's key, among the job's).
    fn ssh(&mut self, plugin: &PluginUse) {
        let (role, scopes, secrets, gang) = (self.role, self.scopes, self.secrets, self.gang);
        let (errors, notes) = (&mut *self.errors, &mut *self.notes);
        let path = &plugin.path;
        let params = &plugin.parameters;
        let param = |key: &str| params.get(key).filter(|v| !v.is_null());
        if let Some(Value::Object(map)) = Some(params) {
            for key in map.keys() {
                if !["jobssh", "sshbarrier", "sshbarrierTimeout", "userssh"].contains(&key.as_str())
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
                self.around.pre.push((ssh_barrier(minutes), false));
            }
        }
        if let Some(user) = param("userssh") {
            let up = path.field("parameters").field("userssh");
            match user.get("value") {
                Some(Value::String(key)) if !key.trim().is_empty() => {
                    let key = render(key, scopes, secrets, &up, errors, notes);
                    self.user_keys.insert(key.trim().to_string());
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

    /// The cmd plugin: its `callbacks` (or `preCommands` and `postCommands`) in blocks
    /// before and after the command, each failing the task unless its policy is `ignore`.
    fn cmd(&mut self, plugin: &PluginUse) {
        let (scopes, secrets) = (self.scopes, self.secrets);
        let (errors, notes) = (&mut *self.errors, &mut *self.notes);
        let path = &plugin.path;
        let param = |key: &str| plugin.parameters.get(key).filter(|v| !v.is_null());
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
            let text = render(&lines.join("\n"), scopes, secrets, &p, errors, notes);
            let block = (text, plugin.ignore_failure);
            if pre {
                self.around.pre.push(block);
            } else {
                self.around.post.push(block);
            }
        }
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

/// The user's command with the plugins' blocks around it, as OpenPAI's runtime ran
/// them: each pre block in its own shell before it (a failure ends the task unless its
/// policy is `ignore`); the post blocks only once it succeeded, each in its own shell.
pub(super) fn compose(command: &str, around: &Around) -> String {
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
