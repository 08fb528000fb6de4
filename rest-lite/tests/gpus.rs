//! GPUs on the embedded default, with the real `rest-lite serve` and a stated inventory of
//! three GPUs (the config's `gpus.devices`; no device is opened, so this runs on any
//! machine): each task gets its own, a job that does not fit what is free waits whole
//! and says who holds them, one larger than the machine is refused with both numbers,
//! a restart keeps each task's GPUs, and the job's view says which a task holds.
//! `scripts/gpu-check.sh` does the same with a real GPU and PyTorch.

use crate::common;

use std::path::{Path, PathBuf};

use pai_client::ClientError;
use pai_translate::spec::SpecFormat;
use serde_json::{Value, json};

use common::fifo::{events, next_event};
use common::serve::Server;

const UUIDS: [&str; 3] = [
    "GPU-00000000-0000-0000-0000-00000000aaaa",
    "GPU-00000000-0000-0000-0000-00000000bbbb",
    "GPU-00000000-0000-0000-0000-00000000cccc",
];

/// A config stating three H100s, and the types H100 and V100.
fn config(dir: &Path) -> PathBuf {
    let devices: Vec<String> = UUIDS
        .iter()
        .enumerate()
        .map(|(i, uuid)| {
            format!("    - {{index: {i}, uuid: {uuid}, memoryMib: 81559, model: NVIDIA H100 80GB HBM3}}\n")
        })
        .collect();
    let path = dir.join("config.yaml");
    std::fs::write(
        &path,
        format!(
            "gpus:\n  types:\n    H100: {{nodeSelector: {{gpu: h100}}}}\n    V100: {{nodeSelector: {{gpu: v100}}}}\n  devices:\n{}",
            devices.concat()
        ),
    )
    .expect("config");
    path
}

fn serve(dir: &Path) -> Server {
    Server::start_with_config(&dir.join("state"), &config(dir))
}

/// Reports its attempt, index and GPUs into `$EVENTS_DIR/a<attempt>/events`, then waits.
const REPORT_THEN_WAIT: &str = r#"exec 3>"$EVENTS_DIR/a$FC_FRAMEWORK_ATTEMPT_ID/events"
echo "up $PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX $CUDA_VISIBLE_DEVICES $NVIDIA_VISIBLE_DEVICES" >&3
while :; do sleep 1 & wait $!; done"#;

