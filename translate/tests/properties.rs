//! Property tests of validation and port allocation over generated jobs.

use crate::common;

use std::collections::HashSet;

use proptest::prelude::*;
use serde_json::{Value, json};

use pai_contract::PortPlan;
use pai_translate::config::ClusterConfig;
use pai_translate::ports::PortRange;

/// A port request: (count, explicit?).
type Req = (u16, bool);

fn job_strategy() -> impl Strategy<Value = Vec<(u32, Vec<Req>)>> {
    prop::collection::vec(
        (
            1u32..20,
            prop::collection::vec((1u16..5, any::<bool>()), 0..4),
        ),
        1..5,
    )
}

/// A valid job: role `r<i>`, labels `l<j>`, explicit ports in a band of their own.
fn build(roles: &[(u32, Vec<Req>)]) -> Value {
    let roles: Vec<Value> = roles
        .iter()
        .enumerate()
        .map(|(i, (tasks, reqs))| {
            let ports: Vec<Value> = reqs
                .iter()
                .enumerate()
                .map(|(j, (count, explicit))| {
                    let begin = if *explicit {
                        40000 + i * 100 + j * 10
                    } else {
                        0
                    };
                    json!({"label": format!("l{j}"), "beginAt": begin, "portNumber": count})
                })
                .collect();
            json!({"name": format!("r{i}"), "taskNumber": tasks, "cpuNumber": 1,
                   "memoryMB": 512, "command": "true", "portList": ports})
        })
        .collect();
    json!({"jobName": "prop", "image": "busybox", "taskRoles": roles})
}

fn config(begin: u16, len: u16) -> ClusterConfig {
    ClusterConfig {
        port_range: PortRange {
            begin,
            end: begin + len - 1,
        },
        ..ClusterConfig::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn allocation_keeps_every_invariant(
        roles in job_strategy(),
        begin in 20000u16..21000,
        len in 50u16..500,
        seed in any::<u64>(),
    ) {
        let spec = build(&roles);
        let text = spec.to_string();
        let framework = common::transform_with(&text, seed, config(begin, len)).expect("valid job");
        let again = common::transform_with(&text, seed, config(begin, len)).expect("valid job");
        prop_assert_eq!(&framework, &again, "same seed, same ports");

        let mut random_ports_of_job = Vec::new();
        for (i, (_, reqs)) in roles.iter().enumerate() {
            let pod = framework.spec.task_roles[i].task.pod.spec.as_ref().expect("pod");
            let ports: Vec<u16> = pod.containers[0].ports.as_ref().expect("ports").iter()
                .map(|p| u16::try_from(p.container_port).expect("u16")).collect();
            let distinct: HashSet<u16> = ports.iter().copied().collect();
            prop_assert_eq!(distinct.len(), ports.len(), "no duplicate port in a pod");

            let env = common::main_env(&framework, i);
            let plan: PortPlan = common::get(&env, "PAI_CONTAINER_HOST_PORT_LIST")
                .expect("plan var").parse().expect("plan parses");
            prop_assert_eq!(plan.all_ports().collect::<Vec<_>>(), ports.clone(), "env and containerPorts agree");

            for (j, (count, explicit)) in reqs.iter().enumerate() {
                let got = plan.get(&format!("l{j}")).expect("label present");
                prop_assert_eq!(got.len(), usize::from(*count));
                if *explicit {
                    let first = u16::try_from(40000 + i * 100 + j * 10).expect("u16");
                    prop_assert_eq!(got.to_vec(), (first..first + count).collect::<Vec<_>>(), "beginAt honoured");
                } else {
                    for p in got {
                        prop_assert!((begin..=begin + len - 1).contains(p), "{} outside the range", p);
                        random_ports_of_job.push(*p);
                    }
                }
            }
            for label in ["http", "ssh"] {
                let p = plan.get(label).expect("implicit port");
                prop_assert_eq!(p.len(), 1);
                prop_assert!(p[0] >= 1024);
                random_ports_of_job.push(p[0]);
            }
        }
        // The range always had room for the whole job here, so no two pods share a port.
        let distinct: HashSet<u16> = random_ports_of_job.iter().copied().collect();
        prop_assert_eq!(distinct.len(), random_ports_of_job.len());
    }

    #[test]
    fn a_small_range_still_gives_each_pod_distinct_ports(roles in job_strategy(), seed in any::<u64>()) {
        // 20 ports: enough for any one pod (at most 4 × 4 + 2), rarely for the whole job.
        let text = build(&roles).to_string();
        let framework = common::transform_with(&text, seed, config(30000, 20)).expect("fits per pod");
        for role in &framework.spec.task_roles {
            let ports = role.task.pod.spec.as_ref().expect("pod").containers[0].ports.clone().expect("ports");
            let distinct: HashSet<i32> = ports.iter().map(|p| p.container_port).collect();
            prop_assert_eq!(distinct.len(), ports.len());
        }
    }

    #[test]
    fn one_broken_field_gives_one_error_at_its_path(
        roles in job_strategy(),
        pick in any::<prop::sample::Index>(),
        field in prop::sample::select(vec![
            ("taskNumber", json!(0)), ("cpuNumber", json!(0)), ("memoryMB", json!(0)),
            ("gpuNumber", json!(-2)), ("command", json!("")), ("name", json!("a b")),
            ("shmMB", json!(513)), ("minFailedTaskCount", json!(0)),
        ]),
    ) {
        let mut spec = build(&roles);
        let i = pick.index(roles.len());
        spec["taskRoles"][i][field.0] = field.1.clone();
        let err = common::transform(&spec.to_string(), 1).expect_err("broken");
        prop_assert_eq!(err.0.len(), 1, "{:?}", err);
        prop_assert_eq!(&err.0[0].path, &format!("taskRoles[{i}].{}", field.0));
    }

    #[test]
    fn arbitrary_documents_never_panic(doc in arb_json()) {
        let _ = common::transform(&doc.to_string(), 1);
    }
}

/// JSON documents shaped a little like specs, so they get past the first checks.
fn arb_json() -> impl Strategy<Value = Value> {
    let key = prop::sample::select(vec![
        "jobName",
        "image",
        "taskRoles",
        "name",
        "taskNumber",
        "cpuNumber",
        "memoryMB",
        "portList",
        "label",
        "beginAt",
        "portNumber",
        "command",
        "jobEnvs",
        "shmMB",
        "x",
    ]);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-5i64..70000).prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        "[a-zA-Z0-9_.~ $-]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(key.clone(), inner, 0..8).prop_map(|m| Value::Object(
                m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
            )),
        ]
    })
}
