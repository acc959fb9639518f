//! Rewards: what one step's stretch of simulated time earned, for configurable objectives.
//!
//! Every term is a time integral over the sim time a step covered (placements take none, so
//! they earn 0 until the next "wait"), in units of `time_unit_s`:
//! - `jct`: minus the number of pending jobs integrated over time. By Little's law the mean
//!   queue length over a run is the arrival rate times the mean wait, so summed over an
//!   episode it is minus the total waiting time: the usual proxy for average JCT.
//! - `jobs`: minus the number of jobs in the system (pending or running) integrated over time
//!   (Decima's reward, Mao et al., SIGCOMM'19): summed over an episode it is exactly minus the
//!   sum of the jobs' JCTs, so it also charges what preemption costs a job (its lost work and
//!   restart), which `jct` does not see.
//! - `bsld`: minus each pending job's waiting time divided by `max(estimate, bsld_bound_s)`
//!   (the bound alone for jobs without an estimate): the growth of the waiting part of bounded
//!   slowdown, from what a scheduler knows (never the true duration).
//! - `overwait`: minus the number of pending jobs that have been idle (since submission, or
//!   since their last run ended) longer than `overwait_bound_s`, integrated over time: the
//!   tail term. It charges nothing until a job's wait passes the bound, then as `jct` does, so
//!   a policy that keeps every wait under the bound pays nothing for it.
//! - `alloc`: the allocated fraction of the cluster's GPU capacity integrated over time.
//! - `frag`: minus the fragmented fraction of GPU capacity (FGD's measure under the trace's
//!   task mix, as `Summary::frag_gpu_rate`) integrated over time.
//! - `energy`: minus GPU energy per GPU of the cluster, kWh (mean kW per GPU x hours).
//!
//! The reward is `sum(weight x term)`; the simulator's integrals start after `warmup_s`, so
//! the time-integral terms are 0 during warm-up. An episode that stalls (the agent waits while
//! nothing runs and nothing is left to arrive) also pays `unfinished_penalty` per job left.

use serde::{Deserialize, Serialize};

/// One objective, for building a single-objective `RewardConfig`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Objective {
    Jct,
    Bsld,
    Alloc,
    Frag,
    Energy,
}

impl Objective {
    pub const ALL: [Objective; 5] = [
        Objective::Jct,
        Objective::Bsld,
        Objective::Alloc,
        Objective::Frag,
        Objective::Energy,
    ];
}

/// Weights of the reward terms and their units. Unknown fields are rejected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RewardConfig {
    /// Weight of `jct` (minus pending jobs x time).
    pub jct: f64,
    /// Weight of `jobs` (minus jobs in the system x time: minus the sum of JCTs).
    pub jobs: f64,
    /// Weight of `bsld` (minus waiting time / max(estimate, bound), summed over pending jobs).
    pub bsld: f64,
    /// Weight of `overwait` (minus pending jobs idle past `overwait_bound_s` x time).
    pub overwait: f64,
    /// Weight of `alloc` (allocated GPU fraction x time).
    pub alloc: f64,
    /// Weight of `frag` (minus fragmented GPU fraction x time).
    pub frag: f64,
    /// Weight of `energy` (minus GPU kWh per cluster GPU).
    pub energy: f64,
    /// Seconds in one time unit of the integrals (3600: job-hours, GPU-fraction-hours).
    pub time_unit_s: f64,
    /// The bound of the slowdown proxy, seconds: a job's wait is divided by at least this.
    pub bsld_bound_s: f64,
    /// The wait past which `overwait` charges, seconds.
    pub overwait_bound_s: f64,
    /// Subtracted per job left unfinished when an episode stalls.
    pub unfinished_penalty: f64,
}

impl Default for RewardConfig {
    fn default() -> Self {
        RewardConfig {
            jct: 1.0,
            jobs: 0.0,
            bsld: 0.0,
            alloc: 0.0,
            frag: 0.0,
            energy: 0.0,
            time_unit_s: 3600.0,
            bsld_bound_s: 600.0,
            overwait: 0.0,
            overwait_bound_s: 86_400.0,
            unfinished_penalty: 1.0,
        }
    }
}

