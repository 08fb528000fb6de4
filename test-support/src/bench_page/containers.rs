//! Containers per engine: a task's start and what it costs, beside the engine's own.

use super::catalog::Catalog;
use super::figures::{Block, show};

pub(super) fn containers(catalog: &Catalog) -> Result<String, String> {
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
