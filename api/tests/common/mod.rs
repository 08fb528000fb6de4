//! The translation's test helpers (a spec through the transformer), shared by file.
#![allow(dead_code)]

#[path = "../../../translate/tests/common/mod.rs"]
mod spec;
#[allow(unused_imports)]
pub use spec::*;
