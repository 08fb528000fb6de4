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
    pub guides: Vec<GuideLink>,
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

/// One guide of `docs/`, carried in the binary and shown at `/docs/{name}`.
pub struct Guide {
    pub name: &'static str,
    pub title: &'static str,
    /// What it is for, on the index.
    pub about: &'static str,
    pub text: &'static str,
}

/// The guides, by reader, in the order the index lists them.
pub const GUIDES: &[Guide] = &[
    Guide {
        name: "using",
        title: "Using rest-lite",
        about: "the command line, the pages, tasks in their images, GPUs, storages, restarts, and the training frameworks' glue",
        text: include_str!("../../../docs/using.md"),
    },
    Guide {
        name: "reference",
        title: "Reference",
        about: "the job spec (v1 and v2), every environment variable of a task, what runs inside a task, the REST API, security",
        text: include_str!("../../../docs/reference.md"),
    },
    Guide {
        name: "operating",
        title: "Running it for others on a cluster",
        about: "images, tokens, the config, the job history, upgrades, removing it",
        text: include_str!("../../../docs/operating.md"),
    },
    Guide {
        name: "internals",
        title: "How it is built and tested",
        about: "a map: the crates, the rules the code keeps and what checks them, the mechanisms that surprise, the tests",
        text: include_str!("../../../docs/internals.md"),
    },
];

/// The pictures the guides show, at `/docs/{name}`.
pub const IMAGES: &[(&str, &[u8])] = &[
    (
        "portal-job.png",
        include_bytes!("../../../docs/portal-job.png"),
    ),
    (
        "portal-submit-error.png",
        include_bytes!("../../../docs/portal-submit-error.png"),
    ),
];

#[derive(Serialize)]
pub struct GuideLink {
    pub url: String,
    pub title: &'static str,
    pub about: &'static str,
}

#[derive(Serialize)]
pub struct GuidePage {
    #[serde(flatten)]
    pub frame: Frame,
    pub html: String,
    pub guides: Vec<GuideLink>,
}

fn guide_links() -> Vec<GuideLink> {
    GUIDES
        .iter()
        .map(|g| GuideLink {
            url: pai_api::routes::DOCS_PAGE.with(&[g.name]),
            title: g.title,
            about: g.about,
        })
        .collect()
}

/// Guide `name` as a page; `None` when there is no such guide.
pub fn guide(name: &str) -> Option<GuidePage> {
    let guide = GUIDES.iter().find(|g| g.name == name)?;
    Some(GuidePage {
        frame: Frame {
            title: guide.title.to_string(),
            ..Frame::default()
        },
        html: guide_html(guide.text),
        guides: guide_links(),
    })
}

/// A guide's Markdown as HTML: raw HTML in it as text; each heading with the id GitHub
/// gives it (`## Removing it` is `#removing-it`), so links between the guides land;
/// a link to another guide (`operating.md#removing-it`) or a picture goes to its page
/// here, and a link to a file of the repository is its text alone.
pub fn guide_html(text: &str) -> String {
    use pulldown_cmark::{CowStr, Tag, TagEnd};
    let mut events: Vec<Event> = Parser::new_ext(text, Options::ENABLE_TABLES)
        .map(|event| match event {
            Event::Html(html) | Event::InlineHtml(html) => Event::Text(html),
            other => other,
        })
        .collect();
    // Headings get their ids from their text.
    for start in 0..events.len() {
        if !matches!(events[start], Event::Start(Tag::Heading { .. })) {
            continue;
        }
        let mut words = String::new();
        for event in &events[start + 1..] {
            match event {
                Event::End(TagEnd::Heading(_)) => break,
                Event::Text(t) | Event::Code(t) => words.push_str(t),
                _ => {}
            }
        }
        if let Event::Start(Tag::Heading { id, .. }) = &mut events[start] {
            *id = Some(CowStr::from(slug(&words)));
        }
    }
    // Links: kept, pointed here, or dropped (their text stays); ends matched by a stack.
    let mut kept = Vec::new();
    let mut out = Vec::with_capacity(events.len());
    for event in events {
        match event {
            Event::Start(Tag::Link {
                link_type,
                dest_url,
                title,
                id,
            }) => match here(&dest_url) {
                Some(url) => {
                    kept.push(true);
                    out.push(Event::Start(Tag::Link {
                        link_type,
                        dest_url: CowStr::from(url),
                        title,
                        id,
                    }));
                }
                None => kept.push(false),
            },
            Event::End(TagEnd::Link) => {
                if kept.pop().unwrap_or(false) {
                    out.push(Event::End(TagEnd::Link));
                }
            }
            Event::Start(Tag::Image {
                link_type,
                dest_url,
                title,
                id,
            }) => {
                let url = here(&dest_url).unwrap_or_default();
                out.push(Event::Start(Tag::Image {
                    link_type,
                    dest_url: CowStr::from(url),
                    title,
                    id,
                }));
            }
            other => out.push(other),
        }
    }
    let mut html = String::with_capacity(text.len() * 3 / 2);
    pulldown_cmark::html::push_html(&mut html, out.into_iter());
    html
}

