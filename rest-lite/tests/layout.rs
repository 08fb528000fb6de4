//! The code's layout stays readable and docs/internals.md stays a map of it: every module
//! says what it is (its `//!` doc), every crate of the workspace has its paragraph in the
//! map, naming the crates of the workspace it depends on as its Cargo.toml does, and the
//! map stays short. Route paths are written once, long functions say why and are no
//! more than they were, files over 800 lines only shrink, the README is short, and the
//! translation builds without kube's client or axum.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;

/// The workspace's members, as the root Cargo.toml lists them (their folders).
fn members() -> Vec<String> {
    let root = common::repo_root();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let start = manifest
        .find("members = [")
        .expect("the workspace's members");
    let list = &manifest[start..];
    let list = &list[..list.find(']').expect("the members' end")];
    list.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// A Cargo.toml's `[section]`, its lines up to the next section.
fn section<'a>(manifest: &'a str, name: &str) -> Vec<&'a str> {
    manifest
        .lines()
        .skip_while(|l| l.trim() != name)
        .skip(1)
        .take_while(|l| !l.starts_with('['))
        .collect()
}

/// A member's package name, from its Cargo.toml.
fn package_name(folder: &str) -> String {
    let root = common::repo_root();
    let manifest = std::fs::read_to_string(root.join(folder).join("Cargo.toml"))
        .unwrap_or_else(|e| panic!("{folder}/Cargo.toml: {e}"));
    section(&manifest, "[package]")
        .into_iter()
        .find_map(|l| l.strip_prefix("name = "))
        .map(|n| n.trim().trim_matches('"').to_string())
        .unwrap_or_else(|| panic!("{folder}/Cargo.toml has no name"))
}

/// The workspace's crates a member's `[dependencies]` name (not its dev- or build-).
fn workspace_dependencies(folder: &str, packages: &BTreeSet<String>) -> BTreeSet<String> {
    let root = common::repo_root();
    let manifest = std::fs::read_to_string(root.join(folder).join("Cargo.toml"))
        .unwrap_or_else(|e| panic!("{folder}/Cargo.toml: {e}"));
    section(&manifest, "[dependencies]")
        .into_iter()
        .filter_map(|l| l.split(['=', '.', ' ']).next())
        .filter(|name| packages.contains(*name))
        .map(str::to_string)
        .collect()
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read the source folder") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A module's first line is its doc (`//! …`): what it is, for whoever opens it.
#[test]
fn every_module_says_what_it_is() {
    let root = common::repo_root();
    let mut undocumented = Vec::new();
    for folder in members() {
        let mut files = Vec::new();
        sources(&root.join(&folder).join("src"), &mut files);
        for file in files {
            let text = std::fs::read_to_string(&file).expect("a source file");
            if !text.trim_start().starts_with("//!") {
                undocumented.push(
                    file.strip_prefix(&root)
                        .unwrap_or(&file)
                        .display()
                        .to_string(),
                );
            }
        }
    }
    assert!(
        undocumented.is_empty(),
        "modules that do not begin with a `//!` doc saying what they are: {undocumented:#?}"
    );
}

/// docs/internals.md's paragraph of `folder`: the one that begins `` **`folder/`** ``.
fn paragraph<'a>(map: &'a str, folder: &str) -> Option<&'a str> {
    let start = map.find(&format!("\n**`{folder}/`**"))? + 1;
    let rest = &map[start..];
    Some(&rest[..rest.find("\n\n").unwrap_or(rest.len())])
}

/// The crates a paragraph's "Depends on …" sentence names.
fn said_dependencies(paragraph: &str, packages: &BTreeSet<String>) -> Option<BTreeSet<String>> {
    let flat = paragraph.split_whitespace().collect::<Vec<_>>().join(" ");
    let start = flat.find("Depends on ")?;
    let sentence = &flat[start..];
    let sentence = &sentence[..sentence.find(". ").unwrap_or(sentence.len())];
    Some(
        sentence
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|name| packages.contains(*name))
            .map(str::to_string)
            .collect(),
    )
}

