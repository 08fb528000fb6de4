//! `kube-runtime entry` (init container) and `kube-runtime run`, also reached as
//! `<root>/run` (the main container's command).

fn main() -> std::process::ExitCode {
    pai_kube_runtime::cli::main(std::env::args().collect())
}
