//! `bridge.toml`: what `lachesis slurm-bridge` is told. Unknown fields are refused; every
//! field has a default except where noted.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BridgeConfig {
    pub service: ServiceConfig,
    pub slurm: SlurmConfig,
    /// Per-partition policy inputs, by partition name.
    pub partitions: BTreeMap<String, PartitionConfig>,
    pub on_service_down: OnServiceDown,
    /// Time between cycles (read Slurm, decide, apply), ms.
    pub interval_ms: u64,
    /// A requeued job is not restarted for this long (Slurm revokes the credential of a job
    /// restarted within the second it was requeued), ms.
    pub requeue_grace_ms: u64,
    /// A job the bridge released that is still pending after this long (its node went down,
    /// Slurm refused the placement) is held again and decided anew, s.
    pub stale_release_s: u64,
    /// The bridge's own state (requeue times, outage start), rewritten atomically each cycle
    /// it changes; empty: kept in memory only.
    pub state_file: Option<PathBuf>,
    /// Serve the bridge's Prometheus metrics (`/metrics`, `/healthz`) here; empty: none.
    pub metrics_addr: String,
}

impl Default for BridgeConfig {
    fn default() -> Self {
        BridgeConfig {
            service: ServiceConfig::default(),
            slurm: SlurmConfig::default(),
            partitions: BTreeMap::new(),
            on_service_down: OnServiceDown::default(),
            interval_ms: 500,
            requeue_grace_ms: 1_500,
            stale_release_s: 30,
            state_file: None,
            metrics_addr: String::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServiceConfig {
    /// The decision service, `host:port` or a URI.
    pub addr: String,
    pub token_file: Option<PathBuf>,
    /// CA certificate for TLS; none: plaintext.
    pub ca: Option<PathBuf>,
    /// Deadline for one `Decide` call, ms.
    pub timeout_ms: u64,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            addr: "127.0.0.1:50051".into(),
            token_file: None,
            ca: None,
            timeout_ms: 2_000,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SlurmConfig {
    /// Directory of `scontrol`; empty: found on `PATH`.
    pub bin_dir: Option<PathBuf>,
    /// `SLURM_CONF` for the commands; empty: Slurm's default (or the environment's).
    pub conf: Option<PathBuf>,
    /// The `AdminComment` the submit plugin stamps on jobs the bridge manages; empty: every
    /// held pending job is managed (then a job an admin holds by hand is started too).
    pub marker: String,
    /// Partitions the bridge manages; empty: all.
    pub partitions: Vec<String>,
    /// GRES GPU type → the GPU model name the service and model know (default: the type
    /// upper-cased, `a100` → `A100`). Untyped GPUs (`gres=gpu:4`) are the key `untyped`,
    /// by default `V100`, the catalog's speed-1.0 reference: the service refuses names outside
    /// its catalog, and an untyped GPU says nothing of its speed.
    pub gpu_models: BTreeMap<String, String>,
}

impl Default for SlurmConfig {
    fn default() -> Self {
        SlurmConfig {
            bin_dir: None,
            conf: None,
            marker: "lachesis:managed".into(),
            partitions: Vec::new(),
            gpu_models: BTreeMap::new(),
        }
    }
}

/// The `[slurm.gpu_models]` key of untyped GPU GRES.
pub const UNTYPED_GPUS: &str = "untyped";

impl SlurmConfig {
    /// The service's GPU model for a GRES type.
    pub fn gpu_model(&self, kind: Option<&str>) -> String {
        match kind {
            Some(k) => self
                .gpu_models
                .get(k)
                .cloned()
                .unwrap_or_else(|| k.to_ascii_uppercase()),
            None => self
                .gpu_models
                .get(UNTYPED_GPUS)
                .cloned()
                .unwrap_or_else(|| "V100".into()),
        }
    }

    pub fn manages(&self, partition: &str) -> bool {
        self.partitions.is_empty() || self.partitions.iter().any(|p| p == partition)
    }
}

/// How a partition's jobs look to the policy.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PartitionConfig {
    /// Base priority of the partition's jobs (larger first); a job's `Nice` is subtracted.
    pub priority: i32,
    /// The jobs' QoS class for the policy (`guaranteed`, `best-effort`, ...); empty: default.
    pub qos: String,
    /// Whether the partition's running jobs may be preempted (requeued) by the policy.
    pub preemptible: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum DownPolicy {
    /// After `hold_timeout_s` without the service, release held jobs to Slurm's own scheduler.
    #[default]
    Open,
    /// Keep holding until the service answers again.
    Closed,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OnServiceDown {
    pub policy: DownPolicy,
    /// How long the service may be unreachable before `open` releases jobs, s.
    pub hold_timeout_s: f64,
}

impl Default for OnServiceDown {
    fn default() -> Self {
        OnServiceDown {
            policy: DownPolicy::Open,
            hold_timeout_s: 60.0,
        }
    }
}

/// Why the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BridgeConfigError {
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("{path}: {field}: {message}")]
    Invalid {
        path: PathBuf,
        field: &'static str,
        message: String,
    },
}

impl BridgeConfig {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<BridgeConfig, BridgeConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| BridgeConfigError::File {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let cfg: BridgeConfig = toml::from_str(&text).map_err(|e| BridgeConfigError::File {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        cfg.validate(path)?;
        Ok(cfg)
    }

    pub fn validate(&self, path: &Path) -> Result<(), BridgeConfigError> {
        let invalid = |field, message: String| {
            Err(BridgeConfigError::Invalid {
                path: path.to_path_buf(),
                field,
                message,
            })
        };
        if self.interval_ms == 0 {
            return invalid("interval_ms", "must be at least 1".into());
        }
        if self.service.timeout_ms == 0 {
            return invalid("service.timeout_ms", "must be at least 1".into());
        }
        if !(self.on_service_down.hold_timeout_s.is_finite()
            && self.on_service_down.hold_timeout_s >= 0.0)
        {
            return invalid(
                "on_service_down.hold_timeout_s",
                format!("{} is not a duration", self.on_service_down.hold_timeout_s),
            );
        }
        for (name, p) in &self.partitions {
            if !p.qos.is_empty() && lachesis_env::job::Qos::parse(&p.qos).is_none() {
                return invalid(
                    "partitions.*.qos",
                    format!("partition {name}: unknown QoS {:?}", p.qos),
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_example_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/slurm/bridge.toml");
        let cfg = BridgeConfig::load(&path).unwrap();
        assert_eq!(cfg.on_service_down.policy, DownPolicy::Open);
        assert!(cfg.partitions["scavenger"].preemptible);
        assert_eq!(cfg.slurm.gpu_model(Some("a100")), "A100");
        // Untyped GPUs are the catalog's reference model unless mapped, so that a cluster
        // with plain `gres=gpu:N` passes the service's catalog check as it is.
        let mut slurm = SlurmConfig::default();
        assert_eq!(slurm.gpu_model(None), "V100");
        assert!(lachesis_env::gpu::GpuModel::canonical_name(&slurm.gpu_model(None)).is_some());
        slurm.gpu_models.insert(UNTYPED_GPUS.into(), "A100".into());
        assert_eq!(slurm.gpu_model(None), "A100");
    }

    #[test]
    fn bad_fields_are_named() {
        let dir = std::env::temp_dir().join(format!("lachesis-bridge-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("b.toml");
        std::fs::write(&p, "interval_ms = 0\n").unwrap();
        let e = BridgeConfig::load(&p).unwrap_err().to_string();
        assert!(e.contains("interval_ms"), "{e}");
        std::fs::write(&p, "[partitions.x]\nqos = \"gold\"\n").unwrap();
        let e = BridgeConfig::load(&p).unwrap_err().to_string();
        assert!(e.contains("partition x: unknown QoS"), "{e}");
        std::fs::write(&p, "intervall_ms = 5\n").unwrap();
        let e = BridgeConfig::load(&p).unwrap_err().to_string();
        assert!(e.contains("b.toml") && e.contains("intervall_ms"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
