//! The in-process Kubernetes API server as a process of its own, for tools that need a
//! cluster to aim at without one: `rest-lite serve --backend kube --kubeconfig FILE` over
//! it stores Frameworks (checked against FrameworkController's CRD) and runs nothing.
//!
//! `cargo run -p pai-test-support --example apiserver -- KUBECONFIG [NAMESPACE]` writes
//! the kubeconfig, prints `ready <url>` and serves until killed.

use pai_test_support::ApiServer;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let Some(kubeconfig) = args.next() else {
        eprintln!("usage: apiserver KUBECONFIG [NAMESPACE]");
        std::process::exit(2);
    };
    let namespace = args.next().unwrap_or_else(|| "jobs".to_string());
    let server = ApiServer::start().await;
    server.write_kubeconfig(std::path::Path::new(&kubeconfig), Some(&namespace));
    // The one line a caller waits for.
    let mut out = std::io::stdout().lock();
    let _ = std::io::Write::write_all(&mut out, format!("ready {}\n", server.url()).as_bytes());
    let _ = std::io::Write::flush(&mut out);
    drop(out);
    std::future::pending::<()>().await;
}
