//! What the client commands print for people: a job's summary and task table, the job
//! list with task counts, one line per role while a job starts. Pure functions of the
//! API's views, so tests read exactly what a person reads.

use std::fmt::Write;

use pai_api::jobs::JobSummary;
use pai_api::status::{JobState, JobView, TaskView};
use pai_api::time::{age, readable};

/// The cause of the job's failure where its diagnostics do not say it already (once is
/// enough).
pub fn unsaid_cause(status: &pai_api::status::JobStatus) -> Option<&pai_api::status::ExitCause> {
    status.app_exit_cause.as_ref().filter(|cause| {
        !status
            .app_exit_diagnostics
            .as_deref()
            .is_some_and(|d| d.contains(&cause.line))
    })
}

/// Columns padded to their widest cell, two spaces apart; the last one unpadded.
fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ", width = widths[c]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `rest-lite jobs`: newest first, with tasks running of total.
pub fn jobs(list: &[JobSummary], now_ms: i64) -> String {
    if list.is_empty() {
        return "no jobs (submit one with: rest-lite submit JOB.yaml)\n".to_string();
    }
    // The priority class, where any job of the list has one.
    let classes = list.iter().any(|j| j.status.job_priority.is_some());
    let mut header = vec!["NAME", "USER", "STATE", "TASKS", "RETRIES", "AGE"];
    if classes {
        header.insert(3, "PRIORITY");
    }
    let mut rows = vec![header.into_iter().map(String::from).collect::<Vec<_>>()];
    for job in list {
        let mut row = vec![
            job.name.clone(),
            job.status.username.clone(),
            job.status.state.to_string(),
            format!(
                "{}/{}",
                job.status.running_task_number, job.status.total_task_number
            ),
            job.status.retries.to_string(),
            job.status
                .created_time
                .map_or_else(|| "-".to_string(), |t| age(now_ms - t)),
        ];
        if classes {
            row.insert(3, job.status.job_priority.clone().unwrap_or("-".into()));
        }
        rows.push(row);
    }
    table(&rows)
}

/// Why `view`'s job waits, in one line (`None`: it does not wait).
pub fn waiting(view: &JobView, now_ms: i64) -> Option<String> {
    let waiting = view.job_status.waiting.as_ref()?;
    let since = waiting
        .since
        .map(|t| format!(" for {}", age(now_ms - t)))
        .unwrap_or_default();
    // A back-off or a retry delay: the time left, as of this reading.
    let left = waiting
        .until
        .map(|t| format!(", {} left", age((t - now_ms).max(0))))
        .unwrap_or_default();
    Some(format!(
        "waiting{since} ({}{left}): {}",
        waiting.reason, waiting.message
    ))
}

/// What a followed job's changes tell on standard error: why it is held (by the gang
/// scheduler, a queue, this machine's slots), each time the reason changes (a job on its
/// way is not told); and each attempt that ended and is retried, as it happens. A job that
/// keeps restarting (a service whose command exits at once) is told compactly: its first
/// [`RESTARTS_TOLD`] restarts a line each, then a count and the last restart's line at
/// most every [`RESTART_SUMMARY_EVERY`].
#[derive(Default)]
pub struct Notes {
    held: Option<(String, String)>,
    /// The last attempt whose end was seen.
    told: Option<i32>,
    /// Restarts seen, and those not told yet (with the last one's line).
    restarts: u32,
    untold: Option<(u32, String)>,
    /// When the last summary was told.
    summarized: Option<std::time::Instant>,
}

/// Restarts told a line each before they are summed up.
pub const RESTARTS_TOLD: u32 = 3;
/// The least time between two summaries of restarts.
pub const RESTART_SUMMARY_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

impl Notes {
    pub fn see(&mut self, job: &str, view: &JobView) {
        let now = view
            .job_status
            .waiting
            .as_ref()
            .filter(|w| w.is_held())
            .map(|w| (w.reason.clone(), w.message.clone()));
        // A restart's back-off is in the restart's line (or its summary).
        let backing_off = now.as_ref().is_some_and(|(reason, _)| reason == "BackOff");
        if now.is_some()
            && now != self.held
            && !backing_off
            && let Some(line) = waiting(view, jiff::Timestamp::now().as_millisecond())
        {
            tell!("rest-lite: job {job} {line}");
        }
        self.held = now;
        for end in &view.job_status.attempts {
            if end.retried && self.told.is_none_or(|told| end.attempt > told) {
                self.told = Some(end.attempt);
                self.restarts += 1;
                if self.restarts <= RESTARTS_TOLD {
                    tell!("rest-lite: job {job}: {}", end.line());
                    continue;
                }
                let untold = self.untold.as_ref().map_or(0, |(n, _)| *n);
                self.untold = Some((untold + 1, end.line()));
            }
        }
        let due = self
            .summarized
            .is_none_or(|at| at.elapsed() >= RESTART_SUMMARY_EVERY);
        if due {
            self.summary(job);
        }
    }

