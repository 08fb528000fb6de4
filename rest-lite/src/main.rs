//! `rest-lite`: the server and its command-line client in one binary. It also carries the
//! task runtime (`kube-runtime`'s code) for the embedded default: `rest-lite runtime
//! entry|run`, and `run` when installed as a task's `<root>/run`.

mod cli;

fn main() -> std::process::ExitCode {
    let mut args: Vec<String> = std::env::args().collect();
    let invoked_as_run = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .is_some_and(|name| name == pai_contract::paths::commands::RUN);
    if invoked_as_run {
        return pai_kube_runtime::cli::main(args);
    }
    if args.get(1).map(String::as_str) == Some(cli::RUNTIME_COMMAND) {
        args.remove(1);
        return pai_kube_runtime::cli::main(args);
    }
    cli::run()
}
