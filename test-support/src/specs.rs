//! A spec through the transformer, the environment a task sees, the cluster's admission
//! of the result: what the tests of the translation, the API, the server and the binary
//! write their jobs with.

use pai_contract::Framework;
use pai_translate::config::ClusterConfig;
use pai_translate::ports::Seed;
use pai_translate::spec::{JobSpec, SpecErrors, SpecFormat, UserName};
use pai_translate::transform::{Submission, Transformer};

pub use crate::bench_results::repo_root;

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

/// The pod spec of role `role` (index in spec order).
fn pod_spec(framework: &Framework, role: usize) -> &k8s_openapi::api::core::v1::PodSpec {
    framework.spec.task_roles[role]
        .task
        .pod
        .spec
        .as_ref()
        .expect("pod spec")
}

/// The main container's env of role `role` (index in spec order), as the process sees it
/// after the kubelet's expansion.
pub fn main_env(framework: &Framework, role: usize) -> Vec<(String, String)> {
    pai_local::task::container_env(Vec::new(), &pod_spec(framework, role).containers[0])
}

/// The init container's env of role `role` (spec order), as the process sees it.
pub fn init_env(framework: &Framework, role: usize) -> Vec<(String, String)> {
    let pod = pod_spec(framework, role);
    let init = &pod.init_containers.as_ref().expect("init container")[0];
    pai_local::task::container_env(Vec::new(), init)
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
    if let Err(invalid) = crate::validation::admit("frameworks", &mut stored) {
        panic!("the cluster refuses the Framework: {}", invalid.message());
    }
    assert_eq!(
        stored, sent,
        "the cluster would prune fields of the Framework"
    );
    let name = framework.metadata.name.as_deref().expect("name");
    for role in &framework.spec.task_roles {
        // Each pod FrameworkController makes of the template passes the pod's rules.
        let mut pod = serde_json::json!({
            "metadata": {"name": "pod"},
            "spec": serde_json::to_value(&role.task.pod.spec).expect("json"),
        });
        if let Err(invalid) = crate::validation::admit("pods", &mut pod) {
            panic!(
                "the cluster refuses role {}'s pods: {}",
                role.name,
                invalid.message()
            );
        }
        let last = u32::try_from(role.task_number - 1).expect("tasks");
        let pod = pai_contract::framework::pod_name(name, &role.name, last);
        assert!(
            pod.len() <= pai_job::names::MAX_POD_NAME,
            "{pod} is {} characters",
            pod.len()
        );
    }
}