    /// Tells the restarts not told yet, if any: their count and the last one's line.
    pub fn summary(&mut self, job: &str) {
        if let Some((untold, line)) = self.untold.take() {
            tell!(
                "rest-lite: job {job} restarted {} times ({untold} since the last line); the last: {line}",
                self.restarts
            );
            self.summarized = Some(std::time::Instant::now());
        }
    }
}

/// Each task that left a result or failed to: its name (`worker-0`), the task, and its
/// value or why it could not be sent; in role and index order.
fn task_results(
    view: &JobView,
) -> impl Iterator<Item = (String, &TaskView, Result<&serde_json::Value, &str>)> {
    view.task_roles.iter().flat_map(|(role, detail)| {
        detail.task_statuses.iter().filter_map(move |task| {
            let reported = match (&task.result, &task.result_error) {
                (Some(value), _) => Ok(value),
                (None, Some(why)) => Err(why.as_str()),
                (None, None) => return None,
            };
            Some((format!("{role}-{}", task.task_index), task, reported))
        })
    })
}

/// Each task's result by its name (`worker-0`), in role and index order: its value, or
/// `{"error": why}` where it could not be sent.
pub fn results_of(view: &JobView) -> serde_json::Map<String, serde_json::Value> {
    task_results(view)
        .map(|(name, _, reported)| {
            let value = match reported {
                Ok(value) => value.clone(),
                Err(why) => serde_json::json!({ "error": why }),
            };
            (name, value)
        })
        .collect()
}

/// `rest-lite results`: a line per task that left a result (or failed to).
pub fn results(view: &JobView) -> String {
    let mut rows = vec![["TASK", "STATE", "RESULT"].map(String::from).to_vec()];
    for (name, task, reported) in task_results(view) {
        let shown = match reported {
            Ok(value) => value.to_string(),
            Err(why) => format!("(not sent: {why})"),
        };
        rows.push(vec![name, task.task_state.to_string(), shown]);
    }
    if rows.len() == 1 {
        return format!(
            "job {} has no results yet: a task leaves one by writing JSON to $PAI_RESULT_FILE before it ends\n",
            view.name
        );
    }
    table(&rows)
}

/// `rest-lite status`: the job in a few lines, then a line per task.
// Long: the status text top to bottom, as a person reads it.
pub fn status(view: &JobView, now_ms: i64) -> String {
    let s = &view.job_status;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "job {} of {}: {}, {} of {} tasks running, {} {}",
        view.name,
        s.username,
        s.state,
        s.running_task_number,
        s.total_task_number,
        s.retries,
        if s.retries == 1 { "retry" } else { "retries" }
    );
    if let Some(class) = &s.job_priority {
        let _ = writeln!(out, "priority class {class}");
    }
    if let Some(created) = s.created_time {
        let _ = write!(
            out,
            "submitted {} ({} ago)",
            readable(created),
            age(now_ms - created)
        );
        if let Some(completed) = s.completed_time {
            let _ = write!(out, ", completed {}", readable(completed));
        }
        out.push('\n');
    }
    if let Some(line) = waiting(view, now_ms) {
        out.push_str(&line);
        out.push('\n');
    }
    if s.execution_type == pai_api::jobs::Execution::Stop && !s.state.is_final() {
        out.push_str("stopping: its tasks got TERM and are killed after their grace period\n");
    }
    if s.state.is_final()
        && let Some(code) = s.app_exit_code
    {
        let _ = write!(out, "exit code {code}");
        if let (Some(role), Some(index)) = (
            &s.app_exit_trigger_task_role_name,
            s.app_exit_trigger_task_index,
        ) {
            let _ = write!(out, " (task {role}-{index})");
        }
        out.push('\n');
    }
    if let Some(diagnostics) = s.app_exit_diagnostics.as_deref().filter(|d| !d.is_empty()) {
        let _ = writeln!(out, "diagnostics: {diagnostics}");
    }
    if let Some(cause) = unsaid_cause(s) {
        let _ = writeln!(out, "cause ({}): {}", cause.pattern, cause.line);
    }
    // The attempts before this one (the last one's end is said above).
    for end in s.attempts.iter().filter(|a| a.retried) {
        let _ = writeln!(out, "{}", end.line());
    }
    out.push('\n');
    // A column of the GPUs each task holds, where the backend says (this machine).
    let with_gpus = view
        .task_roles
        .values()
        .flat_map(|d| &d.task_statuses)
        .any(|t| !t.gpus.is_empty());
    let mut header = vec!["TASK", "STATE", "ADDRESS", "PORTS", "EXIT", "RETRIES"];
    if with_gpus {
        header.insert(4, "GPUS");
    }
    let mut rows = vec![header.into_iter().map(String::from).collect::<Vec<_>>()];
    // What the platform's codes in the table mean, once each, under it.
    let mut meanings: std::collections::BTreeMap<i32, String> = Default::default();
    let mut decided = false;
    for (role, detail) in &view.task_roles {
        for task in &detail.task_statuses {
            if let (Some(code), Some(meaning)) =
                (task.container_exit_code, &task.container_exit_meaning)
                && code != 0
                && pai_contract::exit::platform_meaning(code).is_some()
            {
                meanings.insert(code, meaning.clone());
            }
            decided |= task.decided_outcome;
            let mut row = vec![
                format!(
                    "{role}-{}{}",
                    task.task_index,
                    if task.decided_outcome { "*" } else { "" }
                ),
                task.task_state.to_string(),
                task.container_ip.clone().unwrap_or_else(|| "-".to_string()),
                ports_cell(&task.container_ports),
                task.container_exit_code
                    .map_or_else(|| "-".to_string(), |c| c.to_string()),
                task.retries.to_string(),
            ];
            if with_gpus {
                let gpus: Vec<String> = task.gpus.iter().map(|g| g.index.to_string()).collect();
                row.insert(
                    4,
                    if gpus.is_empty() {
                        "-".to_string()
                    } else {
                        gpus.join(",")
                    },
                );
            }
            rows.push(row);
        }
    }
    out.push_str(&table(&rows));
    if decided {
        out.push_str("* its end decided the job's outcome\n");
    }
    for (code, meaning) in meanings {
        let _ = writeln!(out, "exit {code}: {meaning}");
    }
    out
}

