//! Names of users, jobs, roles and port labels: what each may contain, and the
//! Kubernetes names they become (the rules are in `pai_job::names`).
//!
//! User and job names are OpenPAI's, `^[A-Za-z0-9\-._~]+$`, at most
//! [`MAX_NAME_LEN`] characters; the Framework of a (user, job) pair is a digest of both
//! exactly as typed, so any two pairs get two Frameworks. Role names are
//! `^[A-Za-z0-9\-._~]+$` (parts of variable names, with `_` for the last three); a role's
//! task-role name in the Framework is its name lower-cased without `_`, `-`, `.` and `~`,
//! and must leave its pods' names within 63 characters (checked with the role's task
//! number at validation).

use std::fmt;

use pai_job::names::{label_value, task_role_name};

/// Longest user or job name: both are kept in annotations beside the spec, and Kubernetes
/// allows 256 KiB for all annotations of an object together.
pub const MAX_NAME_LEN: usize = 256;
/// OpenPAI's rule for user and job names (the OpenAPI document's `pattern`, read from here).
pub const NAME_PATTERN: &str = r"^[A-Za-z0-9\-._~]+$";
/// The rule of role names: OpenPAI v1's first rule (it dropped `-` in April 2018), with at
/// least one letter or digit (the Framework's task-role name drops the others).
pub const ROLE_PATTERN: &str = r"^[A-Za-z0-9\-._~]*[A-Za-z0-9][A-Za-z0-9\-._~]*$";
/// The characters of role names, as the error about a bad one quotes them.
const ROLE_CHARS: &str = r"^[A-Za-z0-9\-._~]+$";
/// The rule of port labels: a shell identifier.
pub const LABEL_PATTERN: &str = r"^[A-Za-z_][A-Za-z0-9_]*$";

/// The characters OpenPAI allowed in user and job names.
fn is_openpai_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~')
}

/// The characters allowed in role names. They become parts of variable names, written
/// with `_` for each of `-`, `.` and `~` ([`pai_contract::env::var_part`]).
fn is_role_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '~')
}

fn first_bad(name: &str, ok: impl Fn(char) -> bool) -> Option<char> {
    name.chars().find(|&c| !ok(c))
}

/// A name as given plus the Kubernetes form it is known by.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Named {
    given: String,
    kube: String,
}

macro_rules! named_type {
    ($(#[$doc:meta])* $ty:ident, $kube:ident, $kube_doc:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        pub struct $ty(Named);

        impl $ty {
            /// The name exactly as given.
            pub fn as_str(&self) -> &str {
                &self.0.given
            }

            #[doc = $kube_doc]
            pub fn $kube(&self) -> &str {
                &self.0.kube
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0.given)
            }
        }
    };
}

named_type!(
    /// A user name: `^[A-Za-z0-9\-._~]+$`, at most [`MAX_NAME_LEN`] characters.
    UserName,
    label,
    "The readable label value (lossy: the exact name is in an annotation)."
);
named_type!(
    /// A job name: `^[A-Za-z0-9\-._~]+$`, at most [`MAX_NAME_LEN`] characters.
    JobName,
    label,
    "The readable label value (lossy: the exact name is in an annotation)."
);
named_type!(
    /// A role name: `^[A-Za-z0-9\-._~]+$` with a letter or digit; it is part of variable
    /// names such as `PAI_HOST_IP_<role>_<i>` (with `_` for `-`, `.`, `~`).
    RoleName,
    task_role,
    "The Framework's task-role name: lower-case, without `_` (`^[a-z0-9]+$`)."
);

fn parse_openpai_name(what: &str, name: &str) -> Result<Named, String> {
    if name.is_empty() {
        return Err(format!("{what} must not be empty"));
    }
    if let Some(c) = first_bad(name, is_openpai_name_char) {
        return Err(format!(
            "must match {NAME_PATTERN} (letters, digits, '-', '.', '_', '~'); {c:?} is not allowed"
        ));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!(
            "{what} is {} characters; at most {MAX_NAME_LEN}",
            name.len()
        ));
    }
    Ok(Named {
        given: name.to_string(),
        kube: label_value(name),
    })
}

impl UserName {
    /// Checks `name` against the rule of user names.
    pub fn parse(name: &str) -> Result<Self, String> {
        parse_openpai_name("a user name", name).map(Self)
    }
}

impl JobName {
    /// Checks `name` against the rule of job names.
    pub fn parse(name: &str) -> Result<Self, String> {
        parse_openpai_name("a job name", name).map(Self)
    }
}

impl RoleName {
    /// Checks `name` against the rule of role names. The length is checked with the
    /// role's task number (see [`pai_job::names::max_task_role_name`]).
    pub fn parse(name: &str) -> Result<Self, String> {
        if name.is_empty() {
            return Err("must not be empty".to_string());
        }
        if let Some(c) = first_bad(name, is_role_char) {
            return Err(format!(
                "must match {ROLE_CHARS} (letters, digits, '-', '.', '_', '~'); {c:?} is not allowed"
            ));
        }
        let kube = task_role_name(name);
        if kube.is_empty() {
            return Err("must contain at least one letter or digit".to_string());
        }
        Ok(Self(Named {
            given: name.to_string(),
            kube,
        }))
    }
}

/// A port label: `^[A-Za-z_][A-Za-z0-9_]*$`. It is part of variable names
/// (`PAI_PORT_LIST_<role>_<i>_<label>`); a leading digit could make two of them equal.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PortLabel(String);

impl PortLabel {
    /// Checks `label` against the rule of port labels.
    pub fn parse(label: &str) -> Result<Self, String> {
        if pai_contract::env::is_shell_identifier(label) {
            Ok(Self(label.to_string()))
        } else {
            Err(format!(
                "{label:?} must match {LABEL_PATTERN}, since it is part of variable names like PAI_PORT_LIST_<role>_0_<label>"
            ))
        }
    }

    /// The label as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PortLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Name of the Framework that runs `job` for `user`.
pub fn framework_name(user: &UserName, job: &JobName) -> String {
    pai_job::names::framework_name(user.as_str(), job.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_reject_what_cannot_map() {
        assert!(JobName::parse("a b").is_err());
        assert!(JobName::parse("").is_err());
        assert!(JobName::parse(&"j".repeat(MAX_NAME_LEN + 1)).is_err());
        assert!(RoleName::parse("ps 1").is_err());
        assert_eq!(
            RoleName::parse("cntk-train.1").map(|r| r.task_role().to_string()),
            Ok("cntktrain1".to_string())
        );
        assert!(RoleName::parse("__").is_err());
        assert!(PortLabel::parse("1x").is_err());
        assert_eq!(
            RoleName::parse("Param_Server").map(|r| r.task_role().to_string()),
            Ok("paramserver".to_string())
        );
        assert_eq!(
            JobName::parse("tf.Demo").map(|j| j.label().to_string()),
            Ok("tf-demo".to_string())
        );
    }

    #[test]
    fn openpai_names_without_letters_are_names() {
        // OpenPAI's pattern allows them; the Framework's name does not depend on them.
        let user = UserName::parse("~~").expect("valid");
        let job = JobName::parse("-._").expect("valid");
        assert!(pai_job::names::is_controller_name(&framework_name(
            &user, &job
        )));
        assert_eq!(user.label(), "");
    }
}
