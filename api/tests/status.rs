//! The job status users see, from hand-built Framework statuses.

use pai_test_support::specs as common;

use pai_api::status::{JobState, job_view};
use pai_contract::Framework;
use pai_test_support::frameworks::set_pod_ip;
use serde_json::{Value, json};

const BASE: &str = "/api/v1/user/alice/jobs/job";

/// The base job's Framework (ps ×2, worker ×2) with `change` applied to its JSON.
fn framework(change: impl FnOnce(&mut Value)) -> Framework {
    let framework = common::transform(&common::base_job().to_string(), 1).expect("transforms");
    let mut value = serde_json::to_value(&framework).expect("json");
    value["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
    change(&mut value);
    serde_json::from_value(value).expect("framework")
}

fn completed(value: &mut Value, code: i32, trigger: Option<(&str, i32)>) {
    value["status"]["state"] = json!("Completed");
    value["status"]["completionTime"] = json!("2026-01-01T00:10:00Z");
    let mut completion = json!({"code": code, "phrase": "x", "type": {"name": if code == 0 { "Succeeded" } else { "Failed" }, "attributes": []},
        "diagnostics": format!("exit code {code}")});
    if let Some((role, index)) = trigger {
        completion["trigger"] =
            json!({"message": "task completed", "taskRoleName": role, "taskIndex": index});
    }
    value["status"]["attemptStatus"]["completionStatus"] = completion;
}

fn condition<'a>(view: &'a pai_api::status::JobView, kind: &str) -> &'a pai_api::status::Condition {
    view.conditions
        .iter()
        .find(|c| c.kind == kind)
        .expect("condition")
}

#[test]
fn a_new_job_is_waiting() {
    let view = job_view(&framework(|_| {}), BASE);
    assert_eq!(view.name, "job");
    assert_eq!(view.job_status.username, "alice");
    assert_eq!(view.job_status.state, JobState::Waiting);
    assert_eq!(view.job_status.created_time, Some(1_767_225_600_000));
    assert_eq!(view.job_status.total_task_number, 4);
    assert!(
        view.task_roles["ps"]
            .task_statuses
            .iter()
            .all(|t| t.task_state == JobState::Waiting)
    );
    assert_eq!(condition(&view, "Submitted").status, "True");
    assert_eq!(condition(&view, "Running").status, "False");
}

#[test]
fn a_running_job_shows_its_tasks() {
    let view = job_view(
        &framework(|v| {
            v["status"]["state"] = json!("AttemptRunning");
            v["status"]["attemptStatus"]["runTime"] = json!("2026-01-01T00:01:00Z");
            set_pod_ip(v, "worker", 1, "10.0.0.7");
        }),
        BASE,
    );
    assert_eq!(view.job_status.state, JobState::Running);
    assert_eq!(view.job_status.sub_state, "AttemptRunning");
    // Its conditions in plain words; none claims what did not happen (no stop asked).
    let running = condition(&view, "Running");
    assert_eq!(
        (running.status.as_str(), running.reason.as_str()),
        ("True", "TasksRunning")
    );
    assert!(
        running.message.ends_with("tasks run (attempt 0)"),
        "{}",
        running.message
    );
    for kind in ["Succeeded", "Failed", "Stopped"] {
        let c = condition(&view, kind);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
            ("False", "NotEnded", "the job has not ended"),
            "{kind}"
        );
    }
    let task = &view.task_roles["worker"].task_statuses[1];
    assert_eq!(task.task_state, JobState::Running);
    assert_eq!(task.container_ip.as_deref(), Some("10.0.0.7"));
    assert_eq!(
        task.container_log,
        "/api/v1/user/alice/jobs/job/logs?role=worker&index=1"
    );
    assert_eq!(
        task.container_ports.keys().collect::<Vec<_>>(),
        ["http", "main", "ssh"]
    );
    let running = condition(&view, "Running");
    assert_eq!(
        (
            running.status.as_str(),
            running.last_transition_time.as_str()
        ),
        ("True", "2026-01-01T00:01:00Z")
    );
}

