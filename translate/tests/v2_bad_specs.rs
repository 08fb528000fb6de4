//! Bad protocol v2 documents: each refused with every broken rule at once, each naming
//! its field path and the rule; and what OpenPAI accepted but is not done here, said.

use crate::common;

use serde_json::{Value, json};

use pai_translate::spec::{JobSpec, SpecFormat};

/// A small valid v2 job, as JSON.
fn base() -> Value {
    json!({
        "protocolVersion": 2,
        "name": "v2_job",
        "type": "job",
        "parameters": {"lr": 0.01},
        "prerequisites": [
            {"name": "img", "type": "dockerimage", "uri": "busybox"}
        ],
        "taskRoles": {
            "worker": {
                "instances": 2,
                "dockerImage": "img",
                "resourcePerInstance": {"cpu": 1, "memoryMB": 1024, "gpu": 0},
                "commands": ["echo <% $parameters.lr %>"]
            }
        }
    })
}

fn errors(v: &Value) -> Vec<String> {
    match JobSpec::parse(&v.to_string(), SpecFormat::Json) {
        Ok(_) => Vec::new(),
        Err(e) => e.iter().map(|e| e.to_string()).collect(),
    }
}

fn with(edit: impl FnOnce(&mut Value)) -> Value {
    let mut v = base();
    edit(&mut v);
    v
}

#[test]
fn the_base_job_is_valid_and_rendered() {
    let spec = JobSpec::parse(&base().to_string(), SpecFormat::Json).expect("valid");
    assert_eq!(spec.roles()[0].command(), "echo 0.01");
    assert_eq!(spec.roles()[0].task_number(), 2);
    assert!(spec.notes().is_empty(), "{:?}", spec.notes());
}

#[test]
fn every_broken_rule_is_named_at_once() {
    let v = with(|v| {
        v["name"] = json!("has space");
        v["type"] = json!("service");
        v["jobRetryCount"] = json!(-1);
        v["taskRoles"]["worker"]["dockerImage"] = json!("nope");
        v["taskRoles"]["worker"]["instances"] = json!(0);
        v["taskRoles"]["worker"]["resourcePerInstance"]["memory"] = json!(5);
        v["taskRoles"]["worker"]["commands"] = json!([]);
        v["taskRoles"]["1bad"] = json!({});
    });
    let got = errors(&v);
    for want in [
        "name: \"has space\" breaks ^[a-zA-Z0-9_-]+$ (at most 255 characters)",
        "type: must be \"job\", got \"service\"",
        "jobRetryCount: must be an integer ≥ 0, got -1",
        "taskRoles.1bad: a role name starts with a letter or '_' (^[a-zA-Z_][a-zA-Z0-9_]*$)",
        "taskRoles.worker.instances: must be an integer from 1 to 10000, got 0",
        "taskRoles.worker.dockerImage: names no dockerimage prerequisite: \"nope\"",
        "taskRoles.worker.resourcePerInstance.memory: unknown field, did you mean \"memoryMB\"?",
        "taskRoles.worker.commands: must list at least one command",
    ] {
        assert!(
            got.iter().any(|g| g == want),
            "missing {want:?} in {got:#?}"
        );
    }
}

