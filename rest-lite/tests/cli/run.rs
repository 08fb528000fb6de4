//! `rest-lite run`, a job run from the command line to its end: the quick start's one
//! command, the job's code as the exit status, a reader that went away, the commands it
//! prints, and what it says about where the tasks run.

use crate::common;

use std::process::Stdio;

use serde_json::json;

use common::jobs::{job, rest_lite, role, run_spec};
use common::serve::Server;

fn scratch(name: &str) -> common::Scratch {
    common::scratch("run", name)
}

#[test]
fn the_quick_start_runs_the_example_in_one_command() {
    let example = common::repo_root().join("examples/shell-hello.yaml");
    let (code, stdout, stderr) = run_spec(&example, &["--user", "alice"], &[]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("[server-0] every client said hello"),
        "{stdout}"
    );
    assert!(
        stdout.contains("[client-1] client 1 of 2 heard: ack: hello from client 1"),
        "{stdout}"
    );
    // In the order written, across tasks: the server says it listens before any client
    // can have heard from it.
    let listens = stdout.find("] server of").expect("the server's first line");
    assert!(
        stdout
            .find("heard: ack")
            .is_some_and(|heard| listens < heard),
        "{stdout}"
    );
    assert!(stderr.contains("job shell-hello SUCCEEDED"), "{stderr}");
}

#[test]
fn run_exits_with_the_failed_jobs_code() {
    let dir = scratch("run-fails");
    let spec = dir.join("fails.json");
    std::fs::write(
        &spec,
        job(
            "exits",
            json!([role("worker", 1, "echo about to fail; exit 3")]),
            json!({}),
        ),
    )
    .expect("spec");
    let (code, stdout, stderr) = run_spec(&spec, &[], &[]);
    assert_eq!(code, Some(3), "{stdout}\n{stderr}");
    assert!(stdout.contains("[worker-0] about to fail"), "{stdout}");
    // The runtime's own lines are not the user's output (`run -v` shows them).
    assert!(!stdout.contains("[runtime "), "{stdout}");
    assert!(stderr.contains("FAILED"), "{stderr}");
}

/// `rest-lite run spec | head`: the reader goes away, the job goes on to its end, and
/// `run` ends with its code, never a panic.
#[test]
fn run_whose_reader_went_away_ends_with_the_jobs_code() {
    let dir = scratch("run-closed-pipe");
    let spec = dir.join("many.json");
    std::fs::write(
        &spec,
        job(
            "many-lines",
            json!([role("main", 1, "seq 1 20000; echo done >&2")]),
            json!({}),
        ),
    )
    .expect("spec");
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = crate::common::rest_lite_command()
        .args(["run", spec.to_str().expect("path")])
        .stdin(Stdio::null())
        .stdout(writer.try_clone().expect("pipe"))
        .stderr(writer)
        .status()
        .expect("rest-lite");
    assert_eq!(out.code(), Some(0), "{out:?}");
}

