//! OpenPAI's protocol v2 and its v2 REST API on the real `rest-lite serve`: a v2 job
//! submitted as OpenPAI's SDK submits it (`POST /api/v2/jobs`, `text/yaml`) runs on this
//! machine with its parameters, deployment, plugin and secret; and on both backends the
//! secret's value is nowhere a reader can reach: no route, no page, no server log line,
//! not the Framework, not an Event; only the task gets it, where the protocol puts it.

use crate::common;

use std::path::{Path, PathBuf};

use futures::StreamExt;
use serde_json::{Value, json};

use pai_api::status::JobState;
use pai_client::Client;
use pai_test_support::ApiServer;

use common::request;
use common::serve::{DEADLINE, Server};

const TOKEN: &str = "alice-v2-token";
const OTHER: &str = "bob-v2-token";
const NS: &str = "jobs";
/// The example's secret (`secrets.handshake`).
const SECRET: &str = "open-sesame";

fn scratch(name: &str) -> common::Scratch {
    common::scratch("v2", name)
}

fn tokens(dir: &Path) -> PathBuf {
    common::token_file(dir, &[("alice", TOKEN, false), ("bob", OTHER, false)])
}

fn example() -> String {
    std::fs::read_to_string(common::repo_root().join("examples/v2-shell-hello.yaml"))
        .expect("example")
}

fn get(server: &Server, path: &str, token: &str) -> common::Answer {
    request(
        &server.url,
        "GET",
        path,
        &[("Authorization", &format!("Bearer {token}"))],
        "",
    )
}

/// Submits `text` as the SDK does.
fn submit(server: &Server, text: &str) -> common::Answer {
    request(
        &server.url,
        "POST",
        "/api/v2/jobs",
        &[
            ("Authorization", &format!("Bearer {TOKEN}")),
            ("Content-Type", "text/yaml"),
        ],
        text,
    )
}

/// Every route and page a reader of the job can ask, with what each answered.
fn read_everything(server: &Server, job: &str) -> Vec<(String, common::Answer)> {
    let v1 = format!("/api/v1/user/alice/jobs/{job}");
    let v2 = format!("/api/v2/jobs/alice~{job}");
    let mut paths = vec![
        v1.clone(),
        format!("{v1}/config"),
        format!("{v1}/ssh"),
        "/api/v1/jobs".to_string(),
        "/api/v1/user/alice/jobs".to_string(),
        v2.clone(),
        format!("{v2}/config"),
        format!("{v2}/attempts/0"),
        "/api/v2/jobs?withTotalCount=true".to_string(),
        "/ui/jobs".to_string(),
        format!("/ui/jobs/alice/{job}"),
        "/metrics".to_string(),
    ];
    for (role, tasks) in [("server", 1), ("client", 2)] {
        for index in 0..tasks {
            for source in ["user", "runtime", "all"] {
                paths.push(format!(
                    "{v1}/logs?role={role}&index={index}&source={source}"
                ));
            }
            paths.push(format!("/ui/jobs/alice/{job}/logs/{role}/{index}"));
            paths.push(format!(
                "{v2}/attempts/0/taskRoles/{role}/taskIndex/{index}/attempts"
            ));
            paths.push(format!(
                "{v2}/attempts/0/taskRoles/{role}/taskIndex/{index}/attempts/0/logs"
            ));
        }
    }
    paths
        .into_iter()
        .map(|p| {
            let answer = get(server, &p, TOKEN);
            (p, answer)
        })
        .collect()
}

fn assert_nowhere(found: &[(String, common::Answer)], secret: &str) {
    for (path, answer) in found {
        assert!(
            !answer.body.contains(secret),
            "{path} shows the secret: {}",
            answer.body
        );
    }
}

