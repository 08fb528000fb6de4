//! Prometheus metrics in the text exposition format: requests by method, route and
//! status, with their total duration; jobs and tasks by state (as they are when asked);
//! on this machine, task start and barrier times.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

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
pub async fn count(State(metrics): State<Arc<Metrics>>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = request.method().to_string();
    let started = Instant::now();
    let response = next.run(request).await;
    metrics.record(
        method,
        route,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}

/// `rest_lite_jobs{state}` and `rest_lite_tasks{state}`: how many of each there are now,
/// every state listed (0 included) so that a dashboard's series never vanish.
pub fn render_jobs(rows: &[std::sync::Arc<pai_api::jobs::JobRow>]) -> String {
    use pai_api::status::JobState;
    const STATES: [JobState; 6] = JobState::ALL;
    let mut jobs = [0u64; STATES.len()];
    let mut tasks = [0u64; STATES.len()];
    let slot = |state: JobState| STATES.iter().position(|s| *s == state).unwrap_or(5);
    for row in rows {
        jobs[slot(row.summary.status.state)] += 1;
        for (state, count) in &row.task_states {
            tasks[slot(*state)] += u64::from(*count);
        }
    }
    let mut out = String::new();
    for (name, help, counts) in [
        ("rest_lite_jobs", "Jobs by state, now.", jobs),
        (
            "rest_lite_tasks",
            "Tasks of every job by state, now.",
            tasks,
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for (state, count) in STATES.iter().zip(counts) {
            let _ = writeln!(out, "{name}{{state=\"{state}\"}} {count}");
        }
    }
    out
}