/// The commands `run` prints for meanwhile work as printed: `status`, and `ssh` into the
/// task (where sshd and ssh are here), with no token typed: `run` records in its state
/// directory where it serves, so the command line sends that directory's token there.
#[test]
fn the_commands_run_prints_work_as_printed() {
    use std::io::BufRead;
    let dir = scratch("run-printed-commands");
    let go = dir.join("go");
    let spec = dir.join("waits.json");
    std::fs::write(
        &spec,
        job(
            "waits",
            json!([role(
                "main",
                1,
                &format!("while [ ! -e {} ]; do sleep 0.1; done", go.display())
            )]),
            json!({}),
        ),
    )
    .expect("spec");
    /// `run` and its job end with the test, even one that fails before it lets them go.
    struct Ends(std::process::Child);
    impl Drop for Ends {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut run = Ends(
        crate::common::rest_lite_command()
            .args(["run", spec.to_str().expect("path")])
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rest-lite run"),
    );
    let mut lines = std::io::BufReader::new(run.0.stderr.take().expect("stderr")).lines();
    let printed = loop {
        let line = lines
            .next()
            .expect("run printed the commands")
            .expect("a line");
        if let Some((_, rest)) = line.split_once("other commands meanwhile: ") {
            break rest.trim_end_matches(')').to_string();
        }
    };
    // `NAME=VALUE NAME=VALUE rest-lite status waits`, as a shell reads it (the tests'
    // rest-lite is on their PATH: printed_commands.rs tries the other places).
    let words: Vec<&str> = printed.split_whitespace().collect();
    let (vars, command): (Vec<&str>, Vec<&str>) = words.iter().partition(|w| w.contains('='));
    assert_eq!(command, ["rest-lite", "status", "waits"], "{printed}");
    let printed_command = |args: &[&str]| {
        let mut command = crate::common::rest_lite_command();
        for var in &vars {
            let (name, value) = var.split_once('=').expect("NAME=VALUE");
            command.env(name, value);
        }
        command
            .args(args)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .output()
            .expect("rest-lite")
    };
    let status = printed_command(&command[1..]);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("waits"),
        "{}",
        String::from_utf8_lossy(&status.stdout)
    );
    let have_ssh = ["sshd", "ssh"]
        .iter()
        .all(|p| pai_test_support::needs::program(p).is_some());
    if pai_test_support::needs::present(
        "sshd, ssh",
        have_ssh,
        "apt-get install openssh-server openssh-client",
    ) {
        // Into the task once it runs.
        while !String::from_utf8_lossy(&printed_command(&command[1..]).stdout).contains("RUNNING") {
            std::thread::yield_now();
        }
        let ssh = printed_command(&["ssh", "waits", "main", "0", "--", "echo", "in the task"]);
        assert!(
            ssh.status.success(),
            "{}",
            String::from_utf8_lossy(&ssh.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&ssh.stdout), "in the task\n");
    }
    std::fs::write(&go, "").expect("go");
    for _ in lines.by_ref() {}
    assert_eq!(run.0.wait().expect("run ends").code(), Some(0));
}

/// `run` on the host says once why the tasks run there, and its last line does not say it
/// again.
#[test]
fn run_says_where_the_tasks_run_once() {
    let dir = scratch("run-said-once");
    let spec = dir.join("hello.json");
    std::fs::write(
        &spec,
        job("hello", json!([role("main", 1, "echo hi")]), json!({})),
    )
    .expect("spec");
    let (code, stdout, stderr) = run_spec(&spec, &[], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("[main-0] hi"), "{stdout}");
    assert_eq!(stderr.matches("--engine host").count(), 1, "{stderr}");
    assert!(!stderr.contains("ran on this machine by"), "{stderr}");
}

/// A hint fits where the person is: a spec this machine refuses for what it asks (GPUs it
/// does not have) is not sent to `rest-lite transform`, which accepts it; a spec that is
/// wrong in itself is.
#[test]
fn a_refusal_of_the_place_does_not_send_the_person_to_transform() {
    let dir = scratch("hint-fits");
    let state = dir.join("state");
    let server = Server::start(&state);
    let submit = |name: &str, gpus: u32, tasks: u32| {
        let spec = dir.join(format!("{name}.json"));
        std::fs::write(
            &spec,
            json!({"jobName": name, "image": "busybox", "taskRoles": [
                {"name": "main", "taskNumber": tasks, "cpuNumber": 1, "memoryMB": 128,
                 "gpuNumber": gpus, "command": "true"}]})
            .to_string(),
        )
        .expect("spec");
        rest_lite(
            &[
                "submit",
                spec.to_str().expect("path"),
                "--server",
                &server.url,
            ],
            &[("REST_LITE_STATE_DIR", state.to_str().expect("path"))],
        )
    };
    let (code, _, stderr) = submit("gpus", 2, 1);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("GPU"), "{stderr}");
    assert!(!stderr.contains("rest-lite transform"), "{stderr}");
    let (code, _, stderr) = submit("none", 0, 0);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("hint: `rest-lite transform SPEC`"),
        "{stderr}"
    );
    // A second server of this machine, its state directory not named: the hint names it.
    let (code, _, stderr) = rest_lite(&["jobs", "--server", &server.url], &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("401") && stderr.contains("its --state-dir"),
        "{stderr}"
    );
    drop(server);
}
