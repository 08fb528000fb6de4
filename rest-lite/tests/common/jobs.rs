//! The jobs the embedded default's tests submit, and the commands they run: a job of
//! roles, the user command that waits for TERM, the example run to its end, the
//! `rest-lite` command line run to its end, a task's log and a page's text.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;

use pai_client::Client;
use pai_translate::spec::SpecFormat;
use serde_json::{Value, json};

use super::fifo::{events, final_view, next_event};
use super::serve::DEADLINE;

pub async fn log_of(client: &Client, user: &str, job: &str, role: &str, index: u32) -> String {
    super::task_log(
        client,
        (user, job),
        (role, index),
        true,
        pai_client::Source::User,
    )
    .await
}

pub fn job(name: &str, roles: Value, extra: Value) -> String {
    let mut spec = json!({"jobName": name, "image": "busybox", "taskRoles": roles});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    spec.to_string()
}

pub fn role(name: &str, tasks: u32, command: &str) -> Value {
    json!({"name": name, "taskNumber": tasks, "cpuNumber": 1, "memoryMB": 128, "command": command})
}

/// A user command that reports `up <role>-<index>` into the FIFO, then waits; TERM makes
/// it report `term <role>-<index>` and leave.
pub const WAIT_FOR_TERM: &str = r#"me="$PAI_CURRENT_TASK_ROLE_NAME-$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"
exec 3>"$EVENTS"
trap 'echo "term $me" >&3; exit 0' TERM
echo "up $me" >&3
while :; do sleep 1 & wait $!; done"#;

/// Alice's job `name` of `roles`, whose commands say `up <role>-<index>` into a FIFO of
/// `dir` as [`WAIT_FOR_TERM`]'s do, submitted: the FIFO's events once every task of the
/// job said it is up, and what they said, sorted.
pub async fn submitted_and_up(
    client: &Client,
    dir: &Path,
    name: &str,
    roles: Value,
) -> (mpsc::Receiver<Option<String>>, Vec<String>) {
    let tasks: u64 = roles
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["taskNumber"].as_u64())
        .sum();
    let (events, rx) = events(dir);
    let spec = job(
        name,
        roles,
        json!({"jobEnvs": {"EVENTS": events.display().to_string()}}),
    );
    client
        .submit("alice", &spec, SpecFormat::detect(&spec))
        .await
        .expect("submitted");
    let mut up: Vec<String> = (0..tasks).map(|_| next_event(&rx).expect("up")).collect();
    up.sort();
    (rx, up)
}

/// The shell example submitted as alice and run to its end, which must be success: its
/// final view.
pub async fn the_example_run(client: &Client) -> Value {
    let spec = std::fs::read_to_string(super::repo_root().join("examples/shell-hello.yaml"))
        .expect("example");
    client
        .submit("alice", &spec, SpecFormat::detect(&spec))
        .await
        .expect("submitted");
    let view = final_view(client, "alice", "shell-hello").await;
    assert_eq!(view["jobStatus"]["state"], "SUCCEEDED", "{view:#}");
    view
}

/// Alice's job "doomed" (two tasks that wait for TERM), running, then deleted (202);
/// returns its tasks' events.
pub async fn run_then_delete(client: &Client, dir: &Path) -> mpsc::Receiver<Option<String>> {
    let roles = json!([role("worker", 2, WAIT_FOR_TERM)]);
    let (rx, _) = submitted_and_up(client, dir, "doomed", roles).await;
    client.delete("alice", "doomed").await.expect("deleted");
    rx
}

/// Runs `rest-lite run SPEC FLAGS…` to its end, as [`rest_lite`] does.
pub fn run_spec(
    spec: &Path,
    flags: &[&str],
    env: &[(&str, &str)],
) -> (Option<i32>, String, String) {
    let spec = spec.to_str().expect("a spec path in UTF-8");
    let args: Vec<&str> = ["run", spec]
        .into_iter()
        .chain(flags.iter().copied())
        .collect();
    rest_lite(&args, env)
}

/// Runs `rest-lite ARGS` to its end (killed past the deadline); returns (code, stdout,
/// stderr).
pub fn rest_lite(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut command = super::rest_lite_command();
    command
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    let child = command.spawn().expect("rest-lite");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let output = match rx.recv_timeout(DEADLINE) {
        Ok(output) => output.expect("output"),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("rest-lite {args:?} did not end");
        }
    };
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The body of a GET with `token`, which must be answered 200.
pub fn get_text(url: &str, path: &str, token: &str) -> String {
    let authorization = format!("Bearer {token}");
    let answer = super::request(url, "GET", path, &[("Authorization", &authorization)], "");
    assert_eq!(answer.status, 200, "GET {path}: {}", answer.body);
    answer.body
}

/// The directory of the first attempt's `worker-0` of the only job in `state`.
pub fn only_task(state: &Path) -> std::path::PathBuf {
    std::fs::read_dir(state.join("jobs"))
        .expect("jobs")
        .flatten()
        .next()
        .expect("job")
        .path()
        .join("attempts/0/worker-0")
}
