//! A long-running server's memory: what finished jobs keep, here and on a cluster.

use super::catalog::Catalog;
use super::figures::{Block, middle, number, show, values, verdict};

pub(super) fn memory(catalog: &Catalog) -> Result<String, String> {
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
    kept_by_maker(catalog, &mut block)?;
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

/// What a finished job keeps, counted by the thread that made it (the `kept` bench).
fn kept_by_maker<'a>(catalog: &'a Catalog, block: &mut Block<'a>) -> Result<(), String> {
    const CASE: &str = "1000 finished jobs";
    const KEEPER: &str = "kept per job, made on the keeper";
    const ELSEWHERE: &str = "kept per job, made elsewhere";
    let file = catalog.newest(
        "kept",
        Some("1000jobs"),
        &[(CASE, KEEPER), (CASE, ELSEWHERE)],
    )?;
    let kept = middle(&values(file, CASE, KEEPER, "B")?);
    let elsewhere = middle(&values(file, CASE, ELSEWHERE, "B")?);
    let row = vec![
        "bytes counted by the thread that made them".to_string(),
        show(file, CASE, KEEPER, "B", 0)?,
        show(file, CASE, ELSEWHERE, "B", 0)?,
        format!(
            "{}, {}",
            verdict(kept, true, 10_240.0),
            verdict(elsewhere, true, 512.0)
        ),
        block.cite(file),
    ];
    block.table(
        &[
            "1,000 finished jobs, in use after them",
            "made on the keeper's thread, per job",
            "made elsewhere, per job",
            "aims: at most 10 KiB, 512 B",
            "results",
        ],
        &[row],
    );
    Ok(())
}
