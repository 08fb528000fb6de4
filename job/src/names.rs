//! Kubernetes names of a job's objects, by FrameworkController's rules.
//!
//! FrameworkController registers its CRD with the pattern `^[a-z0-9]{1,63}$` for the
//! Framework's `metadata.name` and for every `spec.taskRoles[].name`, and names pods
//! `<framework>-<taskrole>-<index>`, which must fit a DNS label (63 characters). So:
//!
//! - **Framework**: the first 128 bits of SHA-256 over `<user>/<job>`, as 32 lower-case
//!   hex digits. `/` is in neither name, so different (user, job) pairs, exactly as typed,
//!   hash different inputs: `Alice`/`alice` and `a.b`/`a_b` are different Frameworks.
//!   The readable names live in labels and annotations; nothing reads them back out of
//!   the Framework's name.
//! - **Task role**: the role's name lower-cased with every `_` removed (`Worker_1` →
//!   `worker1`). Two roles of one job that meet there are refused at validation.
//! - **Label values** (readable user and job names, for `kubectl -l` and narrowing a
//!   list): lower-cased, runs of other characters than `a-z0-9` as one `-`, trimmed, cut to
//!   63. Lossy: whoever needs the exact name reads the annotation.

use std::fmt::Write as _;

/// Length of every Framework name rest-lite makes.
pub const FRAMEWORK_NAME_LEN: usize = 32;
/// Longest pod name (a DNS-1123 label, the pod's host name).
pub const MAX_POD_NAME: usize = 63;
/// Longest Kubernetes label value.
pub const MAX_LABEL_VALUE: usize = 63;
/// Most tasks in one role: the maximum of `taskNumber` in FrameworkController's CRD.
pub const MAX_TASKS_PER_ROLE: u32 = 10_000;
/// Most tasks in one Framework: what FrameworkController supports with its large-Framework
/// compression (its config's own comment; about 300 without it).
pub const MAX_TASKS_PER_FRAMEWORK: u32 = 10_000;
/// The pattern FrameworkController's CRD requires of Framework and task-role names.
pub const NAME_PATTERN: &str = "^[a-z0-9]{1,63}$";

/// Whether `name` matches [`NAME_PATTERN`].
pub fn is_controller_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// Whether `name` is a DNS-1123 label (`[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63):
/// the rule of namespace names.
pub fn is_dns_label(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && !name.starts_with('-')
        && !name.ends_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Whether `value` is a Kubernetes label value: empty, or at most 63 of letters, digits,
/// `-`, `_` and `.`, starting and ending with a letter or digit.
pub fn is_label_value(value: &str) -> bool {
    value.is_empty()
        || (value.len() <= 63
            && value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && value.ends_with(|c: char| c.is_ascii_alphanumeric())
            && value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')))
}

/// Whether `key` is a Kubernetes label key: an optional DNS subdomain prefix and `/`,
/// then a name of at most 63 (letters, digits, `-`, `_`, `.`, starting and ending with a
/// letter or digit).
pub fn is_label_key(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    prefix.is_none_or(|p| !p.is_empty() && is_dns_subdomain(p))
        && !name.is_empty()
        && is_label_value(name)
}

/// Whether `name` is a DNS-1123 subdomain (dot-separated labels, at most 253): the rule
/// of most object names, service accounts among them.
pub fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_dns_label)
}

/// The Framework name of `job` of `user`, both exactly as typed (see the module's rule).
pub fn framework_name(user: &str, job: &str) -> String {
    let input = format!("{user}/{job}");
    let digest = ring::digest::digest(&ring::digest::SHA256, input.as_bytes());
    let mut name = String::with_capacity(FRAMEWORK_NAME_LEN);
    for byte in &digest.as_ref()[..FRAMEWORK_NAME_LEN / 2] {
        let _ = write!(name, "{byte:02x}");
    }
    name
}

