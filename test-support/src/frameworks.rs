//! Frameworks and controller-like status changes for tests.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use pai_contract::framework::{
    CompletionPolicySpec, ExecutionType, Framework, FrameworkSpec, RetryPolicySpec, TaskRoleSpec,
    TaskSpec,
};
use pai_contract::{env, meta};
use pai_job::names;

/// Namespace the tests use.
pub const NAMESPACE: &str = "jobs";

/// A Framework named `name` with `roles` (name as in the spec, task count). Role `i` has
/// ports `http:2<i>001;ssh:2<i>002` and the task-role name rest-lite gives it.
pub fn framework(name: &str, roles: &[(&str, u32)]) -> Framework {
    framework_on_ports(name, roles, 20000)
}

/// [`framework`] with role `i`'s ports at `base + 1000·i + 1` (http) and `+ 2` (ssh), for
/// tests that bind them and must not meet each other.
pub fn framework_on_ports(name: &str, roles: &[(&str, u32)], base: u16) -> Framework {
    let task_roles = roles
        .iter()
        .enumerate()
        .map(|(i, (role, tasks))| TaskRoleSpec {
            name: names::task_role_name(role),
            task_number: i32::try_from(*tasks).unwrap_or(i32::MAX),
            framework_attempt_completion_policy: CompletionPolicySpec::default(),
            task: TaskSpec {
                retry_policy: RetryPolicySpec::default(),
                pod_graceful_deletion_timeout_sec: None,
                pod: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        annotations: Some(BTreeMap::from([(
                            meta::ANNOTATION_ROLE.to_string(),
                            role.to_string(),
                        )])),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: "main".into(),
                            env: Some(template_env(role, base + 1000 * i as u16, *tasks)),
                            ..Container::default()
                        }],
                        ..PodSpec::default()
                    }),
                },
            },
        })
        .collect();
    let mut framework = Framework::new(
        name,
        FrameworkSpec {
            description: None,
            execution_type: ExecutionType::Start,
            retry_policy: RetryPolicySpec::default(),
            task_roles,
        },
    );
    framework.metadata.namespace = Some(NAMESPACE.to_string());
    framework
}

/// A role's main-container env as rest-lite writes it: its ports and its family.
fn template_env(role: &str, port_base: u16, tasks: u32) -> Vec<EnvVar> {
    let var = |name: String, value: String| EnvVar {
        name,
        value: Some(value),
        value_from: None,
    };
    let mut plan = pai_contract::PortPlan::default();
    for (label, port) in [
        (pai_contract::ports::HTTP_LABEL, port_base + 1),
        (pai_contract::ports::SSH_LABEL, port_base + 2),
    ] {
        plan.push(label, vec![port]).expect("distinct labels");
    }
    let mut vars = vec![var(env::CONTAINER_HOST_PORT_LIST.into(), plan.to_string())];
    let values = [
        tasks.to_string(),
        "1".into(),
        "-1".into(),
        "1".into(),
        "-1".into(),
        "cpu_count:1,memMB:1024,shmMB:64,gpu_count:0".into(),
    ];
    vars.extend(
        env::role_family(role)
            .into_iter()
            .zip(values)
            .map(|(n, v)| var(n, v)),
    );
    vars
}

/// The Framework as the JSON a server stores.
pub fn to_value(framework: &Framework) -> Value {
    serde_json::to_value(framework).unwrap_or_default()
}

/// The address tests give task `index` of the role at `role_position`.
pub fn address(role_position: usize, index: u32) -> String {
    format!(
        "10.{}.{}.{}",
        role_position + 1,
        index / 250,
        index % 250 + 1
    )
}

