//! The runtime's program on the file system of the tasks' roots.
//!
//! Each task's `entry` puts the program it runs into the task's root as `run` (the main
//! step's PID 1), by a hard link: nothing on one file system, but a whole copy on another.
//! A `rest-lite` in `/usr/local/bin` with its state directory under a `/home` of its own
//! partition copied its 60 MB into every task, 60 GB for a 1,000-task job. So the server
//! whose state directory is on another file system than its runtime's program copies the
//! program there once, at start, and its tasks run that copy: every task's `run` is a link
//! to it. The copy is named by what it was copied from (device, inode, size, time), so a
//! server started again from the same program finds it, and one started from a new build
//! makes a new one; the copies of other builds are removed then (a task still running from
//! one keeps its own links).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Where the copies live, under the state directory.
pub const DIR: &str = "programs";

/// The path tasks should run `program` from: `program` itself when it is on the file
/// system of `state_dir`, else the one copy of it under `<state_dir>/programs`, made now
/// if it is not there yet. Runs with the state directory's lock held (one writer).
pub fn beside_state(program: &Path, state_dir: &Path) -> std::io::Result<PathBuf> {
    let source = std::fs::metadata(program)?;
    let dir = state_dir.join(DIR);
    if source.dev() == std::fs::metadata(state_dir)?.dev() {
        // The copies of an earlier start from elsewhere are no longer run.
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        return Ok(program.to_path_buf());
    }
    let file_name = program
        .file_name()
        .map_or_else(|| "runtime".into(), |n| n.to_string_lossy().into_owned());
    let name = format!(
        "{file_name}.{:x}-{:x}-{:x}-{:x}.{:x}",
        source.dev(),
        source.ino(),
        source.len(),
        source.mtime(),
        source.mtime_nsec()
    );
    crate::assets::private_dir_keeping(&dir, |file| file == name)?;
    let copy = dir.join(&name);
    if std::fs::metadata(&copy).is_ok_and(|m| m.len() == source.len()) {
        return Ok(copy);
    }
    let temporary = dir.join(format!("{name}.tmp"));
    std::fs::copy(program, &temporary)?;
    std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o755))?;
    std::fs::File::open(&temporary)?.sync_all()?;
    std::fs::rename(&temporary, &copy)?;
    tracing::info!(
        program = %program.display(),
        copy = %copy.display(),
        bytes = source.len(),
        "the state directory is on another file system than the task runtime: tasks run one copy of it there"
    );
    Ok(copy)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn executable(path: &Path, bytes: &[u8]) {
        std::fs::write(path, bytes).expect("write");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("mode");
    }

    #[test]
    fn on_the_same_file_system_the_program_is_run_where_it_is() {
        let dir = tempfile::tempdir().expect("dir");
        let program = dir.path().join("rest-lite");
        executable(&program, b"#!/bin/sh\n");
        let state = dir.path().join("state");
        std::fs::create_dir_all(state.join(DIR)).expect("a copy dir of an earlier start");
        assert_eq!(beside_state(&program, &state).expect("placed"), program);
        assert!(
            !state.join(DIR).exists(),
            "an earlier start's copies are removed"
        );
    }

    /// `/dev/shm` (tmpfs) against the test's own directory on disk.
    #[test]
    fn on_another_file_system_one_copy_is_made_and_found_again() {
        let on_disk = tempfile::tempdir().expect("dir");
        let Some(elsewhere) = pai_test_support::needs::dir_on_another_file_system(on_disk.path())
        else {
            return;
        };
        let program = on_disk.path().join("rest-lite");
        executable(&program, b"#!/bin/sh\necho one\n");
        let state = elsewhere.path();
        let copy = beside_state(&program, state).expect("placed");
        assert_eq!(copy.parent(), Some(state.join(DIR).as_path()));
        assert_eq!(
            std::fs::read(&copy).expect("copy"),
            b"#!/bin/sh\necho one\n"
        );
        assert_eq!(
            std::fs::metadata(&copy).expect("copy").mode() & 0o777,
            0o755
        );
        let inode = std::fs::metadata(&copy).expect("copy").ino();

        // Started again from the same program: the same copy, not another.
        assert_eq!(beside_state(&program, state).expect("again"), copy);
        assert_eq!(std::fs::metadata(&copy).expect("copy").ino(), inode);

        // A new build in its place: a new copy, and the old one gone.
        let new = on_disk.path().join("rest-lite.new");
        executable(&new, b"#!/bin/sh\necho two, longer\n");
        std::fs::rename(&new, &program).expect("replace");
        let second = beside_state(&program, state).expect("new build");
        assert_ne!(second, copy);
        assert_eq!(
            std::fs::read(&second).expect("copy"),
            b"#!/bin/sh\necho two, longer\n"
        );
        let left: Vec<_> = std::fs::read_dir(state.join(DIR))
            .expect("dir")
            .map(|e| e.expect("entry").path())
            .collect();
        assert_eq!(left, vec![second]);
    }
}
