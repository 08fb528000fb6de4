//! Names of users, jobs, roles and port labels: what each may contain, and the one
//! deterministic rule that turns them into Kubernetes names.
//!
//! **Normalisation** (`to_kube_name`): ASCII letters are lower-cased; every character
//! other than `a-z` and `0-9` becomes `-`; runs of `-` collapse into one; `-` is trimmed
//! from both ends. `tfDemo` → `tfdemo`, `my_job.v2` → `my-job-v2`, `__x__` → `x`.
//!
//! The Framework of job `J` of user `U` is named `<kube(U)>--<kube(J)>`: normalised names
//! never contain `--`, so the pair can always be read back, and two users' jobs of the
//! same name never meet. Its pods are `<framework>-<kube(role)>-<index>`.

use std::fmt;

/// Longest Kubernetes name of a pod (a DNS-1123 label, as its host name).
pub const MAX_POD_NAME: usize = 63;

/// Normalises `name` to DNS-1123 characters by the rule above. May return an empty
/// string (for a name with no letter or digit); callers reject that.
pub fn to_kube_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    out
}

/// The characters OpenPAI allowed in user and job names.
fn is_openpai_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~')
}

/// The characters allowed in role names and port labels: they become parts of
/// environment variable names.
fn is_env_fragment_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn first_bad(name: &str, ok: impl Fn(char) -> bool) -> Option<char> {
    name.chars().find(|&c| !ok(c))
}

/// A name as given plus its Kubernetes form.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Named {
    given: String,
    kube: String,
}

macro_rules! named_type {
    ($(#[$doc:meta])* $ty:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        pub struct $ty(Named);

        impl $ty {
            /// The name exactly as given.
            pub fn as_str(&self) -> &str {
                &self.0.given
            }

            /// The normalised Kubernetes form.
            pub fn kube(&self) -> &str {
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
    /// A user name: `^[A-Za-z0-9\-._~]+$` with at least one letter or digit, whose
    /// Kubernetes form fits a label value.
    UserName
);
named_type!(
    /// A job name: `^[A-Za-z0-9\-._~]+$` with at least one letter or digit.
    JobName
);
named_type!(
    /// A role name: `^[A-Za-z0-9_]+$`; it is part of variable names such as
    /// `PAI_HOST_IP_<role>_<i>`.
    RoleName
);

fn parse_openpai_name(what: &str, name: &str) -> Result<Named, String> {
    if name.is_empty() {
        return Err(format!("{what} must not be empty"));
    }
    if let Some(c) = first_bad(name, is_openpai_name_char) {
        return Err(format!(
            "must match ^[A-Za-z0-9\\-._~]+$ (letters, digits, '-', '.', '_', '~'); {c:?} is not allowed"
        ));
    }
    let kube = to_kube_name(name);
    if kube.is_empty() {
        return Err(format!("{what} must contain at least one letter or digit"));
    }
    Ok(Named {
        given: name.to_string(),
        kube,
    })
}

impl UserName {
    pub fn parse(name: &str) -> Result<Self, String> {
        let named = parse_openpai_name("a user name", name)?;
        if named.kube.len() > MAX_POD_NAME {
            return Err(format!(
                "Kubernetes form {:?} is {} characters; at most {MAX_POD_NAME}",
                named.kube,
                named.kube.len()
            ));
        }
        Ok(Self(named))
    }
}

impl JobName {
    pub fn parse(name: &str) -> Result<Self, String> {
        parse_openpai_name("a job name", name).map(Self)
    }
}

impl RoleName {
    pub fn parse(name: &str) -> Result<Self, String> {
        if name.is_empty() {
            return Err("must not be empty".to_string());
        }
        if let Some(c) = first_bad(name, is_env_fragment_char) {
            return Err(format!(
                "must match ^[A-Za-z0-9_]+$, since it is part of variable names like PAI_HOST_IP_<role>_0; {c:?} is not allowed"
            ));
        }
        let kube = to_kube_name(name);
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
    pub fn parse(label: &str) -> Result<Self, String> {
        if pai_contract::env::is_shell_identifier(label) {
            Ok(Self(label.to_string()))
        } else {
            Err(format!(
                "{label:?} must match ^[A-Za-z_][A-Za-z0-9_]*$, since it is part of variable names like PAI_PORT_LIST_<role>_0_<label>"
            ))
        }
    }

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
    format!("{}--{}", user.kube(), job.kube())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn normalisation_examples() {
        assert_eq!(to_kube_name("tfDemo"), "tfdemo");
        assert_eq!(to_kube_name("my_job.v2"), "my-job-v2");
        assert_eq!(to_kube_name("__x__"), "x");
        assert_eq!(to_kube_name("a--b~~c"), "a-b-c");
        assert_eq!(to_kube_name("~._"), "");
    }

    proptest! {
        #[test]
        fn normalised_names_are_dns_labels_without_double_dash(name in "[A-Za-z0-9._~-]{1,40}") {
            let kube = to_kube_name(&name);
            prop_assert!(kube.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
            prop_assert!(!kube.starts_with('-') && !kube.ends_with('-'));
            prop_assert!(!kube.contains("--"));
            prop_assert_eq!(to_kube_name(&kube), kube.clone());
        }
    }

    #[test]
    fn names_reject_what_cannot_map() {
        assert!(JobName::parse("a b").is_err());
        assert!(JobName::parse("~~").is_err());
        assert!(RoleName::parse("ps.1").is_err());
        assert!(PortLabel::parse("1x").is_err());
        assert_eq!(
            JobName::parse("tf.Demo").map(|j| j.kube().to_string()),
            Ok("tf-demo".to_string())
        );
    }
}
