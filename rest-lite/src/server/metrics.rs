//! Prometheus metrics in the text exposition format: requests by method, route and
//! status, with their total duration, and jobs submitted.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::AppState;

/// What a request is counted under: method, route template, status.
type RequestKey = (String, String, u16);

/// Requests answered and seconds spent on them.
#[derive(Default, Clone, Copy)]
struct Tally {
    count: u64,
    seconds: f64,
}

#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<RequestKey, Tally>>,
}

impl Metrics {
    fn record(&self, method: String, route: String, status: u16, seconds: f64) {
        let mut requests = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        let tally = requests.entry((method, route, status)).or_default();
        tally.count += 1;
        tally.seconds += seconds;
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let requests = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::new();
        out.push_str("# HELP rest_lite_http_requests_total HTTP requests answered.\n");
        out.push_str("# TYPE rest_lite_http_requests_total counter\n");
        for ((method, route, status), Tally { count, .. }) in requests.iter() {
            let _ = writeln!(
                out,
                "rest_lite_http_requests_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {count}"
            );
        }
        out.push_str(
            "# HELP rest_lite_http_request_seconds_total Time spent answering HTTP requests.\n",
        );
        out.push_str("# TYPE rest_lite_http_request_seconds_total counter\n");
        for ((method, route, status), Tally { seconds, .. }) in requests.iter() {
            let _ = writeln!(
                out,
                "rest_lite_http_request_seconds_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {seconds:.6}"
            );
        }
        out
    }
}

/// Middleware: counts every request under its route template (never the raw path, so
/// user and job names do not become labels).
pub async fn count(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = request.method().to_string();
    let started = Instant::now();
    let response = next.run(request).await;
    state.metrics.record(
        method,
        route,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}
