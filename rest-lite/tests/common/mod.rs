//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod fifo;
pub mod serve;

use std::path::PathBuf;

use pai_contract::Framework;
use rest_lite::config::ClusterConfig;
use rest_lite::ports::Seed;
use rest_lite::spec::{JobSpec, SpecErrors, SpecFormat, UserName};
use rest_lite::transform::{Submission, Transformer};

/// A log the client streams, read to its end as text.
pub async fn read_all(mut stream: rest_lite::client::Chunks) -> String {
    use futures::StreamExt;
    let mut text = Vec::new();
    while let Some(chunk) = stream.next().await {
        text.extend_from_slice(&chunk.expect("chunk"));
    }
    String::from_utf8_lossy(&text).into_owned()
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Parses and transforms `text` for user `alice` with the default config and `seed`.
pub fn transform(text: &str, seed: u64) -> Result<Framework, SpecErrors> {
    transform_with(text, seed, ClusterConfig::default())
}

pub fn transform_with(
    text: &str,
    seed: u64,
    config: ClusterConfig,
) -> Result<Framework, SpecErrors> {
    let format = SpecFormat::detect(text);
    let spec = JobSpec::parse(text, format)?;
    let user = UserName::parse("alice").expect("valid user");
    Transformer::new(config).transform(
        Submission {
            user: &user,
            spec: &spec,
            spec_text: text,
            format,
        },
        Seed::Fixed(seed),
    )
}

/// The main container's env of role `role` (index in spec order), as the process sees it
/// after the kubelet's expansion.
pub fn main_env(framework: &Framework, role: usize) -> Vec<(String, String)> {
    let pod = framework.spec.task_roles[role]
        .task
        .pod
        .spec
        .as_ref()
        .expect("pod spec");
    pai_local::task::container_env(Vec::new(), &pod.containers[0])
}

pub fn get<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// A small valid job, as JSON, for tests to modify.
pub fn base_job() -> serde_json::Value {
    serde_json::json!({
        "jobName": "job",
        "image": "busybox",
        "taskRoles": [
            {"name": "ps", "taskNumber": 2, "cpuNumber": 1, "memoryMB": 1024, "command": "true"},
            {"name": "worker", "taskNumber": 2, "cpuNumber": 1, "memoryMB": 1024, "command": "true",
             "portList": [{"label": "main", "beginAt": 0, "portNumber": 1}]}
        ]
    })
}

/// Asserts that a real API server with FrameworkController's CRD stores `framework` as it
/// is (admitted, and nothing pruned), and that every pod name it implies fits 63.
pub fn assert_cluster_accepts(framework: &Framework) {
    let sent = serde_json::to_value(framework).expect("json");
    let mut stored = sent.clone();
    if let Err(invalid) = pai_test_support::validation::admit("frameworks", &mut stored) {
        panic!("the cluster refuses the Framework: {}", invalid.message());
    }
    assert_eq!(
        stored, sent,
        "the cluster would prune fields of the Framework"
    );
    let name = framework.metadata.name.as_deref().expect("name");
    for role in &framework.spec.task_roles {
        let last = u32::try_from(role.task_number - 1).expect("tasks");
        let pod = pai_contract::framework::pod_name(name, &role.name, last);
        assert!(
            pod.len() <= pai_contract::names::MAX_POD_NAME,
            "{pod} is {} characters",
            pod.len()
        );
    }
}

/// A response: status, headers (lower-case names), body.
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request over a fresh connection; `Host` is the server's address unless
/// `headers` name one.
pub fn request(
    url: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let address = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).expect("connect");
    let mut text = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        text.push_str(&format!("Host: {address}\r\n"));
    }
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    std::io::Write::write_all(&mut stream, text.as_bytes()).expect("send");
    let mut raw = Vec::new();
    std::io::Read::read_to_end(&mut stream, &mut raw).expect("receive");
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").expect("a head");
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_string(),
    }
}
