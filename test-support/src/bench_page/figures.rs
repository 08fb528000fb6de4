//! How the page writes a figure: numbers, spreads over runs, verdicts, and an area's
//! block of tables with the results files it cites.

use std::fmt::Write as _;

use crate::bench_results::{Results, THIS};

/// `value` of `from` in `to`; `None` when the two do not convert.
pub(super) fn convert(value: f64, from: &str, to: &str) -> Option<f64> {
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
pub(super) fn with_unit(text: String, unit: &str) -> String {
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
pub(super) fn middle(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        f64::NAN
    } else {
        median(&sorted)
    }
}

/// "met" or "not met": whether `value` is at most (`at_most`) or at least `target`.
pub(super) fn verdict(value: f64, at_most: bool, target: f64) -> &'static str {
    if (at_most && value <= target) || (!at_most && value >= target) {
        "met"
    } else {
        "not met"
    }
}

/// One area's block: its tables, then the results files they cite.
pub(super) struct Block<'a> {
    text: String,
    sources: Vec<&'a Results>,
}

impl<'a> Block<'a> {
    pub(super) fn new() -> Self {
        Self {
            text: String::new(),
            sources: Vec::new(),
        }
    }

    /// The number `file` has in this block's list of results.
    pub(super) fn cite(&mut self, file: &'a Results) -> String {
        let at = match self.sources.iter().position(|f| f.path == file.path) {
            Some(at) => at,
            None => {
                self.sources.push(file);
                self.sources.len() - 1
            }
        };
        (at + 1).to_string()
    }

    pub(super) fn table(&mut self, head: &[&str], rows: &[Vec<String>]) {
        if !self.text.is_empty() {
            self.text.push('\n');
        }
        let _ = writeln!(self.text, "| {} |", head.join(" | "));
        let _ = writeln!(self.text, "|{}", "---|".repeat(head.len()));
        for row in rows {
            let _ = writeln!(self.text, "| {} |", row.join(" | "));
        }
    }

    pub(super) fn finish(mut self) -> String {
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
pub(super) fn values(
    file: &Results,
    case: &str,
    metric: &str,
    unit: &str,
) -> Result<Vec<f64>, String> {
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
pub(super) fn show(
    file: &Results,
    case: &str,
    metric: &str,
    unit: &str,
    decimals: usize,
) -> Result<String, String> {
    Ok(spread(&values(file, case, metric, unit)?, decimals, unit))
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
