//! What the Framework says, field by field: the static environment of contracts §2, the
//! pod shape of §3 and §4, and the cluster settings that change it.

use crate::common;

use pai_contract::PortPlan;
use pai_translate::config::ClusterConfig;
use serde_json::json;

fn tf_example() -> String {
    std::fs::read_to_string(common::repo_root().join("examples/tensorflow-ps-worker.json"))
        .expect("example")
}

#[test]
fn every_static_variable_has_its_value() {
    let framework = common::transform(&tf_example(), 5).expect("transforms");
    let worker = common::main_env(&framework, 1);
    let get = |n: &str| common::get(&worker, n).unwrap_or_else(|| panic!("{n} is missing"));

    assert_eq!(get("PAI_JOB_NAME"), "alice~tfDemo");
    assert_eq!(get("PAI_USER_NAME"), "alice");
    assert_eq!(get("PAI_DEFAULT_FS_URI"), "");
    assert_eq!(get("PAI_TASK_ROLE_COUNT"), "2");
    assert_eq!(get("PAI_TASK_ROLE_LIST"), "ps,worker");
    assert_eq!(get("PAI_TASK_ROLE_TASK_COUNT_worker"), "2");
    // worker: minSucceededTaskCount 2, minFailedTaskCount unset (1).
    assert_eq!(get("PAI_MIN_FAILED_INSTANCE_worker"), "1");
    assert_eq!(get("PAI_MIN_FAILED_TASK_COUNT_worker"), "1");
    assert_eq!(get("PAI_MIN_SUCCEEDED_INSTANCE_worker"), "2");
    assert_eq!(get("PAI_MIN_SUCCEEDED_TASK_COUNT_worker"), "2");
    assert_eq!(
        get("PAI_RESOURCE_worker"),
        "cpu_count:2,memMB:16384,shmMB:64,gpu_count:4"
    );
    // The ps family lives in the ps template only; the runtime copies it to the workers.
    assert_eq!(common::get(&worker, "PAI_TASK_ROLE_TASK_COUNT_ps"), None);
    let ps = common::main_env(&framework, 0);
    assert_eq!(common::get(&ps, "PAI_TASK_ROLE_TASK_COUNT_ps"), Some("2"));
    assert_eq!(common::get(&ps, "PAI_MIN_FAILED_INSTANCE_ps"), Some("1"));
    assert_eq!(
        common::get(&ps, "PAI_MIN_SUCCEEDED_INSTANCE_ps"),
        Some("-1")
    );
    assert_eq!(
        common::get(&ps, "PAI_MIN_SUCCEEDED_TASK_COUNT_ps"),
        Some("-1")
    );
    assert_eq!(
        common::get(&ps, "PAI_RESOURCE_ps"),
        Some("cpu_count:2,memMB:8192,shmMB:64,gpu_count:1")
    );
    assert_eq!(get("PAI_CURRENT_TASK_ROLE_NAME"), "worker");
    assert_eq!(get("PAI_CURRENT_TASK_ROLE_TASK_COUNT"), "2");
    assert_eq!(get("PAI_CURRENT_TASK_ROLE_CPU_COUNT"), "2");
    assert_eq!(get("PAI_CURRENT_TASK_ROLE_MEM_MB"), "16384");
    assert_eq!(get("PAI_CURRENT_TASK_ROLE_SHM_MB"), "64");
    assert_eq!(get("PAI_CURRENT_TASK_ROLE_GPU_COUNT"), "4");
    assert_eq!(get("PAI_CURRENT_TASK_ROLE_MIN_FAILED_TASK_COUNT"), "1");
    assert_eq!(get("PAI_CURRENT_TASK_ROLE_MIN_SUCCEEDED_TASK_COUNT"), "2");
    assert_eq!(get("PAI_DATA_DIR"), "");
    assert_eq!(get("PAI_OUTPUT_DIR"), "");
    assert_eq!(get("PAI_CODE_DIR"), "");
    assert!(get("PAI_SSH_PUB_KEY").starts_with("ssh-ed25519 "));

    let plan: PortPlan = get("PAI_CONTAINER_HOST_PORT_LIST").parse().expect("plan");
    let labels: Vec<&str> = plan.iter().map(|(l, _)| l).collect();
    assert_eq!(
        labels,
        ["main", "http", "ssh"],
        "spec labels first, then the implicit ones"
    );
    assert_eq!(
        get("PAI_CURRENT_CONTAINER_PORT"),
        plan.first("http").expect("http").to_string()
    );
    assert_eq!(
        get("PAI_CONTAINER_SSH_PORT"),
        plan.first("ssh").expect("ssh").to_string()
    );
    for (label, ports) in plan.iter() {
        let list = ports
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(get(&format!("PAI_CONTAINER_HOST_{label}_PORT_LIST")), list);
    }
    let names: Vec<&str> = worker.iter().map(|(k, _)| k.as_str()).collect();
    let unique: std::collections::HashSet<&&str> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "no variable is set twice");
}

