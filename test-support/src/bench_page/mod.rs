//! `BENCHMARKS.md`'s tables, made from the raw results under `benchmarks/results/`
//! ([`crate::bench_results`]).
//!
//! The page is prose a person writes around blocks this module writes: each
//! `<!-- generated: NAME -->` … `<!-- /generated -->` holds what the area `NAME` makes of
//! the results ([`BLOCKS`], one function an area). A figure comes from the newest file
//! (by the time it was recorded) of its bench and variant that has it, and its row names
//! that file, so a figure measured again replaces the old one at the next `--write`, and
//! the file, its commit and its command stay beside it. A figure that no file has is an
//! error, not a blank.
//!
//! `cargo run -q -p pai-test-support --example benchmarks -- --write` rewrites the blocks;
//! without `--write` it checks them, as `test-support/tests/benchmarks_page.rs` does
//! ([`check`]: a block that differs from what the results make, a table outside a block,
//! an issue number, a page over [`MAX_LINES`]).

use std::path::Path;

mod barrier;
mod catalog;
mod cluster;
mod containers;
mod figures;
mod history;
mod memory;
mod others;
mod start;
mod translation;

pub use catalog::Catalog;
pub use figures::{AUTO, number, spread};

/// The page's name in the repository.
pub const PAGE: &str = "BENCHMARKS.md";

/// The most lines the page may have: it is read in a minute.
pub const MAX_LINES: usize = 250;

/// The command that rewrites the page's blocks.
pub const WRITE: &str = "cargo run -q -p pai-test-support --example benchmarks -- --write";

const OPEN: &str = "<!-- generated: ";
const CLOSE: &str = "<!-- /generated -->";
/// The areas, by the name their block has on the page, in the page's order: a module
/// each.
pub const BLOCKS: &[(&str, Area)] = &[
    ("translation", translation::translation),
    ("barrier", barrier::barrier),
    ("cluster", cluster::cluster),
    ("start", start::start),
    ("containers", containers::containers),
    ("memory", memory::memory),
    ("history", history::history),
    ("others", others::others),
];

/// What an area's block holds, made from the results.
pub type Area = fn(&Catalog) -> Result<String, String>;

/// `page` with every generated block made again from `catalog`.
pub fn render(page: &str, catalog: &Catalog) -> Result<String, Vec<String>> {
    let mut out = String::new();
    let mut problems = Vec::new();
    let mut inside: Option<&str> = None;
    for line in page.lines() {
        if let Some(name) = inside {
            if line.trim() == CLOSE {
                out.push_str(line);
                out.push('\n');
                inside = None;
            } else if line.starts_with(OPEN) {
                problems.push(format!("block `{name}` is not closed before the next one"));
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
        if let Some(rest) = line.trim().strip_prefix(OPEN) {
            let name = rest.trim_end_matches("-->").trim();
            inside = Some(name);
            match BLOCKS.iter().find(|(n, _)| *n == name) {
                Some((_, area)) => match area(catalog) {
                    Ok(block) => out.push_str(&block),
                    Err(e) => problems.push(format!("block `{name}`: {e}")),
                },
                None => problems.push(format!("no area makes a block `{name}`")),
            }
        } else if line.trim() == CLOSE {
            problems.push("a block's end without its start".to_string());
        }
    }
    if let Some(name) = inside {
        problems.push(format!("block `{name}` has no end ({CLOSE})"));
    }
    for (name, _) in BLOCKS {
        if !page.contains(&format!("{OPEN}{name} -->")) {
            problems.push(format!("the page has no block `{name}`"));
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

/// What is wrong with `page` against `catalog`: nothing when it is as `--write` makes
/// it and reads in a minute.
pub fn check(page: &str, catalog: &Catalog) -> Vec<String> {
    let mut problems = Vec::new();
    match render(page, catalog) {
        Err(e) => problems.extend(e),
        Ok(made) if made != page => {
            let stale: Vec<String> = blocks_of(page)
                .into_iter()
                .zip(blocks_of(&made))
                .filter(|(a, b)| a != b)
                .map(|((name, _), _)| name)
                .collect();
            problems.push(format!(
                "the page's blocks {} differ from what the results make: run `{WRITE}`",
                stale.join(", ")
            ));
        }
        Ok(_) => {}
    }
    let lines = page.lines().count();
    if lines > MAX_LINES {
        problems.push(format!("the page has {lines} lines, more than {MAX_LINES}"));
    }
    let mut inside = false;
    for (n, line) in page.lines().enumerate() {
        let n = n + 1;
        if line.trim().starts_with(OPEN) {
            inside = true;
        } else if line.trim() == CLOSE {
            inside = false;
        } else if !inside && line.trim_start().starts_with('|') {
            problems.push(format!(
                "line {n} is a table outside a generated block: every figure comes from a results file"
            ));
        }
        let bytes = line.as_bytes();
        if bytes
            .windows(2)
            .any(|w| w[0] == b'#' && w[1].is_ascii_digit())
        {
            problems.push(format!(
                "line {n} names an issue (#…): the page says what it costs, git says how it got there"
            ));
        }
    }
    problems
}

/// Each block of `page`: its name and what it holds.
fn blocks_of(page: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in page.lines() {
        if let Some(rest) = line.trim().strip_prefix(OPEN) {
            current = Some((
                rest.trim_end_matches("-->").trim().to_string(),
                String::new(),
            ));
        } else if line.trim() == CLOSE {
            blocks.extend(current.take());
        } else if let Some((_, text)) = current.as_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    blocks
}

/// The page of the repository at `root` checked against its results.
pub fn check_repository(root: &Path) -> Vec<String> {
    let page = match std::fs::read_to_string(root.join(PAGE)) {
        Ok(page) => page,
        Err(e) => return vec![format!("cannot read {PAGE}: {e}")],
    };
    match Catalog::load(&root.join("benchmarks/results")) {
        Ok(catalog) => check(&page, &catalog),
        Err(problems) => problems,
    }
}
