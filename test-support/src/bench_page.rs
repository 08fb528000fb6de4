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

/// The areas, by the name their block has on the page, in the page's order.
pub const BLOCKS: &[(&str, Area)] = &[
    ("translation", translation),
    ("barrier", barrier),
    ("cluster", cluster),
    ("start", start),
    ("containers", containers),
    ("memory", memory),
    ("history", history),
    ("others", others),
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

fn translation(catalog: &Catalog) -> Result<String, String> {
    const BENCH: &str = "transform";
    const TF: &str = "TensorFlow example (2 roles, 4 tasks)";
    const VIEW: &str = "10,000 tasks in 2 roles, all running";
    const MEDIAN: &str = "text → Framework: median";
    const SIZE: &str = "Framework JSON size";
    let mut block = Block::new();
    let mut rows = Vec::new();
    // Median, with the p99 where the same run has it.
    let timed = |file: &Results, case: &str, what: &str| -> Result<String, String> {
        let places = |values: &[f64]| if middle(values) >= 1000.0 { 0 } else { 1 };
        let median = values(file, case, &format!("{what}: median"), "µs")?;
        let shown = spread(&median, places(&median), "µs");
        Ok(if file.has(case, &format!("{what}: p99")) {
            let p99 = values(file, case, &format!("{what}: p99"), "µs")?;
            format!("{shown}, p99 {}", spread(&p99, places(&p99), ""))
        } else {
            shown
        })
    };
    let file = catalog.newest(BENCH, None, &[(TF, MEDIAN)])?;
    rows.push(vec![
        "TensorFlow example, 4 tasks".to_string(),
        timed(file, TF, "text → Framework")?,
        "–".to_string(),
        "tens of µs".to_string(),
        block.cite(file),
    ]);
    for (label, v1, v2) in [
        (
            "1,000 tasks in 2 roles, JSON",
            "1,000 tasks in 2 roles",
            "v2: 1,000 tasks in 2 roles",
        ),
        (
            "1,000 tasks in 50 roles, JSON",
            "1,000 tasks in 50 roles",
            "v2: 1,000 tasks in 50 roles",
        ),
        (
            "1,000 tasks in 2 roles, YAML",
            "v1 YAML: 1,000 tasks in 2 roles",
            "v2 YAML: 1,000 tasks in 2 roles",
        ),
    ] {
        let file = catalog.newest(BENCH, None, &[(v1, MEDIAN), (v2, MEDIAN)])?;
        let v1_median = middle(&values(file, v1, MEDIAN, "ms")?);
        rows.push(vec![
            label.to_string(),
            timed(file, v1, "text → Framework")?,
            timed(file, v2, "text → Framework")?,
            format!("under 5 ms: {}", verdict(v1_median, true, 5.0)),
            block.cite(file),
        ]);
    }
    for (label, v1, v2) in [
        (
            "its Framework, 2 roles",
            "1,000 tasks in 2 roles",
            "v2: 1,000 tasks in 2 roles",
        ),
        (
            "its Framework, 50 roles",
            "1,000 tasks in 50 roles",
            "v2: 1,000 tasks in 50 roles",
        ),
    ] {
        let file = catalog.newest(BENCH, None, &[(v1, SIZE), (v2, SIZE)])?;
        rows.push(vec![
            label.to_string(),
            show(file, v1, SIZE, "B", 0)?,
            show(file, v2, SIZE, "B", 0)?,
            "the API server's ~1.5 MiB an object".to_string(),
            block.cite(file),
        ]);
    }
    let file = catalog.newest(BENCH, None, &[(VIEW, "job view: median")])?;
    let view = middle(&values(file, VIEW, "job view: median", "ms")?);
    rows.push(vec![
        "job view of 10,000 running tasks".to_string(),
        timed(file, VIEW, "job view")?,
        "–".to_string(),
        format!("at most 5 ms: {}", verdict(view, true, 5.0)),
        block.cite(file),
    ]);
    let file = catalog.newest(BENCH, None, &[(VIEW, "job view → JSON: median")])?;
    rows.push(vec![
        "… and its JSON".to_string(),
        timed(file, VIEW, "job view → JSON")?,
        "–".to_string(),
        "–".to_string(),
        block.cite(file),
    ]);
    block.table(&["case", "v1", "v2", "anchor", "results"], &rows);
    Ok(block.finish())
}

fn barrier(catalog: &Catalog) -> Result<String, String> {
    let mut block = Block::new();
    let mut rows = Vec::new();
    const JOB: &str = "100-task job";
    const WAIT: &str = "60 s wait";
    let file = catalog.newest(
        "release",
        None,
        &[
            (JOB, "release latency: median"),
            (JOB, "release latency: p99"),
            (WAIT, "10 s poll: released after the last address"),
        ],
    )?;
    let at = block.cite(file);
    let median = values(file, JOB, "release latency: median", "ms")?;
    rows.push(vec![
        "a 100-task job's release after its last address: median, p99".to_string(),
        format!(
            "{}, {}",
            show(file, JOB, "release latency: median", "ms", 2)?,
            show(file, JOB, "release latency: p99", "ms", 2)?
        ),
        format!(
            "at most 100 ms: {}; a 10 s poll: {}",
            verdict(middle(&median), true, 100.0),
            show(
                file,
                WAIT,
                "10 s poll: released after the last address",
                "ms",
                2
            )?
        ),
        at.clone(),
    ]);
    rows.push(vec![
        "API requests in a 60 s wait".to_string(),
        show(file, WAIT, "watch barrier: requests", "", 0)?,
        format!(
            "a 10 s poll: {}",
            show(file, WAIT, "10 s poll: requests", "", 0)?
        ),
        at,
    ]);
    const SCALE: &str = "barrier_scale";
    const RELEASE: &str = "last address → last release";
    const TO: &str = "to the barriers";
    let n400 = "N = 400, published";
    let f400 = "N = 400, framework";
    let file = catalog.newest(
        SCALE,
        None,
        &[(n400, RELEASE), (n400, TO), (f400, RELEASE), (f400, TO)],
    )?;
    let at = block.cite(file);
    rows.push(vec![
        "400 barriers: last address → last release".to_string(),
        show(file, n400, RELEASE, "ms", 1)?,
        format!(
            "each watching the Framework: {}",
            show(file, f400, RELEASE, "s", 1)?
        ),
        at.clone(),
    ]);
    rows.push(vec![
        "400 barriers: bytes they were sent".to_string(),
        show(file, n400, TO, "MB", 2)?,
        format!(
            "each watching the Framework: {}",
            show(file, f400, TO, "GB", 1)?
        ),
        at,
    ]);
    let n1000 = "N = 1000, published";
    let file = catalog.newest(
        SCALE,
        None,
        &[
            (n1000, RELEASE),
            (n1000, "published → last release"),
            (n1000, "CPU after"),
            (n1000, TO),
            (n1000, "to the publisher"),
        ],
    )?;
    let at = block.cite(file);
    let after = values(file, n1000, "published → last release", "ms")?;
    rows.push(vec![
        "1,000 barriers: last address → last release".to_string(),
        show(file, n1000, RELEASE, "ms", 1)?,
        "–".to_string(),
        at.clone(),
    ]);
    rows.push(vec![
        "… of it after the peer table's publication".to_string(),
        show(file, n1000, "published → last release", "ms", 1)?,
        format!("at most 100 ms: {}", verdict(middle(&after), true, 100.0)),
        at.clone(),
    ]);
    rows.push(vec![
        "… the CPU of that window, all threads".to_string(),
        show(file, n1000, "CPU after", "ms", 1)?,
        "–".to_string(),
        at.clone(),
    ]);
    rows.push(vec![
        "1,000 barriers: bytes to them, to the publisher".to_string(),
        format!(
            "{}, {}",
            show(file, n1000, TO, "MB", 2)?,
            show(file, n1000, "to the publisher", "MB", 2)?
        ),
        "–".to_string(),
        at,
    ]);
    block.table(&["figure", "rest-lite", "anchor", "results"], &rows);
    Ok(block.finish())
}

fn cluster(catalog: &Catalog) -> Result<String, String> {
    const CASE: &str = "dry-run submissions, 64 connections";
    const IDLE: &str = "idle rest-lite serve";
    let mut block = Block::new();
    let mut rows = Vec::new();
    let file = catalog.newest("serve", None, &[(CASE, "rate")])?;
    let rate = values(file, CASE, "rate", "/s")?;
    rows.push(vec![
        "dry-run submissions a second".to_string(),
        show(file, CASE, "rate", "/s", 0)?,
        format!(
            "at least 10,000/s: {}",
            verdict(middle(&rate), false, 10_000.0)
        ),
        block.cite(file),
    ]);
    let file = catalog.newest(
        "serve",
        None,
        &[(CASE, "latency: p50"), (CASE, "latency: p99")],
    )?;
    rows.push(vec![
        "a submission's latency, p50".to_string(),
        show(file, CASE, "latency: p50", "ms", 2)?,
        "–".to_string(),
        block.cite(file),
    ]);
    rows.push(vec![
        "… p99".to_string(),
        show(file, CASE, "latency: p99", "ms", 2)?,
        "–".to_string(),
        block.cite(file),
    ]);
    let file = catalog.newest("serve", None, &[(IDLE, "RSS")])?;
    let rss = values(file, IDLE, "RSS", "MB")?;
    rows.push(vec![
        "an idle `rest-lite serve`, RSS".to_string(),
        show(file, IDLE, "RSS", "kB", 0)?,
        format!("at most 30 MB: {}", verdict(middle(&rss), true, 30.0)),
        block.cite(file),
    ]);
    block.table(&["figure", "rest-lite", "anchor", "results"], &rows);
    cluster_cost(catalog, &mut block)?;
    Ok(block.finish())
}

/// A job's cost to a real control plane at 100 and 1,000 tasks, beside `kubectl create`
/// of the same Framework in the same run (`rest-lite/tests/real_cluster/cost.sh`).
fn cluster_cost<'a>(catalog: &'a Catalog, block: &mut Block<'a>) -> Result<(), String> {
    const SIZES: [&str; 2] = ["100", "1000"];
    let case = |size: &str, floor: bool| match floor {
        true => format!("{size} tasks, kubectl create of the Framework"),
        false => format!("{size} tasks, through rest-lite"),
    };
    const FIGURES: [(&str, &str, &str, usize); 6] = [
        (
            "request → every pod exists",
            "request → every pod exists",
            "s",
            1,
        ),
        (
            "the API server's CPU meanwhile",
            "the API server's CPU meanwhile",
            "s",
            1,
        ),
        (
            "objects beside the pods, running",
            "running: objects beside the pods",
            "",
            0,
        ),
        (
            "… their bytes in etcd",
            "running: their bytes in etcd",
            "kB",
            0,
        ),
        (
            "objects beside the pods, ended",
            "ended: objects beside the pods",
            "",
            0,
        ),
        (
            "… their bytes in etcd",
            "ended: their bytes in etcd",
            "kB",
            0,
        ),
    ];
    let needs: Vec<(String, &str)> = SIZES
        .iter()
        .flat_map(|size| [case(size, true), case(size, false)])
        .flat_map(|c| FIGURES.iter().map(move |f| (c.clone(), f.1)))
        .collect();
    let needs: Vec<(&str, &str)> = needs.iter().map(|(c, m)| (c.as_str(), *m)).collect();
    let file = catalog.newest("cluster-cost", None, &needs)?;
    let at = block.cite(file);
    let mut rows = Vec::new();
    for (label, metric, unit, decimals) in FIGURES {
        let mut cells = [String::new(), String::new(), String::new()];
        for (i, size) in SIZES.iter().enumerate() {
            let ours = values(file, &case(size, false), metric, unit)?;
            let floor = values(file, &case(size, true), metric, unit)?;
            let sep = if i == 0 { "" } else { " / " };
            cells[0] += &format!("{sep}{}", spread(&ours, decimals, unit));
            cells[1] += &format!("{sep}{}", spread(&floor, decimals, unit));
            // A count's ratio says nothing: the objects are named in the prose.
            let ratio = middle(&ours) / middle(&floor).max(f64::MIN_POSITIVE);
            cells[2] += &match unit {
                "" => format!("{sep}–"),
                _ => format!("{sep}{}", with_unit(number(ratio, 2), "×")),
            };
        }
        let [ours, floor, ratio] = cells;
        rows.push(vec![label.to_string(), ours, floor, ratio, at.clone()]);
    }
    block.table(
        &[
            "100 / 1,000 tasks",
            "rest-lite",
            "`kubectl create`",
            "ratio",
            "results",
        ],
        &rows,
    );
    Ok(())
}