/// Where a guide's link goes on this server: the web's and in-page links as they are,
/// another guide's or a picture's page here; `None` for a file of the repository.
fn here(url: &str) -> Option<String> {
    if url.starts_with("http://") || url.starts_with("https://") || url.starts_with('#') {
        return Some(url.to_string());
    }
    let (file, fragment) = url.split_once('#').map_or((url, ""), |(f, a)| (f, a));
    let hash = if fragment.is_empty() {
        String::new()
    } else {
        format!("#{fragment}")
    };
    if let Some(name) = file.strip_suffix(".md")
        && GUIDES.iter().any(|g| g.name == name)
    {
        return Some(format!(
            "{}{hash}",
            pai_api::routes::DOCS_PAGE.with(&[name])
        ));
    }
    if file == "../README.md" {
        return Some(format!("{}{hash}", pai_api::routes::DOCS.template()));
    }
    IMAGES
        .iter()
        .any(|(name, _)| *name == file)
        .then(|| pai_api::routes::DOCS_PAGE.with(&[file]))
}

/// A heading's anchor as GitHub makes it: lower case, letters, digits, `-` and `_`
/// kept, spaces as `-`, the rest dropped. The docs' test checks every link's fragment
/// with it.
pub fn slug(text: &str) -> String {
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// `text` without the method and path it begins with (the handlers' doc comments open
/// with them: "`GET /api/v1/jobs?username=`."), which the row shows already.
fn without_route<'a>(text: &'a str, method: &str) -> &'a str {
    let Some(rest) = text
        .strip_prefix('`')
        .and_then(|r| r.strip_prefix(method))
        .filter(|r| r.starts_with(' '))
    else {
        return text;
    };
    match rest.find('`') {
        Some(end) => rest[end + 1..]
            .trim_start_matches([':', '.', ','])
            .trim_start(),
        None => text,
    }
}

/// `text` as a sentence: its first letter upper case (`the jobs …` → `The jobs …`).
fn sentence(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) if first.is_lowercase() => first.to_uppercase().chain(chars).collect(),
        _ => text.to_string(),
    }
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
                let method = method.to_ascii_uppercase();
                let html = markdown(&sentence(without_route(&text, &method)));
                routes.push(RouteLine {
                    method,
                    path: path.clone(),
                    html,
                });
            }
        }
    }
    DocsPage {
        frame: Frame {
            title: "Docs".to_string(),
            ..Frame::default()
        },
        document: pai_api::routes::OPENAPI.template(),
        routes,
        guides: guide_links(),
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
    fn a_description_does_not_repeat_its_route() {
        assert_eq!(
            without_route(
                "`GET /api/v1/user/{user}/jobs/{job}`, or its changes.",
                "GET"
            ),
            "or its changes."
        );
        assert_eq!(without_route("`GET /api/v1/jobs?username=`.", "GET"), "");
        assert_eq!(
            without_route("`value` of the job.", "GET"),
            "`value` of the job."
        );
        let page = page();
        for route in &page.routes {
            assert!(
                !route
                    .html
                    .contains(&format!("{} {}", route.method, route.path)),
                "{} {}: {}",
                route.method,
                route.path,
                route.html
            );
        }
    }

    #[test]
    fn a_guide_links_to_the_guides_here_and_its_headings_have_anchors() {
        let html = guide_html(
            "## Removing it\n\nSee [the steps](operating.md#removing-it), [using](using.md), [a file](../deploy/x.yaml), [the web](https://example.com) and ![a picture](portal-job.png).\n\n<script>x</script>\n",
        );
        assert!(html.contains(r#"<h2 id="removing-it">"#), "{html}");
        assert!(
            html.contains(r#"href="/docs/operating#removing-it""#),
            "{html}"
        );
        assert!(html.contains(r#"href="/docs/using""#), "{html}");
        assert!(!html.contains("deploy/x.yaml"), "{html}");
        assert!(html.contains("a file"), "{html}");
        assert!(html.contains(r#"href="https://example.com""#), "{html}");
        assert!(html.contains(r#"src="/docs/portal-job.png""#), "{html}");
        assert!(!html.contains("<script>"), "{html}");
        for listed in GUIDES {
            assert!(guide(listed.name).is_some(), "{}", listed.name);
        }
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
