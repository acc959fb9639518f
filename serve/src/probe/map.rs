//! The mapping from a `NodeReading` to the service's `Node` (docs/probe.md states the same rules
//! for operators). Pure: no NVML, no files, no clock.
//!
//! - `name`: `--node-name`, else the hostname.
//! - `gpu_model`: `--gpu-model`, else the product family of NVML's name in the service's
//!   spelling (`crate::gpu_model::normalise`, the rule the Kubernetes extender applies to node
//!   labels too): `NVIDIA A100-SXM4-80GB` -> `A100`, `NVIDIA H100 80GB HBM3` -> `H100`,
//!   `Tesla V100-SXM2-32GB` -> `V100`, `NVIDIA RTX A6000` -> `RTX-A6000`. A node's GPUs must
//!   share one model unless `--gpu-model` names it.
//! - `gpus`: the number of GPUs NVML lists; `gpu_free_milli`: one entry per GPU, see
//!   [`gpu_free_milli`].
//! - `cpu_milli` = logical CPUs x 1000; `cpu_free_milli` = `cpu_milli` x the idle share of the
//!   sampled CPU time (absent when the reading has no sample).
//! - `mem_mib` = `MemTotal` / 1024; `mem_free_mib` = `MemAvailable` / 1024 (rounded down).
//! - labels: `gpu_product` (NVML's name), `gpu_memory_mib` (the smallest GPU's), `driver_version`,
//!   `cuda_version` (`12.4`), `nvlink_links` (the fewest active NVLink links of any GPU; `0`: PCIe
//!   only), `mig_gpus` (indices of GPUs in MIG mode, when any), then the operator's `--label`s,
//!   which win (`rack`, `nvlink_domain`: what placement uses and NVML cannot tell).

use super::reading::{GpuReading, NodeReading};
use crate::proto;
use crate::world::World;
use lachesis_env::units::GPU_MILLI;
use std::collections::BTreeMap;

/// GPU memory in use on a GPU with no compute process that still counts as idle: what the
/// driver and a persistence daemon hold (a few MiB on current drivers, a few hundred on old ones).
pub const IDLE_MEMORY_MIB: u64 = 512;

/// What the operator adds to the readings.
#[derive(Debug, Clone, Default)]
pub struct MapOptions {
    /// The node's name in the scheduler (Slurm's `NodeName`, the Kubernetes node name);
    /// default: the hostname.
    pub node_name: Option<String>,
    /// The GPU model to report, overriding the family read from NVML.
    pub gpu_model: Option<String>,
    /// Labels added last (they replace read ones of the same key).
    pub labels: BTreeMap<String, String>,
}

/// Why a reading has no valid `Node`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct MapError {
    /// Field path: in the reading (`gpus[1].name`) or in the node (`node.gpu_free_milli[0]`).
    pub field: String,
    pub message: String,
}

/// The service's `Node` for `reading`, checked as the service checks a reported node (a
/// one-node snapshot through `World::build`), so the service never refuses what the probe
/// sends.
pub fn to_node(reading: &NodeReading, options: &MapOptions) -> Result<proto::Node, MapError> {
    reading.check().map_err(|e| MapError {
        field: e.field,
        message: e.message,
    })?;
    let gpu_model = match (&options.gpu_model, reading.gpus.first()) {
        (_, None) => String::new(),
        (Some(m), Some(_)) => m.clone(),
        (None, Some(first)) => {
            let model = gpu_family(&first.name);
            if let Some((i, other)) = reading
                .gpus
                .iter()
                .enumerate()
                .find(|(_, g)| gpu_family(&g.name) != model)
            {
                return Err(MapError {
                    field: format!("gpus[{i}].name"),
                    message: format!(
                        "{:?} is not a {model} like gpus[0] ({:?}): a node reports one GPU \
                         model; name it with --gpu-model to report them all as one",
                        other.name, first.name
                    ),
                });
            }
            model
        }
    };
    let cpu_milli = u64::from(reading.cpus) * 1000;
    let node = proto::Node {
        name: options
            .node_name
            .clone()
            .unwrap_or_else(|| reading.hostname.trim().to_string()),
        gpu_model,
        gpus: reading.gpus.len() as u32,
        gpu_free_milli: reading.gpus.iter().map(gpu_free_milli).collect(),
        cpu_milli,
        cpu_free_milli: reading
            .cpu_sample
            .filter(|s| s.total_jiffies > 0)
            .map(|s| share(cpu_milli, s.idle_jiffies, s.total_jiffies)),
        mem_mib: reading.mem_total_kib / 1024,
        mem_free_mib: Some(reading.mem_available_kib / 1024),
        labels: labels(reading, &options.labels).into_iter().collect(),
    };
    let snapshot = proto::Snapshot {
        nodes: vec![node.clone()],
        ..Default::default()
    };
    World::build(&snapshot).map_err(|e| MapError {
        field: e.path.replacen("snapshot.nodes[0]", "node", 1),
        message: e.message,
    })?;
    Ok(node)
}

