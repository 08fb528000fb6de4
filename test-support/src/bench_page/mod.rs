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

use std::fmt::Write as _;
use std::path::Path;

use crate::bench_results::{Results, THIS, read_all};

mod barrier;
mod cluster;
mod containers;
mod history;
mod memory;
mod others;
mod start;
mod translation;

/// The page's name in the repository.
pub const PAGE: &str = "BENCHMARKS.md";

/// The most lines the page may have: it is read in a minute.
pub const MAX_LINES: usize = 250;

/// The command that rewrites the page's blocks.
pub const WRITE: &str = "cargo run -q -p pai-test-support --example benchmarks -- --write";

const OPEN: &str = "<!-- generated: ";
const CLOSE: &str = "<!-- /generated -->";

/// Every results file, to draw figures from.
#[derive(Debug)]
pub struct Catalog {
    files: Vec<Results>,
}

impl Catalog {
    pub fn new(files: Vec<Results>) -> Self {
        Self { files }
    }

    /// Every results file below `dir`.
    pub fn load(dir: &Path) -> Result<Self, Vec<String>> {
        read_all(dir).map(Self::new)
    }

    pub fn files(&self) -> &[Results] {
        &self.files
    }

    pub fn files_mut(&mut self) -> &mut Vec<Results> {
        &mut self.files
    }

