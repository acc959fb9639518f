//! The node probe (`lachesis probe`): reads the local GPUs (NVML) and the node's CPUs, memory
//! and name (`/proc`), maps the readings to the service's `Node` (the `ReportNodes` and snapshot
//! message) and prints or pushes it. Readers sit behind `NodeReader`, so the mapping is tested
//! with recorded readings on machines without GPUs. The rules of the mapping are in `map` and
//! docs/probe.md.

pub mod host;
pub mod map;
pub mod nvml;
pub mod reading;
pub mod recorded;

pub use map::{MapError, MapOptions, to_node};
pub use nvml::NvmlReader;
pub use reading::{GpuReading, NodeReading};
pub use recorded::RecordedReader;

use crate::proto;
use std::fmt::Write as _;
use std::path::PathBuf;

/// Where readings come from: the local GPUs, or a recording.
pub trait NodeReader {
    /// The node now.
    fn read(&mut self) -> Result<NodeReading, ProbeError>;
    /// Where the readings come from, for messages and the `ReportNodes` source.
    fn source(&self) -> String;
}

/// Why the probe has no node to report.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(
        "no NVIDIA driver: {library} could not be loaded ({detail}). Install the NVIDIA driver, \
         which ships it (Debian: `apt-get install nvidia-driver`, or only the library, \
         `libnvidia-ml1`, from non-free; Ubuntu: `libnvidia-compute-<version>`; in a container: \
         the NVIDIA Container Toolkit, `--gpus all`), or replay recorded readings with \
         `lachesis probe --recorded FILE`"
    )]
    NoDriver { library: String, detail: String },
    #[error("NVML ({library}) did not start: {message}")]
    NvmlStart { library: String, message: String },
    #[error("NVML {call}{}: {message}", gpu.map(|g| format!(" on GPU {g}")).unwrap_or_default())]
    Nvml {
        call: &'static str,
        gpu: Option<u32>,
        message: String,
    },
    #[error("{}: {message}", path.display())]
    Host { path: PathBuf, message: String },
    #[error("{}: {}{message}", path.display(), if field.is_empty() { String::new() } else { format!("{field}: ") })]
    Recorded {
        path: PathBuf,
        /// Field path in the file (`gpus[3].memory_used_bytes`; `[1].cpus` in an array);
        /// empty when the file as a whole is at fault.
        field: String,
        message: String,
    },
    #[error("the readings make no valid node: {0}")]
    Map(#[from] MapError),
}

/// One reading and the node it maps to.
#[derive(Debug, Clone)]
pub struct Probe {
    pub reading: NodeReading,
    node: proto::Node,
}

impl Probe {
    /// Reads the node once and maps it.
    pub fn take(reader: &mut dyn NodeReader, options: &MapOptions) -> Result<Probe, ProbeError> {
        let reading = reader.read()?;
        let node = to_node(&reading, options)?;
        Ok(Probe { reading, node })
    }

    /// The node as the service takes it.
    pub fn node(&self) -> &proto::Node {
        &self.node
    }

    /// The node as JSON (the `Node` message, field names as in the .proto, keys sorted), ready
    /// to paste into a snapshot's `nodes`.
    pub fn node_json(&self) -> String {
        let value = serde_json::to_value(&self.node).expect("proto messages serialize");
        serde_json::to_string_pretty(&value).expect("JSON values serialize")
    }

    /// The reading as JSON, in the format `--recorded` replays.
    pub fn reading_json(&self) -> String {
        serde_json::to_string_pretty(&self.reading).expect("readings serialize")
    }

    /// A table for people: each GPU's readings and the free share it maps to, then the node.
    pub fn text(&self) -> String {
        let (r, n) = (&self.reading, &self.node);
        let mut s = String::new();
        let gpus = match r.gpus.first() {
            Some(g) => format!("{} x {} ({})", n.gpus, n.gpu_model, g.name.trim()),
            None => "no GPUs".into(),
        };
        let _ = write!(s, "node {}: {gpus}", n.name);
        if let Some(v) = &r.driver_version {
            let _ = write!(s, ", driver {v}");
        }
        if let Some(v) = n.labels.get("cuda_version") {
            let _ = write!(s, ", CUDA {v}");
        }
        s.push('\n');
        if !r.gpus.is_empty() {
            let _ = writeln!(
                s,
                "{:<4} {:<42} {:>17} {:>5} {:>6} {:>4} {:>5}  processes",
                "gpu", "uuid", "memory used/MiB", "util", "power", "mig", "free"
            );
        }
        for (g, free) in r.gpus.iter().zip(&n.gpu_free_milli) {
            let memory = format!(
                "{}/{}",
                g.memory_used_bytes >> 20,
                g.memory_total_bytes >> 20
            );
            let util = g
                .utilization_percent
                .map_or("-".into(), |u| format!("{u}%"));
            let power = g
                .power_draw_mw
                .map_or("-".into(), |p| format!("{} W", p / 1000));
            let processes: Vec<String> = g
                .processes
                .iter()
                .map(|p| match p.used_memory_bytes {
                    Some(b) => format!("{} ({} MiB)", p.pid, b >> 20),
                    None => p.pid.to_string(),
                })
                .collect();
            let _ = writeln!(
                s,
                "{:<4} {:<42} {:>17} {:>5} {:>6} {:>4} {:>5}  {}",
                g.index,
                g.uuid,
                memory,
                util,
                power,
                if g.mig_enabled { "on" } else { "off" },
                free,
                if processes.is_empty() {
                    "-".into()
                } else {
                    processes.join(", ")
                }
            );
        }
        let free = |f: Option<u64>| f.map_or("not sampled".into(), |f| format!("{f} free"));
        let _ = writeln!(
            s,
            "cpu  {} milli-cores, {}",
            n.cpu_milli,
            free(n.cpu_free_milli)
        );
        let _ = writeln!(s, "mem  {} MiB, {}", n.mem_mib, free(n.mem_free_mib));
        let mut labels: Vec<_> = n.labels.iter().collect();
        labels.sort();
        let labels: Vec<String> = labels
            .iter()
            .map(|(k, v)| match v.contains(char::is_whitespace) {
                true => format!("{k}={v:?}"),
                false => format!("{k}={v}"),
            })
            .collect();
        let _ = write!(s, "labels {}", labels.join(" "));
        s
    }
}

#[cfg(test)]
mod tests;
