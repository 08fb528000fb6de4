//! A real sshd, prepared by `init/10-sshd.sh` at the first connection and started by the
//! supervisor for each connection (neither runs before the first), accepts the job's key,
//! and a command run over ssh sees the job's `PAI_*` variables. Needs openssh-server and an ssh client (`.ci/run`
//! installs them).

use crate::common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{TaskDir, finish};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo")
        .to_path_buf()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// Blocks until `path` contains `needle`, woken by inotify on every write.
fn wait_for_text(path: &Path, needle: &str) -> String {
    let inotify = Inotify::init(InitFlags::IN_CLOEXEC).expect("inotify");
    let dir = path.parent().expect("dir");
    inotify
        .add_watch(dir, AddWatchFlags::IN_MODIFY | AddWatchFlags::IN_CREATE)
        .expect("watch");
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(needle) {
            return text;
        }
        inotify.read_events().expect("events");
    }
}

/// `ssh` to 127.0.0.1:`port` with only `key`, never asking anything.
fn ssh_to(key: &Path, port: u16, command: &str) -> std::process::Output {
    Command::new("ssh")
        .args([
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
        ])
        .args(["-o", "LogLevel=ERROR", "-o", "IdentitiesOnly=yes", "-i"])
        .arg(key)
        .args(["-p", &port.to_string(), "root@127.0.0.1", command])
        .output()
        .expect("ssh")
}

/// sshd processes among the descendants of `root`.
fn sshd_processes(root: u32) -> usize {
    let parent_of = |pid: u32| -> Option<(u32, String)> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (head, rest) = stat.rsplit_once(')')?;
        let name = head.split_once('(')?.1.to_string();
        let ppid = rest.split_whitespace().nth(1)?.parse().ok()?;
        Some((ppid, name))
    };
    let pids: Vec<u32> = std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.into_iter()
        .filter(|&pid| {
            let Some((_, name)) = parent_of(pid) else {
                return false;
            };
            let mut at = pid;
            while let Some((ppid, _)) = parent_of(at) {
                if ppid == root {
                    return name == "sshd";
                }
                if ppid <= 1 {
                    return false;
                }
                at = ppid;
            }
            false
        })
        .count()
}

/// A task under the supervisor (not PID 1) whose sshd is on demand, its user command
/// waiting for `release`; `None` (said) without sshd, ssh and ssh-keygen.
struct OnDemandTask {
    task: TaskDir,
    key: PathBuf,
    port: u16,
    child: std::process::Child,
    release: PathBuf,
    log: PathBuf,
}

fn on_demand_task(name: &str) -> Option<OnDemandTask> {
    on_demand_task_with(name, false)
}

/// [`on_demand_task`]; with `installed_later`, the image has no sshd until the file
/// `sshd-installed` appears in the task's root (as `apt-get install openssh-server` in the
/// running task would), and the task looks for it again at once (`SSH_RETRY_SEC` 0).
fn on_demand_task_with(name: &str, installed_later: bool) -> Option<OnDemandTask> {
    let tools = ["/usr/sbin/sshd", "/usr/bin/ssh", "/usr/bin/ssh-keygen"];
    if !pai_test_support::needs::present(
        "sshd, ssh and ssh-keygen",
        tools
            .iter()
            .all(|t| std::fs::metadata(t).is_ok_and(|m| m.is_file())),
        "apt-get install openssh-server openssh-client",
    ) {
        return None;
    }
    let task = TaskDir::new(name);
    let key = task.root().join("id_ed25519");
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&key)
        .status()
        .expect("ssh-keygen");
    assert!(status.success());
    let public = std::fs::read_to_string(key.with_extension("pub")).expect("public key");

    // prep/ runs in the init container, init/ under the supervisor: as in a pod.
    let prep = Command::new("/bin/sh")
        .arg(repo().join("prep/10-ssh-host-keys.sh"))
        .env("PAI_RUNTIME_ROOT", task.root())
        .output()
        .expect("prep");
    assert!(
        prep.status.success(),
        "{}",
        String::from_utf8_lossy(&prep.stderr)
    );
    // The real script, run by the supervisor; or, with `installed_later`, by a wrapper
    // in its place that says there is no sshd until the file appears.
    let script = if installed_later {
        "real-10-sshd.sh"
    } else {
        "init/10-sshd.sh"
    };
    std::fs::copy(repo().join("init/10-sshd.sh"), task.root().join(script)).expect("install init");
    if installed_later {
        std::fs::write(
            task.root().join("init/10-sshd.sh"),
            "[ -e \"$PAI_RUNTIME_ROOT/sshd-installed\" ] || { echo 'ssh: this image has no sshd (install openssh-server to use ssh); sshd not started'; exit 0; }\nexec /bin/sh \"$PAI_RUNTIME_ROOT/real-10-sshd.sh\"\n",
        )
        .expect("install init");
    }

    let port = free_port();
    std::fs::create_dir_all(task.log_dir()).expect("log dir, to watch");
    task.env_file(&[("PAI_HOST_IP_ps_0", OsStr::new("10.1.0.1"))]);
    let release = task.fifo("release");
    // The user command starts after the supervisor holds the ssh port.
    let up = task.root().join("up");
    task.main(&format!(
        "echo up > {}\nread line < {}\necho released\n",
        up.display(),
        release.display()
    ));
    let mut command = task.subreaper();
    if installed_later {
        command.env(pai_contract::env::runtime::SSH_RETRY_SEC, "0");
    }
    let child = command
        .env("PAI_SSH_PUB_KEY", public.trim())
        .env("PAI_CONTAINER_SSH_PORT", port.to_string())
        .env("PAI_JOB_NAME", "alice~ssh it's")
        .spawn()
        .expect("run");

    let log = task.log_dir().join("init-10-sshd.sh.log");
    wait_for_text(&up, "up");
    Some(OnDemandTask {
        task,
        key,
        port,
        child,
        release,
        log,
    })
}

