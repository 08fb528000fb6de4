//! Every example's Framework, compared with the reviewed snapshot in tests/snapshots/
//! and checked against FrameworkController's CRD. After an intended change, run with
//! `BLESS=1` and review the diff.

use crate::common;

use std::path::Path;

#[test]
fn every_example_matches_its_snapshot() {
    let root = common::repo_root();
    let snapshots = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots");
    let bless = std::env::var_os("BLESS").is_some();
    let mut examples: Vec<_> = std::fs::read_dir(root.join("examples"))
        .expect("examples dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("json" | "yaml" | "yml")
            )
        })
        .collect();
    examples.sort();
    assert!(examples.len() >= 4, "the four examples are there");

    let mut mismatches = Vec::new();
    for example in &examples {
        let text = std::fs::read_to_string(example).expect("read example");
        let framework = common::transform(&text, 42)
            .unwrap_or_else(|e| panic!("{} does not transform: {e}", example.display()));
        common::assert_cluster_accepts(&framework);
        let rendered = serde_saphyr::to_string(&framework).expect("yaml");
        let reread: pai_contract::Framework =
            serde_saphyr::from_str(&rendered).expect("the YAML reads back");
        assert_eq!(
            reread,
            framework,
            "{} does not round-trip through YAML",
            example.display()
        );
        let stem = example.file_stem().and_then(|s| s.to_str()).expect("stem");
        let snapshot = snapshots.join(format!("{stem}.yaml"));
        if bless {
            std::fs::write(&snapshot, &rendered).expect("write snapshot");
            continue;
        }
        let expected = std::fs::read_to_string(&snapshot)
            .unwrap_or_else(|_| panic!("no snapshot {}: run with BLESS=1", snapshot.display()));
        if expected != rendered {
            mismatches.push(format!(
                "{}: differs from {}",
                example.display(),
                snapshot.display()
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{}\nrun with BLESS=1 after reviewing",
        mismatches.join("\n")
    );
}

#[test]
fn the_same_seed_gives_the_same_framework() {
    let text =
        std::fs::read_to_string(common::repo_root().join("examples/tensorflow-ps-worker.json"))
            .expect("read");
    let a = common::transform(&text, 7).expect("transforms");
    let b = common::transform(&text, 7).expect("transforms");
    assert_eq!(a, b);
}
