//! `kube-runtime entry` as the init container runs it, then `run` on what it left: the
//! whole path from a Framework with addresses to a user command that sees its peers.

use crate::common;

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{BIN, TaskDir, finish};
use pai_kube_runtime::shell;
use pai_test_support::ApiServer;
use pai_test_support::frameworks::{
    NAMESPACE, address, framework_on_ports, set_attempt, set_pod_ip, to_value,
};
use serde_json::Value;

const HOSTILE_CMD: &str = "echo \"index=$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX ps=$PAI_HOST_IP_ps_0:$PAI_ps_0_http_PORT ps_tasks=$PAI_TASK_ROLE_TASK_COUNT_ps\"\necho 'quotes \" and $(not run)'";

/// A Framework of ps (1 task) and worker (2 tasks), every task with an address.
fn ready_framework(base: u16) -> Value {
    let mut value = to_value(&framework_on_ports("fw", &[("ps", 1), ("worker", 2)], base));
    set_pod_ip(&mut value, "ps", 0, &address(0, 0));
    set_pod_ip(&mut value, "worker", 0, &address(1, 0));
    set_pod_ip(&mut value, "worker", 1, &address(1, 1));
    value
}

struct Assets {
    dir: PathBuf,
}

impl Assets {
    fn new(task: &TaskDir, prep: &str) -> Self {
        let dir = task.root().join("assets");
        std::fs::create_dir_all(dir.join("prep")).expect("prep");
        std::fs::create_dir_all(dir.join("init")).expect("init");
        std::fs::write(dir.join("prep/10-test.sh"), prep).expect("prep script");
        std::fs::write(dir.join("init/10-noop.sh"), "exit 0\n").expect("init script");
        Self { dir }
    }
}

fn entry(task: &TaskDir, assets: &Assets, role: &str, index: u32) -> Command {
    let root = task.root().join("pai");
    let mut command = Command::new(BIN);
    command
        .args(["entry", "--root"])
        .arg(&root)
        .arg("--assets")
        .arg(&assets.dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", task.root())
        .env("FC_FRAMEWORK_NAMESPACE", NAMESPACE)
        .env("FC_FRAMEWORK_NAME", "fw")
        .env("FC_FRAMEWORK_ATTEMPT_ID", "0")
        .env("FC_TASKROLE_NAME", role)
        .env("FC_TASK_INDEX", index.to_string())
        .env("FC_TASK_ATTEMPT_ID", "0")
        .env("USER_CMD", HOSTILE_CMD)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn local<'a>(command: &'a mut Command, framework_file: &Path) -> &'a mut Command {
    command.env("BARRIER_FRAMEWORK_FILE", framework_file)
}

fn publish(task: &TaskDir, value: &Value) -> PathBuf {
    let path = task.root().join("framework-state.json");
    pai_barrier::output::write_json(&path, value).expect("write framework");
    path
}

