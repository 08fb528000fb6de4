//! Waiting on the Kubernetes API, in one of two ways ([`Source`]):
//!
//! - the attempt's published table ([`crate::published`]): one watch of one small object
//!   by name, from resourceVersion 0 so that a table published before the task started
//!   arrives at once; one event releases the task. Nothing else is read.
//! - the Framework itself, for a Framework nobody publishes for: one list and one watch
//!   by name, with kube's watcher resuming dropped watches from the last resourceVersion
//!   and re-listing after 410 Gone; release on the event that completes the addresses.
//!   Every task then receives every change of the whole Framework: O(N²) bytes per task.

use futures::{StreamExt, TryStreamExt, pin_mut};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{WatchEvent, WatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tracing::{debug, info, warn};

use pai_contract::Framework;
use pai_contract::framework::{GROUP, PLURAL};

use crate::config::BarrierConfig;
use crate::config::{Attempt, Source};
use crate::outcome::{BarrierError, Passed};
use crate::published;
use crate::readiness::{Readiness, readiness};
use crate::retry::Retry;
use pai_kube_retry::{Verdict, WatchBackoff};

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

/// Waits until every task of the Framework has an address, from `config.source`.
pub async fn wait(client: Client, config: &BarrierConfig) -> Result<Passed, BarrierError> {
    let started = std::time::Instant::now();
    let mut progress = String::from("nothing was read yet");
    let waiting = async {
        match &config.source {
            Source::Framework => watch_framework(client, config, &mut progress).await,
            Source::Published(attempt) => {
                watch_published(client, config, attempt, &mut progress).await
            }
        }
    };
    match tokio::time::timeout(config.timeout, waiting).await {
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

fn watch_seconds(config: &BarrierConfig) -> u32 {
    let seconds = config.reread.map_or(MAX_WATCH_SECONDS, |r| {
        r.as_secs().clamp(1, MAX_WATCH_SECONDS)
    });
    u32::try_from(seconds).unwrap_or(290)
}

/// Watches the attempt's table by name until a table of this attempt instance arrives.
/// A dropped or ended watch resumes from the last resourceVersion (from 0 after 410).
// Long: one watch loop: its events, resume after a cut, 410, the retry rule; they share the
// watch's state.
async fn watch_published(
    client: Client,
    config: &BarrierConfig,
    attempt: &Attempt,
    progress: &mut String,
) -> Result<Passed, BarrierError> {
    let api: Api<ConfigMap> = Api::namespaced(client, &config.namespace);
    let name = published::object_name(&config.name);
    let params = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(watch_seconds(config))
        .disable_bookmarks();
    *progress = format!("waiting for configmap {name}, the attempt's peer table");
    let mut version = "0".to_string();
    let mut retry = Retry::default();
    let outlast = |retry: &mut Retry, error: &kube::Error| match retry.classify(error) {
        Verdict::Refused { .. } => Err(refused(error, config, "watch", "configmaps", TABLE_RULE)),
        Verdict::Retry { at_least, .. } => Ok(at_least),
    };
    loop {
        let events = match api.watch(&params, &version).await {
            Ok(events) => {
                retry.allowed();
                events
            }
            Err(error) => {
                let at_least = outlast(&mut retry, &error)?;
                retry.wait(at_least).await;
                continue;
            }
        };
        pin_mut!(events);
        loop {
            let event = match events.try_next().await {
                Ok(Some(event)) => event,
                Ok(None) => break,
                Err(error) => {
                    let at_least = outlast(&mut retry, &error)?;
                    retry.wait(at_least).await;
                    break;
                }
            };
            let map = match event {
                WatchEvent::Added(map) | WatchEvent::Modified(map) => map,
                WatchEvent::Deleted(map) => {
                    version = map.metadata.resource_version.unwrap_or(version);
                    continue;
                }
                WatchEvent::Bookmark(mark) => {
                    version = mark.metadata.resource_version;
                    continue;
                }
                WatchEvent::Error(status) if status.code == 410 => {
                    version = "0".to_string();
                    break;
                }
                WatchEvent::Error(status) => {
                    let at_least = outlast(&mut retry, &kube::Error::Api(status))?;
                    retry.wait(at_least).await;
                    break;
                }
            };
            retry.answered();
            if let Some(v) = map.metadata.resource_version.clone() {
                version = v;
            }
            match published::read(&map, &attempt.instance_uid) {
                Ok(peers) => {
                    return Ok(Passed {
                        framework: None,
                        peers,
                        table_bytes: None,
                    });
                }
                Err(unusable) => {
                    debug!(%unusable, "configmap {name} is not this attempt's table");
                    *progress = format!("configmap {name} is not usable yet: {unusable}");
                }
            }
        }
    }
}

/// Watches the Framework until the readiness rule passes.
async fn watch_framework(
    client: Client,
    config: &BarrierConfig,
    progress: &mut String,
) -> Result<Passed, BarrierError> {
    let api: Api<Framework> = Api::namespaced(client, &config.namespace);
    let watch_config = watcher::Config::default()
        .fields(&format!("metadata.name={}", config.name))
        .timeout(watch_seconds(config));
    let events = watcher::watcher(api, watch_config)
        .backoff(WatchBackoff::new(pai_contract::backoff::BARRIER));
    pin_mut!(events);
    let mut seen = false;
    let mut retry = Retry::default();
    while let Some(event) = events.next().await {
        // `Init` comes before the list is asked for: only what follows is an answer.
        if matches!(&event, Ok(e) if !matches!(e, Event::Init)) {
            retry.answered();
        }
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
                // kube's watcher waits (with back-off) before it asks again.
                outlast_watcher(&mut retry, &error, config)?;
                continue;
            }
        };
        match readiness(&framework) {
            Ok(Readiness::Ready(peers)) => {
                return Ok(Passed {
                    framework: Some(Box::new(framework)),
                    peers,
                    table_bytes: None,
                });
            }
            Ok(Readiness::Waiting(p)) => {
                debug!(%p, "not every task has an address yet");
                *progress = p.to_string();
            }
            Err(error) => {
                warn!(%error, "cannot read the Framework's task statuses");
                *progress = error.to_string();
            }
        }
    }
    Err(BarrierError::Other(
        "the watch of the Framework ended".to_string(),
    ))
}

fn not_found(config: &BarrierConfig, what: &'static str) -> BarrierError {
    BarrierError::NotFound {
        namespace: config.namespace.clone(),
        name: config.name.clone(),
        what,
    }
}

/// What a Framework watch needs: named when the answer is 403.
const FRAMEWORK_RULE: &str = "get, list and watch on this Framework";
/// What the wait for a published table needs: named when the answer is 403.
const TABLE_RULE: &str = "get, list and watch on this job's peer table";

/// A failure of kube's watcher: the wait ends on a refusal before any answer (see
/// [`crate::retry`]); anything else the watcher outlasts with its own back-off.
fn outlast_watcher(
    retry: &mut Retry,
    error: &watcher::Error,
    config: &BarrierConfig,
) -> Result<(), BarrierError> {
    let (error, verb) = match error {
        watcher::Error::InitialListFailed(e) => (e, "list"),
        watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e) => (e, "watch"),
        watcher::Error::WatchError(status) => {
            return outlast_watcher(
                retry,
                &watcher::Error::WatchFailed(kube::Error::Api(status.clone())),
                config,
            );
        }
        watcher::Error::NoResourceVersion => return Ok(()),
    };
    match retry.classify(error) {
        Verdict::Refused { .. } => Err(refused(
            error,
            config,
            verb,
            &format!("{PLURAL}.{GROUP}"),
            FRAMEWORK_RULE,
        )),
        Verdict::Retry { .. } => Ok(()),
    }
}

/// A 401 or 403 on the wait's first answer, as the error that ends it, naming the rule
/// to grant.
fn refused(
    error: &kube::Error,
    config: &BarrierConfig,
    verb: &str,
    resource: &str,
    rule: &str,
) -> BarrierError {
    match error {
        kube::Error::Api(status) if status.code == 401 => BarrierError::Forbidden(format!(
            "the API server rejected the pod's credentials (401 Unauthorized: {}); check the service account token",
            status.message
        )),
        kube::Error::Api(status) => BarrierError::Forbidden(format!(
            "the pod's service account may not {verb} {resource} in namespace {ns} ({code} Forbidden: {msg}); \
             grant it {rule} (rest-lite gives every job a Role <framework>-job that does; a Framework written by hand needs one like it)",
            ns = config.namespace,
            code = status.code,
            msg = status.message
        )),
        other => BarrierError::Other(other.to_string()),
    }
}
