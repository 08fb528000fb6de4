//! What the runtime derives for distributed-training programs from the peer table
//! (TensorFlow's `TF_CONFIG`, torchrun's and `torch.distributed`'s variables, JAX's
//! coordinator, XGBoost's tracker, an MPI hostfile, ssh between tasks), which parts a job
//! asks for, and the rules both sides apply: which role leads (PyTorch's master, JAX's
//! coordinator, XGBoost's tracker), how processes are numbered, which roles run MPI ranks,
//! how large a variable may be.

use std::fmt;
use std::str::FromStr;

/// Init container: the parts the job asks for, [`Selection`]'s text form.
pub const FRAMEWORK_ENV_VAR: &str = "PAI_FRAMEWORK_ENV";

/// Label of the port PyTorch's master (the c10d store, torchrun's rendezvous) listens on;
/// rest-lite gives it to the master role when the job asks for PyTorch's variables.
pub const MASTER_PORT_LABEL: &str = "master";
/// Label of the port JAX's coordinator (`jax.distributed`'s service) listens on; rest-lite
/// gives it to the leading role when the job asks for JAX's variables.
pub const JAX_PORT_LABEL: &str = "jax";
/// Label of the port XGBoost's tracker (`xgboost.tracker.RabitTracker`) listens on;
/// rest-lite gives it to the leading role when the job asks for XGBoost's variables.
pub const XGBOOST_PORT_LABEL: &str = "xgboost";
/// Role names that make a role the leading one, PyTorch's master, JAX's coordinator and
/// XGBoost's tracker (compared without regard to case, in this order); without one, the
/// first role is.
pub const MASTER_ROLE_NAMES: [&str; 2] = ["master", "chief"];
/// A role with this name (any case) runs `mpirun` and is left out of the hostfile.
pub const LAUNCHER_ROLE: &str = "launcher";
/// A role with this name (any case) is TensorFlow's evaluator: it has a `task` entry in
/// `TF_CONFIG` but is not part of the `cluster`, as TensorFlow expects.
pub const EVALUATOR_ROLE: &str = "evaluator";

/// Linux refuses to `execve` with any single `NAME=value` string longer than this
/// (`MAX_ARG_STRLEN`, 32 pages), the terminating NUL included.
pub const MAX_VARIABLE_BYTES: usize = 128 * 1024;
/// The most the runtime's own variables take together. `execve` fails when arguments
/// and environment pass a quarter of the stack limit (2 MiB with the usual 8 MiB); half
/// of that is left to the image's environment, the job's and the command line.
pub const MAX_DYNAMIC_ENV_BYTES: usize = 1024 * 1024;

