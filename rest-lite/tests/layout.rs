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
