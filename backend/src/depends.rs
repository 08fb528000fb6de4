//! Jobs that wait for jobs ([`pai_job::depends`]), on either backend: whether a held
//! job may run, must go on waiting (and why, in words), or never will (one pure function
//! of its Framework and what its dependencies are now); the checks at submission; and the
//! dependency controller, which releases a held job once every job it waits for reached
//! its state, or ends it FAILED once one never will.
//!
//! The controller runs on the controller runtime ([`crate::controller`]) over the
//! backend's changes: a change of a job looks again at that job and at the held jobs that
//! wait for it (an index kept as they are seen); the start, and missed changes, look at
//! every job. What it decides is written on the Frameworks themselves (the backends'
//! `release` and `refuse`), so a restarted server or a second replica goes on from
//! there; both write the same. A release or refusal that fails is tried again with the
//! runtime's back-off. Each backend starts it for itself ([`start`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};

use pai_api::status::{JobState, job_state};
use pai_api::waiting::Waiting;
use pai_contract::Framework;
use pai_job::depends::{self, Dependency};

use crate::backend::{Backend, BackendError, Changed, Seen};
use crate::controller::{self, Outcome, Reconcile};

/// Why a submission's `dependsOn` is refused.
#[derive(Debug, thiserror::Error)]
pub enum DependencyError {
    /// The spec asks what cannot be (a 400): the message names `dependsOn[i].job`.
    #[error("{0}")]
    Refused(String),
    /// The backend could not be asked.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// What a held job's dependencies say.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Every dependency reached its state: the job runs.
    Met,
    /// Not yet: why, as the job's `waiting`.
    Waiting(Waiting),
    /// One never will: the job ends FAILED, saying why.
    Failed(String),
}

/// The reason a job waits for its dependencies.
pub const REASON: &str = "Dependencies";

/// The decision for `framework` (held: [`depends::holds`]); `lookup` tells what a job of
/// the same namespace is now, by its Framework's name.
pub fn decide(framework: &Framework, lookup: impl Fn(&str) -> Option<Seen>) -> Decision {
    let user = framework.user_name().unwrap_or_default().to_string();
    let mut waiting = Vec::new();
    for Dependency { job, state, uid } in depends::of(framework) {
        let wanted = state.as_str();
        let name = pai_job::names::framework_name(&user, &job);
        let found = lookup(&name).filter(|f| uid.is_none() || f.uid.as_deref() == uid.as_deref());
        let Some(Seen { state: now, .. }) = found else {
            return Decision::Failed(format!(
                "job {job}, which this job waited for to be {wanted}, was deleted"
            ));
        };
        if now.is(state) {
            continue;
        }
        if now.is_final() {
            return Decision::Failed(format!(
                "job {job} ended {now}; this job waited for it to be {wanted}"
            ));
        }
        waiting.push(format!("job {job} to be {wanted} (it is {now})"));
    }
    if waiting.is_empty() {
        return Decision::Met;
    }
    Decision::Waiting(Waiting {
        reason: REASON.to_string(),
        message: format!("waits for {}", waiting.join(", ")),
        since: framework
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_millisecond()),
        until: None,
    })
}

/// Why the held job of `framework` waits (`None`: it is not held).
pub fn held(backend: &dyn Backend, framework: &Framework) -> Option<Arc<Waiting>> {
    if !depends::holds(framework) {
        return None;
    }
    match decide(framework, |name| backend.seen(name)) {
        Decision::Waiting(waiting) => Some(Arc::new(waiting)),
        // Met or failed: the controller acts at once; until then it is on its way.
        Decision::Met | Decision::Failed(_) => None,
    }
}

