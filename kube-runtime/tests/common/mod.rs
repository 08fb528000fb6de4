//! A task's runtime root in a temporary directory, and the real binary to run in it.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use pai_kube_runtime::shell;

pub const BIN: &str = env!("CARGO_BIN_EXE_kube-runtime");

/// A task's root, removed when it goes out of scope (a failing test's too).
pub struct TaskDir {
    pub dir: PathBuf,
    _removed_at_drop: pai_test_support::scratch::TempDir,
}

impl TaskDir {
    pub fn new(name: &str) -> Self {
        let scratch = pai_test_support::scratch(&format!("kube-runtime-{name}"));
        let dir = scratch.path().to_path_buf();
        std::fs::create_dir_all(dir.join("init")).expect("dir");
        let task = Self {
            dir,
            _removed_at_drop: scratch,
        };
        task.env_file(&[]);
        task
    }

    pub fn root(&self) -> &Path {
        &self.dir
    }

    pub fn main(&self, script: &str) {
        std::fs::write(self.dir.join("main.sh"), script).expect("main.sh");
    }

    pub fn env_file(&self, vars: &[(&str, &OsStr)]) {
        let text = shell::render(vars.iter().map(|(k, v)| (OsStr::new(k), *v))).expect("render");
        std::fs::write(self.dir.join("env.sh"), text).expect("env.sh");
    }

    pub fn daemon(&self, name: &str, script: &str) {
        std::fs::write(self.dir.join("init").join(name), script).expect("daemon");
    }

    /// A FIFO the user command writes to when it is ready.
    pub fn fifo(&self, name: &str) -> PathBuf {
        let path = self.dir.join(name);
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600))
            .expect("mkfifo");
        path
    }

    /// `kube-runtime run` as PID 1 of a new PID namespace (with its own /proc).
    pub fn pid1(&self) -> Command {
        let mut command = Command::new("unshare");
        command
            .args(["--pid", "--fork", "--mount-proc", BIN, "run", "--root"])
            .arg(&self.dir);
        self.task_env(&mut command);
        command
    }

    /// `kube-runtime run` as a plain child (it becomes a child subreaper).
    pub fn subreaper(&self) -> Command {
        let mut command = Command::new(BIN);
        command.arg("run").arg("--root").arg(&self.dir);
        self.task_env(&mut command);
        command
    }

    fn task_env(&self, command: &mut Command) {
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("FC_FRAMEWORK_ATTEMPT_ID", "0")
            .env("FC_TASKROLE_NAME", "worker")
            .env("FC_TASK_INDEX", "0")
            .env("FC_TASK_ATTEMPT_ID", "0")
            .env("PAI_KILL_GRACE_SEC", "2")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    }

    pub fn log_dir(&self) -> PathBuf {
        self.dir.join("logs/attempt-0/role-worker/idx-0/attempt-0")
    }
}

/// Blocks until the user command writes a line into `fifo`.
pub fn wait_ready(fifo: &Path) -> String {
    let mut text = String::new();
    std::fs::File::open(fifo)
        .expect("open fifo")
        .read_to_string(&mut text)
        .expect("read fifo");
    text
}

/// The pid of unshare's child (the runtime, PID 1 inside), seen from here.
pub fn namespace_init(unshare: &Child) -> nix::unistd::Pid {
    let pid = unshare.id();
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).expect("children");
    let first = children
        .split_whitespace()
        .next()
        .expect("unshare has its child");
    nix::unistd::Pid::from_raw(first.parse().expect("pid"))
}

pub struct Finished {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

pub fn finish(child: Child) -> Finished {
    let out = child.wait_with_output().expect("wait");
    Finished {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Whether this process may make PID namespaces and chroots (it is root); says what is
/// missing and skips elsewhere, fails under `CI=true`.
#[allow(dead_code)]
pub fn root() -> bool {
    pai_test_support::needs::present(
        "root (for unshare --pid and chroot)",
        // /proc/self belongs to this process's effective user.
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").expect("/proc")) == 0,
        "run the tests as root, as CI does",
    )
}
