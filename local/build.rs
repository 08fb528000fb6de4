//! Embeds the runtime's `prep/` and `init/` scripts (the workspace's own folders) in the
//! crate, so that a `rest-lite` installed anywhere carries what its tasks run.

use std::fmt::Write;
use std::path::Path;

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let root = Path::new(&manifest)
        .parent()
        .expect("the crate lives in the workspace");
    let mut out = String::from("&[\n");
    for folder in ["prep", "init"] {
        let dir = root.join(folder);
        println!("cargo:rerun-if-changed={}", dir.display());
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .filter_map(Result::ok)
            .filter(|entry| entry.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|entry| entry.file_name().into_string().ok())
            .collect();
        names.sort();
        for name in names {
            let path = dir.join(&name);
            writeln!(
                out,
                "    Asset {{ path: {:?}, text: include_str!({:?}) }},",
                format!("{folder}/{name}"),
                path.display().to_string()
            )
            .expect("writing to a String");
        }
    }
    out.push_str("]\n");
    let target =
        Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("assets.rs");
    std::fs::write(&target, out).unwrap_or_else(|e| panic!("writing {}: {e}", target.display()));
}