impl RewardConfig {
    /// Weight 1 on `objective`, 0 on the others; units as the defaults.
    pub fn objective(objective: Objective) -> Self {
        let mut c = RewardConfig {
            jct: 0.0,
            ..RewardConfig::default()
        };
        match objective {
            Objective::Jct => c.jct = 1.0,
            Objective::Bsld => c.bsld = 1.0,
            Objective::Alloc => c.alloc = 1.0,
            Objective::Frag => c.frag = 1.0,
            Objective::Energy => c.energy = 1.0,
        }
        c
    }

    /// Checks every field; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        for (field, v) in [
            ("jct", self.jct),
            ("jobs", self.jobs),
            ("bsld", self.bsld),
            ("overwait", self.overwait),
            ("alloc", self.alloc),
            ("frag", self.frag),
            ("energy", self.energy),
            ("unfinished_penalty", self.unfinished_penalty),
        ] {
            if !v.is_finite() {
                return Err(format!("{field} must be finite, got {v}"));
            }
        }
        for (field, v) in [
            ("time_unit_s", self.time_unit_s),
            ("bsld_bound_s", self.bsld_bound_s),
            ("overwait_bound_s", self.overwait_bound_s),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("{field} must be a finite number > 0, got {v}"));
            }
        }
        Ok(())
    }

    /// The weighted reward of `terms`.
    pub fn reward(&self, terms: &RewardTerms) -> f64 {
        self.jct * terms.jct
            + self.jobs * terms.jobs
            + self.bsld * terms.bsld
            + self.overwait * terms.overwait
            + self.alloc * terms.alloc
            + self.frag * terms.frag
            + self.energy * terms.energy
            - self.unfinished_penalty * terms.unfinished as f64
    }
}

/// The unweighted terms one step earned (reported in `Info`, so any mix can be recomputed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct RewardTerms {
    pub jct: f64,
    pub jobs: f64,
    pub bsld: f64,
    pub overwait: f64,
    pub alloc: f64,
    pub frag: f64,
    pub energy: f64,
    /// Jobs left unfinished by a stall (0 otherwise).
    pub unfinished: u64,
}

impl RewardTerms {
    pub fn add(&mut self, o: &RewardTerms) {
        self.jct += o.jct;
        self.jobs += o.jobs;
        self.bsld += o.bsld;
        self.overwait += o.overwait;
        self.alloc += o.alloc;
        self.frag += o.frag;
        self.energy += o.energy;
        self.unfinished += o.unfinished;
    }
}

/// The simulator's integrals at one instant, as the reward needs them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Snapshot {
    pub queue_ms: f64,
    pub system_ms: f64,
    pub alloc_milli_ms: f64,
    pub frag_milli_ms: f64,
    pub energy_wms: f64,
}

/// The terms earned between two snapshots, over a stretch in which the pending set was fixed
/// and `slowdown_rate` (sum over pending jobs of 1 / max(estimate, bound), per ms) applied for
/// `dt_ms`. `total_gpu_milli` and `gpus` size the cluster.
pub(crate) fn terms_between(
    cfg: &RewardConfig,
    before: &Snapshot,
    after: &Snapshot,
    slowdown_rate_per_ms: f64,
    dt_ms: f64,
    total_gpu_milli: f64,
    gpus: f64,
) -> RewardTerms {
    let unit_ms = cfg.time_unit_s * 1000.0;
    let per_capacity = |x: f64| {
        if total_gpu_milli > 0.0 {
            x / total_gpu_milli / unit_ms
        } else {
            0.0
        }
    };
    RewardTerms {
        jct: -(after.queue_ms - before.queue_ms) / unit_ms,
        jobs: -(after.system_ms - before.system_ms) / unit_ms,
        bsld: -slowdown_rate_per_ms * dt_ms,
        overwait: 0.0,
        alloc: per_capacity(after.alloc_milli_ms - before.alloc_milli_ms),
        frag: -per_capacity(after.frag_milli_ms - before.frag_milli_ms),
        // W x ms -> kWh: / 3.6e6 ms per h / 1000 W per kW.
        energy: -(after.energy_wms - before.energy_wms) / 3.6e9 / gpus.max(1.0),
        unfinished: 0,
    }
}

