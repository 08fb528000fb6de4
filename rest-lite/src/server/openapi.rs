//! The OpenAPI document of the whole API, generated from the handlers' annotations and
//! the response types, served at `/api/v1/openapi.json`.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{OpenApi as Document, SecurityRequirement};
use utoipa::{Modify, OpenApi};

use super::routes;

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
        routes::healthz,
        routes::readyz,
        routes::metrics,
        openapi_json,
    ),
    modifiers(&BearerTokens),
    tags(
        (name = "jobs", description = "Submit, watch, stop and delete multi-role jobs"),
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
            if !(path.starts_with("/api/v1/") || path == "/metrics") || path == DOCUMENT_PATH {
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
            "/api/v1/user/{user}/jobs",
            "post",
            "202",
            "$request.body#/jobName",
            "",
        ),
        (
            "/api/v1/user/{user}/jobs/{job}",
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

/// The whole document, as served.
pub fn document() -> serde_json::Value {
    let mut document = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    add_links(&mut document);
    document
}

/// Where the document is served.
pub const DOCUMENT_PATH: &str = "/api/v1/openapi.json";

/// `GET /api/v1/openapi.json`.
#[utoipa::path(
    get,
    path = "/api/v1/openapi.json",
    tag = "operations",
    responses((status = 200, description = "this document (OpenAPI 3.1)", body = Object))
)]
pub async fn openapi_json() -> axum::Json<serde_json::Value> {
    axum::Json(document())
}
