//! The README's layout stays true: every source file of every crate is named in its
//! crate's row (a module `x.rs` as `` `x.rs` ``, a folder module as `` `x/` ``), and every
//! file a row names exists in that crate.

mod common;

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
fn the_readme_names_every_source_file_in_its_crates_row() {
    let root = common::repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
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
        "source files the README's layout does not name in their crate's row: {missing:#?}"
    );
    assert!(
        named_but_absent.is_empty(),
        "files the README's layout names that do not exist: {named_but_absent:#?}"
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
