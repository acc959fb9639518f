//! `NvmlReader`: the local GPUs through NVML (`nvml-wrapper`, which opens `libnvidia-ml.so.1`
//! at run time, so the binary builds and starts on machines without the driver), and the node's
//! CPUs, memory and name from `/proc`.

use super::host::{CpuTimes, Proc};
use super::reading::{GpuReading, NodeReading, ProcessReading};
use super::{NodeReader, ProbeError};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use std::ffi::OsStr;
use std::time::Duration;

/// The library NVML is loaded from (what the driver installs).
pub const NVML_LIBRARY: &str = "libnvidia-ml.so.1";

/// NVLink links a GPU can have (`NVML_NVLINK_MAX_LINKS`).
const NVLINK_MAX_LINKS: u32 = 18;

/// How long the first reading samples CPU time; later readings use the time since the last.
const FIRST_CPU_SAMPLE: Duration = Duration::from_millis(250);

/// The local GPUs and `/proc`.
pub struct NvmlReader {
    nvml: Nvml,
    library: String,
    proc: Proc,
    last_cpu: Option<CpuTimes>,
}

impl std::fmt::Debug for NvmlReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlReader")
            .field("library", &self.library)
            .field("proc", &self.proc)
            .finish_non_exhaustive()
    }
}

impl NvmlReader {
    /// Loads NVML from [`NVML_LIBRARY`] and reads `/proc`.
    pub fn new() -> Result<Self, ProbeError> {
        Self::with_library(NVML_LIBRARY, Proc::new("/proc"))
    }

    /// Loads NVML from `library` (a file name the dynamic loader searches for, or a path).
    pub fn with_library(library: &str, proc: Proc) -> Result<Self, ProbeError> {
        let nvml = Nvml::builder()
            .lib_path(OsStr::new(library))
            .init()
            .map_err(|e| init_error(library, e))?;
        Ok(NvmlReader {
            nvml,
            library: library.to_string(),
            proc,
            last_cpu: None,
        })
    }

    fn gpu(&self, index: u32) -> Result<GpuReading, ProbeError> {
        let call = |what: &'static str| {
            move |e: NvmlError| ProbeError::Nvml {
                call: what,
                gpu: Some(index),
                message: call_error(e),
            }
        };
        let device = self
            .nvml
            .device_by_index(index)
            .map_err(call("nvmlDeviceGetHandleByIndex"))?;
        let memory = device
            .memory_info()
            .map_err(call("nvmlDeviceGetMemoryInfo"))?;
        let utilization = optional(device.utilization_rates())
            .map_err(call("nvmlDeviceGetUtilizationRates"))?
            .map(|u| u.gpu);
        let power_draw_mw =
            optional(device.power_usage()).map_err(call("nvmlDeviceGetPowerUsage"))?;
        let mig_enabled = optional(device.mig_mode())
            .map_err(call("nvmlDeviceGetMigMode"))?
            .is_some_and(|m| m.current == 1);
        Ok(GpuReading {
            index,
            name: device.name().map_err(call("nvmlDeviceGetName"))?,
            uuid: device.uuid().map_err(call("nvmlDeviceGetUUID"))?,
            memory_total_bytes: memory.total,
            memory_used_bytes: memory.used.min(memory.total),
            utilization_percent: utilization,
            power_draw_mw,
            mig_enabled,
            processes: processes(&device).map_err(call("nvmlDeviceGetComputeRunningProcesses"))?,
            nvlink_active_links: nvlink_active_links(&device)
                .map_err(call("nvmlDeviceGetNvLinkState"))?,
        })
    }
}

impl NodeReader for NvmlReader {
    fn read(&mut self) -> Result<NodeReading, ProbeError> {
        let system = |what: &'static str| {
            move |e: NvmlError| ProbeError::Nvml {
                call: what,
                gpu: None,
                message: call_error(e),
            }
        };
        let earlier = match self.last_cpu {
            Some(t) => t,
            None => {
                let t = self.proc.cpu_times()?;
                std::thread::sleep(FIRST_CPU_SAMPLE);
                t
            }
        };
        let count = self
            .nvml
            .device_count()
            .map_err(system("nvmlDeviceGetCount"))?;
        let gpus = (0..count)
            .map(|i| self.gpu(i))
            .collect::<Result<Vec<_>, _>>()?;
        let driver_version = self
            .nvml
            .sys_driver_version()
            .map_err(system("nvmlSystemGetDriverVersion"))?;
        let cuda = self
            .nvml
            .sys_cuda_driver_version()
            .map_err(system("nvmlSystemGetCudaDriverVersion"))?;
        let (mem_total_kib, mem_available_kib) = self.proc.memory_kib()?;
        let now = self.proc.cpu_times()?;
        self.last_cpu = Some(now);
        Ok(NodeReading {
            hostname: self.proc.hostname()?,
            cpus: self.proc.cpus()?,
            cpu_sample: Some(now.since(earlier)),
            mem_total_kib,
            mem_available_kib: mem_available_kib.min(mem_total_kib),
            driver_version: Some(driver_version),
            cuda_driver_version: u32::try_from(cuda).ok(),
            gpus,
        })
    }

    fn source(&self) -> String {
        format!("NVML ({})", self.library)
    }
}

