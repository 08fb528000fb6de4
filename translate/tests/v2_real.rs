//! OpenPAI's job protocol v2 with the job files people published: every file in
//! `tests/fixtures/v2/` (each names its repository, commit and path in its first line)
//! is read and translated here, and what each becomes is compared with what OpenPAI's
//! rest-server makes of it (microsoft/pai `src/rest-server/src/models/v2/job/k8s.js`
//! and `runtime-env.js`, transcribed below as rules over the raw document) on the
//! fields both produce, and with what its runtime's plugins do (microsoft/openpai-runtime
//! `src/plugins`).

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use pai_contract::Framework;
use pai_translate::config::ClusterConfig;
use pai_translate::gang::Engine;
use pai_translate::spec::{JobSpec, SpecFormat};
use serde_json::Value;

fn fixtures() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v2");
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .expect("fixtures")
        .map(|e| e.expect("entry").path())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).expect("read"))
        })
        .collect();
    out.sort();
    out
}

fn fixture(name: &str) -> String {
    fixtures()
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no fixture {name}"))
        .1
}

fn transformed(name: &str) -> (JobSpec, Framework) {
    let text = fixture(name);
    let spec = JobSpec::parse(&text, SpecFormat::Yaml).unwrap_or_else(|e| panic!("{name}: {e}"));
    let framework = common::transform_with(&text, 7, storages_config())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    (spec, framework)
}

/// The init container's `USER_CMD` of role `role` (spec order), as the process reads it.
fn user_cmd(framework: &Framework, role: usize) -> String {
    let env = common::init_env(framework, role);
    common::get(&env, "USER_CMD").expect("USER_CMD").to_string()
}

fn role_index(framework: &Framework, pai_name: &str) -> usize {
    framework
        .spec
        .task_roles
        .iter()
        .position(|r| r.pai_name() == pai_name)
        .unwrap_or_else(|| panic!("no role {pai_name}"))
}

/// What a file's header says it is refused for (here, and by OpenPAI at its commit),
/// if it is: `# Refused (…): <words of the error>`.
fn refusal(text: &str) -> Option<&str> {
    let line = text.lines().nth(2)?.strip_prefix("# Refused (")?;
    line.split_once("): ").map(|(_, why)| why)
}

#[test]
fn every_published_file_is_accepted_or_refused_naming_the_field() {
    let files = fixtures();
    assert!(files.len() >= 120, "{} fixtures", files.len());
    let mut accepted = 0;
    for (name, text) in files {
        assert!(
            text.starts_with("# Source: microsoft/")
                && text.lines().next().unwrap().contains(" @ "),
            "{name} cites its repository and commit"
        );
        match (JobSpec::parse(&text, SpecFormat::Yaml), refusal(&text)) {
            (Ok(spec), None) => {
                assert_eq!(spec.protocol(), pai_translate::spec::Protocol::V2, "{name}");
                common::transform_with(&text, 1, storages_config())
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                accepted += 1;
            }
            (Err(e), Some(why)) => {
                assert!(e.to_string().contains(why), "{name}: {e}")
            }
            (Ok(_), Some(_)) => panic!("{name} should be refused"),
            (Err(e), None) => panic!("{name} refused: {e}"),
        }
    }
    assert!(accepted >= 110, "{accepted} accepted");
}

/// What OpenPAI's rest-server makes of role `role` of `doc` (k8s.js `generateTaskRole`,
/// `generateFrameworkDescription`): JavaScript's `x ? x : default` for the counts.
struct Reference {
    task_number: i64,
    min_failed: i64,
    min_succeeded: i64,
    image: String,
    cpu: i64,
    memory: String,
    gpu: i64,
    shm_mb: i64,
    ports: BTreeMap<String, i64>,
    job_retries: i64,
}

fn truthy(v: Option<&Value>) -> Option<i64> {
    v.and_then(Value::as_i64).filter(|n| *n != 0)
}

