//! The embedded default's state on disk: one directory per job under `<state>/jobs/`,
//! holding the Framework (spec as submitted in its annotation, status included) in
//! `framework.json`, replaced atomically and synced on every change, and each attempt's
//! peer table. The directory is private (0700) and held by one server at a time (an
//! exclusive lock on `<state>/lock`, which names the holder's pid). The records of the
//! tasks' processes live apart from the tasks' own directories, under `<state>/pids/`.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::procs::ProcessId;

use pai_contract::Framework;

use crate::cold::Cold;
use pai_job::ssh_key::JobKey;

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
    #[error(
        "the state directory {dir} is in use by another rest-lite (pid {holder}); stop it, or give this one its own directory (--state-dir)"
    )]
    Locked { dir: String, holder: String },
}

/// A job read from disk at start.
pub(crate) enum Loaded {
    /// Its Framework, whole.
    Hot(Box<Framework>),
    /// A finished job's, deflated as it was read.
    Cold { name: String, cold: Cold },
}

/// A job directory whose Framework cannot be read: skipped at start, its name kept.
#[derive(Clone, Debug)]
pub struct Unreadable {
    /// The job's (directory's) name.
    pub name: String,
    /// Why, with the path.
    pub reason: String,
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        what,
        path: path.display().to_string(),
        source,
    }
}

/// Records a task's process at `path` (from [`Store::pid_file`]; not synced: it matters
/// only while the server that wrote it could crash, and the page cache survives that).
pub fn record_process(path: &Path, process: ProcessId) -> Result<(), StoreError> {
    if let Some(dir) = path.parent() {
        create_private(dir)?;
    }
    std::fs::write(path, process.to_string()).map_err(io("write", path))
}

/// The state directory, locked for this server while any clone of it lives.
#[derive(Clone, Debug)]
pub struct Store {
    root: PathBuf,
    _lock: Arc<File>,
}

pub const FRAMEWORK_FILE: &str = "framework.json";
/// The lock file in the state directory.
pub const LOCK_FILE: &str = "lock";

/// Creates `dir` and its missing parents; those it creates are private (0700).
fn create_private(dir: &Path) -> Result<(), StoreError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io("create", dir))
}

