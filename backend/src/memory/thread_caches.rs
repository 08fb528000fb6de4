//! The server runs without glibc's per-thread caches of freed blocks (its `tcache`), so
//! that what a burst of jobs freed goes back to the system (see [`super`]); `rest-lite
//! serve` and `rest-lite run` alike, which run the same server.
//!
//! Each thread keeps up to seven freed blocks of each of 64 small sizes (up to 1,032
//! bytes) for its next allocations. They are in use as far as the allocator is
//! concerned: `malloc_trim` cannot give back a page that holds one, and nothing flushes
//! another thread's cache (only its end does, and the async workers live as long as the
//! server). After 2,000 jobs the two workers' caches held some 3.5 MiB of pages that
//! nothing else used: the server without them held 19.1 MiB of anonymous memory where it
//! had held 22.5 (BENCHMARKS.md, "A long-running server's memory"; the builds side by
//! side in `benchmarks/results/2026-11-28-amd-epyc-2c-24g-vm/history-2000jobs-3.json` and
//! `history-2000jobs-allocators.json`).
//!
//! glibc reads its tunables once, as a process starts, from `GLIBC_TUNABLES`: so
//! the server starts itself again (the same process, by `execve` of
//! `/proc/self/exe`, which is this binary even if its file was replaced since) with
//! `glibc.malloc.tcache_count=0` added. The new image puts the variable back as it was
//! before anything else runs, so no task, hook or engine it starts inherits it, and takes
//! back the process's name (the kernel names it after the file executed: `exe`), so `ps`
//! and `pkill` see the server as they did. A `GLIBC_TUNABLES` that already says
//! `tcache_count` is the operator's choice and is left as it is. Other C libraries have no
//! such cache; nothing is done there.

/// glibc's variable of tunables.
const TUNABLES: &str = "GLIBC_TUNABLES";

/// The tunable added.
const NO_CACHE: &str = "glibc.malloc.tcache_count=0";

/// The tunable's name: one the operator set already is kept.
const CACHE_COUNT: &str = "glibc.malloc.tcache_count";

/// `GLIBC_TUNABLES` as the server was started with it (empty: not set), carried across
/// the `execve` so the new image can put it back.
const AS_STARTED: &str = "REST_LITE_GLIBC_TUNABLES_AS_STARTED";

/// The process's name (`/proc/self/comm`) before the `execve`, carried likewise.
const NAME_AS_STARTED: &str = "REST_LITE_NAME_AS_STARTED";

/// What became of the caches; said in the log once logging is up.
#[derive(Debug)]
pub enum Caches {
    /// This process started without them, its environment as it was given.
    Off,
    /// The operator's `GLIBC_TUNABLES` sets the count itself (or is not text), and is
    /// left as it is.
    AsSet,
    /// Not glibc: no such cache.
    NotGlibc,
    /// The new image could not be started; the caches stay (the memory of ended jobs is
    /// then partly kept).
    Kept(String),
}

impl Caches {
    /// One line in the log about it.
    pub fn log(&self) {
        match self {
            Caches::Off => tracing::debug!(
                "glibc's per-thread caches are off in this server (ended jobs' memory goes back)"
            ),
            Caches::AsSet => {
                tracing::debug!("{TUNABLES} sets {CACHE_COUNT} (or is not text): kept as it is")
            }
            Caches::NotGlibc => {}
            Caches::Kept(why) => tracing::warn!(
                "cannot start the server without glibc's per-thread caches ({why}); it keeps some memory of ended jobs"
            ),
        }
    }
}

/// Called first thing in a command that serves (`serve`, `run`), before any thread:
/// starts this process again without the caches, or, in the image so started, puts
/// `GLIBC_TUNABLES` back. Returns only when this image is the one to go on.
pub fn off_then_continue() -> Caches {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return Caches::NotGlibc;
    }
    if let Some(as_started) = std::env::var_os(AS_STARTED) {
        restore(as_started);
        return Caches::Off;
    }
    let current = match std::env::var(TUNABLES) {
        Ok(current) => current,
        Err(std::env::VarError::NotPresent) => String::new(),
        // Not text: glibc's to read as it is, not ours to rewrite.
        Err(std::env::VarError::NotUnicode(_)) => return Caches::AsSet,
    };
    match with_no_cache(&current) {
        None => Caches::AsSet,
        Some(tunables) => Caches::Kept(start_again(&tunables, &current)),
    }
}

/// `current` tunables with the caches off; `None` when they set the count already.
fn with_no_cache(current: &str) -> Option<String> {
    let sets_count = current.split(':').any(|t| {
        t.split_once('=')
            .is_some_and(|(name, _)| name == CACHE_COUNT)
    });
    if sets_count {
        return None;
    }
    Some(if current.is_empty() {
        NO_CACHE.to_string()
    } else {
        format!("{current}:{NO_CACHE}")
    })
}

/// Replaces this process's image by the same program with the same arguments and
/// `tunables`; returns why when it could not.
fn start_again(tunables: &str, current: &str) -> String {
    use std::os::unix::process::CommandExt;
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new("/proc/self/exe");
    if let Some(arg0) = args.next() {
        command.arg0(arg0);
    }
    if let Ok(name) = std::fs::read_to_string("/proc/self/comm") {
        command.env(NAME_AS_STARTED, name.trim_end_matches('\n'));
    }
    let error = command
        .args(args)
        .env(TUNABLES, tunables)
        .env(AS_STARTED, current)
        .exec();
    format!("execve of /proc/self/exe: {error}")
}

/// Puts `GLIBC_TUNABLES` and the process's name back as the server was started with them.
fn restore(as_started: std::ffi::OsString) {
    let name = std::env::var_os(NAME_AS_STARTED)
        .and_then(|n| std::ffi::CString::new(std::os::unix::ffi::OsStringExt::into_vec(n)).ok());
    if let Some(name) = name {
        // The main thread's name is the process's; the threads started later take theirs.
        let _ = nix::sys::prctl::set_name(&name);
    }
    #[allow(unsafe_code)]
    // SAFETY: called first thing in the command, before the runtime or any other thread
    // exists, so nothing reads the environment meanwhile.
    unsafe {
        if as_started.is_empty() {
            std::env::remove_var(TUNABLES);
        } else {
            std::env::set_var(TUNABLES, as_started);
        }
        std::env::remove_var(AS_STARTED);
        std::env::remove_var(NAME_AS_STARTED);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caches_are_turned_off_beside_what_the_operator_set_unless_it_sets_their_count() {
        assert_eq!(
            with_no_cache("").as_deref(),
            Some("glibc.malloc.tcache_count=0")
        );
        assert_eq!(
            with_no_cache("glibc.malloc.arena_max=4").as_deref(),
            Some("glibc.malloc.arena_max=4:glibc.malloc.tcache_count=0")
        );
        assert_eq!(
            with_no_cache("glibc.malloc.tcache_count=7:glibc.malloc.arena_max=4"),
            None
        );
        // A longer name that starts the same is another tunable.
        assert!(with_no_cache("glibc.malloc.tcache_count_x=1").is_some());
    }
}
