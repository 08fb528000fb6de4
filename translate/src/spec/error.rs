//! Errors of a job spec: each names the field path and the rule it broke.

use std::fmt;

/// Where in the spec a value sits: `taskRoles[1].portList[0].label`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldPath(String);

impl FieldPath {
    /// The whole document.
    pub fn root() -> Self {
        Self::default()
    }

    pub fn field(&self, name: &str) -> Self {
        if self.0.is_empty() {
            Self(name.to_string())
        } else {
            Self(format!("{}.{name}", self.0))
        }
    }

    pub fn index(&self, i: usize) -> Self {
        Self(format!("{}[{i}]", self.0))
    }

    pub fn as_str(&self) -> &str {
        if self.0.is_empty() { "(spec)" } else { &self.0 }
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One broken rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError {
    pub path: String,
    pub rule: String,
}

impl SpecError {
    pub fn new(path: &FieldPath, rule: impl Into<String>) -> Self {
        Self {
            path: path.as_str().to_string(),
            rule: rule.into(),
        }
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.rule)
    }
}

/// Every rule a spec broke, in document order.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct SpecErrors(pub Vec<SpecError>);

impl SpecErrors {
    pub fn single(path: &FieldPath, rule: impl Into<String>) -> Self {
        Self(vec![SpecError::new(path, rule)])
    }

    pub fn iter(&self) -> impl Iterator<Item = &SpecError> {
        self.0.iter()
    }
}

impl fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        write!(
            f,
            "the job spec has {n} error{}:",
            if n == 1 { "" } else { "s" }
        )?;
        for e in &self.0 {
            write!(f, "\n  {e}")?;
        }
        Ok(())
    }
}

/// Collects errors while a spec is read, so that one pass reports all of them.
#[derive(Debug, Default)]
pub(crate) struct Errors(Vec<SpecError>);

impl Errors {
    pub(crate) fn push(&mut self, path: &FieldPath, rule: impl Into<String>) {
        self.0.push(SpecError::new(path, rule));
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn into_spec_errors(self) -> SpecErrors {
        SpecErrors(self.0)
    }
}
