//! One thread where what the server keeps past a burst of jobs is made (see
//! [`super`]).
//!
//! What a job keeps once it ended used to be made on the async workers, among the
//! blocks each running job holds for its run; once a burst of a thousand jobs ended,
//! those blocks lay one or two to a page across the workers' arenas, and the server held
//! 200 MiB where a restarted one, which makes the same blocks one after another, held 25
//! (`benchmarks/results/2026-11-28-amd-epyc-2c-24g-vm/history-2000jobs.json`: of the 203
//! MiB, 120 were the two workers' arenas, every page resident, with 11 MiB of heap in
//! use). Made here instead, on a thread that makes nothing long-lived but them, they lie
//! together as a restarted server's do, and the workers' arenas empty when the jobs end.
//!
//! [`make`] runs a short closure here and gives back what it made. The closure's own
//! temporaries are freed before the next one runs, so they leave no holes behind. What
//! was made elsewhere, it hands back to be dropped by its caller: glibc keeps a thread's
//! freed blocks in a cache of that thread's (a few of each size, whatever arena they are
//! in) and gives them to its next allocations, so a block of a worker's freed here would
//! take the next kept block back into the worker's arena. Its thread is named
//! [`THREAD_NAME`], which is how `cargo bench -p rest-lite --bench kept` tells the bytes
//! made here from the others.

use std::panic::AssertUnwindSafe;
use std::sync::OnceLock;
use std::sync::mpsc;

type Work = Box<dyn FnOnce() + Send>;

/// The keeper's thread's name (as `ps -T` and `/proc/PID/task/*/comm` show it).
pub const THREAD_NAME: &str = "keeper";

/// The keeper's queue; `None` where its thread could not be started (then [`make`] runs
/// the closure where it is called).
static KEEPER: OnceLock<Option<mpsc::Sender<Work>>> = OnceLock::new();

fn keeper() -> Option<&'static mpsc::Sender<Work>> {
    KEEPER
        .get_or_init(|| {
            let (sender, receiver) = mpsc::channel::<Work>();
            let started = std::thread::Builder::new()
                .name(THREAD_NAME.into())
                .spawn(move || {
                    for work in receiver {
                        work();
                    }
                });
            match started {
                Ok(_) => Some(sender),
                Err(e) => {
                    tracing::warn!(error = %e, "no thread for what the server keeps: made where it is asked for");
                    None
                }
            }
        })
        .as_ref()
}

/// Starts the keeper's thread now. A server calls it before its jobs run: a thread
/// started early gets an arena of its own (glibc makes one per thread up to eight per
/// core, then shares them).
pub fn start() {
    keeper();
}

/// Runs `make` on the keeper's thread and returns what it made; a panic in it is the
/// caller's.
pub async fn make<T, F>(make: F) -> T
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let (sender, receiver) = tokio::sync::oneshot::channel();
    let work: Work = Box::new(move || {
        let _ = sender.send(std::panic::catch_unwind(AssertUnwindSafe(make)));
    });
    match keeper() {
        Some(queue) => {
            // The thread never ends while the process runs; were it gone, the work
            // comes back and runs here.
            if let Err(mpsc::SendError(work)) = queue.send(work) {
                work();
            }
        }
        None => work(),
    }
    match receiver.await {
        Ok(Ok(made)) => made,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        // The work is dropped unrun only when its thread died inside another's
        // `catch_unwind`, which cannot happen.
        Err(_) => unreachable!("the keeper dropped a closure without running it"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn what_it_makes_is_made_on_its_own_thread_and_given_back() {
        let here = std::thread::current().id();
        let (made, there) = make(|| (vec![1, 2, 3], std::thread::current().id())).await;
        assert_eq!(made, vec![1, 2, 3]);
        assert_ne!(there, here, "made on the keeper's thread");
        let again = make(|| std::thread::current().id()).await;
        assert_eq!(again, there, "always the same thread");
        let name = make(|| std::thread::current().name().map(str::to_string)).await;
        assert_eq!(name.as_deref(), Some("keeper"));
    }

    #[tokio::test]
    async fn a_panic_in_it_is_the_callers_and_the_keeper_goes_on() {
        let caught = tokio::spawn(make(|| -> u32 { panic!("in the keeper") })).await;
        assert!(caught.unwrap_err().is_panic());
        assert_eq!(make(|| 7).await, 7, "the keeper still runs");
    }
}
