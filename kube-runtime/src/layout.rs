//! Where the runtime keeps things under its root, and which task it is.

use std::path::{Path, PathBuf};

use pai_contract::env::fc;
use pai_contract::paths::{self, files};

/// Environment variable that moves the runtime root (tests and the embedded default).
pub const ROOT_VAR: &str = pai_contract::env::runtime::ROOT;
/// Environment variable naming the directory with `prep/` and `init/` (default: the
/// directory of the runtime binary).
pub const ASSETS_VAR: &str = pai_contract::env::runtime::ASSETS;

/// The files under the runtime root shared by the init and main containers.
#[derive(Clone, Debug)]
pub struct Layout {
    root: PathBuf,
}

impl Layout {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// `--root`, else `$PAI_RUNTIME_ROOT`, else `/usr/local/pai`.
    pub fn from_env(root: Option<PathBuf>) -> Self {
        Self::new(
            root.or_else(|| std::env::var_os(ROOT_VAR).map(PathBuf::from))
                .unwrap_or_else(|| PathBuf::from(paths::RUNTIME_ROOT)),
        )
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    /// Where the main container sees the root ([`pai_contract::env::runtime::MAIN_ROOT`],
    /// else the root itself): the paths written into the task's files.
    pub fn main_root(&self) -> PathBuf {
        std::env::var_os(pai_contract::env::runtime::MAIN_ROOT)
            .map(PathBuf::from)
            .unwrap_or_else(|| self.root.clone())
    }
    /// The installed runtime, the main container's command.
    pub fn run(&self) -> PathBuf {
        self.root.join(files::RUN)
    }
    pub fn init_dir(&self) -> PathBuf {
        self.root.join(files::INIT)
    }
    /// Dynamic variables, written by `entry`, read by `run`.
    pub fn env_file(&self) -> PathBuf {
        self.root.join(files::ENV_FILE)
    }
    /// The exported variables about the job's tasks (`env-peers.sh`).
    pub fn peers_env_file(&self) -> PathBuf {
        self.root.join(files::PEERS_ENV_FILE)
    }
    /// The whole environment of the task, written by `run` for ssh sessions.
    pub fn env_all_file(&self) -> PathBuf {
        self.root.join(files::ENV_ALL)
    }
    pub fn main_sh(&self) -> PathBuf {
        self.root.join(files::MAIN_SH)
    }
    pub fn logs(&self) -> PathBuf {
        self.root.join(files::LOGS)
    }
}

/// Which task this is, from the variables FrameworkController injects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    pub framework_attempt: u32,
    pub kube_role: String,
    pub index: u32,
    pub task_attempt: u32,
}

impl Task {
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let number = |name: &str, default: Option<u32>| -> Result<u32, String> {
            match var(name).filter(|v| !v.is_empty()) {
                Some(v) => v
                    .parse()
                    .map_err(|_| format!("{name}={v:?} is not a number")),
                None => default.ok_or_else(|| format!("{name} is not set")),
            }
        };
        Ok(Self {
            framework_attempt: number(fc::FRAMEWORK_ATTEMPT_ID, Some(0))?,
            kube_role: var(fc::TASKROLE_NAME)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| format!("{} is not set", fc::TASKROLE_NAME))?,
            index: number(fc::TASK_INDEX, None)?,
            task_attempt: number(fc::TASK_ATTEMPT_ID, Some(0))?,
        })
    }

    /// This attempt's log directory (contracts §3).
    pub fn log_dir(&self, layout: &Layout) -> PathBuf {
        layout.logs().join(paths::attempt_log_dir(
            self.framework_attempt,
            &self.kube_role,
            self.index,
            self.task_attempt,
        ))
    }
}

/// Regular files of `dir` whose names do not start with `.`, sorted by name: the order
/// `prep/` and `init/` scripts run in. A missing directory has none.
pub fn scripts(dir: &Path) -> std::io::Result<Vec<(String, PathBuf)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut scripts = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !entry.file_type()?.is_file() {
            continue;
        }
        scripts.push((name, entry.path()));
    }
    scripts.sort();
    Ok(scripts)
}

/// The address a task's ports are bound on ([`pai_contract::env::runtime::BIND_ADDRESS`]):
/// the task's own on the embedded default; every address of the pod's network elsewhere.
pub fn bind_address() -> std::net::IpAddr {
    std::env::var(pai_contract::env::runtime::BIND_ADDRESS)
        .ok()
        .and_then(|a| a.parse().ok())
        .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
}

#[cfg(test)]
mod tests {
    use pai_contract::env::runtime;
    use pai_contract::paths::{self, files};

    /// The shipped scripts cannot read the contract's constants: this reads the scripts,
    /// so a renamed file or variable fails here rather than in a task.
    #[test]
    fn the_shipped_scripts_name_the_contracts_files_and_variables() {
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let read = |path: &str| {
            std::fs::read_to_string(repo.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
        };
        let root = format!("${{{}:-{}}}", runtime::ROOT, paths::RUNTIME_ROOT);
        for script in ["init/10-sshd.sh", "prep/10-ssh-host-keys.sh"] {
            assert!(
                read(script).contains(&root),
                "{script} finds the root as {root}"
            );
        }
        let sshd = read("init/10-sshd.sh");
        assert!(
            sshd.contains(&format!(". \\\"$root/{}\\\"", files::ENV_ALL)),
            "ssh sessions source {}",
            files::ENV_ALL
        );
    }
}
