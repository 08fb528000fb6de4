//! Waiting on the Kubernetes API: one list and one watch of the Framework by name, with
//! kube's watcher resuming dropped watches from the last resourceVersion and re-listing
//! after 410 Gone. Release happens on the watch event that completes the job's addresses.

use futures::{StreamExt, pin_mut};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tracing::{debug, info, warn};

use pai_contract::Framework;
use pai_contract::framework::{GROUP, PLURAL};

use crate::readiness::{Readiness, readiness};
use crate::{BarrierConfig, BarrierError, Passed};

/// Longest watch request: the API server's own limit for a watch is about this.
const MAX_WATCH_SECONDS: u64 = 290;

/// A client for `apiserver` (`KUBE_APISERVER_ADDRESS`) or, without one, for the cluster
/// the environment describes (`KUBECONFIG`, `~/.kube/config`, in-cluster).
pub async fn client(apiserver: Option<&str>) -> Result<Client, BarrierError> {
    let apiserver = apiserver.map(str::trim).filter(|a| !a.is_empty());
    let inferred = kube::Config::infer().await;
    let mut config = match (inferred, apiserver) {
        (Ok(config), _) => config,
        (Err(_), Some(address)) => kube::Config::new(parse_url(address)?),
        (Err(e), None) => {
            return Err(BarrierError::Config(format!(
                "no Kubernetes configuration found (KUBE_APISERVER_ADDRESS, KUBECONFIG, ~/.kube/config or in-cluster): {e}"
            )));
        }
    };
    if let Some(address) = apiserver {
        config.cluster_url = parse_url(address)?;
    }
    Client::try_from(config)
        .map_err(|e| BarrierError::Config(format!("cannot build a Kubernetes client: {e}")))
}

fn parse_url(address: &str) -> Result<http::Uri, BarrierError> {
    address.parse().map_err(|e| {
        BarrierError::Config(format!(
            "KUBE_APISERVER_ADDRESS {address:?} is not a URL: {e}"
        ))
    })
}

/// Waits until every task of the Framework has an address.
pub async fn wait(client: Client, config: &BarrierConfig) -> Result<Passed, BarrierError> {
    let api: Api<Framework> = Api::namespaced(client, &config.namespace);
    let mut watch_config =
        watcher::Config::default().fields(&format!("metadata.name={}", config.name));
    if let Some(reread) = config.reread {
        let seconds = reread.as_secs().clamp(1, MAX_WATCH_SECONDS);
        watch_config = watch_config.timeout(u32::try_from(seconds).unwrap_or(290));
    }
    let events = watcher::watcher(api, watch_config).default_backoff();
    let started = std::time::Instant::now();
    let mut progress = String::from("the Framework was not read yet");

    let waiting = async {
        pin_mut!(events);
        let mut seen = false;
        while let Some(event) = events.next().await {
            let framework = match event {
                Ok(Event::Init) => {
                    seen = false;
                    continue;
                }
                Ok(Event::InitDone) if !seen => return Err(not_found(config, "does not exist")),
                Ok(Event::InitDone) => continue,
                Ok(Event::Delete(_)) => return Err(not_found(config, "was deleted while waiting")),
                Ok(Event::InitApply(framework) | Event::Apply(framework)) => {
                    seen = true;
                    framework
                }
                Err(error) => {
                    check_error(&error, config)?;
                    warn!(%error, "watching the Framework failed; resuming");
                    continue;
                }
            };
            match readiness(&framework) {
                Ok(Readiness::Ready(peers)) => {
                    return Ok(Passed {
                        framework: Box::new(framework),
                        peers,
                    });
                }
                Ok(Readiness::Waiting(p)) => {
                    debug!(%p, "not every task has an address yet");
                    progress = p.to_string();
                }
                Err(error) => {
                    warn!(%error, "cannot read the Framework's task statuses");
                    progress = error.to_string();
                }
            }
        }
        Err(BarrierError::Other(
            "the watch of the Framework ended".to_string(),
        ))
    };
    let result = tokio::time::timeout(config.timeout, waiting).await;
    match result {
        Ok(Ok(passed)) => {
            info!(
                framework = %config.name,
                waited_ms = started.elapsed().as_millis() as u64,
                "barrier passed: every task has an address"
            );
            Ok(passed)
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(BarrierError::Timeout {
            seconds: config.timeout.as_secs(),
            progress,
        }),
    }
}

fn not_found(config: &BarrierConfig, what: &'static str) -> BarrierError {
    BarrierError::NotFound {
        namespace: config.namespace.clone(),
        name: config.name.clone(),
        what,
    }
}

/// 401 and 403 never heal by waiting: fail at once, naming what is missing.
fn check_error(error: &watcher::Error, config: &BarrierConfig) -> Result<(), BarrierError> {
    let status = match error {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.as_ref(),
        watcher::Error::WatchError(s) => s.as_ref(),
        _ => return Ok(()),
    };
    let verb = match error {
        watcher::Error::InitialListFailed(_) => "list",
        _ => "watch",
    };
    match status.code {
        401 => Err(BarrierError::Forbidden(format!(
            "the API server rejected the pod's credentials (401 Unauthorized: {}); check the service account token",
            status.message
        ))),
        403 => Err(BarrierError::Forbidden(format!(
            "the pod's service account may not {verb} {PLURAL}.{GROUP} in namespace {ns} (403 Forbidden: {msg}); \
             grant it get, list and watch on frameworks (deploy/rbac/job-pods.yaml)",
            ns = config.namespace,
            msg = status.message
        ))),
        _ => Ok(()),
    }
}
