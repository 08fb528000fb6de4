//! Settings, from the same environment variables frameworkbarrier reads.

use std::time::Duration;

use crate::outcome::BarrierError;

/// `BARRIER_CHECK_TIMEOUT_SEC`: how long to wait for every address.
pub const TIMEOUT_VAR: &str = pai_contract::env::barrier::TIMEOUT;
/// `BARRIER_CHECK_INTERVAL_SEC`: here only a safety re-read period; the barrier reacts to
/// watch events, not to this clock.
pub const INTERVAL_VAR: &str = pai_contract::env::barrier::INTERVAL;
/// Injected by FrameworkController into every container: the Framework's namespace.
pub const NAMESPACE_VAR: &str = pai_contract::env::fc::FRAMEWORK_NAMESPACE;
/// Injected by FrameworkController into every container: the Framework's name.
pub const NAME_VAR: &str = pai_contract::env::fc::FRAMEWORK_NAME;

/// Set by the embedded executor: wait on this Framework file instead of the API server.
pub const FRAMEWORK_FILE_VAR: &str = pai_contract::env::barrier::FRAMEWORK_FILE;
/// Set by the embedded executor: wait on this peer-table file (the attempt's published
/// table on this machine) instead of the API server.
pub const PEERS_FILE_VAR: &str = pai_contract::env::barrier::PEERS_FILE;
/// `BARRIER_PEERS_SOURCE`: `published` (rest-lite publishes each attempt's peer table;
/// wait for it) or `framework` (watch the Framework itself, as for a Framework nobody
/// publishes for). Unset: `framework`.
pub const PEERS_SOURCE_VAR: &str = pai_contract::env::barrier::PEERS_SOURCE;
/// [`PEERS_SOURCE_VAR`]'s value for [`Source::Published`].
pub const SOURCE_PUBLISHED: &str = pai_contract::env::barrier::SOURCE_PUBLISHED;
/// [`PEERS_SOURCE_VAR`]'s value for [`Source::Framework`].
pub const SOURCE_FRAMEWORK: &str = pai_contract::env::barrier::SOURCE_FRAMEWORK;
/// Injected by FrameworkController into every container: the Framework attempt's id.
pub const ATTEMPT_ID_VAR: &str = pai_contract::env::fc::FRAMEWORK_ATTEMPT_ID;
/// Injected by FrameworkController into every container: the attempt's instance UID.
pub const ATTEMPT_INSTANCE_UID_VAR: &str = pai_contract::env::fc::FRAMEWORK_ATTEMPT_INSTANCE_UID;

/// frameworkbarrier's default timeout.
pub const DEFAULT_TIMEOUT: Duration =
    Duration::from_secs(pai_contract::env::barrier::DEFAULT_TIMEOUT_SEC as u64);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BarrierConfig {
    pub namespace: String,
    pub name: String,
    pub timeout: Duration,
    /// When set, the watch is re-opened at least this often (a fresh read through the
    /// watch, not a poll). Unset: kube's watch timeout (290 s).
    pub reread: Option<Duration>,
    /// Where the addresses come from.
    pub source: Source,
}

/// Where the barrier learns the addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Watch the Framework and apply the readiness rule to every change.
    Framework,
    /// Wait for this attempt's published table (one object, one event).
    Published(Attempt),
}

/// One Framework attempt, as FrameworkController names it to its containers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// `FC_FRAMEWORK_ATTEMPT_ID`.
    pub id: i32,
    /// `FC_FRAMEWORK_ATTEMPT_INSTANCE_UID`.
    pub instance_uid: String,
}