fn spec(name: &str, tasks: u32, gpus: u32, extra: Value) -> String {
    let mut spec = json!({
        "jobName": name, "image": "busybox", "retryCount": 1,
        "taskRoles": [{"name": "worker", "taskNumber": tasks, "cpuNumber": 1, "memoryMB": 128,
                       "gpuNumber": gpus, "command": REPORT_THEN_WAIT}],
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    spec.to_string()
}

/// A directory per attempt, each with its FIFO.
fn attempts(dir: &Path, n: usize) -> Vec<std::sync::mpsc::Receiver<Option<String>>> {
    (0..n)
        .map(|a| {
            let d = dir.join(format!("a{a}"));
            std::fs::create_dir_all(&d).expect("dir");
            events(&d).1
        })
        .collect()
}

/// Each task's "index cuda nvidia" line of one attempt, by index.
fn reports(rx: &std::sync::mpsc::Receiver<Option<String>>, tasks: usize) -> Vec<(String, String)> {
    let mut out = vec![(String::new(), String::new()); tasks];
    for _ in 0..tasks {
        let line = next_event(rx).expect("a task reports");
        let fields: Vec<&str> = line.split(' ').collect();
        let [_, index, cuda, nvidia] = fields[..] else {
            panic!("{line:?}");
        };
        out[index.parse::<usize>().expect("index")] = (cuda.to_string(), nvidia.to_string());
    }
    out
}

/// Waits until `job` is WAITING for this machine's slots or GPUs: its message.
async fn queued(client: &pai_client::Client, job: &str) -> String {
    use futures::StreamExt;
    let mut changes = client.watch("alice", job).await.expect("watch");
    loop {
        let view = changes.next().await.expect("a view").expect("readable");
        if let Some(waiting) = view.job_status.waiting.filter(|w| w.reason == "Queued") {
            return waiting.message;
        }
    }
}

async fn refused(client: &pai_client::Client, spec: &str) -> String {
    match client.submit("alice", spec, SpecFormat::Json).await {
        Err(ClientError::Api {
            status, message, ..
        }) => {
            assert!((400..500).contains(&status), "{status}: {message}");
            message
        }
        other => panic!("not refused: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_task_holds_its_own_gpus_a_job_waits_for_them_and_a_restart_keeps_them() {
    let dir = common::scratch("gpus", "three");
    let (first_dir, second_dir) = (dir.join("first"), dir.join("second"));
    let first_rx = attempts(&first_dir, 2);
    let second_rx = attempts(&second_dir, 1);
    let server = serve(&dir);
    let client = server.client();

    // Larger than the machine, or of a type it does not have: refused, with the numbers.
    let message = refused(&client, &spec("big", 1, 4, json!({}))).await;
    assert!(
        message.contains("asks for 4 GPUs (1 task × 4); this machine has 3"),
        "{message}"
    );
    // The portal's Check (a dry run) answers as the submission does.
    let token = format!("Bearer {}", server.token.as_deref().expect("token"));
    let check = common::request(
        &server.url,
        "POST",
        "/api/v1/user/alice/jobs?dryRun=true",
        &[
            ("Authorization", token.as_str()),
            ("Content-Type", "application/json"),
        ],
        &spec("big", 1, 4, json!({})),
    );
    assert_eq!(check.status, 400, "{}", check.body);
    assert!(check.body.contains(&message), "{}", check.body);
    let message = refused(&client, &spec("v100", 1, 1, json!({"gpuType": "V100"}))).await;
    assert!(
        message.contains("asks for 1 GPU of type V100 (1 task × 1); this machine has 0"),
        "{message}"
    );

    let env =
        |d: &Path| json!({"jobEnvs": {"EVENTS_DIR": d.display().to_string()}, "gpuType": "H100"});
    client
        .submit(
            "alice",
            &spec("first", 2, 1, env(&first_dir)),
            SpecFormat::Json,
        )
        .await
        .expect("submitted");
    let first = reports(&first_rx[0], 2);
    // Disjoint, one each, CUDA's index and NVIDIA's UUID naming the same device.
    assert_ne!(first[0].0, first[1].0, "{first:?}");
    for (cuda, nvidia) in &first {
        let index: usize = cuda.parse().expect("one index");
        assert_eq!(nvidia, UUIDS[index], "{first:?}");
    }
    // The view says which GPUs each task holds (OpenPAI's containerGpus: a bit each).
    let view = client.job("alice", "first").await.expect("view");
    let view = serde_json::to_value(&view).expect("json");
    for (i, (cuda, _)) in first.iter().enumerate() {
        let task = &view["taskRoles"]["worker"]["taskStatuses"][i];
        let index: u64 = cuda.parse().expect("index");
        assert_eq!(task["containerGpus"], 1 << index, "{task}");
        assert_eq!(task["gpus"][0]["uuid"], UUIDS[index as usize], "{task}");
    }

    // So do the job page and `rest-lite status`.
    let token = server.token.clone().expect("token");
    let page = common::request(
        &server.url,
        "GET",
        "/ui/jobs/alice/first",
        &[("Authorization", &format!("Bearer {token}"))],
        "",
    );
    assert_eq!(page.status, 200);
    let (cuda, nvidia) = &first[0];
    assert!(
        page.body.contains(&format!("GPU {cuda} {nvidia}")),
        "{}",
        page.body
    );
    let status = common::rest_lite_command()
        .args([
            "status",
            "first",
            "--server",
            &server.url,
            "--user",
            "alice",
        ])
        .env("REST_LITE_STATE_DIR", dir.join("state"))
        .env("NO_COLOR", "1")
        .output()
        .expect("rest-lite status");
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("GPUS"), "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with("worker-0 "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(row.split_whitespace().any(|c| c == cuda), "{row}");

    // One GPU is left for two tasks: the second job waits, whole, naming the holder.
    client
        .submit(
            "alice",
            &spec("second", 2, 1, env(&second_dir)),
            SpecFormat::Json,
        )
        .await
        .expect("submitted");
    let message = queued(&client, "second").await;
    assert!(
        message.contains("needs 2 GPUs of type H100, 1 free (held by alice~first (2))"),
        "{message}"
    );

    // Killed and restarted: the first job's attempt is run again on the same GPUs, before
    // the waiting job may take them.
    server.kill();
    assert_eq!(
        next_event(&first_rx[0]),
        None,
        "the first attempt's tasks ended"
    );
    let server = serve(&dir);
    let client = server.client();
    assert_eq!(
        reports(&first_rx[1], 2),
        first,
        "each task on its GPUs again"
    );
    let message = queued(&client, "second").await;
    assert!(message.contains("held by alice~first (2)"), "{message}");

    // Stopped, the first job frees them: the second runs on them.
    client.stop("alice", "first").await.expect("stopped");
    let second = reports(&second_rx[0], 2);
    let mut freed: Vec<&String> = first.iter().map(|(cuda, _)| cuda).collect();
    let mut got: Vec<&String> = second.iter().map(|(cuda, _)| cuda).collect();
    freed.sort();
    got.sort();
    assert_eq!(got, freed);
    client.stop("alice", "second").await.expect("stopped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_without_gpus_sees_none_of_the_machines() {
    let dir = common::scratch("gpus", "none");
    let rx = attempts(&dir, 1);
    let server = serve(&dir);
    // The job's own CUDA_VISIBLE_DEVICES is not what the task gets, and the submission
    // says so.
    let env =
        json!({"jobEnvs": {"EVENTS_DIR": dir.display().to_string(), "CUDA_VISIBLE_DEVICES": "0"}});
    let submitted = server
        .client()
        .submit("alice", &spec("cpu", 1, 0, env), SpecFormat::Json)
        .await
        .expect("submitted");
    assert!(
        submitted.warnings.iter().any(|w| w
            == "jobEnvs sets CUDA_VISIBLE_DEVICES: tasks get the GPUs this machine gives each of them instead"),
        "{:?}",
        submitted.warnings
    );
    let line = next_event(&rx[0]).expect("reported");
    // CUDA_VISIBLE_DEVICES empty (no device for CUDA), NVIDIA's "void".
    assert_eq!(line, "up 0  void");
}

/// A protocol v2 job of `tasks` tasks of `gpus` GPUs each, of priority class `class`,
/// reporting into `events` (see [`REPORT_THEN_WAIT`]); no retry left (`jobRetryCount: 0`).
fn v2_spec(name: &str, class: &str, tasks: u32, gpus: u32, events: &Path) -> String {
    json!({
        "protocolVersion": 2, "name": name, "type": "job", "jobRetryCount": 0,
        "prerequisites": [{"type": "dockerimage", "name": "image", "uri": "busybox"}],
        "taskRoles": {"worker": {
            "instances": tasks, "dockerImage": "image",
            "resourcePerInstance": {"cpu": 1, "memoryMB": 128, "gpu": gpus},
            "commands": std::iter::once(format!("export EVENTS_DIR='{}'", events.display()))
                .chain(REPORT_THEN_WAIT.lines().map(str::to_string))
                .collect::<Vec<_>>(),
        }},
        "extras": {"hivedScheduler": {"jobPriorityClass": class}},
    })
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prod_job_preempts_the_oppo_job_holding_its_gpus_which_runs_again_later() {
    let dir = common::scratch("gpus", "preempt");
    let (oppo_dir, test_dir, prod_dir) = (dir.join("oppo"), dir.join("test"), dir.join("prod"));
    let oppo_rx = attempts(&oppo_dir, 2);
    let test_rx = attempts(&test_dir, 1);
    let prod_rx = attempts(&prod_dir, 1);
    let server = serve(&dir);
    let client = server.client();
    let submit = |spec: String| {
        let client = client.clone();
        async move {
            client
                .submit("alice", &spec, SpecFormat::Json)
                .await
                .expect("submitted")
        }
    };

    // The oppo job takes 2 of the 3 GPUs, a test job the third.
    submit(v2_spec("borrower", "oppo", 2, 1, &oppo_dir)).await;
    let borrowed = reports(&oppo_rx[0], 2);
    submit(v2_spec("tester", "test", 1, 1, &test_dir)).await;
    reports(&test_rx[0], 1);
    let view = client.job("alice", "borrower").await.expect("view");
    assert_eq!(view.job_status.job_priority.as_deref(), Some("oppo"));

    // A prod job needing 2 GPUs: the oppo job gives them back (its tasks ended), the test
    // job keeps its own, and the prod job runs on what the oppo job held.
    submit(v2_spec("urgent", "prod", 1, 2, &prod_dir)).await;
    assert_eq!(next_event(&oppo_rx[0]), None, "the oppo job's tasks ended");
    let line = next_event(&prod_rx[0]).expect("the prod job runs");
    let mut given: Vec<&str> = line.split(' ').nth(2).expect("cuda").split(',').collect();
    let mut held: Vec<&str> = borrowed.iter().map(|(cuda, _)| cuda.as_str()).collect();
    given.sort();
    held.sort();
    assert_eq!(given, held, "{line}");

    // The oppo job waits, whole, and never fails: its retry was not spent.
    let message = queued(&client, "borrower").await;
    assert!(message.contains("held by alice~urgent (2)"), "{message}");
    let view = client.job("alice", "borrower").await.expect("view");
    let status = &view.job_status;
    assert_eq!(status.state.to_string(), "WAITING");
    assert_eq!(status.retries, 1);
    let ended = &status.attempts[0];
    assert_eq!(ended.exit_code, -101, "{ended:?}");
    let why = ended.diagnostics.as_deref().unwrap_or_default();
    assert!(
        why.contains("preempted on this machine by job alice~urgent of priority class prod"),
        "{why}"
    );
    let test = client.job("alice", "tester").await.expect("view");
    assert_eq!(test.job_status.state.to_string(), "RUNNING");
    assert_eq!(
        test.job_status.retries, 0,
        "an equal class is never preempted"
    );

    // The v2 API filters and orders by class, as OpenPAI's; `rest-lite jobs` shows it.
    let token = format!("Bearer {}", server.token.as_deref().expect("token"));
    let names = |path: &str| -> Vec<String> {
        let answer = common::request(&server.url, "GET", path, &[("Authorization", &token)], "");
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
        let list: Value = serde_json::from_str(&answer.body).expect("JSON");
        list.as_array()
            .expect("a list")
            .iter()
            .map(|j| format!("{}:{}", j["name"].as_str().unwrap_or(""), j["jobPriority"]))
            .collect()
    };
    assert_eq!(
        names("/api/v2/jobs?jobPriority=oppo"),
        ["borrower:\"oppo\""]
    );
    assert!(names("/api/v2/jobs?jobPriority=default").is_empty());
    assert_eq!(
        names("/api/v2/jobs?order=jobPriority,DESC"),
        ["urgent:\"prod\"", "tester:\"test\"", "borrower:\"oppo\""]
    );
    let bad = common::request(
        &server.url,
        "GET",
        "/api/v2/jobs?jobPriority=crit",
        &[("Authorization", &token)],
        "",
    );
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.contains("jobPriority"), "{}", bad.body);
    let jobs = common::rest_lite_command()
        .args(["jobs", "--server", &server.url, "--user", "alice"])
        .env("REST_LITE_STATE_DIR", dir.join("state"))
        .env("NO_COLOR", "1")
        .output()
        .expect("rest-lite jobs");
    let text = String::from_utf8_lossy(&jobs.stdout);
    assert!(
        text.lines().next().is_some_and(|h| h.contains("PRIORITY")),
        "{text}"
    );
    let row = text
        .lines()
        .find(|l| l.starts_with("borrower "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(row.split_whitespace().any(|c| c == "oppo"), "{row}");

    let page = common::request(
        &server.url,
        "GET",
        "/ui/jobs/alice/borrower",
        &[("Authorization", &token)],
        "",
    );
    assert!(
        page.body.contains(r#"<dd id="priority">oppo</dd>"#),
        "{}",
        page.body
    );
    let list = common::request(
        &server.url,
        "GET",
        "/ui/jobs",
        &[("Authorization", &token)],
        "",
    );
    assert!(
        list.body.contains(r#"<td class="priority">prod</td>"#),
        "{}",
        list.body
    );

    // Once the prod job ends, the oppo job runs again on what is free.
    client.stop("alice", "urgent").await.expect("stopped");
    assert_eq!(reports(&oppo_rx[1], 2).len(), 2);
    let view = client.job("alice", "borrower").await.expect("view");
    assert_eq!(view.job_status.state.to_string(), "RUNNING");
    for job in ["borrower", "tester"] {
        client.stop("alice", job).await.expect("stopped");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_jobs_start_in_order_of_class_then_of_submission() {
    let dir = common::scratch("gpus", "order");
    let names = ["holder", "oppo-first", "test-second", "test-third"];
    let rx: Vec<_> = names
        .iter()
        .map(|name| attempts(&dir.join(name), 1).remove(0))
        .collect();
    let server = serve(&dir);
    let client = server.client();
    let classes = ["prod", "oppo", "test", "test"];
    for (i, (name, class)) in names.iter().zip(classes).enumerate() {
        client
            .submit(
                "alice",
                &v2_spec(name, class, 3, 1, &dir.join(name)),
                SpecFormat::Json,
            )
            .await
            .expect("submitted");
        if i == 0 {
            reports(&rx[0], 3);
        } else {
            queued(&client, name).await;
        }
    }
    // Each ends in turn; the next to start is the highest class, the earliest of it first.
    let order = [0, 2, 3, 1];
    for step in 1..order.len() {
        let (ending, next) = (order[step - 1], order[step]);
        client.stop("alice", names[ending]).await.expect("stopped");
        assert_eq!(next_event(&rx[ending]), None);
        assert_eq!(reports(&rx[next], 3).len(), 3, "{} next", names[next]);
        for &later in &order[step + 1..] {
            let view = client.job("alice", names[later]).await.expect("view");
            assert_eq!(
                view.job_status.state.to_string(),
                "WAITING",
                "{}",
                names[later]
            );
        }
    }
    client.stop("alice", names[1]).await.expect("stopped");
}
