//! The API server's failures in the backend's words, the same for the backend and its
//! copy. Which failures are transient is decided once, by the project's one rule
//! ([`pai_kube_retry::classify`]), which every task's barrier follows too: a 401 or
//! 403 after this server was answered is the API server's trouble (restarting, its caches
//! filling: a 503, ask again), before that a missing grant.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use pai_backend::BackendError;
use pai_kube_retry::{Kind, Verdict, classify};

/// Where the backend talks, and whether it was ever answered.
pub struct ApiErrors {
    pub(crate) namespace: String,
    pub(crate) address: String,
    /// Some request of this server was answered: a 401/403 now is transient.
    allowed: AtomicBool,
    /// Whether its credentials are refused now ([`crate::credentials`]).
    pub(crate) credentials: crate::credentials::Credentials,
}

impl ApiErrors {
    pub(crate) fn new(namespace: &str, address: &str) -> Arc<Self> {
        Arc::new(Self {
            namespace: namespace.to_string(),
            address: address.to_string(),
            allowed: false.into(),
            credentials: Default::default(),
        })
    }

    /// `error` as the backend's error.
    pub(crate) fn error(&self, error: kube::Error) -> BackendError {
        let status = match &error {
            kube::Error::Api(status) => status,
            kube::Error::HyperError(e) => return self.unavailable(e.to_string()),
            kube::Error::Service(e) => return self.unavailable(e.to_string()),
            other => return BackendError::Other(other.to_string()),
        };
        match status.code {
            404 => return BackendError::NotFound,
            409 => return BackendError::Conflict(status.message.clone()),
            400 | 422 => return BackendError::Invalid(status.message.clone()),
            _ => {}
        }
        match classify(&error, self.allowed.load(Ordering::Relaxed)) {
            Verdict::Refused { code } => BackendError::Other(format!(
                "rest-lite's service account may not do this in namespace {} ({code} {}): see its Role in deploy/rest-lite/rbac.yaml",
                self.namespace, status.message
            )),
            Verdict::Retry { kind, .. } => match kind {
                Kind::RefusedAfterAllowed => {
                    // 401: the credentials. A 403 may be one grant the Role lacks: the
                    // credentials' only where the Frameworks themselves are refused
                    // (`frameworks_error`).
                    if status.code == 401 {
                        self.credentials
                            .refused(status.code, &status.reason, &status.message);
                    }
                    if let Some(refusal) = self.credentials.refusal() {
                        return BackendError::CredentialsRefused(refusal.explain());
                    }
                    self.unavailable(format!(
                        "{} {}: the API server refuses credentials it accepted before: this server's ServiceAccount deleted, its token revoked or expired, or the API server restarting",
                        status.code, status.reason
                    ))
                }
                Kind::TooManyRequests => self.unavailable(format!(
                    "429 {}: the API server asks its clients to slow down",
                    status.message
                )),
                Kind::ServerError | Kind::Connection => {
                    self.unavailable(format!("{} {}", status.code, status.reason))
                }
                Kind::OtherAnswer => BackendError::Other(format!(
                    "the API server answered {} {}",
                    status.code, status.reason
                )),
            },
        }
    }

    /// `error` of a request for the Frameworks, which every server's Role grants: a 403
    /// there, after the server was answered, is its credentials refused too.
    pub(crate) fn frameworks_error(&self, error: kube::Error) -> BackendError {
        if let kube::Error::Api(status) = &error
            && status.code == 403
            && self.allowed.load(Ordering::Relaxed)
        {
            self.credentials
                .refused(status.code, &status.reason, &status.message);
        }
        self.error(error)
    }

    pub(crate) fn unavailable(&self, message: String) -> BackendError {
        BackendError::Unavailable {
            address: self.address.clone(),
            message,
        }
    }
}

impl crate::store::ApiVoice for ApiErrors {
    fn answered(&self) {
        self.allowed.store(true, Ordering::Relaxed);
        self.credentials.accepted();
    }

    fn explain(&self, error: kube::Error) -> String {
        match self.frameworks_error(error) {
            BackendError::Unavailable { message, .. } => message,
            other => other.to_string(),
        }
    }
}