/// `TF_CONFIG`: `{"cluster": {role: ["addr:port", …]}, "task": {"type": role, "index": i}}`.
pub const TF_CONFIG: &str = "TF_CONFIG";
/// PyTorch (`init_method="env://"`, one process per task) and torchrun's `PET_*`.
pub mod pytorch {
    /// The master task's address.
    pub const MASTER_ADDR: &str = "MASTER_ADDR";
    /// The master task's port of label [`super::MASTER_PORT_LABEL`].
    pub const MASTER_PORT: &str = "MASTER_PORT";
    /// Tasks in the job (one process each; torchrun sets its own for its workers).
    pub const WORLD_SIZE: &str = "WORLD_SIZE";
    /// This task's rank: the master role's tasks first, then every other role in spec
    /// order, each by index.
    pub const RANK: &str = "RANK";
    /// Same as [`RANK`]: every task is one node.
    pub const NODE_RANK: &str = "NODE_RANK";
    /// torchrun's `--nnodes`.
    pub const PET_NNODES: &str = "PET_NNODES";
    /// torchrun's `--node_rank`.
    pub const PET_NODE_RANK: &str = "PET_NODE_RANK";
    /// torchrun's `--master_addr`.
    pub const PET_MASTER_ADDR: &str = "PET_MASTER_ADDR";
    /// torchrun's `--master_port`.
    pub const PET_MASTER_PORT: &str = "PET_MASTER_PORT";
    /// torchrun's `--nproc_per_node`: the role's GPUs, or 1 without any.
    pub const PET_NPROC_PER_NODE: &str = "PET_NPROC_PER_NODE";
}
/// JAX (`jax.distributed.initialize`), one process per task, numbered as PyTorch's ranks.
/// JAX reads the coordinator's address itself; the number of processes and this one's id
/// it takes as arguments, under the names Kubeflow Trainer's JAX runtime gives them.
pub mod jax {
    /// `<address>:<port>` of the leading role's task 0, port of label
    /// [`super::JAX_PORT_LABEL`].
    pub const COORDINATOR_ADDRESS: &str = "JAX_COORDINATOR_ADDRESS";
    /// Tasks in the job.
    pub const NUM_PROCESSES: &str = "JAX_NUM_PROCESSES";
    /// This task's number: [`super::pytorch::RANK`]'s.
    pub const PROCESS_ID: &str = "JAX_PROCESS_ID";
}
/// XGBoost's collective (`xgboost.collective.CommunicatorContext`), one worker per task,
/// numbered as PyTorch's ranks; the leading role's task 0 runs the tracker. XGBoost reads
/// none of them itself: a program passes them, under the names Kubeflow Trainer's XGBoost
/// runtime gives them.
pub mod xgboost {
    /// The leading role's task 0's address.
    pub const TRACKER_URI: &str = "DMLC_TRACKER_URI";
    /// Its port of label [`super::XGBOOST_PORT_LABEL`].
    pub const TRACKER_PORT: &str = "DMLC_TRACKER_PORT";
    /// This task's number: [`super::pytorch::RANK`]'s.
    pub const TASK_ID: &str = "DMLC_TASK_ID";
    /// Tasks in the job: the tracker's `n_workers`.
    pub const NUM_WORKER: &str = "DMLC_NUM_WORKER";
}
/// Where DeepSpeed's launcher looks for the hostfile when not given `--hostfile`: the
/// runtime puts the job's MPI hostfile there where the task has a file system of its own
/// (an image's, a pod's), as [`JOB_HOSTFILE_VAR`] asks.
pub const DEEPSPEED_HOSTFILE: &str = "/job/hostfile";
/// Main container: the path at which `run` links the job's hostfile (only where the
/// platform knows the task's file system is its own: never on the host).
pub const JOB_HOSTFILE_VAR: &str = "PAI_RUNTIME_JOB_HOSTFILE";
/// Open MPI's default hostfile, as Open MPI 4 (ORTE) and 5 (PRRTE) read it.
pub const MPI_HOSTFILE_VARS: [&str; 2] = [
    "OMPI_MCA_orte_default_hostfile",
    "PRTE_MCA_prte_default_hostfile",
];
/// Open MPI refuses to start as root without both; containers run as root.
pub const MPI_ALLOW_ROOT_VARS: [&str; 2] =
    ["OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"];

/// The job's ssh key pair, as the init container finds it: a directory with
/// [`JOB_KEY_FILE`] and [`JOB_PUBLIC_KEY_FILE`] (a Secret's volume on a cluster, a 0600
/// file of the embedded default's job directory on this machine).
pub const JOB_SSH_DIR_VAR: &str = "PAI_JOB_SSH_DIR";
/// Where the Secret with the job's key pair is mounted in the init container.
pub const JOB_SSH_MOUNT: &str = "/var/run/pai/job-ssh";
/// The private key (OpenSSH format).
pub const JOB_KEY_FILE: &str = "id_ed25519";
/// The public key (`ssh-ed25519 AAAA… comment`).
pub const JOB_PUBLIC_KEY_FILE: &str = "id_ed25519.pub";
/// The tasks' host key (OpenSSH format), beside the job's key pair.
pub const JOB_HOST_KEY_FILE: &str = "host_ed25519";
/// The tasks' host public key.
pub const JOB_HOST_PUBLIC_KEY_FILE: &str = "host_ed25519.pub";

/// A v2 job's secrets (JSON), beside the job's key pair: the init container renders
/// `<% $secrets.… %>` in the user's command from it. Readable by the init container's
/// user alone.
pub const JOB_SECRETS_FILE: &str = "secrets.json";

