//! The OpenAPI document of the whole API, generated from the handlers' annotations and
//! the response types, served at `/api/v1/openapi.json`.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{OpenApi as Document, SecurityRequirement};
use utoipa::{Modify, OpenApi};

use pai_job::names::MAX_TASKS_PER_ROLE;
use pai_translate::spec::schema;

use super::{routes, storages, v2};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "rest-lite",
        description = "OpenPAI v1 jobs API over FrameworkController Frameworks, on Kubernetes or on this machine."
    ),
    paths(
        routes::submit,
        routes::submit_named,
        routes::list_jobs,
        routes::list_user_jobs,
        routes::get_job,
        routes::get_config,
        routes::get_ssh,
        routes::get_ssh_key,
        routes::get_logs,
        routes::set_execution,
        routes::delete_job,
        routes::whoami,
        v2::submit,
        v2::list,
        v2::get_job,
        v2::get_attempt,
        v2::get_config,
        v2::set_execution,
        v2::add_tag,
        v2::delete_tag,
        v2::get_task,
        v2::get_task_logs,
        storages::list,
        storages::get,
        routes::healthz,
        routes::readyz,
        routes::metrics,
        openapi_json,
    ),
    modifiers(&BearerTokens),
    tags(
        (name = "jobs", description = "Submit, watch, stop and delete multi-role jobs"),
        (name = "v2", description = "OpenPAI's v2 REST API, as its official SDK calls it"),
        (name = "operations", description = "Probes, metrics and this document"),
    )
)]
pub struct ApiDoc;

/// Bearer tokens on every `/api/v1/…` route but this document, and on `/metrics`; the
/// probes are open.
struct BearerTokens;

const SCHEME: &str = "bearer";

impl Modify for BearerTokens {
    fn modify(&self, openapi: &mut Document) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            SCHEME,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A token from the server's token file; without one, this machine's token (<state dir>/token, readable by the server's user alone).",
                    ))
                    .build(),
            ),
        );
        for (path, item) in openapi.paths.paths.iter_mut() {
            if !(pai_api::routes::is_api(path) || path == pai_api::routes::METRICS.template())
                || path == pai_api::routes::OPENAPI.template()
            {
                continue;
            }
            for operation in [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
            ]
            .into_iter()
            .flatten()
            {
                operation.security = Some(vec![SecurityRequirement::new::<_, _, &str>(SCHEME, [])]);
            }
        }
    }
}

/// A link to one of the job's operations.
struct JobLink {
    name: &'static str,
    operation: &'static str,
    /// A fixed query parameter.
    query: Option<(&'static str, &'static str)>,
    /// The `value` of an executionType body.
    execution: Option<&'static str>,
}

const fn link(name: &'static str, operation: &'static str) -> JobLink {
    JobLink {
        name,
        operation,
        query: None,
        execution: None,
    }
}

/// The job's operations a link leads to.
const JOB_OPERATIONS: &[JobLink] = &[
    link("GetJob", "get_job"),
    JobLink {
        query: Some(("watch", "true")),
        ..link("WatchJob", "get_job")
    },
    link("GetConfig", "get_config"),
    link("GetSsh", "get_ssh"),
    JobLink {
        execution: Some("STOP"),
        ..link("StopJob", "set_execution")
    },
    JobLink {
        execution: Some("START"),
        ..link("StartJob", "set_execution")
    },
    link("DeleteJob", "delete_job"),
];

/// Links between operations (OpenAPI 3.1, the Link object), so that a client or a
/// stateful test goes from a submission to the job's status, watch, config, stop and
/// delete, and from a status to the same and its ssh info. Logs need a role and index,
/// which no response names as a value. Written as JSON: utoipa 5.5's `Link`
/// serialises its fields in snake case.
fn add_links(document: &mut serde_json::Value) {
    use serde_json::json;
    // (path, method, status, the job's runtime expression, own link)
    let sources = [
        (
            pai_api::routes::USER_JOBS.template(),
            "post",
            "202",
            "$request.body#/jobName",
            "",
        ),
        (
            pai_api::routes::JOB.template(),
            "get",
            "200",
            "$request.path.job",
            "GetJob",
        ),
    ];
    for (path, method, status, job, own) in sources {
        let mut links = serde_json::Map::new();
        for target in JOB_OPERATIONS {
            // A job just submitted has no task with an address: ssh info comes later.
            if target.name == own || (target.name == "GetSsh" && method == "post") {
                continue;
            }
            let mut parameters = json!({"user": "$request.path.user", "job": job});
            if let Some((parameter, value)) = target.query {
                parameters[parameter] = json!(value);
            }
            let mut link = json!({"operationId": target.operation, "parameters": parameters});
            if let Some(value) = target.execution {
                link["requestBody"] = json!({ "value": value });
            }
            links.insert(target.name.to_string(), link);
        }
        document["paths"][path][method]["responses"][status]["links"] = links.into();
    }
}

