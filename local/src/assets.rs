//! The runtime's `prep/` and `init/` scripts, carried in this binary (see `build.rs`): a
//! `rest-lite` installed with `cargo install` or copied alone gives its tasks the same
//! ssh host keys and sshd as a source checkout does.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// One script: its path under the assets directory (`prep/…`, `init/…`) and its text.
#[derive(Debug, Clone, Copy)]
pub struct Asset {
    pub path: &'static str,
    pub text: &'static str,
}

/// Every script of `prep/` and `init/`, as they were when this binary was built.
pub const EMBEDDED: &[Asset] = include!(concat!(env!("OUT_DIR"), "/assets.rs"));

/// Writes [`EMBEDDED`] to `<state_dir>/assets` (executable, each file replaced whole by a
/// rename, so a task starting meanwhile reads the old script or the new one, never half
/// of one) and returns that directory. A file of another name left there by an older
/// binary is removed: the directory holds exactly this binary's scripts.
pub fn unpack(state_dir: &Path) -> std::io::Result<PathBuf> {
    let root = state_dir.join("assets");
    for folder in ["prep", "init"] {
        private_dir_keeping(&root.join(folder), |name| {
            let name = format!("{folder}/{name}");
            name.ends_with(".tmp") || EMBEDDED.iter().any(|a| a.path == name)
        })?;
    }
    for asset in EMBEDDED {
        write_executable(&root.join(asset.path), asset.text.as_bytes())?;
    }
    Ok(root)
}

/// `dir`, made private (0700) where it is missing, holding only the files whose names
/// `keep` keeps: the others, left there by an older binary, are removed.
pub fn private_dir_keeping(dir: &Path, keep: impl Fn(&str) -> bool) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if !keep(&entry.file_name().to_string_lossy()) {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// Writes `bytes` as the executable `path` (0755) unless it holds them already; replaced
/// whole by a rename, so a task starting meanwhile runs the old file or the new one, never
/// half of one.
pub fn write_executable(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if std::fs::metadata(path).is_ok_and(|m| m.len() == bytes.len() as u64)
        && std::fs::read(path).is_ok_and(|old| old == bytes)
    {
        return Ok(());
    }
    let temporary = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o755)
        .open(&temporary)?;
    file.write_all(bytes)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o755))?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_binary_carries_the_workspace_scripts() {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut on_disk = Vec::new();
        for folder in ["prep", "init"] {
            for entry in std::fs::read_dir(workspace.join(folder)).expect("folder") {
                let entry = entry.expect("entry");
                on_disk.push((
                    format!("{folder}/{}", entry.file_name().to_string_lossy()),
                    std::fs::read_to_string(entry.path()).expect("script"),
                ));
            }
        }
        on_disk.sort();
        let mut embedded: Vec<(String, String)> = EMBEDDED
            .iter()
            .map(|a| (a.path.to_string(), a.text.to_string()))
            .collect();
        embedded.sort();
        assert_eq!(embedded, on_disk);
        assert!(embedded.iter().any(|(p, _)| p == "init/10-sshd.sh"));
    }

    #[test]
    fn unpacking_writes_executables_and_drops_strangers() {
        let scratch = pai_test_support::scratch("pai-assets");
        let state = scratch.path();
        std::fs::create_dir_all(state.join("assets/init")).expect("dir");
        std::fs::write(state.join("assets/init/99-old.sh"), "exit 1").expect("stranger");
        let root = unpack(state).expect("unpack");
        for asset in EMBEDDED {
            let path = root.join(asset.path);
            assert_eq!(std::fs::read_to_string(&path).expect("written"), asset.text);
            let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
            assert_eq!(mode & 0o777, 0o755, "{}", asset.path);
        }
        assert!(!root.join("init/99-old.sh").exists());
        // A second start finds everything current and changes nothing.
        let before = std::fs::metadata(root.join(EMBEDDED[0].path))
            .and_then(|m| m.modified())
            .expect("mtime");
        unpack(state).expect("again");
        let after = std::fs::metadata(root.join(EMBEDDED[0].path))
            .and_then(|m| m.modified())
            .expect("mtime");
        assert_eq!(before, after);
    }
}
