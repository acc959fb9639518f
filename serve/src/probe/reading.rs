//! `NodeReading`: what NVML and `/proc` say about one node at one moment, in the units they
//! report (bytes, KiB, jiffies, milliwatts). A reader fills it (`NvmlReader`) or replays it from
//! JSON (`RecordedReader`); `map` turns it into the service's `Node`. Nothing here talks to
//! NVML or the service.

use serde::{Deserialize, Serialize};

/// One node's readings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeReading {
    /// `/proc/sys/kernel/hostname`.
    pub hostname: String,
    /// Logical CPUs (`processor` entries of `/proc/cpuinfo`).
    pub cpus: u32,
    /// CPU time spent over the sampling window (`/proc/stat`); absent when not sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_sample: Option<CpuSample>,
    /// `MemTotal` of `/proc/meminfo`, KiB.
    pub mem_total_kib: u64,
    /// `MemAvailable` of `/proc/meminfo`, KiB.
    pub mem_available_kib: u64,
    /// NVIDIA driver version (`nvmlSystemGetDriverVersion`); absent on a node without GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    /// CUDA driver API version as NVML gives it (`12040` for 12.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_driver_version: Option<u32>,
    /// One entry per GPU, in NVML index order.
    #[serde(default)]
    pub gpus: Vec<GpuReading>,
}

/// CPU time over a sampling window, jiffies summed over all CPUs (the `cpu` line of
/// `/proc/stat`): everything (user, nice, system, idle, iowait, irq, softirq, steal) and the
/// idle part (idle + iowait).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuSample {
    pub total_jiffies: u64,
    pub idle_jiffies: u64,
}

/// One GPU's readings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuReading {
    /// NVML index (0-based); the service's GPU index on this node.
    pub index: u32,
    /// Product name (`nvmlDeviceGetName`), e.g. `NVIDIA A100-SXM4-80GB`.
    pub name: String,
    /// `GPU-...` (`nvmlDeviceGetUUID`).
    pub uuid: String,
    /// Frame-buffer memory (`nvmlDeviceGetMemoryInfo`), bytes.
    pub memory_total_bytes: u64,
    pub memory_used_bytes: u64,
    /// Percent of the last sample period in which a kernel ran (`nvmlDeviceGetUtilizationRates`);
    /// absent where NVML does not say (a GPU in MIG mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization_percent: Option<u32>,
    /// Power draw (`nvmlDeviceGetPowerUsage`), milliwatts; absent where not supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_draw_mw: Option<u32>,
    /// MIG mode currently enabled (`nvmlDeviceGetMigMode`).
    #[serde(default)]
    pub mig_enabled: bool,
    /// Running compute processes (`nvmlDeviceGetComputeRunningProcesses`).
    #[serde(default)]
    pub processes: Vec<ProcessReading>,
    /// Active NVLink links (`nvmlDeviceGetNvLinkState` over every link); 0 on PCIe-only GPUs.
    #[serde(default)]
    pub nvlink_active_links: u32,
}

/// A compute process on a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessReading {
    pub pid: u32,
    /// GPU memory it holds, bytes; absent where NVML cannot say (no permission, some MIG
    /// set-ups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_memory_bytes: Option<u64>,
}

/// A reading that cannot be right: which field, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ReadingError {
    /// Field path in the reading, e.g. `gpus[2].memory_used_bytes`.
    pub field: String,
    pub message: String,
}

fn bad(field: impl Into<String>, message: impl Into<String>) -> ReadingError {
    ReadingError {
        field: field.into(),
        message: message.into(),
    }
}

impl NodeReading {
    /// Checks what serde cannot: values within their capacities, GPU indices in order, UUIDs
    /// present and distinct.
    pub fn check(&self) -> Result<(), ReadingError> {
        if self.hostname.trim().is_empty() {
            return Err(bad("hostname", "empty"));
        }
        if self.cpus == 0 {
            return Err(bad("cpus", "0 CPUs"));
        }
        if self.mem_total_kib == 0 {
            return Err(bad("mem_total_kib", "0 KiB of memory"));
        }
        if self.mem_available_kib > self.mem_total_kib {
            return Err(bad(
                "mem_available_kib",
                format!(
                    "{} KiB available of {} KiB in total",
                    self.mem_available_kib, self.mem_total_kib
                ),
            ));
        }
        if let Some(s) = self.cpu_sample
            && s.idle_jiffies > s.total_jiffies
        {
            return Err(bad(
                "cpu_sample.idle_jiffies",
                format!(
                    "{} idle of {} jiffies in total",
                    s.idle_jiffies, s.total_jiffies
                ),
            ));
        }
        for (i, g) in self.gpus.iter().enumerate() {
            g.check(&format!("gpus[{i}]"), i)?;
            if let Some(j) = self.gpus[..i].iter().position(|o| o.uuid == g.uuid) {
                return Err(bad(
                    format!("gpus[{i}].uuid"),
                    format!("{:?} is also gpus[{j}]'s", g.uuid),
                ));
            }
        }
        Ok(())
    }
}

