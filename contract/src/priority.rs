//! OpenPAI's job priority classes (protocol v2's `extras.hivedScheduler.jobPriorityClass`):
//! `prod` jobs take what `oppo` jobs borrowed, `oppo` jobs run on what is idle, `test`
//! sits between (OpenPAI's default for a job that names none). A job's class is a label
//! of its Framework; on a cluster it becomes the cluster's priority class of that name
//! (`priorityClasses` in the config), on this machine the order in which waiting jobs
//! start and which running ones give way.

use std::fmt;
use std::str::FromStr;

use crate::Framework;

/// The Framework label (and pod label) naming the job's class, as the user named it.
pub const LABEL: &str = "rest-lite.openpai.io/job-priority";

/// One of OpenPAI's job priority classes.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum JobPriority {
    /// Opportunistic: runs on what nobody else needs, and gives it back.
    Oppo,
    /// OpenPAI's default.
    #[default]
    Test,
    /// Production: takes what lower classes hold.
    Prod,
}

impl JobPriority {
    /// Every class, lowest first.
    pub const ALL: [Self; 3] = [Self::Oppo, Self::Test, Self::Prod];

    /// OpenPAI's name of the class.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Prod => "prod",
            Self::Test => "test",
            Self::Oppo => "oppo",
        }
    }

    /// The class a Framework's label names, if any (a label this version cannot read
    /// is no class).
    pub fn of(framework: &Framework) -> Option<Self> {
        framework.metadata.labels.as_ref()?.get(LABEL)?.parse().ok()
    }

    /// The class a job ranks as: its own, or `test` (OpenPAI's default) when it names
    /// none.
    pub fn ranked(framework: &Framework) -> Self {
        Self::of(framework).unwrap_or_default()
    }
}

impl fmt::Display for JobPriority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is none of the classes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownClass(pub String);

impl fmt::Display for UnknownClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is none of OpenPAI's job priority classes: prod, test, oppo",
            self.0
        )
    }
}

impl std::error::Error for UnknownClass {}

impl FromStr for JobPriority {
    type Err = UnknownClass;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|class| class.as_str() == s)
            .ok_or_else(|| UnknownClass(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_read_back_and_order_lowest_first() {
        for class in JobPriority::ALL {
            assert_eq!(class.as_str().parse(), Ok(class));
        }
        assert!(JobPriority::Prod > JobPriority::Test && JobPriority::Test > JobPriority::Oppo);
        let err = "crit".parse::<JobPriority>().unwrap_err();
        assert!(err.to_string().contains("prod, test, oppo"), "{err}");
    }

    #[test]
    fn a_job_naming_none_ranks_as_test() {
        let mut framework = Framework::new(
            "f",
            crate::FrameworkSpec {
                description: None,
                execution_type: Default::default(),
                retry_policy: Default::default(),
                task_roles: Vec::new(),
            },
        );
        assert_eq!(JobPriority::of(&framework), None);
        assert_eq!(JobPriority::ranked(&framework), JobPriority::Test);
        framework.metadata.labels = Some([(LABEL.to_string(), "oppo".to_string())].into());
        assert_eq!(JobPriority::ranked(&framework), JobPriority::Oppo);
    }
}
