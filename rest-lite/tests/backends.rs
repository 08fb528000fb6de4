//! One suite of API scenarios, run against both backends through the real `rest-lite
//! serve` process and the typed client: over Kubernetes (the in-process API server, the
//! test playing FrameworkController by writing status and logs) and over this machine
//! (real task processes). Each task of the suite's jobs prints a line, then waits for its
//! exit code on a FIFO (the "gate"), so the test decides when and how it ends.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use futures::StreamExt;
use serde_json::json;

use pai_api::jobs::Execution;
use pai_api::status::{JobState, JobView};
use pai_client::{Client, ClientError, ErrorCode, Source};
use pai_contract::framework::CompletionStatus;
use pai_test_support::ApiServer;
use pai_test_support::frameworks::{address, set_pod_ip};
use pai_translate::spec::SpecFormat;

use common::serve::{DEADLINE, Server};

const NS: &str = "jobs";
const ALICE: &str = "alice-secret";
const BOB: &str = "bob-secret";
const OPS: &str = "ops-secret";
/// What every task prints first.
const HELLO: &str = "hello from worker";

enum Place {
    /// The test plays FrameworkController on this API server.
    Kube(ApiServer),
    /// Real processes.
    Local,
}

struct Harness {
    place: Place,
    server: Server,
    // Last: removed once the server has stopped.
    dir: common::Scratch,
}

fn token_file(dir: &Path) -> PathBuf {
    use pai_server::auth::hash;
    let path = dir.join("tokens.yaml");
    std::fs::write(
        &path,
        format!(
            "users:\n  - {{name: alice, tokenSha256: {}}}\n  - {{name: bob, tokenSha256: {}}}\n  - {{name: ops, tokenSha256: {}, admin: true}}\n",
            hash(ALICE),
            hash(BOB),
            hash(OPS)
        ),
    )
    .expect("token file");
    path
}

fn scratch(name: &str) -> common::Scratch {
    common::scratch("suite", name)
}

impl Harness {
    async fn kube(name: &str) -> Self {
        let dir = scratch(&format!("kube-{name}"));
        let api = ApiServer::start().await;
        let kubeconfig = dir.join("kubeconfig");
        api.write_kubeconfig(&kubeconfig, Some(NS));
        let server = Server::start_kube(&kubeconfig, NS, &token_file(&dir));
        Self {
            place: Place::Kube(api),
            server,
            dir,
        }
    }

    async fn local(name: &str) -> Self {
        let dir = scratch(&format!("local-{name}"));
        let server = Server::start_with_tokens(&dir.join("state"), &token_file(&dir));
        Self {
            place: Place::Local,
            server,
            dir,
        }
    }

    fn client(&self, token: &str) -> Client {
        Client::new(&self.server.url, Some(token.to_string()))
    }

    fn gate(&self, user: &str, job: &str) -> PathBuf {
        self.dir.join(format!("gate-{user}-{job}"))
    }

    /// A one-task job whose task prints [`HELLO`] and then exits with what its gate says.
    fn spec(&self, user: &str, job: &str) -> String {
        let gate = self.gate(user, job);
        if !gate.exists() {
            let made = Command::new("mkfifo").arg(&gate).status().expect("mkfifo");
            assert!(made.success());
        }
        json!({
            "jobName": job, "image": "busybox",
            "taskRoles": [{"name": "worker", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128,
                "command": "echo hello from $PAI_CURRENT_TASK_ROLE_NAME; read code < \"$GATE\"; exit $code"}],
            "jobEnvs": {"GATE": gate.display().to_string()},
        })
        .to_string()
    }

    async fn submit(&self, token: &str, user: &str, job: &str) -> Result<String, ClientError> {
        let client = self.client(token);
        let spec = self.spec(user, job);
        client
            .submit(user, &spec, SpecFormat::Json)
            .await
            .map(|m| m.message)
    }

    /// The Framework of `user`'s `job`, as the test server stores it.
    fn framework_name(user: &str, job: &str) -> String {
        pai_job::names::framework_name(user, job)
    }

    /// The job's only task runs: its pod has an address.
    async fn running(&self, user: &str, job: &str) {
        match &self.place {
            Place::Kube(api) => api.modify("frameworks", NS, &Self::framework_name(user, job), |f| {
                f["status"]["state"] = json!("AttemptRunning");
                f["status"]["attemptStatus"]["runTime"] = json!("2026-01-01T00:00:01Z");
                set_pod_ip(f, "worker", 0, &address(0, 0));
                f["status"]["attemptStatus"]["taskRoleStatuses"][0]["taskStatuses"][0]["attemptStatus"]["podUID"] = json!("pod-0");
            }),
            Place::Local => {
                let mut views = self.client(OPS).watch(user, job).await.expect("watch");
                let run = async {
                    while let Some(view) = views.next().await {
                        if view.expect("view").job_status.state == JobState::Running {
                            return;
                        }
                    }
                    panic!("the watch ended before the job ran");
                };
                tokio::time::timeout(DEADLINE, run).await.expect("running");
            }
        }
    }

    /// The task printed [`HELLO`] (on Kubernetes: the test writes its pod's log).
    fn said_hello(&self, user: &str, job: &str) {
        if let Place::Kube(api) = &self.place {
            // As the runtime writes: its `entry` in the init container, then `run`'s lines
            // around the user's output in the main container.
            let pod = format!("{}-worker-0", Self::framework_name(user, job));
            api.append_container_log(
                NS,
                &pod,
                pai_contract::framework::INIT_CONTAINER,
                "[runtime INFO] 2026-01-01T00:00:01Z barrier passed: every task has an address\n",
            );
            api.append_log(
                NS,
                &pod,
                &format!(
                    "[runtime INFO] 2026-01-01T00:00:02Z user command started pid=7\n{HELLO}\n"
                ),
            );
            api.end_log(NS, &pod);
        }
    }

