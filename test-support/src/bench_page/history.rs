//! History reads: pages of finished jobs, here and from the cluster's history.

use super::catalog::Catalog;
use super::figures::{AUTO, Block, middle, show, spread, values, verdict};
use crate::bench_results::Results;

pub(super) fn history(catalog: &Catalog) -> Result<String, String> {
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