/// The names' rules and the limits, from the constants validation uses (never written
/// twice): on every path and query parameter that names a user, a job, a role, a task
/// index or a page's size, and on the spec's schemas.
fn state_rules(document: &mut serde_json::Value) {
    use serde_json::{Value, json};
    // OpenPAI's v2 list pages by its own bounds (its `limit` up to 50,000), stated on
    // its parameters.
    let rule = |name: &str, v2: bool| match name {
        "user" | "job" | "username" => Some(schema::name_rule()),
        "role" => Some(schema::role_rule()),
        "index" => Some(json!({"minimum": 0, "maximum": MAX_TASKS_PER_ROLE - 1})),
        "limit" if !v2 => Some(json!({"minimum": 1, "maximum": crate::jobs::MAX_PAGE})),
        _ => None,
    };
    if let Some(paths) = document.get_mut("paths").and_then(Value::as_object_mut) {
        for (path, item) in paths.iter_mut() {
            let v2 = pai_api::routes::is_v2(path);
            let parameters = item
                .as_object_mut()
                .into_iter()
                .flat_map(|item| item.values_mut())
                .filter_map(|operation| operation.get_mut("parameters"))
                .filter_map(Value::as_array_mut)
                .flatten();
            for parameter in parameters {
                let name = parameter["name"].as_str().unwrap_or_default();
                if let (Some(Value::Object(rule)), Some(Value::Object(schema))) =
                    (rule(name, v2), parameter.get_mut("schema"))
                {
                    schema.extend(rule);
                }
            }
        }
    }
    if let Some(schemas) = document.pointer_mut("/components/schemas") {
        schema::state_rules(schemas);
    }
}

/// The whole document, as served.
pub fn document() -> serde_json::Value {
    let mut document = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    state_rules(&mut document);
    add_links(&mut document);
    document
}

/// `GET /api/v1/openapi.json`: this document, the whole API with every field and error.
#[utoipa::path(
    get,
    path = pai_api::routes::OPENAPI.template(),
    tag = "operations",
    responses((status = 200, description = "this document (OpenAPI 3.1)", body = Object))
)]
pub async fn openapi_json() -> axum::Json<serde_json::Value> {
    axum::Json(document())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pai_translate::spec::names::{LABEL_PATTERN, MAX_NAME_LEN, NAME_PATTERN, ROLE_PATTERN};

    fn parameter<'a>(
        document: &'a serde_json::Value,
        path: &str,
        name: &str,
    ) -> &'a serde_json::Value {
        document["paths"][path]["get"]["parameters"]
            .as_array()
            .and_then(|all| all.iter().find(|p| p["name"] == name))
            .map(|p| &p["schema"])
            .unwrap_or_else(|| panic!("{path} has no parameter {name}"))
    }

    /// Every `pattern` in a schema, wherever it is nested (`oneOf` of an optional value).
    fn patterns(schema: &serde_json::Value) -> Vec<&str> {
        match schema {
            serde_json::Value::Object(map) => map
                .iter()
                .flat_map(|(key, value)| match (key.as_str(), value.as_str()) {
                    ("pattern", Some(pattern)) => vec![pattern],
                    _ => patterns(value),
                })
                .collect(),
            serde_json::Value::Array(items) => items.iter().flat_map(patterns).collect(),
            _ => Vec::new(),
        }
    }

    #[test]
    fn the_names_rules_and_limits_come_from_the_constants_validation_uses() {
        let document = document();
        let logs = pai_api::routes::JOB_LOGS.template();
        for name in ["user", "job"] {
            let schema = parameter(&document, logs, name);
            assert_eq!(schema["pattern"], NAME_PATTERN, "{name}");
            assert_eq!(schema["maxLength"], MAX_NAME_LEN, "{name}");
        }
        let username = parameter(&document, pai_api::routes::JOBS.template(), "username");
        assert_eq!(username["pattern"], NAME_PATTERN);
        for list in [
            pai_api::routes::JOBS.template(),
            pai_api::routes::USER_JOBS.template(),
        ] {
            let limit = parameter(&document, list, "limit");
            assert_eq!(limit["minimum"], 1, "{list}");
            assert_eq!(limit["maximum"], crate::jobs::MAX_PAGE, "{list}");
        }
        // OpenPAI's v2 list has its own bound.
        let limit = parameter(&document, pai_api::routes::V2_JOBS.template(), "limit");
        assert_eq!(limit["maximum"], 50_000);
        assert_eq!(parameter(&document, logs, "role")["pattern"], ROLE_PATTERN);
        assert_eq!(
            parameter(&document, logs, "index")["maximum"],
            MAX_TASKS_PER_ROLE - 1
        );
        let schemas = &document["components"]["schemas"];
        let spec = &schemas["JobSpecDocument"]["properties"];
        assert_eq!(spec["jobName"]["pattern"], NAME_PATTERN);
        let role = &schemas["TaskRoleDocument"]["properties"];
        assert_eq!(role["name"]["pattern"], ROLE_PATTERN);
        assert_eq!(
            role["name"]["maxLength"],
            pai_job::names::max_task_role_name(1)
        );
        // An integer, or (as OpenPAI's validator took it) a string of digits.
        let task_number = &role["taskNumber"]["oneOf"];
        assert!(
            task_number
                .to_string()
                .contains(&format!("\"maximum\":{MAX_TASKS_PER_ROLE}")),
            "{task_number}"
        );
        assert_eq!(task_number[1]["type"], "string");
        for optional in [
            &schemas["PortDocument"]["properties"]["label"],
            &schemas["TensorflowOptions"]["properties"]["portLabel"],
        ] {
            assert_eq!(patterns(optional), [LABEL_PATTERN], "{optional}");
        }
    }
}
