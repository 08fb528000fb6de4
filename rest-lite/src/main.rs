//! `rest-lite`: the server and its command-line client in one binary. It also carries the
//! task runtime (`kube-runtime`'s code) for the embedded default: `rest-lite runtime
//! entry|run`, and `run` when installed as a task's `<root>/run`.

mod cli;

fn main() -> std::process::ExitCode {
    match pai_local::as_embedded_runtime(std::env::args().collect()) {
        Ok(status) => status,
        Err(_) => cli::run(),
    }
}