/// Every condition's time, by type, in the view's order.
fn transition_times(view: &pai_api::status::JobView) -> Vec<(&str, &str, &str)> {
    view.conditions
        .iter()
        .map(|c| {
            (
                c.kind.as_str(),
                c.status.as_str(),
                c.last_transition_time.as_str(),
            )
        })
        .collect()
}

#[test]
fn every_condition_has_a_transition_time() {
    const CREATED: &str = "2026-01-01T00:00:00Z";
    const RAN: &str = "2026-01-01T00:01:00Z";
    const ENDED: &str = "2026-01-01T00:10:00Z";
    let waiting = job_view(&framework(|_| {}), BASE);
    assert_eq!(
        transition_times(&waiting),
        [
            ("Submitted", "True", CREATED),
            ("Admitted", "False", CREATED),
            ("Running", "False", CREATED),
            ("Succeeded", "False", CREATED),
            ("Failed", "False", CREATED),
            ("Stopped", "False", CREATED),
        ]
    );
    let failed_after_running = job_view(
        &framework(|v| {
            v["status"]["attemptStatus"]["runTime"] = json!(RAN);
            completed(v, 3, Some(("worker", 1)));
        }),
        BASE,
    );
    assert_eq!(
        transition_times(&failed_after_running),
        [
            ("Submitted", "True", CREATED),
            ("Admitted", "True", RAN),
            ("Running", "False", ENDED),
            ("Succeeded", "False", CREATED),
            ("Failed", "True", ENDED),
            ("Stopped", "False", CREATED),
        ]
    );
    let stopped_before_running = job_view(
        &framework(|v| {
            v["spec"]["executionType"] = json!("Stop");
            completed(v, -210, None);
        }),
        BASE,
    );
    assert_eq!(
        transition_times(&stopped_before_running),
        [
            ("Submitted", "True", CREATED),
            ("Admitted", "False", CREATED),
            ("Running", "False", CREATED),
            ("Succeeded", "False", CREATED),
            ("Failed", "False", CREATED),
            ("Stopped", "True", ENDED),
        ]
    );
}

#[test]
fn completion_codes_decide_the_final_state() {
    let view = job_view(&framework(|v| completed(v, 0, None)), BASE);
    assert_eq!(view.job_status.state, JobState::Succeeded);
    assert_eq!(view.job_status.completed_time, Some(1_767_226_200_000));
    assert_eq!(view.job_status.app_exit_code, Some(0));
    assert_eq!(condition(&view, "Succeeded").status, "True");

    let view = job_view(&framework(|v| completed(v, 3, Some(("worker", 1)))), BASE);
    assert_eq!(view.job_status.state, JobState::Failed);
    assert_eq!(view.job_status.app_exit_code, Some(3));
    assert_eq!(
        view.job_status.app_exit_trigger_task_role_name.as_deref(),
        Some("worker")
    );
    assert_eq!(view.job_status.app_exit_trigger_task_index, Some(1));
    assert_eq!(
        view.job_status.app_exit_diagnostics.as_deref(),
        Some("exit code 3")
    );
    let failed = condition(&view, "Failed");
    assert_eq!(
        (
            failed.status.as_str(),
            failed.reason.as_str(),
            failed.message.as_str()
        ),
        (
            "True",
            "TaskFailed",
            "task worker-1 ended with exit code 3: exit code 3"
        )
    );
    // The other outcomes are false, and say only what is true: it failed.
    for kind in ["Succeeded", "Stopped"] {
        let c = condition(&view, kind);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
            ("False", "Failed", "the job ended FAILED"),
            "{kind}"
        );
    }
    let running = condition(&view, "Running");
    assert_eq!(
        (running.status.as_str(), running.reason.as_str()),
        ("False", "Ended")
    );

    let view = job_view(
        &framework(|v| {
            v["spec"]["executionType"] = json!("Stop");
            completed(v, -210, None);
        }),
        BASE,
    );
    assert_eq!(view.job_status.state, JobState::Stopped);
    assert_eq!(
        view.job_status.execution_type,
        pai_api::jobs::Execution::Stop
    );
    assert_eq!(condition(&view, "Stopped").status, "True");

    let view = job_view(
        &framework(|v| v["status"]["state"] = json!("Completed")),
        BASE,
    );
    assert_eq!(
        view.job_status.state,
        JobState::Unknown,
        "completed without a completion status"
    );
}

