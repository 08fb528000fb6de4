//! Prints docs/reference.md's table of OpenPAI v1 fields: `cargo run -q -p pai-translate
//! --example v1_table`, pasted where docs/reference.md shows it (a test compares the two).

use std::io::Write;

fn main() {
    let _ = std::io::stdout().write_all(pai_translate::spec::v1_fields::markdown().as_bytes());
}
