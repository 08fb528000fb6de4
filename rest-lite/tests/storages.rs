//! Team storages through the real `rest-lite serve`: who may use which (users, and groups
//! from the token file), `GET /api/v2/storages` and `…/{name}` as OpenPAI's SDK reads
//! them, a job naming a storage its user may not use (403) or that does not exist (400),
//! storages on the host refused with why, and a config change taken without a restart.
//! A job writing into its storages runs in `containers.rs` (it needs Podman).

use crate::common;

use std::path::Path;

use serde_json::Value;

use common::serve::Server;

const ALICE: &str = "alice-storage-token";
const BOB: &str = "bob-storage-token";

fn config_text(dir: &Path, bob_in_team: bool) -> String {
    let team_users = if bob_in_team { "[bob]" } else { "[]" };
    format!(
        "storages:\n  - {{name: team, groups: [vision], users: {team_users}, default: true, path: {}}}\n  - {{name: open, share: false}}\n  - {{name: carols, users: [carol]}}\n",
        dir.display()
    )
}

fn get(server: &Server, token: &str, path: &str) -> (u16, Value) {
    let answer = common::request(
        &server.url,
        "GET",
        path,
        &[("Authorization", &format!("Bearer {token}"))],
        "",
    );
    let body = serde_json::from_str(&answer.body).unwrap_or(Value::Null);
    (answer.status, body)
}

fn submit(server: &Server, token: &str, spec: &str) -> (u16, Value) {
    let answer = common::request(
        &server.url,
        "POST",
        "/api/v2/jobs",
        &[
            ("Authorization", &format!("Bearer {token}")),
            ("Content-Type", "text/yaml"),
        ],
        spec,
    );
    (
        answer.status,
        serde_json::from_str(&answer.body).unwrap_or(Value::Null),
    )
}

fn names(list: &Value) -> Vec<&str> {
    list["storages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str())
        .collect()
}

fn job(name: &str, storages: &str) -> String {
    format!(
        "protocolVersion: 2\nname: {name}\ntype: job\nprerequisites:\n  - {{name: image, type: dockerimage, uri: busybox}}\ntaskRoles:\n  worker:\n    instances: 1\n    dockerImage: image\n    resourcePerInstance: {{cpu: 1, memoryMB: 128, gpu: 0}}\n    commands: [ls /mnt]\nextras:\n  storages: {storages}\n"
    )
}

#[test]
fn storages_are_listed_granted_and_refused_by_the_config() {
    let dir = common::scratch("storages", "api");
    let tokens = dir.join("tokens.yaml");
    std::fs::write(
        &tokens,
        format!(
            "users:\n  - {{name: alice, tokenSha256: {}, groups: [vision]}}\n  - {{name: bob, tokenSha256: {}}}\n",
            pai_server::auth::hash(ALICE),
            pai_server::auth::hash(BOB)
        ),
    )
    .expect("tokens");
    let config = dir.join("config.yaml");
    std::fs::write(&config, config_text(&dir, false)).expect("config");
    let server = Server::start_with_tokens_and_config(&dir.join("state"), &tokens, Some(&config));

    // Each caller sees the storages they may use; `default=true` their defaults.
    let (status, list) = get(&server, ALICE, "/api/v2/storages");
    assert_eq!(status, 200);
    assert_eq!(names(&list), ["team", "open"], "alice is in group vision");
    assert_eq!(list["storages"][0]["share"], true);
    assert_eq!(list["storages"][0]["volumeName"], "team");
    assert_eq!(list["storages"][1]["share"], false);
    let (_, list) = get(&server, BOB, "/api/v2/storages");
    assert_eq!(names(&list), ["open"]);
    let (_, list) = get(&server, ALICE, "/api/v2/storages?default=true");
    assert_eq!(names(&list), ["team"]);

    let (status, detail) = get(&server, ALICE, "/api/v2/storages/team");
    assert_eq!(status, 200, "{detail}");
    assert_eq!(detail["type"], "other");
    assert_eq!(detail["data"]["path"], dir.display().to_string());
    let (status, error) = get(&server, ALICE, "/api/v2/storages/carols");
    assert_eq!(
        (status, error["code"].as_str()),
        (403, Some("ForbiddenUserError"))
    );
    let (status, error) = get(&server, ALICE, "/api/v2/storages/nope");
    assert_eq!(
        (status, error["code"].as_str()),
        (404, Some("NoStorageError"))
    );

    // A job naming a storage its user may not use, or one there is not, is refused
    // naming the field; nothing is created.
    let (status, error) = submit(&server, BOB, &job("teams", "[{name: team}]"));
    assert_eq!(status, 403, "{error}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m
                .starts_with("extras.storages[0].name: you are not allowed to use storage team")),
        "{error}"
    );
    let (status, error) = submit(&server, ALICE, &job("nope", "[{name: open}, {name: nope}]"));
    assert_eq!(status, 400, "{error}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("extras.storages[1].name: storage nope is not found")),
        "{error}"
    );
    // On the host there is nothing to mount them on: refused, saying where they are.
    let (status, error) = submit(&server, ALICE, &job("hosted", "[]"));
    assert_eq!(status, 400, "{error}");
    assert!(
        error["message"].as_str().is_some_and(
            |m| m.contains("only to tasks in their images") && m.contains("team at /mnt/team")
        ),
        "{error}"
    );
    let (_, jobs) = get(&server, ALICE, "/api/v2/jobs");
    assert_eq!(jobs, serde_json::json!([]), "nothing was created");
    // Bob has no default storage he may use: an empty list mounts nothing (not alice's
    // team storage), so the job runs here.
    let (status, answer) = submit(&server, BOB, &job("bare", "[]"));
    assert_eq!(status, 202, "{answer}");

    // The operator grants bob the team storage: the running server takes it.
    std::fs::write(&config, config_text(&dir, true)).expect("config");
    let deadline = std::time::Instant::now() + common::serve::DEADLINE;
    loop {
        let (_, list) = get(&server, BOB, "/api/v2/storages");
        if names(&list) == ["team", "open"] {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the config was not read again: {}",
            server.log()
        );
        // The server looks at the file every 2 s; a change is seen within that.
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(
        server.log().contains("config read again"),
        "{}",
        server.log()
    );
}