#[test]
fn job_envs_reach_the_process_byte_exact() {
    let hostile = [
        ("QUOTES", "it's \"quoted\""),
        ("NEWLINES", "a\nb\r\nc"),
        ("SUBST", "$(date) $$(x) ${HOME} $PAI_JOB_NAME"),
        ("BACKTICKS", "`rm -rf /`"),
        ("UNICODE", "tête-à-tête ✓"),
        ("TRAILING", "ends with $"),
    ];
    let mut job = common::base_job();
    for (k, v) in hostile {
        job["jobEnvs"][k] = json!(v);
    }
    job["jobEnvs"]["NUMBER"] = json!(1.5);
    job["jobEnvs"]["FLAG"] = json!(true);
    job["taskRoles"][0]["command"] = json!("echo \"$(hostname)\" $$ `id` $(PAI_JOB_NAME)");
    let framework = common::transform(&job.to_string(), 1).expect("transforms");
    let env = common::main_env(&framework, 0);
    for (k, v) in hostile {
        assert_eq!(common::get(&env, k), Some(v), "{k}");
    }
    assert_eq!(common::get(&env, "NUMBER"), Some("1.5"));
    assert_eq!(common::get(&env, "FLAG"), Some("true"));

    let init = &framework.spec.task_roles[0]
        .task
        .pod
        .spec
        .as_ref()
        .expect("pod")
        .init_containers
        .as_ref()
        .expect("init")[0];
    let init_env = init.env.as_ref().expect("env");
    let user_cmd = init_env
        .iter()
        .find(|e| e.name == "USER_CMD")
        .expect("USER_CMD");
    let defined = |n: &str| (n == "PAI_JOB_NAME").then(|| "SUBSTITUTED".to_string());
    assert_eq!(
        pai_contract::env::kubelet_expand(user_cmd.value.as_deref().expect("value"), defined),
        "echo \"$(hostname)\" $$ `id` $(PAI_JOB_NAME)",
        "the kubelet must not substitute inside the command"
    );
}

