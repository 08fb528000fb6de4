//! Tests that need a system program or privilege: they run where it is, say what they lack
//! and skip elsewhere, and fail under `CI=true` (`.ci/run` installs everything).

use std::path::PathBuf;

/// Whether a test may go on: `found` says whether `what` is here. When it is not, outside
/// CI this prints what is missing and how to get it, and the test returns (skips); under
/// `CI=true` it panics with the same words.
pub fn present(what: &str, found: bool, how: &str) -> bool {
    if found {
        return true;
    }
    let message = format!("needs {what}, which is missing: {how}");
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{message} (CI=true: .ci/run should have installed it)");
    }
    eprintln!("SKIPPED: {message}");
    false
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