fn reference(doc: &Value, role: &str) -> Reference {
    let r = &doc["taskRoles"][role];
    let task_number = r["instances"].as_i64().unwrap_or(1);
    let image_name = r["dockerImage"].as_str().unwrap();
    let image = doc["prerequisites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "dockerimage" && p["name"] == image_name)
        .unwrap()["uri"]
        .as_str()
        .unwrap()
        .to_string();
    let res = &r["resourcePerInstance"];
    let mut ports: BTreeMap<String, i64> = res["ports"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_i64().unwrap()))
                .collect()
        })
        .unwrap_or_default();
    for label in ["ssh", "http"] {
        ports.entry(label.to_string()).or_insert(1);
    }
    // A count above the role's tasks is never reached: FrameworkController treats it as
    // off, which is how it is written here (with a warning).
    let reachable = |n: i64| if n > task_number { -1 } else { n };
    let count = |key: &str| truthy(r.get("completion").and_then(|c| c.get(key)));
    Reference {
        task_number,
        min_failed: reachable(count("minFailedInstances").unwrap_or(1)),
        min_succeeded: reachable(count("minSucceededInstances").unwrap_or(task_number)),
        image,
        cpu: res["cpu"].as_i64().unwrap(),
        memory: format!("{}Mi", res["memoryMB"].as_i64().unwrap()),
        gpu: res["gpu"].as_i64().unwrap(),
        shm_mb: truthy(r.get("extraContainerOptions").and_then(|o| o.get("shmMB"))).unwrap_or(512),
        ports,
        job_retries: doc["jobRetryCount"].as_i64().unwrap_or(0),
    }
}

#[test]
fn each_role_is_what_openpais_conversion_makes_of_it() {
    let mut compared = 0;
    for (name, text) in fixtures() {
        if refusal(&text).is_some() {
            continue;
        }
        let doc: Value = serde_saphyr::from_str(&text).unwrap();
        let framework = common::transform_with(&text, 3, storages_config()).unwrap();
        assert_eq!(
            i64::from(framework.spec.retry_policy.max_retry_count),
            reference(
                &doc,
                doc["taskRoles"].as_object().unwrap().keys().next().unwrap()
            )
            .job_retries,
            "{name}: jobRetryCount"
        );
        for role in doc["taskRoles"].as_object().unwrap().keys() {
            let want = reference(&doc, role);
            let got = &framework.spec.task_roles[role_index(&framework, role)];
            let what = format!("{name}, role {role}");
            assert_eq!(i64::from(got.task_number), want.task_number, "{what}");
            let policy = &got.framework_attempt_completion_policy;
            assert_eq!(
                i64::from(policy.min_failed_task_count),
                want.min_failed,
                "{what}"
            );
            assert_eq!(
                i64::from(policy.min_succeeded_task_count),
                want.min_succeeded,
                "{what}"
            );
            let pod = got.task.pod.spec.as_ref().unwrap();
            let main = &pod.containers[0];
            assert_eq!(main.image.as_deref(), Some(want.image.as_str()), "{what}");
            let limits = main.resources.as_ref().unwrap().limits.as_ref().unwrap();
            assert_eq!(limits["cpu"].0, want.cpu.to_string(), "{what}");
            assert_eq!(limits["memory"].0, want.memory, "{what}");
            assert_eq!(
                limits
                    .get("nvidia.com/gpu")
                    .map_or(0, |q| q.0.parse::<i64>().unwrap()),
                want.gpu,
                "{what}"
            );
            let memory_mb: i64 = want.memory.trim_end_matches("Mi").parse().unwrap();
            let shm = pod
                .volumes
                .as_ref()
                .unwrap()
                .iter()
                .find(|v| v.name == "dshm")
                .and_then(|v| v.empty_dir.as_ref())
                .and_then(|e| e.size_limit.as_ref())
                .unwrap();
            // OpenPAI asks 512 MiB of /dev/shm even of a smaller task; here it is capped
            // at the task's memory.
            assert_eq!(shm.0, format!("{}Mi", want.shm_mb.min(memory_mb)), "{what}");
            let env = common::main_env(&framework, role_index(&framework, role));
            for (label, count) in &want.ports {
                let var = format!("PAI_CONTAINER_HOST_{label}_PORT_LIST");
                let ports = common::get(&env, &var).unwrap_or_else(|| panic!("{what}: {var}"));
                assert_eq!(ports.split(',').count() as i64, *count, "{what}: {var}");
            }
            compared += 1;
        }
    }
    assert!(compared >= 130, "{compared} roles compared");
}