/// Sets (or clears, with `""`) the pod IP of one task, as FrameworkController would.
pub fn set_pod_ip(framework: &mut Value, kube_role: &str, index: u32, ip: &str) {
    let pod_name = pai_contract::framework::pod_name(
        framework["metadata"]["name"].as_str().unwrap_or_default(),
        kube_role,
        index,
    );
    let attempt = &mut framework["status"]["attemptStatus"];
    if !attempt["taskRoleStatuses"].is_array() {
        attempt["taskRoleStatuses"] = json!([]);
    }
    let roles = attempt["taskRoleStatuses"].as_array_mut().expect("array");
    let role = match roles.iter().position(|r| r["name"] == kube_role) {
        Some(i) => &mut roles[i],
        None => {
            roles.push(json!({"name": kube_role, "taskStatuses": []}));
            roles.last_mut().expect("pushed")
        }
    };
    let tasks = role["taskStatuses"].as_array_mut().expect("array");
    let task = match tasks.iter().position(|t| t["index"] == index) {
        Some(i) => &mut tasks[i],
        None => {
            tasks.push(
                json!({"index": index, "state": "AttemptRunning", "attemptStatus": {"id": 0}}),
            );
            tasks.last_mut().expect("pushed")
        }
    };
    task["attemptStatus"]["podIP"] = json!(ip);
    task["attemptStatus"]["podHostIP"] = json!("192.0.2.1");
    task["attemptStatus"]["podName"] = json!(pod_name);
}

/// Starts attempt `id` as FrameworkController does: a new attempt instance UID
/// (`<id>_<uid>`) and every task back to no address.
pub fn set_attempt(framework: &mut Value, id: i32, instance_uid: &str) {
    framework["status"]["attemptStatus"] = json!({
        "id": id,
        "instanceUID": instance_uid,
        "taskRoleStatuses": [],
    });
}

/// Gives every task of every role (name as in the spec, task count) its test address.
pub fn set_all_addresses(framework: &mut Value, roles: &[(&str, u32)]) {
    for (position, (role, tasks)) in roles.iter().enumerate() {
        let kube_role = names::task_role_name(role);
        for index in 0..*tasks {
            set_pod_ip(framework, &kube_role, index, &address(position, index));
        }
    }
}

/// The pod FrameworkController makes for task `index` of role `role` (its Kubernetes
/// name) of `framework`, from the role's template: its name, the template's labels,
/// annotations and finalizers, and FrameworkController's attempt annotation.
pub fn pod_of(framework: &Value, role: &str, index: u32) -> Value {
    let name = framework["metadata"]["name"].as_str().unwrap_or_default();
    let template = framework["spec"]["taskRoles"]
        .as_array()
        .and_then(|roles| roles.iter().find(|r| r["name"] == role))
        .map(|r| r["task"]["pod"].clone())
        .unwrap_or_default();
    let mut annotations = template["metadata"]["annotations"].clone();
    if !annotations.is_object() {
        annotations = json!({});
    }
    annotations[pai_contract::env::fc::FRAMEWORK_ATTEMPT_ID] = json!(
        framework["status"]["attemptStatus"]["id"]
            .as_i64()
            .unwrap_or(0)
            .to_string()
    );
    json!({
        "metadata": {
            "name": pai_contract::framework::pod_name(name, role, index),
            "namespace": framework["metadata"]["namespace"],
            "labels": template["metadata"]["labels"],
            "annotations": annotations,
            "finalizers": template["metadata"]["finalizers"],
        },
        "spec": template["spec"],
    })
}

/// Pod `pod`'s container `container` terminated with `code` and the termination
/// `message` the kubelet gives it, as the kubelet writes it into the pod's status (the
/// init container's status list or the main one's, by name).
pub fn set_terminated(pod: &mut Value, container: &str, code: i32, message: &str) {
    let list = match container {
        pai_contract::framework::INIT_CONTAINER => "initContainerStatuses",
        _ => "containerStatuses",
    };
    if !pod["status"].is_object() {
        pod["status"] = json!({});
    }
    let status = json!({"name": container, "ready": false, "restartCount": 0, "image": "", "imageID": "",
        "state": {"terminated": {"exitCode": code, "message": message,
            "reason": if code == 0 { "Completed" } else { "Error" }}}});
    let statuses = &mut pod["status"][list];
    if !statuses.is_array() {
        *statuses = json!([]);
    }
    let Some(statuses) = statuses.as_array_mut() else {
        return;
    };
    statuses.retain(|s| s["name"] != container);
    statuses.push(status);
}
