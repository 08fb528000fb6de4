//! A job's view, made once per version of its Framework and shared by every reader.
//!
//! The server's copy of the Frameworks hands every reader the same `Arc<Framework>`
//! until the Framework changes (a change is a new `Arc`). So a view made from one `Arc`
//! serves every read of that version: a job GET sends bytes made once, a list or a
//! `/metrics` scrape reads states made once, however many clients ask. A view is kept
//! with a [`Weak`] of the Framework it was made from: the `Weak` keeps that allocation's
//! address from being reused (an `Arc`'s memory is freed only when its last `Weak` goes),
//! so the address identifies the version, and a view whose Framework the copy let go is
//! swept out.
//!
//! A Framework that only the caller holds (the embedded default gives a fresh `Arc` per
//! read) can never be asked for again: its view is made and not kept.
//!
//! A waiting job's view also says why it waits, which comes from beside its Framework
//! (the gang scheduler's group, the queue, the pods; see [`crate::admission`]): a view
//! is kept with the reason it was made with, and made again when the reason changes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use axum::body::Bytes;
use pai_api::status::{JobView, job_view_held};
use pai_api::waiting::Waiting;
use pai_contract::Framework;

/// A job's view and its JSON, as a job GET answers it.
pub struct Made {
    /// The view, with its logs' URLs under [`Made::url`].
    pub view: JobView,
    /// The job's URL, `/api/v1/user/{user}/jobs/{job}`.
    pub url: String,
    /// `view` as JSON.
    pub json: Bytes,
}

struct Kept {
    framework: Weak<Framework>,
    /// The reason it waits the view was made with.
    held: Option<Arc<Waiting>>,
    made: Arc<Made>,
}

/// Why a job waits, as the backend knows it beside the Framework.
pub type Holds = Arc<dyn Fn(&Framework) -> Option<Arc<Waiting>> + Send + Sync>;

/// Views kept by the address of the Framework they were made from.
#[derive(Default)]
pub struct Views {
    kept: Mutex<HashMap<usize, Kept>>,
    /// How many views were kept after the last sweep.
    swept_to: std::sync::atomic::AtomicUsize,
    /// Why a job waits; `None`: its Framework alone says.
    holds: Option<Holds>,
}

/// Views kept beyond twice the last sweep's count before the next sweep.
const SWEEP_SLACK: usize = 64;

/// A job's URL in the API.
pub fn job_url(user: &str, job: &str) -> String {
    pai_api::routes::JOB.with(&[user, job])
}

fn make(framework: &Framework, held: Option<&Waiting>) -> Made {
    let url = job_url(
        framework.user_name().unwrap_or_default(),
        framework.job_name().unwrap_or(framework.name()),
    );
    make_at(framework, held, url)
}

fn make_at(framework: &Framework, held: Option<&Waiting>, url: String) -> Made {
    let view = job_view_held(framework, &url, held);
    let json = Bytes::from(serde_json::to_vec(&view).unwrap_or_default());
    Made { view, url, json }
}

impl Views {
    /// Views of jobs whose reasons to wait `holds` tells.
    pub fn holding(holds: Holds) -> Self {
        Self {
            holds: Some(holds),
            ..Self::default()
        }
    }

    /// Why the job of `framework` waits, as told beside it; nothing holds a completed
    /// job (not asked: a list of many finished jobs asks nothing per job).
    pub fn held(&self, framework: &Framework) -> Option<Arc<Waiting>> {
        if framework.is_completed() {
            return None;
        }
        self.holds.as_ref().and_then(|holds| holds(framework))
    }

