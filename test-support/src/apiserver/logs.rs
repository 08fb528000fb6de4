//! Containers' logs as the kubelet serves them through the API server: appended and
//! ended by tests, read (`timestamps=true`: each line begun with the time it was
//! appended) and followed until the container ends or the stream is cut.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use futures::StreamExt;
use pai_contract::framework::{INIT_CONTAINER, MAIN_CONTAINER};
use tokio::sync::broadcast;

use super::answers::{not_found, status};
use super::key::{Key, Params};
use super::shared::Shared;
use super::store::LogKey;
use super::watch::line_response;

/// Appends `text` to the log at `key` (creating the log), stamped as it is appended, and
/// sends it to the log's followers.
pub(super) fn append(shared: &Shared, key: LogKey, text: &str) {
    let mut store = shared.lock();
    let log = store.logs.entry(key.clone()).or_default();
    let mut at_line_start = log.is_empty() || log.ends_with('\n');
    log.push_str(text);
    let now = jiff::Timestamp::now().to_string();
    let stamped = stamp(text, &mut at_line_start, &now);
    store
        .stamped_logs
        .entry(key.clone())
        .or_default()
        .push_str(&stamped);
    drop(store);
    let _ = shared.log_appends.send((key, Some(text.to_string())));
}

/// Ends every follower of the log at `key`, after what was appended before.
pub(super) fn end(shared: &Shared, key: LogKey) {
    shared.lock().ended_logs.insert(key.clone());
    let _ = shared.log_appends.send((key, None));
}

/// `text`, each line begun with `time` and a space, as the kubelet's `timestamps=true`;
/// `at_line_start`: whether `text` begins a line (and after it, whether the next does).
fn stamp(text: &str, at_line_start: &mut bool, time: &str) -> String {
    let mut out = String::with_capacity(text.len() + 32);
    for piece in text.split_inclusive('\n') {
        if *at_line_start {
            out.push_str(time);
            out.push(' ');
        }
        out.push_str(piece);
        *at_line_start = piece.ends_with('\n');
    }
    out
}

/// `GET …/pods/{name}/log[?follow=true][&timestamps=true]`: the log so far, then
/// (following) what is appended until the log ends or the stream is cut; with
/// `timestamps`, each line begun with the time it was appended.
pub(super) async fn pod_log(
    State(shared): State<Arc<Shared>>,
    Path(params): Path<Params>,
    Query(query): Query<Params>,
) -> Response {
    let pod = Key::new(
        "pods",
        params.get("ns").map_or("", String::as_str),
        params.get("name").map_or("", String::as_str),
    );
    // Our pods have two containers: the API server asks which one.
    let Some(container) = query.get("container").cloned() else {
        return status(
            400,
            "BadRequest",
            format!(
                "a container name must be specified for pod {}, choose one of: [{INIT_CONTAINER} {MAIN_CONTAINER}]",
                pod.name
            ),
        );
    };
    let key = (pod, container);
    let follow = matches!(query.get("follow").map(String::as_str), Some("true" | "1"));
    let timestamps = matches!(
        query.get("timestamps").map(String::as_str),
        Some("true" | "1")
    );
    let appends = shared.log_appends.subscribe();
    let mut cut = shared.cut.subscribe();
    cut.mark_unchanged();
    let (so_far, ended) = {
        let store = shared.lock();
        let logs = match timestamps {
            true => &store.stamped_logs,
            false => &store.logs,
        };
        let Some(so_far) = logs.get(&key).cloned() else {
            // As the kubelet answers: a pod that is not there is a 404; one whose
            // container has not started (its init container runs) a 400.
            if !store.objects.contains_key(&key.0) {
                return not_found(&key.0);
            }
            return status(
                400,
                "BadRequest",
                format!(
                    "container \"{}\" in pod \"{}\" is waiting to start: PodInitializing",
                    key.1, key.0.name
                ),
            );
        };
        (so_far, store.ended_logs.contains(&key))
    };
    let at_line_start = so_far.is_empty() || so_far.ends_with('\n');
    let head = futures::stream::iter([Bytes::from(so_far)]);
    // Following an ended container's log gives what it wrote, then ends, as the kubelet.
    if !follow || ended {
        return line_response(head.boxed());
    }
    shared.watches.send_modify(|c| *c += 1);
    let state = (appends, key, at_line_start);
    let tail = futures::stream::unfold(
        state,
        move |(mut appends, key, mut at_line_start)| async move {
            loop {
                match appends.recv().await {
                    Ok((k, Some(text))) if k == key => {
                        let text = match timestamps {
                            true => {
                                let now = jiff::Timestamp::now().to_string();
                                stamp(&text, &mut at_line_start, &now)
                            }
                            false => text,
                        };
                        return Some((Bytes::from(text), (appends, key, at_line_start)));
                    }
                    Ok((k, None)) if k == key => return None,
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        },
    );
    let ends = async move {
        let _ = cut.changed().await;
    };
    line_response(head.chain(tail).take_until(Box::pin(ends)).boxed())
}