#[test]
fn the_pod_has_the_runtime_contract_shape() {
    let text = tf_example();
    let framework = common::transform(&text, 5).expect("transforms");
    let meta = &framework.metadata;
    // sha256("alice/tfDemo"), first 32 hex digits (computed independently).
    assert_eq!(
        meta.name.as_deref(),
        Some("93af5e74153f3719990e0964f312e19c")
    );
    assert_eq!(meta.namespace.as_deref(), Some("default"));
    let annotations = meta.annotations.as_ref().expect("annotations");
    assert_eq!(
        annotations["rest-lite.openpai.io/job-spec"], text,
        "spec kept verbatim"
    );
    assert_eq!(annotations["rest-lite.openpai.io/job-name"], "tfDemo");
    let labels = meta.labels.as_ref().expect("labels");
    assert_eq!(labels["rest-lite.openpai.io/user"], "alice");
    assert_eq!(labels["rest-lite.openpai.io/job"], "tfdemo");

    let spec = &framework.spec;
    assert!(spec.retry_policy.fancy_retry_policy);
    assert_eq!(spec.retry_policy.max_retry_count, 0);
    let worker = &spec.task_roles[1];
    assert_eq!(worker.name, "worker");
    assert_eq!(worker.task_number, 2);
    assert_eq!(
        worker
            .framework_attempt_completion_policy
            .min_failed_task_count,
        1
    );
    assert_eq!(
        worker
            .framework_attempt_completion_policy
            .min_succeeded_task_count,
        2
    );
    assert_eq!(
        spec.task_roles[0]
            .framework_attempt_completion_policy
            .min_succeeded_task_count,
        -1
    );

    let pod = worker.task.pod.spec.as_ref().expect("pod");
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    // The job's own account; no token in the user's container.
    assert_eq!(
        pod.service_account_name,
        Some(format!("{}-job", meta.name.as_deref().expect("name")))
    );
    assert_eq!(pod.automount_service_account_token, Some(false));
    assert_eq!(pod.host_network, None);
    let init = &pod.init_containers.as_ref().expect("init")[0];
    assert_eq!(init.image.as_deref(), Some("kube-runtime:0.1.0"));
    assert_eq!(
        init.command.as_deref(),
        Some(&["/opt/pai/kube-runtime".to_string(), "entry".to_string()][..])
    );
    let main = &pod.containers[0];
    assert_eq!(main.image.as_deref(), Some("xudifsd/tf-example"));
    assert_eq!(
        main.command.as_deref(),
        Some(&["/usr/local/pai/run".to_string()][..])
    );
    let resources = main.resources.as_ref().expect("resources");
    assert_eq!(resources.requests, resources.limits);
    let limits = resources.limits.as_ref().expect("limits");
    assert_eq!(limits["cpu"].0, "2");
    assert_eq!(limits["memory"].0, "16384Mi");
    assert_eq!(limits["nvidia.com/gpu"].0, "4");
    assert!(
        main.ports
            .as_ref()
            .expect("ports")
            .iter()
            .all(|p| p.host_port.is_none())
    );

    let mounts = |c: &k8s_openapi::api::core::v1::Container| -> Vec<(String, String)> {
        c.volume_mounts
            .as_deref()
            .unwrap_or_default()
            .iter()
            .map(|m| (m.name.clone(), m.mount_path.clone()))
            .collect()
    };
    assert!(mounts(init).contains(&("pai-runtime".into(), "/usr/local/pai".into())));
    assert!(mounts(main).contains(&("pai-runtime".into(), "/usr/local/pai".into())));
    assert!(mounts(main).contains(&("pai-logs".into(), "/usr/local/pai/logs".into())));
    assert!(mounts(main).contains(&("dshm".into(), "/dev/shm".into())));
    let shm = pod
        .volumes
        .as_ref()
        .expect("volumes")
        .iter()
        .find(|v| v.name == "dshm")
        .expect("dshm");
    let empty_dir = shm.empty_dir.as_ref().expect("emptyDir");
    assert_eq!(empty_dir.medium.as_deref(), Some("Memory"));
    assert_eq!(
        empty_dir.size_limit.as_ref().map(|q| q.0.as_str()),
        Some("64Mi")
    );
}

#[test]
fn cluster_settings_come_from_the_config() {
    let config = ClusterConfig {
        namespace: "jobs".into(),
        runtime_image: "registry.local/kube-runtime:1".into(),
        host_network: true,
        image_pull_secrets: vec!["regcred".into()],
        log_host_path: Some("/var/log/pai".into()),
        extra_capabilities: vec!["IPC_LOCK".into()],
        default_fs_uri: "hdfs://nn:9000".into(),
        kube_apiserver_address: "https://10.0.0.1:6443".into(),
        barrier_timeout_sec: Some(900),
        ..ClusterConfig::default()
    };
    let framework = common::transform_with(&tf_example(), 5, config).expect("transforms");
    assert_eq!(framework.metadata.namespace.as_deref(), Some("jobs"));
    let pod = framework.spec.task_roles[0]
        .task
        .pod
        .spec
        .as_ref()
        .expect("pod");
    assert_eq!(pod.host_network, Some(true));
    assert_eq!(
        pod.image_pull_secrets.as_ref().expect("secrets")[0].name,
        "regcred"
    );
    let logs = pod
        .volumes
        .as_ref()
        .expect("volumes")
        .iter()
        .find(|v| v.name == "pai-logs")
        .expect("logs");
    assert_eq!(
        logs.host_path.as_ref().expect("hostPath").path,
        "/var/log/pai"
    );
    let main = &pod.containers[0];
    for port in main.ports.as_ref().expect("ports") {
        assert_eq!(
            port.host_port,
            Some(port.container_port),
            "host networking exposes host ports"
        );
    }
    let caps = main
        .security_context
        .as_ref()
        .and_then(|s| s.capabilities.as_ref())
        .expect("caps");
    assert_eq!(caps.add.as_deref(), Some(&["IPC_LOCK".to_string()][..]));
    let init = &pod.init_containers.as_ref().expect("init")[0];
    assert_eq!(init.image.as_deref(), Some("registry.local/kube-runtime:1"));
    let init_env = init.env.as_ref().expect("env");
    let value = |n: &str| {
        init_env
            .iter()
            .find(|e| e.name == n)
            .and_then(|e| e.value.clone())
    };
    assert_eq!(
        value("KUBE_APISERVER_ADDRESS").as_deref(),
        Some("https://10.0.0.1:6443")
    );
    assert_eq!(value("BARRIER_CHECK_TIMEOUT_SEC").as_deref(), Some("900"));
    let env = common::main_env(&framework, 0);
    assert_eq!(
        common::get(&env, "PAI_DEFAULT_FS_URI"),
        Some("hdfs://nn:9000")
    );
}

