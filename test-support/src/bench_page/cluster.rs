//! A submission on a cluster: its requests, objects and bytes beside its Framework.

use super::catalog::Catalog;
use super::figures::{Block, middle, number, show, spread, values, verdict, with_unit};

pub(super) fn cluster(catalog: &Catalog) -> Result<String, String> {
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