/// What went wrong in a call, plainly where the cause is known.
fn call_error(e: NvmlError) -> String {
    match e {
        NvmlError::FailedToLoadSymbol(symbol) => format!(
            "the driver's NVML lacks this function ({symbol}): the probe uses the NVML API of \
             NVIDIA drivers R510 and newer; update the driver"
        ),
        NvmlError::GpuLost => "the GPU has fallen off the bus (check `nvidia-smi` and the \
                               kernel log)"
            .into(),
        other => other.to_string(),
    }
}

/// `None` where the GPU does not support the query.
fn optional<T>(r: Result<T, NvmlError>) -> Result<Option<T>, NvmlError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(NvmlError::NotSupported) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The compute processes; none where NVML may not list them (an unprivileged probe on a MIG
/// GPU): the memory in use still marks the GPU busy.
fn processes(device: &Device<'_>) -> Result<Vec<ProcessReading>, NvmlError> {
    match device.running_compute_processes() {
        Ok(list) => Ok(list
            .into_iter()
            .map(|p| ProcessReading {
                pid: p.pid,
                used_memory_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => Some(b),
                    UsedGpuMemory::Unavailable => None,
                },
            })
            .collect()),
        Err(NvmlError::NotSupported | NvmlError::NoPermission) => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

fn nvlink_active_links(device: &Device<'_>) -> Result<u32, NvmlError> {
    let mut active = 0;
    for link in 0..NVLINK_MAX_LINKS {
        match device.link_wrapper_for(link).is_active() {
            Ok(true) => active += 1,
            Ok(false) => {}
            // Past the GPU's last link, or no NVLink at all.
            Err(NvmlError::InvalidArg | NvmlError::NotSupported) => break,
            Err(e) => return Err(e),
        }
    }
    Ok(active)
}

/// Says plainly what is missing when NVML cannot start.
fn init_error(library: &str, e: NvmlError) -> ProbeError {
    match e {
        NvmlError::LibloadingError(cause) => ProbeError::NoDriver {
            library: library.to_string(),
            detail: cause.to_string(),
        },
        NvmlError::DriverNotLoaded => ProbeError::NvmlStart {
            library: library.to_string(),
            message: "the library loaded but the NVIDIA kernel driver is not running (is the \
                      nvidia module loaded? `nvidia-smi` should list the GPUs)"
                .into(),
        },
        NvmlError::NoPermission => ProbeError::NvmlStart {
            library: library.to_string(),
            message: "no permission to talk to the driver (the probe's user needs read-write \
                      access to /dev/nvidiactl and /dev/nvidia*)"
                .into(),
        },
        e @ NvmlError::FailedToLoadSymbol(_) => ProbeError::NvmlStart {
            library: library.to_string(),
            message: call_error(e),
        },
        other => ProbeError::NvmlStart {
            library: library.to_string(),
            message: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_old_driver_is_named_as_the_cause() {
        let text = call_error(NvmlError::FailedToLoadSymbol(
            "nvmlDeviceGetMemoryInfo_v2: undefined symbol".into(),
        ));
        assert!(text.contains("nvmlDeviceGetMemoryInfo_v2"), "{text}");
        assert!(text.contains("R510"), "{text}");
    }

    /// Holds on every machine: a library that is not there is a missing driver, said plainly.
    #[test]
    fn a_missing_library_is_reported_as_no_driver() {
        let missing = "/nonexistent/lachesis-test/libnvidia-ml.so.1";
        let err = NvmlReader::with_library(missing, Proc::new("/proc")).unwrap_err();
        assert!(
            matches!(&err, ProbeError::NoDriver { library, .. } if library == missing),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(text.starts_with("no NVIDIA driver"), "{text}");
        assert!(text.contains(missing), "{text}");
        assert!(text.contains("install"), "{text}");
    }
}
