//! The barrier's area: a gang's release at every size.

use super::catalog::Catalog;
use super::figures::{Block, middle, show, values, verdict};

pub(super) fn barrier(catalog: &Catalog) -> Result<String, String> {
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
