//! The embedded default's start: a job's tasks up, beside the same processes started bare.

use super::catalog::Catalog;
use super::figures::{Block, middle, show, values, verdict};

pub(super) fn start(catalog: &Catalog) -> Result<String, String> {
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
