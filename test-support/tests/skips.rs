//! A skip shows in a plain `cargo test` (without `--nocapture`): this binary runs itself
//! again, its probe test alone, and reads what the probe's run printed.

use std::process::{Command, Stdio};

/// Set in the run of this binary that the probe's skip is read from.
const PROBE: &str = "PAI_TEST_SUPPORT_SKIP_PROBE";

/// The skip being read, where [`PROBE`] is set; elsewhere it does nothing.
#[test]
fn probe() {
    if std::env::var_os(PROBE).is_none() {
        return;
    }
    let went_on = pai_test_support::needs::present("probe-thing", false, "get it");
    assert!(!went_on, "present says to skip");
}

struct Run {
    success: bool,
    /// Its standard output and standard error, as one file, in the order written.
    output: String,
}

/// This binary's probe alone, as `cargo test` runs it (captured), with `CI` as given.
fn probe_run(ci: Option<&str>, skips_file: &std::path::Path) -> Run {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let output_path = dir.path().join("output");
    let output = std::fs::File::create(&output_path).expect("the output's file");
    let mut command = Command::new(std::env::current_exe().expect("this binary"));
    command
        .args(["--exact", "probe", "--test-threads=1"])
        .env(PROBE, "1")
        .env(pai_test_support::needs::SKIPS_FILE, skips_file)
        .env_remove("CI")
        .env_remove("RUST_TEST_NOCAPTURE")
        .stdin(Stdio::null())
        .stdout(output.try_clone().expect("dup"))
        .stderr(output);
    if let Some(ci) = ci {
        command.env("CI", ci);
    }
    let status = command.status().expect("this binary runs");
    Run {
        success: status.success(),
        output: std::fs::read_to_string(&output_path).expect("read the output"),
    }
}

#[test]
fn a_skip_shows_without_nocapture_and_is_counted_after_the_result() {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let skips_file = dir.path().join("skips");
    let run = probe_run(None, &skips_file);
    let out = &run.output;
    assert!(run.success, "{out}");
    let skip = out
        .lines()
        // With one test thread libtest has written `test probe ... ` before the test runs.
        .position(|l| l.ends_with("SKIPPED: probe: needs probe-thing, which is missing: get it"))
        .unwrap_or_else(|| panic!("no SKIPPED line naming the probe: {out}"));
    let result = out
        .lines()
        .position(|l| l.starts_with("test result: ok. 1 passed"))
        .unwrap_or_else(|| panic!("no result line: {out}"));
    assert!(skip < result, "{out}");
    assert_eq!(
        out.lines().rfind(|l| !l.is_empty()),
        Some("1 test skipped here for want of: probe-thing (1)"),
        "the summary ends the output: {out}"
    );
    let binary = std::env::current_exe().expect("this binary");
    let binary = binary.file_name().expect("a name").to_string_lossy();
    assert_eq!(
        std::fs::read_to_string(&skips_file).expect("the skips file"),
        format!("probe-thing\tprobe\t{binary}\n")
    );
}

#[test]
fn under_ci_a_missing_need_fails_the_test() {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let skips_file = dir.path().join("skips");
    let run = probe_run(Some("true"), &skips_file);
    let out = &run.output;
    assert!(!run.success, "{out}");
    assert!(
        out.contains("needs probe-thing, which is missing: get it (CI=true"),
        "{out}"
    );
    assert!(out.contains("test result: FAILED"), "{out}");
    assert!(!out.contains("SKIPPED"), "{out}");
    assert!(!skips_file.exists(), "nothing skipped under CI");
}
