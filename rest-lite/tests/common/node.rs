//! A Node.js script of the tests (the OpenPAI SDK's, the portal's browser driver): run
//! to its end, each line it prints a JSON step `{"step": NAME, …}`.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// The steps `script` (in `dir`, run there) printed, and its whole output; fails the
/// test when it failed.
pub struct Steps {
    pub steps: Vec<Value>,
    pub stdout: String,
}

impl Steps {
    /// The step named `name`.
    pub fn get(&self, name: &str) -> &Value {
        self.steps
            .iter()
            .find(|s| s["step"] == name)
            .unwrap_or_else(|| panic!("no step {name} in {}", self.stdout))
    }
}

pub fn run(dir: &Path, script: &str, env: &[(&str, &std::ffi::OsStr)]) -> Steps {
    let mut command = Command::new("node");
    command.arg(dir.join(script)).current_dir(dir);
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().expect("node");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{script} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let steps = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    Steps { steps, stdout }
}
