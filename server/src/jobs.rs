//! The jobs service behind the handlers: submission, the stop/start rules, the watch's
//! framing, list visibility and ssh info. Handlers extract, call one of these, and map the
//! result; nothing here knows HTTP beyond the error type.

use std::sync::Arc;

use axum::body::Bytes;
use futures::{Stream, StreamExt};

use pai_api::jobs::{Execution, JobSummary};
use pai_contract::Framework;
use pai_contract::framework::{ExecutionType, FrameworkState};
use pai_job::ssh_key::JobKey;

use super::auth::Caller;
use super::error::ApiError;
use super::extract::{Job, SpecBody, user_name};
use crate::state::AppState;
use pai_api::status::JobState;
use pai_backend::backend::{BackendError, FrameworkStream};
use pai_translate::ports::Seed;
use pai_translate::spec::{JobSpec, UserName};
use pai_translate::transform::Submission;

/// What a submission did.
pub enum Submitted {
    /// The Framework was created.
    Created { job: String, warnings: Vec<String> },
    /// A dry run: the Framework that would have been, and the warnings its submission
    /// would have had.
    DryRun {
        framework: Box<Framework>,
        warnings: Vec<String>,
    },
}

/// Validates, transforms and (unless `dry_run`) creates the job. `path_job` is the PUT
/// form's job name, which must be the spec's.
// Long: a submission's steps in order (parse, transform, dependencies, key, secrets,
// create), each a call.
pub async fn submit(
    state: &AppState,
    caller: &Caller,
    user: &UserName,
    path_job: Option<&str>,
    dry_run: bool,
    body: &SpecBody,
) -> Result<Submitted, ApiError> {
    if !caller.may_act_for(user.as_str()) {
        return Err(ApiError::forbidden(format!(
            "user {:?} may not submit jobs as {user:?}",
            caller.user
        )));
    }
    let spec = JobSpec::parse(&body.text, body.format).map_err(|e| ApiError::bad_spec(&e))?;
    // The storages it mounts, as its submitter may have them (an empty list: theirs by
    // default); the config's as they are now.
    let storages = state.storages.current();
    let spec = match spec.storages() {
        Some(requests) => {
            let resolved = pai_translate::storages::resolve(requests, &caller.who(), &storages)
                .map_err(|denied| {
                    let message = format!("extras.storages[{}].name: {denied}", denied.index());
                    match denied {
                        pai_translate::storages::Denied::Unknown { .. } => {
                            ApiError::bad_request(message)
                        }
                        pai_translate::storages::Denied::Forbidden { .. } => {
                            ApiError::forbidden(message)
                        }
                    }
                })?;
            spec.with_storages(resolved)
        }
        None => spec,
    };
    let job = spec.name().as_str().to_string();
    if let Some(path_job) = path_job
        && path_job != job
    {
        return Err(ApiError::bad_request(format!(
            "the job name in the path ({path_job:?}) is not the spec's jobName ({job:?})"
        )));
    }
    // What the place can do with the spec's code and virtual cluster: refused here,
    // before anything is created, or said with the other warnings.
    // On this machine the check reads the code's directory: off the async workers.
    let place_warnings = {
        let (spec, user) = (spec.clone(), user.clone());
        let here = state.backend.runs_here();
        let transformer = state.transformer.get();
        tokio::task::spawn_blocking(move || {
            let place = if here {
                pai_translate::place::Place::ThisMachine {
                    default_fs_uri: &transformer.config().default_fs_uri,
                }
            } else {
                pai_translate::place::Place::Cluster(transformer.config())
            };
            pai_translate::place::check(&spec, &user, place)
        })
        .await
        .map_err(|e| ApiError::from(BackendError::Other(format!("checking the job's code: {e}"))))?
        .map_err(|e| ApiError::bad_spec(&e))?
    };
    let submission = Submission {
        user,
        spec: &spec,
        spec_text: &body.text,
        format: body.format,
    };
    let mut framework = state
        .transformer
        .get()
        .with_storages(storages.to_vec())
        .transform(submission, Seed::Random)
        .map_err(|e| ApiError::bad_spec(&e))?;
    pai_backend::depends::resolve(state.backend.as_ref(), &mut framework).await?;
    // What the spec asks that is not done as it asks, for a check and a submission alike.
    let mut warnings = pai_translate::warnings::spec_warnings(&spec);
    warnings.extend(place_warnings);
    warnings.extend(state.backend.warnings(&spec));
    if dry_run {
        // What the submission would refuse, the check refuses.
        state.backend.admit(&framework)?;
        return Ok(Submitted::DryRun {
            framework: Box::new(framework),
            warnings,
        });
    }
    let mut key = JobKey::generate(&format!("{user}~{job}"))
        .map_err(|e| ApiError::from(BackendError::Other(e.to_string())))?;
    // A v2 job's secrets and registry credentials go where its key goes (a Secret owned
    // by the Framework, a private file of the job here), never into the Framework.
    key.secrets = spec.secrets().map(|s| s.to_json());
    if !spec.registry_auths().is_empty() {
        key.registry = Some(pai_translate::spec::secrets::docker_config_json(
            spec.registry_auths(),
        ));
    }
    state
        .backend
        .create(framework, key)
        .await
        .map_err(|e| match e {
            BackendError::Conflict(_) => {
                ApiError::conflict(format!("job {user}~{job} already exists"))
            }
            other => other.into(),
        })?;
    tracing::info!(user = %user, job = %job, "job submitted");
    Ok(Submitted::Created { job, warnings })
}

