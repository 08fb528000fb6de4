//! Every route of the API, written once: the router mounts these templates, the OpenAPI
//! document names them (`#[utoipa::path(path = …)]`), and the client and the views fill
//! them in with [`Route::with`].

/// A route's path template, with `{name}` where a path segment goes (axum's and
/// OpenAPI's syntax alike).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route(&'static str);

impl Route {
    /// The template, as the router and the OpenAPI document take it.
    pub const fn template(self) -> &'static str {
        self.0
    }

    /// The path with `values` in its `{…}` segments, in order, each percent-encoded. A
    /// segment with no value left stays as it is written, so a wrong count shows in the
    /// path instead of panicking; the tests below fill every route.
    pub fn with(self, values: &[&str]) -> String {
        let mut out = String::with_capacity(self.0.len() + 16);
        let mut values = values.iter();
        let mut rest = self.0;
        while let Some(open) = rest.find('{') {
            let Some(close) = rest[open..].find('}').map(|c| open + c) else {
                break;
            };
            out.push_str(&rest[..open]);
            match values.next() {
                Some(value) => out.push_str(&crate::path::segment(value)),
                None => out.push_str(&rest[open..=close]),
            }
            rest = &rest[close + 1..];
        }
        out.push_str(rest);
        out
    }

    /// The number of `{…}` segments.
    pub fn segments(self) -> usize {
        self.0.matches('{').count()
    }
}

/// OpenAPI's document of the whole API.
pub const OPENAPI: Route = Route("/api/v1/openapi.json");
pub const HEALTHZ: Route = Route("/healthz");
pub const READYZ: Route = Route("/readyz");
pub const METRICS: Route = Route("/metrics");

/// v1: every job the caller may see.
pub const JOBS: Route = Route("/api/v1/jobs");
pub const WHOAMI: Route = Route("/api/v1/whoami");
/// v1: a user's jobs (`{user}`); POST submits one.
pub const USER_JOBS: Route = Route("/api/v1/user/{user}/jobs");
/// v1: one job (`{user}`, `{job}`).
pub const JOB: Route = Route("/api/v1/user/{user}/jobs/{job}");
pub const JOB_CONFIG: Route = Route("/api/v1/user/{user}/jobs/{job}/config");
pub const JOB_SSH: Route = Route("/api/v1/user/{user}/jobs/{job}/ssh");
pub const JOB_SSH_KEY: Route = Route("/api/v1/user/{user}/jobs/{job}/ssh/key");
pub const JOB_LOGS: Route = Route("/api/v1/user/{user}/jobs/{job}/logs");
pub const JOB_EXECUTION: Route = Route("/api/v1/user/{user}/jobs/{job}/executionType");

/// OpenPAI's v2 REST API, as its SDK calls it (`{job_id}` is `user~job`).
pub const V2_JOBS: Route = Route("/api/v2/jobs");
pub const V2_JOB: Route = Route("/api/v2/jobs/{job_id}");
pub const V2_JOB_CONFIG: Route = Route("/api/v2/jobs/{job_id}/config");
pub const V2_JOB_TAG: Route = Route("/api/v2/jobs/{job_id}/tag");
pub const V2_JOB_EXECUTION: Route = Route("/api/v2/jobs/{job_id}/executionType");
pub const V2_ATTEMPT: Route = Route("/api/v2/jobs/{job_id}/attempts/{attempt_id}");
pub const V2_TASK: Route = Route(
    "/api/v2/jobs/{job_id}/attempts/{attempt_id}/taskRoles/{role}/taskIndex/{index}/attempts",
);
pub const V2_STORAGES: Route = Route("/api/v2/storages");
pub const V2_STORAGE: Route = Route("/api/v2/storages/{name}");
pub const V2_TASK_LOGS: Route = Route(
    "/api/v2/jobs/{job_id}/attempts/{attempt_id}/taskRoles/{role}/taskIndex/{index}/attempts/{task_attempt_id}/logs",
);

/// Every route of the API above, for checks that look at them all.
pub const ALL: &[Route] = &[
    OPENAPI,
    HEALTHZ,
    READYZ,
    METRICS,
    JOBS,
    WHOAMI,
    USER_JOBS,
    JOB,
    JOB_CONFIG,
    JOB_SSH,
    JOB_SSH_KEY,
    JOB_LOGS,
    JOB_EXECUTION,
    V2_JOBS,
    V2_JOB,
    V2_JOB_CONFIG,
    V2_JOB_TAG,
    V2_JOB_EXECUTION,
    V2_ATTEMPT,
    V2_TASK,
    V2_TASK_LOGS,
    V2_STORAGES,
    V2_STORAGE,
];

