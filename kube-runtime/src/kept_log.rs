//! The runtime keeps its task attempt's log as it ends ([`pai_contract::kept_logs`]):
//! `entry` its own lines, `run` the end of the user command's output (`user.log`, both
//! streams in order) and its own lines after it, into the task's ConfigMap, with the
//! job's token. Nothing waits for it and nothing fails by it: a log that cannot be kept
//! (no ConfigMap yet because the server was not running, the API server unreachable, the
//! grace period running out) is said in the container's own log, and the task's exit code
//! is the user command's whatever happens here.
//!
//! The ConfigMap holds the attempts' logs under keys of their attempt; writing one drops
//! the oldest while there are more than `keptAttempts` or more than a ConfigMap holds.
//! Read, changed and written back under its `resourceVersion`, so that the two containers'
//! writes (and a second one of the same attempt) never lose each other's.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;

use pai_contract::env::fc;
use pai_contract::kept_logs::{self, INIT_BYTES, MAP_BYTES};

use crate::logs::USER_LOG;

/// How long keeping may take at most: it runs in the pod's grace period, after the user
/// command's own.
const AT_MOST: Duration = Duration::from_secs(10);

/// Which of the task attempt's two logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The init container's (`entry`).
    Init,
    /// The main container's: the user command's output.
    Main,
}

/// Where and how much this task attempt keeps.
#[derive(Clone, Debug)]
pub struct Keeping {
    /// The main log's last bytes.
    bytes: u64,
    /// Attempts kept at most.
    attempts: u32,
    namespace: String,
    config_map: String,
    /// The Framework's attempt.
    attempt: i32,
    apiserver: Option<String>,
}

impl Keeping {
    /// From the container's environment: `None` where nothing is to be kept (the embedded
    /// default, `keptLogBytes: 0`, a Framework written without rest-lite) or no token is
    /// mounted.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let bytes: u64 = var(kept_logs::env::BYTES)?
            .parse()
            .ok()
            .filter(|b| *b > 0)?;
        let attempts = var(kept_logs::env::ATTEMPTS)
            .and_then(|a| a.parse().ok())
            .unwrap_or(1u32)
            .max(1);
        let pod = var(fc::POD_NAME).filter(|p| !p.is_empty())?;
        let attempt = var(fc::FRAMEWORK_ATTEMPT_ID)
            .and_then(|a| a.parse().ok())
            .unwrap_or(0);
        let token_dir = Path::new(pai_contract::access::TOKEN_MOUNT);
        let namespace = var(fc::FRAMEWORK_NAMESPACE)
            .filter(|n| !n.is_empty())
            .or_else(|| std::fs::read_to_string(token_dir.join("namespace")).ok())?;
        if !token_dir.join("token").exists() {
            tracing::warn!(
                "no token is mounted at {}: this task's log is not kept after its pod",
                token_dir.display()
            );
            return None;
        }
        Some(Self {
            apiserver: var(kept_logs::env::APISERVER).filter(|a| !a.is_empty()),
            ..Self::of(&pod, namespace.trim(), attempt, bytes, attempts)
        })
    }

    /// Pod `pod`'s in `namespace`, in the Framework's attempt `attempt`, keeping `bytes`
    /// of the main log and at most `attempts` attempts.
    pub fn of(pod: &str, namespace: &str, attempt: i32, bytes: u64, attempts: u32) -> Self {
        Self {
            bytes,
            attempts: attempts.max(1),
            namespace: namespace.to_string(),
            config_map: kept_logs::config_map(pod),
            attempt,
            apiserver: None,
        }
    }

    /// The main log's last bytes kept.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Keeps `text`'s end as this attempt's `part`, waiting at most [`AT_MOST`].
    pub fn keep(&self, part: Part, text: &[u8]) {
        let text = self.end_of(part, text);
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(e) => {
                tracing::warn!(error = %e, "cannot keep this task's log: no async runtime");
                return;
            }
        };
        let outcome = runtime.block_on(async {
            let client = pai_barrier::kube_source::client(self.apiserver.as_deref())
                .await
                .map_err(|e| e.to_string())?;
            tokio::time::timeout(AT_MOST, self.write(client, part, text))
                .await
                .unwrap_or_else(|_| Err(format!("not done within {} s", AT_MOST.as_secs())))
        });
        match outcome {
            Ok(()) => tracing::info!(
                config_map = %self.config_map,
                bytes = text.len(),
                "this task's log is kept for after its pod"
            ),
            Err(e) => tracing::warn!(
                config_map = %self.config_map,
                "this task's log is not kept after its pod: {e}"
            ),
        }
    }

    /// The end of `text` kept as `part`.
    fn end_of<'a>(&self, part: Part, text: &'a [u8]) -> &'a [u8] {
        let max = match part {
            Part::Init => INIT_BYTES,
            Part::Main => self.bytes,
        };
        let cut = text
            .len()
            .saturating_sub(usize::try_from(max).unwrap_or(usize::MAX));
        &text[cut..]
    }

    /// Writes the end of `text` as this attempt's `part` with `client`.
    pub async fn write(&self, client: kube::Client, part: Part, text: &[u8]) -> Result<(), String> {
        let text = self.end_of(part, text);
        let maps: Api<ConfigMap> = Api::namespaced(client, &self.namespace);
        let started = Instant::now();
        let mut wait = Duration::from_millis(200);
        loop {
            let map = match maps.get_opt(&self.config_map).await {
                Ok(Some(map)) => map,
                // The server makes it as the task's first pod appears: a task that ends
                // at once may be quicker.
                Ok(None) if started.elapsed() < AT_MOST / 2 => {
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(2));
                    continue;
                }
                Ok(None) => {
                    return Err(format!(
                        "ConfigMap {} does not exist (the server makes it as the task's first pod appears; was none running?)",
                        self.config_map
                    ));
                }
                Err(e) => return Err(e.to_string()),
            };
            let updated = with_part(map, part, self.attempt, text, self.attempts);
            match maps
                .replace(&self.config_map, &PostParams::default(), &updated)
                .await
            {
                Ok(_) => return Ok(()),
                // Written meanwhile (the other container): read again.
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(e.to_string()),
            }
        }
    }
}