/// Deletes `job`: its Framework and, with it, its tasks.
pub async fn delete(state: &AppState, job: &Job) -> Result<(), ApiError> {
    state
        .backend
        .delete(job.name())
        .await
        .map_err(|e| match e {
            BackendError::NotFound => job.not_found(),
            other => other.into(),
        })?;
    tracing::info!(user = %job.user, job = %job.job, "job deleted");
    Ok(())
}

/// The stop/start rules: STOP on a running job asks the backend to stop it (on a completed
/// one it changes nothing); START is accepted while the job runs and refused (409) once
/// it completed or is stopping.
pub async fn set_execution(state: &AppState, job: &Job, value: Execution) -> Result<(), ApiError> {
    let completed = job
        .framework
        .status
        .as_ref()
        .is_some_and(|s| s.state == FrameworkState::Completed);
    let who = format!("job {}~{}", job.user, job.job);
    match value {
        Execution::Stop if completed => Ok(()),
        Execution::Stop => {
            state
                .backend
                .set_execution(job.name(), ExecutionType::Stop)
                .await?;
            tracing::info!(user = %job.user, job = %job.job, "stop requested");
            Ok(())
        }
        Execution::Start if completed => Err(ApiError::conflict(format!(
            "{who} has completed and cannot be started again: submit it anew"
        ))),
        Execution::Start if job.framework.spec.execution_type == ExecutionType::Stop => {
            Err(ApiError::conflict(format!(
                "{who} is stopping and cannot be started again: submit it anew once it stopped"
            )))
        }
        Execution::Start => Ok(()),
    }
}