/// Where each role's tasks are, for the line shown while a job starts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoleProgress {
    pub role: String,
    pub total: usize,
    pub waiting: usize,
    pub running: usize,
    pub ended: usize,
}

impl RoleProgress {
    /// `worker  2/4 running, 2 waiting`.
    pub fn line(&self, width: usize) -> String {
        let mut line = format!(
            "{:<width$}  {}/{} running",
            self.role, self.running, self.total
        );
        if self.waiting > 0 {
            let _ = write!(line, ", {} waiting", self.waiting);
        }
        if self.ended > 0 {
            let _ = write!(line, ", {} ended", self.ended);
        }
        line
    }
}

/// Each role's progress in `view`.
pub fn progress(view: &JobView) -> Vec<RoleProgress> {
    view.task_roles
        .iter()
        .map(|(role, detail)| {
            let mut p = RoleProgress {
                role: role.clone(),
                total: detail.task_statuses.len(),
                ..RoleProgress::default()
            };
            for task in &detail.task_statuses {
                match task.task_state {
                    JobState::Waiting => p.waiting += 1,
                    JobState::Running => p.running += 1,
                    _ => p.ended += 1,
                }
            }
            p
        })
        .collect()
}

/// A task's ports as the table shows them, `-` for none (a task never placed).
fn ports_cell(ports: &std::collections::BTreeMap<String, String>) -> String {
    if ports.is_empty() {
        return "-".to_string();
    }
    ports
        .iter()
        .map(|(label, ports)| format!("{label}:{ports}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `word` as one word of a POSIX shell: as it is when it has nothing special, else
/// single-quoted.
pub(super) fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=@:,+%".contains(&b));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_back_off_counts_down_between_two_readings() {
        let framework: pai_contract::Framework = serde_json::from_value(serde_json::json!({
            "apiVersion": "frameworkcontroller.microsoft.com/v1", "kind": "Framework",
            "metadata": {"name": "f", "creationTimestamp": "2026-11-25T10:00:00Z"},
            "spec": {"executionType": "Start", "taskRoles": [{"name": "worker", "taskNumber": 1,
                "task": {"pod": {"spec": {"containers": [{"name": "main", "image": "x"}]}}}}]},
            "status": {"state": "AttemptCompleted", "attemptStatus": {"id": 0,
                "completionTime": "2026-11-25T10:00:00Z",
                "completionStatus": {"code": 3, "phrase": "x"}, "taskRoleStatuses": []},
                "retryPolicyStatus": {"totalRetriedCount": 0, "accountableRetriedCount": 0,
                    "retryDelaySec": 160}}
        }))
        .expect("framework");
        let view = pai_api::status::job_view(&framework, "");
        let ended = "2026-11-25T10:00:00Z"
            .parse::<jiff::Timestamp>()
            .expect("time")
            .as_millisecond();
        let first = waiting(&view, ended + 10_000).expect("waits");
        let later = waiting(&view, ended + 100_000).expect("waits");
        assert!(first.contains("(BackOff, 2m 30s left)"), "{first}");
        assert!(later.contains("(BackOff, 1m 0s left)"), "{later}");
        assert!(
            first.contains("attempt 0 ended (the user command exited with code 3)"),
            "said once: {first}"
        );
    }

    #[test]
    fn columns_line_up_whatever_the_cell_widths() {
        let rows = vec![
            vec!["A".to_string(), "BB".to_string(), "C".to_string()],
            vec!["long cell".to_string(), "x".to_string(), "last".to_string()],
        ];
        assert_eq!(table(&rows), "A          BB  C\nlong cell  x   last\n");
    }

    #[test]
    fn a_role_line_says_only_what_is_there() {
        let p = RoleProgress {
            role: "ps".into(),
            total: 4,
            waiting: 1,
            running: 3,
            ended: 0,
        };
        assert_eq!(p.line(6), "ps      3/4 running, 1 waiting");
    }

    #[test]
    fn status_marks_the_deciding_task_and_says_what_the_platforms_codes_mean() {
        let framework: pai_contract::Framework = serde_json::from_value(serde_json::json!({
            "apiVersion": "frameworkcontroller.microsoft.com/v1", "kind": "Framework",
            "metadata": {"name": "f", "creationTimestamp": "2026-11-25T10:00:00Z"},
            "spec": {"executionType": "Start", "taskRoles": [{"name": "worker", "taskNumber": 2,
                "task": {"pod": {"spec": {"containers": [{"name": "main", "image": "x"}]}}}}]},
            "status": {"state": "Completed", "attemptStatus": {"id": 0,
                "completionStatus": {"code": 3, "phrase": "x", "diagnostics": "exit code 3",
                    "trigger": {"taskRoleName": "worker", "taskIndex": 1}},
                "taskRoleStatuses": [{"name": "worker", "taskStatuses": [
                    {"index": 0, "state": "Completed", "attemptStatus": {"id": 0,
                        "completionStatus": {"code": -220, "phrase": "FrameworkAttemptCompletion"}}},
                    {"index": 1, "state": "Completed", "attemptStatus": {"id": 0,
                        "completionStatus": {"code": 3, "phrase": "ContainerUnrecognizedFailed"}}}]}]}}
        }))
        .expect("a Framework");
        let view = pai_api::status::job_view(&framework, "/j");
        let text = status(&view, 1_795_600_800_000);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("worker-1* ") && l.contains("FAILED")),
            "{text}"
        );
        assert!(lines.iter().any(|l| l.starts_with("worker-0 ")), "{text}");
        // Neither task was placed: no address, no ports, each a `-` of its own.
        let worker_0: Vec<&str> = lines
            .iter()
            .find(|l| l.starts_with("worker-0 "))
            .map(|l| l.split_whitespace().collect())
            .unwrap_or_default();
        assert_eq!(worker_0.get(2..4), Some(&["-", "-"][..]), "{text}");
        assert_eq!(worker_0.len(), 6, "{text}");
        assert!(
            text.contains("* its end decided the job's outcome\n"),
            "{text}"
        );
        assert!(
            text.contains("exit -220: stopped by the platform: the job's attempt ended (another task decided it)\n"),
            "{text}"
        );
        assert!(
            !text.contains("exit 3:"),
            "the user's own code needs no words: {text}"
        );
    }

    #[test]
    fn status_says_why_a_job_waits_and_for_how_long() {
        let framework: pai_contract::Framework = serde_json::from_value(serde_json::json!({
            "apiVersion": "frameworkcontroller.microsoft.com/v1", "kind": "Framework",
            "metadata": {"name": "f", "creationTimestamp": "2026-11-25T10:00:00Z"},
            "spec": {"executionType": "Start", "taskRoles": []}
        }))
        .expect("a Framework");
        let held = pai_api::waiting::Waiting {
            reason: "Queued".into(),
            message: "this machine runs at most 3 tasks at once".into(),
            since: Some(1_795_600_800_000),
            until: None,
        };
        let view = pai_api::status::job_view_held(&framework, "/j", Some(&held));
        let text = status(&view, 1_795_600_800_000 + 185_000);
        assert!(
            text.contains(
                "waiting for 3m 5s (Queued): this machine runs at most 3 tasks at once\n"
            ),
            "{text}"
        );
    }
}
