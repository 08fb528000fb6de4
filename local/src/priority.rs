//! The server ahead of its tasks: a 1,000-task job starting on two cores kept every
//! request of the server waiting behind a thousand shells (`/healthz` p99 395 ms). Where
//! it may (root, or `CAP_SYS_NICE`), the server raises its threads' priority by
//! [`RAISE`] before it starts any, and its tasks' runtimes take the nice value the server
//! had ([`pai_contract::env::runtime::NICE`]): the tasks run exactly as they would have,
//! the server's few milliseconds of work per request go first. Where it may not, nothing
//! changes.

/// How many nice levels the server goes above its tasks.
pub const RAISE: i32 = 5;

/// Raises this thread's priority by [`RAISE`] (call before any other thread exists:
/// threads inherit it); the nice value tasks must take back, or `None` where the server
/// may not raise its own.
pub fn raise_server() -> Option<i32> {
    let before = rustix::process::getpriority_process(None).ok()?;
    match rustix::process::setpriority_process(None, before - RAISE) {
        Ok(()) => Some(before),
        Err(e) => {
            tracing::debug!(error = %e, "the server's priority stays that of its tasks");
            None
        }
    }
}