    /// The task exits with `code`, and the job completes by its policy.
    async fn exit(&self, user: &str, job: &str, code: i32) {
        match &self.place {
            Place::Kube(api) => self.complete(api, user, job, code),
            Place::Local => {
                let gate = self.gate(user, job);
                // Opening blocks until the task reads its gate.
                tokio::task::spawn_blocking(move || std::fs::write(gate, format!("{code}\n")))
                    .await
                    .expect("join")
                    .expect("write the gate");
            }
        }
    }

    fn complete(&self, api: &ApiServer, user: &str, job: &str, code: i32) {
        api.modify("frameworks", NS, &Self::framework_name(user, job), |f| {
            f["status"]["state"] = json!("Completed");
            f["status"]["completionTime"] = json!("2026-01-01T00:00:09Z");
            f["status"]["attemptStatus"]["completionStatus"] =
                serde_json::to_value(CompletionStatus::of(code, format!("exit code {code}")))
                    .expect("json");
        });
    }

    /// Submits `job`, which waits for `depends_on` (`[{job, state}]`).
    async fn submit_waiting(
        &self,
        user: &str,
        job: &str,
        depends_on: serde_json::Value,
    ) -> Result<String, ClientError> {
        let mut spec: serde_json::Value =
            serde_json::from_str(&self.spec(user, job)).expect("spec");
        spec["dependsOn"] = depends_on;
        self.client(ALICE)
            .submit(user, &spec.to_string(), SpecFormat::Json)
            .await
            .map(|m| m.message)
    }

    /// The job no longer waits for the jobs it depends on: on Kubernetes its Framework
    /// says they were met and its pod template has no gate left; here its task runs.
    async fn released(&self, user: &str, job: &str) {
        match &self.place {
            Place::Kube(api) => {
                let released = tokio::time::timeout(
                    DEADLINE,
                    api.wait_for("frameworks", NS, &Self::framework_name(user, job), |f| {
                        f["metadata"]["annotations"][pai_job::depends::RELEASED].is_string()
                    }),
                )
                .await
                .expect("released in time");
                assert!(
                    released["spec"]["taskRoles"][0]["task"]["pod"]["spec"]["schedulingGates"]
                        .is_null(),
                    "{released:#}"
                );
            }
            Place::Local => self.running(user, job).await,
        }
    }

    /// The server stopped the job (its dependency failed): on Kubernetes the test then
    /// completes the stop as FrameworkController does; here the backend does it all.
    async fn stopped_by_the_server(&self, user: &str, job: &str) {
        if let Place::Kube(api) = &self.place {
            tokio::time::timeout(
                DEADLINE,
                api.wait_for("frameworks", NS, &Self::framework_name(user, job), |f| {
                    f["spec"]["executionType"] == "Stop"
                }),
            )
            .await
            .expect("stopped in time");
            self.stop_carried_out(user, job);
        }
    }

    /// The server restarted: the same API server or state directory, a new process.
    fn restarted(self) -> Self {
        let Harness { place, server, dir } = self;
        server.kill();
        let server = match &place {
            Place::Kube(_) => Server::start_kube(&dir.join("kubeconfig"), NS, &token_file(&dir)),
            Place::Local => Server::start_with_tokens(&dir.join("state"), &token_file(&dir)),
        };
        Harness { place, server, dir }
    }

    /// After a stop request: on Kubernetes the test completes the attempt as
    /// FrameworkController would; here the backend does it itself.
    fn stop_carried_out(&self, user: &str, job: &str) {
        if let Place::Kube(api) = &self.place {
            self.complete(
                api,
                user,
                job,
                pai_contract::exit::codes::STOP_FRAMEWORK_REQUESTED,
            );
        }
    }
}

/// Every view of a watch until it ends.
async fn views_until_the_end(
    mut views: futures::stream::BoxStream<'static, Result<JobView, ClientError>>,
) -> Vec<JobView> {
    let mut seen = Vec::new();
    let collect = async {
        while let Some(view) = views.next().await {
            seen.push(view.expect("a view"));
        }
    };
    tokio::time::timeout(DEADLINE, collect)
        .await
        .expect("the watch ends");
    seen
}

fn api_error<T>(result: Result<T, ClientError>) -> (u16, ErrorCode) {
    match result {
        Err(ClientError::Api { status, code, .. }) => (status, code),
        Err(other) => panic!("expected an API error, got {other}"),
        Ok(_) => panic!("expected an API error, got a success"),
    }
}

/// The view of `user`'s `job` once `done` holds for it.
async fn view_once(h: &Harness, user: &str, job: &str, done: impl Fn(&JobView) -> bool) -> JobView {
    let mut views = h.client(OPS).watch(user, job).await.expect("watch");
    let until = async {
        while let Some(view) = views.next().await {
            let view = view.expect("a view");
            if done(&view) {
                return view;
            }
        }
        panic!("the watch of {job} ended first");
    };
    tokio::time::timeout(DEADLINE, until)
        .await
        .expect("in time")
}

