//! The `rest-lite transform` command, run as a user runs it.

use crate::common;

use std::io::Write;
use std::process::{Output, Stdio};

fn rest_lite(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = crate::common::rest_lite_command()
        .args(args)
        .current_dir(common::repo_root())
        .env_remove("REST_LITE_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rest-lite");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).expect("write stdin");
    }
    drop(input);
    child.wait_with_output().expect("wait")
}

#[test]
fn transform_prints_the_framework_as_yaml_and_json() {
    let yaml = rest_lite(
        &[
            "transform",
            "examples/tensorflow-ps-worker.json",
            "--user",
            "alice",
            "--seed",
            "42",
        ],
        None,
    );
    assert!(
        yaml.status.success(),
        "{}",
        String::from_utf8_lossy(&yaml.stderr)
    );
    let from_yaml: pai_contract::Framework =
        serde_saphyr::from_str(std::str::from_utf8(&yaml.stdout).expect("utf-8"))
            .expect("YAML Framework");

    let json = rest_lite(
        &[
            "transform",
            "examples/tensorflow-ps-worker.json",
            "-u",
            "alice",
            "--seed",
            "42",
            "-o",
            "json",
        ],
        None,
    );
    assert!(json.status.success());
    let from_json: pai_contract::Framework =
        serde_json::from_slice(&json.stdout).expect("JSON Framework");
    assert_eq!(from_yaml, from_json);
    assert_eq!(
        from_json.metadata.name.as_deref(),
        Some("93af5e74153f3719990e0964f312e19c")
    );
}

#[test]
fn transform_reads_standard_input() {
    let spec = common::base_job().to_string();
    let out = rest_lite(
        &["transform", "-", "--user", "bob", "-o", "json"],
        Some(&spec),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let framework: pai_contract::Framework = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        framework.metadata.name.as_deref(),
        Some("77436388b0a0857bd0a54187323a8f71")
    );
}

#[test]
fn a_bad_spec_exits_2_listing_every_error_on_stderr() {
    let spec = r#"{"jobName": "bad name", "image": "busybox", "taskRoles": [{"name": "ps", "taskNumber": 0, "cpuNumber": 1, "memoryMB": 1024, "command": "x"}]}"#;
    let out = rest_lite(&["transform", "-", "--user", "bob"], Some(spec));
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "nothing on stdout");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the job spec has 2 errors"), "{stderr}");
    assert!(stderr.contains("jobName: must match"), "{stderr}");
    assert!(
        stderr.contains("taskRoles[0].taskNumber: must be an integer from 1 to 10000, got 0"),
        "{stderr}"
    );
}

#[test]
fn missing_files_and_bad_configs_exit_2_with_the_reason() {
    let out = rest_lite(&["transform", "examples/nope.yaml"], None);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("reading spec examples/nope.yaml"),
        "{stderr}"
    );
    assert!(
        stderr.contains("\nhint: check the path named above"),
        "{stderr}"
    );

    let dir = common::scratch("cli", "config");
    let config = dir.join("config.yaml");
    std::fs::write(&config, "portRange: {begin: 10, end: 20}\n").expect("write");
    let out = rest_lite(
        &[
            "transform",
            "examples/shell-hello.yaml",
            "--config",
            config.to_str().expect("utf-8"),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("config field portRange: begin must be at least 1024"),
        "{stderr}"
    );
    assert!(
        stderr.contains("\nhint: correct the config field named above"),
        "{stderr}"
    );
}

#[test]
fn a_bad_user_name_exits_2() {
    let out = rest_lite(
        &["transform", "examples/shell-hello.yaml", "--user", "a b"],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("user name \"a b\""), "{stderr}");
    assert!(
        stderr.contains("\nhint: "),
        "every error ends with a hint: {stderr}"
    );
}

#[test]
fn output_cut_short_ends_quietly() {
    use std::os::unix::process::ExitStatusExt;
    // The reading end is closed before rest-lite writes anything (as `| head -0` would).
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = crate::common::rest_lite_command()
        .args([
            "transform",
            "examples/tensorflow-ps-worker.json",
            "-u",
            "alice",
        ])
        .current_dir(common::repo_root())
        .env_remove("REST_LITE_CONFIG")
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("rest-lite");
    assert_eq!(
        out.status.signal(),
        Some(13),
        "ended by SIGPIPE: {:?}",
        out.status
    );
    assert_eq!(String::from_utf8_lossy(&out.stderr), "", "nothing said");
}

/// `transform` of a job file OpenPAI published (its examples' README, with comments and
/// `killAllOnCompletedTaskNumber`) for a cluster with a file system names every field it
/// does not do as OpenPAI did, and what it does instead.
#[test]
fn transform_names_what_a_published_file_asks_that_is_done_otherwise() {
    let dir = common::scratch("cli", "transform-warned");
    let config = dir.join("config.yaml");
    std::fs::write(&config, "defaultFsUri: hdfs://namenode:9000\n").expect("config");
    let out = rest_lite(
        &[
            "transform",
            "translate/tests/fixtures/v1/pai__examples_README__623278e5__block5.json",
            "-u",
            "alice",
            "--config",
            config.to_str().expect("path"),
        ],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for warned in [
        "rest-lite: warning: killAllOnCompletedTaskNumber: obsolete in OpenPAI; the job ends once 2 tasks completed",
        "rest-lite: warning: codeDir: hdfs://path/to/code is fetched with `hdfs dfs -get` in each task's container",
    ] {
        assert!(stderr.contains(warned), "{warned}: {stderr}");
    }
}

/// A misspelt field, in every command that reads the spec here: the field it means, and
/// the line every error ends with, saying what to do next.
#[test]
fn a_misspelt_field_says_what_it_means_and_what_to_do() {
    let dir = common::scratch("cli", "misspelt");
    let spec = dir.join("job.yaml");
    std::fs::write(
        &spec,
        "jobName: misspelt\nimage: busybox\ntaskRoles:\n  - name: worker\n    taskNumber: 1\n    cpuNumber: 1\n    memoryMB: 128\n    comand: echo hi\n",
    )
    .expect("spec");
    let spec = spec.to_str().expect("path");
    // Nothing listens on the discard port: the spec is refused before any request.
    let nowhere = ["--server", "http://127.0.0.1:9"];
    for args in [
        vec!["transform", spec, "-u", "alice"],
        vec!["run", spec],
        [vec!["submit", spec, "--wait"], nowhere.to_vec()].concat(),
        [vec!["submit", spec, "--follow"], nowhere.to_vec()].concat(),
    ] {
        let out = rest_lite(&args, None);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(r#"did you mean "command""#),
            "{args:?}: {stderr}"
        );
        let last = stderr.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("hint: correct each field named above")
                && last.contains("rest-lite transform SPEC"),
            "{args:?}: {stderr}"
        );
    }
}