/// The task-role name of a role named `role` in the spec: lower-cased, `_`, `-`, `.` and
/// `~` removed. Empty
/// when `role` has no letter or digit; callers refuse that.
pub fn task_role_name(role: &str) -> String {
    role.chars()
        .filter(|&c| !matches!(c, '_' | '-' | '.' | '~'))
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Longest task-role name whose pods, up to index `task_number - 1`, fit [`MAX_POD_NAME`]
/// beside a Framework name of [`FRAMEWORK_NAME_LEN`].
pub fn max_task_role_name(task_number: u32) -> usize {
    let index_digits = task_number.saturating_sub(1).max(1).ilog10() as usize + 1;
    MAX_POD_NAME - FRAMEWORK_NAME_LEN - 2 - index_digits
}

/// A readable label value for `name` (see the module's rule); may be empty.
pub fn label_value(name: &str) -> String {
    let mut out = String::with_capacity(name.len().min(MAX_LABEL_VALUE));
    for c in name.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    out.truncate(MAX_LABEL_VALUE);
    while out.ends_with('-') {
        out.pop();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn framework_names_fit_the_crd() {
        let name = framework_name("alice", "tfDemo");
        assert_eq!(name.len(), FRAMEWORK_NAME_LEN);
        assert!(is_controller_name(&name), "{name}");
        assert_eq!(name, framework_name("alice", "tfDemo"), "deterministic");
        assert_ne!(name, framework_name("Alice", "tfDemo"));
        assert_ne!(framework_name("a", "b.c"), framework_name("a", "b_c"));
        // "~" is a legal character of both names: no separator ambiguity.
        assert_ne!(framework_name("a~b", "c"), framework_name("a", "b~c"));
    }

    #[test]
    fn controller_names() {
        assert!(is_controller_name("worker0"));
        assert!(!is_controller_name("alice--tfdemo"));
        assert!(!is_controller_name("Worker"));
        assert!(!is_controller_name(""));
        assert!(!is_controller_name(&"a".repeat(64)));
        assert_eq!(task_role_name("Worker_1"), "worker1");
        assert_eq!(task_role_name("___"), "");
    }

    #[test]
    fn dns_names() {
        assert!(is_dns_label("jobs-1"));
        assert!(!is_dns_label("-jobs"));
        assert!(!is_dns_label("Jobs"));
        assert!(!is_dns_label("a.b"));
        assert!(is_dns_subdomain("a.b-c"));
        assert!(!is_dns_subdomain("a..b"));
        assert!(!is_dns_subdomain(""));
    }

    #[test]
    fn role_room_shrinks_with_index_digits() {
        assert_eq!(max_task_role_name(1), 63 - 32 - 2 - 1);
        assert_eq!(max_task_role_name(10), 63 - 32 - 2 - 1);
        assert_eq!(max_task_role_name(11), 63 - 32 - 2 - 2);
        assert_eq!(max_task_role_name(MAX_TASKS_PER_ROLE), 63 - 32 - 2 - 4);
        let role = "r".repeat(max_task_role_name(10_000));
        let pod = pai_contract::framework::pod_name(&framework_name("u", "j"), &role, 9_999);
        assert_eq!(pod.len(), MAX_POD_NAME);
    }

    #[test]
    fn label_values() {
        assert_eq!(label_value("tfDemo"), "tfdemo");
        assert_eq!(label_value("my_job.v2"), "my-job-v2");
        assert_eq!(label_value("~._"), "");
        assert_eq!(
            label_value(&format!("{}.x", "a".repeat(62))),
            "a".repeat(62)
        );
    }

    proptest! {
        #[test]
        fn label_values_are_valid(name in "[A-Za-z0-9._~-]{1,100}") {
            let value = label_value(&name);
            prop_assert!(value.len() <= MAX_LABEL_VALUE);
            prop_assert!(value.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
            prop_assert!(!value.starts_with('-') && !value.ends_with('-'));
        }
    }
}