fn start(catalog: &Catalog) -> Result<String, String> {
    const JOB: &str = "1000-task job";
    const RUNNING: &str = "submit → every user command running: median";
    const RATIO: &str = "running / floor: median";
    let mut block = Block::new();
    let mut rows = Vec::new();
    let file = catalog.newest(
        "local",
        Some("1000tasks"),
        &[
            (JOB, RUNNING),
            (JOB, "floor"),
            (JOB, RATIO),
            (JOB, "CPU busy, job"),
            (JOB, "CPU busy, floor"),
            (JOB, "the server's CPU"),
            (JOB, "GET /healthz: p99"),
            (JOB, "GET of the job: p99"),
        ],
    )?;
    let at = block.cite(file);
    let ratio = values(file, JOB, RATIO, "×")?;
    let health = values(file, JOB, "GET /healthz: p99", "ms")?;
    let figure = |label: &str, metric: &str, unit: &str, decimals: usize, anchor: String| {
        Ok::<_, String>(vec![
            label.to_string(),
            show(file, JOB, metric, unit, decimals)?,
            anchor,
            at.clone(),
        ])
    };
    rows.push(figure(
        "1,000 tasks: submit → every user command running",
        RUNNING,
        "s",
        1,
        "–".to_string(),
    )?);
    rows.push(figure(
        "… the floor: the same commands started directly",
        "floor",
        "s",
        1,
        "–".to_string(),
    )?);
    rows.push(figure(
        "… the job over its floor",
        RATIO,
        "×",
        2,
        format!(
            "at most 1.2×: {} (the bound: 1.5×)",
            verdict(middle(&ratio), true, 1.2)
        ),
    )?);
    rows.push(figure(
        "… the machine's busy CPU, the job",
        "CPU busy, job",
        "s",
        1,
        format!("the floor: {}", show(file, JOB, "CPU busy, floor", "s", 1)?),
    )?);
    rows.push(figure(
        "… of it the server's own",
        "the server's CPU",
        "s",
        1,
        "–".to_string(),
    )?);
    rows.push(figure(
        "… `GET /healthz` while it starts, p99",
        "GET /healthz: p99",
        "ms",
        1,
        format!("under 100 ms: {}", verdict(middle(&health), true, 100.0)),
    )?);
    rows.push(figure(
        "… `GET` of the job while it starts, p99",
        "GET of the job: p99",
        "ms",
        1,
        "–".to_string(),
    )?);
    const SMALL: &str = "64-task job";
    let file = catalog.newest(
        "local",
        Some("64tasks"),
        &[(SMALL, RUNNING), (SMALL, "floor")],
    )?;
    let at = block.cite(file);
    let running = values(file, SMALL, RUNNING, "ms")?;
    rows.push(vec![
        "64 tasks: submit → every user command running".to_string(),
        show(file, SMALL, RUNNING, "ms", 0)?,
        format!("at most 0.5 s: {}", verdict(middle(&running), true, 500.0)),
        at.clone(),
    ]);
    rows.push(vec![
        "… the floor".to_string(),
        show(file, SMALL, "floor", "ms", 0)?,
        "–".to_string(),
        at,
    ]);
    block.table(&["figure", "rest-lite", "anchor", "results"], &rows);
    Ok(block.finish())
}