/// A watch as NDJSON: one line (the job view) per change that changes it; the line of a
/// final state is the last, and the stream ends right after it (not at the next change,
/// which may never come), or when the job is deleted or cannot be read. A Framework seen
/// again unchanged (the watch of the cluster re-listed after its API server restarted) is
/// no new line.
pub fn watch_lines(
    changes: FrameworkStream,
    views: std::sync::Arc<crate::views::Views>,
    url: String,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send {
    changes
        .scan(None::<Vec<u8>>, move |previous, change| {
            let line = change.ok().flatten().map(|framework| {
                let made = views.at(&framework, &url);
                let last = made.view.job_status.state.is_final();
                let mut line = made.json.to_vec();
                line.push(b'\n');
                (line, last)
            });
            // `None` ends the stream: deleted, unreadable, or after a final state.
            let items = match line {
                Some((line, _)) if previous.as_ref() == Some(&line) => vec![],
                Some((line, last)) => {
                    *previous = Some(line.clone());
                    let mut items = vec![Some(Bytes::from(line))];
                    if last {
                        items.push(None);
                    }
                    items
                }
                None => vec![None],
            };
            futures::future::ready(Some(futures::stream::iter(items)))
        })
        .flatten()
        .take_while(|item| futures::future::ready(item.is_some()))
        .filter_map(|item| futures::future::ready(item.map(Ok)))
}

/// Whose jobs a caller sees when asking for `requested`'s (or everyone's).
enum Visible {
    /// One user's (a non-admin: only their own).
    User(String),
    /// Everyone's (an admin not naming a user).
    All,
    /// Nobody's: a non-admin asking for another user's.
    Nothing,
}

fn visible(caller: &Caller, requested: Option<&str>) -> Visible {
    match requested {
        Some(user) if caller.may_act_for(user) => Visible::User(user.to_string()),
        Some(_) => Visible::Nothing,
        None if caller.admin => Visible::All,
        None => Visible::User(caller.user.clone()),
    }
}

/// Which jobs of a list, and how many.
#[derive(Clone, Debug, Default)]
pub struct ListFilter {
    /// Only jobs in this state.
    pub state: Option<JobState>,
    /// At most this many (1 to [`MAX_PAGE`]); all without it.
    pub limit: Option<usize>,
    /// Where the previous page ended ([`Page::next`]).
    pub after: Option<String>,
}

/// The most jobs one page holds.
pub const MAX_PAGE: usize = 1000;

/// One page of a list, and where the next starts (`None`: it was the last).
pub struct Page {
    pub jobs: Vec<JobSummary>,
    pub next: Option<String>,
}

/// Where a list is: the creation time (ms) and name of the last job given, newest first
/// and by name among equals. Opaque to clients (base64url of JSON).
#[derive(serde::Serialize, serde::Deserialize, PartialEq, Eq, PartialOrd, Ord)]
struct Position(std::cmp::Reverse<Option<i64>>, String);

impl Position {
    fn of(row: &pai_api::jobs::JobRow) -> Self {
        Self(
            std::cmp::Reverse(row.summary.status.created_time),
            row.summary.name.clone(),
        )
    }

    fn token(&self) -> String {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(serde_json::to_vec(&(self.0.0, &self.1)).unwrap_or_default())
    }

    fn parse(token: &str) -> Result<Self, ApiError> {
        use base64::Engine;
        let bad = || {
            ApiError::bad_request(
                "continue: not a token of this server's lists (give the one the previous page's Link header names)",
            )
        };
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token)
            .map_err(|_| bad())?;
        let (created, name): (Option<i64>, String) =
            serde_json::from_slice(&bytes).map_err(|_| bad())?;
        Ok(Self(std::cmp::Reverse(created), name))
    }
}

/// The jobs `caller` may see of `requested` (a user name) or of everyone, newest first,
/// as `filter` says: from the backend's copy and the views made once per version of each
/// job ([`crate::views`]); only the page's summaries are made.
pub async fn list(
    state: &AppState,
    caller: &Caller,
    requested: Option<&str>,
    filter: &ListFilter,
) -> Result<Page, ApiError> {
    if let Some(limit) = filter.limit
        && !(1..=MAX_PAGE).contains(&limit)
    {
        return Err(ApiError::bad_request(format!(
            "limit: {limit} is not from 1 to {MAX_PAGE}"
        )));
    }
    // An empty token is the first page, as in the Kubernetes API.
    let after = filter
        .after
        .as_deref()
        .filter(|token| !token.is_empty())
        .map(Position::parse)
        .transpose()?;
    let ordered = visible_rows(state, caller, requested).await?;
    let limit = filter.limit.unwrap_or(usize::MAX);
    let mut jobs = Vec::new();
    let mut last = None;
    let mut more = false;
    for row in ordered {
        let position = Position::of(&row);
        if after.as_ref().is_some_and(|a| &position <= a) {
            continue;
        }
        if filter.state.is_some_and(|s| s != row.summary.status.state) {
            continue;
        }
        if jobs.len() == limit {
            more = true;
            break;
        }
        jobs.push(row.summary.clone());
        last = Some(position);
    }
    Ok(Page {
        jobs,
        next: more.then(|| last.map(|p| p.token())).flatten(),
    })
}

/// The list rows of the jobs `caller` may see of `requested` (a user name) or of
/// everyone, newest first (by name among equals), from the index kept as jobs change
/// ([`crate::index`]): a list reads rows, it does not make them.
pub async fn visible_rows(
    state: &AppState,
    caller: &Caller,
    requested: Option<&str>,
) -> Result<Vec<Arc<pai_api::jobs::JobRow>>, ApiError> {
    if let Some(user) = requested {
        user_name(user)?;
    }
    let user = match visible(caller, requested) {
        Visible::Nothing => return Ok(Vec::new()),
        Visible::All => None,
        Visible::User(user) => Some(user),
    };
    Ok(state.index.rows(user.as_deref()).await?)
}
