//! GPU settings of an installation: what each OpenPAI GPU type (`gpuType`, its SKU name)
//! means on the cluster (node labels) and on this machine (a device model), and, for the
//! embedded default, the machine's GPUs when the operator states them instead of the probe.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The `gpus` section of the config.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct GpuConfig {
    /// This machine's GPUs (the embedded default), in place of what NVML or `nvidia-smi`
    /// find: for a machine the probe gets wrong, or none to hide them all (`[]`). Unset:
    /// the probe.
    pub devices: Option<Vec<GpuDevice>>,
    /// OpenPAI's GPU types (SKU names, as a job's `gpuType` says them).
    pub types: BTreeMap<String, GpuType>,
}

/// One GPU of this machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GpuDevice {
    /// Its index as NVML and `nvidia-smi` count (PCI bus order).
    pub index: u32,
    /// `GPU-…`, as NVML names it.
    pub uuid: String,
    /// Its memory in MiB.
    #[serde(default)]
    pub memory_mib: u64,
    /// The model NVML names (`NVIDIA H100 80GB HBM3`).
    #[serde(default)]
    pub model: String,
}

/// What one GPU type means.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct GpuType {
    /// On a cluster: the node labels of nodes with this type; a job asking for it gets
    /// them as its pods' node selector.
    pub node_selector: BTreeMap<String, String>,
    /// On this machine: the devices of this type, those whose model contains this text
    /// (case ignored); unset: the type's own name.
    pub model: Option<String>,
}

impl GpuType {
    /// Whether `device` is of this type (named `name`).
    pub fn has(&self, name: &str, device: &GpuDevice) -> bool {
        let wanted = self.model.as_deref().unwrap_or(name).to_lowercase();
        !wanted.is_empty() && device.model.to_lowercase().contains(&wanted)
    }
}

impl GpuConfig {
    /// Checks the section; the error names the field.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if let Some(devices) = &self.devices {
            let mut seen_index = std::collections::BTreeSet::new();
            let mut seen_uuid = std::collections::BTreeSet::new();
            for device in devices {
                if !seen_index.insert(device.index) {
                    return Err((
                        "gpus.devices",
                        format!("index {} is given twice", device.index),
                    ));
                }
                if device.uuid.is_empty()
                    || !device
                        .uuid
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-')
                {
                    return Err((
                        "gpus.devices",
                        format!(
                            "{:?} is not a GPU UUID (letters, digits and '-', as GPU-8c1b…)",
                            device.uuid
                        ),
                    ));
                }
                if !seen_uuid.insert(device.uuid.as_str()) {
                    return Err(("gpus.devices", format!("{} is given twice", device.uuid)));
                }
            }
        }
        for (name, kind) in &self.types {
            if name.is_empty() {
                return Err(("gpus.types", "a type's name is empty".to_string()));
            }
            for (key, value) in &kind.node_selector {
                if !pai_job::names::is_label_key(key) || !pai_job::names::is_label_value(value) {
                    return Err((
                        "gpus.types",
                        format!("{name}: {key}={value} is not a Kubernetes label"),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(index: u32, uuid: &str, model: &str) -> GpuDevice {
        GpuDevice {
            index,
            uuid: uuid.to_string(),
            memory_mib: 0,
            model: model.to_string(),
        }
    }

    #[test]
    fn a_type_is_found_in_the_model_name() {
        let h100 = device(0, "GPU-a", "NVIDIA H100 80GB HBM3");
        assert!(GpuType::default().has("H100", &h100));
        assert!(!GpuType::default().has("V100", &h100));
        let mapped = GpuType {
            model: Some("h100 80gb".to_string()),
            ..GpuType::default()
        };
        assert!(mapped.has("gpu-large", &h100));
    }

    #[test]
    fn bad_devices_and_labels_name_the_field() {
        let twice = GpuConfig {
            devices: Some(vec![device(0, "GPU-a", ""), device(0, "GPU-b", "")]),
            ..GpuConfig::default()
        };
        assert_eq!(twice.check().map_err(|e| e.0), Err("gpus.devices"));
        let shell = GpuConfig {
            devices: Some(vec![device(0, "GPU-a;rm -rf /", "")]),
            ..GpuConfig::default()
        };
        assert!(shell.check().is_err());
        let label = GpuConfig {
            types: BTreeMap::from([(
                "K80".to_string(),
                GpuType {
                    node_selector: BTreeMap::from([("gpu type".to_string(), "k80".to_string())]),
                    model: None,
                },
            )]),
            ..GpuConfig::default()
        };
        assert_eq!(label.check().map_err(|e| e.0), Err("gpus.types"));
    }
}