async fn final_view(client: &Client, job: &str) -> pai_api::status::JobView {
    let mut views = client.watch("alice", job).await.expect("watch");
    let done = async {
        let mut last = None;
        while let Some(view) = views.next().await {
            last = Some(view.expect("view"));
        }
        last.expect("a view")
    };
    tokio::time::timeout(DEADLINE, done).await.expect("in time")
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_this_machine_a_v2_job_runs_and_its_secret_reaches_only_its_tasks() {
    let dir = scratch("local");
    let state = dir.join("state");
    let server = Server::start_with_tokens(&state, &tokens(&dir));
    let answer = submit(&server, &example());
    assert_eq!(answer.status, 202, "{}", answer.body);
    let message: Value = serde_json::from_str(&answer.body).expect("json");
    assert_eq!(message["message"], "job v2-shell-hello submitted");
    // The example's server checks every client's handshake, which only the secret
    // rendered by the runtime in both roles' commands makes: success is the proof.
    let client = Client::new(&server.url, Some(TOKEN.to_string()));
    let done = final_view(&client, "v2-shell-hello").await;
    assert_eq!(done.job_status.state, JobState::Succeeded, "{done:#?}");
    assert_eq!(done.job_status.protocol_version, "2");
    // The parameters were rendered at submission, the cmd plugin's post-command ran.
    let log = get(
        &server,
        "/api/v1/user/alice/jobs/v2-shell-hello/logs?role=client&index=1",
        TOKEN,
    );
    assert!(
        log.body
            .contains("client 1 heard: ack: hello from client 1")
            && log.body.contains("client 1 done"),
        "{}",
        log.body
    );
    let server_log = get(
        &server,
        "/api/v1/user/alice/jobs/v2-shell-hello/logs?role=server&index=0",
        TOKEN,
    );
    assert!(
        server_log.body.starts_with("server deployment ready\n"),
        "the deployment's pre-command first: {}",
        server_log.body
    );

    let found = read_everything(&server, "v2-shell-hello");
    for (path, answer) in &found {
        assert!(
            answer.status == 200 || path.ends_with("/ssh"),
            "{path}: {} {}",
            answer.status,
            answer.body
        );
    }
    assert_nowhere(&found, SECRET);
    let config = &found
        .iter()
        .find(|(p, _)| p.ends_with("~v2-shell-hello/config"))
        .expect("config")
        .1;
    assert_eq!(config.header("content-type"), Some("text/yaml"));
    assert!(
        config.body.contains("secrets: \"******\"\n"),
        "{}",
        config.body
    );
    assert!(
        !server.log().contains(SECRET),
        "the server logged the secret"
    );
    // On disk: the job's Framework and everything else the server keeps hold no
    // secret, but the job's private file the init container reads (0600).
    let mut files = Vec::new();
    files_under(&state, &mut files);
    let mut holders = Vec::new();
    for file in &files {
        let bytes = std::fs::read(file).unwrap_or_default();
        if String::from_utf8_lossy(&bytes).contains(SECRET) {
            holders.push(file.clone());
        }
    }
    let expected: Vec<&PathBuf> = holders
        .iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "secrets.json"))
        .collect();
    assert_eq!(expected.len(), 1, "one secrets file: {holders:?}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(expected[0])
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // The rendered command in each task's root (as on a cluster: the runtime writes it
    // there for the user command, with the secret where the protocol puts it).
    let others: Vec<&PathBuf> = holders
        .iter()
        .filter(|p| !p.ends_with("secrets.json"))
        .collect();
    assert!(
        others
            .iter()
            .all(|p| p.file_name().is_some_and(|n| n == "main.sh")),
        "only the tasks' rendered commands hold it: {others:?}"
    );
    // Another user learns nothing about it.
    let bob = get(&server, "/api/v2/jobs/alice~v2-shell-hello/config", OTHER);
    assert_eq!(bob.status, 404);
    let list = get(&server, "/api/v2/jobs?username=alice", OTHER);
    assert_eq!(list.body, "[]");
}

