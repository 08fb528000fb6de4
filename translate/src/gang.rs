//! Gang admission: a job's pods handed to the gang scheduler or queue the cluster runs,
//! so that its tasks are placed all together or not at all (the barrier holds every task
//! until all have an address, so a partly placed job only holds its nodes idle).
//!
//! The engines (`gang.engine` in the cluster config), as their projects publish them:
//! - `none` (the default): kube-scheduler places the pods one by one.
//! - `coscheduling`, scheduler-plugins' Coscheduling plugin: a `PodGroup` of
//!   `scheduling.x-k8s.io/v1alpha1` per job (`minMember`, `minResources`,
//!   `scheduleTimeoutSeconds`); pods labelled `scheduling.x-k8s.io/pod-group: <group>`
//!   and placed by the scheduler that runs the plugin (`schedulerName`; scheduler-plugins'
//!   install names it `scheduler-plugins-scheduler`).
//! - `volcano`: a `PodGroup` of `scheduling.volcano.sh/v1beta1` per job (`minMember`,
//!   `minResources`, `queue`, `priorityClassName`); pods annotated
//!   `scheduling.k8s.io/group-name: <group>`, placed by the scheduler `volcano`.
//! - `kueue`, Kueue's plain pod groups: no object of ours; pods labelled
//!   `kueue.x-k8s.io/queue-name: <LocalQueue>` and `kueue.x-k8s.io/pod-group-name: <group>`
//!   and annotated `kueue.x-k8s.io/pod-group-total-count: "<tasks>"`; Kueue makes the
//!   Workload and admits the group whole against its ClusterQueue's quota.
//!
//! One group per job, named as its Framework, for every attempt: FrameworkController
//! makes a new attempt's pods under the same names, and they join the same group, which
//! admits the whole attempt again (`minMember` is every task, as the barrier needs).
//!
//! What the group needs is written into the Framework's pod templates, so [`group`]
//! derives the object from the Framework alone: what the server creates is what
//! `rest-lite transform` shows.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use pai_contract::Framework;
use pai_contract::env::barrier;
use pai_contract::framework::{INIT_CONTAINER, MAIN_CONTAINER};
use pai_contract::priority::JobPriority;

/// Coscheduling's pod label naming the pod's group.
pub const COSCHEDULING_LABEL: &str = "scheduling.x-k8s.io/pod-group";
/// Coscheduling's API group and version of `PodGroup`.
pub const COSCHEDULING_API: &str = "scheduling.x-k8s.io/v1alpha1";
/// The scheduler scheduler-plugins' install runs Coscheduling in.
pub const COSCHEDULING_SCHEDULER: &str = "scheduler-plugins-scheduler";
/// Volcano's pod annotation naming the pod's group.
pub const VOLCANO_GROUP_ANNOTATION: &str = "scheduling.k8s.io/group-name";
/// Volcano's pod annotation naming the pod's queue.
pub const VOLCANO_QUEUE_ANNOTATION: &str = "scheduling.volcano.sh/queue-name";
/// Volcano's API group and version of `PodGroup`.
pub const VOLCANO_API: &str = "scheduling.volcano.sh/v1beta1";
/// Volcano's scheduler.
pub const VOLCANO_SCHEDULER: &str = "volcano";
/// Volcano's queue when none is named.
pub const VOLCANO_DEFAULT_QUEUE: &str = "default";
/// Kueue's pod label naming the LocalQueue.
pub const KUEUE_QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// Kueue's pod label naming the pod's group.
pub const KUEUE_GROUP_LABEL: &str = "kueue.x-k8s.io/pod-group-name";
/// Kueue's pod annotation: how many pods the group has.
pub const KUEUE_TOTAL_ANNOTATION: &str = "kueue.x-k8s.io/pod-group-total-count";
/// The resource both PodGroup kinds are served as.
pub const PODGROUPS: &str = "podgroups";

/// Which engine admits jobs whole.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// kube-scheduler, pod by pod.
    #[default]
    None,
    Coscheduling,
    Volcano,
    Kueue,
}

