//! What of the runtime's variables fits a process's environment. Linux refuses `execve`
//! for any `NAME=value` over 128 KiB and for arguments and environment together over a
//! quarter of the stack limit; a job of thousands of tasks would pass both with the
//! per-task variables of the contract. What does not fit is left out of the
//! environment, whole classes at a time so that a script never sees half a family, and
//! stays readable in `peer-env.sh`.

use pai_contract::training::{MAX_DYNAMIC_ENV_BYTES, MAX_VARIABLE_BYTES, variable_bytes};

use crate::dynamic_env::{Class, Variable};

/// Why a variable is not exported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// Alone over Linux's 128 KiB per variable.
    TooLarge,
    /// Its class would take the runtime's variables over their share of the environment.
    Budget,
}

/// The variables left out, and why.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fitted {
    pub exported: Vec<Variable>,
    pub held: Vec<(Variable, Why)>,
}

impl Fitted {
    /// Bytes the exported variables take in the environment.
    pub fn bytes(&self) -> usize {
        self.exported
            .iter()
            .map(|v| variable_bytes(&v.name, &v.value))
            .sum()
    }

    /// One line for the log: how much is left out, by reason.
    pub fn summary(&self) -> Option<String> {
        if self.held.is_empty() {
            return None;
        }
        let count = |why| self.held.iter().filter(|(_, w)| *w == why).count();
        let large: Vec<&str> = self
            .held
            .iter()
            .filter(|(_, w)| *w == Why::TooLarge)
            .map(|(v, _)| v.name.as_str())
            .collect();
        let mut parts = Vec::new();
        if !large.is_empty() {
            parts.push(format!(
                "{} over Linux's {} KiB per variable ({})",
                large.len(),
                MAX_VARIABLE_BYTES / 1024,
                large.join(", ")
            ));
        }
        let budget = count(Why::Budget);
        if budget > 0 {
            parts.push(format!(
                "{budget} per-task or list variables, which would take the environment over {} KiB",
                MAX_DYNAMIC_ENV_BYTES / 1024
            ));
        }
        Some(format!(
            "not exported: {}; every one is in peer-env.sh",
            parts.join("; ")
        ))
    }
}

/// Splits `vars` into what is exported and what is held back, within `budget` bytes.
pub fn fit(vars: Vec<Variable>, budget: usize) -> Fitted {
    let mut fitted = Fitted::default();
    for v in vars {
        if variable_bytes(&v.name, &v.value) > MAX_VARIABLE_BYTES {
            fitted.held.push((v, Why::TooLarge));
        } else {
            fitted.exported.push(v);
        }
    }
    for class in [Class::PerPeer, Class::List] {
        if fitted.bytes() <= budget {
            break;
        }
        let (held, kept): (Vec<Variable>, Vec<Variable>) = std::mem::take(&mut fitted.exported)
            .into_iter()
            .partition(|v| v.class == class);
        fitted.exported = kept;
        fitted
            .held
            .extend(held.into_iter().map(|v| (v, Why::Budget)));
    }
    fitted
}

/// `peer-env.sh`: every per-task and list variable as a plain shell assignment (not
/// exported, so no limit of `execve` applies), also those that were exported.
pub fn peer_env<'a>(vars: impl IntoIterator<Item = &'a Variable>) -> Vec<u8> {
    let mut out =
        b"# Written by kube-runtime: every per-task and list variable of this job.\n".to_vec();
    out.extend(peer_lines(vars));
    out
}

/// The lines of [`peer_env`] without its heading.
pub fn peer_lines<'a>(vars: impl IntoIterator<Item = &'a Variable>) -> Vec<u8> {
    let mut out = Vec::new();
    for v in vars {
        if v.class == Class::Own {
            continue;
        }
        out.extend_from_slice(v.name.as_bytes());
        out.push(b'=');
        out.extend_from_slice(&crate::shell::quote(v.value.as_bytes()));
        out.push(b'\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var(name: &str, bytes: usize, class: Class) -> Variable {
        Variable::new(name, "x".repeat(bytes), class)
    }

    #[test]
    fn a_variable_over_128_kib_alone_is_held() {
        let limit = MAX_VARIABLE_BYTES - "BIG".len() - 2;
        let fitted = fit(
            vec![
                var("BIG", limit + 1, Class::List),
                var("FIT", limit, Class::List),
            ],
            usize::MAX,
        );
        assert_eq!(fitted.exported.len(), 1);
        assert_eq!(fitted.exported[0].name, "FIT");
        assert_eq!(fitted.held[0].0.name, "BIG");
        assert_eq!(fitted.held[0].1, Why::TooLarge);
        assert!(fitted.summary().is_some_and(|s| s.contains("(BIG)")));
    }

    #[test]
    fn per_task_variables_go_first_then_lists() {
        let vars = vec![
            var("OWN", 10, Class::Own),
            var("P1", 100, Class::PerPeer),
            var("P2", 100, Class::PerPeer),
            var("L", 100, Class::List),
        ];
        let names = |f: &Fitted| {
            f.exported
                .iter()
                .map(|v| v.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&fit(vars.clone(), 1000)), ["OWN", "P1", "P2", "L"]);
        let fitted = fit(vars.clone(), 200);
        assert_eq!(names(&fitted), ["OWN", "L"], "never half a class");
        assert!(fitted.bytes() <= 200);
        assert_eq!(names(&fit(vars, 50)), ["OWN"]);
    }

    #[test]
    fn the_peer_file_has_every_peer_and_list_variable() {
        let text = peer_env(&[
            var("OWN", 1, Class::Own),
            Variable::new("PAI_HOST_IP_w_0", "10.0.0.1", Class::PerPeer),
            Variable::new("L", "a'b", Class::List),
        ]);
        let text = String::from_utf8(text).expect("utf-8");
        assert!(
            text.ends_with("PAI_HOST_IP_w_0='10.0.0.1'\nL='a'\\''b'\n"),
            "{text}"
        );
        assert!(!text.contains("OWN"));
    }
}