/// The pages (`/ui/…`, `/docs`): a browser's side of the same API.
pub const HOME: Route = Route("/");
pub const UI: Route = Route("/ui");
pub const UI_JOBS: Route = Route("/ui/jobs");
pub const UI_JOB: Route = Route("/ui/jobs/{user}/{job}");
pub const UI_TASK_LOG: Route = Route("/ui/jobs/{user}/{job}/logs/{role}/{index}");
/// `{action}`: `stop` or `delete`.
pub const UI_JOB_ACTION: Route = Route("/ui/jobs/{user}/{job}/{action}");
pub const UI_SUBMIT: Route = Route("/ui/submit");
pub const UI_SIGN_IN: Route = Route("/ui/sign-in");
pub const UI_SIGN_OUT: Route = Route("/ui/sign-out");
pub const DOCS: Route = Route("/docs");
/// A guide of `docs/` (`using`, `reference`, `operating`, `internals`), or a picture one
/// shows.
pub const DOCS_PAGE: Route = Route("/docs/{page}");

/// The pages' routes by the names the templates call them (`{{route "jobs"}}`).
pub const PAGES: &[(&str, Route)] = &[
    ("home", HOME),
    ("ui", UI),
    ("jobs", UI_JOBS),
    ("job", UI_JOB),
    ("task_log", UI_TASK_LOG),
    ("job_action", UI_JOB_ACTION),
    ("submit", UI_SUBMIT),
    ("sign_in", UI_SIGN_IN),
    ("sign_out", UI_SIGN_OUT),
    ("docs", DOCS),
    ("docs_page", DOCS_PAGE),
];

/// A page's route by its name in [`PAGES`].
pub fn page(name: &str) -> Option<Route> {
    PAGES.iter().find(|(n, _)| *n == name).map(|(_, r)| *r)
}

/// Whether `path` is one of the pages' (a `next=` after sign-in may go there, and
/// nowhere else).
pub fn is_page(path: &str) -> bool {
    let ui = UI.template();
    let docs = DOCS.template();
    path.strip_prefix(ui)
        .is_some_and(|rest| rest.starts_with('/'))
        || path
            .strip_prefix(docs)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['?', '#', '/']))
}

/// The versioned API behind the token (`/api/v1/…`, `/api/v2/…`).
pub fn is_api(path: &str) -> bool {
    path.starts_with("/api/v1/") || path.starts_with("/api/v2/")
}

/// A v2 route.
pub fn is_v2(path: &str) -> bool {
    path.starts_with("/api/v2/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_segment_is_filled_and_encoded() {
        assert_eq!(
            JOB.with(&["alice", "a b/c"]),
            "/api/v1/user/alice/jobs/a%20b%2Fc"
        );
        assert_eq!(JOBS.with(&[]), "/api/v1/jobs");
        assert_eq!(
            V2_TASK_LOGS.with(&["a~j", "0", "worker", "1", "2"]),
            "/api/v2/jobs/a~j/attempts/0/taskRoles/worker/taskIndex/1/attempts/2/logs"
        );
        for route in ALL {
            let values = vec!["x"; route.segments()];
            assert!(!route.with(&values).contains('{'), "{route:?}");
        }
    }

    #[test]
    fn a_missing_value_leaves_its_segment_visible() {
        assert_eq!(JOB.with(&["alice"]), "/api/v1/user/alice/jobs/{job}");
    }

    #[test]
    fn pages_are_only_ours() {
        for ours in [
            "/ui/jobs",
            "/ui/jobs/alice/j?role=w",
            "/docs",
            "/docs#logs",
            "/docs?x",
        ] {
            assert!(is_page(ours), "{ours}");
        }
        for elsewhere in ["/docsevil", "/ui", "/uix/jobs", "/api/v1/jobs", "//evil"] {
            assert!(!is_page(elsewhere), "{elsewhere}");
        }
        assert_eq!(page("job"), Some(UI_JOB));
        assert_eq!(page("nope"), None);
    }

    #[test]
    fn no_route_is_written_twice() {
        let all = ALL.iter().chain(PAGES.iter().map(|(_, r)| r));
        let mut templates: Vec<_> = all.clone().map(|r| r.template()).collect();
        templates.sort_unstable();
        templates.dedup();
        assert_eq!(templates.len(), all.count());
    }
}
