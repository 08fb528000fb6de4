//! The `barrier` binary, as an init container runs it: environment in, files and an exit
//! code out.

use std::path::Path;
use std::process::Command;

use pai_barrier::PeerTable;
use pai_test_support::ApiServer;
use pai_test_support::frameworks::{NAMESPACE, address, framework, set_pod_ip, to_value};

/// A directory for one test, removed when it goes out of scope (a failing test's too).
fn out_dir(name: &str) -> pai_test_support::scratch::TempDir {
    pai_test_support::scratch(&format!("barrier-bin-{name}"))
}

async fn run(server: &ApiServer, framework: &str, timeout: &str, dir: &Path) -> (i32, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_barrier"));
    command
        .arg(dir)
        .env_clear()
        .env("HOME", dir)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("FC_FRAMEWORK_NAMESPACE", NAMESPACE)
        .env("FC_FRAMEWORK_NAME", framework)
        .env("KUBE_APISERVER_ADDRESS", server.url())
        .env("BARRIER_CHECK_TIMEOUT_SEC", timeout);
    let out = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("join")
        .expect("run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_and_writes_framework_and_peers() {
    let server = ApiServer::start().await;
    let mut fw = to_value(&framework("alicejob", &[("ps", 1), ("worker", 2)]));
    set_pod_ip(&mut fw, "ps", 0, &address(0, 0));
    set_pod_ip(&mut fw, "worker", 0, &address(1, 0));
    set_pod_ip(&mut fw, "worker", 1, &address(1, 1));
    server.create("frameworks", NAMESPACE, fw);
    let scratch = out_dir("pass");
    let dir = scratch.path();
    let (code, stderr) = run(&server, "alicejob", "60", dir).await;
    assert_eq!(code, 0, "{stderr}");
    let peers: PeerTable =
        serde_json::from_slice(&std::fs::read(dir.join("peers.json")).expect("peers.json"))
            .expect("table");
    assert_eq!(
        peers.role("worker").expect("worker").addresses[1].to_string(),
        address(1, 1)
    );
    let framework: pai_contract::Framework =
        serde_json::from_slice(&std::fs::read(dir.join("framework.json")).expect("framework.json"))
            .expect("fw");
    assert_eq!(framework.metadata.name.as_deref(), Some("alicejob"));

    // frameworkbarrier's injector.sh, line for line, executable as it makes it.
    let injector = std::fs::read_to_string(dir.join("injector.sh")).expect("injector.sh");
    let stored = server
        .get("frameworks", NAMESPACE, "alicejob")
        .expect("the Framework");
    assert_eq!(injector, frameworkbarrier_injector(&stored));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.join("injector.sh"))
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    // Sourced as frameworkbarrier's users do, with the ports they set first.
    let sourced = Command::new("bash")
        .arg("-c")
        .arg("FB_PS_PORT=4001 FB_WORKER_PORT=5001 . ./injector.sh >/dev/null && echo \"$FB_PS_IPS|$FB_WORKER_ADDRESSES\"")
        .current_dir(dir)
        .output()
        .expect("bash");
    assert_eq!(
        String::from_utf8_lossy(&sourced.stdout).trim(),
        format!(
            "{}|{}:5001,{}:5001",
            address(0, 0),
            address(1, 0),
            address(1, 1)
        )
    );
}

/// What frameworkbarrier's `generateInjector` (pkg/barrier/barrier.go at d6e7078) writes
/// for `framework` (JSON, as the API server stores it): transcribed from its source,
/// reading the status's roles in their order and each task's `podIP`.
fn frameworkbarrier_injector(framework: &serde_json::Value) -> String {
    let roles = framework["status"]["attemptStatus"]["taskRoleStatuses"]
        .as_array()
        .expect("roles");
    let env_name = |role: &str, suffix: &str| format!("FB_{}_{suffix}", role.to_uppercase());
    let ips = |role: &serde_json::Value| -> Vec<String> {
        role["taskStatuses"]
            .as_array()
            .expect("tasks")
            .iter()
            .map(|t| {
                t["attemptStatus"]["podIP"]
                    .as_str()
                    .expect("ip")
                    .to_string()
            })
            .collect()
    };
    let mut s = String::new();
    s += "#!/bin/bash";
    s += "\n";
    s += "\n";
    s += "echo ./injector.sh: Start to inject environment variables";
    s += "\n";
    s += "\n";
    for role in roles {
        let name = role["name"].as_str().expect("name");
        let ips_env = env_name(name, "IPS");
        s += &format!("export {ips_env}=");
        s += &ips(role).join(",");
        s += "\n";
        s += &format!("echo {ips_env}=${{{ips_env}}}");
        s += "\n";
    }
    s += "\n";
    for role in roles {
        let name = role["name"].as_str().expect("name");
        let addrs_env = env_name(name, "ADDRESSES");
        let port_env = env_name(name, "PORT");
        s += &format!("export {addrs_env}=");
        let addrs: Vec<String> = ips(role)
            .iter()
            .map(|ip| format!("{ip}:${{{port_env}}}"))
            .collect();
        s += &addrs.join(",");
        s += "\n";
        s += &format!("echo {addrs_env}=${{{addrs_env}}}");
        s += "\n";
    }
    s += "\n";
    s += "echo ./injector.sh: Succeeded to inject environment variables";
    s += "\n";
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_follow_frameworkbarrier() {
    let server = ApiServer::start().await;
    server.create(
        "frameworks",
        NAMESPACE,
        to_value(&framework("never", &[("worker", 1)])),
    );
    let scratch = out_dir("codes");
    let dir = scratch.path();

    let (code, stderr) = run(&server, "missing", "60", dir).await;
    assert_eq!(code, 210, "{stderr}");
    assert!(
        stderr.contains("framework jobs/missing does not exist"),
        "{stderr}"
    );

    let (code, stderr) = run(&server, "never", "1", dir).await;
    assert_eq!(code, 201, "{stderr}");
    assert!(stderr.contains("0/1 tasks have an address"), "{stderr}");

    server.deny(Some(403));
    let (code, stderr) = run(&server, "never", "60", dir).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("403 Forbidden"), "{stderr}");
    assert!(
        !dir.join("peers.json").exists(),
        "nothing written on failure"
    );
}

#[test]
fn a_missing_setting_is_one_clear_line() {
    let out = Command::new(env!("CARGO_BIN_EXE_barrier"))
        .env_clear()
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("FC_FRAMEWORK_NAMESPACE is not set"),
        "{stderr}"
    );
}
