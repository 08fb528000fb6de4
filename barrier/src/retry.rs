//! Which failures of the API server a waiting barrier outlasts, and how it waits.
//!
//! As controllers in this ecosystem classify them (client-go's `IsTooManyRequests`,
//! `IsServerTimeout`, kube's watcher backoff):
//!
//! - a connection that fails or drops, a 5xx, a 429 (after the `Retry-After` it names):
//!   transient, retried with back-off and jitter;
//! - 401 or 403 on the wait's first answer: the pod's credentials or grant are wrong, and
//!   waiting will not mend them: the barrier ends at once naming the rule (exit 1, the
//!   message says what to grant);
//! - 401 or 403 after the same identity was answered before: the API server's
//!   authenticator or authorizer, not the grant (a restarted API server answers so for a
//!   few seconds while its caches fill, as a single control plane does on every upgrade):
//!   transient too.
//!
//! Every retry stays within the barrier's own timeout, which ends the wait as before
//! (exit 201, a transient conflict FrameworkController retries). Each kind of failure is
//! logged once, when it first happens, and once more when the wait gets an answer again.

use std::collections::BTreeSet;
use std::time::Duration;

use pai_contract::backoff::{self, Backoff};

use tracing::{info, warn};

/// What to do about one failed request.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// End the wait: the identity was never allowed (401/403 on the first answer).
    Refused { code: u16 },
    /// Wait and ask again; at least `at_least` when the server said so (429).
    Retry {
        kind: Kind,
        at_least: Option<Duration>,
    },
}

/// The kinds of transient failure, each logged once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// 401/403 after the same identity was allowed.
    RefusedAfterAllowed,
    /// 429 Too Many Requests.
    TooManyRequests,
    /// A 5xx answer.
    ServerError,
    /// Any other answer that is not what was asked for.
    OtherAnswer,
    /// No answer: connection refused, reset, timed out.
    Connection,
}

impl Kind {
    fn describe(self) -> &'static str {
        match self {
            Kind::RefusedAfterAllowed => {
                "the API server refuses credentials it accepted before (it is restarting or its caches are filling)"
            }
            Kind::TooManyRequests => "the API server asks clients to slow down (429)",
            Kind::ServerError => "the API server answers with an error (5xx)",
            Kind::OtherAnswer => "the API server answers with an unexpected error",
            Kind::Connection => "the API server cannot be reached",
        }
    }
}

/// The verdict on `error`, given whether this wait has been answered before.
pub fn classify(error: &kube::Error, allowed_before: bool) -> Verdict {
    let kube::Error::Api(status) = error else {
        return Verdict::Retry {
            kind: Kind::Connection,
            at_least: None,
        };
    };
    match status.code {
        401 | 403 if !allowed_before => Verdict::Refused { code: status.code },
        401 | 403 => Verdict::Retry {
            kind: Kind::RefusedAfterAllowed,
            at_least: None,
        },
        429 => Verdict::Retry {
            kind: Kind::TooManyRequests,
            at_least: status
                .details
                .as_ref()
                .map(|d| Duration::from_secs(u64::from(d.retry_after_seconds)))
                .filter(|d| !d.is_zero()),
        },
        500..=599 => Verdict::Retry {
            kind: Kind::ServerError,
            at_least: None,
        },
        _ => Verdict::Retry {
            kind: Kind::OtherAnswer,
            at_least: None,
        },
    }
}

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

/// The one back-off as kube's watcher takes it (`WatchStreamExt::backoff`), for the
/// watches that kube's watcher resumes by itself: every loop that asks the API server
/// again waits as [`pai_contract::backoff`] says, kube's watches too.
pub struct WatchBackoff(Backoff);

impl WatchBackoff {
    /// `policy`'s back-off.
    pub fn new(policy: backoff::Policy) -> Self {
        Self(Backoff::new(policy))
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.0.next_delay())
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.0.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn answer(code: u16) -> kube::Error {
        kube::Error::Api(
            Status {
                code,
                ..Status::default()
            }
            .boxed(),
        )
    }

    #[test]
    fn refusals_end_the_wait_only_before_any_answer() {
        for code in [401, 403] {
            assert_eq!(classify(&answer(code), false), Verdict::Refused { code });
            assert_eq!(
                classify(&answer(code), true),
                Verdict::Retry {
                    kind: Kind::RefusedAfterAllowed,
                    at_least: None
                }
            );
        }
    }

    #[test]
    fn busy_broken_and_unreachable_servers_are_waited_for() {
        // As the API server writes it.
        let busy: Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 429, "reason": "TooManyRequests",
            "message": "Too many requests, please try again later.",
            "details": {"retryAfterSeconds": 7},
        }))
        .expect("a Status");
        assert_eq!(
            classify(&kube::Error::Api(busy.boxed()), false),
            Verdict::Retry {
                kind: Kind::TooManyRequests,
                at_least: Some(Duration::from_secs(7))
            }
        );
        for code in [500, 503, 504] {
            assert!(matches!(
                classify(&answer(code), false),
                Verdict::Retry {
                    kind: Kind::ServerError,
                    ..
                }
            ));
        }
        let unreachable = kube::Error::Service(std::io::Error::other("connection refused").into());
        assert!(matches!(
            classify(&unreachable, false),
            Verdict::Retry {
                kind: Kind::Connection,
                ..
            }
        ));
    }
}
