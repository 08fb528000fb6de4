//! What the object routes do: list (selected) or watch a collection, get an object,
//! create one (422 when validation refuses it, 409 when it exists), replace it (409 on a
//! stale resourceVersion), JSON merge patch it, and delete it (with its preconditions).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::answers::{not_found, parse_body, stale, status, unprocessable};
use super::key::{Key, Params, collection_key, item_key};
use super::selectors::{list_kind, selected, unsupported_field};
use super::shared::Shared;
use super::store::{insert, merge, remove, remove_one};
use super::watch::watch_stream;

/// `GET` of a collection: its objects that the query selects, or (`watch=true`) a watch.
pub(super) async fn list_or_watch(
    State(shared): State<Arc<Shared>>,
    Path(params): Path<Params>,
    Query(query): Query<Params>,
) -> Response {
    let (resource, namespace) = collection_key(&params);
    if let Some(field) = unsupported_field(&resource, &query) {
        return status(
            400,
            "BadRequest",
            format!("field label not supported: {field}"),
        );
    }
    let watching = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
    if !watching {
        let store = shared.lock();
        let items: Vec<Value> = store
            .objects
            .iter()
            .filter(|(k, _)| k.resource == resource && k.namespace == namespace)
            .map(|(_, o)| o.clone())
            .filter(|o| selected(o, &query))
            .collect();
        let body = json!({
            "kind": list_kind(&resource, &items), "apiVersion": "v1",
            "metadata": {"resourceVersion": store.rv.to_string()},
            "items": items,
        });
        return axum::Json(body).into_response();
    }
    watch_stream(shared, resource, namespace, query)
}

/// `GET` of an object.
pub(super) async fn get_one(
    State(shared): State<Arc<Shared>>,
    Path(params): Path<Params>,
) -> Response {
    let key = item_key(&params);
    match shared.lock().objects.get(&key) {
        Some(o) => axum::Json(o.clone()).into_response(),
        None => not_found(&key),
    }
}

/// `POST` to a collection: the object created, after [`crate::validation::admit`].
pub(super) async fn create(
    State(shared): State<Arc<Shared>>,
    Path(params): Path<Params>,
    body: Bytes,
) -> Response {
    let object = match parse_body(&body) {
        Ok(o) => o,
        Err(r) => return r.into_response(),
    };
    let (resource, namespace) = collection_key(&params);
    let Some(name) = object["metadata"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .map(str::to_string)
    else {
        return status(422, "Invalid", "metadata.name: Required value".to_string());
    };
    let mut object = object;
    if let Err(invalid) = crate::validation::admit(&resource, &mut object) {
        return unprocessable(&invalid);
    }
    let key = Key {
        resource,
        namespace,
        name,
    };
    let mut store = shared.lock();
    if let Some(message) = store
        .invalid
        .clone()
        .or_else(|| store.refused.get(&key.resource).cloned())
    {
        return status(422, "Invalid", message);
    }
    if store.objects.contains_key(&key) {
        return status(
            409,
            "AlreadyExists",
            format!("{} \"{}\" already exists", key.resource, key.name),
        );
    }
    object["metadata"]["resourceVersion"] = Value::Null;
    let created = insert(&mut store, &shared.events, key, object, "ADDED");
    (StatusCode::CREATED, axum::Json(created)).into_response()
}

/// `PUT` of an object: replaced whole, unless the resourceVersion it names is stale.
pub(super) async fn replace(
    State(shared): State<Arc<Shared>>,
    Path(params): Path<Params>,
    body: Bytes,
) -> Response {
    let mut object = match parse_body(&body) {
        Ok(o) => o,
        Err(r) => return r.into_response(),
    };
    let key = item_key(&params);
    if let Err(invalid) = crate::validation::admit(&key.resource, &mut object) {
        return unprocessable(&invalid);
    }
    let mut store = shared.lock();
    let Some(current) = store.objects.get(&key) else {
        return not_found(&key);
    };
    let sent = object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default();
    if !sent.is_empty() && current["metadata"]["resourceVersion"] != sent {
        return stale(&key);
    }
    let updated = insert(&mut store, &shared.events, key, object, "MODIFIED");
    axum::Json(updated).into_response()
}

/// `PATCH` of an object: a JSON merge patch (a strategic one is read as one too).
pub(super) async fn patch(
    State(shared): State<Arc<Shared>>,
    Path(params): Path<Params>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !(content_type.starts_with("application/merge-patch+json")
        || content_type.starts_with("application/strategic-merge-patch+json"))
    {
        return status(
            415,
            "UnsupportedMediaType",
            format!("the test server does not support patch type {content_type:?}"),
        );
    }
    let patch = match parse_body(&body) {
        Ok(p) => p,
        Err(r) => return r.into_response(),
    };
    let key = item_key(&params);
    let mut store = shared.lock();
    if let Some(message) = store.refused_patches.get(&key.resource).cloned() {
        return status(422, "Invalid", message);
    }
    let Some(mut object) = store.objects.get(&key).cloned() else {
        return not_found(&key);
    };
    // A patch that names a resourceVersion applies only to that version, as the real
    // API server's optimistic concurrency.
    if let Some(sent) = patch["metadata"]["resourceVersion"].as_str()
        && object["metadata"]["resourceVersion"].as_str() != Some(sent)
    {
        return stale(&key);
    }
    merge(&mut object, &patch);
    if let Err(invalid) = crate::validation::admit(&key.resource, &mut object) {
        return unprocessable(&invalid);
    }
    let going = !object["metadata"]["deletionTimestamp"].is_null()
        && object["metadata"]["finalizers"]
            .as_array()
            .is_none_or(|f| f.is_empty());
    let updated = insert(&mut store, &shared.events, key.clone(), object, "MODIFIED");
    // Its last finalizer taken away, an object being deleted goes.
    if going {
        remove_one(&mut store, &shared.events, &key);
    }
    axum::Json(updated).into_response()
}

/// `DELETE` of an object (and of what it owns), unless its preconditions differ.
pub(super) async fn delete(
    State(shared): State<Arc<Shared>>,
    Path(params): Path<Params>,
    body: Bytes,
) -> Response {
    let key = item_key(&params);
    let mut store = shared.lock();
    // DeleteOptions' preconditions: the object's UID and resourceVersion must be these.
    let options: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if let Some(object) = store.objects.get(&key) {
        for field in ["uid", "resourceVersion"] {
            let wanted = &options["preconditions"][field];
            if wanted.is_string() && *wanted != object["metadata"][field] {
                return status(
                    409,
                    "Conflict",
                    format!(
                        "Precondition failed: {field} in precondition: {wanted}, {field} in object meta: {}",
                        object["metadata"][field]
                    ),
                );
            }
        }
    }
    match remove(&mut store, &shared.events, &key) {
        Some(object) => axum::Json(object).into_response(),
        None => not_found(&key),
    }
}
