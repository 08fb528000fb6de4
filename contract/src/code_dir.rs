//! A v1 job's `codeDir` on the machine its tasks run on: its size, counted as the
//! submission checks it, and its copy into a task's working directory, as the runtime
//! makes it (OpenPAI's container script copied the fetched directory into the
//! container's working directory, over whatever was there).

use std::io;
use std::path::Path;

/// OpenPAI's limit on a job's code (its container script refused more), in bytes.
pub const MAX_BYTES: u64 = 200_000_000;

/// The bytes of the regular files under `dir`, symbolic links not followed; counting
/// stops once past `stop_after`.
pub fn tree_bytes(dir: &Path, stop_after: u64) -> io::Result<u64> {
    let mut total = 0u64;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                pending.push(entry.path());
            } else if kind.is_file() {
                total += entry.metadata()?.len();
                if total > stop_after {
                    return Ok(total);
                }
            }
        }
    }
    Ok(total)
}

/// What a copy made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Copied {
    /// Regular files copied.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// Copies directory `src` into `into`, as `into/<name of src>`: directories made, files
/// copied with their permissions over any of the same name, symbolic links copied as
/// links (never followed, so nothing outside `src` is read). Refuses a tree over
/// [`MAX_BYTES`] before writing anything.
pub fn copy_into(src: &Path, into: &Path) -> io::Result<Copied> {
    let name = src
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the directory has no name"))?;
    let bytes = tree_bytes(src, MAX_BYTES)?;
    if bytes > MAX_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("more than {} MB of code", MAX_BYTES / 1_000_000),
        ));
    }
    let mut copied = Copied::default();
    let mut pending = vec![(src.to_path_buf(), into.join(name))];
    while let Some((from, to)) = pending.pop() {
        std::fs::create_dir_all(&to)?;
        std::fs::set_permissions(&to, std::fs::metadata(&from)?.permissions())?;
        for entry in std::fs::read_dir(&from)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            let target = to.join(entry.file_name());
            if kind.is_dir() {
                pending.push((entry.path(), target));
            } else if kind.is_symlink() {
                let link = std::fs::read_link(entry.path())?;
                match std::fs::remove_file(&target) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
                std::os::unix::fs::symlink(link, &target)?;
            } else if kind.is_file() {
                // Over an existing file: a link there is replaced, not written through.
                if std::fs::symlink_metadata(&target).is_ok_and(|m| m.file_type().is_symlink()) {
                    std::fs::remove_file(&target)?;
                }
                copied.bytes += std::fs::copy(entry.path(), &target)?;
                copied.files += 1;
            }
        }
    }
    Ok(copied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_is_copied_under_its_name_with_links_as_links() {
        let scratch = tempfile::Builder::new()
            .prefix("code-dir-")
            .tempdir()
            .expect("a scratch directory");
        let src = scratch.path().join("src/code");
        std::fs::create_dir_all(src.join("pkg")).unwrap();
        std::fs::write(src.join("start.sh"), "echo hi\n").unwrap();
        std::fs::write(src.join("pkg/a.py"), "x = 1\n").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", src.join("outside")).unwrap();
        let work = scratch.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let copied = copy_into(&src, &work).unwrap();
        assert_eq!(
            copied,
            Copied {
                files: 2,
                bytes: 14
            }
        );
        assert_eq!(
            std::fs::read_to_string(work.join("code/pkg/a.py")).unwrap(),
            "x = 1\n"
        );
        assert!(
            std::fs::symlink_metadata(work.join("code/outside"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        // Again, over the first copy (a retried task): the same result.
        assert_eq!(copy_into(&src, &work).unwrap(), copied);
        assert_eq!(tree_bytes(&src, u64::MAX).unwrap(), 14);
    }
}
