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
    /// The peer table's variables, counted rather than held here ([`PeerSizes`]).
    pub peers: PeerSizes,
    /// Their classes left out whole for the budget.
    pub peer_classes_held: Vec<Class>,
}

impl Fitted {
    /// Bytes the exported variables take in the environment.
    pub fn bytes(&self) -> usize {
        let own: usize = self
            .exported
            .iter()
            .map(|v| variable_bytes(&v.name, &v.value))
            .sum();
        own + self
            .peer_classes_exported()
            .map(|(_, s)| s.bytes)
            .sum::<usize>()
    }

    /// How many variables are exported.
    pub fn exported_count(&self) -> usize {
        self.exported.len()
            + self
                .peer_classes_exported()
                .map(|(_, s)| s.count)
                .sum::<usize>()
    }

    /// Whether the peer table's variables of `class` are exported.
    pub fn exports_peers(&self, class: Class) -> bool {
        !self.peer_classes_held.contains(&class)
    }

    fn peer_classes_exported(&self) -> impl Iterator<Item = (Class, &ClassSize)> {
        self.peers
            .classes()
            .filter(|(class, _)| self.exports_peers(*class))
    }

    /// One line for the log: how much is left out, by reason.
    pub fn summary(&self) -> Option<String> {
        let large: Vec<&str> = self
            .held
            .iter()
            .filter(|(_, w)| *w == Why::TooLarge)
            .map(|(v, _)| v.name.as_str())
            .chain(self.peers.too_large.iter().map(String::as_str))
            .collect();
        let budget = self.held.iter().filter(|(_, w)| *w == Why::Budget).count()
            + self
                .peers
                .classes()
                .filter(|(class, _)| !self.exports_peers(*class))
                .map(|(_, s)| s.count)
                .sum::<usize>();
        if large.is_empty() && budget == 0 {
            return None;
        }
        let mut parts = Vec::new();
        if !large.is_empty() {
            parts.push(format!(
                "{} over Linux's {} KiB per variable ({})",
                large.len(),
                MAX_VARIABLE_BYTES / 1024,
                large.join(", ")
            ));
        }
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

/// How many of one class's variables fit alone, and the bytes they take.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassSize {
    pub count: usize,
    pub bytes: usize,
}

/// The peer table's variables as the budget sees them, without holding them: what each
/// class of them takes, and the names of those over the per-variable limit. The same in
/// every task of an attempt, so computed once per host ([`crate::peer_files`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerSizes {
    pub per_peer: ClassSize,
    pub list: ClassSize,
    /// Never exported: each alone over Linux's limit.
    pub too_large: Vec<String>,
}

impl PeerSizes {
    pub fn of<'a>(vars: impl IntoIterator<Item = &'a Variable>) -> Self {
        let mut sizes = PeerSizes::default();
        for v in vars {
            let bytes = variable_bytes(&v.name, &v.value);
            if bytes > MAX_VARIABLE_BYTES {
                sizes.too_large.push(v.name.clone());
                continue;
            }
            let class = match v.class {
                Class::PerPeer => &mut sizes.per_peer,
                Class::List => &mut sizes.list,
                Class::Own => continue,
            };
            class.count += 1;
            class.bytes += bytes;
        }
        sizes
    }

    /// How many variables the table gives.
    pub fn count(&self) -> usize {
        self.per_peer.count + self.list.count + self.too_large.len()
    }

    fn classes(&self) -> impl Iterator<Item = (Class, &ClassSize)> {
        [(Class::PerPeer, &self.per_peer), (Class::List, &self.list)].into_iter()
    }

    /// As a few lines of text (a file of the shared copies), read back by [`Self::parse`].
    pub fn to_text(&self) -> String {
        let mut text = format!(
            "per-peer {} {}\nlist {} {}\n",
            self.per_peer.count, self.per_peer.bytes, self.list.count, self.list.bytes
        );
        for name in &self.too_large {
            text.push_str("too-large ");
            text.push_str(name);
            text.push('\n');
        }
        text
    }

    pub fn parse(text: &str) -> Option<Self> {
        let mut sizes = PeerSizes::default();
        let size = |count: Option<&str>, bytes: Option<&str>| {
            Some(ClassSize {
                count: count?.parse().ok()?,
                bytes: bytes?.parse().ok()?,
            })
        };
        for line in text.lines() {
            let mut words = line.splitn(3, ' ');
            match words.next()? {
                "per-peer" => sizes.per_peer = size(words.next(), words.next())?,
                "list" => sizes.list = size(words.next(), words.next())?,
                "too-large" => sizes.too_large.push(line["too-large ".len()..].to_string()),
                _ => return None,
            }
        }
        Some(sizes)
    }
}

/// Splits `vars` into what is exported and what is held back, within `budget` bytes
/// together with the peer table's variables (`peers`, counted apart): any variable over
/// the per-variable limit is held; then, while over the budget, every per-task variable,
/// then every list, of `vars` and of the peers alike.
pub fn fit(vars: Vec<Variable>, peers: &PeerSizes, budget: usize) -> Fitted {
    let mut fitted = Fitted {
        peers: peers.clone(),
        ..Fitted::default()
    };
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
        fitted.peer_classes_held.push(class);
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
            &PeerSizes::default(),
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
        let none = PeerSizes::default();
        let names = |f: &Fitted| {
            f.exported
                .iter()
                .map(|v| v.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(&fit(vars.clone(), &none, 1000)),
            ["OWN", "P1", "P2", "L"]
        );
        let fitted = fit(vars.clone(), &none, 200);
        assert_eq!(names(&fitted), ["OWN", "L"], "never half a class");
        assert!(fitted.bytes() <= 200);
        assert_eq!(names(&fit(vars, &none, 50)), ["OWN"]);
    }

    #[test]
    fn the_peers_counted_fit_as_the_peers_held() {
        let limit = MAX_VARIABLE_BYTES - "BIG".len() - 2;
        let own = vec![
            var("OWN", 10, Class::Own),
            var("TF_CONFIG", 150, Class::List),
        ];
        let peers = vec![
            var("P1", 100, Class::PerPeer),
            var("BIG", limit + 1, Class::List),
            var("P2", 100, Class::PerPeer),
            var("L", 100, Class::List),
        ];
        let sizes = PeerSizes::of(&peers);
        assert_eq!(PeerSizes::parse(&sizes.to_text()), Some(sizes.clone()));
        for budget in [10_000, 500, 300, 200, 50] {
            let held = fit(
                own.iter().chain(&peers).cloned().collect(),
                &PeerSizes::default(),
                budget,
            );
            let counted = fit(own.clone(), &sizes, budget);
            assert_eq!(counted.bytes(), held.bytes(), "budget {budget}");
            assert_eq!(
                counted.exported_count(),
                held.exported.len(),
                "budget {budget}"
            );
            assert_eq!(counted.summary(), held.summary(), "budget {budget}");
            let peers_exported: Vec<&str> = held
                .exported
                .iter()
                .filter(|v| peers.contains(v))
                .map(|v| v.name.as_str())
                .collect();
            let counted_peers: Vec<&str> = peers
                .iter()
                .filter(|v| counted.exports_peers(v.class) && !sizes.too_large.contains(&v.name))
                .map(|v| v.name.as_str())
                .collect();
            assert_eq!(counted_peers, peers_exported, "budget {budget}");
        }
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
