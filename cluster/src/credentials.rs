//! Whether the API server still accepts this server's credentials. A server whose
//! ServiceAccount is deleted (`kubectl delete -k` deletes it with the Deployment), or
//! whose token is revoked or expired, gets 401 or 403 for everything it asks from then on,
//! while the watches it opened before stay open and its copy of the jobs stops changing
//! without a word. So:
//!
//! - every refused request (after the server was once answered) is told here; the first
//!   is said once, in full (what the server can no longer do, the likely causes, what it
//!   does meanwhile), then at most once a minute while it lasts, and its end once;
//! - `/readyz` answers 503 with the reason while it lasts, and reads are answered from
//!   the copy for the stale bound only, then 503 saying that the copy is out of date and
//!   why ([`crate::store`]);
//! - a probe (one list of at most one Framework's metadata every [`PROBE_EVERY`]) finds
//!   the refusal while nothing else asks, and finds the end of it: the server recovers by
//!   itself once its access is back (the account made again, a new token mounted).
//!
//! The watches' own retries back off (0.5 s doubling to 30 s); the client library's lines
//! for each of them are left out of the log ([`QUIET_TARGETS`]) so that this one says it.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing::{error, info, warn};

/// How often the probe asks.
pub const PROBE_EVERY: Duration = Duration::from_secs(30);
/// How often a refusal that lasts is said again.
pub const SAID_EVERY: Duration = Duration::from_secs(60);
/// The client library's log targets that say every failed request or watch retry: off
/// by default in the server's log (a `RUST_LOG` naming `kube` keeps them).
pub const QUIET_TARGETS: &[&str] = &["kube_client::client::builder", "kube_runtime::watcher"];

/// What a refusal of credentials that worked before most likely means.
const CAUSES: &str = "its ServiceAccount was deleted (`kubectl delete -k` deletes it), or its token revoked or expired; it can neither read nor change jobs until its access is back";

/// The refusal of this server's credentials, while it lasts.
#[derive(Clone, Debug)]
pub struct Refusal {
    pub since: Instant,
    /// `401 Unauthorized`, `403 Forbidden`.
    pub status: String,
    /// The API server's message.
    pub message: String,
}

impl Refusal {
    /// The refusal and its likely causes, for readers and `/readyz`.
    pub fn explain(&self) -> String {
        format!(
            "the API server has refused this server's credentials for {} s ({}): {CAUSES}",
            self.since.elapsed().as_secs(),
            self.answer()
        )
    }

    fn answer(&self) -> String {
        if self.message.is_empty()
            || self.message == self.status.split_once(' ').map_or("", |s| s.1)
        {
            self.status.clone()
        } else {
            format!("{}: {}", self.status, self.message)
        }
    }

    fn first_said(&self) -> String {
        format!(
            "the API server refuses this server's credentials, which it accepted before ({}): {CAUSES}",
            self.answer()
        )
    }
}

/// The state of this server's credentials.
#[derive(Default)]
pub struct Credentials {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    refused: Option<Refusal>,
    said: Option<Instant>,
}

impl Credentials {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A request was refused (401 or 403) after the server was answered before.
    pub fn refused(&self, code: u16, reason: &str, message: &str) {
        let mut state = self.lock();
        let now = Instant::now();
        match &state.refused {
            None => {
                let refusal = Refusal {
                    since: now,
                    status: format!("{code} {reason}"),
                    message: message.to_string(),
                };
                error!(
                    "{}. Meanwhile jobs are neither submitted, stopped nor deleted; reads are answered from the server's copy for its stale bound, then refused; /readyz answers 503. Checked again every {} s; said again once a minute while it lasts",
                    refusal.first_said(),
                    PROBE_EVERY.as_secs()
                );
                state.refused = Some(refusal);
                state.said = Some(now);
            }
            Some(refusal) => {
                if state
                    .said
                    .is_none_or(|said| now.duration_since(said) >= SAID_EVERY)
                {
                    warn!(
                        refused_s = refusal.since.elapsed().as_secs(),
                        "the API server still refuses this server's credentials ({}); jobs cannot be read or changed",
                        refusal.status
                    );
                    state.said = Some(now);
                }
            }
        }
    }

    /// A request was answered: the credentials work.
    pub fn accepted(&self) {
        let mut state = self.lock();
        if let Some(refusal) = state.refused.take() {
            info!(
                refused_s = refusal.since.elapsed().as_secs(),
                "the API server accepts this server's credentials again; the copy of the jobs is read again"
            );
            state.said = None;
        }
    }

    /// The refusal, while it lasts.
    pub fn refusal(&self) -> Option<Refusal> {
        self.lock().refused.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_lasts_until_a_request_is_answered() {
        let credentials = Credentials::default();
        assert!(credentials.refusal().is_none());
        credentials.refused(401, "Unauthorized", "Unauthorized");
        credentials.refused(403, "Forbidden", "later");
        let refusal = credentials.refusal().expect("refused");
        assert_eq!(refusal.status, "401 Unauthorized", "the first is kept");
        assert!(refusal.explain().contains("ServiceAccount was deleted"));
        credentials.accepted();
        assert!(credentials.refusal().is_none());
    }
}