impl BarrierConfig {
    /// Reads the settings through `var` (the process environment in production).
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Self, BarrierError> {
        let required = |name: &str| {
            var(name).filter(|v| !v.is_empty()).ok_or_else(|| {
                BarrierError::Config(format!(
                    "{name} is not set: the barrier cannot tell which Framework to wait for"
                ))
            })
        };
        let seconds = |name: &str| -> Result<Option<Duration>, BarrierError> {
            match var(name).filter(|v| !v.trim().is_empty()) {
                None => Ok(None),
                Some(v) => match v.trim().parse::<u64>() {
                    Ok(n) if n > 0 => Ok(Some(Duration::from_secs(n))),
                    _ => Err(BarrierError::Config(format!(
                        "{name}={v:?} is not a whole number of seconds ≥ 1"
                    ))),
                },
            }
        };
        let source = match var(PEERS_SOURCE_VAR).as_deref().map(str::trim) {
            None | Some("") | Some(SOURCE_FRAMEWORK) => Source::Framework,
            Some(SOURCE_PUBLISHED) => {
                let id = required(ATTEMPT_ID_VAR)?;
                let id = id.trim().parse::<i32>().map_err(|_| {
                    BarrierError::Config(format!(
                        "{ATTEMPT_ID_VAR}={id:?} is not a Framework attempt id"
                    ))
                })?;
                Source::Published(Attempt {
                    id,
                    instance_uid: required(ATTEMPT_INSTANCE_UID_VAR)?,
                })
            }
            Some(other) => {
                return Err(BarrierError::Config(format!(
                    "{PEERS_SOURCE_VAR}={other:?} is neither {SOURCE_PUBLISHED:?} nor {SOURCE_FRAMEWORK:?}"
                )));
            }
        };
        Ok(Self {
            namespace: required(NAMESPACE_VAR)?,
            name: required(NAME_VAR)?,
            timeout: seconds(TIMEOUT_VAR)?.unwrap_or(DEFAULT_TIMEOUT),
            reread: seconds(INTERVAL_VAR)?,
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults_and_overrides() {
        let base = [(NAMESPACE_VAR, "ns"), (NAME_VAR, "fw")];
        let config = BarrierConfig::from_env(env(&base)).expect("valid");
        assert_eq!(config.timeout, DEFAULT_TIMEOUT);
        assert_eq!(config.reread, None);
        assert_eq!(config.source, Source::Framework);
        let config = BarrierConfig::from_env(env(&[
            base[0],
            base[1],
            (TIMEOUT_VAR, "30"),
            (INTERVAL_VAR, "10"),
        ]))
        .expect("valid");
        assert_eq!(config.timeout, Duration::from_secs(30));
        assert_eq!(config.reread, Some(Duration::from_secs(10)));
    }

    #[test]
    fn the_published_source_names_its_attempt() {
        let base = [(NAMESPACE_VAR, "ns"), (NAME_VAR, "fw")];
        let published = [
            base[0],
            base[1],
            (PEERS_SOURCE_VAR, "published"),
            (ATTEMPT_ID_VAR, "3"),
            (ATTEMPT_INSTANCE_UID_VAR, "3_abc"),
        ];
        let config = BarrierConfig::from_env(env(&published)).expect("valid");
        assert_eq!(
            config.source,
            Source::Published(Attempt {
                id: 3,
                instance_uid: "3_abc".into()
            })
        );
        let err = BarrierConfig::from_env(env(&published[..4])).expect_err("no instance uid");
        assert!(err.to_string().contains(ATTEMPT_INSTANCE_UID_VAR), "{err}");
        let err = BarrierConfig::from_env(env(&[base[0], base[1], (PEERS_SOURCE_VAR, "cm")]))
            .expect_err("unknown source");
        assert!(
            err.to_string().contains("BARRIER_PEERS_SOURCE=\"cm\""),
            "{err}"
        );
    }

    #[test]
    fn bad_values_are_config_errors() {
        let err = BarrierConfig::from_env(env(&[(NAMESPACE_VAR, "ns")])).expect_err("no name");
        assert!(err.to_string().contains(NAME_VAR));
        let err = BarrierConfig::from_env(env(&[
            (NAMESPACE_VAR, "ns"),
            (NAME_VAR, "f"),
            (TIMEOUT_VAR, "ten"),
        ]))
        .expect_err("not a number");
        assert!(
            err.to_string()
                .contains("BARRIER_CHECK_TIMEOUT_SEC=\"ten\"")
        );
    }
}