#[test]
fn retries_are_counted() {
    let view = job_view(
        &framework(|v| {
            v["status"]["state"] = json!("AttemptRunning");
            v["status"]["retryPolicyStatus"] =
                json!({"totalRetriedCount": 2, "accountableRetriedCount": 1});
        }),
        BASE,
    );
    assert_eq!(view.job_status.retries, 2);
}

#[test]
fn the_view_serialises_in_openpai_shape() {
    let view = job_view(&framework(|v| completed(v, 0, None)), BASE);
    let json = serde_json::to_value(&view).expect("json");
    assert_eq!(json["jobStatus"]["state"], "SUCCEEDED");
    assert_eq!(json["jobStatus"]["executionType"], "START");
    assert_eq!(json["taskRoles"]["ps"]["taskRoleStatus"]["name"], "ps");
    assert!(json["taskRoles"]["ps"]["taskStatuses"][0]["containerPorts"]["http"].is_string());
    assert_eq!(json["conditions"][0]["type"], "Submitted");
}

#[test]
fn a_waiting_job_says_what_holds_it_and_a_running_one_nothing() {
    let held = pai_api::waiting::Waiting {
        reason: "Unschedulable".into(),
        message: "6 of 6 pods cannot be placed: 0/2 nodes are available".into(),
        since: Some(1_767_225_660_000),
        until: None,
    };
    let view = pai_api::status::job_view_held(&framework(|_| {}), BASE, Some(&held));
    assert_eq!(view.job_status.state, JobState::Waiting);
    assert_eq!(view.job_status.waiting.as_ref(), Some(&held));
    let admitted = view.condition("Admitted").expect("Admitted");
    assert_eq!(
        (
            admitted.status.as_str(),
            admitted.reason.as_str(),
            admitted.message.as_str(),
            admitted.last_transition_time.as_str()
        ),
        (
            "False",
            "Unschedulable",
            "6 of 6 pods cannot be placed: 0/2 nodes are available",
            "2026-01-01T00:01:00Z"
        )
    );
    // Nothing said: the Framework's own state speaks, and is not a hold.
    let own = job_view(&framework(|_| {}), BASE)
        .job_status
        .waiting
        .expect("waiting");
    assert!(!own.is_held(), "{own}");
    // A job that ran is not waiting, whatever is said beside it.
    let done =
        pai_api::status::job_view_held(&framework(|v| completed(v, 0, None)), BASE, Some(&held));
    assert_eq!(done.job_status.waiting, None);
}

#[test]
fn a_stop_asked_of_a_running_job_is_said_until_it_ends() {
    let view = job_view(
        &framework(|v| {
            v["spec"]["executionType"] = json!("Stop");
            v["status"]["state"] = json!("AttemptRunning");
        }),
        BASE,
    );
    assert_eq!(view.job_status.state, JobState::Running);
    let stopped = condition(&view, "Stopped");
    assert_eq!(
        (stopped.status.as_str(), stopped.reason.as_str()),
        ("False", "Stopping")
    );
    let view = job_view(
        &framework(|v| {
            v["spec"]["executionType"] = json!("Stop");
            completed(v, -210, None);
        }),
        BASE,
    );
    let stopped = condition(&view, "Stopped");
    assert_eq!(
        (stopped.status.as_str(), stopped.reason.as_str()),
        ("True", "StoppedByUser")
    );
}

