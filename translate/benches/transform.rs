//! `cargo bench -p pai-translate --bench transform`: time of spec text → Framework
//! (parse, validate, allocate ports, build the Framework) and of rendering it as JSON.
//! Each case runs a warm-up, then times every iteration on its own and reports
//! percentiles as a Markdown table, and records them under `benchmarks/results/`
//! ([`pai_test_support::bench_results`]), from which BENCHMARKS.md's tables are made.

use std::hint::black_box;
use std::time::{Duration, Instant};

use pai_test_support::bench_results::Run;
use pai_translate::config::ClusterConfig;
use pai_translate::ports::Seed;
use pai_translate::spec::{JobSpec, SpecFormat, UserName};
use pai_translate::transform::{Submission, Transformer};

fn job(roles: usize, tasks_per_role: usize) -> String {
    let roles: Vec<serde_json::Value> = (0..roles)
        .map(|i| {
            serde_json::json!({
                "name": format!("role{i}"), "taskNumber": tasks_per_role, "cpuNumber": 4,
                "memoryMB": 8192, "gpuNumber": 1,
                "portList": [{"label": "main", "beginAt": 0, "portNumber": 2}],
                "command": "python train.py --rank $PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"
            })
        })
        .collect();
    serde_json::json!({"jobName": "bench", "image": "pytorch/pytorch", "taskRoles": roles,
                       "jobEnvs": {"EPOCHS": 3}})
    .to_string()
}

/// The same job as [`job`] in OpenPAI's protocol v2, with a parameter its commands name.
fn job_v2(roles: usize, tasks_per_role: usize) -> String {
    let roles: serde_json::Map<String, serde_json::Value> = (0..roles)
        .map(|i| {
            (
                format!("role{i}"),
                serde_json::json!({
                    "instances": tasks_per_role, "dockerImage": "image",
                    "resourcePerInstance": {"cpu": 4, "memoryMB": 8192, "gpu": 1,
                        "ports": {"main": 2}},
                    "commands": ["python train.py --epochs <% $parameters.epochs %> --rank $PAI_TASK_INDEX"]
                }),
            )
        })
        .collect();
    serde_json::json!({"protocolVersion": 2, "name": "bench", "type": "job",
        "parameters": {"epochs": 3},
        "prerequisites": [{"name": "image", "type": "dockerimage", "uri": "pytorch/pytorch"}],
        "taskRoles": roles})
    .to_string()
}

/// `json` as YAML.
fn yaml(json: &str) -> String {
    let value: serde_json::Value = serde_json::from_str(json).expect("json");
    serde_saphyr::to_string(&value).expect("yaml")
}