/// The `gang` section of the cluster config.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct GangConfig {
    /// Which engine admits jobs whole; `none` by default.
    pub engine: Engine,
    /// The scheduler that places the pods. Unset: `scheduler-plugins-scheduler` for
    /// `coscheduling`, `volcano` for `volcano`, the cluster's default otherwise.
    pub scheduler_name: Option<String>,
    /// The queue of a job whose spec names no `virtualCluster`: a Volcano `Queue`
    /// (`default` when unset) or a Kueue `LocalQueue` of the jobs' namespace (needed for
    /// `kueue`).
    pub default_queue: Option<String>,
    /// `volcano`: the priority class of every group and its pods whose job names no
    /// class (`priorityClasses` names those that do).
    pub priority_class_name: Option<String>,
}

impl GangConfig {
    /// The scheduler the pods name, if not the cluster's default.
    pub fn scheduler(&self) -> Option<&str> {
        self.scheduler_name.as_deref().or(match self.engine {
            Engine::Coscheduling => Some(COSCHEDULING_SCHEDULER),
            Engine::Volcano => Some(VOLCANO_SCHEDULER),
            Engine::None | Engine::Kueue => None,
        })
    }

    /// The queue of a job that names `requested` (its `virtualCluster`), if the engine
    /// has queues.
    pub fn queue<'a>(&'a self, requested: Option<&'a str>) -> Option<&'a str> {
        match self.engine {
            Engine::Volcano => Some(
                requested
                    .or(self.default_queue.as_deref())
                    .unwrap_or(VOLCANO_DEFAULT_QUEUE),
            ),
            Engine::Kueue => requested.or(self.default_queue.as_deref()),
            Engine::None | Engine::Coscheduling => None,
        }
    }
}

/// What every pod of a job carries for the engine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodMarks {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub scheduler_name: Option<String>,
    pub priority_class_name: Option<String>,
}

/// The marks of the pods of group `group` (the Framework's name) with `tasks` tasks in
/// all, in queue `queue` (see [`GangConfig::queue`]).
pub fn pod_marks(config: &GangConfig, group: &str, queue: Option<&str>, tasks: u32) -> PodMarks {
    let mut marks = PodMarks {
        scheduler_name: config.scheduler().map(str::to_string),
        ..PodMarks::default()
    };
    let mut label = |k: &str, v: &str| marks.labels.insert(k.to_string(), v.to_string());
    match config.engine {
        Engine::None => {}
        Engine::Coscheduling => {
            label(COSCHEDULING_LABEL, group);
        }
        Engine::Kueue => {
            label(KUEUE_GROUP_LABEL, group);
            if let Some(queue) = queue {
                label(KUEUE_QUEUE_LABEL, queue);
            }
            marks
                .annotations
                .insert(KUEUE_TOTAL_ANNOTATION.to_string(), tasks.to_string());
        }
        Engine::Volcano => {
            marks
                .annotations
                .insert(VOLCANO_GROUP_ANNOTATION.to_string(), group.to_string());
            if let Some(queue) = queue {
                marks
                    .annotations
                    .insert(VOLCANO_QUEUE_ANNOTATION.to_string(), queue.to_string());
            }
            marks.priority_class_name = config.priority_class_name.clone();
        }
    }
    marks
}

impl PodMarks {
    /// Adds the marks of a job of priority class `class`, named `name` on the cluster
    /// ([`crate::priority`]): the pods' priority class, Kueue's Workload class where
    /// Kueue manages the pods, Volcano's leave to preempt them. (The job's labels name
    /// OpenPAI's class: [`pai_contract::priority::LABEL`].)
    pub fn prioritise(&mut self, engine: Engine, class: JobPriority, name: &str) {
        self.priority_class_name = Some(name.to_string());
        if self.labels.contains_key(KUEUE_QUEUE_LABEL) {
            self.labels.insert(
                crate::priority::KUEUE_PRIORITY_LABEL.to_string(),
                name.to_string(),
            );
        }
        if engine == Engine::Volcano && crate::priority::volcano_preemptable(class) {
            self.annotations.insert(
                crate::priority::VOLCANO_PREEMPTABLE_ANNOTATION.to_string(),
                "true".to_string(),
            );
        }
    }
}

/// Labels or annotations.
type Marks<'a> = &'a BTreeMap<String, String>;

/// The labels and annotations the pods of `framework` carry (every role's carry the same
/// engine marks: the first role's are read).
fn marks_of(framework: &Framework) -> Option<(Marks<'_>, Marks<'_>)> {
    static NONE: BTreeMap<String, String> = BTreeMap::new();
    let first = framework
        .spec
        .task_roles
        .first()?
        .task
        .pod
        .metadata
        .as_ref()?;
    Some((
        first.labels.as_ref().unwrap_or(&NONE),
        first.annotations.as_ref().unwrap_or(&NONE),
    ))
}

