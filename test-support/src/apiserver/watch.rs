//! A watch: from a resourceVersion with the history after it (410 Gone once compacted),
//! or from the objects as they are, then live events, until the server cuts it or its
//! `timeoutSeconds` pass; and the streamed response of JSON lines it (and a followed log)
//! is sent as.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::json;
use tokio::sync::broadcast;

use super::events::{Event, line};
use super::key::Params;
use super::selectors::selected;
use super::shared::Shared;

/// The watch of `resource` in `namespace` that `query` asks for.
pub(super) fn watch_stream(
    shared: Arc<Shared>,
    resource: String,
    namespace: String,
    query: Params,
) -> Response {
    let from: u64 = query
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_secs);
    // Subscribe before reading the history, so nothing falls between the two.
    let live = shared.events.subscribe(&resource);
    let mut cut = shared.cut.subscribe();
    cut.mark_unchanged();
    let matches = {
        let resource = resource.clone();
        let namespace = namespace.clone();
        let query = query.clone();
        move |e: &Event| -> Option<Bytes> {
            if e.key.resource != resource || e.key.namespace != namespace {
                return None;
            }
            e.line_for(&query)
        }
    };
    let backlog: Vec<(u64, Bytes)> = {
        let store = shared.lock();
        if from > 0 && from < store.compacted_below {
            let gone = json!({"type": "ERROR", "object": {
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("too old resource version: {from} ({})", store.compacted_below),
                "reason": "Expired", "code": 410}});
            return line_response(futures::stream::iter([line(&gone)]).boxed());
        }
        if from == 0 {
            store
                .objects
                .iter()
                .filter(|(k, o)| {
                    k.resource == resource && k.namespace == namespace && selected(o, &query)
                })
                .map(|(_, o)| (store.rv, line(&json!({"type": "ADDED", "object": o}))))
                .collect()
        } else {
            store
                .history
                .iter()
                .filter(|e| e.rv > from)
                .filter_map(|e| matches(e).map(|line| (e.rv, line)))
                .collect()
        }
    };
    let last_sent = backlog.iter().map(|(rv, _)| *rv).max().unwrap_or(from);
    shared.watches.send_modify(|c| *c += 1);
    let backlog = futures::stream::iter(backlog.into_iter().map(|(_, line)| line));
    let live = futures::stream::unfold((live, last_sent), move |(mut rx, last)| {
        let matches = matches.clone();
        async move {
            loop {
                match rx.recv().await {
                    Ok(e) if e.rv > last => {
                        if let Some(line) = matches(&e) {
                            return Some((line, (rx, e.rv)));
                        }
                    }
                    Ok(_) => continue,
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        }
    });
    let ends = async move {
        let cut = async {
            let _ = cut.changed().await;
        };
        match timeout {
            Some(t) => {
                let _ = tokio::time::timeout(t, cut).await;
            }
            None => cut.await,
        }
    };
    line_response(backlog.chain(live).take_until(Box::pin(ends)).boxed())
}

/// A streamed `application/json` response of `lines`.
pub(super) fn line_response(lines: futures::stream::BoxStream<'static, Bytes>) -> Response {
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(
            lines.map(Ok::<_, std::convert::Infallible>),
        ))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