/// Between a failed attempt and its delayed retry (a conflict backs off) the job waits,
/// says what ended the attempt and when the next starts, and claims nothing runs.
#[test]
fn a_job_between_an_attempt_and_its_delayed_retry_waits_and_says_until_when() {
    let view = job_view(
        &framework(|v| {
            v["status"]["state"] = json!("AttemptCompleted");
            v["status"]["attemptStatus"]["runTime"] = json!("2026-01-01T00:01:00Z");
            v["status"]["attemptStatus"]["completionTime"] = json!("2026-01-01T00:11:00Z");
            v["status"]["attemptStatus"]["completionStatus"] = json!({"code": 201,
                "phrase": "ContainerTransientConflictFailed",
                "type": {"name": "Failed", "attributes": ["Transient", "Conflict"]},
                "diagnostics": "the barrier timed out"});
            v["status"]["retryPolicyStatus"]["retryDelaySec"] = json!(462);
        }),
        BASE,
    );
    assert_eq!(view.job_status.state, JobState::Waiting);
    let waiting = view.job_status.waiting.as_ref().expect("why it waits");
    assert_eq!(waiting.reason, "RetryDelay");
    assert_eq!(
        waiting.message,
        "attempt 0 ended with 201 (a conflict: a port taken, or the barrier timed out; retried later): the barrier timed out; attempt 1 starts 462 s after it (at 2026-01-01T00:18:42Z)"
    );
    let admitted = condition(&view, "Admitted");
    assert_eq!(
        (admitted.status.as_str(), admitted.reason.as_str()),
        ("False", "RetryDelay")
    );
    let running = condition(&view, "Running");
    assert_eq!(
        (
            running.status.as_str(),
            running.reason.as_str(),
            running.message.as_str()
        ),
        ("False", "AttemptEnded", waiting.message.as_str())
    );
    assert_eq!(running.last_transition_time, "2026-01-01T00:11:00Z");
}

/// While a failed attempt's pods are deleted (no retry decided yet), the job is RUNNING
/// as OpenPAI showed it, but its Running condition does not claim tasks run.
#[test]
fn an_ended_attempt_whose_pods_are_deleted_runs_nothing() {
    let view = job_view(
        &framework(|v| {
            v["status"]["state"] = json!("AttemptDeletionPending");
            v["status"]["attemptStatus"]["runTime"] = json!("2026-01-01T00:01:00Z");
            v["status"]["attemptStatus"]["completionStatus"] = json!({"code": 3, "phrase": "x",
                "type": {"name": "Failed", "attributes": []}});
        }),
        BASE,
    );
    assert_eq!(view.job_status.state, JobState::Running);
    let running = condition(&view, "Running");
    assert_eq!(
        (running.status.as_str(), running.message.as_str()),
        (
            "False",
            "attempt 0 ended with 3 (the user command exited with code 3); its tasks are being stopped"
        )
    );
    assert_eq!(
        condition(&view, "Admitted").message,
        "attempt 0 was placed and started"
    );
}

/// After the user's stop, FrameworkController ends every task with −220 and the attempt
/// with −210: the tasks read as stopped by the user, not by another task's decision.
#[test]
fn the_tasks_of_a_stopped_job_say_the_job_was_stopped() {
    let view = job_view(
        &framework(|v| {
            v["spec"]["executionType"] = json!("Stop");
            set_pod_ip(v, "worker", 0, "10.0.0.7");
            let task = &mut v["status"]["attemptStatus"]["taskRoleStatuses"][0]["taskStatuses"][0];
            task["state"] = json!("Completed");
            task["attemptStatus"]["completionStatus"] = json!({"code": -220,
                "phrase": "FrameworkAttemptCompletion", "type": {"name": "Failed", "attributes": []}});
            completed(v, -210, None);
        }),
        BASE,
    );
    assert_eq!(view.job_status.state, JobState::Stopped);
    let task = &view.task_roles["worker"].task_statuses[0];
    assert_eq!(task.container_exit_code, Some(-220));
    assert_eq!(
        task.container_exit_meaning.as_deref(),
        Some("stopped by the platform: the job was stopped")
    );
}

