//! What the runtime derives for distributed-training programs from the peer table
//! (TensorFlow's `TF_CONFIG`, torchrun's and `torch.distributed`'s variables, an MPI
//! hostfile, ssh between tasks), which parts a job asks for, and the rules both sides
//! apply: which task is PyTorch's master, which roles run MPI ranks, how large a variable
//! may be.

use std::fmt;
use std::str::FromStr;

/// Init container: the parts the job asks for, [`Selection`]'s text form.
pub const FRAMEWORK_ENV_VAR: &str = "PAI_FRAMEWORK_ENV";

/// Label of the port PyTorch's master (the c10d store, torchrun's rendezvous) listens on;
/// rest-lite gives it to the master role when the job asks for PyTorch's variables.
pub const MASTER_PORT_LABEL: &str = "master";
/// Role names that make a role PyTorch's master (compared without regard to case, in
/// this order); without one, the first role is.
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
}

impl Part {
    /// Every part, in the order they are documented.
    pub const ALL: [Part; 3] = [Part::Tensorflow, Part::Pytorch, Part::Mpi];

    /// The name in the spec.
    pub fn as_str(self) -> &'static str {
        match self {
            Part::Tensorflow => "tensorflow",
            Part::Pytorch => "pytorch",
            Part::Mpi => "mpi",
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
        }
    }

    /// Every part, TensorFlow on the `http` port: what a job gets without `frameworkEnv`.
    pub fn all() -> Self {
        Self {
            tensorflow: Some(crate::ports::HTTP_LABEL.to_string()),
            pytorch: true,
            mpi: true,
        }
    }
}

impl fmt::Display for Selection {
    /// `tensorflow:<label>,pytorch,mpi`, the parts present; empty for none.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(label) = &self.tensorflow {
            parts.push(format!("{}:{label}", Part::Tensorflow.as_str()));
        }
        if self.pytorch {
            parts.push(Part::Pytorch.as_str().to_string());
        }
        if self.mpi {
            parts.push(Part::Mpi.as_str().to_string());
        }
        f.write_str(&parts.join(","))
    }
}

/// Why a [`FRAMEWORK_ENV_VAR`] value does not read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{FRAMEWORK_ENV_VAR}: {0:?} is not tensorflow[:<label>], pytorch or mpi")]
pub struct SelectionError(String);

impl FromStr for Selection {
    type Err = SelectionError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut selection = Selection::none();
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
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
                    selection.tensorflow = Some(label.to_string());
                }
                (Some(Part::Pytorch), None) => selection.pytorch = true,
                (Some(Part::Mpi), None) => selection.mpi = true,
                _ => return Err(SelectionError(item.to_string())),
            }
        }
        Ok(selection)
    }
}

/// Index of PyTorch's master role among `roles` (names as written, spec order): the
/// first named `master`, else the first named `chief` (any case), else the first role.
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
        ] {
            let s: Selection = text.parse().expect(text);
            assert_eq!(s.to_string(), text);
        }
        assert_eq!(
            "tensorflow".parse::<Selection>().map(|s| s.tensorflow),
            Ok(Some("http".to_string()))
        );
        assert!("pytorch:x".parse::<Selection>().is_err());
        assert!("horovod".parse::<Selection>().is_err());
        assert!("tensorflow:".parse::<Selection>().is_err());
        assert_eq!(Selection::all().to_string(), "tensorflow:http,pytorch,mpi");
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