/// At submission: every job `framework` waits for exists (its UID is pinned), is not in
/// a final state other than the one wanted, and waiting makes no cycle. A job whose
/// dependencies are all met already is released at once (no gate on its pods). Each
/// refusal is a 400 naming `dependsOn[i].job`.
pub async fn resolve(
    backend: &dyn Backend,
    framework: &mut Framework,
) -> Result<(), DependencyError> {
    let mut dependencies = depends::of(framework);
    if dependencies.is_empty() {
        return Ok(());
    }
    let user = framework.user_name().unwrap_or_default().to_string();
    let own = framework.job_name().unwrap_or_default().to_string();
    let field = |i: usize| format!("dependsOn[{i}].job");
    let mut all_met = true;
    for (i, dependency) in dependencies.iter_mut().enumerate() {
        let name = pai_job::names::framework_name(&user, &dependency.job);
        let found = backend.get(&name).await?.ok_or_else(|| {
            DependencyError::Refused(format!(
                "{}: user {user} has no job {:?} to wait for",
                field(i),
                dependency.job
            ))
        })?;
        let now = job_state(&found);
        let wanted = dependency.state.as_str();
        if now.is_final() && !now.is(dependency.state) {
            return Err(DependencyError::Refused(format!(
                "{}: job {:?} ended {now}; this job would wait for it to be {wanted} forever",
                field(i),
                dependency.job
            )));
        }
        all_met &= now.is(dependency.state);
        if let Some(path) = cycle(backend, &user, &own, &found).await? {
            return Err(DependencyError::Refused(format!(
                "{}: waiting for job {:?} makes a cycle: {own} → {}",
                field(i),
                dependency.job,
                path.join(" → ")
            )));
        }
        dependency.uid = found.metadata.uid.clone();
    }
    let annotations = framework
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    if let Ok(text) = serde_json::to_string(&dependencies) {
        annotations.insert(depends::ANNOTATION.to_string(), text);
    }
    if all_met {
        annotations.insert(
            depends::RELEASED.to_string(),
            jiff::Timestamp::now().to_string(),
        );
        ungate_template(framework);
    }
    Ok(())
}

/// The path of jobs from `start` that waits back for `own` (a cycle), if any: followed
/// by name through each job's own dependencies, each job once.
async fn cycle(
    backend: &dyn Backend,
    user: &str,
    own: &str,
    start: &Framework,
) -> Result<Option<Vec<String>>, DependencyError> {
    let start_job = start.job_name().unwrap_or_default().to_string();
    let mut paths: Vec<(Vec<String>, Vec<Dependency>)> =
        vec![(vec![start_job.clone()], depends::of(start))];
    let mut seen = HashSet::from([start_job]);
    while let Some((path, next)) = paths.pop() {
        for Dependency { job, .. } in next {
            let mut longer = path.clone();
            longer.push(job.clone());
            if job == own {
                return Ok(Some(longer));
            }
            if !seen.insert(job.clone()) {
                continue;
            }
            let name = pai_job::names::framework_name(user, &job);
            if let Some(found) = backend.get(&name).await? {
                paths.push((longer, depends::of(&found)));
            }
        }
    }
    Ok(None)
}

/// Removes the dependencies' scheduling gate from every role's pod template.
pub fn ungate_template(framework: &mut Framework) {
    for role in &mut framework.spec.task_roles {
        if let Some(spec) = role.task.pod.spec.as_mut() {
            ungate(spec);
        }
    }
}

/// Takes the dependencies' gate out of a pod spec (others' gates stay); whether it had it.
pub fn ungate(spec: &mut k8s_openapi::api::core::v1::PodSpec) -> bool {
    let Some(gates) = spec.scheduling_gates.as_mut() else {
        return false;
    };
    let before = gates.len();
    gates.retain(|g| g.name != depends::GATE);
    let had = gates.len() != before;
    if gates.is_empty() {
        spec.scheduling_gates = None;
    }
    had
}

/// Starts the dependency controller of `backend`, for as long as the backend is kept
/// (it holds it weakly; the backend's changes end with it).
pub fn start(backend: &Arc<dyn Backend>) {
    let changes = backend.changes();
    let controller = Controller {
        backend: Arc::downgrade(backend),
        waiting_on: HashMap::new(),
        started: false,
    };
    tokio::spawn(controller::run(controller, changes));
}