/// `run` on the root `entry` prepared, as a plain child (the PID-1 cases are in pid1.rs).
fn run(task: &TaskDir, role: &str, index: u32) -> common::Finished {
    let child = Command::new(task.root().join("pai/run"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("PAI_RUNTIME_ROOT", task.root().join("pai"))
        .env("FC_TASKROLE_NAME", role)
        .env("FC_TASK_INDEX", index.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the installed runtime");
    finish(child)
}

#[test]
fn entry_prepares_everything_and_run_starts_the_command_with_its_peers() {
    let task = TaskDir::new("entry-local");
    let assets = Assets::new(&task, "echo prep-ran-in \"$PAI_RUNTIME_ROOT\"\n");
    let file = publish(&task, &ready_framework(30000));
    let out = finish(
        local(&mut entry(&task, &assets, "worker", 1), &file)
            .spawn()
            .expect("entry"),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);

    let root = task.root().join("pai");
    assert_eq!(
        std::fs::read(root.join("run")).expect("run"),
        std::fs::read(BIN).expect("bin")
    );
    assert!(root.join("init/10-noop.sh").exists());
    let log_dir = root.join("logs/attempt-0/role-worker/idx-1/attempt-0");
    let prep_log = std::fs::read_to_string(log_dir.join("prep-10-test.sh.log")).expect("prep log");
    assert_eq!(prep_log, format!("prep-ran-in {}\n", root.display()));
    assert_eq!(
        std::fs::read_to_string(root.join("main.sh")).expect("main.sh"),
        format!("{HOSTILE_CMD}\n")
    );
    assert!(root.join("peers.json").exists() && root.join("framework.json").exists());

    // This task's own variables in env.sh, the peers' in env-peers.sh (a pod has no
    // shared directory: files of its own).
    let mut vars: Vec<(OsString, OsString)> =
        shell::parse(&std::fs::read(root.join("env.sh")).expect("env.sh")).expect("parses");
    let peers: Vec<(OsString, OsString)> =
        shell::parse(&std::fs::read(root.join("env-peers.sh")).expect("env-peers.sh"))
            .expect("parses");
    assert!(
        !peers.iter().any(|(k, _)| k == "PAI_TASK_ROLE_INDEX"),
        "only the peers' in env-peers.sh"
    );
    assert_eq!(
        std::fs::metadata(root.join("env-peers.sh"))
            .expect("stat")
            .nlink(),
        1
    );
    vars.extend(peers);
    let get = |n: &str| {
        vars.iter()
            .find(|(k, _)| k == n)
            .and_then(|(_, v)| v.to_str())
            .map(str::to_string)
    };
    assert_eq!(
        get("PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX").as_deref(),
        Some("1")
    );
    assert_eq!(get("PAI_TASK_ROLE_INDEX").as_deref(), Some("1"));
    assert_eq!(get("PAI_HOST_IP_worker_0"), Some(address(1, 0)));
    assert_eq!(
        get("PAI_TASK_ROLE_worker_HOST_LIST"),
        Some(format!("{}:31001,{}:31001", address(1, 0), address(1, 1)))
    );
    assert_eq!(get("PAI_PORT_LIST_ps_0_ssh").as_deref(), Some("30002"));

    let out = run(&task, "worker", 1);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(
        out.stdout,
        format!(
            "index=1 ps={}:30001 ps_tasks=1\nquotes \" and $(not run)\n",
            address(0, 0)
        )
    );
}

/// The in-process API server, with the runtime it serves on (kept alive by the caller).
#[test]
fn daemons_get_this_tasks_variables_and_not_the_peers() {
    let task = TaskDir::new("entry-daemon-env");
    let assets = Assets::new(&task, "exit 0\n");
    // A daemon that writes its environment, then lets the user command end.
    let done = task.root().join("daemon-done");
    assert!(
        Command::new("mkfifo")
            .arg(&done)
            .status()
            .expect("mkfifo")
            .success()
    );
    std::fs::write(
        assets.dir.join("init/10-noop.sh"),
        format!(
            "env > \"$PAI_RUNTIME_ROOT/daemon-env\"\necho done > '{}'\n",
            done.display()
        ),
    )
    .expect("init script");
    let file = publish(&task, &ready_framework(30000));
    let user = format!(
        "read line < '{}'; echo \"$PAI_HOST_IP_worker_0\"",
        done.display()
    );
    let out = finish(
        local(&mut entry(&task, &assets, "worker", 1), &file)
            .env("USER_CMD", &user)
            .spawn()
            .expect("entry"),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let out = run(&task, "worker", 1);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    // The user command has every variable.
    assert_eq!(out.stdout.trim(), address(1, 0));
    let root = task.root().join("pai");
    let daemon = std::fs::read_to_string(root.join("daemon-env")).expect("the daemon's env");
    let has = |line: &str| daemon.lines().any(|l| l == line);
    assert!(has("PAI_CONTAINER_SSH_PORT=31002"), "{daemon}");
    assert!(
        has("PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX=1"),
        "{daemon}"
    );
    assert!(
        has(&format!("PAI_RUNTIME_ROOT={}", root.display())),
        "{daemon}"
    );
    for peer in [
        "PAI_HOST_IP_",
        "PAI_PORT_LIST_",
        "PAI_TASK_ROLE_worker_HOST_LIST",
    ] {
        assert!(
            !daemon.lines().any(|l| l.starts_with(peer)),
            "a daemon got {peer}…: {daemon}"
        );
    }
}

fn api_server() -> (tokio::runtime::Runtime, ApiServer) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("rt");
    let server = runtime.block_on(ApiServer::start());
    (runtime, server)
}

#[test]
fn entry_passes_the_barrier_through_the_api_server() {
    let (runtime, server) = api_server();
    let task = TaskDir::new("entry-kube");
    let assets = Assets::new(&task, "true\n");
    let mut value = ready_framework(30100);
    set_pod_ip(&mut value, "worker", 1, "");
    server.create("frameworks", NAMESPACE, value);
    let child = entry(&task, &assets, "worker", 0)
        .env("KUBE_APISERVER_ADDRESS", server.url())
        .spawn()
        .expect("entry");
    // The last address arrives once the barrier watches.
    runtime.block_on(server.watches_started(1));
    server.modify("frameworks", NAMESPACE, "fw", |f| {
        set_pod_ip(f, "worker", 1, &address(1, 1))
    });
    let out = finish(child);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let out = run(&task, "worker", 0);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout
            .starts_with(&format!("index=0 ps={}:30101 ps_tasks=1\n", address(0, 0))),
        "{}",
        out.stdout
    );
}

#[test]
fn entry_reads_the_attempts_published_table_and_never_the_framework() {
    let (runtime, server) = api_server();
    let task = TaskDir::new("entry-published");
    let assets = Assets::new(&task, "true\n");
    let mut value = ready_framework(30200);
    set_attempt(&mut value, 0, "0_cm-uid");
    for (role, index, position) in [("ps", 0, 0), ("worker", 0, 1), ("worker", 1, 1)] {
        set_pod_ip(&mut value, role, index, &address(position, index));
    }
    let stored = server.create("frameworks", NAMESPACE, value);
    let framework: pai_contract::Framework = serde_json::from_value(stored).expect("framework");
    let child = entry(&task, &assets, "worker", 1)
        .env("KUBE_APISERVER_ADDRESS", server.url())
        .env("BARRIER_PEERS_SOURCE", "published")
        .env("FC_FRAMEWORK_ATTEMPT_INSTANCE_UID", "0_cm-uid")
        .spawn()
        .expect("entry");
    runtime.block_on(server.watches_started(1));
    // rest-lite publishes the table once every task has an address.
    let pai_barrier::Readiness::Ready(table) = pai_barrier::readiness(&framework).expect("reads")
    else {
        panic!("not ready");
    };
    let map = pai_barrier::published::config_map(&table, &framework);
    server.create(
        "configmaps",
        NAMESPACE,
        serde_json::to_value(&map).expect("json"),
    );
    let out = finish(child);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let root = task.root().join("pai");
    assert!(root.join("peers.json").exists());
    assert!(
        !root.join("framework.json").exists(),
        "the Framework was not read, so there is none to write"
    );
    assert!(
        server
            .requests()
            .iter()
            .all(|r| !r.uri.contains("/frameworks")),
        "the barrier never asked for the Framework: {:?}",
        server.requests()
    );
    let out = run(&task, "worker", 1);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout
            .starts_with(&format!("index=1 ps={}:30201 ps_tasks=1\n", address(0, 0))),
        "{}",
        out.stdout
    );
}

/// A quick retry on a cluster: the published table says when the attempt's commands may
/// start (the server's restart back-off); the runtime waits it out in its init step,
/// before the user command, and says so.
#[test]
fn entry_waits_out_the_restart_back_off_the_published_table_names() {
    let (runtime, server) = api_server();
    let task = TaskDir::new("entry-back-off");
    let assets = Assets::new(&task, "true\n");
    let mut value = ready_framework(30300);
    set_attempt(&mut value, 1, "1_cm-uid");
    for (role, index, position) in [("ps", 0, 0), ("worker", 0, 1), ("worker", 1, 1)] {
        set_pod_ip(&mut value, role, index, &address(position, index));
    }
    let stored = server.create("frameworks", NAMESPACE, value);
    let framework: pai_contract::Framework = serde_json::from_value(stored).expect("framework");
    let pai_barrier::Readiness::Ready(mut table) =
        pai_barrier::readiness(&framework).expect("reads")
    else {
        panic!("not ready");
    };
    let not_before = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(2))
        .expect("time");
    table.not_before = Some(not_before.to_string());
    let map = pai_barrier::published::config_map(&table, &framework);
    server.create(
        "configmaps",
        NAMESPACE,
        serde_json::to_value(&map).expect("json"),
    );
    let child = entry(&task, &assets, "worker", 0)
        .env("KUBE_APISERVER_ADDRESS", server.url())
        .env("BARRIER_PEERS_SOURCE", "published")
        .env("FC_FRAMEWORK_ATTEMPT_INSTANCE_UID", "1_cm-uid")
        .spawn()
        .expect("entry");
    let out = finish(child);
    drop(runtime);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        jiff::Timestamp::now() >= not_before,
        "the init step ended before the back-off did"
    );
    assert!(
        out.stderr
            .contains("restarting after a back-off: the attempt before this one ended quickly"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_task_the_api_server_refuses_fails_for_good_naming_the_rule() {
    // The barrier binary answers 1 here, as frameworkbarrier does; entry overrides it
    // with 210: no retry grants the job's account a permission.
    let (_runtime, server) = api_server();
    server.create("frameworks", NAMESPACE, ready_framework(30300));
    server.deny(Some(403));
    let task = TaskDir::new("entry-forbidden");
    let assets = Assets::new(&task, "true\n");
    let child = entry(&task, &assets, "worker", 0)
        .env("KUBE_APISERVER_ADDRESS", server.url())
        .spawn()
        .expect("entry");
    let out = finish(child);
    assert_eq!(out.code, Some(210), "{}", out.stderr);
    assert!(
        out.stderr.contains("get, list and watch on this Framework"),
        "{}",
        out.stderr
    );
}

#[test]
fn failures_exit_with_controller_codes_and_one_line() {
    let task = TaskDir::new("entry-failures");

    // A failing prep script: transient (200), naming the script and its log.
    let assets = Assets::new(&task, "echo broken >&2; exit 3\n");
    let file = publish(&task, &ready_framework(30400));
    let out = finish(
        local(&mut entry(&task, &assets, "worker", 0), &file)
            .spawn()
            .expect("entry"),
    );
    assert_eq!(out.code, Some(200), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("prep script 10-test.sh failed (exit status: 3)"),
        "{}",
        out.stderr
    );
    // Every line of the runtime carries its mark; the failure is an error, shown with the
    // user's output by default, its steps are not.
    use pai_contract::log_lines::{Source, keep};
    assert!(
        out.stderr
            .lines()
            .all(|l| l.starts_with(pai_contract::log_lines::PREFIX)),
        "{}",
        out.stderr
    );
    let shown = keep(&out.stderr, Source::User);
    assert!(
        shown.starts_with("[runtime ERROR] ") && shown.contains("prep script 10-test.sh failed"),
        "{shown}"
    );
    assert_eq!(shown.lines().count(), 1, "{shown}");
    std::fs::write(assets.dir.join("prep/10-test.sh"), "true\n").expect("fix prep");

    // Not FrameworkController's pod: permanent (210).
    let out = finish(
        local(&mut entry(&task, &assets, "worker", 0), &file)
            .env_remove("FC_TASKROLE_NAME")
            .spawn()
            .expect("entry"),
    );
    assert_eq!(out.code, Some(210), "{}", out.stderr);
    assert!(
        out.stderr.contains("FC_TASKROLE_NAME is not set"),
        "{}",
        out.stderr
    );

    // No Framework: permanent (210).
    let out = finish(
        local(
            &mut entry(&task, &assets, "worker", 0),
            &task.root().join("none.json"),
        )
        .spawn()
        .expect("entry"),
    );
    assert_eq!(out.code, Some(210), "{}", out.stderr);

    // The barrier times out: transient conflict (201).
    let mut waiting = ready_framework(30400);
    set_pod_ip(&mut waiting, "ps", 0, "");
    let file = publish(&task, &waiting);
    let out = finish(
        local(&mut entry(&task, &assets, "worker", 0), &file)
            .env("BARRIER_CHECK_TIMEOUT_SEC", "1")
            .spawn()
            .expect("entry"),
    );
    assert_eq!(out.code, Some(201), "{}", out.stderr);
    assert!(
        out.stderr.contains("2/3 tasks have an address"),
        "{}",
        out.stderr
    );

    // One of this task's ports is taken on the host: transient conflict (201).
    let file = publish(&task, &ready_framework(30400));
    let holder = std::net::TcpListener::bind(("0.0.0.0", 31401)).expect("hold the port");
    let file_with_port = {
        let mut value: Value =
            serde_json::from_slice(&std::fs::read(&file).expect("read")).expect("json");
        value["spec"]["taskRoles"][1]["task"]["pod"]["spec"]["containers"][0]["env"][0]["value"] =
            "http:31401;ssh:31402".into();
        publish(&task, &value)
    };
    let out = finish(
        local(&mut entry(&task, &assets, "worker", 0), &file_with_port)
            .spawn()
            .expect("entry"),
    );
    drop(holder);
    assert_eq!(out.code, Some(201), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("port 31401 (label http) is already in use on this host"),
        "{}",
        out.stderr
    );
    assert!(
        !task.root().join("pai/env.sh").exists(),
        "nothing left for the main container after a failure"
    );
}

/// A part of `frameworkEnv` this runtime does not know (a later server's) is named in
/// one warning and left out; the job's other parts are derived and its task runs.
#[test]
fn an_unknown_framework_part_is_warned_and_the_known_ones_derived() {
    let task = TaskDir::new("entry-unknown-part");
    let assets = Assets::new(&task, "true\n");
    let file = publish(&task, &ready_framework(32000));
    let out = finish(
        local(&mut entry(&task, &assets, "worker", 0), &file)
            .env("PAI_FRAMEWORK_ENV", "mpi,some-later-part")
            .spawn()
            .expect("entry"),
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("names parts this runtime does not know")
            && out.stderr.contains("some-later-part"),
        "{}",
        out.stderr
    );
    let root = task.root().join("pai");
    assert!(root.join("hostfile").exists(), "the mpi part is derived");
}