#[test]
fn templates_are_rendered_as_openpai_renders_them() {
    // Parameters, folded YAML and the marketplace's Horovod command.
    let (_, framework) =
        transformed("pai__marketplace-v2_horovod-pytorch-synthetic-benchmark.yaml");
    let master = user_cmd(&framework, role_index(&framework, "master"));
    // After the ssh plugin's sshbarrier, which this role asks for.
    let barrier = master.find("ssh -o BatchMode=yes").expect(&master);
    let command = master
        .find("sleep 10\nmpirun --allow-run-as-root")
        .expect(&master);
    assert!(barrier < command, "{master}");
    assert!(
        master.contains("-x NCCL_DEBUG=INFO -x NCCL_SOCKET_IFNAME=eth0"),
        "{master}"
    );
    assert!(
        master.contains("--model resnet50\n--batch-size 64")
            || master.contains("--model resnet50 --batch-size 64"),
        "{master}"
    );
    assert!(!master.contains("<%"), "{master}");
    // `$data.uri[0]` and `$data.name` in the cmd plugin's callbacks, run before the
    // commands; its taskSucceeds callback after them, only once they succeeded.
    let (_, framework) = transformed("runtime__test_cmd_with_callbacks_test_job.yaml");
    let cmd = user_cmd(&framework, 0);
    let pre = cmd.find("wget -qO- https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz | tar xvz && mv cifar-10-batches-py data_cifar10").expect(&cmd);
    let main = cmd.find("echo \"Commands start ...\"").expect(&cmd);
    let post = cmd.find("echo \"PostCommands start ...\"").expect(&cmd);
    assert!(pre < main && main < post, "{cmd}");
    // The same plugin declared as a prerequisite the role names.
    let (_, framework) = transformed("runtime__test_cmd_with_prerequisites_test_job.yaml");
    let cmd = user_cmd(&framework, 0);
    assert!(
        cmd.contains("data_cifar10") && cmd.contains("PostCommands start"),
        "{cmd}"
    );
}

#[test]
fn completion_counts_mean_what_openpai_meant() {
    // minSucceededInstances -1: the role never ends the job by its successes.
    let (_, framework) =
        transformed("pai__examples_tensorflow_cifar10_cifar10_vgg16_tf_gpu_distributed.yaml");
    let policy = &framework.spec.task_roles[0].framework_attempt_completion_policy;
    assert_eq!(
        (
            policy.min_failed_task_count,
            policy.min_succeeded_task_count
        ),
        (1, -1)
    );
    // Not given: the role's instances (a role whose tasks all succeeded ends the job).
    let (_, framework) =
        transformed("pai__marketplace-v2_horovod-pytorch-synthetic-benchmark.yaml");
    let worker = &framework.spec.task_roles[role_index(&framework, "worker")];
    assert_eq!(
        worker
            .framework_attempt_completion_policy
            .min_succeeded_task_count,
        worker.task_number
    );
}

#[test]
fn the_ssh_plugin_keeps_a_secret_key_out_of_the_framework() {
    let text = fixture("runtime__test_ssh_test_job.yaml");
    let (spec, framework) = transformed("runtime__test_ssh_test_job.yaml");
    let key = spec.secrets().expect("secrets").strings()[0].to_string();
    assert!(key.starts_with("ssh-rsa "));
    let json = serde_json::to_string(&framework).unwrap();
    assert!(!json.contains(&key), "the key is in the Framework");
    // The task's runtime renders it from the job's secrets.
    let env = common::main_env(&framework, 0);
    assert_eq!(
        common::get(&env, "PAI_SSH_PUB_KEY"),
        Some("<% $secrets.userssh %>")
    );
    // The spec kept in the Framework is the submitted one with the secrets masked.
    let (stored, _) = framework.spec_text().unwrap();
    assert!(stored.contains("secrets: \"******\""), "{stored}");
    assert_eq!(
        stored.replace("secrets: \"******\"\n", ""),
        text.replace(&format!("secrets:\n  userssh: {key}\n"), ""),
    );
}

