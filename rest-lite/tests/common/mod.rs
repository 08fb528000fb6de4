//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod fifo;
pub mod jobs;
pub mod node;
pub mod serve;

#[allow(unused_imports)]
pub use pai_test_support::specs::*;

/// A fresh directory for one test, `rest-lite-<area>-<name>-…` under the temporary
/// directory, removed when it goes out of scope: at the test's end, and also when the
/// test fails (a clean-up written at a test's end is skipped by its panic).
pub struct Scratch(pai_test_support::scratch::TempDir);

impl std::ops::Deref for Scratch {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        self.0.path()
    }
}

impl AsRef<std::path::Path> for Scratch {
    fn as_ref(&self) -> &std::path::Path {
        self.0.path()
    }
}

/// `target/frameworks-venv`, whose Python has the real JAX and XGBoost from PyPI
/// (`.ci/frameworks-venv` makes it); said missing otherwise (a test's needs: fatal under
/// `CI=true`).
pub fn frameworks_venv() -> Option<std::path::PathBuf> {
    let venv = repo_root().join("target/frameworks-venv");
    let there = std::process::Command::new(venv.join("bin/python3"))
        .args(["-c", "import jax, xgboost"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    pai_test_support::needs::present(
        "JAX and XGBoost in target/frameworks-venv",
        there,
        "run .ci/frameworks-venv (pip, from PyPI)",
    )
    .then_some(venv)
}

/// The real `rest-lite` binary, its tasks on the host (`--engine host`): the tests of
/// host behaviour keep their meaning on a machine with Podman. The container tests
/// (`containers.rs`) ask for Podman themselves. It runs as an installed rest-lite does,
/// found on the PATH, so that the commands it prints name it `rest-lite`
/// (`printed_commands.rs` tries the other ways a person runs it).
pub fn rest_lite_command() -> std::process::Command {
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_rest-lite"));
    let mut path = std::ffi::OsString::from(exe.parent().expect("the binary's folder"));
    if let Some(inherited) = std::env::var_os("PATH") {
        path.push(":");
        path.push(inherited);
    }
    let mut command = std::process::Command::new(exe);
    command.env("REST_LITE_ENGINE", "host").env("PATH", path);
    hermetic(&mut command);
    command
}

/// What the person running the tests has set for their own use of rest-lite (a server
/// address, a token, a state directory) and their home, where `rest-lite serve` keeps
/// its state and token, stay out of `command`: it gets a home of this test process's own,
/// and no `XDG_*` directory, `REST_LITE_*` setting or kubeconfig of theirs.
pub fn hermetic(command: &mut std::process::Command) {
    for (name, _) in std::env::vars_os() {
        let name_text = name.to_string_lossy();
        if name_text.starts_with("REST_LITE_") || name_text.starts_with("XDG_") {
            command.env_remove(&name);
        }
    }
    command.env("HOME", fake_home()).env_remove("KUBECONFIG");
}

/// This test process's home: empty at its start, under the build's scratch folder.
pub fn fake_home() -> &'static std::path::Path {
    static HOME: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    HOME.get_or_init(|| {
        let home = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("homes")
            .join(std::process::id().to_string());
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(&home).expect("a home for the tests");
        home
    })
}

pub fn scratch(area: &str, name: &str) -> Scratch {
    Scratch(pai_test_support::scratch(&format!(
        "rest-lite-{area}-{name}"
    )))
}

/// A token file in `dir` admitting `users` (name, token, admin).
pub fn token_file(dir: &std::path::Path, users: &[(&str, &str, bool)]) -> std::path::PathBuf {
    let path = dir.join("tokens.yaml");
    let mut text = String::from("users:\n");
    for (name, token, admin) in users {
        text.push_str(&format!(
            "  - {{name: {name}, tokenSha256: {}, admin: {admin}}}\n",
            pai_server::auth::hash(token)
        ));
    }
    std::fs::write(&path, text).expect("token file");
    path
}

/// The jobs API of `state` on a free loopback port, served in the background, and a
/// client of it.
pub async fn serve_in_process(state: pai_server::AppState) -> pai_client::Client {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, pai_server::router(state)).await });
    pai_client::Client::new(&url, None)
}

/// A log the client streams, read to its end as text.
pub async fn read_all(mut stream: pai_client::Chunks) -> String {
    use futures::StreamExt;
    let mut text = Vec::new();
    while let Some(chunk) = stream.next().await {
        text.extend_from_slice(&chunk.expect("chunk"));
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// Task `role`-`index`'s log of `user`'s `job`, those `lines`, read to its end (with
/// `follow`, until the task ends).
pub async fn task_log(
    client: &pai_client::Client,
    (user, job): (&str, &str),
    (role, index): (&str, u32),
    follow: bool,
    lines: impl Into<pai_client::Asked>,
) -> String {
    read_all(
        client
            .logs(user, job, role, index, follow, lines)
            .await
            .expect("logs"),
    )
    .await
}

// One HTTP/1.1 request over a fresh connection, written by hand.
pub use pai_test_support::http::{Answer, request};

/// The rules of the Role named `name` in the multi-document YAML `text`.
pub fn role_rules(text: &str, name: &str) -> Vec<serde_json::Value> {
    text.split("\n---\n")
        .map(|doc| serde_saphyr::from_str::<serde_json::Value>(doc).expect("a YAML document"))
        .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == name)
        .and_then(|role| role["rules"].as_array().cloned())
        .expect("the Role and its rules")
}