/// The queue the pods of `framework` name, with its engine: a Volcano Queue or a Kueue
/// LocalQueue; `None` for engines without queues.
pub fn named_queue(framework: &Framework) -> Option<(Engine, &str)> {
    let (labels, annotations) = marks_of(framework)?;
    if let Some(queue) = annotations.get(VOLCANO_QUEUE_ANNOTATION) {
        return Some((Engine::Volcano, queue));
    }
    labels
        .get(KUEUE_QUEUE_LABEL)
        .map(|q| (Engine::Kueue, q.as_str()))
}

/// A group object to create beside a Framework.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    /// `group/version` of its kind (`PodGroup` of coscheduling or Volcano).
    pub api_version: &'static str,
    /// The object, owner references aside (the Framework's UID comes once it exists).
    pub object: Value,
}

/// The group object `framework`'s pods name, if their engine has one (coscheduling and
/// Volcano; Kueue makes its own Workload), derived from the Framework alone:
/// `minMember` every task, `minResources` the sum of every task's main container
/// requests (the same numbers the pods request), coscheduling's
/// `scheduleTimeoutSeconds` the barrier's timeout (a group not placed whole by then is
/// given up, as the barrier would give up its placed part), Volcano's queue and priority
/// class as the pods name them.
pub fn group(framework: &Framework) -> Option<Group> {
    let roles = &framework.spec.task_roles;
    let (labels, annotations) = marks_of(framework)?;
    let (api_version, group_name) = if let Some(name) = labels.get(COSCHEDULING_LABEL) {
        (COSCHEDULING_API, name.clone())
    } else if let Some(name) = annotations.get(VOLCANO_GROUP_ANNOTATION) {
        (VOLCANO_API, name.clone())
    } else {
        return None;
    };
    let tasks =
        |r: &pai_contract::framework::TaskRoleSpec| u32::try_from(r.task_number).unwrap_or(0);
    let members: u32 = roles.iter().map(tasks).sum();
    let mut totals: BTreeMap<String, Amount> = BTreeMap::new();
    for role in roles {
        let requests = role
            .task
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.iter().find(|c| c.name == MAIN_CONTAINER))
            .and_then(|c| c.resources.as_ref())
            .and_then(|r| r.requests.as_ref());
        for (resource, quantity) in requests.into_iter().flatten() {
            if let Some(amount) = Amount::parse(&quantity.0) {
                let total = totals.entry(resource.clone()).or_default();
                *total = total.add(amount.times(tasks(role)));
            }
        }
    }
    let min_resources: serde_json::Map<String, Value> = totals
        .into_iter()
        .map(|(resource, amount)| (resource, json!(amount.to_string())))
        .collect();
    let mut spec = json!({"minMember": members, "minResources": min_resources});
    if api_version == COSCHEDULING_API {
        spec["scheduleTimeoutSeconds"] = json!(barrier_timeout(framework));
    } else {
        let queue = annotations
            .get(VOLCANO_QUEUE_ANNOTATION)
            .map_or(VOLCANO_DEFAULT_QUEUE, String::as_str);
        spec["queue"] = json!(queue);
        if let Some(class) = roles[0]
            .task
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.priority_class_name.as_ref())
        {
            spec["priorityClassName"] = json!(class);
        }
    }
    let object = json!({
        "apiVersion": api_version,
        "kind": "PodGroup",
        "metadata": {
            "name": group_name,
            "namespace": framework.metadata.namespace,
            "labels": framework.metadata.labels,
        },
        "spec": spec,
    });
    Some(Group {
        api_version,
        object,
    })
}

/// The barrier's timeout in `framework`'s init containers, in seconds.
fn barrier_timeout(framework: &Framework) -> u32 {
    framework
        .spec
        .task_roles
        .iter()
        .filter_map(|r| r.task.pod.spec.as_ref())
        .flat_map(|s| s.init_containers.iter().flatten())
        .filter(|c| c.name == INIT_CONTAINER)
        .flat_map(|c| c.env.iter().flatten())
        .find(|e| e.name == barrier::TIMEOUT)
        .and_then(|e| e.value.as_ref()?.parse().ok())
        .unwrap_or(barrier::DEFAULT_TIMEOUT_SEC)
}

