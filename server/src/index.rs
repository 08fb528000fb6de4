//! The jobs in list order, kept as they change: what every list (v1, v2, the portal)
//! reads, so that a list costs what it shows and filters, not a view of every job.
//!
//! Each job is one entry, in the order lists give (newest first, by name among equals;
//! a job's creation time and name never change). A finished job's entry holds its list
//! row (`JobSummary`), made once when it finished, or read from the backend's history
//! ([`Backend::archived`]) once its Framework went; a running or waiting job's row is
//! its current view's, read at each list (few jobs run at once; they are what changes).
//!
//! Kept current by the backend's change stream, read up to now at every list before it
//! answers (under the index's lock): a change that a write waited for (a submission, a
//! deletion) is in every list that follows it. A subscriber that fell behind reads
//! everything again.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures::FutureExt;
use futures::StreamExt;
use futures::stream::BoxStream;

use pai_api::jobs::JobRow;
use pai_backend::backend::{Backend, BackendError, Changed};
use pai_backend::controller::Event;
use pai_contract::Framework;

use crate::views::Views;

/// Where a job is in a list: newest creation first, then by job name, then by
/// Framework name (two users' jobs of one name created in one millisecond).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    /// Creation time (ms), newest first; none last.
    pub created: std::cmp::Reverse<Option<i64>>,
    /// The job's name as given.
    pub job: String,
    /// The Framework's name (unique).
    pub framework: String,
}

impl Position {
    fn of(framework_name: &str, row: &JobRow) -> Self {
        Self {
            created: std::cmp::Reverse(row.summary.status.created_time),
            job: row.summary.name.clone(),
            framework: framework_name.to_string(),
        }
    }
}

/// One job of the index.
struct Entry {
    /// Whose job it is.
    user: String,
    /// A finished job's row; `None`: it runs or waits, and its row is read at each list.
    done: Option<Arc<JobRow>>,
}

struct Kept {
    changes: BoxStream<'static, Event<Changed>>,
    order: BTreeMap<Position, Entry>,
    by_name: HashMap<String, Position>,
}

/// The index of one backend's jobs.
pub struct JobIndex {
    backend: Arc<dyn Backend>,
    views: Arc<Views>,
    /// `None` until the first list (or after a failed one).
    kept: tokio::sync::Mutex<Option<Kept>>,
}

impl JobIndex {
    pub fn new(backend: Arc<dyn Backend>, views: Arc<Views>) -> Self {
        pai_backend::memory::keeper::start();
        Self {
            backend,
            views,
            kept: tokio::sync::Mutex::new(None),
        }
    }

    /// The jobs of `user` (or of everyone), in list order, each with its row as it is
    /// now.
    pub async fn rows(&self, user: Option<&str>) -> Result<Vec<Arc<JobRow>>, BackendError> {
        self.backend.ready()?;
        let mut guard = self.kept.lock().await;
        loop {
            let kept = match guard.take() {
                Some(kept) => kept,
                None => self.read_all().await?,
            };
            // The entries are made on the keeper's thread: a job's is kept as long as
            // the job (see `pai_backend::memory::keeper`). Were this list dropped meanwhile, the
            // index goes with it, and the next list reads everything again.
            let backend = self.backend.clone();
            let (kept, whole, _seen) = pai_backend::memory::keeper::make(move || {
                let mut kept = kept;
                let mut seen = Vec::new();
                let whole = catch_up(backend.as_ref(), &mut kept, &mut seen);
                (kept, whole, seen)
            })
            .await;
            if whole {
                *guard = Some(kept);
                break;
            }
            // Changes were missed: everything is read again.
        }
        let Some(kept) = guard.as_ref() else {
            return Ok(Vec::new());
        };
        let mut rows = Vec::new();
        for (position, entry) in &kept.order {
            if user.is_some_and(|u| u != entry.user) {
                continue;
            }
            let row = match &entry.done {
                Some(done) => done.clone(),
                None => match self.live_row(&position.framework) {
                    Some(row) => row,
                    // Deleted, its change not read yet.
                    None => continue,
                },
            };
            rows.push(row);
        }
        Ok(rows)
    }

