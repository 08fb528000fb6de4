//! The layout in docs/internals.md stays true: every source file of every crate is named in its
//! crate's row (a module `x.rs` as `` `x.rs` ``, a folder module as `` `x/` ``), and every
//! file a row names exists in that crate.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;

/// The crates' folders, as the layout's rows begin.
const CRATES: &[&str] = &[
    "contract",
    "translate",
    "api",
    "engine",
    "cluster",
    "client",
    "barrier",
    "kube-runtime",
    "local",
    "server",
    "rest-lite",
    "test-support",
];

/// The layout's row of `folder`.
fn row<'a>(layout: &'a str, folder: &str) -> &'a str {
    layout
        .lines()
        .find(|l| l.starts_with(&format!("| `{folder}/`")))
        .unwrap_or_else(|| panic!("the layout has no row for {folder}/"))
}

/// Every `.rs` file under `dir`, by its file name (`mod.rs` as its folder's `name/`).
fn sources(dir: &Path, names: &mut BTreeSet<String>, all: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).expect("read the source folder") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sources(&path, names, all);
            continue;
        }
        let Some(file) = path.file_name().and_then(|f| f.to_str()) else {
            continue;
        };
        if !file.ends_with(".rs") {
            continue;
        }
        all.insert(file.to_string());
        match file {
            "main.rs" | "lib.rs" => {}
            "mod.rs" => {
                let folder = dir.file_name().and_then(|f| f.to_str()).unwrap_or_default();
                names.insert(format!("{folder}/"));
            }
            other => {
                names.insert(other.to_string());
            }
        }
    }
}

#[test]
fn the_layout_names_every_source_file_in_its_crates_row() {
    let root = common::repo_root();
    let readme =
        std::fs::read_to_string(root.join("docs/internals.md")).expect("docs/internals.md");
    let start = readme.find("## Layout").expect("a layout section");
    let layout = &readme[start..];
    let layout = &layout[..layout[3..].find("\n## ").map_or(layout.len(), |i| i + 3)];
    let mut missing = Vec::new();
    let mut named_but_absent = Vec::new();
    for folder in CRATES {
        let row = row(layout, folder);
        let mut names = BTreeSet::new();
        let mut files = BTreeSet::new();
        sources(&root.join(folder).join("src"), &mut names, &mut files);
        for name in &names {
            if !row.contains(&format!("`{name}`")) {
                missing.push(format!("{folder}/…/{name}"));
            }
        }
        // What the row names as a Rust file must be one of the crate's (its tests and
        // build script included).
        for named in row
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|n| n.ends_with(".rs") && !n.contains(' '))
        {
            let file = named.rsplit('/').next().unwrap_or(named);
            let elsewhere = root.join(folder).join(named).is_file()
                || root.join(folder).join("tests").join(file).is_file();
            if !files.contains(file) && !elsewhere && file != "build.rs" {
                named_but_absent.push(format!("{folder}: {named}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "source files the layout (docs/internals.md) does not name in their crate's row: {missing:#?}"
    );
    assert!(
        named_but_absent.is_empty(),
        "files the layout (docs/internals.md) names that do not exist: {named_but_absent:#?}"
    );
}

/// Every `.rs` file under `dir`, by path.
fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs" || e == "hbs") {
            out.push(path);
        }
    }
}

