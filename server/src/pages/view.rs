//! What the templates show, computed from the API's own views: times as text, counts,
//! the state as a word. Nothing here reads a request or the backend.

use serde::Serialize;

use pai_api::jobs::Execution;
use pai_api::jobs::JobSummary;
use pai_api::routes;
use pai_api::status::{JobState, JobView, TaskView};
use pai_api::time::{age, iso, readable};
use pai_contract::exit;

/// Seconds between refreshes of a page that shows something still running.
pub const REFRESH_SECONDS: u32 = 5;

/// What every page's layout needs.
#[derive(Serialize, Default)]
pub struct Frame {
    pub title: String,
    /// Seconds between refreshes; none once nothing changes.
    pub refresh: Option<u32>,
    /// The signed-in user's name (with a token file only).
    pub signed_in: Option<String>,
}

#[derive(Serialize)]
pub struct JobsPage {
    #[serde(flatten)]
    pub frame: Frame,
    /// Whose jobs (none: every user's).
    pub user: Option<String>,
    pub rows: Vec<JobRow>,
    /// The filters as chosen, for the form.
    pub query: ListQuery,
    /// The states to filter by, each marked when chosen.
    pub states: Vec<Choice>,
    /// The users whose jobs are listed (an admin's list), each marked when chosen.
    pub users: Vec<Choice>,
    /// The sort orders, each marked when chosen.
    pub sorts: Vec<Choice>,
    /// Jobs before the filters.
    pub total: usize,
    /// Jobs after the filters.
    pub matching: usize,
    /// The rows shown, 1-based, as `first–last`.
    pub shown: String,
    /// The page before (newer, in the default order) and after, with the same filters.
    pub previous: Option<String>,
    pub next: Option<String>,
}

/// Rows on one page of the job list.
pub const PAGE_ROWS: usize = 50;

#[derive(Serialize)]
pub struct Choice {
    pub value: String,
    pub selected: bool,
}

#[derive(Serialize)]
pub struct JobRow {
    pub user: String,
    pub job: String,
    pub url: String,
    pub state: String,
    /// Its priority class, if it has one.
    pub priority: String,
    pub running: u32,
    pub total: u32,
    pub retries: i32,
    pub age: String,
    pub created_iso: String,
    /// From its creation to its end (or now).
    pub duration: String,
}

/// The job list's filters, search and order (`?state=FAILED&user=alice&q=bert&sort=duration`).
#[derive(Clone, Debug, Default, serde::Deserialize, Serialize)]
pub struct ListQuery {
    /// Only jobs in this state (`RUNNING`, …); empty or absent: all.
    #[serde(default, deserialize_with = "state_or_all")]
    pub state: Option<JobState>,
    /// Only this user's jobs; empty: all the caller may see.
    #[serde(default)]
    pub user: String,
    /// Only jobs whose name contains this (any case).
    #[serde(default)]
    pub q: String,
    /// `created` (newest first, the default), `name`, `state`, `user`, `duration`
    /// (longest first).
    #[serde(default)]
    pub sort: String,
    /// The page, from 1 ([`PAGE_ROWS`] rows each).
    #[serde(default, deserialize_with = "page_or_first")]
    pub page: usize,
}

/// A page number that is none, empty or not a number as the first page.
fn page_or_first<'de, D: serde::Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    use serde::Deserialize;
    let text = Option::<String>::deserialize(d)?;
    Ok(text.and_then(|t| t.parse().ok()).unwrap_or(1).max(1))
}

impl ListQuery {
    /// The list's URL with these filters at `page`.
    fn at_page(&self, page: usize) -> String {
        let mut url = pai_api::routes::UI_JOBS.template().to_string();
        let mut pairs: Vec<(&str, String)> = Vec::new();
        if let Some(state) = self.state {
            pairs.push(("state", state.to_string()));
        }
        for (key, value) in [("user", &self.user), ("q", &self.q), ("sort", &self.sort)] {
            if !value.is_empty() {
                pairs.push((key, value.clone()));
            }
        }
        pairs.push(("page", page.to_string()));
        for (i, (key, value)) in pairs.iter().enumerate() {
            url.push(if i == 0 { '?' } else { '&' });
            url.push_str(key);
            url.push('=');
            url.push_str(&crate::routes::encode(value));
        }
        url
    }
}