/// A three-job pipeline: each waits (WAITING, reason Dependencies) until the one before
/// it succeeded, then runs.
async fn a_pipeline_runs_job_after_job(h: &Harness) {
    h.submit(ALICE, "alice", "prep").await.expect("prep");
    h.submit_waiting("alice", "train", json!([{"job": "prep"}]))
        .await
        .expect("train");
    h.submit_waiting(
        "alice",
        "eval",
        json!([{"job": "train", "state": "SUCCEEDED"}]),
    )
    .await
    .expect("eval");
    let train = h.client(ALICE).job("alice", "train").await.expect("train");
    assert_eq!(train.job_status.state, JobState::Waiting);
    let waiting = train.job_status.waiting.clone().expect("why it waits");
    assert_eq!(waiting.reason, "Dependencies");
    assert!(
        waiting
            .message
            .starts_with("waits for job prep to be SUCCEEDED (it is "),
        "{}",
        waiting.message
    );
    assert!(
        train
            .condition("Admitted")
            .is_some_and(|c| c.status == "False" && c.reason == "Dependencies"),
        "{:?}",
        train.conditions
    );
    if let Place::Kube(api) = &h.place {
        // Its pods would wait at the scheduler: the gate is in every pod template, and
        // what it waits for is pinned to prep's Framework.
        let framework = api
            .get("frameworks", NS, &Harness::framework_name("alice", "train"))
            .expect("train's Framework");
        assert_eq!(
            framework["spec"]["taskRoles"][0]["task"]["pod"]["spec"]["schedulingGates"],
            json!([{"name": pai_job::depends::GATE}])
        );
        let prep = api
            .get("frameworks", NS, &Harness::framework_name("alice", "prep"))
            .expect("prep's Framework");
        let pinned: Vec<pai_job::depends::Dependency> = serde_json::from_str(
            framework["metadata"]["annotations"][pai_job::depends::ANNOTATION]
                .as_str()
                .expect("the dependencies"),
        )
        .expect("JSON");
        assert_eq!(pinned[0].uid.as_deref(), prep["metadata"]["uid"].as_str());
        // FrameworkController made a pod from the gated template meanwhile.
        api.create(
            "pods",
            NS,
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "train-worker-0", "namespace": NS,
                    "labels": {pai_contract::framework::LABEL_FRAMEWORK_NAME: Harness::framework_name("alice", "train")}},
                "spec": {"containers": [{"name": "main", "image": "busybox"}],
                    "schedulingGates": [{"name": pai_job::depends::GATE}, {"name": "kueue.x-k8s.io/admission"}]}}),
        );
    }
    h.running("alice", "prep").await;
    h.said_hello("alice", "prep");
    h.exit("alice", "prep", 0).await;
    h.released("alice", "train").await;
    if let Place::Kube(api) = &h.place {
        // Its gate lifted, another's kept.
        let pod = tokio::time::timeout(
            DEADLINE,
            api.wait_for("pods", NS, "train-worker-0", |p| {
                p["spec"]["schedulingGates"]
                    .as_array()
                    .is_some_and(|g| g.len() == 1)
            }),
        )
        .await
        .expect("the pod's gate lifted in time");
        assert_eq!(
            pod["spec"]["schedulingGates"],
            json!([{"name": "kueue.x-k8s.io/admission"}])
        );
    }
    let eval = h.client(ALICE).job("alice", "eval").await.expect("eval");
    assert_eq!(
        eval.job_status.state,
        JobState::Waiting,
        "train runs, eval waits"
    );
    h.running("alice", "train").await;
    h.exit("alice", "train", 0).await;
    h.released("alice", "eval").await;
    h.running("alice", "eval").await;
    h.exit("alice", "eval", 0).await;
    let done = view_once(h, "alice", "eval", |v| v.job_status.state.is_final()).await;
    assert_eq!(done.job_status.state, JobState::Succeeded);
}

/// A job whose dependency ended otherwise, or was deleted, ends FAILED saying so; one
/// that waited for that very state runs.
async fn a_job_fails_when_its_dependency_cannot_reach_the_state(h: &Harness) {
    h.submit(ALICE, "alice", "x").await.expect("x");
    h.submit_waiting("alice", "y", json!([{"job": "x"}]))
        .await
        .expect("y");
    h.submit_waiting("alice", "cleanup", json!([{"job": "x", "state": "FAILED"}]))
        .await
        .expect("cleanup");
    h.running("alice", "x").await;
    h.exit("alice", "x", 3).await;
    h.stopped_by_the_server("alice", "y").await;
    let y = view_once(h, "alice", "y", |v| v.job_status.state.is_final()).await;
    assert_eq!(y.job_status.state, JobState::Failed);
    assert_eq!(
        y.job_status.app_exit_diagnostics.as_deref(),
        Some("job x ended FAILED; this job waited for it to be SUCCEEDED")
    );
    assert!(
        y.condition("Failed")
            .is_some_and(|c| c.status == "True" && c.reason == "DependencyFailed"),
        "{:?}",
        y.conditions
    );
    h.released("alice", "cleanup").await;

    // Deleted while waited for.
    h.submit(ALICE, "alice", "p").await.expect("p");
    h.submit_waiting("alice", "q", json!([{"job": "p"}]))
        .await
        .expect("q");
    h.client(ALICE).delete("alice", "p").await.expect("deleted");
    h.stopped_by_the_server("alice", "q").await;
    let q = view_once(h, "alice", "q", |v| v.job_status.state.is_final()).await;
    assert_eq!(q.job_status.state, JobState::Failed);
    assert_eq!(
        q.job_status.app_exit_diagnostics.as_deref(),
        Some("job p, which this job waited for to be SUCCEEDED, was deleted")
    );
}

