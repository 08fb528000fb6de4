//! Container mode, against both engines: the real `rest-lite serve --engine podman` and
//! `--engine docker` run each task in its image (its `entry`, then `run` as PID 1, both
//! the static runtime this build carries), with the pod's limits. Every test runs once per
//! engine (`…::podman`, `…::docker`). The image is made here from the static busybox and
//! imported into each engine (no registry can be reached). Needs root, busybox-static,
//! Podman (and runc: crun refuses a machine whose cgroups are hybrid) and a Docker Engine
//! answering at `DOCKER_HOST` or `/var/run/docker.sock` (`.ci/run` installs them and
//! starts `dockerd` with `.ci/start-dockerd`).

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};

use futures::StreamExt;
use pai_client::Client;
use pai_translate::spec::SpecFormat;
use serde_json::{Value, json};

use common::fifo::final_view;
use common::serve::{DEADLINE, Server};
use pai_test_support::images;

/// The test image: busybox alone, every applet linked.
const IMAGE: &str = "localhost/rest-lite-test-busybox:1";

/// The engine a test's tasks run in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Engine {
    Podman,
    Docker,
}

/// Runs the test `$name(engine)` once per engine, as `$name::podman` and `$name::docker`.
macro_rules! for_each_engine {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn podman() {
                super::$name(super::Engine::Podman).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn docker() {
                super::$name(super::Engine::Docker).await
            }
        }
    )*};
}

for_each_engine!(
    a_multi_role_job_runs_in_its_image_with_the_platforms_environment,
    a_task_over_its_memory_limit_is_oom_killed_and_says_so,
    an_image_that_cannot_be_had_fails_the_attempt_with_the_engines_words,
    an_image_in_the_other_engines_store_is_copied_from_it,
    follow_prints_a_servers_line_before_the_lines_of_the_clients_that_heard_it,
    run_of_an_image_not_had_exits_125_and_prints_the_command_that_runs_it_on_the_host,
    stop_and_delete_leave_no_container,
    a_restarted_server_follows_the_containers_the_killed_one_started,
    a_task_in_its_init_step_at_a_restart_starts_again_beside_its_followed_peer,
    a_private_image_is_pulled_with_the_jobs_credentials_while_the_job_waits,
    tensorflow_roles_read_tf_config_and_reach_each_other_over_ssh_in_containers,
    a_task_runs_as_its_images_user_and_may_write_its_volume,
    tasks_of_an_image_whose_user_is_a_name_reach_each_other_over_ssh_as_that_user,
    a_job_writes_into_its_team_storages_where_the_config_keeps_them,
);