/// An amount of a resource in the forms a Framework's requests take: whole units
/// (`2`, cores or GPUs), millis (`500m`), or bytes with a binary suffix (`1024Mi`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Amount {
    /// In thousandths of a unit (millicores), or bytes when `bytes`.
    value: u128,
    bytes: bool,
}

const BINARY: [(&str, u32); 5] = [("Ki", 10), ("Mi", 20), ("Gi", 30), ("Ti", 40), ("Pi", 50)];

impl Amount {
    fn parse(text: &str) -> Option<Self> {
        let digits = |s: &str| -> Option<u128> {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse().ok())
                .flatten()
        };
        if let Some(millis) = text.strip_suffix('m') {
            return Some(Self {
                value: digits(millis)?,
                bytes: false,
            });
        }
        for (suffix, shift) in BINARY {
            if let Some(n) = text.strip_suffix(suffix) {
                return Some(Self {
                    value: digits(n)? << shift,
                    bytes: true,
                });
            }
        }
        Some(Self {
            value: digits(text)? * 1000,
            bytes: false,
        })
    }

    fn times(self, n: u32) -> Self {
        Self {
            value: self.value * u128::from(n),
            ..self
        }
    }

    fn add(self, other: Self) -> Self {
        Self {
            value: self.value + other.value,
            bytes: self.bytes || other.bytes,
        }
    }
}

impl std::fmt::Display for Amount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.bytes {
            // The largest binary suffix that divides it, as people write them.
            for (suffix, shift) in BINARY.iter().rev() {
                if self.value > 0 && self.value.is_multiple_of(1u128 << shift) {
                    return write!(f, "{}{suffix}", self.value >> shift);
                }
            }
            write!(f, "{}", self.value)
        } else if self.value.is_multiple_of(1000) {
            write!(f, "{}", self.value / 1000)
        } else {
            write!(f, "{}m", self.value)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_add_in_their_own_units() {
        let sum = Amount::parse("1024Mi")
            .unwrap()
            .times(3)
            .add(Amount::parse("512Mi").unwrap());
        assert_eq!(sum.to_string(), "3584Mi");
        assert_eq!(Amount::parse("2").unwrap().times(6).to_string(), "12");
        assert_eq!(
            Amount::parse("500m")
                .unwrap()
                .add(Amount::parse("1").unwrap())
                .to_string(),
            "1500m"
        );
        assert_eq!(Amount::parse("4096Mi").unwrap().to_string(), "4Gi");
        assert_eq!(Amount::parse("1.5"), None);
        assert_eq!(Amount::parse("Mi"), None);
    }

    #[test]
    fn each_engine_marks_the_pods_as_it_reads_them() {
        let config = |engine| GangConfig {
            engine,
            ..GangConfig::default()
        };
        assert_eq!(
            pod_marks(&config(Engine::None), "g", None, 8),
            PodMarks::default()
        );
        let co = pod_marks(&config(Engine::Coscheduling), "g", None, 8);
        assert_eq!(co.labels[COSCHEDULING_LABEL], "g");
        assert_eq!(co.scheduler_name.as_deref(), Some(COSCHEDULING_SCHEDULER));
        let volcano = config(Engine::Volcano);
        let marks = pod_marks(&volcano, "g", volcano.queue(None), 8);
        assert_eq!(marks.annotations[VOLCANO_GROUP_ANNOTATION], "g");
        assert_eq!(marks.annotations[VOLCANO_QUEUE_ANNOTATION], "default");
        assert_eq!(marks.scheduler_name.as_deref(), Some("volcano"));
        let kueue = GangConfig {
            default_queue: Some("team-a".into()),
            ..config(Engine::Kueue)
        };
        let marks = pod_marks(&kueue, "g", kueue.queue(Some("team-b")), 8);
        assert_eq!(marks.labels[KUEUE_GROUP_LABEL], "g");
        assert_eq!(marks.labels[KUEUE_QUEUE_LABEL], "team-b");
        assert_eq!(marks.annotations[KUEUE_TOTAL_ANNOTATION], "8");
        assert_eq!(marks.scheduler_name, None);
        assert_eq!(kueue.queue(None), Some("team-a"));
    }
}