fn containers(catalog: &Catalog) -> Result<String, String> {
    const RUNNING: &str = "submit → every task RUNNING";
    const FLOOR: &str = "floor: run -d ×N";
    const RATIO: &str = "job / floor";
    const MEMORY: &str = "memory per task";
    let mut block = Block::new();
    let mut rows = Vec::new();
    for tasks in [10, 50, 100] {
        for engine in ["host", "podman", "docker"] {
            let case = format!("{tasks} tasks, {engine}");
            let case = case.as_str();
            let needs: &[(&str, &str)] = if engine == "host" {
                &[(case, RUNNING), (case, MEMORY)]
            } else {
                &[
                    (case, RUNNING),
                    (case, FLOOR),
                    (case, RATIO),
                    (case, MEMORY),
                ]
            };
            let file = catalog.newest("containers", None, needs)?;
            let (floor, ratio) = if engine == "host" {
                ("–".to_string(), "–".to_string())
            } else {
                (
                    show(file, case, FLOOR, "s", 2)?,
                    show(file, case, RATIO, "×", 2)?,
                )
            };
            rows.push(vec![
                tasks.to_string(),
                engine.to_string(),
                show(file, case, RUNNING, "s", 2)?,
                floor,
                ratio,
                show(file, case, MEMORY, "MiB", 1)?,
                block.cite(file),
            ]);
        }
    }
    block.table(
        &[
            "tasks",
            "mode",
            "submit → every task RUNNING",
            "floor: the engine's `run -d` × N",
            "job / floor",
            "memory per task",
            "results",
        ],
        &rows,
    );
    Ok(block.finish())
}

