//! Scratch directories for tests: each one new (`<prefix>-` and a random suffix under
//! the temporary directory), removed when dropped: at the test's end, and also when the
//! test fails (a clean-up written at a test's end is skipped by its panic).

pub use tempfile::TempDir;

/// A new directory named after `prefix`, removed when the returned value is dropped.
pub fn scratch(prefix: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(&format!("{prefix}-"))
        .tempdir()
        .expect("a scratch directory")
}