/// Takes the whole file's POSIX record lock (`fcntl(F_SETLK)`); false when another
/// process holds it. A record lock belongs to the process alone: a child the server forks
/// to start a task never holds it, so a server killed -9 frees it at once, and one
/// started again right away is not refused. (`flock`'s lock belongs to the open file,
/// which a child shares between its fork and its exec.) It is released when the server
/// closes its one descriptor of the file, or ends.
fn take_lock(file: &File) -> std::io::Result<bool> {
    use nix::libc;
    let whole = libc::flock {
        l_type: libc::F_WRLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    };
    match nix::fcntl::fcntl(file, nix::fcntl::FcntlArg::F_SETLK(&whole)) {
        Ok(_) => Ok(true),
        Err(nix::errno::Errno::EACCES | nix::errno::Errno::EAGAIN) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

impl Store {
    /// Opens (creating, private) the state directory and takes its lock: a second
    /// server on the same directory is refused, naming the first one's pid.
    pub fn open(root: &Path) -> Result<Self, StoreError> {
        // Tasks' directories (their environment, logs, keys) are below these two: both
        // private, also when an older version made them with the umask's mode.
        for dir in [root.join("jobs"), root.join("pids")] {
            create_private(&dir)?;
            std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .map_err(io("make private", &dir))?;
        }
        let path = root.join(LOCK_FILE);
        let mut lock = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io("open", &path))?;
        match take_lock(&lock) {
            Ok(true) => {}
            Ok(false) => {
                let mut holder = String::new();
                let _ = lock.read_to_string(&mut holder);
                let holder = holder.trim();
                return Err(StoreError::Locked {
                    dir: root.display().to_string(),
                    holder: if holder.is_empty() { "unknown" } else { holder }.to_string(),
                });
            }
            Err(e) => return Err(io("lock", &path)(e)),
        }
        // Ours: say who holds it.
        lock.set_len(0)
            .and_then(|()| lock.rewind())
            .and_then(|()| writeln!(lock, "{}", std::process::id()))
            .map_err(io("write", &path))?;
        Ok(Self {
            root: root.to_path_buf(),
            _lock: Arc::new(lock),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of job `name` (a Framework name: DNS-1123, no path tricks).
    pub fn job_dir(&self, name: &str) -> PathBuf {
        self.root.join("jobs").join(name)
    }

    /// The runtime root of task `index` of `role` in attempt `attempt` of job `name`:
    /// its files and logs, kept until the job is deleted.
    pub fn task_root(&self, name: &str, attempt: i32, role: &str, index: u32) -> PathBuf {
        self.job_dir(name)
            .join("attempts")
            .join(attempt.to_string())
            .join(format!("{role}-{index}"))
    }

    /// Where attempt `attempt`'s peer table of job `name` is published.
    /// Where the tasks of an attempt keep one copy of the files that are the same in
    /// many of them (`PAI_RUNTIME_SHARED_DIR`); removed with the job.
    pub fn shared_dir(&self, name: &str, attempt: i32) -> PathBuf {
        self.job_dir(name)
            .join("attempts")
            .join(attempt.to_string())
            .join(".shared")
    }

    /// Removes the files of job `name`'s attempts before the latest `kept` up to
    /// `current` (logs, working directories, peer tables, process records), so that a
    /// job restarted a thousand times keeps a bounded number of them. Their summaries stay
    /// in the Framework's attempt history. The number of attempts removed.
    pub fn prune_attempts(&self, name: &str, current: i32, kept: u32) -> usize {
        let oldest_kept = i64::from(current) - i64::from(kept.max(1)) + 1;
        let attempts_of = |dir: PathBuf| -> Vec<(i64, PathBuf)> {
            std::fs::read_dir(&dir)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| {
                    let n = e.file_name().to_str()?.parse::<i64>().ok()?;
                    Some((n, e.path()))
                })
                .collect()
        };
        let mut removed = 0;
        for (n, dir) in attempts_of(self.job_dir(name).join("attempts")) {
            if n < oldest_kept {
                if let Err(e) = std::fs::remove_dir_all(&dir) {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot remove an old attempt's files");
                    continue;
                }
                removed += 1;
                let _ = std::fs::remove_file(self.peers_file(name, n as i32));
            }
        }
        for (n, dir) in attempts_of(self.root.join("pids").join(name)) {
            if n < oldest_kept {
                let _ = std::fs::remove_dir_all(&dir);
            }
        }
        removed
    }

    /// A finished job's kept attempts keep what is read of them (each task's logs and
    /// termination message); the files a task needed to run (its scripts, environment
    /// files, ssh setup, the runtime's link, the attempt's shared files) and the records
    /// of its processes go. About forty small files per task become five or so. How
    /// many files and directories went.
    pub fn settle_finished(&self, name: &str) -> usize {
        let kept = |file: &std::ffi::OsStr| {
            let file = file.to_string_lossy();
            file.starts_with("container.log")
                || file == "logs"
                || file == pai_contract::results::TERMINATION_LOG_NAME
        };
        // The records of its processes, which have all ended.
        let mut removed =
            usize::from(std::fs::remove_dir_all(self.root.join("pids").join(name)).is_ok());
        let attempts = self.job_dir(name).join("attempts");
        for attempt in std::fs::read_dir(&attempts).into_iter().flatten().flatten() {
            for entry in std::fs::read_dir(attempt.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let path = entry.path();
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                if !kind.is_dir() {
                    continue;
                }
                if entry.file_name().to_string_lossy().starts_with('.') {
                    // The attempt's files shared by its tasks.
                    if std::fs::remove_dir_all(&path).is_ok() {
                        removed += 1;
                    }
                    continue;
                }
                for file in std::fs::read_dir(&path).into_iter().flatten().flatten() {
                    if kept(&file.file_name()) {
                        continue;
                    }
                    let path = file.path();
                    let gone = match file.file_type() {
                        Ok(t) if t.is_dir() => std::fs::remove_dir_all(&path),
                        _ => std::fs::remove_file(&path),
                    };
                    if gone.is_ok() {
                        removed += 1;
                    }
                }
            }
        }
        removed
    }

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
        create_private(&dir)?;
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

    /// The directory with job `name`'s ssh key pair (what a Secret's volume is in a pod).
    pub fn job_key_dir(&self, name: &str) -> PathBuf {
        self.job_dir(name).join("ssh")
    }

    /// Job `name`'s registry credentials (a v2 job's `auth`, as a `.dockerconfigjson`):
    /// beside its key pair, not in it (the key's directory is mounted into the job's
    /// init containers; this file only goes to the engine's pulls, as `--authfile`).
    pub fn registry_auth(&self, name: &str) -> PathBuf {
        self.job_dir(name).join("registry-auth.json")
    }

    /// Writes job `name`'s key pair (the private key readable by this user alone) and its
    /// registry credentials (likewise).
    pub fn save_key(&self, name: &str, key: &JobKey) -> Result<(), StoreError> {
        let dir = self.job_key_dir(name);
        create_private(&dir)?;
        if let Some(registry) = &key.registry {
            let path = self.registry_auth(name);
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&path)
                .and_then(|mut f| f.write_all(registry.as_bytes()))
                .map_err(io("write", &path))?;
        }
        for (file, text, mode) in key.files() {
            let path = dir.join(file);
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(mode)
                .open(&path)
                .and_then(|mut f| {
                    f.write_all(text.as_bytes())?;
                    if text.ends_with('\n') {
                        Ok(())
                    } else {
                        f.write_all(b"\n")
                    }
                })
                .map_err(io("write", &path))?;
        }
        Ok(())
    }

    /// Job `name`'s private key, if it has one.
    /// One file of job `name`'s key material, by its name (`training::JOB_KEY_FILE`, …).
    pub fn key(&self, name: &str, file: &str) -> Option<String> {
        std::fs::read_to_string(self.job_key_dir(name).join(file)).ok()
    }

    /// Where the process of task `index` of `role` in attempt `attempt` of job `name` is
    /// recorded: outside every task's own directory.
    pub fn pid_file(&self, name: &str, attempt: i32, role: &str, index: u32) -> PathBuf {
        self.root
            .join("pids")
            .join(name)
            .join(attempt.to_string())
            .join(format!("{role}-{index}"))
    }

    /// Every job on disk, and the job directories whose Framework cannot be read (each
    /// is logged and skipped; the server starts without it and keeps its name taken).
    /// A directory without a Framework at all (a crash before the first save) is
    /// skipped too.
    /// A finished job's Framework is deflated as it is read ([`Loaded::Cold`]): a server
    /// with many finished jobs never holds them all whole at once.
    pub(crate) fn load_all(&self) -> Result<(Vec<Loaded>, Vec<Unreadable>), StoreError> {
        let jobs = self.root.join("jobs");
        let mut frameworks = Vec::new();
        let mut unreadable = Vec::new();
        for entry in std::fs::read_dir(&jobs).map_err(io("read", &jobs))? {
            let entry = entry.map_err(io("read", &jobs))?;
            if entry.file_name().to_string_lossy().starts_with('.') {
                // A removal the server did not finish.
                let _ = std::fs::remove_dir_all(entry.path());
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path().join(FRAMEWORK_FILE);
            let reason = match std::fs::read(&path) {
                Ok(bytes) => match serde_json::from_slice::<Framework>(&bytes) {
                    Ok(framework) if framework.metadata.name.as_deref() == Some(&name) => {
                        let finished = framework.is_completed()
                            && framework.metadata.deletion_timestamp.is_none();
                        let cold = finished.then(|| Cold::of_json(&bytes, &framework));
                        frameworks.push(match cold.flatten() {
                            Some(cold) => Loaded::Cold { name, cold },
                            None => Loaded::Hot(Box::new(framework)),
                        });
                        continue;
                    }
                    Ok(framework) => format!(
                        "{} holds the Framework {:?}, not {name:?}",
                        path.display(),
                        framework.metadata.name.unwrap_or_default()
                    ),
                    Err(source) => StoreError::Damaged {
                        path: path.display().to_string(),
                        source,
                    }
                    .to_string(),
                },
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    tracing::warn!(dir = %entry.path().display(), "job directory without a Framework; skipped");
                    continue;
                }
                Err(e) => io("read", &path)(e).to_string(),
            };
            tracing::error!(job = %name, %reason, "cannot read this job; skipped (its name stays taken until the directory is moved away)");
            unreadable.push(Unreadable { name, reason });
        }
        Ok((frameworks, unreadable))
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
        std::fs::remove_dir_all(&gone).map_err(io("remove", &gone))?;
        match std::fs::remove_dir_all(self.root.join("pids").join(name)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!(job = name, error = %e, "cannot remove the job's process records");
            }
            _ => {}
        }
        Ok(())
    }
}