/// The Secret holding the job's ssh key pair (and a v2 job's secrets), owned by
/// Framework `framework`.
pub fn job_ssh_secret(framework: &str) -> String {
    format!("{framework}-ssh")
}

/// The job's image pull Secret (`kubernetes.io/dockerconfigjson`), owned by Framework
/// `framework`: the credentials of a v2 job's `dockerimage` prerequisites.
pub fn job_registry_secret(framework: &str) -> String {
    format!("{framework}-registry")
}

/// The ssh alias of a task inside its job (`worker-1`).
pub fn ssh_alias(role: &str, index: u32) -> String {
    format!("{role}-{index}")
}

/// Files the runtime writes under its root for these programs.
pub mod files {
    /// MPI hostfile: `<alias> slots=<n>` per task.
    pub const HOSTFILE: &str = "hostfile";
    /// `TF_CONFIG`'s value, also when it is too large for a variable.
    pub const TF_CONFIG_JSON: &str = "tf_config.json";
    /// Every per-task and list variable as a shell assignment (not exported), also
    /// those too large for the environment: `. "$PAI_RUNTIME_ROOT/peer-env.sh"`.
    pub const PEER_ENV: &str = "peer-env.sh";
    /// The part of `peer-env.sh` that is the same in every task (the peers' variables),
    /// which `peer-env.sh` sources.
    pub const PEER_ENV_COMMON: &str = "peer-env-common.sh";
    /// The exported variables of the parts asked for, `export NAME='value'` lines: the
    /// main container's own variables (`jobEnvs`, the image's) win over them.
    pub const DEFAULTS_ENV: &str = "framework-env.sh";
    /// ssh client configuration with one alias per task.
    pub const SSH_CONFIG: &str = "ssh/config";
    /// The job's private key, readable by the task's user alone.
    pub const SSH_JOB_KEY: &str = "ssh/job_key";
    /// The job's public key.
    pub const SSH_JOB_PUBLIC_KEY: &str = "ssh/job_key.pub";
    /// The host key sshd presents: the job's, when it has one (the `init/` script makes
    /// one for the task otherwise).
    pub const SSH_HOST_KEY: &str = "ssh/ssh_host_ed25519_key";
    /// `* <the job's host public key>`: every task of the job presents it.
    pub const SSH_KNOWN_HOSTS: &str = "ssh/known_hosts";
    /// Directory put first on the user command's `PATH`: its `ssh` uses [`SSH_CONFIG`].
    pub const BIN_DIR: &str = "bin";
}

/// The parts of the environment for training programs a job asks for (`frameworkEnv`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    /// `TF_CONFIG`, addressing each task by the first port of this label.
    pub tensorflow: Option<String>,
    /// `MASTER_ADDR` and the rest of PyTorch's variables.
    pub pytorch: bool,
    /// The hostfile and Open MPI's variables.
    pub mpi: bool,
    /// `JAX_COORDINATOR_ADDRESS` and the rest of JAX's variables.
    pub jax: bool,
    /// `DMLC_TRACKER_URI` and the rest of XGBoost's variables.
    pub xgboost: bool,
}

/// One of the parts, by its name in the spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// `tensorflow`.
    Tensorflow,
    /// `pytorch`.
    Pytorch,
    /// `mpi`.
    Mpi,
    /// `jax`.
    Jax,
    /// `xgboost`.
    Xgboost,
}

impl Part {
    /// Every part, in the order they are documented.
    pub const ALL: [Part; 5] = [
        Part::Tensorflow,
        Part::Pytorch,
        Part::Mpi,
        Part::Jax,
        Part::Xgboost,
    ];

    /// The name in the spec.
    pub fn as_str(self) -> &'static str {
        match self {
            Part::Tensorflow => "tensorflow",
            Part::Pytorch => "pytorch",
            Part::Mpi => "mpi",
            Part::Jax => "jax",
            Part::Xgboost => "xgboost",
        }
    }

    /// The part called `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

impl Selection {
    /// Nothing.
    pub fn none() -> Self {
        Self {
            tensorflow: None,
            pytorch: false,
            mpi: false,
            jax: false,
            xgboost: false,
        }
    }

