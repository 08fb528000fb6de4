//! The translation's area: a spec's text to its Framework.

use super::catalog::Catalog;
use super::figures::{Block, middle, show, spread, values, verdict};
use crate::bench_results::Results;

pub(super) fn translation(catalog: &Catalog) -> Result<String, String> {
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