#[test]
fn sshbarrier_waits_for_every_task_in_the_roles_that_ask() {
    let (_, framework) = transformed("runtime__test_sshbarrier_test_job.yaml");
    let master = user_cmd(&framework, role_index(&framework, "master"));
    let worker = user_cmd(&framework, role_index(&framework, "worker"));
    assert!(
        master.contains("PAI_TASK_ROLE_LIST") && master.contains("ssh -o BatchMode=yes"),
        "{master}"
    );
    assert!(master.contains("within 30 minutes"), "{master}");
    assert!(!worker.contains("BatchMode"), "{worker}");
}

#[test]
fn gang_allocation_off_leaves_the_pods_ungrouped() {
    let mut config = storages_config();
    config.gang.engine = Engine::Coscheduling;
    let grouped = common::transform_with(
        &fixture("pai__examples_tensorflow_cifar10_cifar10_vgg16_tf_cpu.yaml"),
        1,
        config.clone(),
    )
    .unwrap();
    assert!(pai_translate::gang::group(&grouped).is_some());
    let text = fixture("pai__examples_mnist_500_tasks_yaml_CPU_500Task_MNIST.yaml");
    let spec = JobSpec::parse(&text, SpecFormat::Yaml).unwrap();
    assert!(!spec.gang_allocation());
    let framework = common::transform_with(&text, 1, config).unwrap();
    assert!(pai_translate::gang::group(&framework).is_none());
    assert!(
        pai_translate::warnings::spec_warnings(&spec)
            .iter()
            .any(|w| w.starts_with("extras.gangAllocation: false")),
    );
}

#[test]
fn what_is_not_done_is_said_by_name() {
    let notes = |name: &str| {
        let spec = JobSpec::parse(&fixture(name), SpecFormat::Yaml).unwrap();
        pai_translate::warnings::spec_warnings(&spec)
    };
    let w = notes("runtime__test_gang_ssh_conflict.yaml");
    assert!(
        w.iter()
            .any(|w| w.contains("tensorboard plugin is not run")),
        "{w:?}"
    );
    let w = notes("pai__examples_Distributed-example_cifar10-single-mul-DDP-nccl.yaml");
    assert!(
        w.iter().any(|w| w.starts_with("extras.hivedScheduler")),
        "{w:?}"
    );
    let w = notes("pai__marketplace-v2_tensorflow-cifar10.yaml");
    assert!(
        w.iter()
            .any(|w| w.starts_with("prerequisites[3]: data prerequisite \"cifar10\"")),
        "{w:?}"
    );
    // Mounted, so nothing to say of it.
    let w = notes("pai__examples_mnist_500_tasks_yaml_CPU_500Task_MNIST.yaml");
    assert_eq!(
        w.iter().filter(|w| w.contains("teamwise_storage")).count(),
        0,
        "{w:?}"
    );
}

/// The storages the published files name, as an operator would have them: the first
/// shared, the second each user's own and read-only.
fn storages_config() -> ClusterConfig {
    let storage =
        |name: &str, share: bool, read_only: bool| pai_translate::storages::StorageConfig {
            name: name.to_string(),
            claim_name: None,
            path: None,
            share,
            read_only,
            users: Vec::new(),
            groups: Vec::new(),
            default: false,
        };
    ClusterConfig {
        storages: vec![
            storage("nfs-storage", true, false),
            storage("confignfs-data", false, true),
            storage("confignfs", true, false),
        ],
        ..ClusterConfig::default()
    }
}

