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

/// Bearer tokens on every `/api/v1/…` route but this document; the probes and metrics
/// are open.
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
                        "A token from the server's token file. Without a token file the server listens on loopback only and needs none.",
                    ))
                    .build(),
            ),
        );
        for (path, item) in openapi.paths.paths.iter_mut() {
            if !path.starts_with("/api/v1/") || path == DOCUMENT_PATH {
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

/// Where the document is served.
pub const DOCUMENT_PATH: &str = "/api/v1/openapi.json";

/// `GET /api/v1/openapi.json`.
#[utoipa::path(
    get,
    path = "/api/v1/openapi.json",
    tag = "operations",
    responses((status = 200, description = "this document (OpenAPI 3.1)", body = Object))
)]
pub async fn openapi_json() -> axum::Json<Document> {
    axum::Json(ApiDoc::openapi())
}
