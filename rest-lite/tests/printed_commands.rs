//! The commands rest-lite prints for a person to type run as printed, where the person
//! is: `rest-lite run`'s "other commands meanwhile" line, executed by a shell with the
//! person's PATH, reaches the running job, and the job's exit status says who ended it.
//! Three places a person runs it from: an installed `rest-lite` on the PATH, the binary
//! by its path, and `cargo run`, which a stand-in plays here (a script named `cargo` that
//! starts rest-lite with the arguments after `--` and the environment cargo gives a
//! program it runs, `CARGO` and `CARGO_PKG_NAME`): this test proves what rest-lite reads
//! of that environment, not cargo's own behaviour (the closing note of the change that
//! made it says what a real `cargo run` printed).

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::json;

fn scratch(name: &str) -> common::Scratch {
    common::scratch("printed", name)
}

/// The directory of the real binary.
fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_rest-lite"))
        .parent()
        .expect("its folder")
        .to_path_buf()
}

/// A job of one task that waits until a line reaches the FIFO `gate`.
fn waiting_job(dir: &Path, gate: &Path) -> PathBuf {
    let status = Command::new("mkfifo").arg(gate).status().expect("mkfifo");
    assert!(status.success());
    let spec = dir.join("job.json");
    let job = json!({
        "jobName": "waits",
        "image": "busybox",
        "taskRoles": [{"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128,
            "command": "read line < \"$GATE\"; echo released"}],
        "jobEnvs": {"GATE": gate.to_str().expect("path")},
    });
    std::fs::write(&spec, job.to_string()).expect("spec");
    spec
}

/// `rest-lite run` of the waiting job through `program` and `prefix` (the binary, or a
/// stand-in that starts it) with `path` as its PATH: the status command it printed for the
/// person, run as printed, then the same with `stop`; returns the printed command and
/// `run`'s exit status.
fn run_and_type(dir: &Path, program: &Path, prefix: &[&str], path: &str) -> (String, i32) {
    let gate = dir.join("gate");
    let spec = waiting_job(dir, &gate);
    let mut run = Command::new(program);
    common::hermetic(&mut run);
    let mut child = run
        .args(prefix)
        .arg("run")
        .arg(&spec)
        .env("REST_LITE_ENGINE", "host")
        // The stand-in cargo starts the real binary from here.
        .env("REST_LITE_BIN", env!("CARGO_BIN_EXE_rest-lite"))
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rest-lite run");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut printed = None;
    let mut line = String::new();
    while printed.is_none() && stderr.read_line(&mut line).expect("stderr") > 0 {
        if let Some(at) = line.find("other commands meanwhile: ") {
            let rest = &line[at + "other commands meanwhile: ".len()..];
            printed = Some(rest.trim_end().trim_end_matches(')').to_string());
        }
        line.clear();
    }
    let printed = printed.expect("run printed the commands to use meanwhile");
    // The job's status, as printed, by a shell with the person's PATH.
    let status = typed(&printed, path);
    let said = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success() && said.contains("waits"),
        "`{printed}` as printed: {status:?}"
    );
    // The same with `stop` for `status`: the job ends STOPPED by someone else.
    let stop = printed.replacen(" status ", " stop ", 1);
    let stopped = typed(&stop, path);
    assert!(stopped.status.success(), "`{stop}` as printed: {stopped:?}");
    let rest: Vec<String> = stderr.lines().map_while(Result::ok).collect();
    let code = child
        .wait()
        .expect("run's end")
        .code()
        .expect("an exit code");
    assert!(
        rest.iter().any(|l| l.contains("STOPPED")),
        "run said how the job ended: {rest:?}"
    );
    (printed, code)
}

/// `line` as a person types it: by a shell whose environment is theirs (`path`, the
/// tests' own home; the stand-in cargo's binary).
fn typed(line: &str, path: &str) -> std::process::Output {
    Command::new("sh")
        .args(["-c", line])
        .env_clear()
        .env("HOME", common::fake_home())
        .env("PATH", path)
        .env("REST_LITE_BIN", env!("CARGO_BIN_EXE_rest-lite"))
        .output()
        .expect("sh")
}

#[test]
fn an_installed_rest_lite_is_named_by_its_name() {
    let dir = scratch("installed");
    let path = format!("{}:/usr/bin:/bin", bin_dir().display());
    let (printed, code) =
        run_and_type(&dir, Path::new(env!("CARGO_BIN_EXE_rest-lite")), &[], &path);
    assert!(printed.ends_with(" rest-lite status waits"), "{printed}");
    assert_eq!(code, 143, "a job stopped by someone else");
}

#[test]
fn a_rest_lite_off_the_path_is_named_by_its_path() {
    let dir = scratch("by-path");
    let exe = std::fs::canonicalize(env!("CARGO_BIN_EXE_rest-lite")).expect("its path");
    let (printed, code) = run_and_type(&dir, &exe, &[], "/usr/bin:/bin");
    assert!(
        printed.ends_with(&format!(" {} status waits", exe.display())),
        "{printed}"
    );
    assert_eq!(code, 143);
}

#[test]
fn under_cargo_run_the_same_cargo_run() {
    let dir = scratch("cargo-run");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let cargo = bin.join("cargo");
    std::fs::write(
        &cargo,
        "#!/bin/sh\n# Plays `cargo run`: rest-lite with the arguments after `--`, in cargo's environment.\nwhile [ \"$#\" -gt 0 ] && [ \"$1\" != -- ]; do shift; done\nshift\nCARGO=\"$0\" CARGO_PKG_NAME=rest-lite \"$REST_LITE_BIN\" \"$@\"\n",
    )
    .expect("cargo");
    std::fs::set_permissions(&cargo, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let (printed, code) = run_and_type(&dir, &cargo, &["run", "-p", "rest-lite", "--"], &path);
    assert!(
        printed.ends_with(" cargo run -p rest-lite -- status waits"),
        "{printed}"
    );
    assert_eq!(code, 143);
}
