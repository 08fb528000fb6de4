//! The embedded default's state on disk: one directory per job under `<state>/jobs/`,
//! holding the Framework (spec as submitted in its annotation, status included) in
//! `framework.json`, replaced atomically and synced on every change. The same file is
//! the Framework the tasks' barrier watches.

use std::io::Write;
use std::path::{Path, PathBuf};

use pai_contract::Framework;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot {what} {path}: {source}")]
    Io {
        what: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a Framework: {source}")]
    Damaged {
        path: String,
        source: serde_json::Error,
    },
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        what,
        path: path.display().to_string(),
        source,
    }
}

/// The state directory.
#[derive(Clone, Debug)]
pub struct Store {
    root: PathBuf,
}

pub const FRAMEWORK_FILE: &str = "framework.json";

impl Store {
    /// Opens (creating) the state directory.
    pub fn open(root: &Path) -> Result<Self, StoreError> {
        let jobs = root.join("jobs");
        std::fs::create_dir_all(&jobs).map_err(io("create", &jobs))?;
        Ok(Self {
            root: root.to_path_buf(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of job `name` (a Framework name: DNS-1123, no path tricks).
    pub fn job_dir(&self, name: &str) -> PathBuf {
        self.root.join("jobs").join(name)
    }

    /// Where attempt `attempt`'s peer table of job `name` is published.
    pub fn peers_file(&self, name: &str, attempt: i32) -> PathBuf {
        self.job_dir(name).join(format!("peers-{attempt}.json"))
    }

    /// Writes the Framework atomically: a temporary file renamed over the old one, so a
    /// crash leaves the old or the new file, whole. `durable`: the file and the
    /// directory are synced first, so the new one survives a power loss too (a process
    /// crash loses nothing either way: the page cache is the kernel's).
    pub fn save(&self, framework: &Framework, durable: bool) -> Result<(), StoreError> {
        let name = framework.metadata.name.as_deref().unwrap_or_default();
        let dir = self.job_dir(name);
        std::fs::create_dir_all(&dir).map_err(io("create", &dir))?;
        let bytes = serde_json::to_vec(framework).map_err(|source| StoreError::Damaged {
            path: dir.display().to_string(),
            source,
        })?;
        let path = dir.join(FRAMEWORK_FILE);
        let tmp = dir.join(".framework.json.tmp");
        let mut file = std::fs::File::create(&tmp).map_err(io("create", &tmp))?;
        file.write_all(&bytes).map_err(io("write", &tmp))?;
        if durable {
            file.sync_all().map_err(io("sync", &tmp))?;
        }
        std::fs::rename(&tmp, &path).map_err(io("replace", &path))?;
        if durable {
            std::fs::File::open(&dir)
                .and_then(|d| d.sync_all())
                .map_err(io("sync", &dir))?;
        }
        Ok(())
    }

    /// Every job on disk. A job directory without a readable Framework is skipped with a
    /// warning (a crash between creating the directory and the first save).
    pub fn load_all(&self) -> Result<Vec<Framework>, StoreError> {
        let jobs = self.root.join("jobs");
        let mut frameworks = Vec::new();
        for entry in std::fs::read_dir(&jobs).map_err(io("read", &jobs))? {
            let entry = entry.map_err(io("read", &jobs))?;
            if entry.file_name().to_string_lossy().starts_with('.') {
                // A removal the server did not finish.
                let _ = std::fs::remove_dir_all(entry.path());
                continue;
            }
            let path = entry.path().join(FRAMEWORK_FILE);
            match std::fs::read(&path) {
                Ok(bytes) => match serde_json::from_slice::<Framework>(&bytes) {
                    Ok(framework) => frameworks.push(framework),
                    Err(source) => {
                        return Err(StoreError::Damaged {
                            path: path.display().to_string(),
                            source,
                        });
                    }
                },
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    tracing::warn!(dir = %entry.path().display(), "job directory without a Framework; skipped");
                }
                Err(e) => return Err(io("read", &path)(e)),
            }
        }
        Ok(frameworks)
    }

    /// Removes job `name` and everything its tasks left: first renamed out of sight in
    /// one step (a crash never leaves half a job), then deleted.
    pub fn remove(&self, name: &str) -> Result<(), StoreError> {
        let dir = self.job_dir(name);
        let gone = self.root.join("jobs").join(format!(
            ".deleted-{name}-{}",
            jiff::Timestamp::now().as_nanosecond()
        ));
        match std::fs::rename(&dir, &gone) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            result => result.map_err(io("remove", &dir))?,
        }
        std::fs::remove_dir_all(&gone).map_err(io("remove", &gone))
    }
}
