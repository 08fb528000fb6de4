//! What distributed-training programs read, derived from the peer table
//! ([`pai_contract::training`]): `TF_CONFIG`, PyTorch's and torchrun's variables, JAX's
//! coordinator, XGBoost's tracker, an MPI hostfile with Open MPI's variables, and the ssh
//! client configuration with one alias per task.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use pai_barrier::{Peer, PeerTable};
use pai_contract::env as names;
use pai_contract::training::{
    self as contract, JAX_PORT_LABEL, MASTER_PORT_LABEL, MPI_ALLOW_ROOT_VARS, MPI_HOSTFILE_VARS,
    Selection, TF_CONFIG, XGBOOST_PORT_LABEL, files, jax, pytorch, xgboost,
};

use crate::dynamic_env::{Class, Variable};

/// The variables and files for one task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Training {
    /// Defaults: a variable the container already has (the job's `jobEnvs`, the image)
    /// wins over these.
    pub vars: Vec<Variable>,
    /// `tf_config.json`: `TF_CONFIG`'s value.
    pub tf_config: Option<String>,
    /// `hostfile`.
    pub hostfile: Option<String>,
    /// `ssh/config`.
    pub ssh_config: String,
    /// Why a part asked for is missing or incomplete, one line each (logged).
    pub notes: Vec<String>,
}

/// Task `index` of role `role` (position in the table) and what it gets.
pub fn training(
    peers: &PeerTable,
    role: usize,
    index: u32,
    selection: &Selection,
    root: &Path,
    known_hosts: Option<&Path>,
) -> Training {
    let mut out = Training {
        vars: Vec::new(),
        tf_config: None,
        hostfile: None,
        ssh_config: ssh_config(peers, root, known_hosts),
        notes: Vec::new(),
    };
    if let Some(label) = &selection.tensorflow {
        let value = tf_config(peers, role, index, label, &mut out.notes);
        out.vars
            .push(Variable::new(TF_CONFIG, value.clone(), Class::List));
        out.tf_config = Some(value);
    }
    let numbering = Numbering::of(peers, role, index);
    if selection.pytorch {
        pytorch_vars(peers, &numbering, role, &mut out);
    }
    if selection.jax {
        jax_vars(peers, &numbering, &mut out);
    }
    if selection.xgboost {
        xgboost_vars(peers, &numbering, &mut out);
    }
    if selection.mpi {
        let hostfile = root.join(files::HOSTFILE).display().to_string();
        for name in MPI_HOSTFILE_VARS {
            out.vars
                .push(Variable::new(name, hostfile.clone(), Class::Own));
        }
        for name in MPI_ALLOW_ROOT_VARS {
            out.vars.push(Variable::new(name, "1", Class::Own));
        }
        out.hostfile = Some(mpi_hostfile(peers));
    }
    out
}

/// GPUs of each task of a role (its family's `PAI_RESOURCE_<role>`), at least 1: the
/// processes a task runs, one per GPU.
fn slots(peers: &PeerTable, role: usize) -> u32 {
    let role = &peers.roles[role];
    role.env
        .get(&names::resource(&role.name))
        .and_then(|v| names::resource_gpu_count(v))
        .unwrap_or(0)
        .max(1)
}

/// `<ip>:<port>` (`[<ip>]:<port>` for IPv6) of `peer`'s first port of `label`.
fn address(peer: &Peer<'_>, label: &str) -> Option<String> {
    let port = peer.ports.first(label)?;
    Some(std::net::SocketAddr::new(peer.ip, port).to_string())
}

fn tf_config(
    peers: &PeerTable,
    role: usize,
    index: u32,
    label: &str,
    notes: &mut Vec<String>,
) -> String {
    let mut cluster: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for r in &peers.roles {
        if contract::is_tf_evaluator(&r.name) {
            continue;
        }
        let mut addresses = Vec::with_capacity(r.len());
        for task in r.tasks() {
            match address(&task, label) {
                Some(a) => addresses.push(a),
                None => {
                    notes.push(format!(
                        "TF_CONFIG: role {} has no port labelled {label:?}; it is left out of the cluster",
                        r.name
                    ));
                    break;
                }
            }
        }
        if addresses.len() == r.len() {
            cluster.insert(r.name.as_str(), addresses);
        }
    }
    let value = serde_json::json!({
        "cluster": cluster,
        "task": {"type": peers.roles[role].name, "index": index},
    });
    value.to_string()
}

/// How a task is numbered among the job's processes, one per task, as PyTorch, JAX and
/// XGBoost number them: the leading role's tasks first, then every other role in spec
/// order, each by index.
struct Numbering {
    /// The leading role (PyTorch's master, JAX's coordinator, XGBoost's tracker).
    leader: usize,
    /// This task's number.
    rank: usize,
    /// Tasks in the job.
    world: usize,
}