/// The `overwait` term of a stretch of `dt_ms` from `t0_ms` in which the pending set was
/// fixed: `due_ms` holds, per pending job, the instant its idle time passes the bound.
pub(crate) fn overwait_between(cfg: &RewardConfig, due_ms: &[f64], t0_ms: f64, dt_ms: f64) -> f64 {
    let end = t0_ms + dt_ms;
    let over: f64 = due_ms.iter().map(|d| (end - d.max(t0_ms)).max(0.0)).sum();
    -over / (cfg.time_unit_s * 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_follow_the_definitions() {
        // 2 jobs pending for half an hour (1.8e6 ms): jct = -2 x 0.5 h = -1.
        // Half of 8 GPUs (4000 of 8000 milli) allocated for that half hour: alloc = 0.25.
        // 1000 milli fragmented: frag = -(1000 / 8000) x 0.5 = -0.0625.
        // 8 GPUs at 300 W for 0.5 h = 1.2 kWh, per GPU 0.15: energy = -0.15.
        // Both jobs estimated 1 h (bound 600 s): each waits 0.5 of its estimate -> bsld = -1.
        let cfg = RewardConfig::default();
        let dt = 1.8e6;
        let after = Snapshot {
            queue_ms: 2.0 * dt,
            system_ms: 5.0 * dt,
            alloc_milli_ms: 4000.0 * dt,
            frag_milli_ms: 1000.0 * dt,
            energy_wms: 8.0 * 300.0 * dt,
        };
        let t = terms_between(
            &cfg,
            &Snapshot::default(),
            &after,
            2.0 / 3.6e6,
            dt,
            8000.0,
            8.0,
        );
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(t.jct, -1.0), "{t:?}");
        // 2 pending and 3 running: jobs = -5 x 0.5 h.
        assert!(close(t.jobs, -2.5), "{t:?}");
        assert!(close(t.alloc, 0.25), "{t:?}");
        assert!(close(t.frag, -0.0625), "{t:?}");
        assert!(close(t.energy, -0.15), "{t:?}");
        assert!(close(t.bsld, -1.0), "{t:?}");
        assert!(close(cfg.reward(&t), -1.0));
        let mix = RewardConfig {
            alloc: 2.0,
            ..RewardConfig::default()
        };
        assert!(close(mix.reward(&t), -0.5));
    }

    #[test]
    fn overwait_charges_only_past_the_bound() {
        let cfg = RewardConfig {
            overwait: 1.0,
            overwait_bound_s: 3600.0,
            ..RewardConfig::default()
        };
        let h = 3.6e6;
        // A stretch from 10 h to 12 h. One job due at 11 h (the stretch's second hour), one
        // due at 5 h (the whole stretch), one due at 13 h (none of it): 3 h in all.
        let t = overwait_between(&cfg, &[11.0 * h, 5.0 * h, 13.0 * h], 10.0 * h, 2.0 * h);
        assert!((t + 3.0).abs() < 1e-9, "{t}");
        assert_eq!(overwait_between(&cfg, &[], 0.0, h), 0.0);
        let terms = RewardTerms {
            overwait: t,
            ..RewardTerms::default()
        };
        assert!((cfg.reward(&terms) + 3.0).abs() < 1e-9);
        let bad = RewardConfig {
            overwait_bound_s: 0.0,
            ..RewardConfig::default()
        };
        assert!(bad.validate().unwrap_err().contains("overwait_bound_s"));
    }

    #[test]
    fn config_rejects_unknown_fields_and_bad_values() {
        let err = toml::from_str::<RewardConfig>("jtc = 1.0")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `jtc`"), "{err}");
        let c: RewardConfig = toml::from_str("alloc = 0.5").unwrap();
        assert_eq!((c.jct, c.alloc), (1.0, 0.5));
        let bad = RewardConfig {
            time_unit_s: 0.0,
            ..RewardConfig::default()
        };
        assert!(bad.validate().unwrap_err().starts_with("time_unit_s"));
        for o in Objective::ALL {
            assert!(RewardConfig::objective(o).validate().is_ok());
        }
    }
}