/// The form's "All states" (`state=`) as no filter, any other value as a state.
fn state_or_all<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<JobState>, D::Error> {
    use serde::Deserialize;
    use serde::de::IntoDeserializer;
    let text = String::deserialize(d)?;
    if text.is_empty() {
        return Ok(None);
    }
    JobState::deserialize(text.into_deserializer()).map(Some)
}

const SORTS: [&str; 5] = ["created", "name", "state", "user", "duration"];

/// How long a job ran: from its creation to its end, or to `now_ms` while it runs.
fn duration_ms(status: &pai_api::status::JobStatus, now_ms: i64) -> Option<i64> {
    let created = status.created_time?;
    let end = if status.state.is_final() {
        status.completed_time?
    } else {
        now_ms
    };
    Some((end - created).max(0))
}

/// One row of the job list.
fn job_row(job: &JobSummary, now_ms: i64) -> JobRow {
    JobRow {
        user: job.status.username.clone(),
        job: job.name.clone(),
        url: job_url(&job.status.username, &job.name),
        state: job.status.state.to_string(),
        priority: job.status.job_priority.clone().unwrap_or_default(),
        running: job.status.running_task_number,
        total: job.status.total_task_number,
        retries: job.status.retries,
        age: job
            .status
            .created_time
            .map_or_else(String::new, |t| format!("{} ago", age(now_ms - t))),
        created_iso: job.status.created_time.map_or_else(String::new, iso),
        duration: duration_ms(&job.status, now_ms).map_or_else(String::new, age),
    }
}

/// The job list: `jobs` (newest first, as the API lists them) filtered, searched and
/// sorted as `query` asks.
pub fn jobs_page(
    jobs: &[&JobSummary],
    user: Option<String>,
    now_ms: i64,
    query: &ListQuery,
) -> JobsPage {
    let needle = query.q.trim().to_lowercase();
    let mut picked: Vec<&JobSummary> = jobs
        .iter()
        .copied()
        .filter(|j| query.state.is_none_or(|s| j.status.state == s))
        .filter(|j| query.user.is_empty() || j.status.username == query.user)
        .filter(|j| needle.is_empty() || j.name.to_lowercase().contains(&needle))
        .collect();
    match query.sort.as_str() {
        "name" => picked.sort_by(|a, b| a.name.cmp(&b.name)),
        "state" => picked.sort_by_key(|j| j.status.state.as_str()),
        "user" => picked.sort_by(|a, b| a.status.username.cmp(&b.status.username)),
        "duration" => {
            picked.sort_by_key(|j| std::cmp::Reverse(duration_ms(&j.status, now_ms)));
        }
        _ => {}
    }
    let matching = picked.len();
    let pages = matching.div_ceil(PAGE_ROWS).max(1);
    let page = query.page.clamp(1, pages);
    let first = (page - 1) * PAGE_ROWS;
    let rows: Vec<JobRow> = picked
        .iter()
        .skip(first)
        .take(PAGE_ROWS)
        .map(|job| job_row(job, now_ms))
        .collect();
    let running = jobs.iter().any(|j| !j.status.state.is_final());
    let mut users: Vec<&str> = jobs.iter().map(|j| j.status.username.as_str()).collect();
    users.sort_unstable();
    users.dedup();
    let choice = |value: &str, chosen: &str| Choice {
        value: value.to_string(),
        selected: value == chosen,
    };
    JobsPage {
        frame: Frame {
            title: "Jobs".to_string(),
            refresh: running.then_some(REFRESH_SECONDS),
            signed_in: None,
        },
        states: JobState::ALL
            .iter()
            .map(|s| Choice {
                value: s.to_string(),
                selected: query.state == Some(*s),
            })
            .collect(),
        users: if user.is_none() {
            users.iter().map(|u| choice(u, &query.user)).collect()
        } else {
            Vec::new()
        },
        sorts: SORTS.iter().map(|s| choice(s, &query.sort)).collect(),
        total: jobs.len(),
        matching,
        shown: format!("{}–{}", first + 1, first + rows.len()),
        previous: (page > 1).then(|| query.at_page(page - 1)),
        next: (page < pages).then(|| query.at_page(page + 1)),
        query: query.clone(),
        user,
        rows,
    }
}

