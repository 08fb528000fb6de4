//! Tests that need a system program or privilege: they run where it is, say what they lack
//! and skip elsewhere, and fail under `CI=true` (`.ci/run` installs everything).
//!
//! A skip has to show in a plain `cargo test`, where libtest keeps a passing test's
//! output to itself: it captures what `print!` and `eprint!` write, not the process's
//! standard error itself (rust-lang/rust#90785). So each skip is one line written
//! straight to standard error, naming the test (libtest names a test's thread after it):
//!
//! ```text
//! SKIPPED: tests::portal_renders: needs chromium, which is missing: apt-get install chromium
//! ```
//!
//! and, once the test binary is done (after libtest's `test result:` line), one line that
//! counts them: `2 tests skipped here for want of: podman (1), chromium (1)`. Where
//! [`SKIPS_FILE`] names a file, each skip is also appended to it, one tab-separated line
//! (what was missing, the test, the test binary), so that a run of the whole suite can say
//! at its end what all its binaries skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Mutex, Once};

/// The variable naming a file every skip is appended to (for a suite-level summary).
pub const SKIPS_FILE: &str = "REST_LITE_SKIPS_FILE";

/// Whether a test may go on: `found` says whether `what` is here. When it is not, outside
/// CI this says what is missing and how to get it ([`skipped`]), and the test returns
/// (skips); under `CI=true` it panics with the same words.
pub fn present(what: &str, found: bool, how: &str) -> bool {
    if found {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("needs {what}, which is missing: {how} (CI=true: .ci/run should have installed it)");
    }
    skipped(what, how);
    false
}

/// Says that the running test skips for want of `what` (`how`: how to get it), where it
/// shows and in the binary's summary, under CI too: for a test that CI cannot run either
/// (and that therefore does not go through [`present`]).
pub fn skipped(what: &str, how: &str) {
    let test = current_test();
    let line = format!("SKIPPED: {test}: needs {what}, which is missing: {how}\n");
    // Straight to the process's standard error: libtest captures only `eprint!`.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
    append_to_skips_file(what, &test);
    let mut skips = SKIPS.lock().unwrap_or_else(|p| p.into_inner());
    skips.entry(what.to_string()).or_default().insert(test);
    drop(skips);
    SUMMARY_AT_EXIT.call_once(|| crate::at_exit::at_exit(write_summary));
}

/// The running test's name, as libtest names its thread (`main` where it runs the test on
/// the main thread).
fn current_test() -> String {
    std::thread::current()
        .name()
        .unwrap_or("an unnamed thread")
        .to_string()
}

/// Appends `what`, `test` and this binary's name to [`SKIPS_FILE`]'s file where it is set;
/// one write of one line to a file opened to append, so that binaries running at once do
/// not mix their lines. A file that cannot be written is said once, on standard error.
fn append_to_skips_file(what: &str, test: &str) {
    let Some(path) = std::env::var_os(SKIPS_FILE).filter(|p| !p.is_empty()) else {
        return;
    };
    let binary = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let line = format!("{what}\t{test}\t{binary}\n");
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(line.as_bytes()));
    if let Err(e) = written {
        static TOLD: Once = Once::new();
        TOLD.call_once(|| {
            let said = format!(
                "cannot append to {SKIPS_FILE}={}: {e}\n",
                PathBuf::from(&path).display()
            );
            let _ = std::io::stderr().lock().write_all(said.as_bytes());
        });
    }
}

/// The tests that skipped in this binary, by what they lacked.
static SKIPS: Mutex<BTreeMap<String, BTreeSet<String>>> = Mutex::new(BTreeMap::new());

static SUMMARY_AT_EXIT: Once = Once::new();

/// The line that counts the skips: `N tests skipped here for want of: a (2), b (1)`, the
/// most wanted first; `None` where nothing skipped.
fn summary_line(skips: &BTreeMap<String, BTreeSet<String>>) -> Option<String> {
    let tests: BTreeSet<&String> = skips.values().flatten().collect();
    if tests.is_empty() {
        return None;
    }
    let mut wants: Vec<(&String, usize)> = skips.iter().map(|(w, t)| (w, t.len())).collect();
    wants.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    let wants: Vec<String> = wants.iter().map(|(w, n)| format!("{w} ({n})")).collect();
    let n = tests.len();
    let tests = if n == 1 { "test" } else { "tests" };
    Some(format!(
        "{n} {tests} skipped here for want of: {}\n",
        wants.join(", ")
    ))
}

/// Writes the summary line (run as the process exits, after libtest's result line: it
/// must not panic, so a poisoned lock is read as it is and a failed write is dropped).
fn write_summary() {
    let skips = SKIPS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(line) = summary_line(&skips) {
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
}

/// The first `name` on `PATH` (or in `/usr/sbin`, `/sbin`), if any.
pub fn program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// A new directory on a file system other than the one holding `than` (under `/dev/shm`,
/// a tmpfs), for tests of what crosses file systems; `None` where this machine has no such
/// `/dev/shm`, after [`present`] has said so (or panicked under CI).
pub fn dir_on_another_file_system(than: &std::path::Path) -> Option<tempfile::TempDir> {
    use std::os::unix::fs::MetadataExt;
    let device = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.dev()).ok();
    let dir = tempfile::tempdir_in("/dev/shm").ok().filter(|dir| {
        device(dir.path()).is_some_and(|shm| device(than).is_some_and(|other| shm != other))
    });
    let what = format!("a /dev/shm on another file system than {}", than.display());
    present(&what, dir.is_some(), "mount a tmpfs on /dev/shm");
    dir
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_counts_tests_by_what_they_lacked_most_first() {
        let mut skips: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        assert_eq!(summary_line(&skips), None);
        for (what, test) in [
            ("chromium", "a"),
            ("podman", "b"),
            ("podman", "c"),
            ("podman", "c"),
            ("root", "c"),
        ] {
            skips
                .entry(what.to_string())
                .or_default()
                .insert(test.to_string());
        }
        assert_eq!(
            summary_line(&skips).as_deref(),
            Some("3 tests skipped here for want of: podman (2), chromium (1), root (1)\n")
        );
    }
}