    /// Every part, TensorFlow on the `http` port: what a job gets without `frameworkEnv`.
    pub fn all() -> Self {
        Self {
            tensorflow: Some(crate::ports::HTTP_LABEL.to_string()),
            pytorch: true,
            mpi: true,
            jax: true,
            xgboost: true,
        }
    }

    /// Whether `part` is asked for.
    pub fn has(&self, part: Part) -> bool {
        match part {
            Part::Tensorflow => self.tensorflow.is_some(),
            Part::Pytorch => self.pytorch,
            Part::Mpi => self.mpi,
            Part::Jax => self.jax,
            Part::Xgboost => self.xgboost,
        }
    }

    /// Asks for `part`, a part without options (every one but TensorFlow, whose label
    /// is set with [`Selection::tensorflow`]).
    pub fn ask(&mut self, part: Part) {
        match part {
            Part::Tensorflow => {
                self.tensorflow
                    .get_or_insert_with(|| crate::ports::HTTP_LABEL.to_string());
            }
            Part::Pytorch => self.pytorch = true,
            Part::Mpi => self.mpi = true,
            Part::Jax => self.jax = true,
            Part::Xgboost => self.xgboost = true,
        }
    }

    /// The variables the parts asked for derive (a job's own value of one wins).
    pub fn variables(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        if self.tensorflow.is_some() {
            names.push(TF_CONFIG);
        }
        if self.pytorch {
            names.extend([
                pytorch::MASTER_ADDR,
                pytorch::MASTER_PORT,
                pytorch::WORLD_SIZE,
                pytorch::RANK,
                pytorch::NODE_RANK,
                pytorch::PET_NNODES,
                pytorch::PET_NODE_RANK,
                pytorch::PET_MASTER_ADDR,
                pytorch::PET_MASTER_PORT,
                pytorch::PET_NPROC_PER_NODE,
            ]);
        }
        if self.mpi {
            names.extend(MPI_HOSTFILE_VARS);
            names.extend(MPI_ALLOW_ROOT_VARS);
        }
        if self.jax {
            names.extend([
                jax::COORDINATOR_ADDRESS,
                jax::NUM_PROCESSES,
                jax::PROCESS_ID,
            ]);
        }
        if self.xgboost {
            names.extend([
                xgboost::TRACKER_URI,
                xgboost::TRACKER_PORT,
                xgboost::TASK_ID,
                xgboost::NUM_WORKER,
            ]);
        }
        names
    }

    /// The port label of the leading role's task that a part asks for: PyTorch's master,
    /// JAX's coordinator, XGBoost's tracker.
    pub fn leader_ports(&self) -> impl Iterator<Item = &'static str> + '_ {
        [
            (self.pytorch, MASTER_PORT_LABEL),
            (self.jax, JAX_PORT_LABEL),
            (self.xgboost, XGBOOST_PORT_LABEL),
        ]
        .into_iter()
        .filter_map(|(asked, label)| asked.then_some(label))
    }
}

