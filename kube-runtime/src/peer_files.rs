//! The files of a task's environment that its attempt's peer table alone decides: the
//! table itself (`peers.json`), every peer's variables for scripts
//! (`peer-env-common.sh`) and for the environment (`env-peers.sh`, of the classes the
//! task's budget exports), and what those variables take ([`PeerSizes`]).
//!
//! Every task of a 1,000-task job makes the same 5,000 variables from the same table.
//! Where the tasks of a host share a directory (`PAI_RUNTIME_SHARED_DIR`, the embedded
//! default) and the table was read from a file, they are made once per host: the first
//! task makes each file into a directory named by the SHA-256 of the table's bytes, under
//! a lock, and every task hard-links it from there, as [`crate::shared`] links a copy
//! named by its own bytes. A task that finds a file there reads nothing but its name; the
//! variables are made only by a task that writes a file (at most once per process). In a
//! pod (no shared directory) every file is the task's own, made as it always was.

use std::cell::OnceCell;
use std::io::{Error, ErrorKind};
use std::path::{Path, PathBuf};

use pai_barrier::PeerTable;

use crate::budget::{self, PeerSizes};
use crate::dynamic_env::{Class, Variable, peer_vars};

/// The peer table's files for one task.
pub struct PeerFiles<'a> {
    peers: &'a PeerTable,
    /// Where this table's files are shared on this host, if they are.
    memo: Option<Memo>,
    /// Where other shared files go (copies named by their bytes), without a memo.
    shared: Option<&'a Path>,
    sizes: PeerSizes,
    vars: OnceCell<Vec<Variable>>,
}

/// The directory of one table's files on this host.
struct Memo {
    dir: PathBuf,
}

/// The file in a memo with the sizes.
const SIZES: &str = "sizes";

/// In the memo's name: a runtime that writes its files otherwise uses another directory.
const MEMO_FORMAT: &str = "v1";

impl<'a> PeerFiles<'a> {
    /// The files of `peers`, read from `table_bytes` where it was read from a file; shared
    /// through `shared` where the host's tasks share a directory.
    pub fn new(
        peers: &'a PeerTable,
        table_bytes: Option<&[u8]>,
        shared: Option<&'a Path>,
    ) -> std::io::Result<Self> {
        let memo = match (shared, table_bytes) {
            (Some(dir), Some(bytes)) => Some(Memo {
                dir: dir.join(format!(
                    "peers-{MEMO_FORMAT}-{}",
                    crate::shared::content_name(bytes)
                )),
            }),
            _ => None,
        };
        let mut files = PeerFiles {
            peers,
            memo,
            shared,
            sizes: PeerSizes::default(),
            vars: OnceCell::new(),
        };
        files.sizes = match &files.memo {
            Some(memo) => {
                let text = memo.get(SIZES, 0o444, || Ok(files.compute_sizes().to_text()))?;
                match PeerSizes::parse(&String::from_utf8_lossy(&text)) {
                    Some(sizes) => sizes,
                    None => {
                        tracing::warn!(
                            memo = %memo.dir.display(),
                            "the peers' sizes there are not what this runtime writes; counted here"
                        );
                        files.compute_sizes()
                    }
                }
            }
            None => files.compute_sizes(),
        };
        Ok(files)
    }

    /// What the peers' variables take, by class.
    pub fn sizes(&self) -> &PeerSizes {
        &self.sizes
    }

    /// `peers.json`: the table as its tasks and people read it.
    pub fn write_table(&self, path: &Path, mode: u32) -> std::io::Result<()> {
        self.put(path, "peers.json", mode, || {
            serde_json::to_vec_pretty(self.peers).map_err(Error::other)
        })
    }

    /// `peer-env-common.sh`: every peer's variable as a plain assignment, in the table's
    /// order.
    pub fn write_common(&self, path: &Path, mode: u32) -> std::io::Result<()> {
        self.put(path, "peer-env-common.sh", mode, || {
            Ok(budget::peer_env(self.vars()))
        })
    }

    /// `env-peers.sh`: the variables of the classes `exported` takes, sorted by name (so
    /// that `run` merges them instead of sorting 5,000 names per task).
    pub fn write_env(
        &self,
        path: &Path,
        mode: u32,
        exported: impl Fn(Class) -> bool,
    ) -> std::io::Result<()> {
        let classes: String = [(Class::PerPeer, 'p'), (Class::List, 'l')]
            .into_iter()
            .filter(|(class, _)| exported(*class))
            .map(|(_, letter)| letter)
            .collect();
        self.put(path, &format!("env-peers-{classes}.sh"), mode, || {
            let mut vars: Vec<&Variable> = self
                .vars()
                .iter()
                .filter(|v| exported(v.class) && !self.sizes.too_large.contains(&v.name))
                .collect();
            vars.sort_by(|a, b| a.name.cmp(&b.name));
            crate::shell::render(vars.iter().map(|v| {
                (
                    std::ffi::OsStr::new(&v.name),
                    std::ffi::OsStr::new(&v.value),
                )
            }))
            .map_err(|e| Error::new(ErrorKind::InvalidData, e.to_string()))
        })
    }

