//! A spec file from the command line: its text and its format.

use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result};
use pai_translate::spec::SpecFormat;

/// The spec at `path`, or standard input for `-`.
pub(crate) fn read(path: &Path) -> Result<String> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the spec from standard input")?;
        return Ok(text);
    }
    std::fs::read_to_string(path).with_context(|| format!("reading spec {}", path.display()))
}

/// By extension, else by content.
pub(crate) fn format_of(path: &Path, text: &str) -> SpecFormat {
    match path.extension().and_then(|e| e.to_str()) {
        Some("json") => SpecFormat::Json,
        Some("yaml" | "yml") => SpecFormat::Yaml,
        _ => SpecFormat::detect(text),
    }
}

/// The job name of the spec file at `path` (not standard input, read once already), for
/// a hint that names it; `None` when it cannot be read.
pub(crate) fn job_name(path: &Path) -> Option<String> {
    if path == Path::new("-") {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    let spec = pai_translate::spec::JobSpec::parse(&text, format_of(path, &text)).ok()?;
    Some(spec.name().as_str().to_string())
}

/// Whether the spec file at `path` (not standard input) parses and becomes a Framework
/// without a server, as `rest-lite transform` makes it; `None` when it cannot be read.
pub(crate) fn transforms(path: &Path) -> Option<bool> {
    if path == Path::new("-") {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    let format = format_of(path, &text);
    let Ok(spec) = pai_translate::spec::JobSpec::parse(&text, format) else {
        return Some(false);
    };
    let user_name = super::serve::unix_user();
    let Ok(user) = pai_translate::spec::UserName::parse(&user_name) else {
        return None;
    };
    let transformer =
        pai_translate::transform::Transformer::new(pai_translate::config::ClusterConfig::default());
    let submission = pai_translate::transform::Submission {
        user: &user,
        spec: &spec,
        spec_text: &text,
        format,
    };
    Some(
        transformer
            .transform(submission, pai_translate::ports::Seed::Random)
            .is_ok(),
    )
}