impl Numbering {
    fn of(peers: &PeerTable, role: usize, index: u32) -> Self {
        let leader = contract::master_role(peers.roles.iter().map(|r| r.name.as_str()));
        let order = std::iter::once(leader).chain((0..peers.roles.len()).filter(|&r| r != leader));
        let mut world = 0usize;
        let mut rank = 0usize;
        for r in order {
            if r == role {
                rank = world + index as usize;
            }
            world += peers.roles[r].len();
        }
        Self {
            leader,
            rank,
            world,
        }
    }

    /// The leading role's task 0, with its port of `label`; where it has none, a note
    /// that what needs it (`unset`) is not set.
    fn leader_at<'a>(
        &self,
        peers: &'a PeerTable,
        label: &str,
        unset: &str,
        notes: &mut Vec<String>,
    ) -> Option<(Peer<'a>, u16)> {
        let task0 = peers.roles[self.leader].task(0)?;
        match task0.ports.first(label) {
            Some(port) => Some((task0, port)),
            None => {
                notes.push(format!(
                    "the leading role {} has no port labelled {label:?}; {unset} not set",
                    peers.roles[self.leader].name
                ));
                None
            }
        }
    }
}

fn own(name: &str, value: &str) -> Variable {
    Variable::new(name, value, Class::Own)
}

fn pytorch_vars(peers: &PeerTable, numbering: &Numbering, role: usize, out: &mut Training) {
    let world = numbering.world.to_string();
    let rank = numbering.rank.to_string();
    out.vars.extend([
        own(pytorch::WORLD_SIZE, &world),
        own(pytorch::RANK, &rank),
        own(pytorch::NODE_RANK, &rank),
        own(pytorch::PET_NNODES, &world),
        own(pytorch::PET_NODE_RANK, &rank),
        own(pytorch::PET_NPROC_PER_NODE, &slots(peers, role).to_string()),
    ]);
    let Some(task0) = peers.roles[numbering.leader].task(0) else {
        return;
    };
    let addr = task0.ip.to_string();
    out.vars.push(own(pytorch::MASTER_ADDR, &addr));
    out.vars.push(own(pytorch::PET_MASTER_ADDR, &addr));
    if let Some((_, port)) = numbering.leader_at(
        peers,
        MASTER_PORT_LABEL,
        "PyTorch's MASTER_PORT is",
        &mut out.notes,
    ) {
        out.vars.push(own(pytorch::MASTER_PORT, &port.to_string()));
        out.vars
            .push(own(pytorch::PET_MASTER_PORT, &port.to_string()));
    }
}

/// `JAX_COORDINATOR_ADDRESS` (which `jax.distributed.initialize` reads itself),
/// `JAX_NUM_PROCESSES` and `JAX_PROCESS_ID`.
fn jax_vars(peers: &PeerTable, numbering: &Numbering, out: &mut Training) {
    out.vars.extend([
        own(jax::NUM_PROCESSES, &numbering.world.to_string()),
        own(jax::PROCESS_ID, &numbering.rank.to_string()),
    ]);
    if let Some((task0, port)) = numbering.leader_at(
        peers,
        JAX_PORT_LABEL,
        "JAX_COORDINATOR_ADDRESS is",
        &mut out.notes,
    ) {
        let at = std::net::SocketAddr::new(task0.ip, port).to_string();
        out.vars.push(own(jax::COORDINATOR_ADDRESS, &at));
    }
}

/// `DMLC_TRACKER_URI`, `DMLC_TRACKER_PORT`, `DMLC_TASK_ID` and `DMLC_NUM_WORKER`.
fn xgboost_vars(peers: &PeerTable, numbering: &Numbering, out: &mut Training) {
    out.vars.extend([
        own(xgboost::TASK_ID, &numbering.rank.to_string()),
        own(xgboost::NUM_WORKER, &numbering.world.to_string()),
    ]);
    if let Some((task0, port)) = numbering.leader_at(
        peers,
        XGBOOST_PORT_LABEL,
        "XGBoost's DMLC_TRACKER_URI and DMLC_TRACKER_PORT are",
        &mut out.notes,
    ) {
        out.vars
            .push(own(xgboost::TRACKER_URI, &task0.ip.to_string()));
        out.vars.push(own(xgboost::TRACKER_PORT, &port.to_string()));
    }
}

