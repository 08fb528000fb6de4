//! A job's priority class on the cluster: OpenPAI's class
//! ([`pai_contract::priority::JobPriority`]) named as the cluster names it
//! (`priorityClasses` in the config), set where each engine reads it:
//! - kube-scheduler: the pods' `priorityClassName` (a `scheduling.k8s.io/v1`
//!   PriorityClass), which also preempts lower ones' pods from full nodes;
//! - Kueue: the pods' label `kueue.x-k8s.io/priority-class` (a WorkloadPriorityClass of
//!   the same name), which orders its queue and, with the ClusterQueue's
//!   `preemption.withinClusterQueue`, evicts lower Workloads;
//! - Volcano: its PodGroup's `priorityClassName` (derived from the pods', [`crate::gang`]),
//!   and the pods of every class but `prod` annotated `volcano.sh/preemptable: "true"`
//!   (Volcano's preempt action takes only preemptable pods).
//!
//! The server refuses a job whose class the cluster does not have, as it refuses an
//! unknown queue; an API server admits no pod naming a missing PriorityClass.

use serde::{Deserialize, Serialize};

use pai_contract::priority::JobPriority;

/// Kueue's pod label naming the Workload's priority class.
pub const KUEUE_PRIORITY_LABEL: &str = "kueue.x-k8s.io/priority-class";
/// Volcano's pod annotation letting its preempt action take the pod.
pub const VOLCANO_PREEMPTABLE_ANNOTATION: &str = "volcano.sh/preemptable";

/// `priorityClasses`: the cluster's priority class of each of OpenPAI's job classes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PriorityClasses {
    /// The class of `prod` jobs (`prod` by default).
    pub prod: String,
    /// The class of `test` jobs (`test` by default).
    pub test: String,
    /// The class of `oppo` jobs (`oppo` by default).
    pub oppo: String,
    /// The OpenPAI class of a job that names none. Unset: none, so its pods get the
    /// cluster's `globalDefault` PriorityClass (or priority 0) and Kueue gives its
    /// Workload priority 0, below every class above 0.
    pub default: Option<JobPriority>,
}

impl Default for PriorityClasses {
    fn default() -> Self {
        Self {
            prod: JobPriority::Prod.to_string(),
            test: JobPriority::Test.to_string(),
            oppo: JobPriority::Oppo.to_string(),
            default: None,
        }
    }
}

impl PriorityClasses {
    /// The cluster's name of `class`.
    pub fn name(&self, class: JobPriority) -> &str {
        match class {
            JobPriority::Prod => &self.prod,
            JobPriority::Test => &self.test,
            JobPriority::Oppo => &self.oppo,
        }
    }

    /// The class a job of `named` (its spec's) runs as: its own, or the default.
    pub fn class_of(&self, named: Option<JobPriority>) -> Option<JobPriority> {
        named.or(self.default)
    }

    /// The config's fields and the names they give, for its check.
    pub(crate) fn fields(&self) -> [(&'static str, &str); 3] {
        [
            ("priorityClasses.prod", &self.prod),
            ("priorityClasses.test", &self.test),
            ("priorityClasses.oppo", &self.oppo),
        ]
    }
}

/// Whether Volcano's preempt action may take the pods of a job of `class`: every class
/// but the highest.
pub fn volcano_preemptable(class: JobPriority) -> bool {
    class != JobPriority::Prod
}