/// `map` with `text` as attempt `attempt`'s `part`, and without the oldest attempts
/// while more than `attempts` are kept or the whole passes [`MAP_BYTES`] (the newest is
/// never dropped).
pub fn with_part(
    mut map: ConfigMap,
    part: Part,
    attempt: i32,
    text: &[u8],
    attempts: u32,
) -> ConfigMap {
    let data = map.binary_data.get_or_insert_with(BTreeMap::new);
    let key = match part {
        Part::Init => kept_logs::init_key(attempt),
        Part::Main => kept_logs::main_key(attempt),
    };
    data.insert(key, ByteString(text.to_vec()));
    loop {
        let mut kept: Vec<i32> = data
            .keys()
            .filter_map(|k| kept_logs::attempt_of_key(k))
            .collect();
        kept.sort_unstable();
        kept.dedup();
        let size: usize = data.iter().map(|(k, v)| k.len() + v.0.len()).sum();
        let too_many = kept.len() > usize::try_from(attempts).unwrap_or(usize::MAX);
        let too_big = size as u64 > MAP_BYTES;
        match kept.first() {
            Some(&oldest) if (too_many || too_big) && oldest != attempt => {
                data.retain(|k, _| kept_logs::attempt_of_key(k) != Some(oldest));
            }
            _ => break,
        }
    }
    map
}

/// The end of the user command's output in `log_dir` (both streams in order, as the
/// container's log shows them), at most `max` bytes: `user.log`, and the file it rotated
/// to where `user.log` alone holds less.
pub fn user_output(log_dir: &Path, max: u64) -> Vec<u8> {
    // Records carry a time and a stream besides the output: read enough of them.
    let want = max.saturating_mul(4).saturating_add(64 * 1024);
    let current = tail(&log_dir.join(USER_LOG), want);
    let mut raw = if (current.len() as u64) < want {
        let rotated = log_dir.join(format!("{USER_LOG}.1"));
        tail(&rotated, want - current.len() as u64)
    } else {
        Vec::new()
    };
    raw.extend_from_slice(&current);
    // A read that began within a record starts at the next whole one.
    let whole = match raw.iter().position(|&b| b == b'\n') {
        Some(i) if raw.len() as u64 >= want => &raw[i + 1..],
        _ => &raw[..],
    };
    let output = pai_contract::ordered_log::output(whole, None);
    let cut = output
        .len()
        .saturating_sub(usize::try_from(max).unwrap_or(usize::MAX));
    output[cut..].to_vec()
}

/// The last `max` bytes of a file (none if it cannot be read).
fn tail(path: &Path, max: u64) -> Vec<u8> {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(max)));
    let mut out = Vec::new();
    let _ = file.take(max).read_to_end(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(map: &ConfigMap) -> Vec<String> {
        map.binary_data
            .as_ref()
            .map(|d| d.keys().cloned().collect())
            .unwrap_or_default()
    }

    #[test]
    fn the_oldest_attempts_go_first_and_the_newest_stays_whole() {
        let mut map = ConfigMap::default();
        for attempt in 0..4 {
            map = with_part(map, Part::Init, attempt, b"init", 3);
            map = with_part(map, Part::Main, attempt, b"main", 3);
        }
        assert_eq!(
            keys(&map),
            [
                "init.1.log",
                "init.2.log",
                "init.3.log",
                "main.1.log",
                "main.2.log",
                "main.3.log"
            ]
        );
        // Three attempts of 400 KiB do not fit in 1 MiB: two do.
        let big = vec![b'x'; 400 * 1024];
        for attempt in 4..7 {
            map = with_part(map, Part::Main, attempt, &big, 5);
        }
        assert_eq!(keys(&map), ["main.5.log", "main.6.log"]);
        // One that alone passes the bound is kept: the config bounds it.
        let huge = vec![b'x'; 1100 * 1024];
        map = with_part(map, Part::Main, 7, &huge, 5);
        assert_eq!(keys(&map), ["main.7.log"]);
    }

    #[test]
    fn the_user_output_is_read_back_as_the_container_log_shows_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut old = Vec::new();
        pai_contract::ordered_log::append(
            &mut old,
            "2026-11-27T00:00:00Z",
            pai_contract::ordered_log::Stream::Stdout,
            b"rotated\n",
        );
        std::fs::write(dir.path().join("user.log.1"), &old).unwrap();
        let mut now = Vec::new();
        for (stream, text) in [
            (pai_contract::ordered_log::Stream::Stdout, &b"one\n"[..]),
            (pai_contract::ordered_log::Stream::Stderr, b"two\n"),
            (pai_contract::ordered_log::Stream::Stdout, b"three"),
        ] {
            pai_contract::ordered_log::append(&mut now, "2026-11-27T00:00:01Z", stream, text);
        }
        std::fs::write(dir.path().join(USER_LOG), &now).unwrap();
        assert_eq!(user_output(dir.path(), 1024), b"rotated\none\ntwo\nthree");
        assert_eq!(user_output(dir.path(), 9), b"two\nthree");
        assert_eq!(user_output(&dir.path().join("none"), 9), b"");
    }
}