/// `<alias> slots=<n>` for every task of every role but a launcher. Aliases, not
/// addresses: an alias also names the task's ssh port, and tasks sharing one address
/// (the embedded default) stay apart.
fn mpi_hostfile(peers: &PeerTable) -> String {
    let mut text = String::new();
    for (r, role) in peers.roles.iter().enumerate() {
        if !contract::is_mpi_host(&role.name) {
            continue;
        }
        let slots = slots(peers, r);
        for task in role.tasks() {
            let _ = writeln!(
                text,
                "{} slots={slots}",
                contract::ssh_alias(&role.name, task.index)
            );
        }
    }
    text
}

/// Aliases per `Host` line of the options every alias shares.
const ALIASES_PER_LINE: usize = 64;

/// One `Host <role>-<index>` block per task with an ssh port (its address and port),
/// then the options every alias shares, once per line of up to 64 aliases (ssh takes
/// each option from the first block that matches and sets it): the job's key, the job's
/// host key checked against `known_hosts` when the job has one (else no check: each task
/// made its own, which nothing vouches for), and a minute of connection attempts, one a
/// second (the barrier releases every task at once, and a peer's sshd may not listen yet
/// when `mpirun` starts). The user's own and the system's configuration follow for every
/// other host. Every task writes this file: its size is what grows with the job (about
/// 45 bytes per task, where repeating the shared options took 330).
fn ssh_config(peers: &PeerTable, root: &Path, known_hosts: Option<&Path>) -> String {
    let key = root.join(files::SSH_JOB_KEY);
    let key = quote_ssh(&key.display().to_string());
    // With the job's host key known, every task's is checked; without (a Framework
    // written by hand, keys made per task), none can be.
    let check = match known_hosts {
        Some(file) => format!(
            "StrictHostKeyChecking yes\n    UserKnownHostsFile {}",
            quote_ssh(&file.display().to_string())
        ),
        None => "StrictHostKeyChecking no\n    UserKnownHostsFile /dev/null".to_string(),
    };
    let mut text = String::from("# Written by kube-runtime: one alias per task of this job.\n");
    let mut aliases = Vec::new();
    for role in &peers.roles {
        for task in role.tasks() {
            let Some(port) = task.ports.first(pai_contract::ports::SSH_LABEL) else {
                continue;
            };
            let alias = contract::ssh_alias(&role.name, task.index);
            let _ = write!(
                text,
                "Host {alias}\n    HostName {ip}\n    Port {port}\n",
                ip = task.ip,
            );
            aliases.push(alias);
        }
    }
    for line in aliases.chunks(ALIASES_PER_LINE) {
        let _ = write!(
            text,
            "Host {}\n    IdentityFile {key}\n    {check}\n    LogLevel ERROR\n    ConnectionAttempts 60\n",
            line.join(" ")
        );
    }
    text.push_str("Host *\n    Include ~/.ssh/config\n    Include /etc/ssh/ssh_config\n");
    text
}

/// A value for ssh_config: in double quotes when it has blanks.
fn quote_ssh(value: &str) -> String {
    if value.contains(|c: char| c.is_whitespace()) {
        format!("\"{value}\"")
    } else {
        value.to_string()
    }
}

/// `<root>/bin/ssh`: the system's ssh client with the job's aliases, for the user's
/// command and for `mpirun`, which finds `ssh` on `PATH`.
pub fn ssh_wrapper(root: &Path) -> Vec<u8> {
    let config = crate::shell::quote(root.join(files::SSH_CONFIG).as_os_str().as_encoded_bytes());
    let here = crate::shell::quote(root.join(files::BIN_DIR).as_os_str().as_encoded_bytes());
    let mut script = b"#!/bin/sh\n# Written by kube-runtime: ssh with this job's aliases (<role>-<index>).\nconfig=".to_vec();
    script.extend_from_slice(&config);
    script.extend_from_slice(b"\nhere=");
    script.extend_from_slice(&here);
    script.extend_from_slice(
        b"\nset -f\nIFS=:\nfor dir in $PATH; do\n    [ \"$dir\" = \"$here\" ] && continue\n    [ -x \"$dir/ssh\" ] && exec \"$dir/ssh\" -F \"$config\" \"$@\"\ndone\necho \"ssh: no ssh client on PATH (install openssh-client in the image)\" >&2\nexit 127\n",
    );
    script
}

#[cfg(test)]
mod tests {
    use super::*;
    use pai_barrier::RolePeers;
    use pai_contract::PortPlan;