    /// The newest file of `bench` and `variant` whose own build has every figure of
    /// `needs` (case, metric).
    fn newest(
        &self,
        bench: &str,
        variant: Option<&str>,
        needs: &[(&str, &str)],
    ) -> Result<&Results, String> {
        self.files
            .iter()
            .filter(|f| f.bench == bench && f.variant.as_deref() == variant)
            .filter(|f| needs.iter().all(|(case, metric)| f.has(case, metric)))
            .max_by(|a, b| (&a.recorded, &a.path).cmp(&(&b.recorded, &b.path)))
            .ok_or_else(|| {
                format!(
                    "no results of `{bench}`{} with {}",
                    variant.map_or(String::new(), |v| format!(" ({v})")),
                    needs
                        .iter()
                        .map(|(c, m)| format!("“{c}: {m}”"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
    }
}

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

// ----- figures

/// `value` of `from` in `to`; `None` when the two do not convert.
fn convert(value: f64, from: &str, to: &str) -> Option<f64> {
    fn scale(unit: &str) -> Option<(&'static str, f64)> {
        Some(match unit {
            "µs" => ("time", 1e-6),
            "ms" => ("time", 1e-3),
            "s" => ("time", 1.0),
            "B" => ("bytes", 1.0),
            "kB" => ("bytes", 1e3),
            "KiB" => ("bytes", 1024.0),
            "MB" => ("bytes", 1e6),
            "MiB" => ("bytes", 1024.0 * 1024.0),
            "GB" => ("bytes", 1e9),
            _ => return None,
        })
    }
    if from == to {
        return Some(value);
    }
    let (kind, a) = scale(from)?;
    let (other, b) = scale(to)?;
    (kind == other).then_some(value * a / b)
}

/// Places by the value's size, for figures that vary by orders (a page of 0.29 ms, a
/// list of 63 ms): two under 1, one under 10, none from 10 on.
pub const AUTO: usize = usize::MAX;

/// `value` with `decimals` places ([`AUTO`]: as it needs), thousands grouped
/// (`10,005.65`).
pub fn number(value: f64, decimals: usize) -> String {
    let decimals = match decimals {
        AUTO if value.abs() < 1.0 => 2,
        AUTO if value.abs() < 10.0 => 1,
        AUTO => 0,
        places => places,
    };
    let text = format!("{:.*}", decimals, value.abs());
    let (whole, fraction) = text.split_once('.').unwrap_or((&text, ""));
    let mut grouped = String::new();
    for (i, c) in whole.chars().enumerate() {
        if i > 0 && (whole.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let sign = if value < 0.0 && text.chars().any(|c| c.is_ascii_digit() && c != '0') {
        "-"
    } else {
        ""
    };
    match fraction {
        "" => format!("{sign}{grouped}"),
        f => format!("{sign}{grouped}.{f}"),
    }
}

fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// `text` followed by `unit` as the page writes it.
fn with_unit(text: String, unit: &str) -> String {
    match unit {
        "" => text,
        "/s" | "×" => format!("{text}{unit}"),
        unit => format!("{text} {unit}"),
    }
}

/// A figure measured once or more: the value; for two, their range; for more, the
/// median and the range; with how many runs.
pub fn spread(values: &[f64], decimals: usize, unit: &str) -> String {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = |v: f64| number(v, decimals);
    match sorted.as_slice() {
        [] => "–".to_string(),
        [one] => with_unit(n(*one), unit),
        all if n(all[0]) == n(all[all.len() - 1]) => {
            format!("{} ({} runs)", with_unit(n(all[0]), unit), all.len())
        }
        [a, b] => format!(
            "{} (2 runs)",
            with_unit(format!("{}–{}", n(*a), n(*b)), unit)
        ),
        all => format!(
            "{} ({}–{}, {} runs)",
            with_unit(n(median(all)), unit),
            n(all[0]),
            n(all[all.len() - 1]),
            all.len()
        ),
    }
}

/// The middle of a figure's values (the median), for a verdict.
fn middle(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        f64::NAN
    } else {
        median(&sorted)
    }
}

/// "met" or "not met": whether `value` is at most (`at_most`) or at least `target`.
fn verdict(value: f64, at_most: bool, target: f64) -> &'static str {
    if (at_most && value <= target) || (!at_most && value >= target) {
        "met"
    } else {
        "not met"
    }
}

/// One area's block: its tables, then the results files they cite.
struct Block<'a> {
    text: String,
    sources: Vec<&'a Results>,
}

impl<'a> Block<'a> {
    fn new() -> Self {
        Self {
            text: String::new(),
            sources: Vec::new(),
        }
    }

    /// The number `file` has in this block's list of results.
    fn cite(&mut self, file: &'a Results) -> String {
        let at = match self.sources.iter().position(|f| f.path == file.path) {
            Some(at) => at,
            None => {
                self.sources.push(file);
                self.sources.len() - 1
            }
        };
        (at + 1).to_string()
    }

    fn table(&mut self, head: &[&str], rows: &[Vec<String>]) {
        if !self.text.is_empty() {
            self.text.push('\n');
        }
        let _ = writeln!(self.text, "| {} |", head.join(" | "));
        let _ = writeln!(self.text, "|{}", "---|".repeat(head.len()));
        for row in rows {
            let _ = writeln!(self.text, "| {} |", row.join(" | "));
        }
    }

    fn finish(mut self) -> String {
        self.text.push('\n');
        for (i, file) in self.sources.iter().enumerate() {
            let command = match file.command.strip_prefix("by hand: ") {
                Some(how) => format!("by hand: {how}"),
                None => format!("`{}`", file.command),
            };
            let _ = writeln!(
                self.text,
                "{}. `{}`: {}{}, {command}{}",
                i + 1,
                file.path,
                file.commit,
                if file.dirty { " with changes" } else { "" },
                if file.source.is_some() {
                    " (transcribed)"
                } else {
                    ""
                },
            );
        }
        self.text
    }
}

/// The figure `metric` of `case` in `file`, in `unit`.
fn values(file: &Results, case: &str, metric: &str, unit: &str) -> Result<Vec<f64>, String> {
    file.values_of(THIS, case, metric)
        .into_iter()
        .map(|(value, from)| {
            convert(value, from, unit).ok_or_else(|| {
                format!(
                    "{}: “{case}: {metric}” is in {from}, which is not {unit}",
                    file.path
                )
            })
        })
        .collect()
}

/// A figure as the page shows it: `spread` of its values in `unit`.
fn show(
    file: &Results,
    case: &str,
    metric: &str,
    unit: &str,
    decimals: usize,
) -> Result<String, String> {
    Ok(spread(&values(file, case, metric, unit)?, decimals, unit))
}

// ----- the areas

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_written_as_the_page_reads_them() {
        assert_eq!(number(10005.65, 2), "10,005.65");
        assert_eq!(number(1704.0, 0), "1,704");
        assert_eq!(number(0.35, 2), "0.35");
        assert_eq!(number(0.29, AUTO), "0.29");
        assert_eq!(number(3.04, AUTO), "3.0");
        assert_eq!(number(63.0, AUTO), "63");
        assert_eq!(spread(&[62.4], 1, "s"), "62.4 s");
        assert_eq!(spread(&[38.2, 37.5], 1, "MiB"), "37.5–38.2 MiB (2 runs)");
        assert_eq!(
            spread(&[62.3, 67.5, 58.4, 62.4, 63.3], 1, "s"),
            "62.4 s (58.4–67.5, 5 runs)"
        );
        assert_eq!(
            spread(&[1.0, 2.0, 3.0, 4.0], 1, "×"),
            "2.5× (1.0–4.0, 4 runs)"
        );
        assert_eq!(convert(1500.0, "ms", "s"), Some(1.5));
        assert_eq!(convert(1.0, "MiB", "KiB"), Some(1024.0));
        assert_eq!(convert(1.0, "ms", "MB"), None);
        assert_eq!(verdict(1.14, true, 1.2), "met");
        assert_eq!(verdict(9_000.0, false, 10_000.0), "not met");
    }
}