fn memory(catalog: &Catalog) -> Result<String, String> {
    let mut block = Block::new();
    let mut rows = Vec::new();
    for jobs in [2000, 10_000] {
        let case = format!("{jobs} finished jobs");
        let case = case.as_str();
        let variant = format!("{jobs}jobs");
        let file = catalog.newest(
            "history",
            Some(&variant),
            &[
                (case, "RSS, the server that ran them"),
                (case, "RSS, restarted on their state"),
                (case, "RSS, restarted then one job"),
                (case, "ran / restarted then one job"),
                (case, "growth per finished job, ran"),
            ],
        )?;
        let ratio = middle(&values(file, case, "ran / restarted then one job", "×")?);
        let growth = middle(&values(file, case, "growth per finished job, ran", "B")?);
        rows.push(vec![
            number(jobs as f64, 0),
            show(file, case, "RSS, the server that ran them", "MiB", 1)?,
            show(file, case, "RSS, restarted on their state", "MiB", 1)?,
            show(file, case, "RSS, restarted then one job", "MiB", 1)?,
            show(file, case, "ran / restarted then one job", "×", 2)?,
            show(file, case, "growth per finished job, ran", "KiB", 1)?,
            format!(
                "{}, {}",
                verdict(ratio, true, 1.2),
                verdict(growth, true, 20_000.0)
            ),
            block.cite(file),
        ]);
    }
    block.table(
        &[
            "finished jobs",
            "RSS of the server that ran them",
            "restarted on their state",
            "restarted, then one job",
            "ran / restarted, then one job",
            "growth per finished job",
            "aims: at most 1.2×, 20 KB",
            "results",
        ],
        &rows,
    );
    let mut rows = Vec::new();
    const SERVER: &str = "server";
    let file = catalog.newest(
        "store",
        Some("1000jobs"),
        &[(SERVER, "RSS once listed"), (SERVER, "RSS after the reads")],
    )?;
    let listed = middle(&values(file, SERVER, "RSS once listed", "MB")?);
    rows.push(vec![
        "1,000 running jobs, their Frameworks listed; after a run of every read".to_string(),
        format!(
            "{}; {}",
            show(file, SERVER, "RSS once listed", "MiB", 0)?,
            show(file, SERVER, "RSS after the reads", "MiB", 0)?
        ),
        format!("at most 150 MB listed: {}", verdict(listed, true, 150.0)),
        block.cite(file),
    ]);
    let file = catalog.newest(
        "store",
        Some("10000jobs-finished"),
        &[(SERVER, "RSS once listed"), (SERVER, "RSS after the reads")],
    )?;
    rows.push(vec![
        "10,000 finished jobs kept in the cluster, listed; after the reads".to_string(),
        format!(
            "{}; {}",
            show(file, SERVER, "RSS once listed", "MiB", 0)?,
            show(file, SERVER, "RSS after the reads", "MiB", 0)?
        ),
        "–".to_string(),
        block.cite(file),
    ]);
    let file = catalog.newest(
        "store",
        Some("10000jobs-history"),
        &[(SERVER, "RSS after restart")],
    )?;
    rows.push(vec![
        "10,000 finished jobs in the job history, after a restart".to_string(),
        show(file, SERVER, "RSS after restart", "MiB", 0)?,
        "–".to_string(),
        block.cite(file),
    ]);
    block.table(
        &["on a cluster", "RSS of the server", "anchor", "results"],
        &rows,
    );
    Ok(block.finish())
}

