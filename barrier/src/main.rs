//! `barrier [OUTPUT_DIR]`: frameworkbarrier's job, by watch instead of poll. Waits until
//! every task of `$FC_FRAMEWORK_NAMESPACE/$FC_FRAMEWORK_NAME` has an address, writes
//! `framework.json`, `peers.json` and frameworkbarrier's `injector.sh` into OUTPUT_DIR
//! (default: the current directory), and exits 0; 201 on timeout, 210 when the Framework does not exist, 1 otherwise.

use std::path::PathBuf;
use std::process::ExitCode;

use pai_barrier::{BarrierConfig, BarrierError, kube_source, output};

fn main() -> ExitCode {
    pai_barrier::logging::init();
    let dir = std::env::args_os()
        .nth(1)
        .map_or_else(|| PathBuf::from("."), PathBuf::from);
    match run(&dir) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let code = error.exit_code();
            tracing::error!(exit_code = code.code(), "barrier failed: {error}");
            ExitCode::from(u8::try_from(code.code()).unwrap_or(1))
        }
    }
}

fn run(dir: &std::path::Path) -> Result<(), BarrierError> {
    let config = BarrierConfig::from_env(|k| std::env::var(k).ok())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| BarrierError::Other(format!("cannot start the runtime: {e}")))?;
    let passed = runtime.block_on(async {
        let apiserver = std::env::var(pai_contract::env::KUBE_APISERVER_ADDRESS).ok();
        let client = kube_source::client(apiserver.as_deref()).await?;
        kube_source::wait(client, &config).await
    })?;
    // frameworkbarrier's image makes its output directory when nothing is mounted there.
    std::fs::create_dir_all(dir)
        .map_err(|e| BarrierError::Other(format!("cannot make {}: {e}", dir.display())))?;
    output::write(dir, passed.framework.as_deref(), &passed.peers)
        .and_then(|()| output::write_injector(dir, &passed.peers))
        .map_err(|e| BarrierError::Other(format!("cannot write to {}: {e}", dir.display())))
}