/// Refused at submission, nothing made: a job that does not exist, the job itself, a
/// job that ended in another state.
async fn a_dependency_that_cannot_be_waited_for_is_refused(h: &Harness) {
    let refused = |result: Result<String, ClientError>| match result {
        Err(ClientError::Api {
            status: 400,
            message,
            ..
        }) => message,
        other => panic!("expected a 400, got {other:?}"),
    };
    let message = refused(
        h.submit_waiting("alice", "a", json!([{"job": "nosuch"}]))
            .await,
    );
    assert!(
        message.contains("dependsOn[0].job: user alice has no job \"nosuch\""),
        "{message}"
    );
    // Another user's job is not one to wait for, nor is its existence told.
    h.submit(BOB, "bob", "bobs").await.expect("bob's job");
    let message = refused(
        h.submit_waiting("alice", "a", json!([{"job": "bobs"}]))
            .await,
    );
    assert!(
        message.contains("dependsOn[0].job: user alice has no job \"bobs\""),
        "{message}"
    );
    let message = refused(h.submit_waiting("alice", "a", json!([{"job": "a"}])).await);
    assert!(
        message.contains("dependsOn[0].job: a job cannot wait for itself"),
        "{message}"
    );
    let message = refused(
        h.submit_waiting("alice", "a", json!([{"job": "x", "state": "DONE"}]))
            .await,
    );
    assert!(
        message.contains("dependsOn[0].state: \"DONE\" is not SUCCEEDED, FAILED or STOPPED"),
        "{message}"
    );
    h.submit(ALICE, "alice", "b").await.expect("b");
    h.running("alice", "b").await;
    h.exit("alice", "b", 0).await;
    view_once(h, "alice", "b", |v| v.job_status.state.is_final()).await;
    let message = refused(
        h.submit_waiting("alice", "a", json!([{"job": "b", "state": "FAILED"}]))
            .await,
    );
    assert!(
        message
            .contains("job \"b\" ended SUCCEEDED; this job would wait for it to be FAILED forever"),
        "{message}"
    );
    assert_eq!(
        api_error(h.client(ALICE).job("alice", "a").await),
        (404, ErrorCode::NoJobError),
        "nothing was made"
    );
    // One whose dependencies are met already runs at once.
    h.submit_waiting("alice", "c", json!([{"job": "b"}]))
        .await
        .expect("c");
    h.released("alice", "c").await;
}

