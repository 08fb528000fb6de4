//! `cargo bench -p pai-kube-runtime --bench env_size`: what a task's environment costs
//! as the job grows. For jobs of 100 to 10,000 tasks (a one-task chief and N − 1 workers,
//! ports `http`, `ssh`, `master`), the runtime's variables for one worker: how many, the
//! largest, their bytes before and after the fit to Linux's limits, the files beside
//! them, the time to derive all of it, and whether `execve` of `/bin/true` accepts the
//! exported environment (E2BIG would say not), and how long `ssh -G` takes to resolve
//! the last alias of the job's ssh configuration. What it prints it also records under
//! `benchmarks/results/` ([`pai_test_support::bench_results`]).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::time::Instant;

use pai_barrier::{PeerTable, RolePeers};
use pai_contract::PortPlan;
use pai_contract::env as names;
use pai_contract::training::{MAX_DYNAMIC_ENV_BYTES, Selection, variable_bytes};
use pai_kube_runtime::budget;
use pai_kube_runtime::dynamic_env::{Me, Variable, dynamic_env};
use pai_kube_runtime::training_env::training;

fn role(name: &str, tasks: usize, base: u16) -> RolePeers {
    let mut ports = PortPlan::default();
    for (i, label) in ["http", "ssh", "master"].into_iter().enumerate() {
        ports.push(label, vec![base + i as u16]).expect("label");
    }
    RolePeers {
        name: name.to_string(),
        kube_name: name.to_string(),
        env: BTreeMap::from([(
            names::resource(name),
            "cpu_count:8,memMB:32768,shmMB:8192,gpu_count:8".to_string(),
        )]),
        ports,
        task_ports: Vec::new(),
        // Addresses as long as a pod network's get (10.244.x.y).
        addresses: (0..tasks)
            .map(|i| IpAddr::from([10, 244, (i / 250) as u8, (i % 250) as u8 + 1]))
            .collect(),
    }
}

fn main() {
    let mut results = pai_test_support::bench_results::Run::new("pai-kube-runtime", "env_size");
    println!(
        "{:>6} {:>6} {:>9} {:>34} {:>9} {:>9} {:>6} {:>9} {:>9} {:>9} {:>8} {:>7} {:>9}",
        "tasks",
        "vars",
        "all KiB",
        "largest",
        "exp. KiB",
        "exp. vars",
        "held",
        "peer-env",
        "tf_config",
        "ssh cfg",
        "derive",
        "execve",
        "ssh -G"
    );
    for tasks in [100usize, 1_000, 5_000, 10_000] {
        let peers = PeerTable {
            framework: "fw".into(),
            attempt: 0,
            attempt_instance_uid: None,
            roles: vec![role("chief", 1, 20000), role("worker", tasks - 1, 21000)],
            not_before: None,
        };
        let started = Instant::now();
        let vars = dynamic_env(
            &peers,
            &Me {
                kube_role: "worker".into(),
                index: 7,
            },
        )
        .expect("env");
        let t = training(
            &peers,
            1,
            7,
            &Selection::all(),
            Path::new("/usr/local/pai"),
            None,
        );
        let all: Vec<Variable> = vars.into_iter().chain(t.vars.iter().cloned()).collect();
        let peer_env = budget::peer_env(&all);
        let total: usize = all.iter().map(|v| variable_bytes(&v.name, &v.value)).sum();
        let largest_bytes = all
            .iter()
            .map(|v| variable_bytes(&v.name, &v.value))
            .max()
            .expect("one");
        let largest = all
            .iter()
            .max_by_key(|v| variable_bytes(&v.name, &v.value))
            .map(|v| format!("{} {} B", v.name, variable_bytes(&v.name, &v.value)))
            .expect("one");
        let count = all.len();
        let fitted = budget::fit(all, &budget::PeerSizes::default(), MAX_DYNAMIC_ENV_BYTES);
        let derive = started.elapsed();
        let execve = std::process::Command::new("/bin/true")
            .envs(fitted.exported.iter().map(|v| (&v.name, &v.value)))
            .status()
            .map(|s| if s.success() { "ok" } else { "failed" })
            .unwrap_or_else(|e| {
                if e.raw_os_error() == Some(7) {
                    "E2BIG"
                } else {
                    "error"
                }
            });
        // ssh reads the whole configuration on every start: what the last alias costs.
        let config = std::env::temp_dir().join(format!("env-size-ssh-{}", std::process::id()));
        std::fs::write(&config, &t.ssh_config).expect("config");
        let ssh_started = Instant::now();
        let resolved = std::process::Command::new("ssh")
            .arg("-F")
            .arg(&config)
            .args(["-G", &format!("worker-{}", tasks - 2)])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).contains("port 21001"));
        let ssh_g = ssh_started.elapsed();
        let _ = std::fs::remove_file(&config);
        let case = format!("{tasks} tasks");
        if resolved == Some(true) {
            results.record(&case, "ssh -G", ssh_g.as_secs_f64() * 1000.0, "ms");
        }
        let ssh_g = match resolved {
            Some(true) => format!("{:.1}ms", ssh_g.as_secs_f64() * 1000.0),
            Some(false) => "wrong".to_string(),
            None => "no ssh".to_string(),
        };
        println!(
            "{tasks:>6} {count:>6} {:>9.1} {:>34} {:>9.1} {:>9} {:>6} {:>8}K {:>8}K {:>8}K {:>6.1}ms {execve:>7} {ssh_g:>9}",
            total as f64 / 1024.0,
            largest,
            fitted.bytes() as f64 / 1024.0,
            fitted.exported.len(),
            fitted.held.len(),
            peer_env.len() / 1024,
            t.tf_config.as_ref().map_or(0, String::len) / 1024,
            t.ssh_config.len() / 1024,
            derive.as_secs_f64() * 1000.0,
        );
        let kib = |bytes: usize| bytes as f64 / 1024.0;
        for (metric, value, unit) in [
            ("variables", count as f64, ""),
            ("all", kib(total), "KiB"),
            ("largest", largest_bytes as f64, "B"),
            ("exported", kib(fitted.bytes()), "KiB"),
            ("exported variables", fitted.exported.len() as f64, ""),
            ("held", fitted.held.len() as f64, ""),
            ("peer-env.sh", kib(peer_env.len()), "KiB"),
            (
                "tf_config.json",
                kib(t.tf_config.as_ref().map_or(0, String::len)),
                "KiB",
            ),
            ("ssh config", kib(t.ssh_config.len()), "KiB"),
            ("derive", derive.as_secs_f64() * 1000.0, "ms"),
            (
                "execve accepts the exported set",
                f64::from(u8::from(execve == "ok")),
                "",
            ),
        ] {
            results.record(&case, metric, value, unit);
        }
    }
    results.write();
}