/// A job's page.
pub fn job_url(user: &str, job: &str) -> String {
    routes::UI_JOB.with(&[user, job])
}

#[derive(Serialize)]
pub struct JobPage {
    #[serde(flatten)]
    pub frame: Frame,
    pub user: String,
    pub job: String,
    pub state: String,
    pub sub_state: String,
    /// Why it waits, for how long: `Unschedulable: 4 of 6 pods …`.
    pub waiting: Option<String>,
    pub waiting_for: Option<String>,
    pub stopping: bool,
    pub retries: i32,
    pub one_retry: bool,
    /// Its priority class, if it has one.
    pub priority: Option<String>,
    pub running: u32,
    pub total: u32,
    /// `1 role`, `3 roles`.
    pub role_count: String,
    pub created: String,
    pub created_iso: String,
    pub age: String,
    pub completed: Option<String>,
    pub exit_code_known: bool,
    pub exit_code: Option<i32>,
    pub trigger: Option<String>,
    pub diagnostics: Option<String>,
    /// How each attempt ended, a line each, oldest first.
    pub attempts: Vec<String>,
    pub roles: Vec<RoleSection>,
    pub conditions: Vec<ConditionLine>,
    pub tails_shown: usize,
    pub tails_omitted: bool,
    pub first_role: String,
    /// What the printed commands need: ` --server URL` unless the default, ` -u USER`
    /// unless the viewer's own job.
    pub flags: String,
    /// Why the job failed, as its output said (shown once: the diagnostics are left out
    /// where they say the same).
    pub cause: Option<String>,
    pub cause_pattern: Option<String>,
    /// What the job's state allows: stop it (it has not ended), follow its output and
    /// log in to its tasks (it runs).
    pub can_stop: bool,
    pub runs: bool,
    pub ended: bool,
    /// Each role's resources per task, as submitted.
    pub resources: Vec<RoleResources>,
    /// The spec as submitted.
    pub spec: Option<String>,
    /// `user/job`, for the clone link.
    pub clone: String,
}

/// A role's tasks and what each asks for.
#[derive(Serialize)]
pub struct RoleResources {
    pub name: String,
    pub tasks: u32,
    pub cpu: String,
    pub memory: String,
    pub gpu: u32,
    pub image: String,
    /// The team storages its tasks mount: `team at /mnt/team (read-only, alice's own)`.
    pub storages: String,
}