#[test]
fn sshd_accepts_the_job_key_and_sessions_see_the_job_env() {
    let Some(OnDemandTask {
        task,
        key,
        port,
        child,
        release,
        log,
    }) = on_demand_task("sshd")
    else {
        return;
    };
    let supervisor = child.id();
    assert_eq!(
        sshd_processes(supervisor),
        0,
        "no sshd runs before the first connection"
    );
    assert!(
        !log.exists() && !task.root().join("ssh/sshd_config").exists(),
        "sshd is not prepared before the first connection"
    );
    let ssh = ssh_to(
        &key,
        port,
        "echo \"job=$PAI_JOB_NAME ps=$PAI_HOST_IP_ps_0\"",
    );
    let again = ssh_to(&key, port, "echo again");
    let stranger = ssh_to(&task.root().join("none"), port, "true");
    std::fs::write(&release, "go\n").expect("release the user command");
    let out = finish(child);

    assert!(
        ssh.status.success(),
        "ssh failed: {}\nsshd log: {}",
        String::from_utf8_lossy(&ssh.stderr),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert_eq!(
        String::from_utf8_lossy(&ssh.stdout),
        "job=alice~ssh it's ps=10.1.0.1\n"
    );
    // Prepared once, for the first connection.
    let prepared = std::fs::read_to_string(&log).expect("the setup script's log");
    assert_eq!(prepared.matches("(on demand)").count(), 1, "{prepared}");
    // The sessions' environment was written for the first connection, private.
    use std::os::unix::fs::PermissionsExt;
    let env_all = task.root().join("env-all.sh");
    assert_eq!(
        std::fs::metadata(&env_all)
            .expect("env-all.sh")
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    assert_eq!(
        String::from_utf8_lossy(&again.stdout),
        "again\n",
        "a second connection gets its own sshd: {}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert!(
        !stranger.status.success(),
        "a key that is not the job's is refused"
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(out.stdout, "released\n");
}

/// An image without sshd refuses the first connection (its setup says why); once sshd is
/// installed in the running task, a later connection runs the setup again and logs in.
#[test]
fn an_sshd_installed_in_the_running_task_is_found_at_a_later_connection() {
    let Some(OnDemandTask {
        task,
        key,
        port,
        child,
        release,
        log,
    }) = on_demand_task_with("sshd-later", true)
    else {
        return;
    };
    let before = ssh_to(&key, port, "echo hello");
    std::fs::write(task.root().join("sshd-installed"), "").expect("install sshd");
    let after = ssh_to(&key, port, "echo hello");
    std::fs::write(&release, "go\n").expect("release the user command");
    let out = finish(child);
    assert!(!before.status.success(), "no sshd yet");
    assert!(
        after.status.success(),
        "ssh after sshd was installed: {}\nsetup log: {}",
        String::from_utf8_lossy(&after.stderr),
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert_eq!(String::from_utf8_lossy(&after.stdout), "hello\n");
    assert_eq!(out.code, Some(0), "{}", out.stderr);
}

#[test]
fn without_a_key_sshd_is_one_log_line_not_a_failure() {
    let task = TaskDir::new("sshd-no-key");
    std::fs::copy(
        repo().join("init/10-sshd.sh"),
        task.root().join("init/10-sshd.sh"),
    )
    .expect("install init");
    let marker = task.log_dir().join("init-10-sshd.sh.log");
    task.main(&format!(
        "while ! grep -q sshd {} 2>/dev/null; do :; done; exit 0",
        marker.display()
    ));
    let out = finish(task.subreaper().spawn().expect("run"));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let log = std::fs::read_to_string(&marker).expect("log");
    assert_eq!(
        log,
        "ssh: the job has no key (no job key, no PAI_SSH_PUB_KEY in jobEnvs); sshd not started\n"
    );
}

/// One `sshd -i` per connection has no bound of its own: the supervisor starts at most
/// `MAX_SESSIONS` at once, and closes a connection beyond them.
#[test]
fn sshd_processes_beyond_the_bound_are_not_started() {
    use pai_kube_runtime::supervisor::ssh::MAX_SESSIONS;
    use std::io::Read;
    let Some(t) = on_demand_task("sshd-bound") else {
        return;
    };
    // Each connection gets its own sshd, which greets and waits for the client.
    let held: Vec<std::net::TcpStream> = (0..MAX_SESSIONS)
        .map(|_| {
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", t.port)).expect("connect");
            let mut banner = [0u8; 8];
            stream.read_exact(&mut banner).expect("a banner");
            assert_eq!(&banner, b"SSH-2.0-");
            stream
        })
        .collect();
    let mut beyond = std::net::TcpStream::connect(("127.0.0.1", t.port)).expect("connect");
    let mut said = Vec::new();
    beyond.read_to_end(&mut said).expect("closed");
    assert!(
        said.is_empty(),
        "no sshd for the connection beyond the bound"
    );
    assert_eq!(sshd_processes(t.child.id()), MAX_SESSIONS);
    drop(held);
    std::fs::write(&t.release, "go\n").expect("release the user command");
    let out = finish(t.child);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("as many sshd processes as allowed run"),
        "{}",
        out.stderr
    );
    drop(t.task);
}
