//! The node's own CPUs, memory and name, from `/proc` (a root other than `/` can be given, for
//! a probe in a container that mounts the host's `/proc` elsewhere). Parsers are pure functions
//! over the files' text, tested on samples.

use super::ProbeError;
use super::reading::CpuSample;
use std::path::{Path, PathBuf};

/// Cumulative CPU time since boot, jiffies (the `cpu` line of `/proc/stat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTimes {
    pub total: u64,
    pub idle: u64,
}

impl CpuTimes {
    /// The time spent between `earlier` and `self`.
    pub fn since(self, earlier: CpuTimes) -> CpuSample {
        CpuSample {
            total_jiffies: self.total.saturating_sub(earlier.total),
            idle_jiffies: self
                .idle
                .saturating_sub(earlier.idle)
                .min(self.total.saturating_sub(earlier.total)),
        }
    }
}

/// Reads `/proc` files under `root`.
#[derive(Debug, Clone)]
pub struct Proc {
    root: PathBuf,
}

impl Proc {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Proc { root: root.into() }
    }

    fn read(&self, file: &str) -> Result<(PathBuf, String), ProbeError> {
        let path = self.root.join(file);
        let text = std::fs::read_to_string(&path).map_err(|e| ProbeError::Host {
            path: path.clone(),
            message: e.to_string(),
        })?;
        Ok((path, text))
    }

    pub fn hostname(&self) -> Result<String, ProbeError> {
        let (path, text) = self.read("sys/kernel/hostname")?;
        let name = text.trim();
        if name.is_empty() {
            return Err(ProbeError::Host {
                path,
                message: "empty".into(),
            });
        }
        Ok(name.to_string())
    }

    pub fn cpus(&self) -> Result<u32, ProbeError> {
        let (path, text) = self.read("cpuinfo")?;
        parse_cpuinfo(&text).map_err(|message| ProbeError::Host { path, message })
    }

    /// `(MemTotal, MemAvailable)`, KiB.
    pub fn memory_kib(&self) -> Result<(u64, u64), ProbeError> {
        let (path, text) = self.read("meminfo")?;
        parse_meminfo(&text).map_err(|message| ProbeError::Host { path, message })
    }

    pub fn cpu_times(&self) -> Result<CpuTimes, ProbeError> {
        let (path, text) = self.read("stat")?;
        parse_stat(&text).map_err(|message| ProbeError::Host { path, message })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
}

/// Logical CPUs: the `processor` entries.
pub fn parse_cpuinfo(text: &str) -> Result<u32, String> {
    let n = text
        .lines()
        .filter(|l| l.split(':').next().is_some_and(|k| k.trim() == "processor"))
        .count();
    if n == 0 {
        return Err("no `processor` entries".into());
    }
    u32::try_from(n).map_err(|_| format!("{n} processors"))
}

/// `(MemTotal, MemAvailable)` in KiB.
pub fn parse_meminfo(text: &str) -> Result<(u64, u64), String> {
    let field = |name: &str| -> Result<u64, String> {
        let line = text
            .lines()
            .find(|l| l.split(':').next() == Some(name))
            .ok_or_else(|| format!("no {name} line"))?;
        let value = line[name.len() + 1..].trim();
        let number = value.strip_suffix("kB").unwrap_or(value).trim();
        number
            .parse()
            .map_err(|_| format!("{name}: {value:?} is not a size in kB"))
    };
    Ok((field("MemTotal")?, field("MemAvailable")?))
}

/// The `cpu` line: total = user + nice + system + idle + iowait + irq + softirq + steal (guest
/// time is already inside user and nice); idle = idle + iowait.
pub fn parse_stat(text: &str) -> Result<CpuTimes, String> {
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some("cpu"))
        .ok_or("no `cpu` line")?;
    let values: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the `cpu` line {line:?}: {e}"))?;
    if values.len() < 5 {
        return Err(format!("the `cpu` line {line:?} has fewer than 5 values"));
    }
    Ok(CpuTimes {
        total: values.iter().sum(),
        idle: values[3] + values[4],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_counts_processors() {
        let x86 = "processor\t: 0\nvendor_id\t: GenuineIntel\n\nprocessor\t: 1\nmodel name\t: x\n";
        assert_eq!(parse_cpuinfo(x86), Ok(2));
        let arm = "processor\t: 0\nBogoMIPS\t: 50.00\n\nprocessor\t: 1\n\nprocessor\t: 2\n";
        assert_eq!(parse_cpuinfo(arm), Ok(3));
        assert!(parse_cpuinfo("model name: x\n").is_err());
    }

    #[test]
    fn meminfo_total_and_available() {
        let text = "MemTotal:       2113796900 kB\nMemFree:        1000 kB\n\
                    MemAvailable:   1832614460 kB\nBuffers: 1 kB\n";
        assert_eq!(parse_meminfo(text), Ok((2_113_796_900, 1_832_614_460)));
        let err = parse_meminfo("MemTotal: 10 kB\n").unwrap_err();
        assert!(err.contains("MemAvailable"), "{err}");
        let err = parse_meminfo("MemTotal: x kB\nMemAvailable: 1 kB\n").unwrap_err();
        assert!(err.contains("MemTotal"), "{err}");
    }

    #[test]
    fn stat_cpu_line() {
        let text = "cpu  100 5 50 800 20 3 2 0 0 0\ncpu0 50 2 25 400 10 1 1 0 0 0\nintr 1\n";
        let t = parse_stat(text).unwrap();
        assert_eq!(
            t,
            CpuTimes {
                total: 980,
                idle: 820
            }
        );
        let later = CpuTimes {
            total: 1980,
            idle: 1320,
        };
        assert_eq!(
            later.since(t),
            CpuSample {
                total_jiffies: 1000,
                idle_jiffies: 500
            }
        );
        assert!(parse_stat("intr 1\n").is_err());
        assert!(parse_stat("cpu 1 2 x 4 5\n").is_err());
    }

    #[test]
    fn this_machine_reads() {
        let proc = Proc::new("/proc");
        assert!(!proc.hostname().unwrap().is_empty());
        assert!(proc.cpus().unwrap() >= 1);
        let (total, available) = proc.memory_kib().unwrap();
        assert!(available <= total && total > 0);
        assert!(proc.cpu_times().unwrap().total > 0);
    }
}