/// On a cluster the cause travels as the kubelet's termination message of the main
/// container, which FrameworkController copies into the task's completion status: the
/// view reads it there, for the task and for the job it ended.
#[test]
fn the_cause_a_task_sent_is_its_own_and_the_jobs() {
    let message = pai_contract::results::message(
        Err(std::io::ErrorKind::NotFound.into()),
        Some(pai_contract::failure::Cause {
            pattern: "cuda-out-of-memory".into(),
            line: "torch.cuda.OutOfMemoryError: CUDA out of memory".into(),
        }),
    )
    .expect("a message");
    let view = job_view(
        &framework(|v| {
            set_pod_ip(v, "worker", 1, "10.0.0.7");
            let task = &mut v["status"]["attemptStatus"]["taskRoleStatuses"][0]["taskStatuses"][0];
            task["state"] = json!("Completed");
            task["attemptStatus"]["completionStatus"] = json!({
                "code": 1, "phrase": "ContainerFailed",
                "type": {"name": "Failed", "attributes": []},
                "diagnostics": "[ExitCode]: 1",
                "pod": {"containers": [{"name": "main", "code": 1, "message": message}]}
            });
            completed(v, 1, Some(("worker", 1)));
        }),
        BASE,
    );
    let task = &view.task_roles["worker"].task_statuses[1];
    let cause = task
        .container_exit_cause
        .as_ref()
        .expect("the task's cause");
    assert_eq!(cause.pattern, "cuda-out-of-memory");
    assert_eq!(view.job_status.app_exit_cause.as_ref(), Some(cause));
    assert_eq!(task.result, None, "a cause is no result");
    // A succeeded job has no cause, whatever a task said.
    let view = job_view(&framework(|v| completed(v, 0, Some(("worker", 1)))), BASE);
    assert_eq!(view.job_status.app_exit_cause, None);
}

/// Both tasks of `worker` ended before they were placed (their image not pulled), as this
/// machine's backend leaves them: a status, the pod's name, no pod.
fn never_placed(v: &mut Value) {
    let not_started = |index: i32| {
        let pod = pai_contract::framework::pod_name(
            v["metadata"]["name"].as_str().unwrap_or_default(),
            "worker",
            index as u32,
        );
        json!({"index": index, "state": "Completed",
            "attemptStatus": {"id": 0, "podName": pod, "completionTime": "2026-01-01T00:10:00Z",
                "completionStatus": {"code": -200, "phrase": "x",
                    "type": {"name": "Failed", "attributes": []},
                    "diagnostics": "not started: ErrImagePull: image example.org/app is not on this machine"}}})
    };
    let tasks = json!([{"name": "worker", "taskStatuses": [not_started(0), not_started(1)]}]);
    completed(v, -200, None);
    v["status"]["attemptStatus"]["taskRoleStatuses"] = tasks;
}

/// A task that never had a pod shows no ports (none were drawn for it: the role's plan is
/// no task's), and says why it has no log; a task with no status yet shows the plan.
#[test]
fn a_task_that_never_had_a_pod_shows_no_ports_and_says_why_it_has_no_log() {
    let framework = framework(never_placed);
    let view = job_view(&framework, BASE);
    assert_eq!(view.job_status.state, JobState::Failed);
    for task in &view.task_roles["worker"].task_statuses {
        assert!(
            task.container_ports.is_empty(),
            "worker-{}: {:?}",
            task.task_index,
            task.container_ports
        );
        assert_eq!(task.container_ip, None);
    }
    let json = serde_json::to_value(&view).expect("json");
    assert_eq!(
        json["taskRoles"]["worker"]["taskStatuses"][1]["containerPorts"],
        json!({})
    );
    // No status at all (a cluster's task before its controller wrote one): the plan.
    assert!(
        !view.task_roles["ps"].task_statuses[0]
            .container_ports
            .is_empty()
    );
    assert_eq!(
        pai_api::status::never_started(&framework, "worker", 1).as_deref(),
        Some(
            "task worker-1 of job alice~job never started: attempt 0 ended before it ran (ErrImagePull: image example.org/app is not on this machine)"
        )
    );
    assert_eq!(pai_api::status::never_started(&framework, "ps", 0), None);
    // A task that was placed keeps its ports and may have a log.
    let placed = self::framework(|v| {
        never_placed(v);
        set_pod_ip(v, "worker", 1, "10.0.0.7");
    });
    let view = job_view(&placed, BASE);
    assert!(
        !view.task_roles["worker"].task_statuses[1]
            .container_ports
            .is_empty()
    );
    assert!(
        view.task_roles["worker"].task_statuses[0]
            .container_ports
            .is_empty()
    );
    assert_eq!(pai_api::status::never_started(&placed, "worker", 1), None);
}