fn history(catalog: &Catalog) -> Result<String, String> {
    let mut block = Block::new();
    // (label, the embedded default's read, the cluster's read)
    let reads = [
        ("one job", Some("one job"), Some("job GET")),
        (
            "v2 page of 20, first",
            Some("v2 page of 20, first"),
            Some("v2 page of 20, first"),
        ),
        (
            "v2 page of 20, middle",
            Some("v2 page of 20, middle"),
            Some("v2 page of 20, middle"),
        ),
        (
            "v2 page of 20, `state=FAILED`",
            Some("v2 page of 20, FAILED"),
            Some("v2 page of 20, FAILED"),
        ),
        (
            "v2 page of 20, searched",
            Some("v2 page of 20, searched"),
            Some("v2 page of 20, searched"),
        ),
        (
            "the portal's job list",
            Some("portal job list"),
            Some("portal job list"),
        ),
        (
            "v1 page: of 20 here, of 100 on a cluster",
            Some("v1 page of 20"),
            Some("a page of 100 jobs"),
        ),
        ("every job (10 MB)", Some("every job (v1)"), None),
    ];
    let local_needs: Vec<(&str, &str)> = reads
        .iter()
        .filter_map(|(_, l, _)| *l)
        .flat_map(|l| [(l, "p50"), (l, "p99")])
        .collect();
    let cluster_needs: Vec<(&str, &str)> = reads
        .iter()
        .filter_map(|(_, _, c)| *c)
        .flat_map(|c| [(c, "req/s"), (c, "p50")])
        .collect();
    let local = catalog.newest("history", Some("10000jobs"), &local_needs)?;
    let kept = catalog.newest("store", Some("10000jobs-finished"), &cluster_needs)?;
    let archived = catalog.newest("store", Some("10000jobs-history"), &cluster_needs)?;
    let head = [
        "read, 10,000 finished jobs".to_string(),
        format!("embedded default: p50, p99 ({})", block.cite(local)),
        format!(
            "cluster, Frameworks kept: req/s (p50) ({})",
            block.cite(kept)
        ),
        format!(
            "cluster, from the history: req/s (p50) ({})",
            block.cite(archived)
        ),
    ];
    let paced = |file: &Results, read: Option<&str>| -> Result<String, String> {
        match read {
            None => Ok("–".to_string()),
            Some(read) => Ok(format!(
                "{} ({})",
                show(file, read, "req/s", "/s", 0)?,
                show(file, read, "p50", "ms", 0)?
            )),
        }
    };
    let mut rows = Vec::new();
    for (label, here, there) in reads {
        let here = match here {
            None => "–".to_string(),
            Some(read) => format!(
                "{}, {}",
                spread(&values(local, read, "p50", "ms")?, AUTO, ""),
                show(local, read, "p99", "ms", AUTO)?
            ),
        };
        rows.push(vec![
            label.to_string(),
            here,
            paced(kept, there)?,
            paced(archived, there)?,
        ]);
    }
    let head: Vec<&str> = head.iter().map(String::as_str).collect();
    block.table(&head, &rows);

    let mut rows = Vec::new();
    let file = catalog.newest(
        "history",
        Some("10000jobs"),
        &[("restart", "first page after start")],
    )?;
    rows.push(vec![
        "embedded default, 10,000 finished jobs: start to the first page".to_string(),
        show(file, "restart", "first page after start", "s", 2)?,
        "–".to_string(),
        block.cite(file),
    ]);
    let file = catalog.newest(
        "store",
        Some("10000jobs-history"),
        &[("server", "restart to the first v2 page")],
    )?;
    rows.push(vec![
        "cluster, 10,000 jobs in the history: restart to the first page".to_string(),
        show(file, "server", "restart to the first v2 page", "s", 2)?,
        "–".to_string(),
        block.cite(file),
    ]);
    const GET: &str = "job GET";
    const PAGE_READ: &str = "job page, one job every reader refreshes";
    let file = catalog.newest(
        "store",
        Some("1000jobs-rate100"),
        &[
            (GET, "p99"),
            (PAGE_READ, "p99"),
            (GET, "API requests per read"),
            (PAGE_READ, "API requests per read"),
        ],
    )?;
    let at = block.cite(file);
    let get = middle(&values(file, GET, "p99", "ms")?);
    let page = middle(&values(file, PAGE_READ, "p99", "ms")?);
    rows.push(vec![
        "1,000 running jobs, 64 clients at 100 reads/s each: job GET p99".to_string(),
        show(file, GET, "p99", "ms", 2)?,
        format!("at most 2 ms: {}", verdict(get, true, 2.0)),
        at.clone(),
    ]);
    rows.push(vec![
        "… the job page p99 (the same job)".to_string(),
        show(file, PAGE_READ, "p99", "ms", 2)?,
        format!("at most 5 ms: {}", verdict(page, true, 5.0)),
        at.clone(),
    ]);
    rows.push(vec![
        "… API server requests per job GET, per job page (its log previews)".to_string(),
        format!(
            "{}, {}",
            show(file, GET, "API requests per read", "", 3)?,
            show(file, PAGE_READ, "API requests per read", "", 3)?
        ),
        "none per job GET".to_string(),
        at,
    ]);
    const RETIRED: &str = "10000 finished jobs";
    let file = catalog.newest(
        "retire",
        Some("10000jobs"),
        &[
            (RETIRED, "every Framework gone"),
            (RETIRED, "floor: DeleteCollection"),
        ],
    )?;
    rows.push(vec![
        "10,000 Frameworks retired into the history: start to the last gone".to_string(),
        show(file, RETIRED, "every Framework gone", "s", 1)?,
        format!(
            "the floor, one DeleteCollection: {}",
            show(file, RETIRED, "floor: DeleteCollection", "s", 1)?
        ),
        block.cite(file),
    ]);
    block.table(&["figure", "rest-lite", "anchor", "results"], &rows);
    Ok(block.finish())
}