impl GpuReading {
    fn check(&self, path: &str, position: usize) -> Result<(), ReadingError> {
        let field = |name: &str| format!("{path}.{name}");
        if self.index as usize != position {
            return Err(bad(
                field("index"),
                format!(
                    "{} at position {position} (GPUs in index order)",
                    self.index
                ),
            ));
        }
        if self.name.trim().is_empty() {
            return Err(bad(field("name"), "empty"));
        }
        if self.uuid.trim().is_empty() {
            return Err(bad(field("uuid"), "empty"));
        }
        if self.memory_total_bytes == 0 {
            return Err(bad(field("memory_total_bytes"), "0 bytes"));
        }
        if self.memory_used_bytes > self.memory_total_bytes {
            return Err(bad(
                field("memory_used_bytes"),
                format!(
                    "{} bytes used of {} in total",
                    self.memory_used_bytes, self.memory_total_bytes
                ),
            ));
        }
        if let Some(u) = self.utilization_percent.filter(|u| *u > 100) {
            return Err(bad(field("utilization_percent"), format!("{u} %")));
        }
        for (k, p) in self.processes.iter().enumerate() {
            if let Some(m) = p.used_memory_bytes.filter(|m| *m > self.memory_total_bytes) {
                return Err(bad(
                    format!("{path}.processes[{k}].used_memory_bytes"),
                    format!("{m} bytes, more than the GPU's {}", self.memory_total_bytes),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, uuid: &str) -> GpuReading {
        GpuReading {
            index,
            name: "NVIDIA A100-SXM4-80GB".into(),
            uuid: uuid.into(),
            memory_total_bytes: 80 << 30,
            memory_used_bytes: 0,
            utilization_percent: Some(0),
            power_draw_mw: Some(60_000),
            mig_enabled: false,
            processes: Vec::new(),
            nvlink_active_links: 12,
        }
    }

    fn node() -> NodeReading {
        NodeReading {
            hostname: "n0".into(),
            cpus: 8,
            cpu_sample: None,
            mem_total_kib: 1 << 20,
            mem_available_kib: 1 << 19,
            driver_version: Some("550.90.07".into()),
            cuda_driver_version: Some(12040),
            gpus: vec![gpu(0, "GPU-a"), gpu(1, "GPU-b")],
        }
    }

    #[test]
    fn a_consistent_reading_passes() {
        node().check().unwrap();
    }

    type Spoil = Box<dyn Fn(&mut NodeReading)>;

    #[test]
    fn each_inconsistency_names_its_field() {
        let cases: Vec<(&str, Spoil)> = vec![
            ("hostname", Box::new(|n| n.hostname = " ".into())),
            ("cpus", Box::new(|n| n.cpus = 0)),
            (
                "mem_available_kib",
                Box::new(|n| n.mem_available_kib = 2 << 20),
            ),
            (
                "cpu_sample.idle_jiffies",
                Box::new(|n| {
                    n.cpu_sample = Some(CpuSample {
                        total_jiffies: 10,
                        idle_jiffies: 11,
                    })
                }),
            ),
            ("gpus[1].index", Box::new(|n| n.gpus[1].index = 3)),
            (
                "gpus[1].uuid",
                Box::new(|n| n.gpus[1].uuid = "GPU-a".into()),
            ),
            (
                "gpus[0].memory_used_bytes",
                Box::new(|n| n.gpus[0].memory_used_bytes = (80 << 30) + 1),
            ),
            (
                "gpus[0].utilization_percent",
                Box::new(|n| n.gpus[0].utilization_percent = Some(101)),
            ),
            (
                "gpus[1].processes[0].used_memory_bytes",
                Box::new(|n| {
                    n.gpus[1].processes = vec![ProcessReading {
                        pid: 7,
                        used_memory_bytes: Some(u64::MAX),
                    }]
                }),
            ),
        ];
        for (field, spoil) in cases {
            let mut n = node();
            spoil(&mut n);
            let err = n.check().unwrap_err();
            assert_eq!(err.field, field, "{err}");
        }
    }
}
