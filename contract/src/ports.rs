//! The ports of one role: every label with its ports, in the order the spec listed them.
//!
//! Its text form is the value of `PAI_CONTAINER_HOST_PORT_LIST`:
//! `http:20001;ssh:20002;main:20003,20004`. rest-lite writes it once per role; the
//! runtime reads it back to produce the per-task port variables.

use std::fmt;
use std::str::FromStr;

/// Label of the port every role gets for its service (`PAI_CURRENT_CONTAINER_PORT`).
pub const HTTP_LABEL: &str = "http";
/// Label of the port sshd listens on (`PAI_CONTAINER_SSH_PORT`).
pub const SSH_LABEL: &str = "ssh";

/// Labels and their ports, in spec order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortPlan {
    labels: Vec<(String, Vec<u16>)>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
/// Why a port list does not read.
pub enum PortPlanError {
    #[error("port list entry {0:?} is not `label:port[,port…]`")]
    /// Not `label:ports`.
    Entry(String),
    #[error("port list label {0:?} is not made of letters, digits and `_`")]
    /// A label with other characters.
    Label(String),
    #[error("port list label {0:?} appears twice")]
    /// A label twice.
    Duplicate(String),
    #[error("port {0:?} is not a number from 1 to 65535")]
    /// Not a port number.
    Port(String),
}

impl PortPlan {
    /// Adds `label` with its ports. Labels are letters, digits and `_`, each at most once.
    pub fn push(&mut self, label: &str, ports: Vec<u16>) -> Result<(), PortPlanError> {
        if label.is_empty() || !label.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(PortPlanError::Label(label.to_string()));
        }
        if self.get(label).is_some() {
            return Err(PortPlanError::Duplicate(label.to_string()));
        }
        self.labels.push((label.to_string(), ports));
        Ok(())
    }

    /// The ports of `label`, if the role has it.
    pub fn get(&self, label: &str) -> Option<&[u16]> {
        self.labels
            .iter()
            .find(|(l, _)| l == label)
            .map(|(_, p)| p.as_slice())
    }

    /// Every label with its ports.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u16])> {
        self.labels.iter().map(|(l, p)| (l.as_str(), p.as_slice()))
    }

    /// Every port of every label.
    pub fn all_ports(&self) -> impl Iterator<Item = u16> + '_ {
        self.labels.iter().flat_map(|(_, p)| p.iter().copied())
    }

    /// The first port of `label`, the one the single-port variables name.
    pub fn first(&self, label: &str) -> Option<u16> {
        self.get(label).and_then(|p| p.first().copied())
    }
}

/// Comma-separated ports: `20001,20002`.
pub fn join_ports(ports: &[u16]) -> String {
    let mut out = String::with_capacity(ports.len() * 6);
    for (i, p) in ports.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&p.to_string());
    }
    out
}

impl fmt::Display for PortPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (label, ports)) in self.labels.iter().enumerate() {
            if i > 0 {
                f.write_str(";")?;
            }
            write!(f, "{label}:{}", join_ports(ports))?;
        }
        Ok(())
    }
}

impl FromStr for PortPlan {
    type Err = PortPlanError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut plan = PortPlan::default();
        if s.is_empty() {
            return Ok(plan);
        }
        for entry in s.split(';') {
            let (label, ports) = entry
                .split_once(':')
                .ok_or_else(|| PortPlanError::Entry(entry.to_string()))?;
            let ports = if ports.is_empty() {
                Vec::new()
            } else {
                ports
                    .split(',')
                    .map(|p| match p.parse::<u16>() {
                        Ok(n) if n > 0 => Ok(n),
                        _ => Err(PortPlanError::Port(p.to_string())),
                    })
                    .collect::<Result<Vec<_>, _>>()?
            };
            plan.push(label, ports)?;
        }
        Ok(plan)
    }
}

/// Serialised as its text form, `http:20001;ssh:20002`.
impl serde::Serialize for PortPlan {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for PortPlan {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn text_form() {
        let mut plan = PortPlan::default();
        plan.push("http", vec![20001]).expect("push");
        plan.push("main", vec![20003, 20004]).expect("push");
        assert_eq!(plan.to_string(), "http:20001;main:20003,20004");
        assert_eq!("http:20001;main:20003,20004".parse::<PortPlan>(), Ok(plan));
    }

    #[test]
    fn bad_text_is_an_error() {
        assert!("http".parse::<PortPlan>().is_err());
        assert!("http:0".parse::<PortPlan>().is_err());
        assert!("http:1;http:2".parse::<PortPlan>().is_err());
        assert!("a-b:1".parse::<PortPlan>().is_err());
    }

    proptest! {
        #[test]
        fn round_trips(entries in proptest::collection::btree_map("[A-Za-z0-9_]{1,8}", proptest::collection::vec(1u16.., 0..4), 0..5)) {
            let mut plan = PortPlan::default();
            for (label, ports) in entries {
                plan.push(&label, ports).expect("valid label");
            }
            prop_assert_eq!(plan.to_string().parse::<PortPlan>(), Ok(plan));
        }
    }
}