#[test]
fn the_framework_grows_linearly_with_roles() {
    let sized = |roles: usize| {
        let roles: Vec<serde_json::Value> = (0..roles)
            .map(|i| {
                json!({"name": format!("role{i}"), "taskNumber": 20, "cpuNumber": 1,
                            "memoryMB": 1024, "command": "true"})
            })
            .collect();
        let job = json!({"jobName": "wide", "image": "busybox", "taskRoles": roles});
        serde_json::to_vec(&common::transform(&job.to_string(), 9).expect("transforms"))
            .expect("json")
            .len()
    };
    let (fifty, hundred) = (sized(50), sized(100));
    // Linear: twice the roles, about twice the bytes. PAI_TASK_ROLE_LIST, in every role,
    // is the one quadratic term, a few bytes per role.
    assert!(
        hundred < fifty * 23 / 10,
        "50 roles: {fifty} bytes, 100 roles: {hundred} bytes"
    );
    assert!(
        hundred < 1024 * 1024,
        "100 roles stay far below the API server's object limit: {hundred}"
    );
}

#[test]
fn the_framework_grows_with_roles_not_tasks() {
    let sized = |tasks: u32| {
        let mut job = common::base_job();
        for r in job["taskRoles"].as_array_mut().expect("roles") {
            r["taskNumber"] = json!(tasks / 2);
        }
        let framework = common::transform(&job.to_string(), 9).expect("transforms");
        serde_json::to_vec(&framework).expect("json").len()
    };
    let ten_thousand = sized(10_000);
    assert!(
        ten_thousand < 100 * 1024,
        "10,000 tasks: {ten_thousand} bytes"
    );
    let two = sized(2);
    assert!(
        ten_thousand - two < 64,
        "2 tasks: {two} bytes, 10,000 tasks: {ten_thousand} bytes"
    );
}

/// An operator's failure patterns reach every task's runtime as JSON, escaped for the
/// kubelet's `$(VAR)` expansion; without any, no variable.
#[test]
fn operator_failure_patterns_reach_every_task() {
    let framework =
        common::transform_with(&tf_example(), 5, ClusterConfig::default()).expect("transforms");
    let env = common::main_env(&framework, 0);
    assert_eq!(common::get(&env, "PAI_RUNTIME_FAILURE_PATTERNS"), None);
    let pattern = pai_contract::failure::Pattern {
        name: "quota".into(),
        user_log_regex: r"Disk quota exceeded$(x)".into(),
        exit_code: Some(1),
    };
    let config = ClusterConfig {
        failure_patterns: vec![pattern.clone()],
        ..ClusterConfig::default()
    };
    config.check().expect("valid config");
    let framework = common::transform_with(&tf_example(), 5, config).expect("transforms");
    for role in 0..framework.spec.task_roles.len() {
        let env = common::main_env(&framework, role);
        let json = common::get(&env, "PAI_RUNTIME_FAILURE_PATTERNS").expect("the patterns");
        // As the kubelet hands it over: `$$` is one `$`.
        let json = json.replace("$$", "$");
        let read: Vec<pai_contract::failure::Pattern> = serde_json::from_str(&json).expect("JSON");
        assert_eq!(read, std::slice::from_ref(&pattern));
    }
}

