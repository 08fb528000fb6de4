//! `rest-lite serve`, the binary: it serves, stops on SIGTERM, refuses to listen beyond
//! loopback without tokens, and runs jobs on this machine where no cluster is configured.

use crate::common;

use common::base_job;
use pai_test_support::ApiServer;

const NS: &str = "jobs";

/// `rest-lite serve` as a user starts it, with a kubeconfig pointing at the test server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_serve_command_serves_and_stops_on_sigterm() {
    use std::io::BufRead;
    let api = ApiServer::start().await;
    let scratch = common::scratch("serve", "sigterm");
    let dir: &std::path::Path = &scratch;
    let kubeconfig = dir.join("kubeconfig");
    api.write_kubeconfig(&kubeconfig, Some("jobs"));
    let mut child = crate::common::rest_lite_command()
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--namespace",
            NS,
            "--kubeconfig",
        ])
        .arg(&kubeconfig)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("serve");
    let stderr = child.stderr.take().expect("stderr");
    // Read the log as a log collector would, all along: the start-up line gives the URL.
    let (found, started) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut found = Some(found);
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            seen.push(line.clone());
            if let Some(rest) = line.split("url=http://").nth(1)
                && let Some(tx) = found.take()
            {
                let addr = rest
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_string();
                let _ = tx.send((addr, seen.clone()));
            }
        }
    });
    let (url, lines) =
        tokio::task::spawn_blocking(move || started.recv().expect("a start-up line"))
            .await
            .expect("join");
    assert!(
        lines.iter().any(|l| l.contains("backend=kubernetes at")),
        "{lines:?}"
    );
    // Without a token file: this machine's token only, kept in the state directory.
    let token = pai_server::machine_token::read(&dir.join("state")).expect("a token");
    let url = format!("http://{url}");
    let spec = base_job().to_string();
    let json = ("Content-Type", "application/json");
    let reply = common::request(&url, "POST", "/api/v1/user/alice/jobs", &[json], &spec);
    assert_eq!(reply.status, 401, "{}", reply.body);
    let bearer = format!("Bearer {token}");
    let reply = common::request(
        &url,
        "POST",
        "/api/v1/user/alice/jobs",
        &[json, ("Authorization", bearer.as_str())],
        &spec,
    );
    assert_eq!(reply.status, 202, "{}", reply.body);
    let framework = pai_job::names::framework_name("alice", "job");
    assert!(api.get("frameworks", NS, &framework).is_some());
    nix_kill(child.id());
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("join")
        .expect("wait");
    assert!(status.success(), "{status}");
}

fn nix_kill(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

#[test]
fn serve_refuses_to_listen_beyond_loopback_without_tokens() {
    let out = crate::common::rest_lite_command()
        .args(["serve", "--listen", "0.0.0.0:0"])
        .output()
        .expect("serve");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("without --token-file the server only listens on loopback")
    );
}

#[test]
fn without_a_cluster_configuration_serve_runs_jobs_here() {
    let dir = common::scratch("serve", "auto");
    let state = dir.join("state");
    let server = common::serve::Server::spawn(
        common::serve::Server::command(&state)
            .env("HOME", dir.as_os_str())
            .env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT"),
        &[
            "this machine (embedded default)",
            &state.display().to_string(),
        ],
    );
    assert!(
        server.url.starts_with("http://127.0.0.1:"),
        "{}",
        server.url
    );
    drop(server);
}
