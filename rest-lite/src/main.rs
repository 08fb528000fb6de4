//! `rest-lite`: the server and its command-line client in one binary.

mod cli;

fn main() -> std::process::ExitCode {
    cli::run()
}
