//! This machine's GPUs: what there is (what the operator stated, else NVML, else
//! `nvidia-smi`), which GPU types a job may ask for, and what a task is told about the
//! GPUs it holds (which ones it holds: [`crate::slots`], saved on its Framework as an
//! [`Assignment`]).

use std::collections::BTreeMap;

pub use pai_translate::gpus::{GpuDevice, GpuType};

pub use pai_job::gpus::{Assignment, Held};

/// Where the inventory came from, for the server's start line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The operator's config (`gpus.devices`).
    Config,
    /// NVML (the driver's library).
    Nvml,
    /// `nvidia-smi`'s query output.
    NvidiaSmi,
    /// No probe found any: why.
    None(String),
}

/// The machine's GPUs and the operator's GPU types.
#[derive(Clone, Debug, Default)]
pub struct Gpus {
    /// By index.
    pub devices: Vec<GpuDevice>,
    /// OpenPAI's GPU types (`gpuType`), by SKU name.
    pub types: BTreeMap<String, GpuType>,
}

impl Gpus {
    /// The devices `gpu_type` allows: those of the type where the config maps it, every
    /// one without a type or with one the config does not map (warned at submission,
    /// [`Gpus::unmapped`]).
    pub fn allowed(&self, gpu_type: Option<&str>) -> Vec<bool> {
        match gpu_type.and_then(|name| Some((name, self.types.get(name)?))) {
            Some((name, kind)) => self.devices.iter().map(|d| kind.has(name, d)).collect(),
            None => vec![true; self.devices.len()],
        }
    }

    /// The warning for a `gpuType` the config does not map.
    pub fn unmapped(&self, gpu_type: Option<&str>) -> Option<String> {
        let name = gpu_type?;
        (!self.types.contains_key(name)).then(|| {
            format!(
                "gpuType: {name:?} is not used: it is not one of this installation's GPU types ({}; config gpus.types), so any of this machine's GPUs takes the task",
                if self.types.is_empty() {
                    "none are configured".to_string()
                } else {
                    self.types.keys().cloned().collect::<Vec<_>>().join(", ")
                }
            )
        })
    }

    /// Why a job asking `per_task` GPUs for each of its tasks (of type `gpu_type`) can
    /// never run here, if it cannot: the numbers the machine has.
    pub fn refusal(&self, per_task: &[u32], gpu_type: Option<&str>) -> Option<String> {
        let total: u64 = per_task.iter().map(|&n| u64::from(n)).sum();
        if total == 0 {
            return None;
        }
        let allowed = self.allowed(gpu_type);
        let have = allowed.iter().filter(|&&a| a).count() as u64;
        let most = per_task.iter().copied().max().unwrap_or(0);
        let kind = gpu_type
            .filter(|t| self.types.contains_key(*t))
            .map_or(String::new(), |t| format!(" of type {t}"));
        if total > have {
            return Some(format!(
                "the job asks for {}{kind} ({}); this machine has {have}{}: submit it to a cluster, or ask for fewer",
                count(total),
                per_task_text(per_task),
                if self.devices.is_empty() {
                    " (no NVIDIA GPU found; config gpus.devices states them)".to_string()
                } else {
                    String::new()
                }
            ));
        }
        debug_assert!(u64::from(most) <= have);
        None
    }
}

/// "1 GPU", "2 GPUs".
pub fn count(n: u64) -> String {
    if n == 1 {
        "1 GPU".to_string()
    } else {
        format!("{n} GPUs")
    }
}

