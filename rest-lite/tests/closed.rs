//! Closed by default (#22), on the real `rest-lite serve` binary: what a web page, another
//! account of the machine or a caller without a token can do (nothing), and that the
//! owner's command line and pages need no flags. Every refused request carries a valid
//! token, so that the check named is the only reason it is refused, and would have run
//! a command that leaves a mark: the mark never appears; the same request done right
//! leaves it.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::serve::{DEADLINE, Server};
use common::{Answer, request};

fn scratch(name: &str) -> common::Scratch {
    common::scratch("closed", name)
}

/// A job whose only task writes `mark`.
fn marking_job(name: &str, mark: &Path) -> String {
    serde_json::json!({
        "jobName": name,
        "image": "busybox",
        "taskRoles": [{"name": "worker", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128,
                       "command": format!("echo ran > {}", mark.display())}],
    })
    .to_string()
}

fn assert_json_error(answer: &Answer, status: u16, code: &str) {
    assert_eq!(answer.status, status, "{}", answer.body);
    let body: serde_json::Value = serde_json::from_str(&answer.body).expect("a JSON error body");
    assert_eq!(body["code"], code, "{}", answer.body);
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
}

/// Waits (bounded) until `done` holds.
fn until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `rest-lite ARGS` with `env`; (code, stdout, stderr).
fn cli(args: &[&str], env: &[(&str, &Path)]) -> (Option<i32>, String, String) {
    let mut command = crate::common::rest_lite_command();
    command
        .args(args)
        .env_remove("REST_LITE_TOKEN")
        .env_remove("REST_LITE_STATE_DIR")
        .env_remove("XDG_STATE_HOME")
        .stdin(Stdio::null());
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().expect("rest-lite");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn requests_a_browser_was_tricked_into_sending_run_nothing() {
    let dir = scratch("browser");
    let mark = dir.join("mark");
    let server = Server::start(&dir.join("state"));
    let token = server.token.clone().expect("token");
    let bearer = format!("Bearer {token}");
    let auth = ("Authorization", bearer.as_str());
    let spec = marking_job("hello", &mark);
    let submit = "/api/v1/user/alice/jobs";
    let address = server.url.trim_start_matches("http://").to_string();

    // No token: 401, as for every other account and every web page.
    let anonymous = request(
        &server.url,
        "POST",
        submit,
        &[("Content-Type", "application/json")],
        &spec,
    );
    assert_json_error(&anonymous, 401, "UnauthorizedUserError");
    let wrong = request(
        &server.url,
        "GET",
        "/api/v1/jobs",
        &[("Authorization", "Bearer 0000")],
        "",
    );
    assert_json_error(&wrong, 401, "UnauthorizedUserError");

    // The media types a page may send without a preflight, and none at all: 415, with
    // the Content-Type to send.
    for content_type in [
        Some("text/plain"),
        Some("text/plain;charset=UTF-8"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        None,
    ] {
        let mut headers = vec![auth];
        if let Some(content_type) = content_type {
            headers.push(("Content-Type", content_type));
        }
        let refused = request(&server.url, "POST", submit, &headers, &spec);
        assert_json_error(&refused, 415, "UnsupportedMediaTypeError");
        assert!(
            refused.body.contains("application/yaml"),
            "{content_type:?}: {}",
            refused.body
        );
    }
    // Another site's page, and a rebound name (the page's own origin then).
    let json = ("Content-Type", "application/json");
    for origin in ["https://attacker.example", "null"] {
        let refused = request(
            &server.url,
            "POST",
            submit,
            &[auth, json, ("Origin", origin)],
            &spec,
        );
        assert_json_error(&refused, 403, "ForbiddenOriginError");
    }
    let rebound = request(
        &server.url,
        "POST",
        submit,
        &[
            auth,
            json,
            ("Host", "attacker.example:9186"),
            ("Origin", "http://attacker.example:9186"),
        ],
        &spec,
    );
    assert_json_error(&rebound, 403, "ForbiddenHostError");
    let read = request(
        &server.url,
        "GET",
        "/api/v1/jobs",
        &[auth, ("Host", "attacker.example")],
        "",
    );
    assert_json_error(&read, 403, "ForbiddenHostError");
    // Nothing of that was stored.
    let jobs = request(&server.url, "GET", "/api/v1/jobs", &[auth], "");
    assert_eq!(jobs.status, 200);
    assert_eq!(jobs.body.trim(), "[]", "no job was stored");

    // The same submission from this server's own page, and from a program: accepted.
    let own = format!("http://{address}");
    let accepted = request(
        &server.url,
        "POST",
        submit,
        &[
            auth,
            json,
            ("Origin", &own),
            ("Sec-Fetch-Site", "same-origin"),
        ],
        &spec,
    );
    assert_eq!(accepted.status, 202, "{}", accepted.body);
    until("the accepted job's mark", || mark.exists());

    // A foreign page may not delete it either.
    let delete = "/api/v1/user/alice/jobs/hello";
    for foreign in [
        ("Origin", "https://attacker.example"),
        ("Sec-Fetch-Site", "cross-site"),
    ] {
        let refused = request(&server.url, "DELETE", delete, &[auth, foreign], "");
        assert_json_error(&refused, 403, "ForbiddenOriginError");
    }
    let still = request(&server.url, "GET", delete, &[auth], "");
    assert_eq!(still.status, 200, "the job is still there: {}", still.body);
    // The pages' sign-in form: same rule.
    let sign_in = request(
        &server.url,
        "POST",
        "/ui/sign-in",
        &[
            ("Content-Type", "application/x-www-form-urlencoded"),
            ("Origin", "https://attacker.example"),
        ],
        &format!("token={token}"),
    );
    assert_json_error(&sign_in, 403, "ForbiddenOriginError");
    assert!(sign_in.header("set-cookie").is_none());
    drop(server);
}

#[test]
fn metrics_need_a_token_unless_served_apart() {
    let dir = scratch("metrics");
    let state = dir.join("state");
    let server = Server::start(&state);
    let bearer = format!("Bearer {}", server.token.as_deref().expect("token"));
    let open = request(&server.url, "GET", "/metrics", &[], "");
    assert_json_error(&open, 401, "UnauthorizedUserError");
    let with = request(
        &server.url,
        "GET",
        "/metrics",
        &[("Authorization", &bearer)],
        "",
    );
    assert_eq!(with.status, 200);
    assert!(with.body.contains("rest_lite_jobs"), "{}", with.body);
    // The probes stay open.
    assert_eq!(request(&server.url, "GET", "/healthz", &[], "").status, 200);
    drop(server);

    // On a port of its own, for Prometheus: no token there, none of it on the API's port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let metrics = format!("127.0.0.1:{port}");
    let server = Server::spawn(
        Server::command(&state).args(["--backend", "local", "--metrics-listen", &metrics]),
        &["this machine"],
    );
    let apart = request(&format!("http://{metrics}"), "GET", "/metrics", &[], "");
    assert_eq!(apart.status, 200, "{}", apart.body);
    assert!(apart.body.contains("rest_lite_jobs"), "{}", apart.body);
    let api = request(
        &server.url,
        "GET",
        "/metrics",
        &[("Authorization", &bearer)],
        "",
    );
    assert_eq!(api.status, 404);
    drop(server);
}

#[test]
fn the_owner_needs_no_flag_and_everyone_else_is_refused() {
    let dir = scratch("owner");
    let home = dir.join("home");
    std::fs::create_dir_all(&home).expect("home");
    // `rest-lite serve` as the quick start runs it: no state directory, no token given.
    let server = Server::spawn(
        Server::command_with_default_state()
            .args(["--backend", "local"])
            .env("HOME", &home)
            .env_remove("XDG_STATE_HOME")
            .env_remove("REST_LITE_STATE_DIR"),
        &["this machine"],
    );
    let state = home.join(".local/state/rest-lite");
    let token_file = state.join("token");
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode(&token_file), 0o600);
    assert_eq!(mode(&state), 0o700);

    // The same user's command line: no flag, no variable.
    let (code, stdout, stderr) = cli(
        &["jobs", "--server", &server.url, "--user", "alice"],
        &[("HOME", &home)],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.starts_with("no jobs"), "{stdout}");
    // Someone without the file: refused, with the way in.
    let elsewhere = dir.join("elsewhere");
    let (code, _, stderr) = cli(
        &["jobs", "--server", &server.url, "--user", "alice"],
        &[("HOME", &elsewhere)],
    );
    assert_eq!(code, Some(2));
    assert!(stderr.contains("401"), "{stderr}");
    assert!(stderr.contains("hint:"), "{stderr}");

    // Another account of the machine cannot read the token or enter the directory.
    let root = nix::unistd::geteuid().is_root();
    if pai_test_support::needs::present(
        "root (to act as another user)",
        root,
        "run the tests as root",
    ) {
        use std::os::unix::process::CommandExt;
        for target in [&token_file, &state.join("jobs")] {
            let other = Command::new("cat")
                .arg(target)
                .uid(65534)
                .gid(65534)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .output()
                .expect("cat as nobody");
            assert!(
                !other.status.success(),
                "{} is readable by nobody",
                target.display()
            );
            assert!(
                String::from_utf8_lossy(&other.stderr).contains("Permission denied"),
                "{}",
                String::from_utf8_lossy(&other.stderr)
            );
        }
    }
    drop(server);
}

#[test]
fn a_token_removed_from_the_file_stops_working_while_the_server_runs() {
    use pai_server::auth::hash;
    let dir = scratch("revoke");
    let file = dir.join("tokens.yaml");
    let entry =
        |name: &str, token: &str| format!("  - name: {name}\n    tokenSha256: {}\n", hash(token));
    std::fs::write(
        &file,
        format!(
            "users:\n{}{}",
            entry("alice", "a-token"),
            entry("bob", "b-token")
        ),
    )
    .expect("tokens");
    let server = Server::start_with_tokens(&dir.join("state"), &file);
    let jobs_of = |user: &str, token: &str| {
        request(
            &server.url,
            "GET",
            &format!("/api/v1/user/{user}/jobs"),
            &[("Authorization", &format!("Bearer {token}"))],
            "",
        )
        .status
    };
    assert_eq!(jobs_of("bob", "b-token"), 200);
    assert_eq!(jobs_of("alice", "a-token"), 200);
    // Bob's entry goes; the file is replaced as editors and `kubectl` do (a new inode).
    let next = dir.join("tokens.yaml.new");
    std::fs::write(&next, format!("users:\n{}", entry("alice", "a-token"))).expect("new file");
    std::fs::rename(&next, &file).expect("replace");
    until("bob's token to be refused", || {
        jobs_of("bob", "b-token") == 401
    });
    assert_eq!(jobs_of("alice", "a-token"), 200, "alice keeps hers");
    // A broken file admits nobody (never the old tokens) until it is mended.
    std::fs::write(&file, "users: [not, a, token]\n").expect("broken");
    until("alice's token to be refused", || {
        jobs_of("alice", "a-token") == 401
    });
    std::fs::write(&file, format!("users:\n{}", entry("alice", "a-token"))).expect("mended");
    until("alice's token to work again", || {
        jobs_of("alice", "a-token") == 200
    });
    drop(server);
}

#[test]
fn https_end_to_end_with_a_test_ca() {
    let dir = scratch("tls");
    // A CA, and a certificate it signs for this machine's loopback names.
    let ca_key = rcgen::KeyPair::generate().expect("ca key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "rest-lite test CA");
    let ca = ca_params.self_signed(&ca_key).expect("ca");
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().expect("key");
    let params =
        rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .expect("params");
    let cert = params.signed_by(&key, &issuer).expect("cert");
    let (ca_file, cert_file, key_file) = (
        dir.join("ca.pem"),
        dir.join("cert.pem"),
        dir.join("key.pem"),
    );
    std::fs::write(&ca_file, ca.pem()).expect("ca file");
    std::fs::write(&cert_file, cert.pem()).expect("cert file");
    std::fs::write(&key_file, key.serialize_pem()).expect("key file");

    let state = dir.join("state");
    let server = Server::spawn(
        Server::command(&state)
            .args(["--backend", "local", "--tls-cert"])
            .arg(&cert_file)
            .arg("--tls-key")
            .arg(&key_file),
        &["this machine", "https://127.0.0.1:"],
    );
    assert!(server.url.starts_with("https://"), "{}", server.url);
    let env = [("REST_LITE_STATE_DIR", state.as_path())];
    let (code, stdout, stderr) = cli(
        &[
            "jobs",
            "--server",
            &server.url,
            "--user",
            "alice",
            "--ca-cert",
        ],
        &[],
    );
    assert_eq!(code, Some(2), "--ca-cert wants a file: {stdout}{stderr}");
    let ca_arg = ca_file.to_str().expect("path");
    let (code, stdout, stderr) = cli(
        &[
            "jobs",
            "--server",
            &server.url,
            "--user",
            "alice",
            "--ca-cert",
            ca_arg,
        ],
        &env,
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.starts_with("no jobs"), "{stdout}");
    // Without the CA the certificate is not trusted, and nothing is sent.
    let (code, _, stderr) = cli(&["jobs", "--server", &server.url, "--user", "alice"], &env);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("certificate"), "{stderr}");
    // Plain HTTP to the TLS port gets no answer it could take for the API's.
    let plain = server.url.replacen("https://", "http://", 1);
    let (code, _, _) = cli(&["jobs", "--server", &plain, "--user", "alice"], &env);
    assert_eq!(code, Some(2));
    drop(server);
}
