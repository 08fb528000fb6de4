//! The GPUs each task of an attempt holds on the embedded default, as saved on its
//! Framework ([`pai_contract::meta::ANNOTATION_TASK_GPUS`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use pai_contract::Framework;
use pai_contract::meta::ANNOTATION_TASK_GPUS;

/// `{"attempt": 0, "tasks": {"worker": [[{"index": 0, "uuid": "GPU-…"}], …]}}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    /// The attempt whose tasks hold them.
    pub attempt: i32,
    /// By role, by task index.
    pub tasks: BTreeMap<String, Vec<Vec<Held>>>,
}

/// One GPU a task holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// The machine's index (PCI bus order, as NVML counts).
    pub index: u32,
    /// Its UUID (`GPU-…`).
    pub uuid: String,
}

impl Assignment {
    /// The one saved on `framework`, if any.
    pub fn of(framework: &Framework) -> Option<Self> {
        let text = framework
            .metadata
            .annotations
            .as_ref()?
            .get(ANNOTATION_TASK_GPUS)?;
        serde_json::from_str(text).ok()
    }

    /// The GPUs task `index` of `role` holds.
    pub fn task(&self, role: &str, index: u32) -> &[Held] {
        self.tasks
            .get(role)
            .and_then(|tasks| tasks.get(index as usize))
            .map_or(&[], Vec::as_slice)
    }

    /// Saves it on `framework`.
    pub fn save(&self, framework: &mut Framework) {
        if let Ok(text) = serde_json::to_string(self) {
            framework
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(ANNOTATION_TASK_GPUS.to_string(), text);
        }
    }

    /// OpenPAI's `containerGpus` of a task: a bit per GPU it holds, by index.
    pub fn bits(held: &[Held]) -> u64 {
        held.iter()
            .filter(|h| h.index < 64)
            .fold(0, |bits, h| bits | (1 << h.index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_survives_the_framework_and_gives_openpais_bits() {
        let assignment = Assignment {
            attempt: 2,
            tasks: BTreeMap::from([(
                "worker".to_string(),
                vec![
                    vec![Held {
                        index: 0,
                        uuid: "GPU-a".to_string(),
                    }],
                    vec![
                        Held {
                            index: 1,
                            uuid: "GPU-b".to_string(),
                        },
                        Held {
                            index: 2,
                            uuid: "GPU-c".to_string(),
                        },
                    ],
                ],
            )]),
        };
        let mut framework = Framework::new(
            "f",
            pai_contract::framework::FrameworkSpec {
                description: None,
                execution_type: Default::default(),
                retry_policy: Default::default(),
                task_roles: Vec::new(),
            },
        );
        assignment.save(&mut framework);
        let read = Assignment::of(&framework).expect("saved");
        assert_eq!(read, assignment);
        assert_eq!(Assignment::bits(read.task("worker", 1)), 0b110);
        assert!(read.task("worker", 2).is_empty());
        assert!(read.task("ps", 0).is_empty());
    }
}