impl Engine {
    /// Its command line's program, and its `--engine`.
    fn name(self) -> &'static str {
        match self {
            Engine::Podman => "podman",
            Engine::Docker => "docker",
        }
    }

    /// How the server says it started with it.
    fn says(self) -> &'static str {
        match self {
            Engine::Podman => "Podman",
            Engine::Docker => "Docker",
        }
    }

    fn cli(self) -> Command {
        Command::new(self.name())
    }

    /// Whether it answers: Podman's client, or Docker's daemon.
    fn answers(self) -> bool {
        let mut command = self.cli();
        match self {
            Engine::Podman => command.arg("--version"),
            Engine::Docker => command.args(["version", "--format", "{{.Server.Version}}"]),
        };
        command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// The names of the containers that `filter` (`label=…`) selects: running ones, or
    /// `all`.
    fn ps(self, filter: &str, all: bool) -> Vec<String> {
        let mut command = self.cli();
        command.arg("ps");
        if all {
            command.arg("--all");
        }
        let out = command
            .args(["--format", "{{.Names}}", "--filter", filter])
            .output()
            .expect("ps");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Removes containers, running or not.
    fn rm(self, names: &[String]) {
        let mut command = self.cli();
        command.args(["rm", "--force"]);
        if self == Engine::Podman {
            command.args(["--time", "0"]);
        }
        let _ = command
            .args(names)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn scratch(name: &str) -> common::Scratch {
    common::scratch("containers", name)
}

/// Whether this machine can run the tests with `engine` (root, the engine, busybox);
/// imports the image into it once.
fn ready(engine: Engine) -> bool {
    if !nix::unistd::geteuid().is_root() {
        return pai_test_support::needs::present(
            "root (rootful containers)",
            false,
            "run the tests as root",
        );
    }
    let busybox = Path::new("/bin/busybox");
    let engine_there = match engine {
        Engine::Podman => pai_test_support::needs::present(
            "podman",
            engine.answers(),
            "apt-get install podman runc",
        ),
        Engine::Docker => pai_test_support::needs::present(
            "a Docker Engine answering at DOCKER_HOST or /var/run/docker.sock",
            engine.answers(),
            "apt-get install docker.io, then .ci/start-dockerd",
        ),
    };
    if !engine_there
        || !pai_test_support::needs::present(
            "a static busybox at /bin/busybox",
            busybox.is_file(),
            "apt-get install busybox-static",
        )
    {
        return false;
    }
    images::shared(engine.name(), IMAGE, || {
        let dir = scratch(&format!("image-{}", engine.name()));
        let root = images::busybox_root(&dir, busybox);
        images::import(engine.name(), &dir, &root, IMAGE, &[])
    });
    true
}

/// `rest-lite serve` with tasks in `engine`'s containers (Podman with runc where it is
/// installed), and the guard that removes its containers at the end of the test (declared
/// first, dropped after the server).
fn start(engine: Engine, state: &Path) -> (Leftovers, Server) {
    start_with(engine, state, &[])
}

/// [`start`] with variables of the server's environment.
fn start_with(
    engine: Engine,
    state: &Path,
    env: &[(&str, &std::ffi::OsStr)],
) -> (Leftovers, Server) {
    start_configured(engine, state, env, None)
}

/// The server's command with tasks in `engine`'s containers.
fn serve_command(engine: Engine, state: &Path) -> Command {
    let mut command = Server::command(state);
    command.args(["--backend", "local", "--engine", engine.name()]);
    if engine == Engine::Podman && which("runc") {
        command.args(["--engine-runtime", "runc"]);
    }
    command
}

/// [`start_with`] and the config file `config`.
fn start_configured(
    engine: Engine,
    state: &Path,
    env: &[(&str, &std::ffi::OsStr)],
    config: Option<&Path>,
) -> (Leftovers, Server) {
    std::fs::create_dir_all(state).expect("state");
    let leftovers = Leftovers::of(engine, state);
    let mut command = serve_command(engine, state);
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    let server =
        Server::spawn(&mut command, &["in their images", engine.says()]).with_machine_token(state);
    (leftovers, server)
}

fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// The containers of job `framework` (running or not).
fn containers_of(engine: Engine, framework: &str) -> Vec<String> {
    engine.ps(&job_filter(framework), true)
}

fn job_filter(framework: &str) -> String {
    format!("label=io.openpai.rest-lite.job={framework}")
}

/// After a deletion (answered once it is saved, before its tasks have ended): waits, with
/// the engine, for each of `names` to exit; returns the job's containers still running.
fn running_after_deletion(engine: Engine, framework: &str, names: &[String]) -> Vec<String> {
    // A container removed already is an error of `wait`'s, and is no longer running.
    let _ = engine
        .cli()
        .arg("wait")
        .args(names)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    engine.ps(&job_filter(framework), false)
}

fn spec(name: &str, image: &str, roles: Value, extra: Value) -> String {
    let mut spec = json!({"jobName": name, "image": image, "taskRoles": roles, "retryCount": 0});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    spec.to_string()
}

fn role(name: &str, tasks: u32, memory_mb: u32, command: &str) -> Value {
    json!({"name": name, "taskNumber": tasks, "cpuNumber": 1, "memoryMB": memory_mb, "shmMB": 32, "command": command})
}

async fn log_of(client: &Client, job: &str, role: &str, index: u32) -> String {
    common::task_log(
        client,
        ("alice", job),
        (role, index),
        true,
        pai_client::Source::User,
    )
    .await
}

/// Submits alice's job `name` and returns its view once it has ended.
async fn run_to_end(client: &Client, name: &str, job: &str) -> Value {
    client
        .submit("alice", job, SpecFormat::detect(job))
        .await
        .expect("submitted");
    final_view(client, "alice", name).await
}

/// Waits (on the job's watch) until every task of the job runs.
async fn every_task_running(client: &Client, job: &str) {
    until_tasks(client, job, |states| states.iter().all(|s| *s == "RUNNING")).await
}

/// Waits (on the job's watch) until its tasks' states (every role's, in order) are as
/// `wanted` says.
async fn until_tasks(client: &Client, job: &str, wanted: impl Fn(&[&Value]) -> bool) {
    let mut changes = client.watch("alice", job).await.expect("watch");
    let running = async {
        while let Some(view) = changes.next().await {
            let view = serde_json::to_value(view.expect("a view")).expect("JSON");
            let roles = view["taskRoles"].as_object().cloned().unwrap_or_default();
            let states: Vec<&Value> = roles
                .values()
                .filter_map(|r| r["taskStatuses"].as_array())
                .flatten()
                .map(|t| &t["taskState"])
                .collect();
            if !states.is_empty() && wanted(&states) {
                return;
            }
        }
        panic!("the job ended before its tasks got there");
    };
    tokio::time::timeout(DEADLINE, running)
        .await
        .expect("the tasks got there");
}

/// What the server answers, and what each client sends; the image's `nc` in both.
const SERVER: &str = r#"set -eu
echo "pid1=$(cat /proc/1/cmdline | tr '\0' ' ')"
echo "host=$(hostname)"
echo "resolves=$(awk -v me="$(hostname)" '{ for (i = 2; i <= NF; i++) if ($i == me) { print $1; exit } }' /etc/hosts)"
echo "shm=$(df -k /dev/shm | tail -1 | awk '{print $2}')"
echo "greeting=$GREETING"
echo "home=$HOME leak=${REST_LITE_TEST_LEAK:-none}"
echo "master=$MASTER_ADDR:$MASTER_PORT rank=$NODE_RANK"
ls -a /usr/local/pai | grep -c '^\.env' | sed 's/^/env-files=/'
echo "env-b64=$(env -0 | base64 | tr -d '\n')"
echo "dynamic=$(sed -n 's/^export \([A-Za-z_0-9]*\)=.*/\1/p' /usr/local/pai/env.sh | tr '\n' ' ')"
touch /rest-lite-container-mark
echo "job-hostfile=$(tr '\n' ' ' < /job/hostfile)"
echo first; echo second >&2; echo third
printf '{"accuracy": 0.93}' > "$PAI_RESULT_FILE"
for i in $(seq 1 "$PAI_TASK_ROLE_TASK_COUNT_client"); do
  echo "ack" | nc -l -p "$PAI_CURRENT_CONTAINER_PORT"
done
echo "every client spoke""#;

const CLIENT: &str = r#"set -u
me=$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX
for try in $(seq 1 300); do
  reply=$(echo "hello from client $me" | nc "$PAI_HOST_IP_server_0" "$PAI_server_0_http_PORT" 2>/dev/null) && [ -n "$reply" ] && break
  sleep 0.1
done
echo "client $me heard: $reply"
[ "$reply" = "ack" ]"#;

async fn a_multi_role_job_runs_in_its_image_with_the_platforms_environment(engine: Engine) {
    if !ready(engine) {
        return;
    }
    let dir = scratch(&format!("multi-role-{}", engine.name()));
    // A variable of the server's environment must not reach a container.
    let (_leftovers, server) = start_with(
        engine,
        &dir.join("state"),
        &[("REST_LITE_TEST_LEAK", "leaked".as_ref())],
    );
    let client = server.client();
    let greeting = "hello $(not run) `not run` 'quoted'\nsecond line";
    let job = spec(
        "in-image",
        IMAGE,
        json!([
            role("server", 1, 128, SERVER),
            role("client", 2, 128, CLIENT)
        ]),
        json!({"jobEnvs": {"GREETING": greeting}}),
    );
    let submitted = client
        .submit("alice", &job, SpecFormat::Json)
        .await
        .expect("submitted");
    assert!(
        !submitted
            .warnings
            .iter()
            .any(|w| w.contains("without images")),
        "{:?}",
        submitted.warnings
    );
    let view = final_view(&client, "alice", "in-image").await;
    let server_log = log_of(&client, "in-image", "server", 0).await;
    assert_eq!(
        view["jobStatus"]["state"], "SUCCEEDED",
        "{view:#}\n{server_log}"
    );
    assert!(
        view["jobStatus"]["appExitDiagnostics"]
            .as_str()
            .is_some_and(|d| d.contains("in the images")),
        "{view:#}"
    );
    for expected in [
        "pid1=/usr/local/pai/run",
        "shm=32768",
        &format!("greeting={greeting}"),
        // The image's home, and nothing of the server's environment.
        "home=/root leak=none",
        "master=127.0.0.1:",
        // Its host name resolves to its address, as a pod's does.
        "resolves=127.0.0.1\n",
        // Both environment files read and removed by the runtime.
        "env-files=0",
        // The job's hostfile where DeepSpeed's launcher looks: the image's own file
        // system is the task's.
        "job-hostfile=server-0 slots=1 client-0 slots=1 client-1 slots=1 ",
        "every client spoke",
    ] {
        assert!(
            server_log.contains(expected),
            "{expected:?} not in:\n{server_log}"
        );
    }
    assert!(
        server_log.contains("host=") && server_log.contains("-server-0"),
        "the pod's name as host name:\n{server_log}"
    );
    // Every variable of the pod template's main container, as a kubelet would give it
    // (its `$(VAR)` expanded), is the user command's, byte for byte; but for the task's
    // own ports, which the runtime's env file gives each task of a host (the template's
    // are the role's, which on a cluster every pod of the role has on its own address).
    let env = task_env(&server_log);
    let dynamic: Vec<&str> = server_log
        .lines()
        .find_map(|l| l.strip_prefix("dynamic="))
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let framework: pai_contract::Framework = serde_json::from_slice(
        &std::fs::read(
            dir.join("state/jobs")
                .join(pai_job::names::framework_name("alice", "in-image"))
                .join("framework.json"),
        )
        .expect("the stored Framework"),
    )
    .expect("a Framework");
    let role = framework
        .spec
        .task_roles
        .iter()
        .find(|r| r.name == "server")
        .expect("the server role");
    let template = role.main_container().expect("a main container");
    let mut compared = 0;
    for var in template.env.iter().flatten() {
        let value = var.value.as_deref().unwrap_or_default();
        let expected = pai_contract::env::kubelet_expand(value, |name| env.get(name).cloned());
        if env.get(&var.name) != Some(&expected)
            && dynamic.contains(&var.name.as_str())
            && var.name.contains("PORT")
        {
            continue;
        }
        assert_eq!(
            env.get(&var.name),
            Some(&expected),
            "{} differs from the pod template's",
            var.name
        );
        compared += 1;
    }
    assert!(compared > 20, "only {compared} variables in the template");
    for index in 0..2 {
        let log = log_of(&client, "in-image", "client", index).await;
        assert!(log.contains(&format!("client {index} heard: ack")), "{log}");
    }
    // Both streams in the order written, as in host mode (the container's are the log).
    assert!(
        server_log.contains("first\nsecond\nthird\n"),
        "the streams in order:\n{server_log}"
    );
    // The result, through the termination message the runtime writes.
    assert_eq!(
        view["taskRoles"]["server"]["taskStatuses"][0]["result"],
        json!({"accuracy": 0.93}),
        "{view:#}"
    );
    assert!(
        !Path::new("/rest-lite-container-mark").exists(),
        "the task wrote on the host's root"
    );
}

async fn a_task_over_its_memory_limit_is_oom_killed_and_says_so(engine: Engine) {
    if !ready(engine) {
        return;
    }
    let dir = scratch(&format!("oom-{}", engine.name()));
    let (_leftovers, server) = start(engine, &dir.join("state"));
    let client = server.client();
    // 200 MiB in a task of 64 MiB: dd's buffer is one allocation, all of it written.
    let job = spec(
        "too-big",
        IMAGE,
        json!([role(
            "worker",
            1,
            64,
            "dd if=/dev/zero of=/dev/null bs=200M count=1"
        )]),
        json!({}),
    );
    let view = run_to_end(&client, "too-big", &job).await;
    assert_eq!(view["jobStatus"]["state"], "FAILED", "{view:#}");
    assert_eq!(view["jobStatus"]["appExitCode"], 137, "{view:#}");
    let text = view.to_string();
    assert!(text.contains("OOMKilled"), "{view:#}");
    assert!(text.contains("64 MiB"), "the limit is named: {view:#}");
}

async fn an_image_that_cannot_be_had_fails_the_attempt_with_the_engines_words(engine: Engine) {
    if !ready(engine) {
        return;
    }
    let dir = scratch(&format!("no-image-{}", engine.name()));
    let (_leftovers, server) = start(engine, &dir.join("state"));
    let client = server.client();
    let job = spec(
        "no-image",
        "localhost/rest-lite-no-such-image:0",
        json!([role("worker", 1, 128, "echo never")]),
        json!({}),
    );
    let view = run_to_end(&client, "no-image", &job).await;
    assert_eq!(view["jobStatus"]["state"], "FAILED", "{view:#}");
    let text = view.to_string();
    assert!(text.contains("ErrImagePull"), "{view:#}");
    assert!(
        text.contains("rest-lite-no-such-image"),
        "the image is named: {view:#}"
    );
    assert!(
        text.contains("--engine host"),
        "the way out is named: {view:#}"
    );
    assert!(
        text.contains(&format!("{} ", engine.says())) && text.contains("store"),
        "the store looked in is named: {view:#}"
    );
}

impl Engine {
    /// The other engine.
    fn other(self) -> Engine {
        match self {
            Engine::Podman => Engine::Docker,
            Engine::Docker => Engine::Podman,
        }
    }
}

/// With both engines here, an image in the store of the engine that does not run the
/// job's tasks (a person's `docker load`, with the server on Podman) is found there and
/// copied, not refused: the job runs, and the running engine's store has it after.
async fn an_image_in_the_other_engines_store_is_copied_from_it(engine: Engine) {
    if !ready(engine) || !ready(engine.other()) {
        return;
    }
    let dir = scratch(&format!("elsewhere-{}", engine.name()));
    let image = format!("localhost/rest-lite-test-elsewhere-{}:1", engine.name());
    // In the other engine's store alone; both copies removed at the end (after the
    // server's containers: declared first).
    let root = images::busybox_root(&dir, Path::new("/bin/busybox"));
    let _theirs = images::import(engine.other().name(), &dir, &root, &image, &[]);
    images::remove(engine.name(), &image);
    let _ours = images::Image::named(engine.name(), &image);
    assert!(!images::present(engine.name(), &image));
    let (_leftovers, server) = start(engine, &dir.join("state"));
    let client = server.client();
    let job = spec(
        "elsewhere",
        &image,
        json!([role("worker", 1, 128, "echo ran in the copied image")]),
        json!({}),
    );
    let view = run_to_end(&client, "elsewhere", &job).await;
    assert_eq!(view["jobStatus"]["state"], "SUCCEEDED", "{view:#}");
    assert!(
        log_of(&client, "elsewhere", "worker", 0)
            .await
            .contains("ran in the copied image")
    );
    assert!(
        images::present(engine.name(), &image),
        "copied into {}'s store",
        engine.says()
    );
    assert!(
        server
            .log()
            .contains("copying an image from the other engine's store"),
        "the server says where it came from"
    );
}

/// `rest-lite run --engine E` of a job whose image no store has and no registry gives:
/// the job fails by the platform's doing, so `run` exits 125; its message names the store
/// looked in and the complete command that runs the same job on the host, and that
/// command, typed as printed, runs it (exit 0).
async fn run_of_an_image_not_had_exits_125_and_prints_the_command_that_runs_it_on_the_host(
    engine: Engine,
) {
    if !ready(engine) {
        return;
    }
    let dir = scratch(&format!("run-no-image-{}", engine.name()));
    let spec_file = dir.join("job.json");
    std::fs::write(
        &spec_file,
        spec(
            "unpulled",
            "localhost/rest-lite-no-such-image:0",
            json!([role("worker", 2, 128, "echo on the host")]),
            json!({}),
        ),
    )
    .expect("spec");
    let run = |args: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_rest-lite"));
        common::hermetic(&mut command);
        let out = command
            .args(args)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .output()
            .expect("rest-lite run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            out,
        )
    };
    let (code, stderr, _) = run(&[
        "run",
        "--engine",
        engine.name(),
        spec_file.to_str().expect("path"),
    ]);
    assert_eq!(code, Some(125), "{stderr}");
    assert!(stderr.contains("ErrImagePull"), "{stderr}");
    assert!(
        stderr.contains(&format!("{} ", engine.says())) && stderr.contains("store"),
        "the store looked in is named: {stderr}"
    );
    // The command, between the last pair of backquotes.
    let on_host = stderr
        .rsplit('`')
        .nth(1)
        .expect("a command in backquotes")
        .to_string();
    let exe = std::fs::canonicalize(env!("CARGO_BIN_EXE_rest-lite")).expect("exe");
    assert_eq!(
        on_host,
        format!(
            "{} run --engine host {}",
            exe.display(),
            spec_file.display()
        ),
        "{stderr}"
    );
    let mut typed = Command::new("sh");
    common::hermetic(&mut typed);
    let out = typed
        .args(["-c", &on_host])
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("sh");
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "`{on_host}`: {out:?}");
    assert_eq!(said.matches("on the host").count(), 2, "{said}");
}

/// `rest-lite submit --follow` prints the tasks' lines in the order they were written,
/// across tasks: a server says it listens, then listens; its clients can only say they
/// heard it once they reached it, so their lines come after its line in any true order.
/// Run five times (the order once went wrong under Docker, not every time).
async fn follow_prints_a_servers_line_before_the_lines_of_the_clients_that_heard_it(
    engine: Engine,
) {
    if !ready(engine) {
        return;
    }
    let dir = scratch(&format!("follow-order-{}", engine.name()));
    let state = dir.join("state");
    let (_leftovers, server) = start(engine, &state);
    for round in 0..5 {
        let job = format!("order{round}");
        let spec_file = dir.join(format!("{job}.json"));
        std::fs::write(
            &spec_file,
            spec(
                &job,
                IMAGE,
                json!([
                    role(
                        "server",
                        1,
                        128,
                        "echo listens; for client in 0 1; do nc -l -p \"$PAI_CURRENT_CONTAINER_PORT\" -e echo hello; done"
                    ),
                    role(
                        "client",
                        2,
                        128,
                        "until [ \"$(nc \"$PAI_HOST_IP_server_0\" \"$PAI_server_0_http_PORT\" </dev/null)\" = hello ]; do sleep 0.05; done; echo heard"
                    ),
                ]),
                json!({}),
            ),
        )
        .expect("spec");
        let mut command = Command::new(env!("CARGO_BIN_EXE_rest-lite"));
        common::hermetic(&mut command);
        let out = command
            .args([
                "submit",
                "--follow",
                "-u",
                "alice",
                "--server",
                &server.url,
                "--state-dir",
            ])
            .arg(&state)
            .arg(&spec_file)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .output()
            .expect("rest-lite submit --follow");
        let printed = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{printed}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut times = String::new();
        for (role, index) in [("server", 0), ("client", 0), ("client", 1)] {
            let lines = pai_client::Lines::Source(pai_client::Source::All).stamped();
            times.push_str(
                &common::task_log(
                    &server.client(),
                    ("alice", &job),
                    (role, index),
                    false,
                    lines,
                )
                .await,
            );
        }
        let printed = format!("{printed}\n-- with their times:\n{times}");
        let at = |line: &str| printed.lines().position(|l| l == line);
        let listens = at("[server-0] listens").unwrap_or_else(|| panic!("{printed}"));
        for client in ["[client-0] heard", "[client-1] heard"] {
            let heard = at(client).unwrap_or_else(|| panic!("{client}: {printed}"));
            assert!(
                listens < heard,
                "round {round}: {client} before the server listened:\n{printed}"
            );
        }
    }
}

async fn stop_and_delete_leave_no_container(engine: Engine) {
    if !ready(engine) {
        return;
    }
    let dir = scratch(&format!("lifecycle-{}", engine.name()));
    let (_leftovers, server) = start(engine, &dir.join("state"));
    let client = server.client();
    let sleeper = role(
        "worker",
        2,
        128,
        "trap 'echo term; exit 0' TERM; while :; do sleep 1 & wait $!; done",
    );
    // Stop: TERM to every task's runtime through the engine; the containers go.
    client
        .submit(
            "alice",
            &spec("stopped", IMAGE, json!([sleeper.clone()]), json!({})),
            SpecFormat::Json,
        )
        .await
        .expect("submitted");
    every_task_running(&client, "stopped").await;
    let name = framework_name(&client, "stopped").await;
    assert_eq!(
        containers_of(engine, &name).len(),
        2,
        "a container per task"
    );
    client.stop("alice", "stopped").await.expect("stopped");
    let view = final_view(&client, "alice", "stopped").await;
    assert_eq!(view["jobStatus"]["state"], "STOPPED", "{view:#}");
    assert!(
        log_of(&client, "stopped", "worker", 0)
            .await
            .contains("term")
    );
    assert_eq!(containers_of(engine, &name), Vec::<String>::new());

    // Delete while running.
    client
        .submit(
            "alice",
            &spec("deleted", IMAGE, json!([sleeper.clone()]), json!({})),
            SpecFormat::Json,
        )
        .await
        .expect("submitted");
    every_task_running(&client, "deleted").await;
    let name = framework_name(&client, "deleted").await;
    let running = containers_of(engine, &name);
    assert_eq!(running.len(), 2);
    client.delete("alice", "deleted").await.expect("deleted");
    assert_eq!(
        running_after_deletion(engine, &name, &running),
        Vec::<String>::new()
    );
}

/// Podman's start follower reads the engine's events and looks at its running containers
/// once, however long the starts take; and a start before the events stream had
/// subscribed is not missed (the stream replays the engine's event log from before the
/// first waiter). The real Podman behind a shim first on the server's PATH that records
/// each call and makes the engine slow where it matters: `events` subscribes 4 s late, and
/// `run` starts its container 2 s late, so the containers start before the stream listens
/// and a look each second (how the follower was) would have looked four times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podmans_start_follower_reads_the_engines_events_and_looks_once() {
    if !ready(Engine::Podman) {
        return;
    }
    let dir = scratch("start-follower");
    let shims = dir.join("shims");
    std::fs::create_dir_all(&shims).expect("shims");
    let real = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("podman"))
        .find(|p| p.is_file())
        .expect("podman on PATH");
    let calls = dir.join("calls");
    let shim = shims.join("podman");
    std::fs::write(
        &shim,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{calls}'\nfor word in \"$@\"; do\n  case $word in\n    events) sleep 4; break;;\n    run) sleep 2; break;;\n    -*|runc) ;;\n    *) break;;\n  esac\ndone\nexec '{real}' \"$@\"\n",
            calls = calls.display(),
            real = real.display()
        ),
    )
    .expect("shim");
    std::fs::set_permissions(&shim, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("shim's mode");
    let path = std::env::join_paths(std::iter::once(shims.clone()).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("PATH");
    let (_leftovers, server) = start_with(Engine::Podman, &dir.join("state"), &[("PATH", &path)]);
    let client = server.client();
    submit_sleepers(&client, "followed").await;
    every_task_running(&client, "followed").await;
    let calls = std::fs::read_to_string(&calls).expect("the shim's record");
    let calls: Vec<&str> = calls.lines().collect();
    let subcommand = |call: &&str| {
        call.split_whitespace()
            .find(|w| !w.starts_with('-') && *w != "runc")
            .map(str::to_string)
    };
    let runs = calls
        .iter()
        .filter(|c| subcommand(c).as_deref() == Some("run"))
        .count();
    assert_eq!(runs, 2, "a client per task: {calls:#?}");
    let looks: Vec<&&str> = calls
        .iter()
        .filter(|c| subcommand(c).as_deref() == Some("ps") && !c.contains("--all"))
        .collect();
    assert_eq!(
        looks.len(),
        1,
        "one look at the running containers: {calls:#?}"
    );
    let streams = calls
        .iter()
        .filter(|c| subcommand(c).as_deref() == Some("events"))
        .count();
    assert_eq!(streams, 1, "one events stream for both tasks: {calls:#?}");
}

/// Removes every container of the server whose state directory is `state` when dropped:
/// a failed test leaves none running (a server's containers outlive it).
struct Leftovers {
    engine: Engine,
    filter: String,
}

impl Leftovers {
    fn of(engine: Engine, state: &Path) -> Self {
        Self {
            engine,
            filter: format!(
                "label={}={}",
                pai_local::containers::LABEL_SERVER,
                pai_local::containers::server_label(state)
            ),
        }
    }

    fn names(&self) -> Vec<String> {
        self.engine.ps(&self.filter, true)
    }
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        let names = self.names();
        if !names.is_empty() {
            self.engine.rm(&names);
        }
    }
}

