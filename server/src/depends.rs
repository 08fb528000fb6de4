//! Jobs that wait for jobs ([`pai_contract::depends`]), on either backend: the checks at
//! submission, why a held job waits (its view), and the small controller that releases
//! a held job once every job it waits for reached its state, or ends it FAILED once one
//! never will.
//!
//! The controller is level-triggered from the backend's changes: a change of a job looks
//! again at that job and at the held jobs that wait for it (an index kept as they are
//! seen); missed changes, and the start, look at every job. What it decides is written on
//! the Frameworks themselves (the backends' `release` and `refuse`), so a restarted server
//! or a second replica goes on from there; both write the same.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;

use pai_api::dependencies::{Decision, decide};
use pai_api::status::{JobState, job_state};
use pai_api::waiting::Waiting;
use pai_contract::Framework;
use pai_contract::depends::{self, Dependency};

use crate::backend::{Backend, BackendError};
use crate::error::ApiError;

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
pub async fn resolve(backend: &dyn Backend, framework: &mut Framework) -> Result<(), ApiError> {
    let mut dependencies = depends::of(framework);
    if dependencies.is_empty() {
        return Ok(());
    }
    let user = framework.user_name().unwrap_or_default().to_string();
    let own = framework.job_name().unwrap_or_default().to_string();
    let field = |i: usize| format!("dependsOn[{i}].job");
    let mut all_met = true;
    for (i, dependency) in dependencies.iter_mut().enumerate() {
        let name = pai_contract::names::framework_name(&user, &dependency.job);
        let found = backend.get(&name).await?.ok_or_else(|| {
            ApiError::bad_request(format!(
                "{}: user {user} has no job {:?} to wait for",
                field(i),
                dependency.job
            ))
        })?;
        let now = job_state(&found);
        let wanted = dependency.state.as_str();
        if now.is_final() && !now.is(dependency.state) {
            return Err(ApiError::bad_request(format!(
                "{}: job {:?} ended {now}; this job would wait for it to be {wanted} forever",
                field(i),
                dependency.job
            )));
        }
        all_met &= now.is(dependency.state);
        if let Some(path) = cycle(backend, &user, &own, &found).await? {
            return Err(ApiError::bad_request(format!(
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
) -> Result<Option<Vec<String>>, ApiError> {
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
            let name = pai_contract::names::framework_name(user, &job);
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

/// Releases or fails held jobs as their dependencies change, while the backend runs.
pub async fn run(backend: Arc<dyn Backend>) {
    let Some(mut changes) = backend.changes() else {
        return;
    };
    let mut controller = Controller {
        backend,
        waiting_on: HashMap::new(),
    };
    controller.look_at_all(Start::First).await;
    while let Some(change) = changes.next().await {
        match change {
            Some(changed) => controller.changed(changed).await,
            None => controller.look_at_all(Start::Again).await,
        }
    }
}

/// Whether the controller looks at every job as it starts, or again after it missed
/// changes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Start {
    First,
    Again,
}

struct Controller {
    backend: Arc<dyn Backend>,
    /// For each job (Framework name), the held jobs that wait for it.
    waiting_on: HashMap<String, HashSet<String>>,
}

impl Controller {
    async fn look_at_all(&mut self, start: Start) {
        let all = match self.backend.list(None).await {
            Ok(all) => all,
            // The server's copy of a cluster's jobs is still being read when the
            // controller starts: nothing is wrong, and every job it reads comes to the
            // controller as a change (it subscribed first).
            Err(e @ BackendError::Unavailable { .. }) if start == Start::First => {
                tracing::debug!(error = %e, "the jobs are not read yet; each comes as a change once read");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the jobs to look at their dependencies");
                return;
            }
        };
        for framework in all {
            self.look_at(&framework).await;
        }
    }

    /// A job changed: itself when it names jobs it waits for, and the held jobs that
    /// wait for it. Jobs that neither wait nor are waited for cost a lookup in a map.
    async fn changed(&mut self, changed: crate::backend::Changed) {
        let mut names = Vec::new();
        if changed.waits {
            names.push(changed.name.clone());
        }
        if let Some(dependents) = self.waiting_on.get(&changed.name) {
            names.extend(dependents.iter().cloned());
        }
        for name in names {
            match self.backend.peek(&name) {
                Some(framework) => self.look_at(&framework).await,
                None => self.forget(&name),
            }
        }
    }

    fn forget(&mut self, name: &str) {
        for dependents in self.waiting_on.values_mut() {
            dependents.remove(name);
        }
        self.waiting_on.retain(|_, d| !d.is_empty());
    }

    async fn look_at(&mut self, framework: &Framework) {
        let name = framework.metadata.name.clone().unwrap_or_default();
        // A released job whose attempt is being made may still have a pod created from
        // its gated template: released again (idempotent) until its tasks run.
        if depends::released(framework)
            && depends::waits(framework)
            && job_state(framework) == JobState::Waiting
        {
            if let Err(e) = self.backend.release(&name).await {
                tracing::warn!(job = %name, error = %e, "cannot lift the hold of a released job's pods");
            }
            return;
        }
        // Not held, or ended meanwhile (stopped while it waited): nothing to decide.
        if !depends::holds(framework) || job_state(framework).is_final() {
            self.forget(&name);
            return;
        }
        let user = framework.user_name().unwrap_or_default().to_string();
        for dependency in depends::of(framework) {
            let on = pai_contract::names::framework_name(&user, &dependency.job);
            self.waiting_on.entry(on).or_default().insert(name.clone());
        }
        let backend = self.backend.clone();
        match decide(framework, |n| backend.seen(n)) {
            Decision::Waiting(_) => {}
            Decision::Met => {
                tracing::info!(job = %name, "every job it waited for reached its state; it runs");
                if let Err(e) = self.backend.release(&name).await {
                    tracing::warn!(job = %name, error = %e, "cannot release a job whose dependencies were met; trying again at its next change");
                }
            }
            Decision::Failed(why) => {
                tracing::info!(job = %name, %why, "a job it waited for will not reach its state; it fails");
                if let Err(e) = self.backend.refuse(&name, &why).await {
                    tracing::warn!(job = %name, error = %e, "cannot fail a job whose dependency failed; trying again at its next change");
                }
            }
        }
    }
}