/// A v2 job with a secret, a registry credential made of it and an ssh key from it.
fn secret_job() -> String {
    format!(
        "protocolVersion: 2\nname: private\ntype: job\nsecrets:\n  registry_password: {SECRET}\n  key: ssh-ed25519 AAAA{SECRET}\nprerequisites:\n  - name: img\n    type: dockerimage\n    uri: registry.example.com/team/train:1\n    auth:\n      username: robot\n      password: <% $secrets.registry_password %>\n      registryuri: registry.example.com\ntaskRoles:\n  train:\n    instances: 2\n    dockerImage: img\n    resourcePerInstance: {{cpu: 1, memoryMB: 512, gpu: 0}}\n    commands:\n      - login --password '<% $secrets.registry_password %>'\nextras:\n  com.microsoft.pai.runtimeplugin:\n    - plugin: ssh\n      parameters:\n        jobssh: true\n        userssh: {{type: custom, value: '<% $secrets.key %>'}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_kubernetes_secrets_are_secrets_the_framework_owns() {
    let dir = scratch("kube");
    let api = ApiServer::start().await;
    let kubeconfig = dir.join("kubeconfig");
    api.write_kubeconfig(&kubeconfig, Some(NS));
    let server = Server::start_kube(&kubeconfig, NS, &tokens(&dir));
    let answer = submit(&server, &secret_job());
    assert_eq!(answer.status, 202, "{}", answer.body);

    let name = pai_job::names::framework_name("alice", "private");
    let framework = api.get("frameworks", NS, &name).expect("framework");
    assert!(
        !framework.to_string().contains(SECRET),
        "the Framework holds the secret: {framework:#}"
    );
    // The job's Secret holds them for the init container, owned by the Framework.
    let secret = api
        .get("secrets", NS, &format!("{name}-ssh"))
        .expect("the job's Secret");
    assert_eq!(
        secret["metadata"]["ownerReferences"][0]["uid"],
        framework["metadata"]["uid"]
    );
    let decoded = |v: &Value| {
        use base64::Engine;
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(v.as_str().expect("base64"))
                .expect("decode"),
        )
        .expect("utf-8")
    };
    let secrets: Value =
        serde_json::from_str(&decoded(&secret["data"]["secrets.json"])).expect("json");
    assert_eq!(secrets["registry_password"], SECRET);
    // The registry's credentials: a pull Secret of the job's own, which its pods name.
    let registry = api
        .get("secrets", NS, &format!("{name}-registry"))
        .expect("the pull Secret");
    assert_eq!(registry["type"], "kubernetes.io/dockerconfigjson");
    assert_eq!(
        registry["metadata"]["ownerReferences"][0]["uid"],
        framework["metadata"]["uid"]
    );
    let config: Value =
        serde_json::from_str(&decoded(&registry["data"][".dockerconfigjson"])).expect("json");
    assert_eq!(config["auths"]["registry.example.com"]["username"], "robot");
    assert_eq!(config["auths"]["registry.example.com"]["password"], SECRET);
    let pod = &framework["spec"]["taskRoles"][0]["task"]["pod"]["spec"];
    assert_eq!(
        pod["imagePullSecrets"],
        json!([{"name": format!("{name}-registry")}])
    );
    assert_eq!(
        pod["containers"][0]["image"],
        "registry.example.com/team/train:1"
    );
    // Readers of the job see the templates at most, never the value.
    let found = [
        "/api/v1/user/alice/jobs/private",
        "/api/v1/user/alice/jobs/private/config",
        "/api/v2/jobs/alice~private",
        "/api/v2/jobs/alice~private/config",
        "/api/v2/jobs",
        "/ui/jobs/alice/private",
    ]
    .into_iter()
    .map(|p| (p.to_string(), get(&server, p, TOKEN)))
    .collect::<Vec<_>>();
    for (path, answer) in &found {
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
    }
    assert_nowhere(&found, SECRET);
    for event in api.list("events", NS) {
        assert!(!event.to_string().contains(SECRET), "{event:#}");
    }
    assert!(
        !server.log().contains(SECRET),
        "the server logged the secret"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_v2_list_filters_orders_and_pages_as_openpai_does() {
    let dir = scratch("list");
    let api = ApiServer::start().await;
    let kubeconfig = dir.join("kubeconfig");
    api.write_kubeconfig(&kubeconfig, Some(NS));
    let server = Server::start_kube(&kubeconfig, NS, &tokens(&dir));
    for (name, vc, instances) in [
        ("a_job", "default", 1),
        ("b_job", "research", 3),
        ("c_job", "research", 2),
    ] {
        let text = format!(
            "protocolVersion: 2\nname: {name}\ntype: job\nprerequisites: [{{name: i, type: dockerimage, uri: busybox}}]\ndefaults: {{virtualCluster: {vc}}}\ntaskRoles:\n  w:\n    instances: {instances}\n    dockerImage: i\n    resourcePerInstance: {{cpu: 1, memoryMB: 100, gpu: 1}}\n    commands: [\"true\"]\n"
        );
        let answer = submit(&server, &text);
        assert_eq!(answer.status, 202, "{}", answer.body);
    }
    let names = |path: &str| -> Vec<String> {
        let answer = get(&server, path, TOKEN);
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
        let list: Value = serde_json::from_str(&answer.body).expect("json");
        let items = list
            .get("data")
            .unwrap_or(&list)
            .as_array()
            .expect("list")
            .clone();
        items
            .iter()
            .map(|j| j["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        names("/api/v2/jobs?vc=research&order=jobName,ASC"),
        ["b_job", "c_job"]
    );
    assert_eq!(
        names("/api/v2/jobs?order=totalTaskNumber,DESC"),
        ["b_job", "c_job", "a_job"]
    );
    assert_eq!(
        names("/api/v2/jobs?order=totalGpuNumber,ASC&limit=2"),
        ["a_job", "c_job"]
    );
    assert_eq!(names("/api/v2/jobs?keyword=c_&order=jobName"), ["c_job"]);
    assert_eq!(
        names("/api/v2/jobs?order=jobName,DESC&offset=1&limit=1"),
        ["b_job"]
    );
    let counted = get(&server, "/api/v2/jobs?withTotalCount=true&limit=1", TOKEN);
    let counted: Value = serde_json::from_str(&counted.body).expect("json");
    assert_eq!(counted["totalCount"], 3);
    assert_eq!(counted["data"].as_array().map(Vec::len), Some(1));
    assert_eq!(counted["data"][0]["protocolVersion"], "2");
    assert!(names("/api/v2/jobs?tagsContain=x").is_empty());
    // Tags, as the SDK adds and removes them: on the Framework, in the lists' filters.
    let tag = |method: &str, job: &str, value: &str| {
        request(
            &server.url,
            method,
            &format!("/api/v2/jobs/alice~{job}/tag"),
            &[
                ("Authorization", &format!("Bearer {TOKEN}")),
                ("Content-Type", "application/json"),
            ],
            &json!({"value": value}).to_string(),
        )
    };
    for (job, value) in [
        ("b_job", "abnormal"),
        ("c_job", "abnormal"),
        ("c_job", "low_gpu_utilization"),
    ] {
        let answer = tag("PUT", job, value);
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
    assert_eq!(
        names("/api/v2/jobs?tagsContain=abnormal&order=jobName"),
        ["b_job", "c_job"]
    );
    assert_eq!(
        names("/api/v2/jobs?tagsContain=x,low_gpu_utilization"),
        ["c_job"]
    );
    assert_eq!(
        names("/api/v2/jobs?tagsNotContain=low_gpu_utilization&order=jobName"),
        ["a_job", "b_job"]
    );
    let c = api
        .get(
            "frameworks",
            NS,
            &pai_job::names::framework_name("alice", "c_job"),
        )
        .expect("c_job");
    assert_eq!(
        c["metadata"]["annotations"][pai_job::tags::ANNOTATION],
        r#"["abnormal","low_gpu_utilization"]"#
    );
    let view = get(&server, "/api/v1/user/alice/jobs/c_job", TOKEN);
    let view: Value = serde_json::from_str(&view.body).expect("json");
    assert_eq!(
        view["jobStatus"]["tags"],
        json!(["abnormal", "low_gpu_utilization"])
    );
    assert_eq!(tag("DELETE", "c_job", "abnormal").status, 200);
    assert_eq!(names("/api/v2/jobs?tagsContain=abnormal"), ["b_job"]);
    let missing = tag("DELETE", "c_job", "abnormal");
    assert_eq!(missing.status, 404, "{}", missing.body);
    assert!(missing.body.contains("NoTagError"), "{}", missing.body);
    let bad = tag("PUT", "c_job", "a,b");
    assert_eq!(bad.status, 400, "{}", bad.body);
    // Tags added at once by eight clients: each one answered 200 is kept (a write that
    // met another is made again on the newer Framework, never over it).
    let url = server.url.clone();
    let answers: Vec<(String, u16)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let url = url.clone();
                scope.spawn(move || {
                    let value = format!("t{i}");
                    let answer = request(
                        &url,
                        "PUT",
                        "/api/v2/jobs/alice~a_job/tag",
                        &[
                            ("Authorization", &format!("Bearer {TOKEN}")),
                            ("Content-Type", "application/json"),
                        ],
                        &json!({"value": value}).to_string(),
                    );
                    (value, answer.status)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    let a = api
        .get(
            "frameworks",
            NS,
            &pai_job::names::framework_name("alice", "a_job"),
        )
        .expect("a_job");
    let kept: Vec<String> = serde_json::from_str(
        a["metadata"]["annotations"][pai_job::tags::ANNOTATION]
            .as_str()
            .unwrap_or("[]"),
    )
    .expect("tags");
    for (value, status) in &answers {
        assert!(*status == 200 || *status == 409, "{value}: {status}");
        if *status == 200 {
            assert!(
                kept.contains(value),
                "{value} was answered 200 and lost: {kept:?}"
            );
        }
    }
    assert!(answers.iter().any(|(_, s)| *s == 200));
    // Bob cannot tag Alice's job, nor learn that it exists.
    let bobs = request(
        &server.url,
        "PUT",
        "/api/v2/jobs/alice~c_job/tag",
        &[
            ("Authorization", &format!("Bearer {OTHER}")),
            ("Content-Type", "application/json"),
        ],
        r#"{"value": "mine"}"#,
    );
    assert_eq!(bobs.status, 404, "{}", bobs.body);
    let bad = get(&server, "/api/v2/jobs?order=color,ASC", TOKEN);
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.contains("InvalidParametersError"), "{}", bad.body);
    let bad = get(&server, "/api/v2/jobs/no-tilde", TOKEN);
    assert_eq!(bad.status, 400, "{}", bad.body);
    // Bob sees none of Alice's.
    assert!(
        request(
            &server.url,
            "GET",
            "/api/v2/jobs",
            &[("Authorization", &format!("Bearer {OTHER}"))],
            ""
        )
        .body
            == "[]"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_userssh_key_from_the_secrets_is_rendered_in_the_task() {
    let dir = scratch("userssh");
    let server = Server::start_with_tokens(&dir.join("state"), &tokens(&dir));
    let key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFromTheSecrets user@laptop";
    let text = format!(
        "protocolVersion: 2\nname: keyed\ntype: job\nsecrets:\n  key: {key}\nprerequisites: [{{name: i, type: dockerimage, uri: busybox}}]\ntaskRoles:\n  w:\n    dockerImage: i\n    resourcePerInstance: {{cpu: 1, memoryMB: 100, gpu: 0}}\n    commands: ['echo \"key=$PAI_SSH_PUB_KEY\"']\nextras:\n  com.microsoft.pai.runtimeplugin:\n    - {{plugin: ssh, parameters: {{jobssh: true, userssh: {{type: custom, value: '<% $secrets.key %>'}}}}}}\n"
    );
    let answer = submit(&server, &text);
    assert_eq!(answer.status, 202, "{}", answer.body);
    let client = Client::new(&server.url, Some(TOKEN.to_string()));
    let done = final_view(&client, "keyed").await;
    assert_eq!(done.job_status.state, JobState::Succeeded, "{done:#?}");
    let log = get(
        &server,
        "/api/v1/user/alice/jobs/keyed/logs?role=w&index=0",
        TOKEN,
    );
    assert_eq!(log.body, format!("key={key}\n"));
    // Readers of the job see the template, not the key.
    let view = get(&server, "/api/v2/jobs/alice~keyed/config", TOKEN);
    assert!(!view.body.contains("FromTheSecrets"), "{}", view.body);
}