/// A restart while a job waits loses nothing: the new server releases it.
async fn a_restart_while_waiting(h: Harness) {
    h.submit(ALICE, "alice", "first").await.expect("first");
    h.submit_waiting("alice", "second", json!([{"job": "first"}]))
        .await
        .expect("second");
    let h = h.restarted();
    let second = h
        .client(ALICE)
        .job("alice", "second")
        .await
        .expect("second");
    assert_eq!(second.job_status.state, JobState::Waiting);
    assert_eq!(
        second.job_status.waiting.map(|w| w.reason).as_deref(),
        Some("Dependencies")
    );
    h.running("alice", "first").await;
    h.exit("alice", "first", 0).await;
    h.released("alice", "second").await;
    // A restarted server reads the jobs before it can list them: the dependency
    // controller, which starts meanwhile, takes each as it is read, and warns of nothing.
    let log = h.server.log();
    assert!(!log.contains("cannot list the jobs"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_kubernetes_a_restart_while_waiting_loses_nothing() {
    a_restart_while_waiting(Harness::kube("restart_waiting").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_this_machine_a_restart_while_waiting_loses_nothing() {
    a_restart_while_waiting(Harness::local("restart_waiting").await).await;
}

async fn create_then_conflict(h: &Harness) {
    assert_eq!(
        h.submit(ALICE, "alice", "one").await.expect("first"),
        "job one submitted"
    );
    assert_eq!(
        api_error(h.submit(ALICE, "alice", "one").await),
        (409, ErrorCode::ConflictJobError)
    );
}

/// Every page of a list, with and without filters, is the full list cut where it says:
/// the v2 API's offsets, the v1 API's `continue` tokens and the portal's pages.
async fn pages_and_filters_agree_with_the_full_list(h: &Harness) {
    const JOBS: usize = 11;
    for i in 0..JOBS {
        let job = format!("p{i:02}");
        h.submit(ALICE, "alice", &job).await.expect("submitted");
        // Every third fails, every third succeeds, the rest run on.
        if i % 3 != 2 {
            h.running("alice", &job).await;
            h.exit("alice", &job, if i % 3 == 0 { 3 } else { 0 }).await;
            view_once(h, "alice", &job, |v| v.job_status.state.is_final()).await;
        }
    }
    let url = &h.server.url;
    let get = |path: &str| {
        let answer = common::request(
            url,
            "GET",
            path,
            &[("Authorization", &format!("Bearer {OPS}"))],
            "",
        );
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
        answer
    };
    let jobs_of = |path: &str| -> Vec<(String, String)> {
        let list: serde_json::Value = serde_json::from_str(&get(path).body).expect("json");
        list.as_array()
            .expect("a list")
            .iter()
            .map(|j| {
                (
                    j["name"].as_str().unwrap_or_default().to_string(),
                    j["state"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    };
    let full = jobs_of("/api/v2/jobs?limit=1000");
    assert_eq!(full.len(), JOBS, "{full:?}");
    // Newest first; a cluster's creation times are whole seconds, by name among equals.
    let names: Vec<&str> = full.iter().map(|(n, _)| n.as_str()).collect();
    let submitted: Vec<String> = (0..JOBS).map(|i| format!("p{i:02}")).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, submitted);
    let mut paged = Vec::new();
    for offset in (0..JOBS).step_by(4) {
        paged.extend(jobs_of(&format!("/api/v2/jobs?limit=4&offset={offset}")));
    }
    assert_eq!(paged, full, "v2 pages of 4");
    for state in ["FAILED", "SUCCEEDED", "RUNNING"] {
        let filtered = jobs_of(&format!("/api/v2/jobs?state={state}&limit=2&offset=1"));
        let expected: Vec<(String, String)> = full
            .iter()
            .filter(|(_, s)| s == state)
            .skip(1)
            .take(2)
            .cloned()
            .collect();
        assert_eq!(filtered, expected, "v2 {state}, second page of 2");
    }
    let searched = jobs_of("/api/v2/jobs?keyword=p0&order=jobName,ASC");
    let expected: Vec<&String> = submitted.iter().filter(|n| n.contains("p0")).collect();
    assert_eq!(
        searched.iter().map(|(n, _)| n).collect::<Vec<_>>(),
        expected,
        "v2 keyword, by name"
    );
    // v1: pages of 3 by their `continue` tokens, in the `Link` header.
    let mut v1 = Vec::new();
    let mut next = Some("/api/v1/jobs?limit=3".to_string());
    while let Some(path) = next.take() {
        let answer = get(&path);
        let list: Vec<pai_api::jobs::JobSummary> =
            serde_json::from_str(&answer.body).expect("json");
        assert!(list.len() <= 3, "{path}");
        v1.extend(list.into_iter().map(|j| j.name));
        next = answer.header("link").map(|link| {
            link.trim_start_matches('<')
                .split_once('>')
                .expect("a link")
                .0
                .to_string()
        });
    }
    let v1_full: Vec<pai_api::jobs::JobSummary> =
        serde_json::from_str(&get("/api/v1/jobs").body).expect("json");
    let v1_full: Vec<String> = v1_full.into_iter().map(|j| j.name).collect();
    assert_eq!(v1, v1_full, "v1 pages of 3");
    // The portal: 50 rows a page; all here, and a second page asked for is the last.
    let portal = get("/ui/jobs?page=2").body;
    assert!(
        portal.contains(&format!("Jobs 1–{JOBS} of {JOBS}")),
        "{portal}"
    );
    assert!(!portal.contains("next page"), "{portal}");
}

async fn lists_show_each_user_their_own(h: &Harness) {
    h.submit(ALICE, "alice", "mine").await.expect("alice's");
    h.submit(OPS, "bob", "his")
        .await
        .expect("an admin submits for bob");
    let names = |list: Vec<pai_api::jobs::JobSummary>| {
        let mut names: Vec<String> = list.into_iter().map(|j| j.name).collect();
        names.sort();
        names
    };
    let alice = h.client(ALICE);
    assert_eq!(
        names(alice.jobs(Some("alice")).await.expect("list")),
        ["mine"]
    );
    assert_eq!(names(alice.jobs(None).await.expect("list")), ["mine"]);
    assert!(alice.jobs(Some("bob")).await.expect("list").is_empty());
    let ops = h.client(OPS);
    assert_eq!(names(ops.jobs(None).await.expect("list")), ["his", "mine"]);
    assert_eq!(names(ops.jobs(Some("bob")).await.expect("list")), ["his"]);
}

async fn a_watch_ends_at_the_final_state(h: &Harness) {
    h.submit(ALICE, "alice", "w").await.expect("submitted");
    h.running("alice", "w").await;
    let views = h.client(ALICE).watch("alice", "w").await.expect("watch");
    h.exit("alice", "w", 3).await;
    let seen = views_until_the_end(views).await;
    let last = seen.last().expect("a view");
    assert_eq!(last.job_status.state, JobState::Failed, "{last:?}");
    assert_eq!(last.job_status.app_exit_code, Some(3));
    assert!(
        seen[..seen.len() - 1]
            .iter()
            .all(|v| !v.job_status.state.is_final()),
        "the final view is the last"
    );
}

async fn a_watch_ends_when_the_job_is_deleted(h: &Harness) {
    h.submit(ALICE, "alice", "gone").await.expect("submitted");
    h.running("alice", "gone").await;
    let client = h.client(ALICE);
    let views = client.watch("alice", "gone").await.expect("watch");
    client.delete("alice", "gone").await.expect("deleted");
    let seen = views_until_the_end(views).await;
    assert!(
        seen.iter().all(|v| !v.job_status.state.is_final()),
        "{seen:?}"
    );
    assert_eq!(
        api_error(client.job("alice", "gone").await),
        (404, ErrorCode::NoJobError)
    );
}

async fn stop_and_start_follow_the_rules(h: &Harness) {
    h.submit(ALICE, "alice", "s").await.expect("submitted");
    h.running("alice", "s").await;
    let client = h.client(ALICE);
    client
        .execution("alice", "s", Execution::Start)
        .await
        .expect("START while running");
    let views = client.watch("alice", "s").await.expect("watch");
    assert_eq!(
        client.stop("alice", "s").await.expect("STOP").message,
        "job s is stopping"
    );
    h.stop_carried_out("alice", "s");
    let last = views_until_the_end(views).await.pop().expect("a view");
    assert_eq!(last.job_status.state, JobState::Stopped, "{last:?}");
    assert_eq!(
        last.job_status.execution_type,
        pai_api::jobs::Execution::Stop
    );
    assert_eq!(
        api_error(client.execution("alice", "s", Execution::Start).await),
        (409, ErrorCode::ConflictJobError)
    );
    client
        .stop("alice", "s")
        .await
        .expect("STOP of a stopped job changes nothing");
}

async fn delete_frees_the_name(h: &Harness) {
    h.submit(ALICE, "alice", "again").await.expect("submitted");
    h.running("alice", "again").await;
    let client = h.client(ALICE);
    let views = client.watch("alice", "again").await.expect("watch");
    client.delete("alice", "again").await.expect("deleted");
    views_until_the_end(views).await;
    h.submit(ALICE, "alice", "again")
        .await
        .expect("the name is free again");
}

async fn logs_are_the_tasks_output(h: &Harness) {
    h.submit(ALICE, "alice", "talk").await.expect("submitted");
    h.running("alice", "talk").await;
    h.said_hello("alice", "talk");
    h.exit("alice", "talk", 0).await;
    let client = h.client(ALICE);
    let read =
        |source: Source| common::task_log(&client, ("alice", "talk"), ("worker", 0), true, source);
    // The user's output alone by default; the runtime's lines apart (with the barrier's,
    // kept in the init container's log on a cluster); both when asked.
    let text = read(Source::User).await;
    assert!(text.contains(HELLO), "{text}");
    assert!(!text.contains("[runtime "), "{text}");
    let runtime = read(Source::Runtime).await;
    assert!(
        runtime.contains("barrier passed") && runtime.contains("user command started"),
        "{runtime}"
    );
    assert!(
        runtime.lines().all(|l| l.starts_with("[runtime INFO] ")),
        "{runtime}"
    );
    let all = read(Source::All).await;
    assert!(
        all.contains(HELLO) && all.contains("user command started"),
        "{all}"
    );
    assert_eq!(
        api_error(
            client
                .logs("alice", "talk", "worker", 1, false, Source::User)
                .await
        ),
        (404, ErrorCode::NoTaskError),
        "no such task: the job exists, the task does not"
    );
    match client
        .attempt_logs("alice", "talk", "worker", 0, 1, Source::User)
        .await
    {
        Err(ClientError::Api {
            status: 404,
            message,
            ..
        }) => assert!(message.contains("no attempt 1"), "{message}"),
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("the job has one attempt"),
    }
}

/// On a cluster FrameworkController's status holds only the current attempt: the server
/// keeps each ended one on the Framework (an annotation) before the next replaces it,
/// and the job says how each ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_kubernetes_each_ended_attempt_is_kept_on_the_framework() {
    let h = Harness::kube("history").await;
    h.submit(ALICE, "alice", "flaky").await.expect("submitted");
    let Place::Kube(api) = &h.place else {
        unreachable!()
    };
    let name = Harness::framework_name("alice", "flaky");
    // Attempt 0 ends on a port conflict of worker-0; the controller waits to retry.
    api.modify("frameworks", NS, &name, |f| {
        f["status"]["state"] = json!("AttemptCompleted");
        f["status"]["retryPolicyStatus"]["retryDelaySec"] = json!(5);
        let mut completion = CompletionStatus::of(
            pai_contract::exit::codes::CONTAINER_TRANSIENT_CONFLICT_FAILED,
            "port 44438 (label http) is already in use",
        );
        completion.trigger = Some(pai_contract::framework::CompletionTrigger {
            message: "the task failed".into(),
            task_role_name: Some("worker".into()),
            task_index: Some(0),
        });
        f["status"]["attemptStatus"]["completionStatus"] =
            serde_json::to_value(completion).expect("json");
        f["status"]["attemptStatus"]["completionTime"] = json!("2026-01-01T00:00:05Z");
    });
    let written = api
        .wait_for("frameworks", NS, &name, |f| {
            f["metadata"]["annotations"][pai_job::attempts::ANNOTATION].is_string()
        })
        .await;
    let history: Vec<pai_job::attempts::AttemptEnd> = serde_json::from_str(
        written["metadata"]["annotations"][pai_job::attempts::ANNOTATION]
            .as_str()
            .expect("text"),
    )
    .expect("the history");
    assert_eq!(history.len(), 1);
    assert_eq!((history[0].attempt, history[0].code), (0, 201));
    // The controller starts attempt 1: its status replaces attempt 0's.
    api.modify("frameworks", NS, &name, |f| {
        f["status"]["state"] = json!("AttemptRunning");
        f["status"]["retryPolicyStatus"] =
            json!({"totalRetriedCount": 1, "accountableRetriedCount": 0});
        f["status"]["attemptStatus"] =
            json!({"id": 1, "startTime": "2026-01-01T00:00:10Z", "taskRoleStatuses": []});
    });
    let client = h.client(ALICE);
    let mut changes = client.watch("alice", "flaky").await.expect("watch");
    let view = loop {
        let view = changes.next().await.expect("a change").expect("a view");
        if view.job_status.retries == 1 {
            break view;
        }
    };
    let attempts = &view.job_status.attempts;
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(
        attempts[0].line(),
        "attempt 0 failed: task worker-0: a conflict: a port taken, or the barrier timed out; retried later (exit code 201): port 44438 (label http) is already in use; retried as attempt 1"
    );
    // Another server (a restart, a replica) reads the same history from the Framework.
    drop(changes);
    let other = Server::start_kube(&h.dir.join("kubeconfig"), NS, &token_file(&h.dir));
    let again = Client::new(&other.url, Some(ALICE.to_string()))
        .job("alice", "flaky")
        .await
        .expect("job");
    assert_eq!(again.job_status.attempts, view.job_status.attempts);
}

/// A task's pod preempted, evicted or drained away: FrameworkController ends the attempt
/// with PodExternalDeleted (a transient failure, retried without spending a retry), and the
/// attempt's end in the job's history names who did it, from the condition the engine
/// wrote on the pod before deleting it (here kube-scheduler's, as the real one writes it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_kubernetes_an_attempt_ended_by_a_preemption_says_who_ended_it() {
    let h = Harness::kube("preempted").await;
    h.submit(ALICE, "alice", "borrower")
        .await
        .expect("submitted");
    h.running("alice", "borrower").await;
    let Place::Kube(api) = &h.place else {
        unreachable!()
    };
    let name = Harness::framework_name("alice", "borrower");
    api.create(
        "pods",
        NS,
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("{name}-worker-0"), "namespace": NS,
                "labels": {
                    pai_contract::framework::LABEL_FRAMEWORK_NAME: name,
                    pai_contract::meta::LABEL_MANAGED_BY: pai_contract::meta::MANAGED_BY,
                },
                "annotations": {pai_contract::env::fc::FRAMEWORK_ATTEMPT_ID: "0"},
                "deletionTimestamp": "2026-01-01T00:00:04Z"},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
            "status": {"phase": "Running", "conditions": [{"type": "DisruptionTarget",
                "status": "True", "reason": "PreemptionByScheduler",
                "message": "default-scheduler: preempting to accommodate a higher priority pod"}]}}),
    );
    api.modify("frameworks", NS, &name, |f| {
        f["status"]["state"] = json!("AttemptCompleted");
        f["status"]["attemptStatus"]["completionStatus"] =
            serde_json::to_value(CompletionStatus::of(
                pai_contract::exit::codes::POD_EXTERNAL_DELETED,
                "Pod is being deleted by others",
            ))
            .expect("json");
        f["status"]["attemptStatus"]["completionTime"] = json!("2026-01-01T00:00:05Z");
    });
    let ended_by = |f: &serde_json::Value| -> Option<String> {
        let text = f["metadata"]["annotations"][pai_job::attempts::ANNOTATION].as_str()?;
        let history: Vec<pai_job::attempts::AttemptEnd> = serde_json::from_str(text).ok()?;
        history.first()?.ended_by.clone()
    };
    let written = tokio::time::timeout(
        DEADLINE,
        api.wait_for("frameworks", NS, &name, |f| ended_by(f).is_some()),
    )
    .await
    .expect("the attempt's end says who ended it in time");
    assert_eq!(
        ended_by(&written).as_deref(),
        Some(
            "kube-scheduler, preempting for a pod of a higher priority (PreemptionByScheduler): default-scheduler: preempting to accommodate a higher priority pod"
        )
    );
    // The server's view, once its copy has the write.
    let mut views = h
        .client(ALICE)
        .watch("alice", "borrower")
        .await
        .expect("watch");
    let said = async {
        while let Some(view) = views.next().await {
            let view = view.expect("view");
            if let Some(end) = view.job_status.attempts.first()
                && end.ended_by.is_some()
            {
                return end.line();
            }
        }
        panic!("the watch ended before the view said who ended the attempt");
    };
    let line = tokio::time::timeout(DEADLINE, said)
        .await
        .expect("the view");
    assert!(
        line.contains("Pod is being deleted by others; ended by kube-scheduler, preempting"),
        "{line}"
    );
}

/// On a cluster a task's result is its main container's termination message, which
/// FrameworkController copies into the task's completion status: the job's status reads
/// it from the Framework alone (a message of the user's own, not the runtime's envelope,
/// is no result: `pai_contract::results`' tests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_kubernetes_a_tasks_result_comes_from_its_termination_message() {
    let h = Harness::kube("results").await;
    h.submit(ALICE, "alice", "scored").await.expect("submitted");
    h.running("alice", "scored").await;
    let Place::Kube(api) = &h.place else {
        unreachable!()
    };
    let name = Harness::framework_name("alice", "scored");
    let sent = pai_contract::results::message(Ok(br#"{"accuracy": 0.93}"#.to_vec()), None)
        .expect("a message");
    api.modify("frameworks", NS, &name, |f| {
        f["status"]["state"] = json!("Completed");
        let mut completion = CompletionStatus::of(0, "the main container exited with code 0");
        completion.pod = Some(pai_contract::framework::PodCompletionStatus {
            containers: vec![
                pai_contract::framework::ContainerCompletionStatus {
                    name: pai_contract::framework::INIT_CONTAINER.into(),
                    ..Default::default()
                },
                pai_contract::framework::ContainerCompletionStatus {
                    name: pai_contract::framework::MAIN_CONTAINER.into(),
                    reason: Some("Completed".into()),
                    message: Some(sent.clone()),
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        let task = &mut f["status"]["attemptStatus"]["taskRoleStatuses"][0]["taskStatuses"][0];
        task["state"] = json!("Completed");
        task["attemptStatus"]["completionStatus"] =
            serde_json::to_value(&completion).expect("json");
        f["status"]["attemptStatus"]["completionStatus"] =
            serde_json::to_value(CompletionStatus::of(0, "done")).expect("json");
    });
    let client = h.client(ALICE);
    let mut changes = client.watch("alice", "scored").await.expect("watch");
    let view = loop {
        let view = changes.next().await.expect("a change").expect("a view");
        if view.job_status.state.is_final() {
            break view;
        }
    };
    let task = &view.task_roles["worker"].task_statuses[0];
    assert_eq!(task.result, Some(json!({"accuracy": 0.93})));
    assert_eq!(task.result_error, None);
}

/// On a cluster, an earlier attempt's pod (and its log) is gone: the answer says so
/// rather than serving the current attempt's log under the old number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_kubernetes_an_earlier_attempts_log_is_gone_and_said_so() {
    let h = Harness::kube("earlier_attempt").await;
    h.submit(ALICE, "alice", "again").await.expect("submitted");
    let Place::Kube(api) = &h.place else {
        unreachable!()
    };
    api.modify(
        "frameworks",
        NS,
        &Harness::framework_name("alice", "again"),
        |f| {
            f["status"]["attemptStatus"]["id"] = json!(1);
            f["status"]["retryPolicyStatus"]["totalRetriedCount"] = json!(1);
        },
    );
    let client = h.client(ALICE);
    // The server's copy shows the new attempt before the old one's log is asked for.
    let mut changes = client.watch("alice", "again").await.expect("watch");
    while let Some(view) = changes.next().await {
        if view.expect("a view").job_status.retries == 1 {
            break;
        }
    }
    match client
        .attempt_logs("alice", "again", "worker", 0, 0, Source::User)
        .await
    {
        Err(ClientError::Api {
            status: 404,
            code,
            message,
            ..
        }) => {
            assert_eq!(code, ErrorCode::NoLogError);
            assert!(
                message.contains("attempt 0") && message.contains("no longer on the cluster"),
                "{message}"
            );
        }
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("attempt 0's pod is gone"),
    }
}

async fn others_never_see_a_job(h: &Harness) {
    h.submit(ALICE, "alice", "private")
        .await
        .expect("submitted");
    assert_eq!(
        api_error(h.submit(BOB, "alice", "sneaky").await),
        (403, ErrorCode::ForbiddenUserError)
    );
    let bob = h.client(BOB);
    let not_found = (404, ErrorCode::NoJobError);
    assert_eq!(api_error(bob.job("alice", "private").await), not_found);
    assert_eq!(api_error(bob.ssh("alice", "private").await), not_found);
    assert_eq!(api_error(bob.stop("alice", "private").await), not_found);
    assert_eq!(api_error(bob.delete("alice", "private").await), not_found);
    assert_eq!(
        api_error(
            bob.logs("alice", "private", "worker", 0, false, Source::User)
                .await
        ),
        not_found
    );
    assert_eq!(api_error(bob.watch("alice", "private").await), not_found);
    let view = h
        .client(ALICE)
        .job("alice", "private")
        .await
        .expect("alice sees it");
    assert_eq!(
        view.job_status.execution_type,
        pai_api::jobs::Execution::Start,
        "bob changed nothing"
    );
    let anonymous = Client::new(&h.server.url, None);
    assert_eq!(
        api_error(anonymous.jobs(None).await),
        (401, ErrorCode::UnauthorizedUserError)
    );
}

macro_rules! on_both_backends {
    ($($scenario:ident),* $(,)?) => {
        mod on_kubernetes {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario(&super::Harness::kube(stringify!($scenario)).await).await;
                }
            )*
        }
        mod on_this_machine {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario(&super::Harness::local(stringify!($scenario)).await).await;
                }
            )*
        }
    };
}

on_both_backends!(
    create_then_conflict,
    lists_show_each_user_their_own,
    pages_and_filters_agree_with_the_full_list,
    a_watch_ends_at_the_final_state,
    a_watch_ends_when_the_job_is_deleted,
    stop_and_start_follow_the_rules,
    delete_frees_the_name,
    logs_are_the_tasks_output,
    a_pipeline_runs_job_after_job,
    a_job_fails_when_its_dependency_cannot_reach_the_state,
    a_dependency_that_cannot_be_waited_for_is_refused,
    others_never_see_a_job,
);

/// On a cluster the job's key pair is a Secret the Framework owns (the garbage
/// collector deletes it with the Framework), served to the job's owner alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_kubernetes_the_job_key_is_a_secret_the_framework_owns() {
    let h = Harness::kube("job_key").await;
    h.submit(ALICE, "alice", "keyed").await.expect("submitted");
    let Place::Kube(api) = &h.place else {
        unreachable!()
    };
    let name = Harness::framework_name("alice", "keyed");
    let framework = api.get("frameworks", NS, &name).expect("framework");
    let secret = api
        .get("secrets", NS, &format!("{name}-ssh"))
        .expect("the key Secret");
    let owner = &secret["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "Framework");
    assert_eq!(owner["uid"], framework["metadata"]["uid"]);
    // The pods mount it in the init container, which copies the key for the task.
    let pod = &framework["spec"]["taskRoles"][0]["task"]["pod"]["spec"];
    assert_eq!(
        pod["volumes"][3]["secret"]["secretName"],
        format!("{name}-ssh")
    );
    let key = h
        .client(ALICE)
        .ssh_key("alice", "keyed")
        .await
        .expect("key");
    assert!(
        key.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----"),
        "{key}"
    );
    assert_eq!(
        api_error(h.client(BOB).ssh_key("alice", "keyed").await),
        (404, ErrorCode::NoJobError),
        "another user never gets the key"
    );
}

/// A Framework whose key Secret cannot be made is deleted again: the submission fails
/// and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_kubernetes_a_refused_key_secret_undoes_the_submission() {
    let h = Harness::kube("job_key_refused").await;
    let Place::Kube(api) = &h.place else {
        unreachable!()
    };
    api.reject_creates_of("secrets", "secrets \"x\" is forbidden by a policy");
    let (status, _) = api_error(h.submit(ALICE, "alice", "unkeyed").await);
    assert!(status >= 400, "{status}");
    assert!(
        api.get(
            "frameworks",
            NS,
            &Harness::framework_name("alice", "unkeyed")
        )
        .is_none(),
        "the Framework is deleted again"
    );
}
