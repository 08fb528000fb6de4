//! BENCHMARKS.md is what the results under `benchmarks/results/` make of it: every
//! generated block as the newest results render it, every figure from a results file (no
//! table outside a block), no issue number, and short enough to read in a minute.

use pai_test_support::bench_page::{Catalog, MAX_LINES, PAGE, check, check_repository};
use pai_test_support::bench_results::repo_root;

fn page() -> String {
    std::fs::read_to_string(repo_root().join(PAGE)).expect("BENCHMARKS.md")
}

fn catalog() -> Catalog {
    Catalog::load(&repo_root().join("benchmarks/results")).expect("the results files read")
}

#[test]
fn the_page_is_what_its_results_make() {
    let problems = check_repository(&repo_root());
    assert!(problems.is_empty(), "{PAGE}:\n{}", problems.join("\n"));
    assert!(page().lines().count() <= MAX_LINES);
}

#[test]
fn a_result_measured_again_makes_its_block_stale() {
    let page = page();
    let mut catalog = catalog();
    // The newest 1,000-task start: its median job over its floor, changed.
    let file = catalog
        .files_mut()
        .iter_mut()
        .filter(|f| f.bench == "local" && f.variant.as_deref() == Some("1000tasks"))
        .max_by(|a, b| a.recorded.cmp(&b.recorded))
        .expect("a 1,000-task start");
    let row = file
        .rows
        .iter_mut()
        .find(|r| r.build == "this" && r.metric == "running / floor: median")
        .expect("its ratio");
    row.value += 0.5;
    let problems = check(&page, &catalog);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("start") && p.contains("differ from what the results make")),
        "{problems:?}"
    );
}

#[test]
fn a_figure_without_its_results_file_fails() {
    let page = page();
    let mut catalog = catalog();
    catalog.files_mut().retain(|f| f.bench != "containers");
    let problems = check(&page, &catalog);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("block `containers`") && p.contains("no results of `containers`")),
        "{problems:?}"
    );
}

#[test]
fn a_table_by_hand_an_issue_number_or_a_long_page_fails() {
    let catalog = catalog();
    let page = page();
    let by_hand = page.replacen("## The barrier\n", "## The barrier\n\n| made | up |\n", 1);
    assert!(
        check(&by_hand, &catalog)
            .iter()
            .any(|p| p.contains("table outside a generated block")),
    );
    let named = page.replacen("## The barrier", "## The barrier (#15)", 1);
    assert!(
        check(&named, &catalog)
            .iter()
            .any(|p| p.contains("names an issue"))
    );
    let long = format!("{page}{}", "more\n".repeat(MAX_LINES));
    assert!(
        check(&long, &catalog)
            .iter()
            .any(|p| p.contains("more than"))
    );
    let unknown = page.replacen(
        "<!-- generated: others -->",
        "<!-- generated: elsewhere -->",
        1,
    );
    let problems = check(&unknown, &catalog);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("no area makes a block `elsewhere`"))
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains("the page has no block `others`"))
    );
}