/// Submits `job`: two workers that say `started`, then wait, and say `term` at a TERM.
async fn submit_sleepers(client: &Client, job: &str) {
    let sleeper = role(
        "worker",
        2,
        128,
        "echo started; trap 'echo term; exit 0' TERM; while :; do sleep 1 & wait $!; done",
    );
    client
        .submit(
            "alice",
            &spec(job, IMAGE, json!([sleeper]), json!({})),
            SpecFormat::Json,
        )
        .await
        .expect("submitted");
}

async fn a_restarted_server_follows_the_containers_the_killed_one_started(engine: Engine) {
    if !ready(engine) {
        return;
    }
    let dir = scratch(&format!("restart-{}", engine.name()));
    let state = dir.join("state");
    let (leftovers, server) = start(engine, &state);
    let client = server.client();
    submit_sleepers(&client, "followed").await;
    every_task_running(&client, "followed").await;
    let name = framework_name(&client, "followed").await;
    let mut running = containers_of(engine, &name);
    running.sort();
    assert_eq!(running.len(), 2);
    // A container of this server's that no job names.
    let stray = format!("rest-lite-stray-{}", std::process::id());
    let mut run = engine.cli();
    if engine == Engine::Podman && which("runc") {
        run.args(["--runtime", "runc"]);
    }
    let made = run
        .args(["run", "--detach", "--name", &stray, "--label"])
        .arg(&leftovers.filter["label=".len()..])
        .args([
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
        ])
        .args([IMAGE, "sleep", "600"])
        .output()
        .expect("run");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );

    server.kill();
    // The tasks outlived the server, as pods outlive a kubelet.
    let mut after_kill = engine.ps(&job_filter(&name), false);
    after_kill.sort();
    assert_eq!(
        after_kill, running,
        "the containers run on without their server"
    );

    let (_again, server) = start(engine, &state);
    let client = server.client();
    let view =
        serde_json::to_value(client.job("alice", "followed").await.expect("job")).expect("JSON");
    assert_eq!(view["jobStatus"]["state"], "RUNNING", "{view:#}");
    assert_eq!(
        view["jobStatus"]["retries"], 0,
        "the attempt is kept: {view:#}"
    );
    let mut now = containers_of(engine, &name);
    now.sort();
    assert_eq!(now, running, "the same containers, followed");
    assert!(
        !leftovers.names().contains(&stray),
        "the container no job names is removed"
    );

    client.stop("alice", "followed").await.expect("stopped");
    let view = final_view(&client, "alice", "followed").await;
    assert_eq!(view["jobStatus"]["state"], "STOPPED", "{view:#}");
    for index in 0..2 {
        let log = log_of(&client, "followed", "worker", index).await;
        assert_eq!(
            log.matches("started").count(),
            1,
            "run once, not again: {log}"
        );
        assert!(log.contains("term"), "TERM reached the command: {log}");
    }
    assert_eq!(containers_of(engine, &name), Vec::<String>::new());
    drop(server);
    drop(leftovers);
}