    /// The view of `framework`: the one made before for this very version (and reason
    /// to wait), or a new one.
    pub fn of(&self, framework: &Arc<Framework>) -> Arc<Made> {
        let held = self.held(framework);
        if Arc::strong_count(framework) == 1 {
            return Arc::new(make(framework, held.as_deref()));
        }
        let key = Arc::as_ptr(framework) as usize;
        let same = |kept: &Kept| match (&kept.held, &held) {
            (None, None) => true,
            // The same reason (a reason made anew per read says the same in words).
            (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
            _ => false,
        };
        if let Some(kept) = self.lock().get(&key).filter(|k| same(k)) {
            return kept.made.clone();
        }
        let made = Arc::new(make(framework, held.as_deref()));
        let mut kept = self.lock();
        kept.insert(
            key,
            Kept {
                framework: Arc::downgrade(framework),
                held,
                made: made.clone(),
            },
        );
        let swept_to = self.swept_to.load(std::sync::atomic::Ordering::Relaxed);
        if kept.len() > 2 * swept_to + SWEEP_SLACK {
            self.sweep_locked(&mut kept);
        }
        made
    }

    /// Lets go of the views whose Framework the copy let go (a finished job gone cold
    /// or deleted, a running job's older versions): what each kept (its view, its JSON
    /// and its Framework's allocation, held by the `Weak`) is freed. How many stay.
    pub fn sweep(&self) -> usize {
        self.sweep_locked(&mut self.lock())
    }

    fn sweep_locked(&self, kept: &mut HashMap<usize, Kept>) -> usize {
        kept.retain(|_, k| k.framework.strong_count() > 0);
        kept.shrink_to_fit();
        self.swept_to
            .store(kept.len(), std::sync::atomic::Ordering::Relaxed);
        kept.len()
    }

    /// Sweeps every `period` while `views` lives: a burst of jobs that ended leaves
    /// nothing kept once the server is idle (inserts alone sweep only when the count
    /// doubles). Needs a Tokio runtime; without one (a test's state) nothing runs.
    pub fn sweep_every(views: &Arc<Self>, period: std::time::Duration) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let weak = Arc::downgrade(views);
        runtime.spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(views) = weak.upgrade() else { return };
                views.sweep();
            }
        });
    }

    /// The view of `framework` with its logs' URLs under `url`: the shared one when
    /// `url` is the job's own (the name as the API spells it), else one made for `url`
    /// alone (a request that spelled the user's name another way) and not kept.
    pub fn at(&self, framework: &Arc<Framework>, url: &str) -> Arc<Made> {
        let made = self.of(framework);
        if made.url == url {
            return made;
        }
        let held = self.held(framework);
        Arc::new(make_at(framework, held.as_deref(), url.to_string()))
    }

    /// How many views are kept now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<usize, Kept>> {
        // No code holding the lock panics; a poisoned lock still has a whole map.
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pai_contract::framework::ExecutionType;

    fn framework(name: &str) -> Framework {
        let mut f: Framework = serde_json::from_value(serde_json::json!({
            "apiVersion": "frameworkcontroller.microsoft.com/v1",
            "kind": "Framework",
            "metadata": {"name": name},
            "spec": {"executionType": "Start", "taskRoles": []}
        }))
        .expect("a Framework");
        f.spec.execution_type = ExecutionType::Start;
        f
    }

    #[test]
    fn a_sweep_lets_go_of_the_views_of_frameworks_no_one_holds() {
        let views = Views::default();
        let ended = Arc::new(framework("ended"));
        let held = ended.clone();
        views.of(&held);
        let running = Arc::new(framework("running"));
        let _reader = running.clone();
        views.of(&running);
        assert_eq!(views.len(), 2);
        // The job went cold: the copy dropped its Framework, and so did the reader.
        drop((ended, held));
        assert_eq!(views.len(), 2, "inserts alone do not sweep two views");
        assert_eq!(views.sweep(), 1, "only the held Framework's view stays");
    }

    #[test]
    fn one_version_is_made_once_and_a_new_version_anew() {
        let views = Views::default();
        let stored = Arc::new(framework("a"));
        let held = stored.clone();
        let first = views.of(&held);
        let again = views.of(&stored);
        assert!(Arc::ptr_eq(&first, &again), "the same version is made once");

        let mut changed = (*stored).clone();
        changed.spec.execution_type = ExecutionType::Stop;
        let changed = Arc::new(changed);
        let _held = changed.clone();
        let second = views.of(&changed);
        assert!(
            !Arc::ptr_eq(&first, &second),
            "a new version gets a new view"
        );
        assert_eq!(
            second.json,
            Bytes::from(
                serde_json::to_vec(&pai_api::status::job_view(&changed, &second.url)).unwrap()
            )
        );
    }

    #[test]
    fn a_framework_only_the_caller_holds_is_not_kept() {
        let views = Views::default();
        views.of(&Arc::new(framework("a")));
        assert!(views.is_empty());
    }

    #[test]
    fn views_of_frameworks_let_go_are_swept() {
        let views = Views::default();
        let live: Vec<Arc<Framework>> = (0..10)
            .map(|i| Arc::new(framework(&format!("live-{i}"))))
            .collect();
        let held: Vec<Arc<Framework>> = live.clone();
        for f in &held {
            views.of(f);
        }
        for round in 0..1000 {
            let gone = Arc::new(framework(&format!("gone-{round}")));
            let also = gone.clone();
            views.of(&also);
        }
        // Every live view is still there; of the 1,000 let go at most the slack is.
        assert!(views.len() >= live.len());
        assert!(
            views.len() <= 2 * live.len() + SWEEP_SLACK + 1,
            "{}",
            views.len()
        );
        for f in &held {
            assert!(Arc::ptr_eq(&views.of(f), &views.of(f)));
        }
    }
}