/// The published files that mount team storage (the `teamwise_storage` plugin's
/// `storageConfigNames`) get OpenPAI's volumes and mounts. Its rules, transcribed from
/// microsoft/pai a95d9420e `src/rest-server/src/models/v2/job/k8s.js` (`put`, lines
/// 1043-1102; `generateTaskRole`, 598-616): the plugin's names are `extras.storages`
/// when that is not given; each storage is a volume `<name>-volume` of claim `<name>`,
/// read-only where the storage is, mounted in the main container at `/mnt/<name>`, with
/// the user's name as sub-path where the storage is not shared.
#[test]
fn published_team_storages_become_openpais_claims_and_mounts() {
    let config = storages_config();
    let mut seen = 0;
    for (name, text) in fixtures() {
        // A few published files do not parse (refused as OpenPAI refused them).
        let Ok(doc) = serde_saphyr::from_str::<Value>(&text) else {
            continue;
        };
        let plugins = doc["extras"]["com.microsoft.pai.runtimeplugin"]
            .as_array()
            .cloned();
        let Some(names) = plugins.into_iter().flatten().find_map(|p| {
            (p["plugin"] == "teamwise_storage")
                .then(|| p["parameters"]["storageConfigNames"].clone())
        }) else {
            continue;
        };
        seen += 1;
        let framework = common::transform_with(&text, 1, config.clone())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        common::assert_cluster_accepts(&framework);
        for role in &framework.spec.task_roles {
            let pod = role.task.pod.spec.as_ref().expect("pod");
            let main = pod
                .containers
                .iter()
                .find(|c| c.name == "main")
                .expect("main");
            for storage in names.as_array().into_iter().flatten() {
                let storage = storage.as_str().expect("a name");
                let configured = config
                    .storages
                    .iter()
                    .find(|s| s.name == storage)
                    .expect("configured");
                let volume = pod
                    .volumes
                    .iter()
                    .flatten()
                    .find(|v| v.name == format!("{storage}-volume"))
                    .unwrap_or_else(|| panic!("{name}: no volume for {storage}"));
                let claim = volume.persistent_volume_claim.as_ref().expect("a claim");
                assert_eq!(claim.claim_name, storage, "{name}");
                assert_eq!(
                    claim.read_only,
                    configured.read_only.then_some(true),
                    "{name}"
                );
                let mount = main
                    .volume_mounts
                    .iter()
                    .flatten()
                    .find(|m| m.name == volume.name)
                    .unwrap_or_else(|| panic!("{name}: {storage} is not mounted"));
                assert_eq!(mount.mount_path, format!("/mnt/{storage}"), "{name}");
                assert_eq!(
                    mount.sub_path.as_deref(),
                    (!configured.share).then_some("alice"),
                    "{name}"
                );
                // The init container does not mount it (OpenPAI's did not either).
                let init = pod.init_containers.iter().flatten().next().expect("init");
                assert!(
                    init.volume_mounts
                        .iter()
                        .flatten()
                        .all(|m| m.name != volume.name)
                );
            }
        }
    }
    assert_eq!(seen, 8, "the eight published files with team storage");

    // A storage the operator does not have refuses the job, naming the field.
    let text = fixture("pai__examples_mnist_500_tasks_yaml_CPU_500Task_MNIST.yaml");
    let errors = common::transform(&text, 1).expect_err("no storage confignfs here");
    assert_eq!(errors.0[0].path, "extras.storages[0].name");
    assert!(
        errors.0[0].rule.contains("storage confignfs is not found"),
        "{errors}"
    );
}

