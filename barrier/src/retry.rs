//! How a waiting barrier outlasts the API server's failures: the project's one rule on
//! which are transient ([`pai_kube_retry`]), with the barrier's own consequences.
//!
//! - transient failures are asked again with the barrier's back-off and jitter;
//! - 401 or 403 on the wait's first answer: the pod's credentials or grant are wrong: the
//!   barrier ends at once naming the rule (exit 1, the message says what to grant).
//!
//! Every retry stays within the barrier's own timeout, which ends the wait as before
//! (exit 201, a transient conflict FrameworkController retries). Each kind of failure is
//! logged once, when it first happens, and once more when the wait gets an answer again.

use std::collections::BTreeSet;
use std::time::Duration;

use pai_contract::backoff::{self, Backoff};
use pai_kube_retry::{Kind, Verdict, classify};

use tracing::{info, warn};

/// One wait's memory of its failures: whether it was ever answered, the back-off, and
/// what it has logged.
pub struct Retry {
    allowed_before: bool,
    failures: u32,
    backoff: Backoff,
    logged: BTreeSet<Kind>,
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            allowed_before: false,
            failures: 0,
            backoff: Backoff::new(backoff::BARRIER),
            logged: BTreeSet::new(),
        }
    }
}

impl Retry {
    /// The API server accepted a request of this wait (a watch started): later
    /// refusals are its own trouble.
    pub fn allowed(&mut self) {
        self.allowed_before = true;
    }

    /// The API server answered with what was asked for: the back-off starts again.
    pub fn answered(&mut self) {
        self.allowed_before = true;
        if self.failures > 0 {
            info!("the API server answers again");
        }
        self.failures = 0;
        self.backoff.reset();
        self.logged.clear();
    }

    /// The verdict on `error`; logs the first failure of each kind.
    pub fn classify(&mut self, error: &kube::Error) -> Verdict {
        let verdict = classify(error, self.allowed_before);
        if let Verdict::Retry { kind, .. } = verdict
            && self.logged.insert(kind)
        {
            warn!(%error, "{}; retrying until it answers or the barrier times out", kind.describe());
        }
        verdict
    }

    /// Waits before the next request: the barrier's back-off ([`backoff::BARRIER`], 0.1 s
    /// doubling to 10 s, jittered so that a thousand tasks refused together do not come
    /// back together), and never less than the server asked for.
    pub async fn wait(&mut self, at_least: Option<Duration>) {
        self.failures = self.failures.saturating_add(1);
        let delay = self.backoff.next_delay().max(at_least.unwrap_or_default());
        tokio::time::sleep(delay).await;
    }
}
