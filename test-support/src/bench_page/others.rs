//! The other figures: soak, the lines' order, and what has no area of its own.

use super::catalog::Catalog;
use super::figures::{Block, convert, middle, number, show, spread, values, verdict};

pub(super) fn others(catalog: &Catalog) -> Result<String, String> {
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