/// docs/internals.md is a map: at most 400 lines, none over 300 characters, and a
/// paragraph for every crate of the workspace whose "Depends on" sentence names the
/// workspace's crates its Cargo.toml's `[dependencies]` does, no more, no fewer.
#[test]
fn the_map_has_a_paragraph_per_crate_and_stays_a_map() {
    let root = common::repo_root();
    let map = std::fs::read_to_string(root.join("docs/internals.md")).expect("docs/internals.md");
    let lines = map.lines().count();
    assert!(
        lines <= 400,
        "docs/internals.md has {lines} lines, more than 400"
    );
    let long: Vec<String> = map
        .lines()
        .enumerate()
        .filter(|(_, l)| l.chars().count() > 300)
        .map(|(n, l)| format!("line {}: {} characters", n + 1, l.chars().count()))
        .collect();
    assert!(
        long.is_empty(),
        "docs/internals.md's lines over 300 characters: {long:#?}"
    );
    let folders = members();
    let packages: BTreeSet<String> = folders.iter().map(|f| package_name(f)).collect();
    let mut wrong = Vec::new();
    for folder in &folders {
        let Some(paragraph) = paragraph(&map, folder) else {
            wrong.push(format!("{folder}/: no paragraph beginning **`{folder}/`**"));
            continue;
        };
        let cargo = workspace_dependencies(folder, &packages);
        match said_dependencies(paragraph, &packages) {
            None => wrong.push(format!(
                "{folder}/: its paragraph has no \"Depends on\" sentence"
            )),
            Some(said) if said != cargo => wrong.push(format!(
                "{folder}/: its paragraph says it depends on {said:?}, its Cargo.toml on {cargo:?}"
            )),
            Some(_) => {}
        }
    }
    assert!(wrong.is_empty(), "docs/internals.md's crates: {wrong:#?}");
}

