//! The `barrier` binary, as an init container runs it: environment in, files and an exit
//! code out.

use std::path::PathBuf;
use std::process::Command;

use pai_barrier::PeerTable;
use pai_test_support::ApiServer;
use pai_test_support::frameworks::{NAMESPACE, address, framework, set_pod_ip, to_value};

fn out_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("barrier-bin-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}

async fn run(server: &ApiServer, framework: &str, timeout: &str, dir: &PathBuf) -> (i32, String) {
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
    let dir = out_dir("pass");
    let (code, stderr) = run(&server, "alicejob", "60", &dir).await;
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
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_follow_frameworkbarrier() {
    let server = ApiServer::start().await;
    server.create(
        "frameworks",
        NAMESPACE,
        to_value(&framework("never", &[("worker", 1)])),
    );
    let dir = out_dir("codes");

    let (code, stderr) = run(&server, "missing", "60", &dir).await;
    assert_eq!(code, 210, "{stderr}");
    assert!(
        stderr.contains("framework jobs/missing does not exist"),
        "{stderr}"
    );

    let (code, stderr) = run(&server, "never", "1", &dir).await;
    assert_eq!(code, 201, "{stderr}");
    assert!(stderr.contains("0/1 tasks have an address"), "{stderr}");

    server.deny(Some(403));
    let (code, stderr) = run(&server, "never", "60", &dir).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("403 Forbidden"), "{stderr}");
    assert!(
        !dir.join("peers.json").exists(),
        "nothing written on failure"
    );
    std::fs::remove_dir_all(&dir).ok();
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