/// A task still in its init step when its server is killed -9 (here an operator's prep
/// script that takes a while, as a runtime image may carry) runs that step again under
/// the restarted server, with the same pod and ports, while its peer's container is
/// followed: the attempt is kept, no command runs twice, and nothing of the first init
/// step is left.
async fn a_task_in_its_init_step_at_a_restart_starts_again_beside_its_followed_peer(
    engine: Engine,
) {
    if !ready(engine) {
        return;
    }
    let dir = scratch(&format!("restart-init-{}", engine.name()));
    let state = dir.join("state");
    let (leftovers, server) = start(engine, &state);
    let client = server.client();
    // Task 1's init step says where it is on a FIFO, which the test reads, and stays. A
    // restarted server's assets are its binary's own: the script is gone then.
    let reached = dir.join("reached");
    let made = Command::new("mkfifo")
        .arg(&reached)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let hold = state.join("assets/prep/05-hold.sh");
    std::fs::write(
        &hold,
        format!(
            "#!/bin/sh\n[ \"$FC_TASK_INDEX\" = 1 ] || exit 0\necho $$ > {0}\nexec sleep 600\n",
            reached.display()
        ),
    )
    .expect("prep script");
    std::fs::set_permissions(&hold, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("executable");
    submit_sleepers(&client, "halfway").await;
    let fifo = reached.clone();
    let holder: u32 = tokio::time::timeout(
        DEADLINE,
        tokio::task::spawn_blocking(move || std::fs::read_to_string(fifo).expect("read FIFO")),
    )
    .await
    .expect("task 1 reaches its prep script")
    .expect("joined")
    .trim()
    .parse()
    .expect("a PID");
    until_tasks(&client, "halfway", |states| {
        states.iter().filter(|s| **s == "RUNNING").count() == 1
    })
    .await;
    let name = framework_name(&client, "halfway").await;
    let first = containers_of(engine, &name);
    assert_eq!(first.len(), 1, "task 0's container only: {first:?}");
    server.kill();

    let (_again, server) = start(engine, &state);
    let client = server.client();
    every_task_running(&client, "halfway").await;
    let view =
        serde_json::to_value(client.job("alice", "halfway").await.expect("job")).expect("JSON");
    assert_eq!(
        view["jobStatus"]["retries"], 0,
        "the attempt is kept: {view:#}"
    );
    let now = containers_of(engine, &name);
    assert_eq!(now.len(), 2, "{now:?}");
    assert!(
        now.contains(&first[0]),
        "task 0's container is followed: {now:?}"
    );
    let stat = std::fs::read_to_string(format!("/proc/{holder}/stat")).unwrap_or_default();
    assert!(
        stat.is_empty() || stat.rsplit(')').next().is_some_and(|s| s.starts_with(" Z")),
        "the first init step's process is ended: {stat}"
    );

    client.stop("alice", "halfway").await.expect("stopped");
    let view = final_view(&client, "alice", "halfway").await;
    assert_eq!(view["jobStatus"]["state"], "STOPPED", "{view:#}");
    for index in 0..2 {
        let log = log_of(&client, "halfway", "worker", index).await;
        assert_eq!(log.matches("started").count(), 1, "run once: {log}");
    }
    assert_eq!(containers_of(engine, &name), Vec::<String>::new());
    drop(server);
    drop(leftovers);
}

/// The user command's environment, from the `env -0 | base64` line it printed.
fn task_env(log: &str) -> std::collections::BTreeMap<String, String> {
    use base64::Engine;
    let line = log
        .lines()
        .find_map(|l| l.strip_prefix("env-b64="))
        .unwrap_or_else(|| panic!("no environment in:\n{log}"));
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(line.trim())
        .expect("base64");
    bytes
        .split(|b| *b == 0)
        .filter(|r| !r.is_empty())
        .filter_map(|record| {
            let text = String::from_utf8_lossy(record);
            let (name, value) = text.split_once('=')?;
            Some((name.to_string(), value.to_string()))
        })
        .collect()
}

/// The Framework's name of alice's job (its containers carry it).
async fn framework_name(_client: &Client, job: &str) -> String {
    pai_job::names::framework_name("alice", job)
}

/// A registry of this machine (Debian's `docker-registry`) that asks for a password, with
/// the test image pushed to it; its address. Ends with the returned process.
fn private_registry(dir: &Path) -> Option<(std::process::Child, String)> {
    // The image is pushed from Podman's store, whichever engine then pulls it.
    if !ready(Engine::Podman)
        || !pai_test_support::needs::present(
            "docker-registry and htpasswd",
            which("docker-registry") && which("htpasswd"),
            "apt-get install docker-registry apache2-utils",
        )
    {
        return None;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let address = format!("127.0.0.1:{port}");
    let htpasswd = Command::new("htpasswd")
        .args(["-Bbn", "robot", REGISTRY_PASSWORD])
        .output()
        .expect("htpasswd");
    std::fs::write(dir.join("htpasswd"), &htpasswd.stdout).expect("htpasswd file");
    std::fs::write(
        dir.join("registry.yml"),
        format!(
            "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {address}\nauth:\n  htpasswd:\n    realm: test\n    path: {}\n",
            dir.join("data").display(),
            dir.join("htpasswd").display()
        ),
    )
    .expect("config");
    let mut registry = Command::new("docker-registry")
        .arg("serve")
        .arg(dir.join("registry.yml"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("docker-registry");
    // It logs "listening on" once its socket is bound.
    let stderr = registry.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        let mut tx = Some(tx);
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("listening on")
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(DEADLINE).expect("the registry listens");
    // Pushed with credentials of the test's own, in its own directory.
    let auth = dir.join("push-auth.json");
    std::fs::write(
        &auth,
        json!({"auths": {&address: {"auth": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, format!("robot:{REGISTRY_PASSWORD}"))}}}).to_string(),
    )
    .expect("auth");
    let pushed = Command::new("podman")
        .args(["push", "--quiet", "--tls-verify=false", "--authfile"])
        .arg(&auth)
        .arg(IMAGE)
        .arg(format!("{address}/team/busybox:1"))
        .output()
        .expect("podman push");
    assert!(
        pushed.status.success(),
        "podman push: {}",
        String::from_utf8_lossy(&pushed.stderr)
    );
    Some((registry, address))
}

const REGISTRY_PASSWORD: &str = "registry-s3cret";

async fn a_private_image_is_pulled_with_the_jobs_credentials_while_the_job_waits(engine: Engine) {
    if !ready(engine) {
        return;
    }
    let dir = scratch(&format!("registry-{}", engine.name()));
    let Some((mut registry, address)) = private_registry(&dir) else {
        return;
    };
    let image = format!("{address}/team/busybox:1");
    // Not on this machine: the job's pull is the first; what it pulls is removed after
    // (dropped after the server's containers are).
    images::remove(engine.name(), &image);
    let _pulled = images::Image::named(engine.name(), &image);
    // The test's registry speaks plain HTTP: Podman is told so for this address only;
    // Docker Engine speaks it to any registry on 127.0.0.0/8 unasked.
    let registries = dir.join("registries.conf");
    std::fs::write(
        &registries,
        format!("[[registry]]\nlocation = \"{address}\"\ninsecure = true\n"),
    )
    .expect("registries.conf");
    let state = dir.join("state");
    let (_leftovers, server) = start_with(
        engine,
        &state,
        &[("CONTAINERS_REGISTRIES_CONF", registries.as_os_str())],
    );
    let client = server.client();
    let job = |name: &str, auth: bool| {
        let auth = if auth {
            format!(
                "    auth:\n      username: robot\n      password: <% $secrets.password %>\n      registryuri: {address}\n"
            )
        } else {
            String::new()
        };
        format!(
            "protocolVersion: 2\nname: {name}\ntype: job\nsecrets:\n  password: {REGISTRY_PASSWORD}\nprerequisites:\n  - name: img\n    type: dockerimage\n    uri: {image}\n{auth}taskRoles:\n  worker:\n    instances: 1\n    dockerImage: img\n    resourcePerInstance: {{cpu: 1, memoryMB: 128, gpu: 0}}\n    commands:\n      - echo pulled and running\n"
        )
    };

    // Without the credentials the registry refuses: the attempt ends with its words.
    client
        .submit("alice", &job("anonymous", false), SpecFormat::Yaml)
        .await
        .expect("submitted");
    let view = final_view(&client, "alice", "anonymous").await;
    assert_eq!(view["jobStatus"]["state"], "FAILED", "{view:#}");
    let text = view.to_string();
    assert!(text.contains("ErrImagePull"), "{view:#}");
    assert!(
        text.contains("unauthorized")
            || text.contains("authentication required")
            || text.contains("no basic auth credentials"),
        "the registry's words: {view:#}"
    );

    // With them: WAITING while the image is pulled, then it runs.
    client
        .submit("alice", &job("private", true), SpecFormat::Yaml)
        .await
        .expect("submitted");
    let mut changes = client.watch("alice", "private").await.expect("watch");
    let mut saw_pulling = None;
    let mut last = None;
    let follow = async {
        while let Some(view) = changes.next().await {
            let view = view.expect("a view");
            if let Some(waiting) = &view.job_status.waiting
                && waiting.reason == "PullingImage"
            {
                assert_eq!(view.job_status.state, pai_api::status::JobState::Waiting);
                saw_pulling.get_or_insert_with(|| waiting.message.clone());
            }
            last = Some(view);
        }
    };
    tokio::time::timeout(DEADLINE, follow)
        .await
        .expect("the job ends");
    let last = serde_json::to_value(last.expect("a view")).expect("JSON");
    assert_eq!(last["jobStatus"]["state"], "SUCCEEDED", "{last:#}");
    let pulling = saw_pulling.expect("WAITING PullingImage while the image was pulled");
    assert!(pulling.contains(&image), "{pulling}");
    assert!(
        log_of(&client, "private", "worker", 0)
            .await
            .contains("pulled and running")
    );
    // The credentials: in one private file of the job, in no task's directory.
    let name = framework_name(&client, "private").await;
    let job_dir = state.join("jobs").join(&name);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(job_dir.join("registry-auth.json"))
        .expect("the job's registry credentials")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let grep = Command::new("grep")
        .args(["-rl", REGISTRY_PASSWORD])
        .arg(job_dir.join("attempts"))
        .output()
        .expect("grep");
    assert_eq!(
        String::from_utf8_lossy(&grep.stdout),
        "",
        "a task's files hold the registry password"
    );
    let _ = registry.kill();
    let _ = registry.wait();
}

/// The test image with this machine's OpenSSH (sshd, ssh, ssh-keygen and the libraries
/// they load) beside busybox: what a training image with openssh-server has.
const SSH_IMAGE: &str = "localhost/rest-lite-test-openssh:1";

/// Imports [`SSH_IMAGE`] into `engine` once; false (skipped, or failed under CI) without
/// OpenSSH here.
fn ssh_image(engine: Engine) -> bool {
    imported_once(engine, SSH_IMAGE, |dir| (ssh_root(dir), Vec::new()))
}

/// [`SSH_IMAGE`] as a user's image: its user is `trainer` (uid 1000), a name that only
/// the image's own `/etc/passwd` resolves.
const NAMED_USER_SSH_IMAGE: &str = "localhost/rest-lite-test-openssh-trainer:1";

/// Imports [`NAMED_USER_SSH_IMAGE`] into `engine` once, as [`ssh_image`].
fn named_user_ssh_image(engine: Engine) -> bool {
    imported_once(engine, NAMED_USER_SSH_IMAGE, |dir| {
        let root = ssh_root(dir);
        let mut passwd = std::fs::read_to_string(root.join("etc/passwd")).expect("passwd");
        passwd.push_str("trainer:x:1000:1000::/home/trainer:/bin/sh\n");
        std::fs::write(root.join("etc/passwd"), passwd).expect("passwd");
        let mut group = std::fs::read_to_string(root.join("etc/group")).expect("group");
        group.push_str("trainer:x:1000:\n");
        std::fs::write(root.join("etc/group"), group).expect("group");
        let home = root.join("home/trainer");
        std::fs::create_dir_all(&home).expect("home");
        std::os::unix::fs::chown(&home, Some(1000), Some(1000)).expect("chown");
        (root, vec!["USER trainer"])
    })
}

/// Imports the image `name` into `engine` once, its root file system and Dockerfile
/// changes made by `make` in a scratch directory; false without OpenSSH here.
fn imported_once(
    engine: Engine,
    name: &str,
    make: impl FnOnce(&Path) -> (std::path::PathBuf, Vec<&'static str>),
) -> bool {
    let programs = ["/usr/sbin/sshd", "/usr/bin/ssh", "/usr/bin/ssh-keygen"];
    if !pai_test_support::needs::present(
        "sshd, ssh and ssh-keygen",
        programs.iter().all(|p| Path::new(p).is_file()),
        "apt-get install openssh-server openssh-client",
    ) {
        return false;
    }
    images::shared(engine.name(), name, || {
        let dir = scratch(&format!(
            "image-{}-{}",
            name.replace(['/', ':'], "-"),
            engine.name()
        ));
        let (root, changes) = make(&dir);
        images::import(engine.name(), &dir, &root, name, &changes)
    });
    true
}

/// The libraries `objects` link (as `ldd` finds them), but those under `besides`.
fn linked_libraries(
    objects: &[std::path::PathBuf],
    besides: Option<&Path>,
) -> Vec<std::path::PathBuf> {
    let mut libraries = Vec::new();
    for object in objects {
        let ldd = Command::new("ldd").arg(object).output().expect("ldd");
        libraries.extend(
            String::from_utf8_lossy(&ldd.stdout)
                .split_whitespace()
                .filter(|w| w.starts_with('/'))
                .map(std::path::PathBuf::from)
                .filter(|lib| besides.is_none_or(|dir| !lib.starts_with(dir))),
        );
    }
    libraries
}

/// Copies `files` (absolute paths of this machine) to the same paths under `root`; a
/// library named through a link is copied as the file it names, under the name.
fn copy_into(root: &Path, mut files: Vec<std::path::PathBuf>) {
    files.sort();
    files.dedup();
    for file in &files {
        let to = root.join(file.strip_prefix("/").expect("absolute"));
        std::fs::create_dir_all(to.parent().expect("parent")).expect("dir");
        std::fs::copy(file, &to).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    }
}

/// busybox with this machine's OpenSSH (sshd, ssh, ssh-keygen and the libraries they
/// load) in `dir/rootfs`.
fn ssh_root(dir: &Path) -> std::path::PathBuf {
    let programs = ["/usr/sbin/sshd", "/usr/bin/ssh", "/usr/bin/ssh-keygen"];
    let root = images::busybox_root(dir, Path::new("/bin/busybox"));
    let programs: Vec<std::path::PathBuf> = programs.iter().map(std::path::PathBuf::from).collect();
    let mut files = linked_libraries(&programs, None);
    files.extend(programs);
    // glibc reads /etc/passwd through this module.
    for lib in ["/lib/x86_64-linux-gnu/libnss_files.so.2"] {
        if Path::new(lib).exists() {
            files.push(lib.into());
        }
    }
    copy_into(&root, files);
    for sub in ["run/sshd", "var/empty"] {
        std::fs::create_dir_all(root.join(sub)).expect("dir");
    }
    root
}

/// The image of the frameworks' test: busybox, this machine's Python (its program, the
/// libraries it and the packages' extensions link, its standard library) and the real JAX
/// and XGBoost of `target/frameworks-venv` in its `dist-packages`, where the image's
/// `python3` finds them.
const FRAMEWORKS_IMAGE: &str = "localhost/rest-lite-test-frameworks:1";

fn frameworks_root(dir: &Path, venv: &Path) -> std::path::PathBuf {
    let root = images::busybox_root(dir, Path::new("/bin/busybox"));
    let python = std::fs::canonicalize("/usr/bin/python3").expect("python3");
    let version = python
        .file_name()
        .and_then(|n| n.to_str())
        .expect("python's name")
        .to_string();
    let packages = venv.join("lib").join(&version).join("site-packages");
    let copy_tree = |from: &Path, to: &Path| {
        std::fs::create_dir_all(to).expect("dir");
        let status = Command::new("cp")
            .arg("-a")
            .arg(from.join("."))
            .arg(to)
            .status()
            .expect("cp");
        assert!(status.success(), "cp {}", from.display());
    };
    copy_tree(
        &Path::new("/usr/lib").join(&version),
        &root.join("usr/lib").join(&version),
    );
    copy_tree(
        &packages,
        &root
            .join("usr/local/lib")
            .join(&version)
            .join("dist-packages"),
    );
    // The program, and every library outside the packages that it, an extension of its
    // standard library's or of a package's links.
    let mut linked = vec![python.clone()];
    let find = Command::new("find")
        .arg(&packages)
        .arg(Path::new("/usr/lib").join(&version).join("lib-dynload"))
        .args(["-name", "*.so*", "-type", "f"])
        .output()
        .expect("find");
    linked.extend(
        String::from_utf8_lossy(&find.stdout)
            .lines()
            .map(std::path::PathBuf::from),
    );
    let mut files = linked_libraries(&linked, Some(&packages));
    files.push(python.clone());
    copy_into(&root, files);
    std::os::unix::fs::symlink(&version, root.join("usr/bin/python3")).expect("python3");
    root
}

/// JAX's processes all-gather and XGBoost's workers train one model across two tasks in
/// their image, the examples run unchanged but for the image's name (Podman: an image of
/// some 700 MB, which Docker's vfs driver of CI's machines would copy per container).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jax_and_xgboost_run_across_tasks_in_their_image() {
    let Some(venv) = common::frameworks_venv() else {
        return;
    };
    if !ready(Engine::Podman) {
        return;
    }
    images::shared("podman", FRAMEWORKS_IMAGE, || {
        let dir = scratch("image-frameworks");
        let root = frameworks_root(&dir, &venv);
        let image = images::import("podman", &dir, &root, FRAMEWORKS_IMAGE, &[]);
        let _ = std::fs::remove_dir_all(&dir);
        image
    });
    let dir = scratch("frameworks");
    let (_leftovers, server) = start(Engine::Podman, &dir.join("state"));
    let client = server.client();
    for (example, job, said) in [
        ("jax-allgather.yaml", "jax-allgather", "gathered [0, 1]"),
        ("xgboost-train.yaml", "xgboost-train", "model sha256 "),
    ] {
        let spec = std::fs::read_to_string(common::repo_root().join("examples").join(example))
            .expect("example");
        let spec: String = spec
            .lines()
            .map(|line| match line.strip_prefix("image: ") {
                Some(_) => format!("image: {FRAMEWORKS_IMAGE}\n"),
                None => format!("{line}\n"),
            })
            .collect();
        let view = run_to_end(&client, job, &spec).await;
        let mut said_by = Vec::new();
        for index in 0..2 {
            let log = log_of(&client, job, "worker", index).await;
            let line = log
                .lines()
                .find(|l| l.contains(said))
                .unwrap_or_else(|| panic!("{job}, task {index}:\n{log}\n{view:#}"))
                .to_string();
            said_by.push(line);
        }
        assert_eq!(view["jobStatus"]["state"], "SUCCEEDED", "{view:#}");
        if job == "xgboost-train" {
            let digest = |l: &str| l.split(said).nth(1).map(str::to_string);
            assert_eq!(digest(&said_by[0]), digest(&said_by[1]), "{said_by:?}");
        } else {
            assert!(said_by[0].starts_with("process 0 of 2"), "{said_by:?}");
            assert!(said_by[1].starts_with("process 1 of 2"), "{said_by:?}");
        }
    }
}

/// Every task prints its `TF_CONFIG`; chief-0 reaches worker-1 over ssh by its alias,
/// with the job's key, in the image's sshd.
const TRAINING: &str = r#"set -e
me="$PAI_CURRENT_TASK_ROLE_NAME-$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"
echo "tf-config=$TF_CONFIG"
if [ "$me" = chief-0 ]; then
    for try in $(seq 1 50); do
        reached=$(ssh -o ConnectTimeout=5 worker-1 'echo "$PAI_CURRENT_TASK_ROLE_NAME-$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX on $(hostname)"' 2>/dev/null) && break
        sleep 0.2
    done
    echo "reached ${reached:-nothing}"
    [ -n "${reached:-}" ]
else
    trap 'exit 0' TERM
    while :; do sleep 1 & wait $!; done
fi"#;

async fn tensorflow_roles_read_tf_config_and_reach_each_other_over_ssh_in_containers(
    engine: Engine,
) {
    if !ready(engine) || !ssh_image(engine) {
        return;
    }
    let dir = scratch(&format!("training-{}", engine.name()));
    let (_leftovers, server) = start(engine, &dir.join("state"));
    let client = server.client();
    let role = |name: &str, tasks: u32| json!({"name": name, "taskNumber": tasks, "cpuNumber": 1, "memoryMB": 256, "command": TRAINING});
    let job = spec(
        "tf",
        SSH_IMAGE,
        // The chief's success ends the job (the others wait for TERM).
        json!([
            {"name": "chief", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 256, "command": TRAINING, "minSucceededTaskCount": 1},
            role("worker", 2),
            role("ps", 1)
        ]),
        json!({}),
    );
    let view = run_to_end(&client, "tf", &job).await;
    let chief = log_of(&client, "tf", "chief", 0).await;
    assert_eq!(view["jobStatus"]["state"], "SUCCEEDED", "{view:#}\n{chief}");
    assert!(
        chief.contains("reached worker-1 on ") && chief.contains("-worker-1"),
        "ssh from chief-0 to worker-1, a session in worker-1's container:\n{chief}"
    );
    // TF_CONFIG: every role's tasks at the addresses and ports the job gave them, and the
    // task itself.
    let tf_config = |log: &str| -> Value {
        let line = log
            .lines()
            .find_map(|l| l.strip_prefix("tf-config="))
            .unwrap_or_else(|| panic!("no TF_CONFIG in:\n{log}"));
        serde_json::from_str(line).expect("TF_CONFIG is JSON")
    };
    let mine = tf_config(&chief);
    assert_eq!(mine["task"], json!({"type": "chief", "index": 0}), "{mine}");
    for (role, tasks) in [("chief", 1), ("worker", 2), ("ps", 1)] {
        let addresses = mine["cluster"][role]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(addresses.len(), tasks, "{mine}");
        assert!(
            addresses
                .iter()
                .all(|a| a.as_str().is_some_and(|a| a.starts_with("127.0.0.1:"))),
            "{mine}"
        );
    }
    let worker = tf_config(&log_of(&client, "tf", "worker", 1).await);
    assert_eq!(worker["task"], json!({"type": "worker", "index": 1}));
    assert_eq!(
        worker["cluster"], mine["cluster"],
        "one cluster for every task"
    );
    // `entry` wrote the tasks' files from this machine; every path in them is the one the
    // main container sees (`/usr/local/pai/…`), none is the state directory's.
    let state = dir.join("state");
    let attempts = state
        .join("jobs")
        .join(pai_job::names::framework_name("alice", "tf"))
        .join("attempts");
    let host_path = state.display().to_string();
    let mut read = 0;
    let mut pending = vec![attempts];
    while let Some(path) = pending.pop() {
        if path.is_dir() {
            pending.extend(
                std::fs::read_dir(&path)
                    .expect("dir")
                    .map(|e| e.expect("entry").path()),
            );
        } else if path.file_name().is_some_and(|n| n != "container.log")
            && !path.components().any(|c| c.as_os_str() == "logs")
        {
            let text =
                String::from_utf8_lossy(&std::fs::read(&path).unwrap_or_default()).into_owned();
            assert!(
                !text.contains(&host_path),
                "{} names {host_path}",
                path.display()
            );
            read += 1;
        }
    }
    assert!(read > 10, "only {read} files read");
}

/// An image whose user is not root (as many are: Jupyter's, the NVIDIA containers' with a
/// user of their own).
const NON_ROOT_IMAGE: &str = "localhost/rest-lite-test-nonroot:1";

async fn a_task_runs_as_its_images_user_and_may_write_its_volume(engine: Engine) {
    if !ready(engine) {
        return;
    }
    let dir = scratch(&format!("non-root-{}", engine.name()));
    // The test image as a user's: its user is not root.
    let root = images::busybox_root(&dir, Path::new("/bin/busybox"));
    // Dropped after the server's containers are removed.
    let _image = images::import(
        engine.name(),
        &dir,
        &root,
        NON_ROOT_IMAGE,
        &["USER 1000:1000"],
    );
    let (_leftovers, server) = start(engine, &dir.join("state"));
    let client = server.client();
    let job = spec(
        "non-root",
        NON_ROOT_IMAGE,
        json!([role(
            "worker",
            1,
            128,
            "id -u; touch /usr/local/pai/mine && echo wrote; printf '{\"ok\": 1}' > \"$PAI_RESULT_FILE\""
        )]),
        json!({}),
    );
    let view = run_to_end(&client, "non-root", &job).await;
    let log = log_of(&client, "non-root", "worker", 0).await;
    assert_eq!(view["jobStatus"]["state"], "SUCCEEDED", "{view:#}\n{log}");
    assert!(log.starts_with("1000\n"), "the image's user: {log}");
    assert!(log.contains("wrote"), "{log}");
    assert_eq!(
        view["taskRoles"]["worker"]["taskStatuses"][0]["result"],
        json!({"ok": 1}),
        "the termination message, written as that user: {view:#}"
    );
    // Its own ordered log too (the runtime, as that user, writes it).
    let stdout = common::task_log(
        &client,
        ("alice", "non-root"),
        ("worker", 0),
        false,
        pai_client::Lines::Stream(pai_client::Stream::Stdout),
    )
    .await;
    assert!(stdout.contains("wrote"), "{stdout}");
}

/// chief-0 logs in to worker-0 with the job's key, in the image's sshd, which runs as the
/// image's user as everything of the task does.
const AS_TRAINER: &str = r#"set -e
me="$PAI_CURRENT_TASK_ROLE_NAME-$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"
echo "me=$(id -un):$(id -u)"
if [ "$me" = chief-0 ]; then
    for try in $(seq 1 50); do
        reached=$(ssh -o ConnectTimeout=5 worker-0 'echo "$(id -un):$(id -u) on $(hostname)"' 2>&1) && break
        sleep 0.2
    done
    echo "reached ${reached:-nothing}"
    case "$reached" in trainer:1000\ on\ *) ;; *) exit 1 ;; esac
else
    trap 'exit 0' TERM
    while :; do sleep 1 & wait $!; done
fi"#;

async fn tasks_of_an_image_whose_user_is_a_name_reach_each_other_over_ssh_as_that_user(
    engine: Engine,
) {
    if !ready(engine) || !named_user_ssh_image(engine) {
        return;
    }
    let dir = scratch(&format!("ssh-trainer-{}", engine.name()));
    let (_leftovers, server) = start(engine, &dir.join("state"));
    let client = server.client();
    let job = spec(
        "trainer",
        NAMED_USER_SSH_IMAGE,
        json!([
            {"name": "chief", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 256, "command": AS_TRAINER, "minSucceededTaskCount": 1},
            {"name": "worker", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 256, "command": AS_TRAINER}
        ]),
        json!({}),
    );
    let view = run_to_end(&client, "trainer", &job).await;
    let chief = log_of(&client, "trainer", "chief", 0).await;
    let worker = log_of(&client, "trainer", "worker", 0).await;
    assert_eq!(
        view["jobStatus"]["state"], "SUCCEEDED",
        "{view:#}\n{chief}\n{worker}"
    );
    assert!(chief.contains("me=trainer:1000"), "{chief}");
    assert!(
        chief.contains("reached trainer:1000 on ") && chief.contains("-worker-0"),
        "an ssh session as trainer in worker-0's container:\n{chief}"
    );
}

/// A protocol v2 job mounting three team storages: shared, each user's own, read-only.
/// The files it writes are in the directories the config gives them.
async fn a_job_writes_into_its_team_storages_where_the_config_keeps_them(engine: Engine) {
    if !ready(engine) {
        return;
    }
    let dir = scratch(&format!("storages-{}", engine.name()));
    let (team, home, data) = (dir.join("team"), dir.join("home"), dir.join("data"));
    for d in [&team, &home, &data] {
        std::fs::create_dir_all(d).expect("dir");
    }
    std::fs::write(data.join("in.txt"), "input\n").expect("input");
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "storages:\n  - {{name: team, path: {}}}\n  - {{name: home, path: {}, share: false}}\n  - {{name: data, path: {}, readOnly: true}}\n",
            team.display(),
            home.display(),
            data.display()
        ),
    )
    .expect("config");
    let (_leftovers, server) = start_configured(engine, &dir.join("state"), &[], Some(&config));
    let client = server.client();
    let job = format!(
        r#"protocolVersion: 2
name: stored
type: job
prerequisites:
  - {{name: image, type: dockerimage, uri: "{IMAGE}"}}
taskRoles:
  worker:
    instances: 1
    dockerImage: image
    resourcePerInstance: {{cpu: 1, memoryMB: 128, gpu: 0}}
    commands:
      - echo "from $PAI_CURRENT_TASK_ROLE_NAME" > /mnt/team/out.txt
      - echo mine > /mnt/home/out.txt
      - cat /data/in.txt
      - if touch /data/x 2>/dev/null; then echo "read-only storage written"; exit 1; fi
extras:
  storages:
    - {{name: team}}
    - {{name: home}}
    - {{name: data, mountPath: /data}}
"#
    );
    let view = run_to_end(&client, "stored", &job).await;
    assert_eq!(view["jobStatus"]["state"], "SUCCEEDED", "{view:#}");
    assert_eq!(
        std::fs::read_to_string(team.join("out.txt")).expect("in the team directory"),
        "from worker\n"
    );
    // Not shared: the user's own directory in it.
    assert_eq!(
        std::fs::read_to_string(home.join("alice/out.txt")).expect("in alice's directory"),
        "mine\n"
    );
    assert!(!home.join("out.txt").exists());
    assert!(
        log_of(&client, "stored", "worker", 0)
            .await
            .contains("input")
    );
    assert!(!data.join("x").exists());
    // The job page says what its tasks mount.
    let token = server.token.clone().expect("token");
    let page = common::request(
        &server.url,
        "GET",
        "/ui/jobs/alice/stored",
        &[("Authorization", &format!("Bearer {token}"))],
        "",
    );
    assert!(
        page.body.contains(
            "storages: team at /mnt/team; home at /mnt/home (alice&#x27;s own); data at /data (read-only)"
        ),
        "{}",
        page.body
    );
}