/// "2 tasks × 1, 1 task × 4".
fn per_task_text(per_task: &[u32]) -> String {
    let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
    for &n in per_task.iter().filter(|&&n| n > 0) {
        *counts.entry(n).or_default() += 1;
    }
    counts
        .iter()
        .rev()
        .map(|(gpus, tasks)| {
            format!(
                "{tasks} task{} × {gpus}",
                if *tasks == 1 { "" } else { "s" }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The machine's GPUs: NVML's, else `nvidia-smi`'s; none (and why) when neither answers.
pub fn probe() -> (Vec<GpuDevice>, Source) {
    let nvml = match nvml() {
        Ok(devices) => return (devices, Source::Nvml),
        Err(why) => why,
    };
    match nvidia_smi() {
        Ok(devices) => (devices, Source::NvidiaSmi),
        Err(smi) => (Vec::new(), Source::None(format!("{nvml}; {smi}"))),
    }
}

fn nvml() -> Result<Vec<GpuDevice>, String> {
    // The driver installs the versioned name; the unversioned one is the development link.
    let nvml = nvml_wrapper::Nvml::builder()
        .lib_path(std::ffi::OsStr::new("libnvidia-ml.so.1"))
        .init()
        .map_err(|e| format!("NVML: {e}"))?;
    let count = nvml.device_count().map_err(|e| format!("NVML: {e}"))?;
    (0..count)
        .map(|index| {
            let device = nvml
                .device_by_index(index)
                .map_err(|e| format!("NVML device {index}: {e}"))?;
            Ok(GpuDevice {
                index,
                uuid: device
                    .uuid()
                    .map_err(|e| format!("NVML device {index}: {e}"))?,
                memory_mib: device.memory_info().map_or(0, |m| m.total / (1024 * 1024)),
                model: device.name().unwrap_or_default(),
            })
        })
        .collect()
}

fn nvidia_smi() -> Result<Vec<GpuDevice>, String> {
    let output = std::process::Command::new("nvidia-smi")
        .args([
            "--query-gpu=index,uuid,memory.total,name",
            "--format=csv,noheader,nounits",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("nvidia-smi: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "nvidia-smi: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    parse_nvidia_smi(&String::from_utf8_lossy(&output.stdout))
}

/// `0, GPU-661b…, 143771, NVIDIA H200` per line.
fn parse_nvidia_smi(text: &str) -> Result<Vec<GpuDevice>, String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.splitn(4, ',').map(str::trim).collect();
            let [index, uuid, memory, model] = fields[..] else {
                return Err(format!("nvidia-smi: cannot read {line:?}"));
            };
            Ok(GpuDevice {
                index: index
                    .parse()
                    .map_err(|_| format!("nvidia-smi: cannot read {line:?}"))?,
                uuid: uuid.to_string(),
                memory_mib: memory.parse().unwrap_or(0),
                model: model.to_string(),
            })
        })
        .collect()
}

/// The variables [`task_env`] sets.
pub const TASK_VARIABLES: [&str; 3] = [
    "CUDA_DEVICE_ORDER",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
];

/// What a task holding `devices` is told: which GPUs are its own, by the names CUDA and
/// NVIDIA's container tools read. On the host the indices are the machine's, counted in PCI
/// bus order (`CUDA_DEVICE_ORDER`, as NVML counts); in a container, which sees only its
/// devices, they are counted from 0. A task without GPUs on a machine with some is told it
/// has none (an empty list hides every device from CUDA).
pub fn task_env(devices: &[GpuDevice], in_container: bool) -> Vec<(String, String)> {
    let indices: Vec<String> = if in_container {
        (0..devices.len()).map(|i| i.to_string()).collect()
    } else {
        devices.iter().map(|d| d.index.to_string()).collect()
    };
    let uuids: Vec<&str> = devices.iter().map(|d| d.uuid.as_str()).collect();
    let [order, cuda, nvidia] = TASK_VARIABLES.map(str::to_string);
    vec![
        (order, "PCI_BUS_ID".to_string()),
        (cuda, indices.join(",")),
        (
            nvidia,
            if uuids.is_empty() {
                // NVIDIA's container toolkit's word for none.
                "void".to_string()
            } else {
                uuids.join(",")
            },
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(n: u32, model: &str) -> Gpus {
        Gpus {
            devices: (0..n)
                .map(|index| GpuDevice {
                    index,
                    uuid: format!("GPU-{index}"),
                    memory_mib: 1024,
                    model: model.to_string(),
                })
                .collect(),
            types: BTreeMap::new(),
        }
    }

    #[test]
    fn nvidia_smis_query_is_read() {
        let text = "0, GPU-661be54a-4d1f-6fbd-8694-c2cf6acd54f3, 143771, NVIDIA H200\n1, GPU-b, 81559, NVIDIA H100 80GB HBM3, rev 2\n";
        let devices = parse_nvidia_smi(text).expect("parsed");
        assert_eq!(devices.len(), 2);
        assert_eq!(devices[0].uuid, "GPU-661be54a-4d1f-6fbd-8694-c2cf6acd54f3");
        assert_eq!(devices[0].memory_mib, 143_771);
        assert_eq!(devices[1].model, "NVIDIA H100 80GB HBM3, rev 2");
        assert!(parse_nvidia_smi("garbage").is_err());
    }

    #[test]
    fn a_job_larger_than_the_machine_is_refused_with_both_numbers() {
        let machine = gpus(3, "NVIDIA H100");
        assert_eq!(machine.refusal(&[1, 1], None), None);
        let why = machine.refusal(&[4], None).expect("refused");
        assert!(
            why.contains("asks for 4 GPUs (1 task × 4); this machine has 3"),
            "{why}"
        );
        let why = gpus(0, "").refusal(&[1], None).expect("none here");
        assert!(
            why.contains("this machine has 0 (no NVIDIA GPU found"),
            "{why}"
        );
        assert_eq!(gpus(0, "").refusal(&[0, 0], None), None);
    }

    #[test]
    fn a_type_limits_the_devices_and_an_unmapped_one_is_warned() {
        let mut machine = gpus(2, "NVIDIA H100 80GB HBM3");
        machine.devices[1].model = "Tesla V100".to_string();
        machine.types.insert("H100".to_string(), GpuType::default());
        machine.types.insert("V100".to_string(), GpuType::default());
        assert_eq!(machine.allowed(Some("H100")), vec![true, false]);
        let why = machine.refusal(&[1, 1], Some("V100")).expect("one V100");
        assert!(why.contains("2 GPUs of type V100"), "{why}");
        assert_eq!(machine.refusal(&[1, 1], Some("A100")), None);
        assert_eq!(machine.allowed(Some("A100")), vec![true, true]);
        let warning = machine.unmapped(Some("A100")).expect("warned");
        assert!(
            warning.contains("(H100, V100; config gpus.types)"),
            "{warning}"
        );
        assert_eq!(machine.unmapped(Some("H100")), None);
    }

    #[test]
    fn a_task_is_told_only_its_own_devices() {
        let machine = gpus(3, "x");
        let env = task_env(&machine.devices[1..], false);
        assert!(env.contains(&("CUDA_VISIBLE_DEVICES".to_string(), "1,2".to_string())));
        assert!(env.contains(&(
            "NVIDIA_VISIBLE_DEVICES".to_string(),
            "GPU-1,GPU-2".to_string()
        )));
        let inside = task_env(&machine.devices[2..], true);
        assert!(inside.contains(&("CUDA_VISIBLE_DEVICES".to_string(), "0".to_string())));
        let none = task_env(&[], false);
        assert!(none.contains(&("CUDA_VISIBLE_DEVICES".to_string(), String::new())));
        assert!(none.contains(&("NVIDIA_VISIBLE_DEVICES".to_string(), "void".to_string())));
    }
}
