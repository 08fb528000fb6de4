//! A task's logs on a cluster: its two containers' logs as the kubelet serves them while
//! its pod lives, then what the log keeper kept of them ([`crate::log_keeper`]) or the
//! job history holds, and the tails a page shows, read once for many readers.

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use kube::api::LogParams;

use std::time::Duration;

use pai_backend::backend::{BackendError, LogRequest, LogStream};

use pai_contract::framework::MAIN_CONTAINER;

use super::KubeBackend;

/// A kept log as a stream, followed by why it is incomplete when it is.
/// `stamped`: each line begins with the best time known for it (the kept copy has no
/// times but the runtime's own lines').
fn kept_stream(bytes: Vec<u8>, lost: &str, stamped: bool) -> LogStream {
    let mut bytes = bytes;
    if !lost.is_empty() {
        bytes.extend_from_slice(
            format!("{}{lost}\n", pai_contract::log_lines::mark("WARN")).as_bytes(),
        );
    }
    if stamped {
        let now = jiff::Timestamp::now().to_string();
        bytes = pai_contract::log_lines::stamp_lines(&bytes, &now);
    }
    futures::stream::once(async move { Ok(bytes::Bytes::from(bytes)) }).boxed()
}

/// How long a log tail read for a page is shown to other readers: the pages refresh
/// every few seconds.
pub(super) const TAIL_TTL: Duration = Duration::from_secs(3);
/// Log tails kept at most (the oldest go first).
pub(super) const TAILS_KEPT: usize = 4096;

impl KubeBackend {
    /// What was kept of pod `pod`'s log in attempt `attempt` (its pod is gone).
    pub(super) async fn kept(&self, pod: &str, attempt: i32) -> Option<crate::log_keeper::Kept> {
        if let Some(kept) = crate::log_keeper::kept(&self.config_maps, pod, attempt).await {
            return Some(kept);
        }
        let archive = self.archive.as_ref()?;
        archive
            .kept(&pai_contract::kept_logs::archive_key(pod, attempt))
            .await
            .inspect_err(
                |e| tracing::warn!(pod, error = %e, "cannot read a kept log from the history"),
            )
            .ok()
            .flatten()
    }

    /// The history's entry of the job of pod `pod`, where its Framework is gone.
    pub(super) fn archived_pod(&self, pod: &str) -> Option<crate::archive::Archived> {
        let framework = pai_contract::kept_logs::framework_of(pod);
        if self.store.get(framework).is_some() {
            return None;
        }
        self.archive.as_ref()?.get(framework)
    }

    /// What was kept of pod `pod`'s log in its job's current attempt: in its kept-log
    /// ConfigMap, or in the history. The history holds it before its Framework goes, so
    /// a job whose deletion this copy has not seen yet still has its log there.
    pub(super) async fn kept_now(&self, pod: &str) -> Option<crate::log_keeper::Kept> {
        let attempt = match self.archived_pod(pod) {
            Some(archived) => archived.attempt,
            None => self
                .store
                .get(pai_contract::kept_logs::framework_of(pod))?
                .attempt_id(),
        };
        self.kept(pod, attempt).await
    }

    /// The main container's log (`earlier`: that attempt's, kept once its pod went).
    pub(super) fn main_log<'a>(
        &'a self,
        pod: &'a str,
        request: LogRequest,
    ) -> BoxFuture<'a, Result<LogStream, BackendError>> {
        let LogRequest {
            follow,
            earlier,
            timestamps,
            ..
        } = request;
        async move {
            if let Some(attempt) = earlier {
                return match self.kept(pod, attempt).await {
                    Some(kept) => Ok(kept_stream(kept.main, &kept.lost, timestamps)),
                    None => Err(BackendError::Gone(format!(
                        "the log of attempt {attempt} is no longer on the cluster: FrameworkController deleted its pod, and no copy of it was kept (keptLogBytes is 0, or the server was not running)"
                    ))),
                };
            }
            if self.archived_pod(pod).is_some() {
                // The job is in the history: its pods are long gone.
                return match self.kept_now(pod).await {
                    Some(kept) => Ok(kept_stream(kept.main, &kept.lost, timestamps)),
                    None => Err(BackendError::NotFound),
                };
            }
            let params = LogParams {
                container: Some(MAIN_CONTAINER.to_string()),
                follow,
                timestamps,
                ..LogParams::default()
            };
            match self.pods.log_stream(pod, &params).await {
                Ok(reader) => {
                    self.answered();
                    Ok(crate::pod_log::chunks(reader))
                }
                // Starting: a follower waits for the main container (see `pod_log`); a
                // reader gets what there is of the user's output, nothing yet, where
                // the container exists and has not started.
                Err(e) if crate::pod_log::not_started(&e) => {
                    self.answered();
                    if follow {
                        Ok(crate::pod_log::when_started(
                            self.pods.clone(),
                            self.config_maps.clone(),
                            self.store.clone(),
                            pod.to_string(),
                            params,
                        ))
                    } else if matches!(&e, kube::Error::Api(s) if s.code == 404) {
                        // Gone after it ended: what was kept of it.
                        match self.kept_now(pod).await {
                            Some(kept) => Ok(kept_stream(kept.main, &kept.lost, timestamps)),
                            None => Err(BackendError::NotFound),
                        }
                    } else {
                        Ok(futures::stream::empty().boxed())
                    }
                }
                Err(e) => Err(self.error(e)),
            }
        }
        .boxed()
    }

    /// The init container's log: the runtime's `entry` (whole; it has ended or waits at
    /// the barrier), or what was kept of it once the pod is gone.
    pub(super) fn init_log<'a>(
        &'a self,
        pod: &'a str,
        timestamps: bool,
    ) -> BoxFuture<'a, Result<LogStream, BackendError>> {
        async move {
            if self.archived_pod(pod).is_some() {
                return self
                    .kept_now(pod)
                    .await
                    .map(|k| kept_stream(k.init, "", timestamps))
                    .ok_or(BackendError::NotFound);
            }
            let params = LogParams {
                container: Some(pai_contract::framework::INIT_CONTAINER.to_string()),
                timestamps,
                ..LogParams::default()
            };
            let text = match self.pods.logs(pod, &params).await {
                Ok(text) => text,
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    return self
                        .kept_now(pod)
                        .await
                        .map(|k| kept_stream(k.init, "", timestamps))
                        .ok_or(BackendError::NotFound);
                }
                Err(e) => return Err(self.error(e)),
            };
            self.answered();
            Ok(futures::stream::once(async move { Ok(bytes::Bytes::from(text)) }).boxed())
        }
        .boxed()
    }
}