/// `pai-translate` is the translation other tools embed: it builds without kube's client
/// (or its runtime) and without axum; `pai-client` without axum or the server;
/// `pai-server` without kube's client. `cargo tree` of each one's normal dependencies,
/// with the features building it alone resolves, says so.
#[test]
fn the_translation_the_client_and_the_server_build_without_what_they_must_not_link() {
    let root = common::repo_root();
    let cases: &[(&str, &[&str])] = &[
        (
            "pai-translate",
            &["kube-client", "kube-runtime", "axum", "hyper"],
        ),
        ("pai-client", &["axum", "pai-server", "kube-client"]),
        ("pai-server", &["kube-client", "kube-runtime"]),
    ];
    let mut linked = Vec::new();
    for (package, forbidden) in cases {
        let output = std::process::Command::new(env!("CARGO"))
            .args([
                "tree",
                "--offline",
                "-e",
                "normal",
                "--prefix",
                "none",
                "-p",
                package,
            ])
            .args(["--format", "{p}"])
            .current_dir(&root)
            .output()
            .expect("cargo tree");
        assert!(
            output.status.success(),
            "cargo tree -p {package}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let tree = String::from_utf8_lossy(&output.stdout);
        for crate_name in tree.lines().filter_map(|l| l.split(' ').next()) {
            if forbidden.contains(&crate_name) {
                linked.push(format!("{package} links {crate_name}"));
            }
        }
    }
    linked.sort();
    linked.dedup();
    assert!(
        linked.is_empty(),
        "crates linked where they must not be: {linked:#?}"
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
    for folder in members().iter().filter(|f| *f != "test-support") {
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

/// The functions of `text` (up to its unit tests) longer than `limit` lines, as
/// `(name, lines, excused)`: excused when the comment just above gives a reason
/// (`// Long: …`).
fn long_functions(text: &str, limit: usize) -> Vec<(String, usize, bool)> {
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
        if length > limit {
            found.push((name, length, reason));
        }
        i = close + 1;
    }
    found
}

/// The functions of `text` longer than `limit` lines with no reason above them, as
/// `name (lines)`.
fn long_without_reason(text: &str, limit: usize) -> Vec<String> {
    long_functions(text, limit)
        .into_iter()
        .filter(|(_, _, excused)| !excused)
        .map(|(name, length, _)| format!("{name} ({length} lines)"))
        .collect()
}

/// How many functions over 80 lines a `// Long:` reason lets through: the list only
/// shrinks. Whoever splits one lowers the number; none is added without raising it in
/// review.
const EXCUSED_LONG_FUNCTIONS: usize = 20;

/// No function over 80 lines without a reason written next to it, and no more excused
/// than [`EXCUSED_LONG_FUNCTIONS`].
#[test]
fn long_functions_say_why() {
    let root = common::repo_root();
    let mut files = Vec::new();
    for folder in members().iter().filter(|f| *f != "test-support") {
        rust_files(&root.join(folder).join("src"), &mut files);
    }
    let mut found = Vec::new();
    let mut excused = Vec::new();
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs"))
    {
        let text = std::fs::read_to_string(file).expect("a source file");
        let shown = file.strip_prefix(&root).unwrap_or(file).display();
        for (name, length, reason) in long_functions(&text, 80) {
            let entry = format!("{shown}: {name} ({length} lines)");
            if reason {
                excused.push(entry);
            } else {
                found.push(entry);
            }
        }
    }
    assert!(
        found.is_empty(),
        "functions over 80 lines with no `// Long: …` reason above them: {found:#?}"
    );
    excused.sort();
    assert_eq!(
        excused.len(),
        EXCUSED_LONG_FUNCTIONS,
        "functions over 80 lines excused by `// Long:` (the limit only shrinks: lower \
         EXCUSED_LONG_FUNCTIONS when one is split): {excused:#?}"
    );
}

/// The files that may be over 800 lines (a source file's before its unit tests, a test's
/// or bench's whole), each at most as long as it was when it was listed: a file listed
/// only shrinks, and leaves the list once it is 800 lines or fewer; no other grows past
/// 800. Split by concept into a module tree (`foo.rs` to `foo/…`), not by count.
const LARGE_FILES: &[(&str, usize)] = &[
    ("api/src/status.rs", 1003),
    ("rest-lite/tests/backends.rs", 1215),
    ("rest-lite/tests/containers.rs", 1847),
    ("rest-lite/tests/history.rs", 815),
    ("server/src/pages/view.rs", 835),
    ("translate/src/spec/validate.rs", 854),
];

/// The length that counts of a file: a source file's lines before its unit tests
/// (`#[cfg(test)]`), a test's or bench's every line.
fn counted_lines(path: &Path, text: &str) -> usize {
    let under_src = path.components().any(|c| c.as_os_str() == "src");
    if under_src {
        text.split("\n#[cfg(test)]")
            .next()
            .unwrap_or_default()
            .lines()
            .count()
    } else {
        text.lines().count()
    }
}

#[test]
fn files_stay_within_what_a_reader_holds() {
    let root = common::repo_root();
    let mut files = Vec::new();
    for folder in members() {
        for part in ["src", "tests", "benches", "examples"] {
            rust_files(&root.join(&folder).join(part), &mut files);
        }
    }
    let mut wrong = Vec::new();
    let mut listed_seen = BTreeSet::new();
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs"))
    {
        let text = std::fs::read_to_string(file).expect("a source file");
        let shown = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .display()
            .to_string();
        let lines = counted_lines(file, &text);
        match LARGE_FILES.iter().find(|(name, _)| *name == shown) {
            Some((name, ceiling)) => {
                listed_seen.insert(*name);
                if lines > *ceiling {
                    wrong.push(format!("{shown}: {lines} lines, more than its {ceiling}"));
                } else if lines <= 800 {
                    wrong.push(format!(
                        "{shown}: {lines} lines, within 800: take it off LARGE_FILES"
                    ));
                } else if lines < *ceiling {
                    wrong.push(format!(
                        "{shown}: {lines} lines, fewer than its {ceiling}: lower it in LARGE_FILES"
                    ));
                }
            }
            None if lines > 800 => wrong.push(format!("{shown}: {lines} lines, over 800")),
            None => {}
        }
    }
    for (name, _) in LARGE_FILES {
        if !listed_seen.contains(name) {
            wrong.push(format!("{name}: listed in LARGE_FILES, not there"));
        }
    }
    assert!(
        wrong.is_empty(),
        "files over what a reader holds: {wrong:#?}"
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