impl fmt::Display for Selection {
    /// `tensorflow:<label>,pytorch,mpi,jax,xgboost`, the parts present; empty for none.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = Part::ALL
            .into_iter()
            .filter(|&part| self.has(part))
            .map(|part| match (&self.tensorflow, part) {
                (Some(label), Part::Tensorflow) => format!("{}:{label}", part.as_str()),
                _ => part.as_str().to_string(),
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// Why a [`FRAMEWORK_ENV_VAR`] value does not read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{FRAMEWORK_ENV_VAR}: {0:?} is not tensorflow[:<label>], pytorch, mpi, jax or xgboost")]
pub struct SelectionError(String);

impl FromStr for Selection {
    type Err = SelectionError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut selection = Selection::none();
        for item in items(text) {
            selection.add(item)?;
        }
        Ok(selection)
    }
}

/// The items of a [`FRAMEWORK_ENV_VAR`] value.
fn items(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').map(str::trim).filter(|i| !i.is_empty())
}

impl Selection {
    /// [`FRAMEWORK_ENV_VAR`]'s value as a runtime reads it: the parts it knows, and the
    /// items it does not (a server of a later version may name parts this runtime has
    /// not heard of; the job runs without their variables rather than not at all).
    pub fn read_leniently(text: &str) -> (Self, Vec<String>) {
        let mut selection = Selection::none();
        let unknown = items(text)
            .filter(|item| selection.add(item).is_err())
            .map(str::to_string)
            .collect();
        (selection, unknown)
    }

    /// Adds the part `item` names (`pytorch`, `tensorflow:<label>`, …).
    fn add(&mut self, item: &str) -> Result<(), SelectionError> {
        let (name, label) = match item.split_once(':') {
            Some((name, label)) => (name, Some(label)),
            None => (item, None),
        };
        match (Part::parse(name), label) {
            (Some(Part::Tensorflow), label) => {
                let label = label.unwrap_or(crate::ports::HTTP_LABEL);
                if label.is_empty() {
                    return Err(SelectionError(item.to_string()));
                }
                self.tensorflow = Some(label.to_string());
            }
            (Some(part), None) => self.ask(part),
            _ => return Err(SelectionError(item.to_string())),
        }
        Ok(())
    }
}

/// Index of the leading role among `roles` (names as written, spec order), PyTorch's
/// master, JAX's coordinator and XGBoost's tracker: the first named `master`, else the
/// first named `chief` (any case), else the first role.
pub fn master_role<'a>(roles: impl IntoIterator<Item = &'a str> + Clone) -> usize {
    MASTER_ROLE_NAMES
        .iter()
        .find_map(|wanted| {
            roles
                .clone()
                .into_iter()
                .position(|r| r.eq_ignore_ascii_case(wanted))
        })
        .unwrap_or(0)
}

/// True for roles whose tasks are MPI hosts: all but a launcher.
pub fn is_mpi_host(role: &str) -> bool {
    !role.eq_ignore_ascii_case(LAUNCHER_ROLE)
}

/// True for TensorFlow's evaluator role.
pub fn is_tf_evaluator(role: &str) -> bool {
    role.eq_ignore_ascii_case(EVALUATOR_ROLE)
}

/// The bytes `name=value` takes in a process's environment (with its NUL).
pub fn variable_bytes(name: &str, value: &str) -> usize {
    name.len() + 1 + value.len() + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_round_trips() {
        for text in [
            "",
            "tensorflow:grpc",
            "pytorch,mpi",
            "tensorflow:http,pytorch,mpi",
            "jax",
            "mpi,xgboost",
        ] {
            let s: Selection = text.parse().expect(text);
            assert_eq!(s.to_string(), text);
        }
        assert_eq!(
            "tensorflow".parse::<Selection>().map(|s| s.tensorflow),
            Ok(Some("http".to_string()))
        );
        assert!("pytorch:x".parse::<Selection>().is_err());
        assert!("jax:x".parse::<Selection>().is_err());
        assert!("horovod".parse::<Selection>().is_err());
        assert!("tensorflow:".parse::<Selection>().is_err());
        assert_eq!(
            Selection::all().to_string(),
            "tensorflow:http,pytorch,mpi,jax,xgboost"
        );
    }

    #[test]
    fn a_runtime_reads_the_parts_it_knows_and_names_the_others() {
        let (selection, unknown) =
            Selection::read_leniently("tensorflow:grpc,pytorch,horovod,jax:x,xgboost");
        assert_eq!(selection.to_string(), "tensorflow:grpc,pytorch,xgboost");
        assert_eq!(unknown, ["horovod", "jax:x"]);
        let (all, none) = Selection::read_leniently(&Selection::all().to_string());
        assert_eq!(all, Selection::all());
        assert!(none.is_empty());
    }

    #[test]
    fn the_master_is_master_then_chief_then_the_first_role() {
        assert_eq!(master_role(["worker", "Chief", "master"]), 2);
        assert_eq!(master_role(["worker", "CHIEF"]), 1);
        assert_eq!(master_role(["ps", "worker"]), 0);
    }

    #[test]
    fn only_a_launcher_is_no_mpi_host() {
        assert!(!is_mpi_host("Launcher"));
        assert!(is_mpi_host("worker"));
    }
}