fn others(catalog: &Catalog) -> Result<String, String> {
    let mut block = Block::new();
    let mut rows = Vec::new();
    const RUN: &str = "run → user command";
    const ENTRY: &str = "entry, barrier already passed (links the runtime binary)";
    const SUPERVISOR: &str = "supervisor";
    let file = catalog.newest(
        "start",
        None,
        &[
            (RUN, "median"),
            (ENTRY, "median"),
            (SUPERVISOR, "RSS at the user command's start"),
            (SUPERVISOR, "RssAnon at the user command's start"),
        ],
    )?;
    let at = block.cite(file);
    let run = middle(&values(file, RUN, "median", "ms")?);
    rows.push(vec![
        "the runtime: `run` to the user command, median".to_string(),
        show(file, RUN, "median", "ms", 2)?,
        format!("at most 10 ms: {}", verdict(run, true, 10.0)),
        at.clone(),
    ]);
    rows.push(vec![
        "… the init step (`entry`), the barrier passed, median".to_string(),
        show(file, ENTRY, "median", "ms", 2)?,
        "–".to_string(),
        at.clone(),
    ]);
    rows.push(vec![
        "… the supervisor's RSS at the command's start; its own pages".to_string(),
        format!(
            "{}; {}",
            show(
                file,
                SUPERVISOR,
                "RSS at the user command's start",
                "KiB",
                0
            )?,
            show(
                file,
                SUPERVISOR,
                "RssAnon at the user command's start",
                "KiB",
                0
            )?
        ),
        "–".to_string(),
        at,
    ]);
    for (label, case) in [
        (
            "output through the runtime: 200,000 small writes",
            "200000 small writes, stdout and stderr by turns",
        ),
        ("… 256 MiB in large writes", "256 MiB in large writes"),
    ] {
        let file = catalog.newest(
            "start",
            None,
            &[
                (case, "through the runtime"),
                (case, "floor"),
                (case, "ratio"),
            ],
        )?;
        rows.push(vec![
            label.to_string(),
            show(file, case, "through the runtime", "s", 2)?,
            format!(
                "the floor, a plain pipe: {} ({})",
                show(file, case, "floor", "s", 2)?,
                show(file, case, "ratio", "×", 1)?
            ),
            block.cite(file),
        ]);
    }
    let file = catalog.newest(
        "env_size",
        None,
        &[
            ("10000 tasks", "all"),
            ("10000 tasks", "exported"),
            ("10000 tasks", "derive"),
        ],
    )?;
    rows.push(vec![
        "a task's environment at 10,000 tasks: all of it; exported".to_string(),
        format!(
            "{}; {}",
            show(file, "10000 tasks", "all", "KiB", 1)?,
            show(file, "10000 tasks", "exported", "KiB", 1)?
        ),
        "Linux: 2 MiB in all, 128 KiB a variable".to_string(),
        block.cite(file),
    ]);
    rows.push(vec![
        "… derived and fitted, once per task".to_string(),
        show(file, "10000 tasks", "derive", "ms", 1)?,
        "–".to_string(),
        block.cite(file),
    ]);
    const SOAK: &str = "kills -9 at random";
    let bad = [
        "lost",
        "resurrected",
        "wrong final states",
        "tasks left running",
    ];
    let mut needs: Vec<(&str, &str)> = bad.iter().map(|m| (SOAK, *m)).collect();
    needs.extend([(SOAK, "kills"), (SOAK, "submitted, answered")]);
    let file = catalog.newest("soak", Some("300s"), &needs)?;
    let mut counts = Vec::new();
    for metric in bad {
        counts.push(show(file, SOAK, metric, "", 0)?);
    }
    rows.push(vec![
        format!(
            "{} kills -9 of the server: jobs lost, resurrected, wrongly ended; tasks left",
            show(file, SOAK, "kills", "", 0)?
        ),
        format!(
            "{} of {} jobs",
            counts.join(", "),
            show(file, SOAK, "submitted, answered", "", 0)?
        ),
        "none".to_string(),
        block.cite(file),
    ]);
    const WAITING: &str = "a job waiting for one GPU";
    let file = catalog.newest(
        "gpu-check",
        None,
        &[(WAITING, "SUCCEEDED after the holder's release")],
    )?;
    rows.push(vec![
        "a job waiting for the GPU another holds: the release to its end".to_string(),
        show(
            file,
            WAITING,
            "SUCCEEDED after the holder's release",
            "s",
            2,
        )?,
        "–".to_string(),
        block.cite(file),
    ]);
    const ATTEMPTS: &str = "1,000 quick attempts";
    let file = catalog.newest(
        "restarts",
        Some("attempts"),
        &[(ATTEMPTS, "the job's directory")],
    )?;
    let kept_all: Vec<f64> = file
        .values_of("every attempt kept", ATTEMPTS, "the job's directory")
        .into_iter()
        .filter_map(|(v, u)| convert(v, u, "MB"))
        .collect();
    rows.push(vec![
        "1,000 quick attempts of a job: what it keeps on disk".to_string(),
        show(file, ATTEMPTS, "the job's directory", "kB", 0)?,
        format!("every attempt kept: {}", spread(&kept_all, 0, "MB")),
        block.cite(file),
    ]);
    const WRITER: &str = "a task that writes 1 GB";
    let file = catalog.newest(
        "restarts",
        Some("writer"),
        &[(WRITER, "the task's files"), (WRITER, "dropped, counted")],
    )?;
    rows.push(vec![
        "a task that writes 1 GB: its files; what was dropped (and counted)".to_string(),
        format!(
            "{}; {}",
            show(file, WRITER, "the task's files", "MB", 0)?,
            show(file, WRITER, "dropped, counted", "MB", 0)?
        ),
        "–".to_string(),
        block.cite(file),
    ]);
    const SSH: &str = "first ssh connection";
    let quick = "first, the account's shell quick to start";
    let pyenv = "first, with a pyenv ~/.bashrc";
    let file = catalog.newest("ssh", None, &[(SSH, quick), (SSH, pyenv)])?;
    let first = middle(&values(file, SSH, quick, "ms")?);
    rows.push(vec![
        "the first ssh connection to a task".to_string(),
        show(file, SSH, quick, "s", 2)?,
        format!(
            "at most 300 ms: {}; {} where `~/.bashrc` runs pyenv",
            verdict(first, true, 300.0),
            show(file, SSH, pyenv, "s", 2)?
        ),
        block.cite(file),
    ]);
    const ORDER: &str = "lines printed in the order of their causes";
    let file = catalog.newest(
        "output-order",
        None,
        &[
            (ORDER, "container-mode runs in order"),
            (ORDER, "container-mode runs"),
            (ORDER, "host-mode runs in order"),
            (ORDER, "host-mode runs"),
        ],
    )?;
    let sum = |metrics: [&str; 2]| -> Result<f64, String> {
        let mut total = 0.0;
        for metric in metrics {
            total += values(file, ORDER, metric, "")?.iter().sum::<f64>();
        }
        Ok(total)
    };
    rows.push(vec![
        "`rest-lite run`'s lines in the order written across tasks".to_string(),
        format!(
            "{} of {} runs",
            number(
                sum(["container-mode runs in order", "host-mode runs in order"])?,
                0
            ),
            number(sum(["container-mode runs", "host-mode runs"])?, 0)
        ),
        "–".to_string(),
        block.cite(file),
    ]);
    block.table(
        &["figure", "rest-lite", "floor or anchor", "results"],
        &rows,
    );
    Ok(block.finish())
}

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
