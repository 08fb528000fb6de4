//! A task's log on a cluster while its pod is made and initializes. The kubelet answers
//! a log request for a container that has not started with 400 (its init container runs:
//! `PodInitializing`) and for a pod that does not exist yet with 404. A reader who asked
//! to follow meant "from now on": the answer is a stream that waits until the main
//! container starts, then follows it, and ends without a word if the task ends before
//! (its pod failed in its init container, the job was stopped or deleted).
//!
//! Waiting asks the API server again with the one back-off (1 s doubling to 5 s, each
//! wait between half and all of it): one
//! GET per follower every few seconds while its task starts, which is what a reader of
//! `kubectl logs -f` retried by hand costs, and nothing once it runs.

use pai_contract::backoff::{Backoff, Policy};
use std::time::Duration;

use futures::{AsyncReadExt, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::LogParams;

use pai_contract::framework::FrameworkState;

use crate::store::KubeStore;
use pai_backend::backend::LogStream;

const WAITING: Policy = Policy {
    first: Duration::from_secs(1),
    cap: Duration::from_secs(5),
};

/// Whether an error of the log endpoint says the container has not started (400) or the
/// pod is not there (404): the answers of a task that is starting.
pub fn not_started(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 400 || s.code == 404)
}

/// Whether the task whose pod is `pod` is over for good in the server's copy: its job
/// gone or completed, or the task's attempt ended. (A Framework's pods are named
/// `<framework>-<role>-<index>`, the Framework's name holding no `-`.)
fn task_over(store: &KubeStore, pod: &str) -> bool {
    let framework_name = pai_contract::kept_logs::framework_of(pod);
    let Some(framework) = store.get(framework_name) else {
        return true;
    };
    let Some(status) = framework.status.as_ref() else {
        return false;
    };
    status.state == FrameworkState::Completed
        || status.attempt_status.completion_status.is_some()
        || framework
            .task_role_statuses()
            .unwrap_or_default()
            .iter()
            .flat_map(|r| r.task_statuses.iter())
            .any(|t| {
                t.attempt_status.pod_name.as_deref() == Some(pod)
                    && t.attempt_status.completion_status.is_some()
            })
}

/// The main container's log as chunks.
pub fn chunks(reader: impl futures::AsyncRead + Send + 'static) -> LogStream {
    futures::stream::unfold(Box::pin(reader), |mut reader| async move {
        let mut buf = vec![0u8; 16 * 1024];
        match reader.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(bytes::Bytes::from(buf)), reader))
            }
            Err(e) => Some((Err(e), reader)),
        }
    })
    .boxed()
}

/// A stream that waits for pod `pod`'s main container to start, then follows its log.
pub fn when_started(
    pods: Api<Pod>,
    config_maps: Api<ConfigMap>,
    store: KubeStore,
    pod: String,
    params: LogParams,
) -> LogStream {
    let started = async move {
        let mut waits = Backoff::new(WAITING);
        loop {
            if task_over(&store, &pod) {
                // Ended before this follower saw it run: what was kept, if anything.
                return match crate::log_keeper::kept_now(&config_maps, &store, &pod).await {
                    Some(kept) => {
                        let main = if params.timestamps {
                            let now = jiff::Timestamp::now().to_string();
                            pai_contract::log_lines::stamp_lines(&kept.main, &now)
                        } else {
                            kept.main
                        };
                        futures::stream::once(async move { Ok(bytes::Bytes::from(main)) }).boxed()
                    }
                    None => futures::stream::empty().boxed(),
                };
            }
            tokio::time::sleep(waits.next_delay()).await;
            match pods.log_stream(&pod, &params).await {
                Ok(reader) => return chunks(reader),
                Err(e) if not_started(&e) => continue,
                Err(e) => {
                    return futures::stream::once(async move {
                        Err(std::io::Error::other(format!("the log of pod {pod}: {e}")))
                    })
                    .boxed();
                }
            }
        }
    };
    futures::stream::once(started).flatten().boxed()
}