#[test]
fn the_runtime_grace_follows_the_pod_grace() {
    // (pod grace, configured kill grace) → PAI_KILL_GRACE_SEC.
    for (pod, kill, expected) in [
        (30, None, "28"),
        (3, None, "1"),
        (1, None, "0"),
        (0, None, "0"),
        (30, Some(5), "5"),
    ] {
        let config = ClusterConfig {
            termination_grace_period_sec: pod,
            kill_grace_sec: kill,
            user_log_max_bytes: 4096,
            ..ClusterConfig::default()
        };
        config.check().expect("valid config");
        let framework = common::transform_with(&tf_example(), 5, config).expect("transforms");
        for role in 0..framework.spec.task_roles.len() {
            let env = common::main_env(&framework, role);
            assert_eq!(
                common::get(&env, "PAI_KILL_GRACE_SEC"),
                Some(expected),
                "pod grace {pod}, kill grace {kill:?}"
            );
            assert_eq!(common::get(&env, "PAI_LOG_MAX_BYTES"), Some("4096"));
        }
    }
    let too_long = ClusterConfig {
        termination_grace_period_sec: 10,
        kill_grace_sec: Some(11),
        ..ClusterConfig::default()
    };
    assert_eq!(
        too_long
            .check()
            .expect_err("longer than the pod's")
            .to_string(),
        "config field killGraceSec: 11 must be from 0 to terminationGracePeriodSec (10)"
    );
}

#[test]
fn a_mapped_gpu_type_is_the_node_selector_of_the_roles_with_gpus() {
    use std::collections::BTreeMap;
    let text = json!({
        "jobName": "typed", "image": "pytorch/pytorch", "gpuType": "V100",
        "taskRoles": [
            {"name": "ps", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 512, "command": "ps"},
            {"name": "worker", "taskNumber": 2, "cpuNumber": 4, "memoryMB": 8192,
             "gpuNumber": 2, "command": "train"}
        ]
    })
    .to_string();
    let labels = BTreeMap::from([("node.kubernetes.io/gpu-sku".to_string(), "v100".to_string())]);
    let mut config = ClusterConfig::default();
    config.gpus.types.insert(
        "V100".to_string(),
        pai_translate::gpus::GpuType {
            node_selector: labels.clone(),
            model: None,
        },
    );
    let framework = common::transform_with(&text, 1, config.clone()).expect("transforms");
    let selector = |role: usize| {
        framework.spec.task_roles[role]
            .task
            .pod
            .spec
            .as_ref()
            .expect("pod")
            .node_selector
            .clone()
    };
    assert_eq!(selector(0), None, "the ps asks for no GPU");
    assert_eq!(selector(1), Some(labels));
    common::assert_cluster_accepts(&framework);
    let annotations = framework
        .metadata
        .annotations
        .as_ref()
        .expect("annotations");
    assert_eq!(
        annotations
            .get(pai_contract::meta::ANNOTATION_GPU_TYPE)
            .map(String::as_str),
        Some("V100")
    );

    // Not mapped: no selector, and the submission says the type is not acted on.
    let spec = pai_translate::spec::JobSpec::parse(&text, pai_translate::spec::SpecFormat::Json)
        .expect("valid");
    let user = pai_translate::spec::UserName::parse("alice").expect("user");
    let mapped =
        pai_translate::place::check(&spec, &user, pai_translate::place::Place::Cluster(&config))
            .expect("placed");
    assert!(mapped.iter().all(|w| !w.contains("gpuType")), "{mapped:?}");
    let plain = ClusterConfig::default();
    let warnings =
        pai_translate::place::check(&spec, &user, pai_translate::place::Place::Cluster(&plain))
            .expect("placed");
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("gpuType: \"V100\" is not used")),
        "{warnings:?}"
    );
    let framework = common::transform(&text, 1).expect("transforms");
    assert!(framework.spec.task_roles.iter().all(|r| {
        r.task
            .pod
            .spec
            .as_ref()
            .expect("pod")
            .node_selector
            .is_none()
    }));
}
