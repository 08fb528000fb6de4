//! `cargo bench -p rest-lite --bench kept`: what finished jobs keep, by the thread that
//! made it (`pai_backend::memory`).
//!
//! The embedded default serves the jobs API in this process, as `rest-lite run` serves
//! its job (the real `LocalBackend`, the real router, on loopback), and its tasks run
//! through the real runtime: this binary's `runtime` command, as rest-lite's own. Every
//! allocation of the process goes through a counting allocator that marks each block
//! with whether the keeper's thread (`pai_backend::memory::keeper::THREAD_NAME`) made
//! it, and keeps the bytes still in use of each kind. Two bursts of `KEPT_JOBS` one-task
//! jobs each (1,000; 100 without `--bench`), every fifth failing, are submitted by 8
//! clients, run to their ends and go cold; the growth of each count over the second
//! burst, per job, is what a finished job keeps where it was made.
//!
//! It fails (under `cargo test` as under `cargo bench`) when a finished job keeps more
//! than [`AIM_ELSEWHERE`] bytes made off the keeper's thread (kept data made on the async
//! workers lies among the running jobs' blocks and pins their pages: see
//! `pai_backend::memory::keeper`), or more than [`AIM_KEPT`] made on it (the memory per
//! finished job regressed). The figures are counted bytes, the same on every run of the
//! same code: no timing is asserted.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use pai_test_support::bench_results::Run;

/// The most bytes made off the keeper's thread a finished job may keep.
const AIM_ELSEWHERE: f64 = 512.0;

/// The most bytes made on the keeper's thread a finished job may keep (about 6 KB in
/// some 25 blocks when the aim was set).
const AIM_KEPT: f64 = 10_240.0;

const SUBMITTERS: usize = 8;

#[global_allocator]
static COUNTED: ByMaker = ByMaker;

/// Bytes in use made on the keeper's thread, and made elsewhere.
static ON_KEEPER: AtomicIsize = AtomicIsize::new(0);
static ELSEWHERE: AtomicIsize = AtomicIsize::new(0);

/// The system's allocator, each block prefixed by a byte that says which thread made it.
struct ByMaker;

const KEEPER: u8 = 1;
const OTHER: u8 = 2;

thread_local! {
    /// This thread's kind, once asked (0: not yet).
    static KIND: Cell<u8> = const { Cell::new(0) };
}

/// Whether this thread is the keeper's, by its name (read without allocating: the
/// allocator asks). std names a thread before any of its own code runs.
fn this_thread_kind() -> u8 {
    KIND.try_with(|kind| {
        if kind.get() == 0 {
            let mut name = [0u8; 16];
            #[allow(unsafe_code)]
            // SAFETY: PR_GET_NAME writes at most 16 bytes, the buffer's size.
            let named = unsafe { nix::libc::prctl(nix::libc::PR_GET_NAME, name.as_mut_ptr()) };
            let keeper = pai_backend::memory::keeper::THREAD_NAME.as_bytes();
            let is_keeper = named == 0 && name.starts_with(keeper) && name[keeper.len()] == 0;
            kind.set(if is_keeper { KEEPER } else { OTHER });
        }
        kind.get()
    })
    .unwrap_or(OTHER)
}

fn counter(kind: u8) -> &'static AtomicIsize {
    if kind == KEEPER {
        &ON_KEEPER
    } else {
        &ELSEWHERE
    }
}

/// The block asked of the system for `layout`, and where the caller's part starts in it.
fn outer(layout: Layout) -> Option<(Layout, usize)> {
    let offset = layout.align().max(16);
    let outer = Layout::from_size_align(layout.size().checked_add(offset)?, offset).ok()?;
    Some((outer, offset))
}

