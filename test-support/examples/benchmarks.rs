//! `cargo run -q -p pai-test-support --example benchmarks -- [--write]`: BENCHMARKS.md's
//! generated blocks made again from `benchmarks/results/` (`BENCH_RESULTS_DIR` reads
//! another folder). With `--write` the page is rewritten; without it, checked: what is
//! wrong is said and the exit status is 1.

use pai_test_support::bench_page::{Catalog, PAGE, check, render};
use pai_test_support::bench_results::{repo_root, results_dir};

fn main() {
    let write = std::env::args().any(|a| a == "--write");
    let path = repo_root().join(PAGE);
    let page = std::fs::read_to_string(&path).unwrap_or_else(|e| fail(&[format!("{PAGE}: {e}")]));
    let catalog = Catalog::load(&results_dir()).unwrap_or_else(|problems| fail(&problems));
    if write {
        let made = render(&page, &catalog).unwrap_or_else(|problems| fail(&problems));
        if made != page {
            std::fs::write(&path, &made).unwrap_or_else(|e| fail(&[format!("{PAGE}: {e}")]));
            eprintln!(
                "{PAGE} rewritten from {} results files",
                catalog.files().len()
            );
        }
    }
    let page = std::fs::read_to_string(&path).unwrap_or_else(|e| fail(&[format!("{PAGE}: {e}")]));
    let problems = check(&page, &catalog);
    if !problems.is_empty() {
        fail(&problems);
    }
}

fn fail(problems: &[String]) -> ! {
    for problem in problems {
        eprintln!("{PAGE}: {problem}");
    }
    std::process::exit(1)
}
