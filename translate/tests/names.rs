//! FrameworkController's rules over generated specs and user names: every valid job's
//! Framework is one the CRD stores as it is, its pods' names fit 63, a job the rules
//! cannot fit is refused naming the rule, and two (user, job) pairs never share a
//! Framework.

use crate::common;

use std::collections::HashMap;

use proptest::prelude::*;
use serde_json::{Value, json};

use pai_job::names::{MAX_TASKS_PER_FRAMEWORK, MAX_TASKS_PER_ROLE, max_task_role_name};
use pai_translate::config::ClusterConfig;
use pai_translate::ports::Seed;
use pai_translate::spec::names::framework_name;
use pai_translate::spec::{JobName, JobSpec, SpecFormat, UserName};
use pai_translate::transform::{Submission, Transformer};

/// OpenPAI's user and job names: `^[A-Za-z0-9\-._~]+$`.
const OPENPAI_NAME: &str = "[A-Za-z0-9._~-]{1,40}";

fn spec(job: &str, roles: &[(String, u32)]) -> Value {
    let roles: Vec<Value> = roles
        .iter()
        .map(|(name, tasks)| {
            json!({"name": name, "taskNumber": tasks, "cpuNumber": 1, "memoryMB": 512,
                   "command": "true"})
        })
        .collect();
    json!({"jobName": job, "image": "busybox", "taskRoles": roles})
}

fn roles_strategy() -> impl Strategy<Value = Vec<(String, u32)>> {
    prop::collection::vec(
        (
            "[A-Za-z0-9_]{1,32}",
            prop_oneof![1u32..20, 1u32..=MAX_TASKS_PER_ROLE],
        ),
        1..4,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn valid_jobs_fit_the_crd_and_others_are_refused_by_rule(
        user in OPENPAI_NAME,
        job in OPENPAI_NAME,
        roles in roles_strategy(),
    ) {
        let text = spec(&job, &roles).to_string();
        let user = UserName::parse(&user).expect("OpenPAI's user names are valid");
        match JobSpec::parse(&text, SpecFormat::Json) {
            Ok(parsed) => {
                let framework = Transformer::new(ClusterConfig::default())
                    .transform(Submission { user: &user, spec: &parsed, spec_text: &text, format: SpecFormat::Json }, Seed::Fixed(1))
                    .expect("a valid spec transforms");
                common::assert_cluster_accepts(&framework);
            }
            Err(errors) => {
                // Only the rules FrameworkController imposes can refuse these specs.
                let total: u32 = roles.iter().map(|(_, n)| n).sum();
                for error in &errors.0 {
                    let by_rule = error.rule.contains("pod names")
                        || error.rule.contains("task-role name")
                        || error.rule.contains("letter or digit")
                        || error.rule.contains("duplicate role name")
                        || (total > MAX_TASKS_PER_FRAMEWORK && error.rule.contains("runs at most 10000"));
                    prop_assert!(by_rule, "unexpected refusal: {} {}", error.path, error.rule);
                }
            }
        }
    }

    #[test]
    fn two_pairs_never_share_a_framework(
        a in (OPENPAI_NAME, OPENPAI_NAME),
        b in (OPENPAI_NAME, OPENPAI_NAME),
    ) {
        prop_assume!(a != b);
        let name = |(u, j): &(String, String)| {
            framework_name(&UserName::parse(u).expect("user"), &JobName::parse(j).expect("job"))
        };
        prop_assert_ne!(name(&a), name(&b));
    }
}

#[test]
fn names_that_used_to_meet_are_distinct_frameworks() {
    let pairs = [
        ("alice", "a.b"),
        ("alice", "a_b"),
        ("alice", "a-b"),
        ("Alice", "a.b"),
        ("a~b", "c"),
        ("a", "b~c"),
    ];
    let mut seen = HashMap::new();
    for (user, job) in pairs {
        let name = framework_name(
            &UserName::parse(user).expect("user"),
            &JobName::parse(job).expect("job"),
        );
        assert!(pai_job::names::is_controller_name(&name), "{name}");
        if let Some(other) = seen.insert(name.clone(), (user, job)) {
            panic!("{user}/{job} and {other:?} share {name}");
        }
    }
}

#[test]
fn the_longest_role_name_that_fits_fits_exactly() {
    for tasks in [1, 10, 11, 100, 101, 1_000, 10_000] {
        let room = max_task_role_name(tasks);
        let fits = spec("job", &[("r".repeat(room), tasks)]).to_string();
        let framework = common::transform(&fits, 1).expect("fits");
        common::assert_cluster_accepts(&framework);

        let long = spec("job", &[("r".repeat(room + 1), tasks)]).to_string();
        let errors = common::transform(&long, 1).expect_err("one character too many");
        assert_eq!(errors.0.len(), 1, "{errors}");
        assert_eq!(errors.0[0].path, "taskRoles[0].name");
        assert!(
            errors.0[0].rule.contains(&format!("at most {room} fit"))
                && errors.0[0].rule.contains("pod names"),
            "{}",
            errors.0[0].rule
        );
    }
}

#[test]
fn task_limits_are_frameworkcontrollers() {
    let per_role = spec("job", &[("w".into(), MAX_TASKS_PER_ROLE + 1)]).to_string();
    let errors = common::transform(&per_role, 1).expect_err("too many in a role");
    assert_eq!(errors.0[0].path, "taskRoles[0].taskNumber");
    assert!(errors.0[0].rule.contains("10000"), "{errors}");

    let half = MAX_TASKS_PER_FRAMEWORK / 2;
    let in_all = spec(
        "job",
        &[("a".into(), half), ("b".into(), half), ("c".into(), 1)],
    )
    .to_string();
    let errors = common::transform(&in_all, 1).expect_err("too many in all");
    assert_eq!(errors.0.len(), 1, "{errors}");
    assert_eq!(errors.0[0].path, "taskRoles");
    assert!(
        errors.0[0]
            .rule
            .contains("FrameworkController runs at most 10000 in one Framework"),
        "{errors}"
    );

    let exactly = spec("job", &[("a".into(), half), ("b".into(), half)]).to_string();
    common::assert_cluster_accepts(&common::transform(&exactly, 1).expect("at the limit"));
}