#[allow(unsafe_code)]
// SAFETY: every block handed out is the system's block `offset` bytes in, with the
// caller's size and alignment (the offset is a multiple of it); `dealloc` gives the
// system back the very block it handed out, by the same layout.
unsafe impl GlobalAlloc for ByMaker {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some((outer, offset)) = outer(layout) else {
            return std::ptr::null_mut();
        };
        // SAFETY: `outer`'s size is not zero (it holds the offset).
        let base = unsafe { System.alloc(outer) };
        if base.is_null() {
            return base;
        }
        let kind = this_thread_kind();
        counter(kind).fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the block is at least `offset` bytes long.
        unsafe {
            base.write(kind);
            base.add(offset)
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some((outer, offset)) = outer(layout) else {
            return;
        };
        // SAFETY: `ptr` came from `alloc` with this layout, so the block starts `offset`
        // bytes before it, and its first byte is the kind written there.
        unsafe {
            let base = ptr.sub(offset);
            counter(base.read()).fetch_sub(layout.size() as isize, Ordering::Relaxed);
            System.dealloc(base, outer);
        }
    }
}

/// The two counts now.
#[derive(Clone, Copy, Debug)]
struct Counts {
    on_keeper: isize,
    elsewhere: isize,
}

impl Counts {
    fn now() -> Self {
        Self {
            on_keeper: ON_KEEPER.load(Ordering::Relaxed),
            elsewhere: ELSEWHERE.load(Ordering::Relaxed),
        }
    }
}

