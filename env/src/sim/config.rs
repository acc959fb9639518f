//! `SimConfig`: every knob of one simulation run, with documented defaults.

use crate::units::SimTime;
use serde::{Deserialize, Serialize};

/// How a run is simulated. Unknown fields are rejected when read from a file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimConfig {
    /// Seed for every random choice of the run (policies get it too); same seed, same run.
    pub seed: u64,
    /// Ask the policy again every `tick_s` seconds while jobs wait or run (0 = only after
    /// events). Preempting policies such as Tiresias' LAS need it.
    pub tick_s: f64,
    /// A running job checkpoints every this many seconds of progress; a preempted job resumes
    /// from its last checkpoint. 0 = never checkpoints: a preempted job starts over.
    pub checkpoint_interval_s: f64,
    /// Seconds a job spends restoring (loading the checkpoint, warming up) each time it is
    /// restarted after a preemption; no progress is made meanwhile.
    pub restart_overhead_s: f64,
    /// Scale run times by the GPU model's relative speed (a job's trace duration is its run
    /// time at speed 1.0; on the slowest GPU of its placement it runs `duration / speed`).
    pub gpu_speed: bool,
    /// Run-time factor for a gang spread over more nodes than it needs.
    pub cross_node_penalty: f64,
    /// Further factor when it also spans more racks than it needs.
    pub cross_rack_penalty: f64,
    /// Jobs submitted in the first `warmup_s` seconds (from the first submit) run but are left
    /// out of job statistics, and time averages start after it.
    pub warmup_s: f64,
    /// Skip (and count) jobs that can never run instead of failing the run: those that cannot
    /// fit the cluster, and typed jobs the throughput table rates at their size on no GPU model
    /// they may use.
    pub skip_unplaceable: bool,
    /// Record a timeline row at most every `timeline_interval_s` seconds (0 = every decision
    /// point); `record_timeline = false` keeps none.
    pub timeline_interval_s: f64,
    pub record_timeline: bool,
    /// Throughput table for jobs with a workload type (`JobSpec::workload`): a preset
    /// (`gavel`, `sia`) or a table file (`docs/heterogeneity.md`). A typed job then progresses
    /// at the table's speed for where it runs; untyped jobs are unaffected. `None`: workload
    /// types are ignored and every job runs at its GPU model's catalog speed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throughputs: Option<String>,
    /// The starvation bound below every policy (`policy::starvation`): `"auto"` (four times
    /// the 90th percentile of finished jobs' run times, at least an hour, once 20 have
    /// finished), `"off"`, or seconds. A job waiting past it gets a reservation no policy may
    /// bypass, and is not preempted once started.
    pub starvation_bound: crate::policy::StarvationBound,
    /// Quotas below every policy (docs/quotas.md): a quota file's path, or `"equal"` (each
    /// tenant with a job gets an equal share of the cluster, all in one cohort, borrowing
    /// allowed). A job then starts only where its tenant's queue admits it. `None`: no quotas.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quotas: Option<String>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 0,
            tick_s: 0.0,
            checkpoint_interval_s: 1800.0,
            restart_overhead_s: 60.0,
            gpu_speed: true,
            cross_node_penalty: 1.1,
            cross_rack_penalty: 1.1,
            warmup_s: 0.0,
            skip_unplaceable: false,
            timeline_interval_s: 60.0,
            record_timeline: true,
            throughputs: None,
            starvation_bound: crate::policy::StarvationBound::Auto,
            quotas: None,
        }
    }
}

fn secs(field: &str, v: f64) -> Result<SimTime, String> {
    SimTime::from_secs_f64(v)
        .ok_or_else(|| format!("{field} must be a finite number of seconds >= 0, got {v}"))
}

/// The configuration in the simulator's integer units, checked once.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub tick: Option<SimTime>,
    pub checkpoint: Option<SimTime>,
    pub restart_overhead: SimTime,
    pub warmup: SimTime,
    pub timeline_interval: SimTime,
}

impl SimConfig {
    /// Checks every field; the message names the field.
    pub(crate) fn resolve(&self) -> Result<Resolved, String> {
        for (field, v) in [
            ("cross_node_penalty", self.cross_node_penalty),
            ("cross_rack_penalty", self.cross_rack_penalty),
        ] {
            if !(v.is_finite() && v >= 1.0) {
                return Err(format!("{field} must be a finite factor >= 1, got {v}"));
            }
        }
        let nonzero = |t: SimTime| (t > SimTime::ZERO).then_some(t);
        Ok(Resolved {
            tick: nonzero(secs("tick_s", self.tick_s)?),
            checkpoint: nonzero(secs("checkpoint_interval_s", self.checkpoint_interval_s)?),
            restart_overhead: secs("restart_overhead_s", self.restart_overhead_s)?,
            warmup: secs("warmup_s", self.warmup_s)?,
            timeline_interval: secs("timeline_interval_s", self.timeline_interval_s)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_resolve_and_bad_fields_are_named() {
        assert!(SimConfig::default().resolve().is_ok());
        let bad = SimConfig {
            tick_s: -1.0,
            ..SimConfig::default()
        };
        assert!(bad.resolve().unwrap_err().starts_with("tick_s"));
        let bad = SimConfig {
            cross_node_penalty: 0.5,
            ..SimConfig::default()
        };
        assert!(bad.resolve().unwrap_err().starts_with("cross_node_penalty"));
        let err = toml::from_str::<SimConfig>("tick = 3")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `tick`"), "{err}");
    }
}