struct Controller {
    backend: Weak<dyn Backend>,
    /// For each job (Framework name), the held jobs that wait for it.
    waiting_on: HashMap<String, HashSet<String>>,
    /// Whether the jobs were listed once.
    started: bool,
}

impl Reconcile for Controller {
    type Change = Changed;

    fn key(change: &Changed) -> String {
        change.name.clone()
    }

    async fn all(&mut self) -> Vec<Changed> {
        let first = !std::mem::replace(&mut self.started, true);
        let Some(backend) = self.backend.upgrade() else {
            return Vec::new();
        };
        match backend.list(None).await {
            Ok(all) => all
                .iter()
                .map(|f| Changed {
                    name: f.name().to_string(),
                    waits: depends::waits(f),
                })
                .collect(),
            // The server's copy of a cluster's jobs is still being read when the
            // controller starts: nothing is wrong, and every job it reads comes to the
            // controller as a change (it subscribed first).
            Err(e @ BackendError::Unavailable { .. }) if first => {
                tracing::debug!(error = %e, "the jobs are not read yet; each comes as a change once read");
                Vec::new()
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the jobs to look at their dependencies");
                Vec::new()
            }
        }
    }

    /// A job changed: itself when it names jobs it waits for, and the held jobs that
    /// wait for it. Jobs that neither wait nor are waited for cost a lookup in a map.
    async fn reconcile(&mut self, changed: Changed) -> Outcome<Changed> {
        let Some(backend) = self.backend.upgrade() else {
            return Outcome::Done;
        };
        let mut names = Vec::new();
        if changed.waits {
            names.push(changed.name.clone());
        }
        if let Some(dependents) = self.waiting_on.get(&changed.name) {
            names.extend(dependents.iter().cloned());
        }
        let mut done = true;
        for name in names {
            match backend.peek(&name) {
                Some(framework) => done &= self.look_at(backend.as_ref(), &framework).await,
                None => self.forget(&name),
            }
        }
        if done {
            Outcome::Done
        } else {
            Outcome::Retry(changed)
        }
    }
}

impl Controller {
    fn forget(&mut self, name: &str) {
        for dependents in self.waiting_on.values_mut() {
            dependents.remove(name);
        }
        self.waiting_on.retain(|_, d| !d.is_empty());
    }

    /// Decides for one held job; whether what it decided was written.
    async fn look_at(&mut self, backend: &dyn Backend, framework: &Framework) -> bool {
        let name = framework.name().to_string();
        // A released job whose attempt is being made may still have a pod created from
        // its gated template: released again (idempotent) until its tasks run.
        if depends::released(framework)
            && depends::waits(framework)
            && job_state(framework) == JobState::Waiting
        {
            return match backend.release(&name).await {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!(job = %name, error = %e, "cannot lift the hold of a released job's pods; trying again");
                    false
                }
            };
        }
        // Not held, or ended meanwhile (stopped while it waited): nothing to decide.
        if !depends::holds(framework) || job_state(framework).is_final() {
            self.forget(&name);
            return true;
        }
        let user = framework.user_name().unwrap_or_default().to_string();
        for dependency in depends::of(framework) {
            let on = pai_job::names::framework_name(&user, &dependency.job);
            self.waiting_on.entry(on).or_default().insert(name.clone());
        }
        match decide(framework, |n| backend.seen(n)) {
            Decision::Waiting(_) => true,
            Decision::Met => {
                tracing::info!(job = %name, "every job it waited for reached its state; it runs");
                match backend.release(&name).await {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::warn!(job = %name, error = %e, "cannot release a job whose dependencies were met; trying again");
                        false
                    }
                }
            }
            Decision::Failed(why) => {
                tracing::info!(job = %name, %why, "a job it waited for will not reach its state; it fails");
                match backend.refuse(&name, &why).await {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::warn!(job = %name, error = %e, "cannot fail a job whose dependency failed; trying again");
                        false
                    }
                }
            }
        }
    }
}
