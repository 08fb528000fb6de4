//! A v1 job's code (`codeDir`, in `PAI_CODE_DIR`) put into the user command's working
//! directory under its own name before the command starts, as OpenPAI's container
//! script put it there: copied from a directory of this machine, or fetched with
//! `hdfs dfs -get` from HDFS (the image's Hadoop client, as OpenPAI's images had one).
//! The submission checked that the place can do it; what still fails here (the
//! directory gone, no client in the image) fails the task before the command, naming
//! `codeDir`.

use std::path::{Path, PathBuf};
use std::process::Command;

use pai_contract::code_dir;

#[derive(Debug, thiserror::Error)]
#[error("codeDir {source_dir}: {why}")]
pub struct CodeError {
    source_dir: String,
    why: String,
}

/// Puts the code `code_dir` names into `workdir`.
pub fn fetch(code_dir: &str, workdir: &Path) -> Result<(), CodeError> {
    let fail = |why: String| CodeError {
        source_dir: code_dir.to_string(),
        why,
    };
    if code_dir.starts_with("hdfs://") {
        let status = Command::new("hdfs")
            .args(["dfs", "-get", "-f", code_dir])
            .arg(workdir)
            .status()
            .map_err(|e| {
                fail(format!(
                    "cannot run `hdfs` ({e}): the image needs Hadoop's client to fetch code from HDFS"
                ))
            })?;
        if !status.success() {
            return Err(fail(format!("`hdfs dfs -get` ended with {status}")));
        }
        tracing::info!(code_dir, into = %workdir.display(), "code fetched from HDFS");
        return Ok(());
    }
    let path = PathBuf::from(code_dir.strip_prefix("file://").unwrap_or(code_dir));
    let copied = code_dir::copy_into(&path, workdir).map_err(|e| fail(e.to_string()))?;
    tracing::info!(
        code_dir,
        into = %workdir.display(),
        files = copied.files,
        bytes = copied.bytes,
        "code copied"
    );
    Ok(())
}
