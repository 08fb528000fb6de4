//! The server's memory policy: what a burst of jobs took goes back to the system once the
//! jobs ended, and a long-running server holds about what a restarted one would.
//!
//! The numbers it answers to: a running one-task job takes some 50–150 KB (its loop, its
//! tasks' launches, their copies of the Framework); a finished one keeps about 6 KB in
//! some 25 small blocks (its registry entry, its deflated Framework and list row, its
//! entry in the lists' index). The aims, measured in BENCHMARKS.md ("A long-running
//! server's memory"): a server that ran N jobs holds at most 1.2× what the same build
//! restarted on their state holds once it has run one job, and grows by at most 20 KB per
//! finished job; `cargo bench -p rest-lite --bench kept` counts, by the thread that made
//! them, the bytes finished jobs keep, and fails when they are made elsewhere or grow.
//!
//! glibc's allocator (which the server and every task's runtime, the same binary, use)
//! gives a page back only when nothing on it is in use, and memory only from the top of
//! each heap unless asked. Three measures, each for one way pages stayed resident:
//!
//! - [`keeper`]: what finished jobs keep is made on one thread of its own, so that it
//!   lies together in that thread's arena as a restarted server's does, not one or two
//!   blocks to a page among the running jobs' blocks in the async workers' arenas (which
//!   held 120 of 203 MiB after 2,000 jobs before it).
//! - [`trim`]: once jobs ended, `malloc_trim` gives back every free page of every arena
//!   (at most once in ten seconds, and once more when the server settled).
//! - [`thread_caches`]: the server (`serve` and `run` alike) runs without glibc's
//!   per-thread caches of freed blocks, which pinned pages no trim could reach (3.5 MiB
//!   after 2,000 jobs); it starts itself again with the tunable, before any thread, and
//!   its tasks are not told.
//!
//! Other allocators were measured in glibc's place, each preloaded into the same build
//! and its restarted server
//! (`benchmarks/results/2026-11-28-amd-epyc-2c-24g-vm/history-2000jobs-allocators.json`):
//! after 2,000 jobs jemalloc held 91 MiB (58 with its background thread), mimalloc 74,
//! glibc with two arenas 75, against glibc's 42 and 36 without its per-thread caches.
//! jemalloc and mimalloc keep per-thread caches of their own, which pin the workers'
//! pages as glibc's did; fewer arenas mix what finished jobs keep with the workers'
//! blocks again. And every task's runtime is this binary: jemalloc with its background
//! purge cost each task 2.7 MB and three threads (`history-2000jobs-allocators.json` of
//! 2026-11-27; a 1,000-task job, 2.7 GB). glibc it is.

pub mod keeper;
pub mod thread_caches;
pub mod trim;

pub use keeper::make;
pub use trim::Trimmer;