/// Times `f` for `case`'s step `what`, prints its row and records its percentiles.
fn measure(run: &mut Run, case: &str, what: &str, iterations: usize, mut f: impl FnMut()) {
    for _ in 0..iterations / 10 + 1 {
        f();
    }
    let mut times: Vec<Duration> = (0..iterations)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    let pct = |p: f64| times[((times.len() - 1) as f64 * p) as usize];
    let figures = [
        ("min", micros(times[0])),
        ("median", micros(pct(0.5))),
        ("p90", micros(pct(0.9))),
        ("p99", micros(pct(0.99))),
    ];
    println!(
        "| {case}: {what} | {iterations} | {:.1} | {:.1} | {:.1} | {:.1} |",
        figures[0].1, figures[1].1, figures[2].1, figures[3].1,
    );
    for (stat, value) in figures {
        run.record(case, &format!("{what}: {stat}"), value, "µs");
    }
    run.record(case, &format!("{what}: iterations"), iterations as f64, "");
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: run once, quickly.
    let quick = !std::env::args().any(|a| a == "--bench");
    let n = |full: usize| if quick { 3 } else { full };
    let tf = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/tensorflow-ps-worker.json"
    ))
    .expect("example");
    let cases = [
        ("TensorFlow example (2 roles, 4 tasks)", tf, n(20_000)),
        ("1,000 tasks in 2 roles", job(2, 500), n(20_000)),
        ("1,000 tasks in 50 roles", job(50, 20), n(2_000)),
        // Protocol v2 beside v1, the same jobs (#37).
        ("v2: 1,000 tasks in 2 roles", job_v2(2, 500), n(20_000)),
        ("v2: 1,000 tasks in 50 roles", job_v2(50, 20), n(2_000)),
        (
            "v1 YAML: 1,000 tasks in 2 roles",
            yaml(&job(2, 500)),
            n(20_000),
        ),
        (
            "v2 YAML: 1,000 tasks in 2 roles",
            yaml(&job_v2(2, 500)),
            n(20_000),
        ),
    ];
    let user = UserName::parse("alice").expect("user");
    let transformer = Transformer::new(ClusterConfig::default());
    let mut run = Run::new("pai-translate", "transform");

    println!("| case | iterations | min µs | median µs | p90 µs | p99 µs |");
    println!("|---|---|---|---|---|---|");
    for (name, text, iterations) in &cases {
        let transform = || {
            let format = SpecFormat::detect(text);
            let spec = JobSpec::parse(text, format).expect("valid");
            transformer
                .transform(
                    Submission {
                        user: &user,
                        spec: &spec,
                        spec_text: text,
                        format,
                    },
                    Seed::Fixed(1),
                )
                .expect("transforms")
        };
        measure(&mut run, name, "text → Framework", *iterations, || {
            black_box(transform());
        });
        let framework = transform();
        measure(&mut run, name, "Framework → JSON", *iterations, || {
            black_box(serde_json::to_vec(&framework).expect("json"));
        });
        let size = serde_json::to_vec(&framework).expect("json").len();
        println!("| {name}: Framework JSON size | | {size} bytes | | | |");
        run.record(name, "Framework JSON size", size as f64, "B");
    }

    // The job view (GET of a job, each watch line, each listed job) of the largest
    // Framework FrameworkController takes: 10,000 tasks, every one running with its
    // address, as its status would say.
    let text = job(2, 5_000);
    let spec = JobSpec::parse(&text, SpecFormat::Json).expect("valid");
    let framework = transformer
        .transform(
            Submission {
                user: &user,
                spec: &spec,
                spec_text: &text,
                format: SpecFormat::Json,
            },
            Seed::Fixed(1),
        )
        .expect("transforms");
    let framework = running(framework);
    let name = "10,000 tasks in 2 roles, all running";
    measure(&mut run, name, "job view", n(200), || {
        black_box(pai_api::status::job_view(
            &framework,
            "/api/v1/user/alice/jobs/bench",
        ));
    });
    measure(&mut run, name, "job view → JSON", n(200), || {
        let view = pai_api::status::job_view(&framework, "/api/v1/user/alice/jobs/bench");
        black_box(serde_json::to_vec(&view).expect("json"));
    });
    run.write();
}

/// `framework` with the status FrameworkController gives it once every task runs.
fn running(framework: pai_contract::framework::Framework) -> pai_contract::framework::Framework {
    let mut value = serde_json::to_value(&framework).expect("json");
    let roles: Vec<serde_json::Value> = framework
        .spec
        .task_roles
        .iter()
        .map(|role| {
            let tasks: Vec<serde_json::Value> = (0..role.task_number)
                .map(|i| {
                    serde_json::json!({
                        "index": i, "state": "AttemptRunning",
                        "startTime": "2026-11-22T10:00:00Z",
                        "transitionTime": "2026-11-22T10:00:01Z",
                        "attemptStatus": {
                            "id": 0, "startTime": "2026-11-22T10:00:00Z",
                            "runTime": "2026-11-22T10:00:05Z",
                            "instanceUID": format!("0_{i:08x}-0000-4000-8000-{i:012x}"),
                            "podName": format!("bench-{}-{i}", role.name),
                            "podUID": format!("{i:08x}-0000-4000-8000-{i:012x}"),
                            "podIP": format!("10.{}.{}.{}", i / 65536, (i / 256) % 256, i % 256),
                            "podHostIP": format!("192.0.2.{}", i % 200),
                            "podNodeName": format!("node-{}", i % 200),
                        }
                    })
                })
                .collect();
            serde_json::json!({"name": role.name, "instanceUID": "role-uid", "taskStatuses": tasks})
        })
        .collect();
    value["status"] = serde_json::json!({
        "startTime": "2026-11-22T10:00:00Z", "runTime": "2026-11-22T10:00:05Z",
        "state": "AttemptRunning", "transitionTime": "2026-11-22T10:00:05Z",
        "retryPolicyStatus": {"totalRetriedCount": 0, "accountableRetriedCount": 0},
        "attemptStatus": {
            "id": 0, "startTime": "2026-11-22T10:00:00Z", "runTime": "2026-11-22T10:00:05Z",
            "instanceUID": "0_attempt", "configMapName": "bench-attempt",
            "taskRoleStatuses": roles,
        }
    });
    serde_json::from_value(value).expect("a Framework with its status")
}