#[test]
fn tasks_get_the_v2_variables() {
    let (_, framework) =
        transformed("pai__marketplace-v2_horovod-pytorch-synthetic-benchmark.yaml");
    let env = common::main_env(&framework, role_index(&framework, "master"));
    for (name, value) in [
        ("PAI_FRAMEWORK_NAME", "alice~horovod_pytorch"),
        ("PAI_JOB_NAME", "alice~horovod_pytorch"),
        ("PAI_USERNAME", "alice"),
        ("PAI_VIRTUAL_CLUSTER", "default"),
        ("PAI_TASKS_NUM", "2"),
        ("PAI_JOB_TASK_COUNT", "2"),
        ("PAI_TASK_ROLES_NUM", "2"),
        ("PAI_JOB_TASK_ROLE_COUNT", "2"),
        ("PAI_JOB_TASK_ROLE_LIST", "master,worker"),
        ("PAI_TASK_ROLE_LIST", "master,worker"),
        // v2's form: gpu,cpu,memoryMB,shmMB.
        ("PAI_RESOURCE_master", "4,16,16384,512"),
        ("PAI_MIN_SUCCEEDED_TASK_COUNT_master", "1"),
    ] {
        assert_eq!(common::get(&env, name), Some(value), "{name}");
    }
}

/// The published files that name a `jobPriorityClass` (25 of them: 16 `prod`, 7 `test`,
/// 2 `oppo`): each accepted one runs as its class, whatever the engine, its pods naming
/// the cluster's class as the config maps it (Kueue's Workload class too, Volcano's
/// leave to preempt all but prod), and the spec is not warned about it.
#[test]
fn published_priority_classes_become_the_clusters_classes() {
    use pai_contract::priority::{JobPriority, LABEL};
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for engine in [Engine::None, Engine::Kueue, Engine::Volcano] {
        let mut config = storages_config();
        config.gang.engine = engine;
        config.gang.default_queue = Some("vc1".into());
        config.priority_classes.prod = "high".into();
        for (name, text) in fixtures() {
            let Ok(doc) = serde_saphyr::from_str::<Value>(&text) else {
                continue;
            };
            let Some(class) = doc["extras"]["hivedScheduler"]["jobPriorityClass"].as_str() else {
                continue;
            };
            if engine == Engine::None {
                *seen.entry(class.to_string()).or_default() += 1;
            }
            let Ok(spec) = JobSpec::parse(&text, SpecFormat::Yaml) else {
                assert!(refusal(&text).is_some(), "{name}");
                continue;
            };
            let class: JobPriority = class.parse().expect("one of OpenPAI's");
            assert_eq!(spec.priority(), Some(class), "{name}");
            let warned = pai_translate::warnings::spec_warnings(&spec);
            assert!(
                !warned.iter().any(|w| w.contains("jobPriorityClass")),
                "{name}: {warned:?}"
            );
            let framework = common::transform_with(&text, 7, config.clone())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(JobPriority::of(&framework), Some(class), "{name}");
            let cluster = if class == JobPriority::Prod {
                "high"
            } else {
                class.as_str()
            };
            for role in &framework.spec.task_roles {
                let pod = &role.task.pod;
                let spec = pod.spec.as_ref().expect("pod spec");
                assert_eq!(spec.priority_class_name.as_deref(), Some(cluster), "{name}");
                let meta = pod.metadata.as_ref().expect("pod metadata");
                let labels = meta.labels.clone().unwrap_or_default();
                assert_eq!(labels.get(LABEL).map(String::as_str), Some(class.as_str()));
                let kueue = labels.get(pai_translate::priority::KUEUE_PRIORITY_LABEL);
                let grouped = labels.contains_key(pai_translate::gang::KUEUE_QUEUE_LABEL);
                assert_eq!(
                    kueue.is_some(),
                    grouped && engine == Engine::Kueue,
                    "{name}"
                );
                let preemptable = meta
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(pai_translate::priority::VOLCANO_PREEMPTABLE_ANNOTATION));
                assert_eq!(
                    preemptable.is_some(),
                    engine == Engine::Volcano && class != JobPriority::Prod,
                    "{name}"
                );
            }
            if let Some(group) = pai_translate::gang::group(&framework)
                && engine == Engine::Volcano
            {
                assert_eq!(group.object["spec"]["priorityClassName"], cluster, "{name}");
            }
        }
    }
    let named: Vec<(&str, usize)> = seen.iter().map(|(c, n)| (c.as_str(), *n)).collect();
    assert_eq!(named, [("oppo", 2), ("prod", 16), ("test", 7)]);
}