#[test]
fn each_rule_of_the_protocol() {
    let cases: Vec<(Value, &str)> = vec![
        (
            with(|v| v["protocolVersion"] = json!(3)),
            "protocolVersion: must be 2 (OpenPAI's job protocol v2), got 3",
        ),
        (
            with(|v| v["extras"] = json!({"hivedScheduler": {"jobPriorityClass": "crit"}})),
            "extras.hivedScheduler.jobPriorityClass: \"crit\" is none of OpenPAI's job priority classes: prod, test, oppo",
        ),
        (
            with(|v| v["extras"] = json!({"hivedScheduler": {"jobPriorityClass": 100}})),
            "extras.hivedScheduler.jobPriorityClass: must be one of prod, test, oppo (OpenPAI's job priority classes), got",
        ),
        (
            with(|v| {
                v.as_object_mut().unwrap().remove("name");
            }),
            "name: is required",
        ),
        (
            with(|v| v["taskRoles"] = json!({})),
            "taskRoles: must name at least one role",
        ),
        (
            with(|v| v["prerequisites"][0]["type"] = json!("tarball")),
            "prerequisites[0].type: is required: one of script, output, data, dockerimage",
        ),
        (
            with(|v| {
                v["prerequisites"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("uri")
                    .map(drop)
                    .unwrap_or(())
            }),
            "prerequisites[0].uri: is required",
        ),
        (
            with(|v| {
                v["prerequisites"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "img", "type": "dockerimage", "uri": "x"}))
            }),
            "prerequisites[1].name: duplicate dockerimage prerequisite \"img\"",
        ),
        (
            with(|v| v["taskRoles"]["worker"]["completion"] = json!({"minSucceededInstances": -2})),
            "taskRoles.worker.completion.minSucceededInstances: must be an integer ≥ -1, got -2",
        ),
        (
            with(|v| v["taskRoles"]["worker"]["extraContainerOptions"] = json!({"shmMB": 2048})),
            "taskRoles.worker.extraContainerOptions.shmMB: must be at most resourcePerInstance.memoryMB (1024), got 2048",
        ),
        (
            with(|v| {
                v["taskRoles"]["worker"]["resourcePerInstance"]["ports"] = json!({"bad-label": 1})
            }),
            "taskRoles.worker.resourcePerInstance.ports.bad-label:",
        ),
        (
            with(|v| v["taskRoles"]["worker"]["commands"] = json!(["echo <% #section %>"])),
            "taskRoles.worker.commands: \"<% #section %>\" is not a template OpenPAI renders",
        ),
        (
            with(|v| v["taskRoles"]["worker"]["commands"] = json!(["printf '<%s>'"])),
            "is not a template OpenPAI renders",
        ),
        (
            with(|v| v["defaults"] = json!({"deployment": "prod"})),
            "defaults.deployment: names no deployment: \"prod\"",
        ),
        (
            with(|v| v["defaults"] = json!({"virtualCluster": "my vc!"})),
            "defaults.virtualCluster: \"my vc!\" is not a virtual cluster's name",
        ),
        (
            with(|v| {
                v["deployments"] =
                    json!([{"name": "d", "taskRoles": {"worker": {"preCommands": []}}}])
            }),
            "deployments[0].taskRoles.worker.preCommands: must list at least one command",
        ),
        (
            with(|v| {
                v["extras"] = json!({"com.microsoft.pai.runtimeplugin": [{"parameters": {}}]})
            }),
            "extras.com.microsoft.pai.runtimeplugin[0].plugin: is required",
        ),
        (
            with(
                |v| v["extras"] = json!({"com.microsoft.pai.runtimeplugin": [{"plugin": "cmd", "failurePolicy": "retry"}]}),
            ),
            "extras.com.microsoft.pai.runtimeplugin[0].failurePolicy: must be fail or ignore, got \"retry\"",
        ),
        (
            with(|v| v["extras"] = json!({"gangAllocation": "no"})),
            "extras.gangAllocation: must be true or false, got string",
        ),
        (
            with(|v| v["secrets"] = json!("hunter2")),
            "secrets: must be an object, got string",
        ),
        (
            with(|v| {
                v["taskRoles"]["worker"]["instances"] = json!(6000);
                v["taskRoles"]["other"] = v["taskRoles"]["worker"].clone();
            }),
            "taskRoles: the job has 12000 tasks; FrameworkController runs at most 10000 in one Framework",
        ),
        (
            with(|v| {
                v["prerequisites"][0]["auth"] =
                    json!({"username": "u", "password": "<% $secrets.pw %>"});
            }),
            "prerequisites[0].auth.password: names a secret the job's secrets do not hold",
        ),
    ];
    let mut failures = Vec::new();
    for (v, want) in &cases {
        let got = errors(v);
        if !got.iter().any(|g| g.starts_with(want) || g.contains(want)) {
            failures.push(format!("want {want:?}, got {got:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn what_openpai_accepted_and_is_not_done_is_a_warning() {
    let v = with(|v| {
        v["taskRoles"]["worker"]["taskRetryCount"] = json!(3);
        v["taskRoles"]["worker"]["completion"] =
            json!({"minFailedInstances": 3, "minSucceededTaskCount": 1});
        v["taskRoles"]["worker"]["resourcePerInstance"]["ports"] = json!({"unused": 0});
        v["taskRoles"]["worker"]["extraContainerOptions"] = json!({"infiniband": true});
        v["taskRoles"]["worker"]["commands"] =
            json!(["echo <% $parameters.missing %> <% $secrets.none %>"]);
        v["defaults"] = json!({"virtualCluster": "default", "color": "red"});
        v["deployments"] =
            json!([{"name": "unused", "taskRoles": {"worker": {"preCommands": ["x"]}}}]);
        v["extras"] = json!({
            "hivedScheduler": {"jobPriorityClass": "oppo", "taskRoles": {"worker": {"skuType": "K80"}}},
            "com.microsoft.pai.runtimeplugin": [{"plugin": "git"}, {"plugin": "ssh", "parameters": {"jobssh": false}}],
        });
    });
    let spec = JobSpec::parse(&v.to_string(), SpecFormat::Json).expect("accepted");
    let notes = spec.notes().join("\n");
    for want in [
        "taskRoles.worker.taskRetryCount: 3 is not used",
        "taskRoles.worker.completion.minFailedInstances: 3 is more than instances (2) and can never be reached",
        "taskRoles.worker.completion.minSucceededTaskCount: v1's name, read as minSucceededInstances",
        "taskRoles.worker.resourcePerInstance.ports.unused: 0 ports asked for",
        "taskRoles.worker.extraContainerOptions.infiniband: no InfiniBand device",
        "<% $parameters.missing %> names nothing",
        "<% $secrets.none %> names no secret",
        "defaults.color: not used",
        "deployments[0]: deployment \"unused\" is not applied",
        "extras.hivedScheduler.taskRoles: HiveD's placement hints are not used",
        "the git plugin is not run here",
        "jobssh is false",
    ] {
        assert!(notes.contains(want), "missing {want:?} in\n{notes}");
    }
    assert!(!notes.contains("jobPriorityClass"), "{notes}");
    assert_eq!(
        spec.priority(),
        Some(pai_contract::priority::JobPriority::Oppo)
    );
    let completion = spec.roles()[0].completion();
    assert_eq!(
        (completion.min_failed, completion.min_succeeded),
        (None, Some(1))
    );
    // The names that name nothing stay in the command as OpenPAI leaves them.
    assert_eq!(
        spec.roles()[0].command(),
        "echo <% $parameters.missing %> <% $secrets.none %>"
    );
}

#[test]
fn deployments_wrap_the_commands_and_roles_keep_their_order() {
    let text = "protocolVersion: 2\nname: d\ntype: job\nprerequisites:\n  - {name: a, type: dockerimage, uri: busybox}\n  - {name: b, type: dockerimage, uri: alpine}\ndefaults: {deployment: prod}\ndeployments:\n  - name: prod\n    taskRoles:\n      zeta:\n        preCommands: [\"echo pre\"]\n        postCommands: [\"echo post\"]\ntaskRoles:\n  zeta:\n    dockerImage: a\n    resourcePerInstance: {cpu: 1, memoryMB: 100, gpu: 0}\n    commands: [\"  echo main  \"]\n  alpha:\n    dockerImage: b\n    resourcePerInstance: {cpu: 1, memoryMB: 100, gpu: 0}\n    commands: [\"true\"]\n";
    let spec = JobSpec::parse(text, SpecFormat::Yaml).expect("valid");
    let names: Vec<&str> = spec.roles().iter().map(|r| r.name().as_str()).collect();
    assert_eq!(names, ["zeta", "alpha"], "roles in the document's order");
    assert_eq!(spec.roles()[0].command(), "echo pre\necho main\necho post");
    assert_eq!(spec.roles()[0].image_or(spec.image()), "busybox");
    assert_eq!(spec.roles()[1].image_or(spec.image()), "alpine");
    // OpenPAI's default /dev/shm, capped at the task's memory.
    assert_eq!(spec.roles()[0].resources().shm_mb, 100);
}

#[test]
fn a_v1_spec_is_read_as_before() {
    let spec = JobSpec::parse(&common::base_job().to_string(), SpecFormat::Json).expect("v1");
    assert_eq!(spec.protocol(), pai_translate::spec::Protocol::V1);
}
