//! The runtime built statically (glibc, `+crt-static`) runs where the user image has
//! nothing: a chroot holding only it and a static busybox. entry passes the local barrier
//! there and run starts the user command as PID 1. Needs busybox-static (`.ci/run`).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use pai_test_support::frameworks::{address, framework_on_ports, set_pod_ip, to_value};

const TARGET: &str = "x86_64-unknown-linux-gnu";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo")
        .to_path_buf()
}

/// Builds the static runtime in its own target directory and returns its path.
fn static_runtime() -> PathBuf {
    let target_dir = repo().join("target/static");
    let status = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args([
            "build",
            "--quiet",
            "-p",
            "pai-kube-runtime",
            "--bin",
            "kube-runtime",
            "--target",
            TARGET,
        ])
        .arg("--target-dir")
        .arg(&target_dir)
        // rest-lite's build.rs builds the same, with the same flags: one build for both.
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            "-C\x1ftarget-feature=+crt-static",
        )
        .env_remove("RUSTFLAGS")
        .current_dir(repo())
        .status()
        .expect("cargo build");
    assert!(status.success(), "the static build failed");
    target_dir.join(TARGET).join("debug/kube-runtime")
}

fn in_chroot(root: &Path, args: &[&str], env: &[(&str, String)]) -> std::process::Output {
    let mut command = Command::new("unshare");
    command
        .arg("--pid")
        .arg("--fork")
        .arg(format!("--mount-proc={}", root.join("proc").display()))
        .arg("/usr/sbin/chroot")
        .arg(root)
        .args(args)
        .env_clear()
        .env("PATH", "/bin")
        .stdin(Stdio::null());
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().expect("unshare chroot")
}

#[test]
fn the_static_runtime_runs_in_a_chroot_with_only_busybox() {
    let busybox = Path::new("/bin/busybox");
    if !common::root()
        || !pai_test_support::needs::present(
            "a static busybox at /bin/busybox",
            std::fs::metadata(busybox).is_ok_and(|m| m.is_file()),
            "apt-get install busybox-static",
        )
    {
        return;
    }
    let runtime = static_runtime();

    let scratch = pai_test_support::scratch("kube-runtime-chroot");
    let root = scratch.path();
    for dir in ["bin", "proc", "opt/pai", "state"] {
        std::fs::create_dir_all(root.join(dir)).expect("dir");
    }
    std::fs::copy(busybox, root.join("bin/busybox")).expect("busybox");
    std::os::unix::fs::symlink("busybox", root.join("bin/sh")).expect("sh");
    std::fs::copy(&runtime, root.join("opt/pai/kube-runtime")).expect("runtime");

    let mut framework = to_value(&framework_on_ports(
        "fw",
        &[("ps", 1), ("worker", 1)],
        30500,
    ));
    set_pod_ip(&mut framework, "ps", 0, &address(0, 0));
    set_pod_ip(&mut framework, "worker", 0, &address(1, 0));
    std::fs::write(
        root.join("state/framework.json"),
        serde_json::to_vec(&framework).expect("json"),
    )
    .expect("write");

    let env = [
        ("FC_FRAMEWORK_NAMESPACE", "jobs".to_string()),
        ("FC_FRAMEWORK_NAME", "fw".to_string()),
        ("FC_TASKROLE_NAME", "worker".to_string()),
        ("FC_TASK_INDEX", "0".to_string()),
        (
            "BARRIER_FRAMEWORK_FILE",
            "/state/framework.json".to_string(),
        ),
        (
            "USER_CMD",
            "echo \"peer ps at $PAI_HOST_IP_ps_0, I am pid $$\"; exit 7".to_string(),
        ),
    ];
    let entry = in_chroot(root, &["/opt/pai/kube-runtime", "entry"], &env);
    assert_eq!(
        entry.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&entry.stderr)
    );

    let run = in_chroot(root, &["/usr/local/pai/run"], &env);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert_eq!(
        run.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    // In the chroot's own PID namespace: the runtime is 1, its output reader thread 2,
    // the user command the next.
    assert_eq!(
        stdout,
        format!("peer ps at {}, I am pid 3\n", address(0, 0))
    );
}