    /// A running or waiting job's row from its current view (made once per version).
    fn live_row(&self, framework: &str) -> Option<Arc<JobRow>> {
        // Ended and kept by the backend meanwhile (its change not read yet): its row.
        if let Some(row) = self.backend.archived(framework) {
            return Some(row);
        }
        let framework = self.backend.peek(framework)?;
        Some(Arc::new(JobRow::of_view(&self.views.of(&framework).view)))
    }

    /// Every job the backend has: subscribed first, so that no change is missed. Its
    /// entries are made on the keeper's thread, as [`catch_up`]'s are.
    async fn read_all(&self) -> Result<Kept, BackendError> {
        let changes = self.backend.changes();
        let frameworks = self.backend.list(None).await?;
        let backend = self.backend.clone();
        // The Frameworks are dropped here, where they were made: the keeper would take
        // their blocks back for what it keeps (see `pai_backend::memory::keeper`).
        let (kept, _frameworks) = pai_backend::memory::keeper::make(move || {
            let mut kept = Kept {
                changes,
                order: BTreeMap::new(),
                by_name: HashMap::new(),
            };
            for (name, row) in backend.archive() {
                kept.put(&name, row.summary.status.username.clone(), row);
            }
            for framework in &frameworks {
                kept.framework(framework);
            }
            (kept, frameworks)
        })
        .await;
        Ok(kept)
    }
}

/// Reads every change of `backend` up to now into `kept`; `false` when some were missed.
/// The Frameworks it read go into `seen`, for the caller to drop: run on the keeper's
/// thread, it must not be the one that frees a running job's Framework (see
/// `pai_backend::memory::keeper`).
fn catch_up(backend: &dyn Backend, kept: &mut Kept, seen: &mut Vec<Arc<Framework>>) -> bool {
    while let Some(Some(event)) = kept.changes.next().now_or_never() {
        match event {
            // The backend's own row first: made once, and from the job as it was (this
            // machine's cold job is kept as its saved form, whose times are whole
            // seconds).
            Event::Changed(changed) => match backend.archived(&changed.name) {
                Some(row) => {
                    let user = row.summary.status.username.clone();
                    kept.put(&changed.name, user, row);
                }
                None => match backend.peek(&changed.name) {
                    Some(framework) => {
                        kept.framework(&framework);
                        seen.push(framework);
                    }
                    None => kept.remove(&changed.name),
                },
            },
            Event::Missed => return false,
        }
    }
    true
}

impl Kept {
    fn framework(&mut self, framework: &Framework) {
        let name = framework.name();
        let user = framework.user_name().unwrap_or_default().to_string();
        if framework.is_completed() {
            self.put(name, user, Arc::new(JobRow::unheld(framework)));
            return;
        }
        let job = framework.job_name().unwrap_or(name).to_string();
        let created = framework
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_millisecond());
        let position = Position {
            created: std::cmp::Reverse(created),
            job,
            framework: name.to_string(),
        };
        self.insert(position, Entry { user, done: None });
    }

    fn put(&mut self, name: &str, user: String, row: Arc<JobRow>) {
        let position = Position::of(name, &row);
        self.insert(
            position,
            Entry {
                user,
                done: Some(row),
            },
        );
    }

    fn insert(&mut self, position: Position, entry: Entry) {
        if let Some(before) = self
            .by_name
            .insert(position.framework.clone(), position.clone())
            && before != position
        {
            self.order.remove(&before);
        }
        self.order.insert(position, entry);
    }

    fn remove(&mut self, name: &str) {
        if let Some(position) = self.by_name.remove(name) {
            self.order.remove(&position);
        }
    }
}
