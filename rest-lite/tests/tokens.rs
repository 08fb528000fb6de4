//! Tokens as the command line makes and sends them: a token made by `rest-lite token`
//! lets its user in, and this machine's token goes to this machine's server only.

use crate::common;

use std::sync::mpsc;

use serde_json::json;

use common::jobs::{job, rest_lite, role};
use common::serve::{DEADLINE, Server};

fn scratch(name: &str) -> common::Scratch {
    common::scratch("tokens", name)
}

#[test]
fn a_token_made_by_the_command_lets_its_user_in() {
    let dir = scratch("token");
    let file = dir.join("tokens.yaml");
    let (code, token, stderr) = rest_lite(
        &["token", "alice", "--file", file.to_str().expect("path")],
        &[],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let token = token.trim().to_string();
    assert_eq!(token.len(), 64, "{token}");
    let (code, _, stderr) = rest_lite(
        &[
            "token",
            "ops",
            "--admin",
            "--file",
            file.to_str().expect("path"),
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let text = std::fs::read_to_string(&file).expect("token file");
    assert!(!text.contains(&token), "the file holds hashes only: {text}");
    assert!(text.contains(&pai_server::auth::hash(&token)), "{text}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).expect("meta").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let (code, _, stderr) = rest_lite(
        &["token", "a b", "--file", file.to_str().expect("path")],
        &[],
    );
    assert_eq!(code, Some(2));
    assert!(stderr.contains("user name \"a b\""), "{stderr}");
    // A second token for alice only when asked for.
    let path = file.to_str().expect("path");
    let (code, _, stderr) = rest_lite(&["token", "alice", "--file", path], &[]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("user alice has a token in") && stderr.contains("--another"),
        "{stderr}"
    );
    let before = std::fs::read_to_string(&file).expect("token file");
    let (code, second, stderr) = rest_lite(&["token", "alice", "--another", "--file", path], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_ne!(second.trim(), token);
    let after = std::fs::read_to_string(&file).expect("token file");
    assert!(after.starts_with(&before) && after.len() > before.len());

    let server = Server::start_with_tokens(&dir.join("state"), &file);
    let (code, stdout, stderr) = rest_lite(
        &[
            "jobs",
            "--server",
            &server.url,
            "--user",
            "alice",
            "--token",
            &token,
        ],
        &[],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.starts_with("no jobs"), "{stdout}");
    let (code, _, stderr) = rest_lite(&["jobs", "--server", &server.url, "--user", "alice"], &[]);
    assert_eq!(code, Some(2));
    // The server says where its tokens are; the hint, both ways of this machine's.
    assert!(
        stderr.contains("Ask this server's operator for a token")
            && stderr.contains("hint: a server of this machine")
            && stderr.contains("--token"),
        "{stderr}"
    );
    // A token given that is not the server's is said to be so.
    let (code, _, stderr) = rest_lite(
        &[
            "jobs",
            "--server",
            &server.url,
            "--user",
            "alice",
            "--token",
            "wrong",
        ],
        &[],
    );
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("the bearer token given is not one of this server's")
            && stderr.contains(
                "hint: the token given (--token or REST_LITE_TOKEN) is not this server's"
            ),
        "{stderr}"
    );
    // A task that does not exist: its own error, and a hint that lists the tasks.
    let mut logs = vec!["logs", "nosuch", "-r", "nosuchrole"];
    logs.extend([
        "--server",
        &server.url,
        "--user",
        "alice",
        "--token",
        &token,
    ]);
    let (code, _, stderr) = rest_lite(&logs, &[]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("NoJobError"), "no such job first: {stderr}");
    // Without -u the commands act as the user the token stands for (the server says).
    let spec = dir.join("mine.json");
    std::fs::write(
        &spec,
        job("mine", json!([role("worker", 1, "true")]), json!({})),
    )
    .expect("spec");
    let spec = spec.to_str().expect("path");
    let (code, stdout, stderr) = rest_lite(
        &["submit", spec, "--server", &server.url, "--token", &token],
        &[],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("mine"), "{stdout}");
    let (code, stdout, stderr) =
        rest_lite(&["jobs", "--server", &server.url, "--token", &token], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("mine ") && l.contains(" alice ")),
        "{stdout}"
    );
    drop(server);
    // Nobody listens there any more.
    let (code, _, stderr) = rest_lite(
        &["jobs", "--server", "http://127.0.0.1:9", "--user", "a"],
        &[],
    );
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("hint: is a server running there?"),
        "{stderr}"
    );
}

/// The body of a GET, over a plain connection.
/// This machine's token goes to this machine's server only: `--server` naming another
/// address (a listener of the test's, on this machine too, that records what it is
/// sent) gets no Authorization header; the machine's own server, at the address it
/// recorded beside its token, gets the token without one being typed.
#[test]
fn the_machine_token_goes_to_this_machines_server_only() {
    use std::io::{BufRead, BufReader, Write};
    let dir = scratch("own-server");
    let state = dir.join("state");
    let server = Server::start(&state);
    let other = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let other_url = format!("http://{}", other.local_addr().expect("address"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (mut stream, _) = other.accept().expect("accept");
        let mut reader = BufReader::new(stream.try_clone().expect("clone"));
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let body = r#"{"code":"UnauthorizedUserError","message":"a token is needed"}"#;
        let _ = write!(
            stream,
            "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = tx.send(head);
    });
    let state_arg = state.to_str().expect("path");
    let (code, _, stderr) = rest_lite(
        &[
            "jobs",
            "--server",
            &other_url,
            "--state-dir",
            state_arg,
            "-u",
            "alice",
        ],
        &[],
    );
    assert_eq!(code, Some(2), "{stderr}");
    let head = rx
        .recv_timeout(DEADLINE)
        .expect("the other server was asked");
    assert!(head.starts_with("GET "), "{head}");
    assert!(
        !head.to_ascii_lowercase().contains("authorization"),
        "the machine's token went to another server: {head}"
    );
    let (code, stdout, stderr) = rest_lite(
        &["jobs", "--server", &server.url, "--state-dir", state_arg],
        &[],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.starts_with("no jobs"), "{stdout}");
}