    fn vars(&self) -> &[Variable] {
        self.vars.get_or_init(|| peer_vars(self.peers))
    }

    fn compute_sizes(&self) -> PeerSizes {
        PeerSizes::of(self.vars())
    }

    /// `path` with `mode`: linked from this table's copy `name` on this host (made first
    /// if no task made it), else written with the bytes `make` gives.
    fn put(
        &self,
        path: &Path,
        name: &str,
        mode: u32,
        make: impl FnOnce() -> std::io::Result<Vec<u8>>,
    ) -> std::io::Result<()> {
        match &self.memo {
            Some(memo) => {
                let copy = memo.place(name, mode & 0o444, make)?;
                crate::shared::link_to(&copy, path)
            }
            None => crate::shared::write(path, &make()?, mode, self.shared),
        }
    }
}

impl Memo {
    /// The copy `name` (read-only, `mode`), made by `make` under the memo's lock if no
    /// task made it yet.
    fn place(
        &self,
        name: &str,
        mode: u32,
        make: impl FnOnce() -> std::io::Result<Vec<u8>>,
    ) -> std::io::Result<PathBuf> {
        let copy = self.dir.join(format!("{name}.{mode:o}"));
        // Copies are renamed into place whole: one that is there is complete.
        if copy.exists() {
            return Ok(copy);
        }
        std::fs::create_dir_all(&self.dir)?;
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.dir.join(".lock"))?;
        // The other tasks wait here while one makes it, rather than all making it at once.
        let _locked = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, errno)| Error::from(errno))?;
        if !copy.exists() {
            crate::shared::own(&copy, &make()?, mode)?;
        }
        Ok(copy)
    }

    /// The copy `name`'s bytes, made first if need be.
    fn get(
        &self,
        name: &str,
        mode: u32,
        make: impl FnOnce() -> std::io::Result<String>,
    ) -> std::io::Result<Vec<u8>> {
        let copy = self.place(name, mode, || make().map(String::into_bytes))?;
        std::fs::read(copy)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;
    use crate::dynamic_env::peer_vars;
    use pai_barrier::{Readiness, readiness};
    use pai_test_support::frameworks::{framework, set_pod_ip, to_value};

    fn table(second_ip: &str) -> (PeerTable, Vec<u8>) {
        let mut value = to_value(&framework("fw", &[("ps", 2), ("worker", 2)]));
        set_pod_ip(&mut value, "ps", 0, "10.0.0.1");
        set_pod_ip(&mut value, "ps", 1, second_ip);
        set_pod_ip(&mut value, "worker", 0, "10.0.1.1");
        set_pod_ip(&mut value, "worker", 1, "10.0.1.2");
        let framework = serde_json::from_value(value).expect("framework");
        let table = match readiness(&framework).expect("reads") {
            Readiness::Ready(table) => table,
            Readiness::Waiting(p) => panic!("not ready: {p}"),
        };
        let bytes = serde_json::to_vec(&table).expect("json");
        (table, bytes)
    }

    /// Every file of `files` into `dir`, the budget exporting `classes`.
    fn write_all(files: &PeerFiles, dir: &Path, exported: &[Class]) {
        std::fs::create_dir_all(dir).expect("dir");
        files
            .write_table(&dir.join("peers.json"), 0o644)
            .expect("table");
        files
            .write_common(&dir.join("common"), 0o600)
            .expect("common");
        files
            .write_env(&dir.join("env-peers"), 0o600, |c| exported.contains(&c))
            .expect("env");
    }

    #[test]
    fn the_files_are_made_once_per_table_and_are_what_the_table_gives() {
        let scratch = pai_test_support::scratch("peer-files");
        let shared = scratch.path().join("shared");
        let (one, one_bytes) = table("10.0.0.2");
        let (two, two_bytes) = table("10.0.0.9");
        let both = [Class::PerPeer, Class::List];
        for task in ["a", "b"] {
            let files = PeerFiles::new(&one, Some(&one_bytes), Some(&shared)).expect("files");
            write_all(&files, &scratch.path().join(task), &both);
        }
        let files = PeerFiles::new(&two, Some(&two_bytes), Some(&shared)).expect("files");
        write_all(&files, &scratch.path().join("c"), &both);
        // Without a shared directory: the task's own files.
        let files = PeerFiles::new(&one, Some(&one_bytes), None).expect("files");
        assert_eq!(files.sizes(), &budget::PeerSizes::of(&peer_vars(&one)));
        write_all(&files, &scratch.path().join("own"), &both);

        let meta = |task: &str, file: &str| {
            std::fs::metadata(scratch.path().join(task).join(file)).expect("stat")
        };
        let read = |task: &str, file: &str| {
            std::fs::read(scratch.path().join(task).join(file)).expect("read")
        };
        for file in ["peers.json", "common", "env-peers"] {
            assert_eq!(meta("a", file).ino(), meta("b", file).ino(), "{file}");
            assert_ne!(meta("a", file).ino(), meta("c", file).ino(), "{file}");
            assert_eq!(
                meta("a", file).mode() & 0o777,
                0o444 & meta("own", file).mode()
            );
            assert_eq!(meta("own", file).nlink(), 1);
            assert_eq!(read("a", file), read("own", file), "{file}");
        }
        assert_ne!(read("a", "env-peers"), read("c", "env-peers"));
        // What the table gives, as the task would have made it itself.
        assert_eq!(
            read("a", "peers.json"),
            serde_json::to_vec_pretty(&one).expect("json")
        );
        let mut vars = peer_vars(&one);
        assert_eq!(read("a", "common"), budget::peer_env(&vars));
        vars.sort_by(|a, b| a.name.cmp(&b.name));
        let rendered = crate::shell::render(vars.iter().map(|v| {
            (
                std::ffi::OsStr::new(&v.name),
                std::ffi::OsStr::new(&v.value),
            )
        }))
        .expect("render");
        assert_eq!(read("a", "env-peers"), rendered);
        // One directory per table, named by its bytes.
        let memos = std::fs::read_dir(&shared)
            .expect("shared")
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("peers-"))
            .count();
        assert_eq!(memos, 2);
    }

    #[test]
    fn a_task_whose_budget_leaves_a_class_out_gets_the_file_without_it() {
        let scratch = pai_test_support::scratch("peer-files-classes");
        let shared = scratch.path().join("shared");
        let (one, bytes) = table("10.0.0.2");
        let files = PeerFiles::new(&one, Some(&bytes), Some(&shared)).expect("files");
        write_all(
            &files,
            &scratch.path().join("all"),
            &[Class::PerPeer, Class::List],
        );
        write_all(&files, &scratch.path().join("lists"), &[Class::List]);
        let env = |task: &str| {
            let text = std::fs::read(scratch.path().join(task).join("env-peers")).expect("read");
            crate::shell::parse(&text).expect("parse")
        };
        let names = |vars: Vec<(std::ffi::OsString, std::ffi::OsString)>| -> Vec<String> {
            vars.into_iter()
                .map(|(k, _)| k.to_string_lossy().into_owned())
                .collect()
        };
        let all = names(env("all"));
        let lists = names(env("lists"));
        assert!(all.iter().any(|n| n == "PAI_HOST_IP_ps_1"));
        assert!(!lists.iter().any(|n| n == "PAI_HOST_IP_ps_1"));
        assert!(lists.iter().any(|n| n == "PAI_TASK_ROLE_ps_HOST_LIST"));
        assert!(lists.iter().all(|n| all.contains(n)));
    }

    #[test]
    fn tasks_starting_at_once_make_each_file_once() {
        let scratch = pai_test_support::scratch("peer-files-race");
        let shared = scratch.path().join("shared");
        let (one, bytes) = table("10.0.0.2");
        std::thread::scope(|scope| {
            for task in 0..8 {
                let (one, bytes, shared) = (&one, &bytes, &shared);
                let dir = scratch.path().join(format!("t{task}"));
                scope.spawn(move || {
                    let files = PeerFiles::new(one, Some(bytes), Some(shared)).expect("files");
                    write_all(&files, &dir, &[Class::PerPeer, Class::List]);
                });
            }
        });
        let inodes: std::collections::HashSet<u64> = (0..8)
            .map(|t| {
                std::fs::metadata(scratch.path().join(format!("t{t}/env-peers")))
                    .expect("stat")
                    .ino()
            })
            .collect();
        assert_eq!(inodes.len(), 1);
    }

    #[test]
    fn a_task_that_finds_the_lock_taken_waits_and_uses_what_the_holder_made() {
        use std::os::unix::fs::OpenOptionsExt;
        let scratch = pai_test_support::scratch("peer-files-lock");
        let memo = Memo {
            dir: scratch.path().join("peers-x"),
        };
        std::fs::create_dir_all(&memo.dir).expect("dir");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(memo.dir.join(".lock"))
            .expect("lock file");
        let held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| e)
            .expect("lock");
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| {
                let copy = memo
                    .place("f", 0o444, || Ok(b"made by the waiter".to_vec()))
                    .expect("place");
                std::fs::read(copy).expect("read")
            });
            // The kernel lists a task blocked on a flock with "->" in /proc/locks.
            while !std::fs::read_to_string("/proc/locks")
                .expect("/proc/locks")
                .lines()
                .any(|l| l.contains("->") && l.contains("FLOCK"))
            {
                assert!(
                    !waiter.is_finished(),
                    "the waiter did not wait for the lock"
                );
                std::thread::yield_now();
            }
            crate::shared::own(&memo.dir.join("f.444"), b"made by the holder", 0o444).expect("own");
            drop(held);
            assert_eq!(waiter.join().expect("waiter"), b"made by the holder");
        });
    }
}