fn main() -> std::process::ExitCode {
    // The tasks' runtime is this binary, as rest-lite's is.
    let args = match pai_local::as_embedded_runtime(std::env::args().collect()) {
        Ok(status) => return status,
        Err(args) => args,
    };
    let quick = !args.iter().any(|a| a == "--bench");
    let jobs: usize = std::env::var("KEPT_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 100 } else { 1_000 });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("the async runtime");
    let (before, after) = runtime.block_on(measure(jobs));
    drop(runtime);
    let per_job = |a: isize, b: isize| (a - b) as f64 / jobs as f64;
    let kept = per_job(after.on_keeper, before.on_keeper);
    let elsewhere = per_job(after.elsewhere, before.elsewhere);
    println!(
        "\n{jobs} finished jobs: each keeps {kept:.0} bytes made on the keeper's thread (aim: at most {AIM_KEPT:.0}) and {elsewhere:.0} made elsewhere (aim: at most {AIM_ELSEWHERE:.0}); in use before them: {} on the keeper's, {} elsewhere",
        before.on_keeper, before.elsewhere
    );
    let mut results = Run::new("rest-lite", "kept").variant(format!("{jobs}jobs"));
    let case = format!("{jobs} finished jobs");
    results.record(&case, "kept per job, made on the keeper", kept, "B");
    results.record(&case, "kept per job, made elsewhere", elsewhere, "B");
    results.write();
    let mut failed = false;
    if elsewhere > AIM_ELSEWHERE {
        eprintln!(
            "FAILED: a finished job keeps {elsewhere:.0} bytes made off the keeper's thread (at most {AIM_ELSEWHERE:.0}): what finished jobs keep must be made by pai_backend::memory::keeper::make"
        );
        failed = true;
    }
    if kept > AIM_KEPT {
        eprintln!(
            "FAILED: a finished job keeps {kept:.0} bytes (at most {AIM_KEPT:.0}): the memory per finished job regressed"
        );
        failed = true;
    }
    if failed {
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    }
}

/// The counts once the warm-up's jobs went cold, and once `jobs` more did.
async fn measure(jobs: usize) -> (Counts, Counts) {
    let dir = tempfile::tempdir().expect("the state directory's parent");
    let state_dir = dir.path().join("state");
    let config = pai_translate::config::ClusterConfig::default();
    let storages = Arc::new(pai_translate::storages::Registry::new(Vec::new()));
    let settings = pai_local::Settings {
        state_dir,
        runtime: pai_local::task::Runtime::embedded().expect("this binary"),
        assets: pai_local::Assets::Embedded,
        default_grace: Duration::from_secs(5),
        conflict_delay: Duration::from_secs(1),
        max_tasks: 64,
        ports: pai_local::DEFAULT_PORTS,
        containers: pai_local::ContainerSettings {
            choice: pai_local::containers::EngineChoice::Host,
            oci_runtime: None,
            runtime: None,
            outlive_server: false,
            on_host: String::new(),
        },
        gpus: Arc::new(pai_local::gpus::Gpus::default()),
        storages: storages.clone(),
        restart: config.restart_backoff.policy(),
        kept_attempts: config.kept_attempts,
        log_rotation: pai_local::log_rotation::Rotation {
            max_bytes: config.container_log_max_bytes,
            max_files: config.container_log_max_files,
        },
        retention: pai_local::retention::Retention {
            bounds: pai_backend::retention::Bounds::of(&config.retention),
            task_files_kept: Duration::from_secs(config.retention.task_files_kept_sec),
        },
    };
    let backend = pai_local::backend::LocalBackend::open(settings)
        .await
        .expect("the embedded default");
    let state = pai_server::AppState {
        storages,
        ..pai_server::AppState::new(backend.clone(), config, pai_server::auth::Access::Open)
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("loopback");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    tokio::spawn(async move { axum::serve(listener, pai_server::router(state)).await });
    // A client each, kept from the warm-up on: its one connection's buffers, and the
    // server's for it, are there before the count as after it.
    let clients: Vec<_> = (0..SUBMITTERS)
        .map(|_| Arc::new(pai_client::Client::new(&url, None)))
        .collect();

    // A first burst of as many jobs: what the server makes once (its lazy statics, the
    // first job's path) and what grows to a burst's size and stays that size for the
    // next (the runtime's queues and blocking threads, the slots' table of grants) are
    // not a finished job's.
    run_all(&clients, &backend, 0..jobs).await;
    let before = Counts::now();
    run_all(&clients, &backend, jobs..2 * jobs).await;
    let after = Counts::now();
    (before, after)
}

/// Submits the jobs numbered `range` from [`SUBMITTERS`] clients, one by one each, and returns once every
/// job so far has ended and gone cold.
async fn run_all(
    clients: &[Arc<pai_client::Client>],
    backend: &pai_local::backend::LocalBackend,
    range: std::ops::Range<usize>,
) {
    let total = range.end;
    let submitters: Vec<_> = (0..SUBMITTERS)
        .map(|s| {
            let (client, range) = (clients[s].clone(), range.clone());
            tokio::spawn(async move {
                for i in range.skip(s).step_by(SUBMITTERS) {
                    // Job i of user `u{i % 7}`, failing when i is a multiple of 5, as in
                    // the history bench.
                    let command = if i % 5 == 0 { "exit 1" } else { "true" };
                    let spec = serde_json::json!({
                        "jobName": format!("job-{i:05}"), "image": "busybox",
                        "taskRoles": [{"name": "worker", "taskNumber": 1, "cpuNumber": 1,
                            "memoryMB": 64, "command": command}],
                    })
                    .to_string();
                    client
                        .submit(
                            &format!("u{}", i % 7),
                            &spec,
                            pai_translate::spec::SpecFormat::Json,
                        )
                        .await
                        .expect("submitted");
                }
            })
        })
        .collect();
    for submitter in submitters {
        submitter.await.expect("a submitter");
    }
    // Every job cold: polled, each look a few microseconds; ten minutes at most, then the
    // jobs still whole are named.
    let since = Instant::now();
    while backend.machine().cold_rows().len() < total {
        if since.elapsed() > Duration::from_secs(600) {
            let cold: std::collections::HashSet<String> = backend
                .machine()
                .cold_rows()
                .into_iter()
                .map(|(name, _)| name)
                .collect();
            let whole: Vec<String> = backend
                .machine()
                .list(None)
                .iter()
                .filter_map(|f| f.metadata.name.clone())
                .filter(|name| !cold.contains(name))
                .collect();
            panic!(
                "{} of {total} jobs cold ten minutes after the last submission; still whole: {:?}",
                cold.len(),
                &whole[..whole.len().min(5)]
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