/// A route's path is written once, in `pai_api::routes`: the router, the OpenAPI
/// document, the client, the views and the pages' templates take it from there. Comments
/// and a file's unit tests (after its `#[cfg(test)]`) may spell a path out.
#[test]
fn every_route_path_is_written_once() {
    let root = common::repo_root();
    let own = root.join("api/src/routes.rs");
    let mut files = Vec::new();
    // test-support speaks the Kubernetes API's routes, not ours.
    for folder in CRATES.iter().filter(|f| **f != "test-support") {
        rust_files(&root.join(folder).join("src"), &mut files);
    }
    rust_files(&root.join("server/templates"), &mut files);
    let spelled = [
        "\"/api/v",
        "\"/ui",
        "\"/docs",
        "\"/healthz",
        "\"/readyz",
        "\"/metrics",
    ];
    let mut found = Vec::new();
    for file in files.iter().filter(|f| **f != own) {
        let text = std::fs::read_to_string(file).expect("a source file");
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (n, line) in code.lines().enumerate() {
            let line = line.trim_start();
            if line.starts_with("//") {
                continue;
            }
            if spelled.iter().any(|s| line.contains(s)) {
                found.push(format!("{}:{}: {line}", file.display(), n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "route paths written outside pai_api::routes: {found:#?}"
    );
}

/// The functions of `text` (up to its unit tests) longer than `limit` lines whose
/// comment just above gives no reason (`// Long: …`), as `name (lines)`.
fn long_without_reason(text: &str, limit: usize) -> Vec<String> {
    let code = text.split("\n#[cfg(test)]").next().unwrap_or_default();
    let lines: Vec<&str> = code.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let signature = trimmed
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub(super) ")
            .trim_start_matches("pub ")
            .trim_start_matches("async ");
        let Some(rest) = signature.strip_prefix("fn ") else {
            i += 1;
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // The body opens where the signature ends; a declaration without one is skipped.
        let Some(open) = (i..lines.len()).find(|&j| {
            let l = lines[j].trim_end();
            l.ends_with('{') || l.ends_with(';')
        }) else {
            break;
        };
        if lines[open].trim_end().ends_with(';') {
            i = open + 1;
            continue;
        }
        let close = (open + 1..lines.len())
            .find(|&j| lines[j].len() == indent + 1 && lines[j].ends_with('}'))
            .unwrap_or(lines.len() - 1);
        let length = close - i + 1;
        let reason = lines[i.saturating_sub(4)..i]
            .iter()
            .any(|l| l.trim_start().starts_with("// Long:"));
        if length > limit && !reason {
            found.push(format!("{name} ({length} lines)"));
        }
        i = close + 1;
    }
    found
}

/// No function over 80 lines without a reason written next to it.
#[test]
fn long_functions_say_why() {
    let root = common::repo_root();
    let mut files = Vec::new();
    for folder in CRATES.iter().filter(|f| **f != "test-support") {
        rust_files(&root.join(folder).join("src"), &mut files);
    }
    let mut found = Vec::new();
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs"))
    {
        let text = std::fs::read_to_string(file).expect("a source file");
        for long in long_without_reason(&text, 80) {
            found.push(format!("{}: {long}", file.display()));
        }
    }
    assert!(
        found.is_empty(),
        "functions over 80 lines with no `// Long: …` reason above them: {found:#?}"
    );
}

#[test]
fn a_long_function_is_found_and_its_reason_read() {
    let body = "    let x = 1;\n".repeat(90);
    let text = format!(
        "fn short() {{\n}}\n\nfn long() {{\n{body}}}\n\n// Long: a table.\nfn table() {{\n{body}}}\n"
    );
    assert_eq!(long_without_reason(&text, 80), ["long (92 lines)"]);
}

/// The README is what a newcomer reads (at most 200 lines); the rest is in docs/, by
/// reader. Neither names the project's issue numbers, and every relative link in them
/// leads to a file that exists.
#[test]
fn the_readme_is_short_and_every_page_links_to_what_exists() {
    let root = common::repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    assert!(
        readme.lines().count() <= 200,
        "the README has {} lines",
        readme.lines().count()
    );
    let mut pages = vec![(root.join("README.md"), readme)];
    for entry in std::fs::read_dir(root.join("docs")).expect("docs/") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            let text = std::fs::read_to_string(&path).expect("a page");
            pages.push((path, text));
        }
    }
    for (path, text) in &pages {
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(
                !names_an_issue(line),
                "{}: an issue number: {line}",
                path.display()
            );
        }
        for target in text
            .split("](")
            .skip(1)
            .filter_map(|rest| rest.split(')').next())
        {
            let target = target.split('#').next().unwrap_or_default();
            if target.is_empty() || target.contains("://") || target.contains(' ') {
                continue;
            }
            let file = path.parent().expect("folder").join(target);
            assert!(
                file.exists(),
                "{}: a link to {target}, which is not there",
                path.display()
            );
        }
    }
}

/// Whether `line` holds `#N` (one to three digits) after a space or a parenthesis.
fn names_an_issue(line: &str) -> bool {
    let bytes = line.as_bytes();
    bytes.iter().enumerate().any(|(i, &b)| {
        let after = &bytes[i + 1..];
        let digits = after.iter().take_while(|c| c.is_ascii_digit()).count();
        b == b'#'
            && (i == 0 || matches!(bytes[i - 1], b' ' | b'('))
            && (1..=3).contains(&digits)
            && after.get(digits).is_none_or(|c| !c.is_ascii_alphanumeric())
    })
}