    /// chief (1 task), worker (2, 2 GPUs each), evaluator (1); every task on its own
    /// address, ports by role.
    fn table() -> PeerTable {
        let role = |name: &str, n: u8, gpus: u32, base: u16, net: u8| {
            let mut ports = PortPlan::default();
            ports.push("http", vec![base]).expect("label");
            ports.push("ssh", vec![base + 1]).expect("label");
            if name == "chief" {
                ports.push("master", vec![base + 2]).expect("label");
                ports.push("jax", vec![base + 3]).expect("label");
                ports.push("xgboost", vec![base + 4]).expect("label");
            }
            RolePeers {
                name: name.to_string(),
                kube_name: name.to_string(),
                env: BTreeMap::from([(
                    names::resource(name),
                    format!("cpu_count:1,memMB:1024,shmMB:64,gpu_count:{gpus}"),
                )]),
                ports,
                task_ports: Vec::new(),
                addresses: (0..n)
                    .map(|i| std::net::IpAddr::from([10, 0, net, i + 1]))
                    .collect(),
            }
        };
        PeerTable {
            framework: "fw".into(),
            attempt: 0,
            attempt_instance_uid: None,
            not_before: None,
            roles: vec![
                role("worker", 2, 2, 21000, 1),
                role("chief", 1, 0, 20000, 0),
                role("evaluator", 1, 0, 22000, 2),
            ],
        }
    }

