//! Settings, from the same environment variables frameworkbarrier reads.

use std::time::Duration;

use crate::BarrierError;

/// `BARRIER_CHECK_TIMEOUT_SEC`: how long to wait for every address.
pub const TIMEOUT_VAR: &str = "BARRIER_CHECK_TIMEOUT_SEC";
/// `BARRIER_CHECK_INTERVAL_SEC`: here only a safety re-read period; the barrier reacts to
/// watch events, not to this clock.
pub const INTERVAL_VAR: &str = "BARRIER_CHECK_INTERVAL_SEC";
/// Injected by FrameworkController into every container: the Framework's namespace.
pub const NAMESPACE_VAR: &str = pai_contract::env::fc::FRAMEWORK_NAMESPACE;
/// Injected by FrameworkController into every container: the Framework's name.
pub const NAME_VAR: &str = pai_contract::env::fc::FRAMEWORK_NAME;

/// Set by the embedded executor: wait on this Framework file instead of the API server.
pub const FRAMEWORK_FILE_VAR: &str = "BARRIER_FRAMEWORK_FILE";

/// frameworkbarrier's default timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BarrierConfig {
    pub namespace: String,
    pub name: String,
    pub timeout: Duration,
    /// When set, the watch is re-opened at least this often (a fresh read of the
    /// Framework through the watch, not a poll). Unset: kube's watch timeout (290 s).
    pub reread: Option<Duration>,
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
        Ok(Self {
            namespace: required(NAMESPACE_VAR)?,
            name: required(NAME_VAR)?,
            timeout: seconds(TIMEOUT_VAR)?.unwrap_or(DEFAULT_TIMEOUT),
            reread: seconds(INTERVAL_VAR)?,
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
