//! What the place a job runs in can do with the fields that depend on it: where a v1
//! job's code comes from (`codeDir`), which virtual cluster it names, and whether its
//! image can be pulled. Checked at
//! submission, before anything is created: a job whose code cannot reach its tasks is
//! refused with the reason, never left to fail with 127 when `cd code` finds nothing.
//!
//! OpenPAI's container script fetched `codeDir` (an HDFS directory) with `hdfs dfs -get`
//! into a directory it then copied into the container's working directory, so the
//! directory appears there under its own name (`cd code && …`); it refused more than
//! 200 MB. The runtime does the same in the task (`kube-runtime run`, before the user
//! command), from a directory of this machine or from HDFS.

use std::path::{Path, PathBuf};

use crate::config::ClusterConfig;
use crate::gang::Engine;
use crate::spec::{FieldPath, JobName, JobSpec, SpecErrors, UserName};

/// OpenPAI's limit on a job's code, in bytes.
pub const MAX_CODE_BYTES: u64 = pai_contract::code_dir::MAX_BYTES;

/// Where the job is to run.
#[derive(Clone, Copy, Debug)]
pub enum Place<'a> {
    /// The embedded default: tasks are processes of this machine; its server's config's
    /// `defaultFsUri` (empty: none).
    ThisMachine { default_fs_uri: &'a str },
    /// A cluster with this configuration.
    Cluster(&'a ClusterConfig),
}

/// A directory field with OpenPAI's placeholders filled in, as its rest-server filled
/// them (`$PAI_DEFAULT_FS_URI`, `$PAI_JOB_NAME`, `$PAI_USER_NAME` or `$PAI_USERNAME`).
pub fn resolve_dir(value: &str, user: &UserName, job: &JobName, default_fs_uri: &str) -> String {
    let mut out = value.replace("$PAI_DEFAULT_FS_URI", default_fs_uri);
    for (placeholder, with) in [
        ("$PAI_JOB_NAME", job.as_str()),
        ("$PAI_USER_NAME", user.as_str()),
        ("$PAI_USERNAME", user.as_str()),
    ] {
        out = replace_word(&out, placeholder, with);
    }
    out
}

/// `text` with each `placeholder` not followed by a word character replaced.
fn replace_word(text: &str, placeholder: &str, with: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(placeholder) {
        let after = &rest[at + placeholder.len()..];
        let continues = after
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        out.push_str(&rest[..at]);
        out.push_str(if continues { placeholder } else { with });
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Where a job's code comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CodeSource {
    /// A directory of the machine the tasks run on (an absolute path or `file://`).
    Local(PathBuf),
    /// An HDFS directory, fetched with `hdfs dfs -get`.
    Hdfs(String),
}

impl CodeSource {
    /// Reads a resolved `codeDir`; `None` when it is empty.
    pub fn parse(value: &str) -> Result<Option<Self>, String> {
        if value.is_empty() {
            return Ok(None);
        }
        if value.starts_with("hdfs://") {
            return Ok(Some(Self::Hdfs(value.to_string())));
        }
        let path = value.strip_prefix("file://").unwrap_or(value);
        if path.starts_with('/') {
            return Ok(Some(Self::Local(PathBuf::from(path))));
        }
        Err(format!(
            "{value:?} is neither a directory (an absolute path or a file:// URI) nor an hdfs:// URI"
        ))
    }
}

/// Checks the place-dependent fields of `spec` for `place`: the warnings to give, or
/// every reason it cannot run there.
// Long: one check per place-dependent field (codeDir, virtual cluster, image, resources).
pub fn check(spec: &JobSpec, user: &UserName, place: Place<'_>) -> Result<Vec<String>, SpecErrors> {
    let mut warnings = Vec::new();
    if let (Place::Cluster(config), Some(kind)) = (place, spec.gpu_type())
        && !config.gpus.types.contains_key(kind)
    {
        warnings.push(format!(
            "gpuType: {kind:?} is not used: it is not one of this cluster's GPU types ({}; config gpus.types), so any node with free GPUs takes the task",
            if config.gpus.types.is_empty() {
                "none are configured".to_string()
            } else {
                config.gpus.types.keys().cloned().collect::<Vec<_>>().join(", ")
            }
        ));
    }
    if let Place::Cluster(_) = place {
        let unpullable = spec
            .roles()
            .iter()
            .map(|r| r.image_or(spec.image()))
            .find(|image| image.chars().any(char::is_whitespace));
        if let Some(image) = unpullable {
            return Err(SpecErrors::single(
                &FieldPath::root().field("image"),
                format!(
                    "{image:?} is not an image reference (it holds white space): no node can pull it"
                ),
            ));
        }
    }
    let field = FieldPath::root().field("codeDir");
    let default_fs_uri = match place {
        Place::ThisMachine { default_fs_uri } => default_fs_uri,
        Place::Cluster(config) => config.default_fs_uri.as_str(),
    };
    let raw = &spec.legacy().code_dir;
    let refuse = |why: String| Err(SpecErrors::single(&field, why));
    if raw.contains("$PAI_DEFAULT_FS_URI") && default_fs_uri.is_empty() {
        return refuse(format!(
            "{raw:?} is on the default file system ($PAI_DEFAULT_FS_URI), and {}: set defaultFsUri in {} (e.g. defaultFsUri: hdfs://namenode:9000), or name the code's directory itself",
            match place {
                Place::ThisMachine { .. } => "this machine's server has none configured",
                Place::Cluster(_) => "this cluster's server has none configured",
            },
            match place {
                Place::ThisMachine { .. } =>
                    "a config file given to `rest-lite serve --config FILE` or `rest-lite run --config FILE`",
                Place::Cluster(_) => "the server's config (docs/operating.md, step 4)",
            }
        ));
    }
    let code = resolve_dir(raw, user, spec.name(), default_fs_uri);
    match (CodeSource::parse(&code), place) {
        (Ok(None), _) => {}
        (Err(why), _) => return refuse(why),
        (Ok(Some(CodeSource::Local(path))), Place::ThisMachine { .. }) => {
            if let Err(why) = local_code(&path) {
                return refuse(why);
            }
        }
        (Ok(Some(CodeSource::Local(path))), Place::Cluster(_)) => {
            return refuse(format!(
                "{} is a directory of the machine you submit from: a cluster's tasks cannot read it; put the code on the cluster's file system and name it with hdfs://",
                path.display()
            ));
        }
        (Ok(Some(CodeSource::Hdfs(uri))), Place::ThisMachine { .. }) => {
            let path = std::env::var("PATH").unwrap_or_default();
            if crate::warnings::on_path("hdfs", &path).is_none() {
                return refuse(format!(
                    "{uri} is on HDFS, and this machine has no HDFS client (no `hdfs` on PATH) to fetch it: install Hadoop's client, or copy the code here and name its directory"
                ));
            }
        }
        (Ok(Some(CodeSource::Hdfs(uri))), Place::Cluster(config)) => {
            if config.default_fs_uri.is_empty() {
                return refuse(format!(
                    "{uri} is on HDFS, and this cluster's server has no file system configured: set defaultFsUri in the server's config (docs/operating.md, step 4), e.g. defaultFsUri: hdfs://namenode:9000"
                ));
            }
            warnings.push(format!(
                "codeDir: {uri} is fetched with `hdfs dfs -get` in each task's container, as OpenPAI did: the image needs Hadoop's `hdfs` client"
            ));
        }
    }
    if let Some(cluster) = spec.virtual_cluster()
        && cluster != pai_contract::meta::DEFAULT_VIRTUAL_CLUSTER
    {
        let queues = match place {
            Place::ThisMachine { .. } => false,
            Place::Cluster(config) => matches!(config.gang.engine, Engine::Volcano | Engine::Kueue),
        };
        if !queues {
            let hint = if strsim::damerau_levenshtein(
                cluster,
                pai_contract::meta::DEFAULT_VIRTUAL_CLUSTER,
            ) <= 2
            {
                " (did you mean \"default\"?)"
            } else {
                ""
            };
            warnings.push(format!(
                "virtualCluster: {cluster:?}{hint} names no queue: {} has no virtual clusters (no gang engine with queues), so the job runs as every job does here",
                match place {
                    Place::ThisMachine { .. } => "this machine",
                    Place::Cluster(_) => "this cluster",
                }
            ));
        }
    }
    Ok(warnings)
}

/// A local code directory: it exists, is a directory with a name, and holds at most
/// [`MAX_CODE_BYTES`].
fn local_code(path: &Path) -> Result<(), String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("{} cannot be read: {e}", path.display()))?;
    if !meta.is_dir() {
        return Err(format!("{} is not a directory", path.display()));
    }
    if path.file_name().is_none() {
        return Err(format!(
            "{} has no name of its own to appear under in the task's directory",
            path.display()
        ));
    }
    let bytes = pai_contract::code_dir::tree_bytes(path, MAX_CODE_BYTES)
        .map_err(|e| format!("{} cannot be read: {e}", path.display()))?;
    if bytes > MAX_CODE_BYTES {
        return Err(format!(
            "{} holds more than {} MB; OpenPAI's limit for code is {} MB: keep data elsewhere (dataDir)",
            path.display(),
            MAX_CODE_BYTES / 1_000_000,
            MAX_CODE_BYTES / 1_000_000
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled_as_openpai_filled_them() {
        let user = UserName::parse("alice").unwrap();
        let job = JobName::parse("mnist").unwrap();
        assert_eq!(
            resolve_dir(
                "$PAI_DEFAULT_FS_URI/$PAI_USER_NAME/$PAI_JOB_NAME/code",
                &user,
                &job,
                "hdfs://nn:9000"
            ),
            "hdfs://nn:9000/alice/mnist/code"
        );
        // A longer name that merely starts like a placeholder is left alone.
        assert_eq!(
            resolve_dir("/x/$PAI_JOB_NAMES/$PAI_USERNAME", &user, &job, ""),
            "/x/$PAI_JOB_NAMES/alice"
        );
    }

    #[test]
    fn code_sources() {
        assert_eq!(CodeSource::parse(""), Ok(None));
        assert_eq!(
            CodeSource::parse("file:///srv/code"),
            Ok(Some(CodeSource::Local("/srv/code".into())))
        );
        assert_eq!(
            CodeSource::parse("hdfs://nn/code"),
            Ok(Some(CodeSource::Hdfs("hdfs://nn/code".into())))
        );
        assert!(CodeSource::parse("code").is_err());
        assert!(CodeSource::parse("http://x/code").is_err());
    }
}
