//! Which failures of the Kubernetes API a program outlasts, decided once for every program
//! of the project that talks to it: each task's barrier as it waits, and the server's
//! Kubernetes backend, its copy of the Frameworks and its controllers.
//!
//! As controllers in this ecosystem classify them (client-go's `IsTooManyRequests`,
//! `IsServerTimeout`, kube's watcher backoff):
//!
//! - a connection that fails or drops, a 5xx, a 429 (after the `Retry-After` it names):
//!   transient, asked again with back-off and jitter;
//! - 401 or 403 before this identity was ever answered: its credentials or grant are wrong,
//!   and waiting will not mend them;
//! - 401 or 403 after the same identity was answered: the API server's authenticator or
//!   authorizer, not the grant (a restarted API server answers so for a few seconds while
//!   its caches fill, as a single control plane does on every upgrade): transient too.
//!
//! How long each waits is [`pai_contract::backoff`]'s; [`WatchBackoff`] hands that back-off
//! to kube's watcher, so that the watches it resumes by itself wait the same.

#![warn(missing_docs)]

use std::time::Duration;

use pai_contract::backoff::{self, Backoff};

/// What to do about one failed request.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Give up: the identity was never allowed (401/403 before any answer).
    Refused {
        /// The refusal's HTTP status.
        code: u16,
    },
    /// Wait and ask again.
    Retry {
        /// What went wrong.
        kind: Kind,
        /// The least wait, where the server named one (429's `Retry-After`).
        at_least: Option<Duration>,
    },
}

/// The kinds of transient failure (a waiting program logs each once).
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
    /// The kind in words, for a log line or a message.
    pub fn describe(self) -> &'static str {
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
