//! Waiting on the Kubernetes API, in one of two ways ([`Source`]):
//!
//! - the attempt's published table ([`crate::published`]): one watch of one small object
//!   by name, from resourceVersion 0 so that a table published before the task started
//!   arrives at once; one event releases the task. Nothing else is read.
//! - the Framework itself, for a Framework nobody publishes for: one list and one watch
//!   by name, with kube's watcher resuming dropped watches from the last resourceVersion
//!   and re-listing after 410 Gone; release on the event that completes the addresses.
//!   Every task then receives every change of the whole Framework: O(N²) bytes per task.

use std::time::Duration;

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
    let mut backoff = Backoff::default();
    loop {
        let events = match api.watch(&params, &version).await {
            Ok(events) => events,
            Err(error) => {
                forbidden(&error, config, "watch", "configmaps", TABLE_RULE)?;
                warn!(%error, "cannot watch the peer table; retrying");
                backoff.wait().await;
                continue;
            }
        };
        pin_mut!(events);
        loop {
            let event = match events.try_next().await {
                Ok(Some(event)) => event,
                Ok(None) => break,
                Err(error) => {
                    forbidden(&error, config, "watch", "configmaps", TABLE_RULE)?;
                    warn!(%error, "watching the peer table failed; resuming");
                    backoff.wait().await;
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
                    let error = kube::Error::Api(status);
                    forbidden(&error, config, "watch", "configmaps", TABLE_RULE)?;
                    warn!(%error, "the peer table's watch reported an error; resuming");
                    break;
                }
            };
            backoff = Backoff::default();
            if let Some(v) = map.metadata.resource_version.clone() {
                version = v;
            }
            match published::read(&map, &attempt.instance_uid) {
                Ok(peers) => {
                    return Ok(Passed {
                        framework: None,
                        peers,
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
    let events = watcher::watcher(api, watch_config).default_backoff();
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
                    framework: Some(Box::new(framework)),
                    peers,
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

/// Waits between retries of a failing request: 0.1 s, doubling up to 10 s.
#[derive(Default)]
struct Backoff(u32);

impl Backoff {
    async fn wait(&mut self) {
        let millis = 100u64.saturating_mul(1 << self.0.min(7)).min(10_000);
        self.0 += 1;
        tokio::time::sleep(Duration::from_millis(millis)).await;
    }
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

/// 401 and 403 never heal by waiting: fail at once, naming what is missing.
fn check_error(error: &watcher::Error, config: &BarrierConfig) -> Result<(), BarrierError> {
    let resource = format!("{PLURAL}.{GROUP}");
    let fail = |e: &kube::Error, verb| forbidden(e, config, verb, &resource, FRAMEWORK_RULE);
    match error {
        watcher::Error::InitialListFailed(e) => fail(e, "list"),
        watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e) => fail(e, "watch"),
        watcher::Error::WatchError(status) => fail(&kube::Error::Api(status.clone()), "watch"),
        _ => Ok(()),
    }
}

/// A 401 or 403 answer as the error that ends the wait, naming the rule to grant.
fn forbidden(
    error: &kube::Error,
    config: &BarrierConfig,
    verb: &str,
    resource: &str,
    rule: &str,
) -> Result<(), BarrierError> {
    let kube::Error::Api(status) = error else {
        return Ok(());
    };
    match status.code {
        401 => Err(BarrierError::Forbidden(format!(
            "the API server rejected the pod's credentials (401 Unauthorized: {}); check the service account token",
            status.message
        ))),
        403 => Err(BarrierError::Forbidden(format!(
            "the pod's service account may not {verb} {resource} in namespace {ns} (403 Forbidden: {msg}); \
             grant it {rule} (rest-lite gives every job a Role <framework>-job that does; a Framework written by hand needs one like it)",
            ns = config.namespace,
            msg = status.message
        ))),
        _ => Ok(()),
    }
}
