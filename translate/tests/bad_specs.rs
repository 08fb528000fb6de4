//! Bad specs: each must be rejected with exactly the listed errors (field path and rule).

use crate::common;

use serde_json::{Value, json};

use pai_translate::config::ClusterConfig;
use pai_translate::ports::PortRange;
use pai_translate::spec::SpecErrors;

/// What a case expects of one error.
enum Rule {
    Exact(&'static str),
    Prefix(&'static str),
}

struct Case {
    what: &'static str,
    text: String,
    errors: Vec<(&'static str, Rule)>,
}

/// The base job with `edit` applied.
fn job(edit: impl FnOnce(&mut Value)) -> String {
    let mut v = common::base_job();
    edit(&mut v);
    v.to_string()
}

fn role(v: &mut Value, i: usize) -> &mut Value {
    &mut v["taskRoles"][i]
}

fn remove(v: &mut Value, key: &str) {
    v.as_object_mut().expect("object").remove(key);
}

fn case(what: &'static str, text: String, errors: Vec<(&'static str, Rule)>) -> Case {
    Case { what, text, errors }
}

fn cases() -> Vec<Case> {
    use Rule::{Exact, Prefix};
    vec![
        case(
            "missing jobName",
            job(|v| remove(v, "jobName")),
            vec![("jobName", Exact("is required"))],
        ),
        case(
            "jobName not a string",
            job(|v| v["jobName"] = json!(5)),
            vec![("jobName", Exact("must be a string, got integer"))],
        ),
        case(
            "space in jobName",
            job(|v| v["jobName"] = json!("my job")),
            vec![(
                "jobName",
                Exact(
                    "must match ^[A-Za-z0-9\\-._~]+$ (letters, digits, '-', '.', '_', '~'); ' ' is not allowed",
                ),
            )],
        ),
        case(
            "jobName too long",
            job(|v| v["jobName"] = json!("j".repeat(257))),
            vec![(
                "jobName",
                Exact("a job name is 257 characters; at most 256"),
            )],
        ),
        case(
            "missing image",
            job(|v| remove(v, "image")),
            vec![("image", Exact("is required"))],
        ),
        case(
            "extras that are not an object",
            job(|v| v["extras"] = json!(["a"])),
            vec![("extras", Exact("must be an object, got list"))],
        ),
        case(
            // A space is refused where images are pulled (`place`); a line break anywhere.
            "image with a line break",
            job(|v| v["image"] = json!("busy\nbox")),
            vec![(
                "image",
                Exact("\"busy\\nbox\" is not an image reference: it holds a control character"),
            )],
        ),
        case(
            "no roles",
            job(|v| v["taskRoles"] = json!([])),
            vec![("taskRoles", Exact("must list at least one role"))],
        ),
        case(
            "roles not a list",
            job(|v| v["taskRoles"] = json!({})),
            vec![("taskRoles", Exact("must be a list, got object"))],
        ),
        case(
            "role not an object",
            job(|v| v["taskRoles"] = json!(["ps"])),
            vec![("taskRoles[0]", Exact("must be an object, got string"))],
        ),
        case(
            "space in role name",
            job(|v| role(v, 0)["name"] = json!("ps 1")),
            vec![(
                "taskRoles[0].name",
                Exact(
                    r"must match ^[A-Za-z0-9\-._~]+$ (letters, digits, '-', '.', '_', '~'); ' ' is not allowed",
                ),
            )],
        ),
        case(
            "duplicate role",
            job(|v| role(v, 1)["name"] = json!("ps")),
            vec![(
                "taskRoles[1].name",
                Exact("duplicate role name \"ps\" (also taskRoles[0])"),
            )],
        ),
        case(
            "roles equal after normalisation",
            job(|v| {
                role(v, 0)["name"] = json!("Worker_a");
                role(v, 1)["name"] = json!("worker_A");
            }),
            vec![(
                "taskRoles[1].name",
                Exact(
                    "\"worker_A\" and taskRoles[0].name \"Worker_a\" both become the task-role name \"workera\" (lower-case, without '_')",
                ),
            )],
        ),
        case(
            "zero tasks",
            job(|v| role(v, 0)["taskNumber"] = json!(0)),
            vec![(
                "taskRoles[0].taskNumber",
                Exact("must be an integer from 1 to 10000, got 0"),
            )],
        ),
        case(
            // A number written as a string is read as OpenPAI's validator read it; a
            // string that is no number is not.
            "task number as a word",
            job(|v| role(v, 0)["taskNumber"] = json!("two")),
            vec![(
                "taskRoles[0].taskNumber",
                Exact("must be an integer from 1 to 10000, got string"),
            )],
        ),
        case(
            "fractional task number",
            job(|v| role(v, 0)["taskNumber"] = json!(1.5)),
            vec![(
                "taskRoles[0].taskNumber",
                Exact("must be an integer from 1 to 10000, got 1.5"),
            )],
        ),
        case(
            "too many tasks",
            job(|v| {
                role(v, 0)["taskNumber"] = json!(6000);
                role(v, 1)["taskNumber"] = json!(6000);
            }),
            vec![(
                "taskRoles",
                Exact(
                    "the job has 12000 tasks; FrameworkController runs at most 10000 in one Framework",
                ),
            )],
        ),
        case(
            "too many tasks in a role",
            job(|v| role(v, 0)["taskNumber"] = json!(10001)),
            vec![(
                "taskRoles[0].taskNumber",
                Exact("must be an integer from 1 to 10000, got 10001"),
            )],
        ),
        case(
            "an invalid role and a duplicate name, both reported",
            job(|v| {
                role(v, 0)["taskNumber"] = json!(0);
                role(v, 1)["name"] = role(v, 0)["name"].clone();
            }),
            vec![
                (
                    "taskRoles[0].taskNumber",
                    Exact("must be an integer from 1 to 10000, got 0"),
                ),
                (
                    "taskRoles[1].name",
                    Exact("duplicate role name \"ps\" (also taskRoles[0])"),
                ),
            ],
        ),
        case(
            "missing command",
            job(|v| remove(role(v, 0), "command")),
            vec![("taskRoles[0].command", Exact("is required"))],
        ),
        case(
            "no memory",
            job(|v| role(v, 0)["memoryMB"] = json!(0)),
            vec![(
                "taskRoles[0].memoryMB",
                Exact("must be an integer ≥ 1, got 0"),
            )],
        ),
        case(
            "shm above memory",
            job(|v| role(v, 0)["shmMB"] = json!(2048)),
            vec![(
                "taskRoles[0].shmMB",
                Exact("must be at most memoryMB (1024), got 2048"),
            )],
        ),
        case(
            "negative gpus",
            job(|v| role(v, 0)["gpuNumber"] = json!(-1)),
            vec![(
                "taskRoles[0].gpuNumber",
                Exact("must be an integer ≥ 0, got -1"),
            )],
        ),
        case(
            "duplicate port label",
            job(|v| role(v, 1)["portList"] = json!([{"label": "ssh"}, {"label": "ssh"}])),
            vec![(
                "taskRoles[1].portList[1].label",
                Exact("duplicate label \"ssh\""),
            )],
        ),
        case(
            "privileged port",
            job(|v| role(v, 1)["portList"][0]["beginAt"] = json!(80)),
            vec![(
                "taskRoles[1].portList[0].beginAt",
                Exact("must be 0 (any port) or a port from 1024 to 65535, got 80"),
            )],
        ),
        case(
            "ports past 65535",
            job(|v| {
                role(v, 1)["portList"] = json!([{"label": "a", "beginAt": 65530, "portNumber": 10}])
            }),
            vec![(
                "taskRoles[1].portList[0].portNumber",
                Exact("ports 65530–65539 run past 65535"),
            )],
        ),
        case(
            "overlapping explicit ports",
            job(|v| {
                role(v, 1)["portList"] = json!([
                {"label": "a", "beginAt": 20000, "portNumber": 5},
                {"label": "b", "beginAt": 20004, "portNumber": 2}])
            }),
            vec![(
                "taskRoles[1].portList[1].beginAt",
                Exact("ports 20004–20005 overlap those of label \"a\" (20000–20004)"),
            )],
        ),
        case(
            "label starting with a digit",
            job(|v| role(v, 1)["portList"][0]["label"] = json!("1st")),
            vec![(
                "taskRoles[1].portList[0].label",
                Exact(
                    "\"1st\" must match ^[A-Za-z_][A-Za-z0-9_]*$, since it is part of variable names like PAI_PORT_LIST_<role>_0_<label>",
                ),
            )],
        ),
        case(
            "zero ports",
            job(|v| role(v, 1)["portList"][0]["portNumber"] = json!(0)),
            vec![(
                "taskRoles[1].portList[0].portNumber",
                Exact("must be an integer from 1 to 64512, got 0"),
            )],
        ),
        case(
            "blank command",
            job(|v| role(v, 0)["command"] = json!("  ")),
            vec![("taskRoles[0].command", Exact("must not be empty"))],
        ),
        case(
            "NUL in command",
            job(|v| role(v, 0)["command"] = json!("echo \u{0}")),
            vec![(
                "taskRoles[0].command",
                Exact("must not contain a NUL character"),
            )],
        ),
        case(
            "minFailedTaskCount above taskNumber",
            job(|v| role(v, 0)["minFailedTaskCount"] = json!(3)),
            vec![(
                "taskRoles[0].minFailedTaskCount",
                Exact("must be at most taskNumber (2), got 3"),
            )],
        ),
        case(
            "minFailedTaskCount -1 (never fail)",
            job(|v| role(v, 0)["minFailedTaskCount"] = json!(-1)),
            vec![(
                "taskRoles[0].minFailedTaskCount",
                Exact("must be an integer ≥ 1, got -1"),
            )],
        ),
        case(
            "minSucceededTaskCount 0",
            job(|v| role(v, 0)["minSucceededTaskCount"] = json!(0)),
            vec![(
                "taskRoles[0].minSucceededTaskCount",
                Exact("must be an integer ≥ 1, got 0"),
            )],
        ),
        case(
            "env name with a dash",
            job(|v| v["jobEnvs"] = json!({"MY-VAR": "x"})),
            vec![(
                "jobEnvs.MY-VAR",
                Exact("the name must be a shell identifier: ^[A-Za-z_][A-Za-z0-9_]*$"),
            )],
        ),
        case(
            "reserved env name",
            job(|v| v["jobEnvs"] = json!({"PAI_RUNTIME_ROOT": "/", "FC_TASK_INDEX": "0"})),
            vec![
                (
                    "jobEnvs.FC_TASK_INDEX",
                    Exact(
                        "the name is reserved: FrameworkController sets FC_* variables, and the runtime reads USER_CMD, KUBE_APISERVER_ADDRESS and its own settings (PAI_RUNTIME_*, …)",
                    ),
                ),
                (
                    "jobEnvs.PAI_RUNTIME_ROOT",
                    Exact(
                        "the name is reserved: FrameworkController sets FC_* variables, and the runtime reads USER_CMD, KUBE_APISERVER_ADDRESS and its own settings (PAI_RUNTIME_*, …)",
                    ),
                ),
            ],
        ),
        case(
            "env value an object",
            job(|v| v["jobEnvs"] = json!({"X": {"a": 1}})),
            vec![(
                "jobEnvs.X",
                Exact("must be a string, number or boolean, got object"),
            )],
        ),
        case(
            "retryCount below OpenPAI's -2",
            job(|v| v["retryCount"] = json!(-3)),
            vec![("retryCount", Exact("must be an integer ≥ -2, got -3"))],
        ),
        case(
            "legacy dataDir not a string",
            job(|v| v["dataDir"] = json!(3)),
            vec![("dataDir", Exact("must be a string, got integer"))],
        ),
        case(
            "typo at the top",
            job(|v| v["taskRole"] = json!([])),
            vec![(
                "taskRole",
                Exact("unknown field, did you mean \"taskRoles\"?"),
            )],
        ),
        case(
            "typo in a role is named",
            job(|v| {
                let r = role(v, 0);
                let mem = r["memoryMB"].take();
                remove(r, "memoryMB");
                r["memoryMb"] = mem;
            }),
            vec![(
                "taskRoles[0].memoryMb",
                Exact("unknown field, did you mean \"memoryMB\"?"),
            )],
        ),
        case(
            "unknown field far from any",
            job(|v| v["colour"] = json!("blue")),
            vec![(
                "colour",
                Exact(
                    "unknown field; known fields are jobName, image, taskRoles, codeDir, dataDir, outputDir, virtualCluster, retryCount, jobEnvs, killAllOnCompletedTaskNumber, gpuType, authFile, extras, frameworkEnv, dependsOn",
                ),
            )],
        ),
        case(
            "dependsOn: itself, twice, a bad state, a bad name, an unknown field",
            job(|v| {
                v["dependsOn"] = json!([
                    {"job": "job"},
                    {"job": "prep"},
                    {"job": "prep", "state": "FAILED"},
                    {"job": "train", "state": "done"},
                    {"job": "a b"},
                    {"job": "eval", "after": 3}
                ])
            }),
            vec![
                ("dependsOn[0].job", Exact("a job cannot wait for itself")),
                ("dependsOn[2].job", Exact("job \"prep\" is named twice")),
                (
                    "dependsOn[3].state",
                    Exact("\"done\" is not SUCCEEDED, FAILED or STOPPED"),
                ),
                ("dependsOn[4].job", Prefix("")),
                ("dependsOn[5].after", Prefix("unknown field")),
            ],
        ),
        case(
            "dependsOn names too many jobs",
            job(|v| {
                v["dependsOn"] = json!(
                    (0..17)
                        .map(|i| json!({"job": format!("j{i}")}))
                        .collect::<Vec<_>>()
                )
            }),
            vec![(
                "dependsOn",
                Exact("names 17 jobs; at most 16 may be waited for"),
            )],
        ),
        case(
            "frameworkEnv names an unknown part",
            job(|v| v["frameworkEnv"] = json!(["pytorch", "tensorfow", "pytorch", 3])),
            vec![
                (
                    "frameworkEnv[1]",
                    Exact(
                        "\"tensorfow\" is not one of tensorflow, pytorch, mpi, jax, xgboost (did you mean \"tensorflow\"?)",
                    ),
                ),
                ("frameworkEnv[2]", Exact("\"pytorch\" is listed twice")),
                (
                    "frameworkEnv[3]",
                    Exact(
                        "must be one of tensorflow, pytorch, mpi, jax, xgboost or {tensorflow: {portLabel: <label>}}, got integer",
                    ),
                ),
            ],
        ),
        case(
            "TF_CONFIG's port label is missing in a role",
            job(|v| v["frameworkEnv"] = json!([{"tensorflow": {"portLabel": "grpc"}}])),
            vec![
                (
                    "frameworkEnv",
                    Prefix(
                        "TF_CONFIG addresses every task by its port \"grpc\", and role \"ps\" has none",
                    ),
                ),
                (
                    "frameworkEnv",
                    Prefix(
                        "TF_CONFIG addresses every task by its port \"grpc\", and role \"worker\" has none",
                    ),
                ),
            ],
        ),
        case(
            "options for a part without any",
            job(|v| v["frameworkEnv"] = json!([{"mpi": {"slots": 2}}])),
            vec![(
                "frameworkEnv[0].mpi",
                Exact("mpi takes no options: write it as a plain string"),
            )],
        ),
        case(
            "not an object",
            "[1, 2]".to_string(),
            vec![("(spec)", Exact("must be an object, got list"))],
        ),
        case(
            "broken JSON",
            "{\"jobName\": ".to_string(),
            vec![("(spec)", Prefix("not valid JSON: "))],
        ),
        case(
            "broken YAML",
            "jobName: [a\n".to_string(),
            vec![("(spec)", Prefix("not valid YAML: "))],
        ),
        case(
            "pod names too long",
            job(|v| role(v, 1)["name"] = json!(format!("{}_x", "w".repeat(28)))),
            vec![(
                "taskRoles[1].name",
                Exact(
                    "its task-role name \"wwwwwwwwwwwwwwwwwwwwwwwwwwwwx\" is 29 characters; with taskNumber 2 at most 28 fit, since pod names (<32-character job id>-<role>-<index>) are at most 63: shorten the role name",
                ),
            )],
        ),
    ]
}

fn errors_of(text: &str) -> SpecErrors {
    match common::transform(text, 1) {
        Ok(_) => SpecErrors(Vec::new()),
        Err(e) => e,
    }
}

#[test]
fn every_bad_spec_names_the_field_and_the_rule() {
    let cases = cases();
    assert!(cases.len() >= 25);
    let mut failures = Vec::new();
    for case in &cases {
        let got = errors_of(&case.text);
        let matches = got.0.len() == case.errors.len()
            && got.0.iter().zip(&case.errors).all(|(e, (path, rule))| {
                e.path == *path
                    && match rule {
                        Rule::Exact(r) => e.rule == *r,
                        Rule::Prefix(r) => e.rule.starts_with(r),
                    }
            });
        if !matches {
            failures.push(format!("{}: got {:?}", case.what, got.0));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn all_errors_are_reported_at_once() {
    let text = job(|v| {
        v["jobName"] = json!("bad name");
        role(v, 0)["taskNumber"] = json!(0);
        role(v, 1)["portList"][0]["beginAt"] = json!(22);
        v["retryCount"] = json!("many");
    });
    let paths: Vec<String> = errors_of(&text).0.into_iter().map(|e| e.path).collect();
    assert_eq!(
        paths,
        [
            "jobName",
            "taskRoles[0].taskNumber",
            "taskRoles[1].portList[0].beginAt",
            "retryCount"
        ]
    );
}

#[test]
fn yaml_and_json_read_alike() {
    let yaml = "jobName: job\nimage: busybox\ntaskRoles:\n  - name: ps\n    taskNumber: 2\n    cpuNumber: 1\n    memoryMB: 1024\n    command: \"true\"\n  - name: worker\n    taskNumber: 2\n    cpuNumber: 1\n    memoryMB: 1024\n    command: \"true\"\n    portList: [{label: main, beginAt: 0, portNumber: 1}]\n";
    let from_yaml = common::transform(yaml, 3).expect("yaml");
    let from_json = common::transform(&common::base_job().to_string(), 3).expect("json");
    assert_eq!(from_yaml.spec, from_json.spec);
}

#[test]
fn an_impossible_port_request_names_the_role() {
    let text = job(|v| role(v, 1)["portList"][0]["portNumber"] = json!(5));
    let config = ClusterConfig {
        port_range: PortRange {
            begin: 30000,
            end: 30005,
        },
        ..ClusterConfig::default()
    };
    let err = common::transform_with(&text, 1, config).expect_err("6 ports cannot hold 7");
    assert_eq!(err.0.len(), 1);
    assert_eq!(err.0[0].path, "taskRoles[1].portList");
    assert_eq!(
        err.0[0].rule,
        "role \"worker\" needs 1 port(s) for label \"ssh\" but only 0 are free in the range 30000–30005"
    );
}

#[test]
fn legacy_fields_are_accepted() {
    let text = job(|v| {
        v["virtualCluster"] = json!("default");
        v["gpuType"] = json!("V100");
        v["authFile"] = json!("hdfs://auth");
        v["extras"] = json!({"anything": [1, 2]});
        v["dataDir"] = json!("hdfs://data");
    });
    let framework = common::transform(&text, 1).expect("legacy fields pass");
    let env = common::main_env(&framework, 0);
    assert_eq!(common::get(&env, "PAI_DATA_DIR"), Some("hdfs://data"));
    assert_eq!(common::get(&env, "PAI_OUTPUT_DIR"), Some(""));
}