    fn get<'a>(t: &'a Training, name: &str) -> Option<&'a str> {
        t.vars
            .iter()
            .find(|v| v.name == name)
            .map(|v| v.value.as_str())
    }

    #[test]
    fn a_worker_of_a_three_role_job_gets_exactly_these() {
        let t = training(&table(), 0, 1, &Selection::all(), Path::new("/r"), None);
        assert_eq!(
            get(&t, "TF_CONFIG"),
            Some(
                r#"{"cluster":{"chief":["10.0.0.1:20000"],"worker":["10.0.1.1:21000","10.0.1.2:21000"]},"task":{"index":1,"type":"worker"}}"#
            )
        );
        assert_eq!(t.tf_config.as_deref(), get(&t, "TF_CONFIG"));
        // The chief is the master; ranks: chief 0, workers 1 and 2, evaluator 3.
        for (name, value) in [
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "20002"),
            ("WORLD_SIZE", "4"),
            ("RANK", "2"),
            ("NODE_RANK", "2"),
            ("PET_NNODES", "4"),
            ("PET_NODE_RANK", "2"),
            ("PET_MASTER_ADDR", "10.0.0.1"),
            ("PET_MASTER_PORT", "20002"),
            ("PET_NPROC_PER_NODE", "2"),
            ("JAX_COORDINATOR_ADDRESS", "10.0.0.1:20003"),
            ("JAX_NUM_PROCESSES", "4"),
            ("JAX_PROCESS_ID", "2"),
            ("DMLC_TRACKER_URI", "10.0.0.1"),
            ("DMLC_TRACKER_PORT", "20004"),
            ("DMLC_TASK_ID", "2"),
            ("DMLC_NUM_WORKER", "4"),
            ("OMPI_MCA_orte_default_hostfile", "/r/hostfile"),
            ("PRTE_MCA_prte_default_hostfile", "/r/hostfile"),
            ("OMPI_ALLOW_RUN_AS_ROOT", "1"),
            ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
        ] {
            assert_eq!(get(&t, name), Some(value), "{name}");
        }
        assert_eq!(
            t.hostfile.as_deref(),
            Some("worker-0 slots=2\nworker-1 slots=2\nchief-0 slots=1\nevaluator-0 slots=1\n")
        );
        assert!(t.notes.is_empty(), "{:?}", t.notes);
        // What the submission warns a job's own value overrides is what is derived.
        let declared = Selection::all().variables();
        for var in &t.vars {
            assert!(
                declared.contains(&var.name.as_str()),
                "{} is derived but not in Selection::variables",
                var.name
            );
        }
        assert_eq!(t.vars.len(), declared.len());
    }

    #[test]
    fn the_chief_and_the_evaluator() {
        let chief = training(&table(), 1, 0, &Selection::all(), Path::new("/r"), None);
        assert_eq!(get(&chief, "RANK"), Some("0"));
        assert_eq!(get(&chief, "JAX_PROCESS_ID"), Some("0"));
        assert_eq!(get(&chief, "DMLC_TASK_ID"), Some("0"));
        assert_eq!(get(&chief, "PET_NPROC_PER_NODE"), Some("1"));
        assert!(
            get(&chief, "TF_CONFIG")
                .is_some_and(|v| v.ends_with(r#""task":{"index":0,"type":"chief"}}"#))
        );
        let evaluator = training(&table(), 2, 0, &Selection::all(), Path::new("/r"), None);
        assert_eq!(get(&evaluator, "RANK"), Some("3"));
        let tf: serde_json::Value =
            serde_json::from_str(get(&evaluator, "TF_CONFIG").expect("set")).expect("json");
        assert_eq!(tf["task"]["type"], "evaluator");
        assert!(
            tf["cluster"].get("evaluator").is_none(),
            "TensorFlow's evaluator is not part of the cluster"
        );
    }

    #[test]
    fn only_what_is_asked_for() {
        let selection: Selection = "tensorflow:ssh".parse().expect("reads");
        let t = training(&table(), 0, 0, &selection, Path::new("/r"), None);
        let names: Vec<&str> = t.vars.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["TF_CONFIG"]);
        assert!(
            t.tf_config
                .as_deref()
                .is_some_and(|v| v.contains("10.0.0.1:20001"))
        );
        assert_eq!(t.hostfile, None);
        let none = training(&table(), 0, 0, &Selection::none(), Path::new("/r"), None);
        assert!(none.vars.is_empty());
    }

    #[test]
    fn the_ssh_config_has_one_alias_per_task() {
        let t = training(
            &table(),
            0,
            0,
            &Selection::none(),
            Path::new("/a root"),
            None,
        );
        assert!(
            t.ssh_config
                .contains("Host worker-1\n    HostName 10.0.1.2\n    Port 21001\nHost "),
            "{}",
            t.ssh_config
        );
        // The shared options once, for every alias.
        assert!(
            t.ssh_config.contains(
                "\nHost worker-0 worker-1 chief-0 evaluator-0\n    IdentityFile \"/a root/ssh/job_key\"\n"
            ),
            "{}",
            t.ssh_config
        );
        assert_eq!(
            t.ssh_config.matches("\nHost ").count(),
            6,
            "4 tasks, the shared options, then *"
        );
        assert_eq!(t.ssh_config.matches("StrictHostKeyChecking no").count(), 1);
        // With the job's host key: every alias checks it, against the job's file alone.
        let known = Path::new("/a root/ssh/known_hosts");
        let t = training(
            &table(),
            0,
            0,
            &Selection::none(),
            Path::new("/a root"),
            Some(known),
        );
        let checked =
            "StrictHostKeyChecking yes\n    UserKnownHostsFile \"/a root/ssh/known_hosts\"\n";
        assert_eq!(t.ssh_config.matches(checked).count(), 1, "{}", t.ssh_config);
        assert!(!t.ssh_config.contains("StrictHostKeyChecking no"));
    }

    #[test]
    fn ipv6_addresses_are_bracketed_before_their_port() {
        let mut peers = table();
        for role in &mut peers.roles {
            role.addresses = (0..role.addresses.len())
                .map(|i| std::net::IpAddr::from([0xfd00, 0, 0, 0, 0, 0, 0, i as u16 + 1]))
                .collect();
        }
        let t = training(&peers, 0, 0, &Selection::all(), Path::new("/r"), None);
        assert_eq!(get(&t, "JAX_COORDINATOR_ADDRESS"), Some("[fd00::1]:20003"));
        assert!(
            get(&t, "TF_CONFIG").is_some_and(|v| v.contains(r#""chief":["[fd00::1]:20000"]"#)),
            "{:?}",
            get(&t, "TF_CONFIG")
        );
        assert_eq!(get(&t, "DMLC_TRACKER_URI"), Some("fd00::1"));
    }

    #[test]
    fn a_master_without_its_port_is_said() {
        let mut peers = table();
        peers.roles[1].ports = PortPlan::default();
        let t = training(&peers, 0, 0, &Selection::all(), Path::new("/r"), None);
        assert_eq!(get(&t, "MASTER_PORT"), None);
        assert_eq!(get(&t, "MASTER_ADDR"), Some("10.0.0.1"));
        assert!(t.notes.iter().any(|n| n.contains("MASTER_PORT")));
        assert!(t.notes.iter().any(|n| n.contains("role chief has no port")));
        // JAX's and XGBoost's numbers stand; their leader's address is said missing.
        assert_eq!(get(&t, "JAX_COORDINATOR_ADDRESS"), None);
        assert_eq!(get(&t, "JAX_NUM_PROCESSES"), Some("4"));
        assert_eq!(get(&t, "DMLC_TRACKER_URI"), None);
        assert_eq!(get(&t, "DMLC_TASK_ID"), Some("1"));
        assert!(
            t.notes
                .iter()
                .any(|n| n.contains("JAX_COORDINATOR_ADDRESS is not set"))
        );
        assert!(
            t.notes
                .iter()
                .any(|n| n.contains("DMLC_TRACKER_PORT are not set"))
        );
    }
}
