//! What a restarted server takes up of the attempts the previous one left: the tasks whose
//! containers outlived it are followed, those it left in their init step start again
//! ([`adoptable`]); whatever else it left running is ended.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use pai_contract::framework::Framework;

use crate::job::{Inner, Job};
use crate::lifecycle;
use crate::procs::{self, ProcessId};
use crate::task;

/// How a restarted server takes up an open attempt whose containers outlived the previous
/// server, instead of failing and retrying it.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Adoption {
    /// Tasks whose main container runs (or ran, its end kept by the engine): followed.
    /// Role, index, container.
    pub follow: Vec<(String, u32, String)>,
    /// Tasks the previous server left in their init step (on this machine, ended with
    /// it): the init step runs again, then the main container, with the same pod, ports
    /// and GPUs, as a kubelet restarts an init container. Role, index, pod UID.
    pub again: Vec<(String, u32, String)>,
}

/// After a restart, in container mode: how the open attempt's unfinished tasks are taken
/// up ([`Adoption`]), when each of them either has its main container among `existing`
/// (a previous server started it and it outlived it) or had not reached its main step
/// (`task_root`'s [`task::MAIN_STARTED`] missing). A task whose container is gone after it
/// started has an end nobody can read: the attempt is then failed and retried.
pub(super) fn adoptable(
    framework: &Framework,
    existing: &std::collections::HashSet<String>,
    task_root: impl Fn(&str, u32) -> std::path::PathBuf,
) -> Option<Adoption> {
    if framework.metadata.deletion_timestamp.is_some() || !lifecycle::tasks_started(framework) {
        return None;
    }
    let mut adoption = Adoption::default();
    for (role, index, pod_uid) in unfinished_tasks(framework) {
        let pod_uid = pod_uid?;
        let name = crate::containers::main_name(&pod_uid);
        if existing.contains(&name) {
            adoption.follow.push((role, index, name));
        } else if !task_root(&role, index).join(task::MAIN_STARTED).exists() {
            adoption.again.push((role, index, pod_uid));
        } else {
            return None;
        }
    }
    (!adoption.follow.is_empty() || !adoption.again.is_empty()).then_some(adoption)
}

/// At start, the containers a previous server left: where containers outlive servers,
/// the jobs whose open attempt can be taken up ([`adoptable`]) keep theirs and are
/// returned with how; every other container of this server goes (its attempt is then
/// failed and retried, as host processes' are).
pub(crate) async fn follow_or_remove(
    inner: &Inner,
    engine: &crate::containers::Engine,
    frameworks: &[Framework],
) -> HashMap<String, Adoption> {
    let mut adopted = HashMap::new();
    let existing: std::collections::HashSet<String> = match engine.names(true).await {
        Ok(names) => names.into_iter().collect(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot list the previous server's containers");
            return adopted;
        }
    };
    let mut kept = std::collections::HashSet::new();
    if engine.outlive_server {
        for framework in frameworks {
            let name = framework.metadata.name.clone().unwrap_or_default();
            let attempt = framework.attempt_id();
            let root = |role: &str, index| inner.store.task_root(&name, attempt, role, index);
            if let Some(adoption) = adoptable(framework, &existing, root) {
                kept.extend(adoption.follow.iter().map(|(_, _, c)| c.clone()));
                adopted.insert(name, adoption);
            }
        }
    }
    let gone: Vec<String> = existing.into_iter().filter(|n| !kept.contains(n)).collect();
    if !gone.is_empty() {
        tracing::warn!(
            containers = gone.len(),
            "containers of a previous server that no job follows; removing them"
        );
        engine.remove(&gone).await;
    }
    if !adopted.is_empty() {
        tracing::info!(
            jobs = adopted.len(),
            containers = kept.len(),
            "following the running containers of a previous server"
        );
    }
    adopted
}

/// The open attempt's tasks that have not completed: role, index, pod UID.
fn unfinished_tasks(
    framework: &Framework,
) -> impl Iterator<Item = (String, u32, Option<String>)> + '_ {
    framework
        .status
        .as_ref()
        .and_then(|s| s.attempt_status.task_role_statuses.as_deref())
        .unwrap_or_default()
        .iter()
        .flat_map(|role| {
            role.task_statuses
                .iter()
                .filter(|t| t.state != pai_contract::framework::FrameworkState::Completed)
                .filter_map(move |t| {
                    Some((
                        role.name.clone(),
                        u32::try_from(t.index).ok()?,
                        t.attempt_status.pod_uid.clone(),
                    ))
                })
        })
}

/// After a restart, before the job's loop starts: ends whatever the previous
/// server left running of the open attempt (the state machine then completes that
/// attempt as failed and retries it by the retry policy).
pub(crate) async fn end_leftovers(inner: &Arc<Inner>, job: &Arc<Job>) {
    end_leftovers_of(inner, &job.current(), |_, _| true).await;
}