/// The team storages `main` mounts, as the job page says them.
fn storages_of(role: &pai_contract::framework::TaskRoleSpec) -> String {
    let volumes = role
        .task
        .pod
        .spec
        .as_ref()
        .and_then(|p| p.volumes.as_deref())
        .unwrap_or_default();
    role.main_container()
        .and_then(|c| c.volume_mounts.as_deref())
        .unwrap_or_default()
        .iter()
        .filter_map(|m| {
            let claim = volumes
                .iter()
                .find(|v| v.name == m.name)?
                .persistent_volume_claim
                .as_ref()?;
            let mut notes = Vec::new();
            if m.read_only == Some(true) || claim.read_only == Some(true) {
                notes.push("read-only".to_string());
            }
            if let Some(sub) = m.sub_path.as_deref().filter(|s| !s.is_empty()) {
                notes.push(format!("{sub}'s own"));
            }
            let notes = if notes.is_empty() {
                String::new()
            } else {
                format!(" ({})", notes.join(", "))
            };
            Some(format!("{} at {}{notes}", claim.claim_name, m.mount_path))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Each role's resources, from the Framework's pod templates.
pub fn resources(framework: &pai_contract::Framework) -> Vec<RoleResources> {
    framework
        .spec
        .task_roles
        .iter()
        .map(|role| {
            let main = role.main_container();
            let request = |name: &str| {
                main.and_then(|c| c.resources.as_ref())
                    .and_then(|r| r.requests.as_ref().or(r.limits.as_ref()))
                    .and_then(|r| r.get(name))
                    .map_or_else(|| "—".to_string(), |q| q.0.clone())
            };
            RoleResources {
                name: role.pai_name().to_string(),
                tasks: role.tasks(),
                cpu: request("cpu"),
                memory: request("memory"),
                gpu: role.gpu_count(),
                image: main.and_then(|c| c.image.clone()).unwrap_or_default(),
                storages: storages_of(role),
            }
        })
        .collect()
}

#[derive(Serialize)]
pub struct RoleSection {
    pub name: String,
    pub running: usize,
    pub total: usize,
    pub tasks: Vec<TaskRow>,
    /// The role's tasks by state, when not every task is shown: `4875 RUNNING, 3 FAILED`.
    pub counts: Option<String>,
    /// Which tasks are shown when not all are: `failed first, then by index` or `100–199`.
    pub shown: Option<String>,
    /// Links to the role's other tasks (`?role=worker&from=100`).
    pub previous: Option<String>,
    pub next: Option<String>,
}

/// Rows of a role shown on one page: a 10,000-task job's page stays small.
pub const TASKS_PER_PAGE: usize = 100;

/// Which of a role's tasks a page shows.
#[derive(Clone, Debug, Default, serde::Deserialize)]
pub struct TaskPage {
    /// Only this role's tasks, by index from `from`.
    pub role: Option<String>,
    #[serde(default)]
    pub from: usize,
}

#[derive(Serialize)]
pub struct TaskRow {
    pub id: String,
    pub state: String,
    /// Links to its ports other than ssh (`http://10.0.0.5:8080/`, labelled), where it
    /// has an address.
    pub links: Vec<PortLink>,
    /// What the platform's exit code means (none for the user command's own code).
    pub exit_meaning: Option<String>,
    /// Whether this task's end decided the job's outcome.
    pub decided: bool,
    pub ip: Option<String>,
    pub ports: String,
    /// The GPUs it holds ("GPU 0 GPU-…"), where the backend says.
    pub gpus: String,
    pub exit_code_known: bool,
    pub exit_code: Option<i32>,
    pub retries: i32,
    pub log_url: String,
    /// Its result (compact JSON), or why it could not be sent.
    pub result: Option<String>,
    pub result_error: Option<String>,
    /// The last lines of its user command's output (`None`: not read for this page).
    pub tail: Option<String>,
    /// The last lines of the runtime's own (shown folded).
    pub runtime_tail: Option<String>,
    /// Why there is no tail to show.
    pub tail_note: Option<String>,
}

#[derive(Serialize)]
pub struct PortLink {
    pub label: String,
    pub url: String,
}

#[derive(Serialize)]
pub struct ConditionLine {
    pub time: String,
    pub kind: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

/// What was read of a task's log for the page.
pub enum Tail {
    /// The last lines of the user command's output and of the runtime's.
    Lines {
        user: String,
        runtime: String,
        /// What was rotated away before these lines, where the backend says.
        rotated: Option<String>,
    },
    /// Nothing read: why (not started, no log yet, the backend's error).
    Missing(String),
    /// Not read for this page (beyond the first tasks).
    NotRead,
}

/// The job page of `view`; `tail(role, index)` is what was read of that task's log;
/// `viewer` is who looks (their own jobs need no `-u` in the commands shown).
// Long: mostly the page's struct literal, one line per field the template shows.
pub fn job_page(
    view: &JobView,
    tail: &mut dyn FnMut(&str, u32) -> Tail,
    viewer: &str,
    now_ms: i64,
    paging: &TaskPage,
) -> JobPage {
    let status = &view.job_status;
    let user = status.username.clone();
    let mut tails = TailCount::default();
    let here = routes::UI_JOB.with(&[&user, &view.name]);
    let roles: Vec<RoleSection> = view
        .task_roles
        .iter()
        .filter(|(name, _)| paging.role.as_ref().is_none_or(|r| r == *name))
        .map(|(name, role)| {
            let picked = pick(name, &role.task_statuses, paging, &here);
            let tasks = picked
                .tasks
                .iter()
                .map(|task| {
                    let read = tail(name, task.task_index);
                    task_row(&here, name, task, tails.count(read, status.state, task))
                })
                .collect();
            RoleSection {
                name: name.clone(),
                running: role
                    .task_statuses
                    .iter()
                    .filter(|t| t.task_state == JobState::Running)
                    .count(),
                total: role.task_statuses.len(),
                tasks,
                counts: picked.counts,
                shown: picked.shown,
                previous: picked.previous,
                next: picked.next,
            }
        })
        .collect();
    let trigger = match (
        &status.app_exit_trigger_task_role_name,
        status.app_exit_trigger_task_index,
    ) {
        (Some(role), Some(index)) => Some(format!("{role}-{index}")),
        _ => None,
    };
    JobPage {
        frame: Frame {
            title: view.name.clone(),
            refresh: (!status.state.is_final()).then_some(REFRESH_SECONDS),
            signed_in: None,
        },
        job: view.name.clone(),
        state: status.state.to_string(),
        sub_state: attempt_words(&status.sub_state),
        waiting: status.waiting.as_ref().map(ToString::to_string),
        waiting_for: status
            .waiting
            .as_ref()
            .and_then(|w| w.since)
            .map(|t| age(now_ms - t)),
        stopping: status.execution_type == Execution::Stop && !status.state.is_final(),
        retries: status.retries,
        one_retry: status.retries == 1,
        priority: status.job_priority.clone(),
        running: status.running_task_number,
        total: status.total_task_number,
        role_count: match view.task_roles.len() {
            1 => "1 role".to_string(),
            n => format!("{n} roles"),
        },
        created: status.created_time.map_or_else(String::new, readable),
        created_iso: status.created_time.map_or_else(String::new, iso),
        age: status
            .created_time
            .map_or_else(String::new, |t| age(now_ms - t)),
        completed: status.completed_time.map(readable),
        exit_code_known: status.app_exit_code.is_some() && status.state != JobState::Running,
        exit_code: status.app_exit_code,
        trigger,
        // The last attempt's end is the job's, said above: the earlier ones here.
        attempts: status
            .attempts
            .iter()
            .filter(|a| a.retried)
            .map(|a| a.line())
            .collect(),
        diagnostics: diagnostics(status),
        cause: status.app_exit_cause.as_ref().map(|c| c.line.clone()),
        cause_pattern: status.app_exit_cause.as_ref().map(|c| c.pattern.clone()),
        can_stop: !status.state.is_final() && status.execution_type != Execution::Stop,
        runs: status.state == JobState::Running,
        ended: status.state.is_final(),
        resources: Vec::new(),
        spec: None,
        clone: format!("{user}/{}", view.name),
        roles,
        conditions: condition_lines(view),
        tails_shown: tails.shown,
        tails_omitted: tails.omitted,
        first_role: view.task_roles.keys().next().cloned().unwrap_or_default(),
        flags: if viewer == user {
            String::new()
        } else {
            format!(" -u {user}")
        },
        user,
    }
}

/// One page of a role's tasks, and the words and links around it.
struct Picked<'a> {
    tasks: Vec<&'a TaskView>,
    /// How many of each state, when not every task is shown.
    counts: Option<String>,
    /// Which tasks are shown, when not all.
    shown: Option<String>,
    previous: Option<String>,
    next: Option<String>,
}

/// The tasks of role `name` shown: by index from `from` when the role is paged through;
/// else, in a role too large for one page, the failed ones first, then the rest by index.
fn pick<'a>(name: &str, all: &'a [TaskView], paging: &TaskPage, here: &str) -> Picked<'a> {
    let total = all.len();
    let mut picked = if paging.role.is_some() {
        let from = paging.from.min(total);
        let to = (from + TASKS_PER_PAGE).min(total);
        let link = |at: usize| format!("{here}?role={name}&from={at}");
        Picked {
            tasks: all[from..to].iter().collect(),
            counts: None,
            shown: Some(format!("tasks {from}–{} of {total}", to.saturating_sub(1))),
            previous: (from > 0).then(|| link(from.saturating_sub(TASKS_PER_PAGE))),
            next: (to < total).then(|| link(to)),
        }
    } else if total > TASKS_PER_PAGE {
        let failed = |t: &&TaskView| t.task_state == JobState::Failed;
        let mut tasks: Vec<_> = all.iter().filter(failed).take(TASKS_PER_PAGE).collect();
        let room = TASKS_PER_PAGE - tasks.len();
        tasks.extend(all.iter().filter(|t| !failed(t)).take(room));
        Picked {
            tasks,
            counts: None,
            shown: Some(format!(
                "{TASKS_PER_PAGE} of {total} tasks: the failed ones first, then by index"
            )),
            previous: None,
            next: Some(format!("{here}?role={name}&from=0")),
        }
    } else {
        Picked {
            tasks: all.iter().collect(),
            counts: None,
            shown: None,
            previous: None,
            next: None,
        }
    };
    if picked.tasks.len() < total {
        let mut by_state: std::collections::BTreeMap<String, usize> = Default::default();
        for task in all {
            *by_state.entry(task.task_state.to_string()).or_default() += 1;
        }
        let counts: Vec<_> = by_state
            .iter()
            .map(|(state, n)| format!("{n} {state}"))
            .collect();
        picked.counts = Some(counts.join(", "));
    }
    picked
}

/// The log tails a page shows, and whether some were left out.
#[derive(Default)]
struct TailCount {
    shown: usize,
    omitted: bool,
}

/// A task's tail as its row shows it: the user's lines, the runtime's, a note.
type RowTail = (Option<String>, Option<String>, Option<String>);

impl TailCount {
    /// `read` of a task of a job in `job` state, counted.
    fn count(&mut self, read: Tail, job: JobState, task: &TaskView) -> RowTail {
        match read {
            Tail::Lines {
                user,
                runtime,
                rotated,
            } => {
                self.shown += 1;
                let note = user
                    .is_empty()
                    .then(|| {
                        if job.is_final() || task.task_state.is_final() {
                            "no output".to_string()
                        } else {
                            "no output yet".to_string()
                        }
                    })
                    .or(rotated);
                (
                    Some(user).filter(|l| !l.is_empty()),
                    Some(runtime).filter(|l| !l.is_empty()),
                    note,
                )
            }
            Tail::Missing(why) => (None, None, Some(why)),
            Tail::NotRead => {
                self.omitted = true;
                (None, None, None)
            }
        }
    }
}

/// One task's row; `page`: the job's page, its log links' base.
fn task_row(page: &str, role: &str, task: &TaskView, tail: RowTail) -> TaskRow {
    let (tail, runtime_tail, tail_note) = tail;
    // A port answers only while its task runs.
    let links = if task.task_state == JobState::Running {
        port_links(task)
    } else {
        Vec::new()
    };
    TaskRow {
        id: format!("{role}-{}", task.task_index),
        state: task.task_state.to_string(),
        // The platform's codes alone: the user's own code says itself.
        exit_meaning: task.container_exit_meaning.clone().filter(|_| {
            task.container_exit_code
                .is_some_and(|code| code != 0 && exit::platform_meaning(code).is_some())
        }),
        decided: task.decided_outcome,
        ip: task.container_ip.clone(),
        // Each port once: as a link where it is one, else as text.
        ports: task
            .container_ports
            .iter()
            .filter(|(label, _)| {
                !links
                    .iter()
                    .any(|l| l.label.split(':').next() == Some(label.as_str()))
            })
            .map(|(label, ports)| format!("{label}:{ports}"))
            .collect::<Vec<_>>()
            .join(" "),
        links,
        gpus: task
            .gpus
            .iter()
            .map(|g| format!("GPU {} {}", g.index, g.uuid))
            .collect::<Vec<_>>()
            .join(", "),
        exit_code_known: task.container_exit_code.is_some(),
        exit_code: task.container_exit_code,
        retries: task.retries,
        log_url: format!("{page}/logs/{role}/{}", task.task_index),
        result: task.result.as_ref().map(|v| v.to_string()),
        result_error: task.result_error.clone(),
        tail,
        runtime_tail,
        tail_note,
    }
}

/// The diagnostics, pointing at the cause's own row instead of repeating it.
fn diagnostics(status: &pai_api::status::JobStatus) -> Option<String> {
    status
        .app_exit_diagnostics
        .as_deref()
        .filter(|d| !d.is_empty())
        .map(|d| match &status.app_exit_cause {
            Some(cause) if d.contains(&cause.line) => d.replace(&cause.line, "(the cause above)"),
            _ => d.to_string(),
        })
}

/// The conditions in the order they changed (the timeline: a stable sort by time, the
/// API's type order among equal times), each pointing at what the facts above already
/// say instead of repeating it.
fn condition_lines(view: &JobView) -> Vec<ConditionLine> {
    let status = &view.job_status;
    let said_above = |message: &str| {
        let diagnostics = status.app_exit_diagnostics.as_deref().unwrap_or_default();
        let cause = status
            .app_exit_cause
            .as_ref()
            .map_or("", |c| c.line.as_str());
        [diagnostics, cause]
            .into_iter()
            .find(|said| !said.is_empty() && message.contains(said))
            .map_or_else(
                || message.to_string(),
                |said| message.replace(said, "(the reason above)"),
            )
    };
    let mut timed: Vec<_> = view
        .conditions
        .iter()
        .map(|c| (c.last_transition_time.parse::<jiff::Timestamp>().ok(), c))
        .collect();
    // A time that does not parse (none written) first, as the oldest.
    timed.sort_by_key(|(time, _)| *time);
    timed
        .into_iter()
        .map(|(time, c)| ConditionLine {
            time: time.map_or_else(
                || c.last_transition_time.clone(),
                |t| readable(t.as_millisecond()),
            ),
            kind: c.kind.clone(),
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: said_above(&c.message),
        })
        .collect()
}

/// FrameworkController's attempt state in words (`AttemptRunning`: `running`).
fn attempt_words(state: &str) -> String {
    match state {
        "AttemptCreationPending" | "AttemptCreationRequested" => "being created",
        "AttemptPreparing" => "preparing",
        "AttemptRunning" => "running",
        "AttemptDeletionPending" | "AttemptDeletionRequested" | "AttemptDeleting" => "ending",
        "AttemptCompleted" => "ended, the next one to come",
        "Completed" => "completed",
        other => other,
    }
    .to_string()
}

/// A task's ports as links (all but ssh), where it has an address.
fn port_links(task: &pai_api::status::TaskView) -> Vec<PortLink> {
    let Some(ip) = task.container_ip.as_deref().filter(|ip| !ip.is_empty()) else {
        return Vec::new();
    };
    let host = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.to_string()
    };
    task.container_ports
        .iter()
        .filter(|(label, _)| label.as_str() != pai_contract::ports::SSH_LABEL)
        .flat_map(|(label, ports)| {
            let host = host.clone();
            ports
                .split(',')
                .filter(|p| !p.is_empty())
                .map(move |port| PortLink {
                    label: format!("{label}:{port}"),
                    url: format!("http://{host}:{port}/"),
                })
        })
        .collect()
}
