//! Files that are the same in many tasks of one host (the hostfile; the peer table's
//! files are made once per table by [`crate::peer_files`], which links them as here): where the tasks' roots share a directory for them
//! (`PAI_RUNTIME_SHARED_DIR`, the embedded default's attempt directory), each content is
//! written once and every task's file is a hard link to it. A 1,000-task job's tasks
//! would otherwise write the same half megabyte a thousand times (O(N²) bytes in all,
//! and the file system's block allocation led the profile). In a pod, the root is the
//! pod's own volume: the file is written there, as always.
//!
//! A shared copy is named by its content's SHA-256 and its mode, so two tasks that would
//! write different bytes never share one; it is read-only (a task appending to its copy would
//! change every task's), and written beside its name and linked there, so a task never
//! links a copy half written and two tasks writing at once end with one copy.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Writes `bytes` as `path` with `mode`: a hard link to the one copy in `shared` when
/// there is such a directory (the copy's mode is `mode` without write bits), else a
/// file of its own.
pub fn write(path: &Path, bytes: &[u8], mode: u32, shared: Option<&Path>) -> std::io::Result<()> {
    if let Some(dir) = shared
        && link(path, bytes, mode & 0o444, dir).is_ok()
    {
        return Ok(());
    }
    own(path, bytes, mode)
}

/// A file of its own: written beside `path`, then renamed into place.
pub fn own(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)?;
    // The umask may have taken bits away; the mode is what was asked.
    file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    file.write_all(bytes)?;
    std::fs::rename(&tmp, path)
}

fn link(path: &Path, bytes: &[u8], mode: u32, dir: &Path) -> std::io::Result<()> {
    // The mode is part of the name: the same bytes asked with another mode are another
    // copy (a link has its inode's mode).
    let name = format!("{}-{mode:o}", content_name(bytes));
    let copy = dir.join(&name);
    if std::fs::symlink_metadata(&copy).is_err() {
        std::fs::create_dir_all(dir)?;
        // Unique to this writer (tasks are processes; a test's writers are threads).
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let write = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = dir.join(format!("{name}.{}.{write}.tmp", std::process::id()));
        own(&tmp, bytes, mode)?;
        // A link, unlike a rename, never replaces: a task that put the same bytes there
        // meanwhile keeps its copy, and this one is linked to it too.
        let made = std::fs::hard_link(&tmp, &copy);
        let _ = std::fs::remove_file(&tmp);
        match made {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    link_to(&copy, path)
}

/// The name of what `bytes` hold: the first 16 bytes of their SHA-256, in hex.
pub fn content_name(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `path` as a hard link to the shared copy `copy`, replacing what was there.
pub fn link_to(copy: &Path, path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::hard_link(copy, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn the_same_bytes_are_one_read_only_file_and_others_their_own() {
        let scratch = pai_test_support::scratch("shared");
        let dir = scratch.path();
        let shared = dir.join("shared");
        for task in ["a", "b", "c"] {
            std::fs::create_dir_all(dir.join(task)).expect("dir");
        }
        write(&dir.join("a/peers"), b"same", 0o600, Some(&shared)).expect("a");
        write(&dir.join("b/peers"), b"same", 0o600, Some(&shared)).expect("b");
        write(&dir.join("c/peers"), b"other", 0o600, Some(&shared)).expect("c");
        let inode = |t: &str| std::fs::metadata(dir.join(t).join("peers")).expect("stat");
        assert_eq!(inode("a").ino(), inode("b").ino());
        assert_ne!(inode("a").ino(), inode("c").ino());
        assert_eq!(inode("a").mode() & 0o777, 0o400);
        assert_eq!(std::fs::read(dir.join("c/peers")).expect("c"), b"other");
        // Written again (an init container run again): replaced, still shared.
        write(&dir.join("a/peers"), b"same", 0o600, Some(&shared)).expect("again");
        assert_eq!(inode("a").ino(), inode("b").ino());
        // Without a shared directory: a file of its own, with its mode.
        write(&dir.join("a/own"), b"same", 0o600, None).expect("own");
        assert_eq!(inode("a").nlink(), 3, "a, b and the shared copy");
        let own = std::fs::metadata(dir.join("a/own")).expect("stat");
        assert_eq!((own.nlink(), own.mode() & 0o777), (1, 0o600));
    }

    #[test]
    fn tasks_writing_at_once_end_with_one_copy() {
        let scratch = pai_test_support::scratch("shared-race");
        let dir = scratch.path();
        let shared = dir.join("shared");
        let bytes = vec![b'x'; 256 * 1024];
        for round in 0..20 {
            let paths: Vec<_> = (0..8).map(|t| dir.join(format!("{round}-{t}"))).collect();
            std::thread::scope(|scope| {
                for path in &paths {
                    let (bytes, shared) = (&bytes, &shared);
                    std::fs::create_dir_all(path).expect("dir");
                    scope.spawn(move || {
                        let mut this = bytes.clone();
                        this.extend_from_slice(format!("{round}").as_bytes());
                        write(&path.join("f"), &this, 0o600, Some(shared)).expect("write");
                    });
                }
            });
            let inodes: std::collections::HashSet<u64> = paths
                .iter()
                .map(|p| std::fs::metadata(p.join("f")).expect("stat").ino())
                .collect();
            assert_eq!(inodes.len(), 1, "round {round}");
        }
    }
}