/// The free share of one GPU, milli-GPU:
///
/// - **idle** (no compute process and at most [`IDLE_MEMORY_MIB`] in use): 1000, or 999 in MIG
///   mode;
/// - **in use**: the smaller of the free memory share (`1000 x free / total`) and the free
///   compute share (`1000 - 10 x utilization %`, left out where NVML gives no utilization, as in
///   MIG mode), at most 999.
///
/// Memory bounds what another process can fit beside the ones there (running out is a crash);
/// utilization counts a period busy when any kernel ran, so it overstates use and errs on the
/// safe side. An in-use GPU never reads as whole (1000): a whole-GPU job does not share. A GPU
/// in MIG mode cannot be handed out whole either (work runs in its instances), so at most 999:
/// fractional requests may go there, whole-GPU ones not. Rounded down.
pub fn gpu_free_milli(gpu: &GpuReading) -> u32 {
    let whole = u64::from(GPU_MILLI);
    let most = if gpu.mig_enabled { whole - 1 } else { whole };
    let idle = gpu.processes.is_empty() && gpu.memory_used_bytes <= IDLE_MEMORY_MIB << 20;
    if idle {
        return most as u32;
    }
    let memory = share(
        whole,
        gpu.memory_total_bytes - gpu.memory_used_bytes,
        gpu.memory_total_bytes,
    );
    let compute = gpu
        .utilization_percent
        .map_or(whole, |u| whole - u64::from(u.min(100)) * 10);
    memory.min(compute).min(whole - 1) as u32
}

/// `of x part / total`, rounded down, without overflow (`total` > 0, `part` <= `total`).
fn share(of: u64, part: u64, total: u64) -> u64 {
    (u128::from(of) * u128::from(part) / u128::from(total)) as u64
}

/// The model family in an NVML product name (see the module docs).
pub fn gpu_family(name: &str) -> String {
    crate::gpu_model::normalise(name)
}

fn labels(reading: &NodeReading, extra: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let gpus = &reading.gpus;
    if let Some(first) = gpus.first() {
        labels.insert("gpu_product".into(), first.name.trim().to_string());
        let smallest = gpus.iter().map(|g| g.memory_total_bytes).min();
        if let Some(bytes) = smallest {
            labels.insert("gpu_memory_mib".into(), (bytes >> 20).to_string());
        }
        let fewest = gpus.iter().map(|g| g.nvlink_active_links).min();
        if let Some(links) = fewest {
            labels.insert("nvlink_links".into(), links.to_string());
        }
        let mig: Vec<String> = gpus
            .iter()
            .filter(|g| g.mig_enabled)
            .map(|g| g.index.to_string())
            .collect();
        if !mig.is_empty() {
            labels.insert("mig_gpus".into(), mig.join(","));
        }
    }
    if let Some(v) = &reading.driver_version {
        labels.insert("driver_version".into(), v.clone());
    }
    if let Some(v) = reading.cuda_driver_version {
        labels.insert(
            "cuda_version".into(),
            format!("{}.{}", v / 1000, (v % 1000) / 10),
        );
    }
    labels.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    labels
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::reading::ProcessReading;

    fn gpu(used_mib: u64, util: Option<u32>, processes: usize) -> GpuReading {
        GpuReading {
            index: 0,
            name: "NVIDIA A100-SXM4-80GB".into(),
            uuid: "GPU-0".into(),
            memory_total_bytes: 81_920 << 20,
            memory_used_bytes: used_mib << 20,
            utilization_percent: util,
            power_draw_mw: None,
            mig_enabled: false,
            processes: (0..processes)
                .map(|k| ProcessReading {
                    pid: 100 + k as u32,
                    used_memory_bytes: None,
                })
                .collect(),
            nvlink_active_links: 0,
        }
    }

    #[test]
    fn family_names_as_the_catalog_spells_them() {
        for (nvml, family) in [
            ("NVIDIA A100-SXM4-80GB", "A100"),
            ("NVIDIA A100-PCIE-40GB", "A100"),
            ("NVIDIA A100 80GB PCIe", "A100"),
            ("NVIDIA H100 80GB HBM3", "H100"),
            ("NVIDIA H100 NVL", "H100"),
            ("NVIDIA H200", "H200"),
            ("Tesla V100-SXM2-32GB", "V100"),
            ("Tesla T4", "T4"),
            ("Tesla P100-PCIE-16GB", "P100"),
            ("NVIDIA A10G", "A10G"),
            ("NVIDIA L40S", "L40S"),
            ("NVIDIA RTX A6000", "RTX-A6000"),
            ("NVIDIA GeForce RTX 4090", "RTX-4090"),
            ("NVIDIA GH200 480GB", "GH200"),
        ] {
            assert_eq!(gpu_family(nvml), family, "{nvml}");
        }
    }

    /// Table of the free-share rule, the arithmetic in the comments (80 GiB = 81,920 MiB).
    #[test]
    fn free_share_rule() {
        let mig = |mut g: GpuReading| {
            g.mig_enabled = true;
            g.utilization_percent = None;
            g
        };
        for (what, g, free) in [
            ("idle, nothing in use", gpu(0, Some(0), 0), 1000),
            ("idle, driver's 300 MiB", gpu(300, Some(0), 0), 1000),
            ("idle at the threshold", gpu(512, Some(3), 0), 1000),
            // 513 MiB: 1000 x 81,407 / 81,920 = 993.7; compute 1000 - 30 = 970
            ("no process, memory above it", gpu(513, Some(3), 0), 970),
            // memory 1000 x 20,480 / 81,920 = 250; compute 1000 - 1000 = 0
            ("training at 100 %", gpu(61_440, Some(100), 1), 0),
            // memory 1000 x 61,440 / 81,920 = 750; compute 1000 - 350 = 650
            ("inference at 35 %", gpu(20_480, Some(35), 1), 650),
            // a process with no memory and no kernel yet: never whole
            ("a process just started", gpu(0, Some(0), 1), 999),
            // no utilization: memory alone, 1000 x 51,200 / 81,920 = 625
            ("no utilization reading", gpu(30_720, None, 2), 625),
            ("MIG, idle", mig(gpu(0, Some(0), 0)), 999),
            // 1000 x 71,680 / 81,920 = 875
            ("MIG, one instance busy", mig(gpu(10_240, None, 1)), 875),
        ] {
            assert_eq!(gpu_free_milli(&g), free, "{what}");
        }
    }
}
