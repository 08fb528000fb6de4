//! Distributed-training glue end to end on the embedded default, with programs we did
//! not write: Open MPI's `mpirun` reaching every worker through the hostfile, the task
//! aliases and the job's own key; Python reading `TF_CONFIG` and PyTorch's variables;
//! the real JAX all-gathering across tasks and the real XGBoost training one model
//! together (their CPU wheels from PyPI, `examples/` run unchanged); OpenSSH between
//! tasks and from `rest-lite ssh`. Needs openmpi-bin, openssh-server and python3, and
//! JAX and XGBoost in `target/frameworks-venv` (`.ci/run` installs them all, the last
//! with `.ci/frameworks-venv`); without them each test says what is missing and passes,
//! except under `CI=true`, where it fails.

use crate::common;

use std::process::Command;

use pai_client::ClientError;
use pai_translate::spec::SpecFormat;
use serde_json::json;

use common::fifo::{events, final_view, next_event};
use common::serve::Server;

fn scratch(name: &str) -> common::Scratch {
    common::scratch("training", name)
}

/// True when every program is here; otherwise says which is not (skips), and fails under CI.
fn have(programs: &[&str]) -> bool {
    let missing: Vec<&str> = programs
        .iter()
        .copied()
        .filter(|p| pai_test_support::needs::program(p).is_none())
        .collect();
    pai_test_support::needs::present(
        &missing.join(", "),
        missing.is_empty(),
        "apt-get install openmpi-bin openssh-server openssh-client python3",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mpirun_reaches_every_worker_through_the_hostfile_the_aliases_and_the_job_key() {
    if !have(&["mpirun", "sshd", "ssh"]) {
        return;
    }
    let dir = scratch("mpi");
    let server = Server::start(&dir.join("state"));
    let client = server.client();
    let spec = std::fs::read_to_string(common::repo_root().join("examples/mpi-hello.yaml"))
        .expect("example");
    client
        .submit("alice", &spec, SpecFormat::Yaml)
        .await
        .expect("submitted");
    let view = final_view(&client, "alice", "mpi-hello").await;
    let log = common::read_all(
        client
            .logs(
                "alice",
                "mpi-hello",
                "launcher",
                0,
                false,
                pai_client::Source::User,
            )
            .await
            .expect("log"),
    )
    .await;
    assert_eq!(view["jobStatus"]["state"], "SUCCEEDED", "{log}");
    // Each rank reports the task it ran in: only an ssh session into that worker gives
    // it the worker's own variables.
    for line in ["rank 0 of 2 on worker-0", "rank 1 of 2 on worker-1"] {
        assert!(
            log.contains(line),
            "{line:?} not in the launcher's log:\n{log}"
        );
    }
    // The host's file system is not the task's: DeepSpeed's default hostfile is not
    // linked there (as it is in an image or a pod).
    let linked = std::fs::read_link(pai_contract::training::DEEPSPEED_HOSTFILE);
    assert!(
        !linked.is_ok_and(|target| target.starts_with(&dir)),
        "a task on the host linked {}",
        pai_contract::training::DEEPSPEED_HOSTFILE
    );
}

/// Run by every task: TF_CONFIG names this task at its own address and port, its file
/// says the same, and PyTorch's variables put the chief first.
const CHECK: &str = r#"
import json, os
env = os.environ
tf = json.loads(env["TF_CONFIG"])
role, index = env["PAI_CURRENT_TASK_ROLE_NAME"], int(env["PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"])
assert tf["task"] == {"type": role, "index": index}, tf["task"]
mine = tf["cluster"][role][index]
assert mine == "%s:%s" % (env["PAI_HOST_IP_%s_%d" % (role, index)], env["PAI_CURRENT_CONTAINER_PORT"]), mine
assert sorted(tf["cluster"]) == ["chief", "ps", "worker"], tf["cluster"]
with open(os.path.join(env["PAI_RUNTIME_ROOT"], "tf_config.json")) as f:
    assert json.load(f) == tf
rank = {"chief": 0, "worker": 1 + index, "ps": 3}[role]
assert (env["RANK"], env["WORLD_SIZE"], env["PET_NNODES"]) == (str(rank), "4", "4")
assert env["MASTER_ADDR"] == env["PAI_HOST_IP_chief_0"]
assert env["MASTER_PORT"] == env["PAI_chief_0_master_PORT"] == env["PET_MASTER_PORT"]
assert env["PET_NPROC_PER_NODE"] == "3", "the job's own value wins"
print("checked", role, index, mine, "rank", rank)
"#;

/// Every task: the check, then its own sshd answers through its own alias (ssh tries
/// for a minute, checking the job's host key), then `up`; the chief also reaches
/// worker-1 by its alias, and is refused when it expects another host key. Then each
/// waits for TERM.
const COMMAND: &str = r#"set -e
me="$PAI_CURRENT_TASK_ROLE_NAME-$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"
exec 3>"$EVENTS"
python3 "$CHECK"
ssh "$me" true
if [ "$me" = chief-0 ]; then
    echo "reached $(ssh worker-1 'echo "$PAI_CURRENT_TASK_ROLE_NAME-$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"')" >&3
    # The aliases check the job's host key: a host presenting another key is refused.
    printf '* %s\n' "$(cat "$PAI_RUNTIME_ROOT/ssh/job_key.pub")" > "$PAI_RUNTIME_ROOT/other_hosts"
    if ssh -o UserKnownHostsFile="$PAI_RUNTIME_ROOT/other_hosts" -o ConnectionAttempts=1 worker-1 true 2>/dev/null; then
        echo "a host with another key was accepted" >&3
    else
        echo "refused a host with another key" >&3
    fi
fi
trap 'exit 0' TERM
echo "up $me" >&3
while :; do sleep 1 & wait $!; done"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_read_tf_config_and_reach_each_other_and_rest_lite_ssh_reaches_them() {
    if !have(&["python3", "sshd", "ssh"]) {
        return;
    }
    let dir = scratch("tf");
    let check = dir.join("check.py");
    std::fs::write(&check, CHECK).expect("check script");
    let (fifo, rx) = events(&dir);
    let server = Server::start(&dir.join("state"));
    let client = server.client();
    let role = |name: &str, tasks: u32| json!({"name": name, "taskNumber": tasks, "cpuNumber": 1, "memoryMB": 128, "command": COMMAND});
    let spec = json!({
        "jobName": "tf", "image": "tensorflow/tensorflow",
        "taskRoles": [role("chief", 1), role("worker", 2), role("ps", 1)],
        "jobEnvs": {
            "EVENTS": fifo.display().to_string(),
            "CHECK": check.display().to_string(),
            "PET_NPROC_PER_NODE": "3",
        },
    })
    .to_string();
    let submitted = client
        .submit("alice", &spec, SpecFormat::Json)
        .await
        .expect("submitted");
    for expected in [
        "without images or containers",
        "jobEnvs sets PET_NPROC_PER_NODE: tasks get your value",
    ] {
        assert!(
            submitted.warnings.iter().any(|w| w.contains(expected)),
            "{expected:?} not in {:?}",
            submitted.warnings
        );
    }

    let mut seen: Vec<String> = (0..6).filter_map(|_| next_event(&rx)).collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            "reached worker-1",
            "refused a host with another key",
            "up chief-0",
            "up ps-0",
            "up worker-0",
            "up worker-1"
        ]
    );

    // Every sshd answers now: the route lists all four, as the server's own user.
    let info = client.ssh("alice", "tf").await.expect("ssh info");
    let mut ids: Vec<&str> = info.containers.iter().map(|c| c.id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["chief-0", "ps-0", "worker-0", "worker-1"]);
    assert!(info.unavailable.is_empty(), "{:?}", info.unavailable);
    let me = String::from_utf8(Command::new("id").arg("-un").output().expect("id").stdout)
        .expect("utf-8");
    assert!(info.containers.iter().all(|c| c.ssh_user == me.trim()));
    assert_eq!(
        info.private_key_url.as_deref(),
        Some("/api/v1/user/alice/jobs/tf/ssh/key")
    );
    // The host key every task presents: `rest-lite ssh` below checks it.
    let host_key = info.host_key.as_deref().expect("the job's host key");
    assert!(host_key.starts_with("ssh-ed25519 "), "{host_key}");

    // `rest-lite ssh` runs the system's ssh with the job's key, checking the host key.
    let cli = |args: &[&str]| {
        crate::common::rest_lite_command()
            .args(["ssh", "--server", &server.url, "--user", "alice"])
            .env("REST_LITE_TOKEN", server.token.as_deref().expect("token"))
            .args(args)
            .output()
            .expect("rest-lite ssh")
    };
    let out = cli(&[
        "tf",
        "worker",
        "1",
        "--",
        "echo",
        "$PAI_CURRENT_TASK_ROLE_NAME-$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "worker-1\n");
    let out = cli(&["tf", "ps", "0", "--", "exit", "7"]);
    assert_eq!(
        out.status.code(),
        Some(7),
        "ssh's exit code is rest-lite ssh's"
    );
    // `--print` prints commands that work as printed, with the job's key kept in a
    // private directory (here under a scratch XDG_CACHE_HOME) and its host key checked.
    let cache = dir.join("cache");
    let printed = crate::common::rest_lite_command()
        .args([
            "ssh",
            "--server",
            &server.url,
            "--user",
            "alice",
            "tf",
            "--print",
        ])
        .env("REST_LITE_TOKEN", server.token.as_deref().expect("token"))
        .env("XDG_CACHE_HOME", &cache)
        .output()
        .expect("rest-lite ssh --print");
    assert!(
        printed.status.success(),
        "{}",
        String::from_utf8_lossy(&printed.stderr)
    );
    let printed = String::from_utf8_lossy(&printed.stdout).into_owned();
    let line = printed
        .lines()
        .find_map(|l| l.strip_prefix("ps-0: "))
        .unwrap_or_else(|| panic!("no command for ps-0 in {printed}"));
    assert!(
        line.contains("StrictHostKeyChecking=yes") && line.contains(" -i "),
        "{line}"
    );
    let key = cache.join("rest-lite/ssh/alice-tf/id");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&key)
            .expect("the kept key")
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    let ran = Command::new("sh")
        .arg("-c")
        .arg(format!("{line} 'echo $PAI_CURRENT_TASK_ROLE_NAME'"))
        .output()
        .expect("sh");
    assert_eq!(
        String::from_utf8_lossy(&ran.stdout),
        "ps\n",
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let out = cli(&["tf", "worker", "5"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("job tf has no task worker-5"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Every task's log has its check.
    for (role, index) in [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0)] {
        let log = common::read_all(
            client
                .logs("alice", "tf", role, index, false, pai_client::Source::User)
                .await
                .expect("log"),
        )
        .await;
        assert!(
            log.contains(&format!("checked {role} {index} 127.0.0.1:")),
            "{role}-{index}: {log}"
        );
    }

    client.stop("alice", "tf").await.expect("stop");
    let view = final_view(&client, "alice", "tf").await;
    assert_eq!(view["jobStatus"]["state"], "STOPPED");
    match client.ssh("alice", "tf").await {
        Err(ClientError::Api {
            status, message, ..
        }) => {
            assert_eq!(status, 404);
            assert!(
                message.contains("sshd runs only while the task runs"),
                "{message}"
            );
        }
        other => panic!("expected 404 after the job ended, got {other:?}"),
    }
}

/// Runs `examples/<example>` unchanged on a server whose tasks find the venv's Python
/// first on their PATH (host mode: tasks run the host's programs), to its end: its state
/// and each task's log.
async fn run_example(name: &str, example: &str, job: &str, bin: &std::path::Path) -> Vec<String> {
    let dir = scratch(name);
    let state = dir.join("state");
    std::fs::create_dir_all(&state).expect("state");
    let path = std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .expect("PATH");
    let server = Server::spawn(
        Server::command(&state)
            .args(["--backend", "local"])
            .env("PATH", path),
        &["this machine (embedded default)"],
    )
    .with_machine_token(&state);
    let client = server.client();
    let spec = std::fs::read_to_string(common::repo_root().join("examples").join(example))
        .expect("example");
    client
        .submit("alice", &spec, SpecFormat::Yaml)
        .await
        .expect("submitted");
    let view = final_view(&client, "alice", job).await;
    let mut logs = Vec::new();
    for index in 0..2 {
        logs.push(
            common::task_log(
                &client,
                ("alice", job),
                ("worker", index),
                true,
                pai_client::Source::User,
            )
            .await,
        );
    }
    assert_eq!(
        view["jobStatus"]["state"], "SUCCEEDED",
        "{view:#}\n{logs:#?}"
    );
    logs
}

/// Two tasks whose JAX processes find their coordinator and number themselves from the
/// job, then all-gather across processes: each holds both ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jax_processes_of_two_tasks_all_gather_across_them() {
    let Some(venv) = common::frameworks_venv() else {
        return;
    };
    let logs = run_example(
        "jax",
        "jax-allgather.yaml",
        "jax-allgather",
        &venv.join("bin"),
    )
    .await;
    for (index, log) in logs.iter().enumerate() {
        assert!(
            log.contains(&format!("process {index} of 2 gathered [0, 1]")),
            "task {index}:\n{log}"
        );
    }
}

/// Two XGBoost workers joined through the tracker task 0 runs, each on its half of the
/// rows: the model they agreed on is the same on both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_xgboost_workers_train_the_same_model() {
    let Some(venv) = common::frameworks_venv() else {
        return;
    };
    let logs = run_example(
        "xgboost",
        "xgboost-train.yaml",
        "xgboost-train",
        &venv.join("bin"),
    )
    .await;
    let digests: Vec<&str> = logs
        .iter()
        .enumerate()
        .map(|(index, log)| {
            let prefix = format!("worker {index} of 2 model sha256 ");
            log.lines()
                .find_map(|l| l.strip_prefix(prefix.as_str()))
                .unwrap_or_else(|| panic!("no model from worker {index}:\n{log}"))
        })
        .collect();
    assert_eq!(digests[0], digests[1], "the workers' models differ");
}