/// Ends what the previous server left running of the open attempt's tasks that `which`
/// takes (role, index).
pub(super) async fn end_leftovers_of(
    inner: &Inner,
    framework: &Framework,
    which: impl Fn(&str, u32) -> bool,
) {
    if !lifecycle::tasks_started(framework) {
        return;
    }
    let name = framework.metadata.name.clone().unwrap_or_default();
    let attempt = framework.attempt_id();
    let mut left = Vec::new();
    let roles = framework
        .status
        .as_ref()
        .and_then(|s| s.attempt_status.task_role_statuses.as_deref())
        .unwrap_or_default();
    // Each task's record, with the pod UID the task was started with (in one pass).
    for role in roles {
        for task in &role.task_statuses {
            let Ok(index) = u32::try_from(task.index) else {
                continue;
            };
            if !which(&role.name, index) {
                continue;
            }
            let pod_uid = task.attempt_status.pod_uid.clone().unwrap_or_default();
            let record = inner.store.pid_file(&name, attempt, &role.name, index);
            let Some(process) = std::fs::read_to_string(&record)
                .ok()
                .and_then(|text| text.parse::<ProcessId>().ok())
            else {
                continue;
            };
            match process.leftover_task(&pod_uid) {
                Ok(()) => left.push(process),
                Err(why) => {
                    // Its leader gone, what it started may be left in its group.
                    let orphans = process.orphans(&pod_uid);
                    if orphans.is_empty() {
                        tracing::warn!(record = %record.display(), %process, why, "process record not believed; nothing signalled");
                    }
                    left.extend(orphans);
                }
            }
        }
    }
    if !left.is_empty() {
        tracing::warn!(job = %name, processes = left.len(), "tasks of the previous server still run; ending them");
        let _ = tokio::task::spawn_blocking(move || {
            for process in &left {
                procs::kill_tree(*process);
            }
            for process in left {
                procs::wait_gone(process, Duration::from_secs(10));
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job_loop::LOCAL_ADDRESS;
    use crate::lifecycle::{Event, Placement};

    /// `fw`'s three workers placed (pods `pod-0`…`pod-2`), task 2 completed when `ended`.
    fn placed(ended: bool) -> Framework {
        let mut framework = pai_test_support::frameworks::framework("fw", &[("worker", 3)]);
        let mut n = 0;
        let mut uid = || {
            n += 1;
            format!("uid-{n}")
        };
        let mut cx = lifecycle::Context {
            now: "2026-11-28T10:00:00Z".to_string(),
            conflict_delay: Duration::ZERO,
            restart: Default::default(),
            uid: &mut uid,
            note: "",
        };
        lifecycle::step(&mut framework, Event::Resumed, &mut cx);
        let placements = (0..3)
            .map(|index| Placement {
                role: "worker".into(),
                index,
                pod_uid: format!("pod-{index}"),
                address: LOCAL_ADDRESS.to_string(),
                node: "localhost".into(),
            })
            .collect();
        lifecycle::step(&mut framework, Event::Placed(placements), &mut cx);
        if ended {
            let completed = Event::TaskCompleted {
                attempt: framework.attempt_id(),
                role: "worker".into(),
                index: 2,
                code: 0,
                diagnostics: String::new(),
                message: None,
                reason: None,
            };
            lifecycle::step(&mut framework, completed, &mut cx);
        }
        framework
    }

    /// Whether each unfinished task's container is there or its main step was reached
    /// decides whether a restarted server takes the attempt up, and how.
    #[test]
    fn an_attempt_is_taken_up_when_each_task_is_followed_or_still_in_its_init_step() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let root = |_: &str, index: u32| dir.path().join(index.to_string());
        for index in 0..3 {
            std::fs::create_dir(root("worker", index)).expect("task directory");
        }
        let existing = |pods: &[u32]| -> std::collections::HashSet<String> {
            pods.iter()
                .map(|i| crate::containers::main_name(&format!("pod-{i}")))
                .collect()
        };
        let name = |i: u32| crate::containers::main_name(&format!("pod-{i}"));
        let worker = |i: u32, third: String| ("worker".to_string(), i, third);

        // Task 0 runs; tasks 1 and 2 never reached their main step: they start again.
        let adoption = adoptable(&placed(false), &existing(&[0]), root).expect("taken up");
        assert_eq!(adoption.follow, [worker(0, name(0))]);
        assert_eq!(
            adoption.again,
            [worker(1, "pod-1".into()), worker(2, "pod-2".into())]
        );
        // A completed task is neither followed nor started again.
        let adoption = adoptable(&placed(true), &existing(&[0]), root).expect("taken up");
        assert_eq!(adoption.again, [worker(1, "pod-1".into())]);
        // Task 1's container started and is gone: its end cannot be known.
        std::fs::write(root("worker", 1).join(task::MAIN_STARTED), "").expect("mark");
        assert_eq!(adoptable(&placed(false), &existing(&[0]), root), None);
        assert!(adoptable(&placed(false), &existing(&[0, 1]), root).is_some());
        // Deleted: nothing is taken up.
        let mut deleted = placed(false);
        deleted.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
        );
        assert_eq!(adoptable(&deleted, &existing(&[0, 1, 2]), root), None);
    }
}
