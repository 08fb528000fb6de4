//! `/docs`: the API's routes with their whole descriptions, written in Markdown in the
//! OpenAPI document (from the handlers' doc comments) and rendered here by
//! `pulldown-cmark`. Raw HTML in a description is shown as text, never passed through.

use pulldown_cmark::{Event, Options, Parser};
use serde::Serialize;

use super::view::Frame;

#[derive(Serialize)]
pub struct DocsPage {
    #[serde(flatten)]
    pub frame: Frame,
    pub document: &'static str,
    pub routes: Vec<RouteLine>,
}

#[derive(Serialize)]
pub struct RouteLine {
    pub method: String,
    pub path: String,
    /// The description as HTML (rendered from Markdown, raw HTML escaped).
    pub html: String,
}

/// Markdown as HTML, raw HTML in it escaped as text.
pub fn markdown(text: &str) -> String {
    let events = Parser::new_ext(text, Options::ENABLE_TABLES).map(|event| match event {
        Event::Html(html) | Event::InlineHtml(html) => Event::Text(html),
        other => other,
    });
    let mut html = String::with_capacity(text.len() * 3 / 2);
    pulldown_cmark::html::push_html(&mut html, events);
    html
}

/// The page, from the OpenAPI document the server serves.
pub fn page() -> DocsPage {
    let document = crate::openapi::document();
    let mut routes = Vec::new();
    if let Some(paths) = document["paths"].as_object() {
        for (path, item) in paths {
            for method in ["get", "post", "put", "patch", "delete"] {
                let Some(operation) = item.get(method) else {
                    continue;
                };
                // utoipa puts a doc comment's first paragraph in `summary` and the rest in
                // `description`: both are the text.
                let text = [&operation["summary"], &operation["description"]]
                    .iter()
                    .filter_map(|v| v.as_str())
                    .collect::<Vec<_>>()
                    .join("\n\n");
                routes.push(RouteLine {
                    method: method.to_ascii_uppercase(),
                    path: path.clone(),
                    html: markdown(&text),
                });
            }
        }
    }
    DocsPage {
        frame: Frame {
            title: "API".to_string(),
            ..Frame::default()
        },
        document: pai_api::routes::OPENAPI.template(),
        routes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_is_rendered_and_raw_html_is_text() {
        assert_eq!(
            markdown("`GET …/logs?role=`: one task's output."),
            "<p><code>GET …/logs?role=</code>: one task's output.</p>\n"
        );
        let html = markdown("a <script>alert(1)</script> b");
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
    }

    #[test]
    fn every_route_is_described_whole() {
        let page = page();
        assert!(page.routes.len() > 10);
        for route in &page.routes {
            assert!(
                !route.html.contains('`'),
                "{} {}: {}",
                route.method,
                route.path,
                route.html
            );
        }
    }
}
