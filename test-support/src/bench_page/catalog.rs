//! Every results file, and the newest one that has the figures an area needs.

use std::path::Path;

use crate::bench_results::{Results, read_all};

/// Every results file, to draw figures from.
#[derive(Debug)]
pub struct Catalog {
    files: Vec<Results>,
}

impl Catalog {
    pub fn new(files: Vec<Results>) -> Self {
        Self { files }
    }

    /// Every results file below `dir`.
    pub fn load(dir: &Path) -> Result<Self, Vec<String>> {
        read_all(dir).map(Self::new)
    }

    pub fn files(&self) -> &[Results] {
        &self.files
    }

    pub fn files_mut(&mut self) -> &mut Vec<Results> {
        &mut self.files
    }

    /// The newest file of `bench` and `variant` whose own build has every figure of
    /// `needs` (case, metric).
    pub(super) fn newest(
        &self,
        bench: &str,
        variant: Option<&str>,
        needs: &[(&str, &str)],
    ) -> Result<&Results, String> {
        self.files
            .iter()
            .filter(|f| f.bench == bench && f.variant.as_deref() == variant)
            .filter(|f| needs.iter().all(|(case, metric)| f.has(case, metric)))
            .max_by(|a, b| (&a.recorded, &a.path).cmp(&(&b.recorded, &b.path)))
            .ok_or_else(|| {
                format!(
                    "no results of `{bench}`{} with {}",
                    variant.map_or(String::new(), |v| format!(" ({v})")),
                    needs
                        .iter()
                        .map(|(c, m)| format!("“{c}: {m}”"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
    }
}
