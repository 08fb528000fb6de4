//! Work a test binary does once, when it exits: after libtest's result line, whether its
//! tests passed or failed (libtest's `process::exit` runs the C library's exit handlers
//! as a return from `main` does). What the tests of a process share is undone here (an
//! image in an engine's store), and what they skipped is summed up.

use std::sync::{Mutex, Once};

type Hook = Box<dyn FnOnce() + Send>;

static HOOKS: Mutex<Vec<Hook>> = Mutex::new(Vec::new());

/// Runs `hook` when the process exits, before the hooks registered before it (the last
/// registered first, as the C library runs its own).
pub fn at_exit(hook: impl FnOnce() + Send + 'static) {
    static REGISTERED: Once = Once::new();
    HOOKS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Box::new(hook));
    REGISTERED.call_once(|| {
        #[allow(unsafe_code)]
        // SAFETY: `run_hooks` is a plain `extern "C"` function that never unwinds (each
        // hook runs under `catch_unwind`); it touches only a static and what the hooks own.
        let _ = unsafe { libc::atexit(run_hooks) };
    });
}

extern "C" fn run_hooks() {
    let hooks = std::mem::take(&mut *HOOKS.lock().unwrap_or_else(|e| e.into_inner()));
    for hook in hooks.into_iter().rev() {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(hook));
    }
}
