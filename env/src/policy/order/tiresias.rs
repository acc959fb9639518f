//! `tiresias`: discretized two-dimensional least-attained-service (Gu et al., "Tiresias: A GPU
//! Cluster Manager for Distributed Deep Learning", NSDI'19).
//!
//! A job's priority is its attained GPU service (GPUs x time run), discretized into queues by
//! thresholds; a lower queue goes first and a queue is FIFO by submit time. New jobs start in
//! queue 0 and sink as they run. A job that has waited, since it last ran, longer than
//! `promote_knob` times the time it ran since its last promotion goes back to queue 0 (its
//! service counter restarts), so long jobs do not starve.
//!
//! Defaults follow Tiresias' simulator (`simulator/jobs.py`: `num_queue = 3`,
//! `queue_limit = [3250, 7200, 18000]` GPU-seconds, of which the first `num_queue - 1` split
//! the queues). Its runs switch promotion off by default and sweep the knob over 0.5 to 1000
//! (`sim_runs.sh`: `dlas-gpu-05` ... `dlas-gpu-1000`); we default to 8, one of those settings,
//! so that starvation is bounded out of the box. The ordering ranks pending jobs; demoting and
//! preempting running ones is a preemption modifier's job, which can share `tiresias_queue`.

use super::sorted_by;
use crate::policy::{DecisionContext, Ordering, PendingJob};
use crate::units::{JobId, SimTime};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Tiresias' knobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TiresiasConfig {
    /// Queue boundaries in attained GPU-seconds, strictly increasing: a job with less service
    /// than `thresholds_gpu_s[0]` is in queue 0, and so on; `k` thresholds make `k + 1` queues.
    pub thresholds_gpu_s: Vec<f64>,
    /// Promote a job back to queue 0 once it has waited, since it last ran, at least this many
    /// times the wall time it ran since its last promotion. 0 switches promotion off.
    pub promote_knob: f64,
}

impl TiresiasConfig {
    /// The thresholds in milli-GPU x ms, checked positive, finite and increasing; shared by the
    /// `tiresias` ordering and the `las-preempt` modifier so both use the same queues.
    pub fn thresholds_milli_ms(&self) -> Result<Vec<u128>, String> {
        let mut thresholds = Vec::with_capacity(self.thresholds_gpu_s.len());
        for &t in &self.thresholds_gpu_s {
            if !(t.is_finite() && t > 0.0) {
                return Err(format!(
                    "tiresias threshold {t} must be positive GPU-seconds"
                ));
            }
            // GPU-seconds to milli-GPU x ms.
            let t = (t * 1e6).round() as u128;
            if thresholds.last().is_some_and(|last| *last >= t) {
                return Err("tiresias thresholds must increase".into());
            }
            thresholds.push(t);
        }
        Ok(thresholds)
    }
}

impl Default for TiresiasConfig {
    fn default() -> Self {
        TiresiasConfig {
            thresholds_gpu_s: vec![3250.0, 7200.0],
            promote_knob: 8.0,
        }
    }
}

/// The queue of a job with `service` attained GPU service (milli-GPU x ms): the number of
/// thresholds (same unit, ascending) at or below it.
pub fn tiresias_queue(service_gpu_milli_ms: u128, thresholds_gpu_milli_ms: &[u128]) -> usize {
    thresholds_gpu_milli_ms.partition_point(|t| *t <= service_gpu_milli_ms)
}

/// A job's attained GPU service, milli-GPU x ms: what it got in earlier runs plus its current
/// run so far (for a running job, as a preemption rule sharing these queues needs).
pub fn attained_gpu_service(ctx: &DecisionContext<'_>, id: JobId) -> u128 {
    let rt = ctx.runtime(id);
    let current_ms = rt.run_start.map_or(0, |s| ctx.now().saturating_sub(s).ms());
    rt.attained_gpu_milli_ms + current_ms as u128 * ctx.job(id).gpu_milli_total() as u128
}

/// Whether a job is starved: it has run (`executed > 0`) since its last promotion and has
/// waited since then at least `knob` times as long. Never with `knob == 0`.
pub fn starved(waited: SimTime, executed: SimTime, knob: f64) -> bool {
    knob > 0.0 && executed > SimTime::ZERO && waited.ms() as f64 >= knob * executed.ms() as f64
}

/// A pending job's Tiresias queue from what a snapshot says alone, and whether it is there by
/// promotion: its attained GPU service's queue, or 0 when it has waited since its last run at
/// least `knob` times its whole attained run time. The `tiresias` ordering remembers its last
/// promotion and counts run time since then instead, so it promotes a job that ran again
/// after a promotion sooner; this stateless rule needs no memory across decisions, as the
/// decision service (which sees each snapshot afresh) requires.
pub fn snapshot_queue(p: &PendingJob<'_>, thresholds: &[u128], knob: f64) -> (usize, bool) {
    let queue = tiresias_queue(p.runtime.attained_gpu_milli_ms, thresholds);
    if queue > 0 && starved(p.idle(), SimTime(p.runtime.attained_ms), knob) {
        (0, true)
    } else {
        (queue, false)
    }
}

/// What Tiresias remembers of a job beyond what the context says.
#[derive(Debug, Clone, Copy)]
struct LasJob {
    /// Attained wall time and GPU service at the last promotion (0 before any).
    base_ms: u64,
    base_gpu: u128,
    /// Attained wall time when last seen pending; a change means it ran in between.
    seen_attained_ms: u64,
    /// When it was first seen pending since it last ran.
    waiting_since: SimTime,
}

/// Discretized 2D-LAS over pending jobs. Greedy, as Tiresias places jobs: within the priority
/// order, a job that does not fit is skipped.
#[derive(Debug)]
pub struct Tiresias {
    thresholds: Vec<u128>,
    promote_knob: f64,
    jobs: HashMap<JobId, LasJob>,
}

impl Tiresias {
    /// Checks `config` (thresholds positive, finite, increasing; knob finite and >= 0).
    pub fn new(config: &TiresiasConfig) -> Result<Self, String> {
        let thresholds = config.thresholds_milli_ms()?;
        if !(config.promote_knob.is_finite() && config.promote_knob >= 0.0) {
            return Err(format!(
                "tiresias promote_knob must be >= 0, got {}",
                config.promote_knob
            ));
        }
        Ok(Tiresias {
            thresholds,
            promote_knob: config.promote_knob,
            jobs: HashMap::new(),
        })
    }

    /// Forgets the jobs that finished since the previous decision.
    pub(crate) fn forget_finished(&mut self, ctx: &DecisionContext<'_>) {
        for id in ctx.recently_finished() {
            self.jobs.remove(id);
        }
    }

    /// The queue of a pending job, after updating its waiting clock and promoting it if
    /// starved. `attained_gpu` is its attained GPU service (a pending job has no current run).
    pub(crate) fn queue(
        &mut self,
        id: JobId,
        attained_ms: u64,
        attained_gpu: u128,
        now: SimTime,
    ) -> usize {
        let knob = self.promote_knob;
        let j = self.jobs.entry(id).or_insert(LasJob {
            base_ms: 0,
            base_gpu: 0,
            seen_attained_ms: attained_ms,
            waiting_since: now,
        });
        if j.seen_attained_ms != attained_ms {
            // It ran (and was preempted) since we last saw it: its wait restarts now, which is
            // late by at most one decision interval.
            j.seen_attained_ms = attained_ms;
            j.waiting_since = now;
        }
        let executed = SimTime(attained_ms.saturating_sub(j.base_ms));
        let service = attained_gpu.saturating_sub(j.base_gpu);
        let queue = tiresias_queue(service, &self.thresholds);
        if queue > 0 && starved(now.saturating_sub(j.waiting_since), executed, knob) {
            j.base_ms = attained_ms;
            j.base_gpu = attained_gpu;
            j.waiting_since = now;
            return 0;
        }
        queue
    }
}

impl Ordering for Tiresias {
    fn name(&self) -> &str {
        "tiresias"
    }
    fn order<'c>(
        &'c mut self,
        ctx: &'c DecisionContext<'_>,
    ) -> Box<dyn Iterator<Item = JobId> + 'c> {
        self.forget_finished(ctx);
        let now = ctx.now();
        sorted_by(ctx, |p| {
            let id = p.spec.id;
            self.queue(id, ctx.attained_ms(id), attained_gpu_service(ctx, id), now)
        })
    }
    fn blocks_on_failure(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::tests::uniform;
    use crate::policy::order::tests::{World, gpu_job, order_of};

    const GPU_S: u128 = 1_000_000; // milli-GPU x ms in one GPU-second

    #[test]
    fn queue_table() {
        // Default thresholds 3250 and 7200 GPU-s: [0, 3250) -> 0, [3250, 7200) -> 1, beyond -> 2.
        let t = [3250 * GPU_S, 7200 * GPU_S];
        let cases = [
            (0, 0),
            (3249 * GPU_S, 0),
            (3250 * GPU_S, 1), // at the threshold it has used its quantum
            (7199 * GPU_S, 1),
            (7200 * GPU_S, 2),
            (1_000_000 * GPU_S, 2),
        ];
        for (service, want) in cases {
            assert_eq!(tiresias_queue(service, &t), want, "{service}");
        }
        assert_eq!(tiresias_queue(5, &[]), 0);
    }

    #[test]
    fn starved_table() {
        // (waited s, executed s, knob) -> starved?
        let cases = [
            (800, 100, 8.0, true),   // 800 >= 8 x 100
            (799, 100, 8.0, false),  // 799 < 800
            (1000, 0, 8.0, false),   // never ran: stays in queue 0 anyway
            (1000, 100, 0.0, false), // knob 0: promotion off
            (50, 100, 0.5, true),    // 50 >= 0.5 x 100
        ];
        for (w, e, knob, want) in cases {
            assert_eq!(
                starved(SimTime::from_secs(w), SimTime::from_secs(e), knob),
                want,
                "{w} {e} {knob}"
            );
        }
    }

    #[test]
    fn attained_service_counts_the_current_run() {
        // Job 0: 2 GPUs, ran 100 s before (200 GPU-s), running again since t = 50 s. At
        // t = 80 s: 200 + 30 x 2 = 260 GPU-s.
        let mut w = World::new(vec![gpu_job(0, 2)], uniform(1, 8, "V100", 64_000, 1 << 20));
        w.start(0, 50);
        w.runtime[0].attained_gpu_milli_ms = 200 * GPU_S;
        assert_eq!(attained_gpu_service(&w.ctx(80), JobId(0)), 260 * GPU_S);
    }

    #[test]
    fn config_is_checked() {
        assert!(Tiresias::new(&TiresiasConfig::default()).is_ok());
        let bad = TiresiasConfig {
            thresholds_gpu_s: vec![100.0, 50.0],
            ..TiresiasConfig::default()
        };
        assert!(Tiresias::new(&bad).unwrap_err().contains("increase"));
        let bad = TiresiasConfig {
            promote_knob: -1.0,
            ..TiresiasConfig::default()
        };
        assert!(Tiresias::new(&bad).is_err());
    }

    /// Sets job `i`'s attained service as if it ran `ran_s` seconds on `gpus` GPUs.
    fn ran(w: &mut World, i: usize, ran_s: u64, gpus: u128) {
        w.runtime[i].attained_ms = ran_s * 1000;
        w.runtime[i].attained_gpu_milli_ms = ran_s as u128 * 1000 * gpus * 1000;
    }

    #[test]
    fn demotes_as_service_crosses_a_threshold() {
        // Job 0 (4 GPUs, submitted first) and job 1 (1 GPU). Job 0 has run 800 s: 3200 GPU-s,
        // still queue 0, so FIFO puts it first. After 820 s it has 3280 GPU-s >= 3250: queue 1,
        // behind job 1.
        let jobs = vec![gpu_job(0, 4), gpu_job(10, 1)];
        let mut w = World::new(jobs, uniform(1, 8, "V100", 64_000, 1 << 20));
        let mut t = Tiresias::new(&TiresiasConfig::default()).unwrap();
        ran(&mut w, 0, 800, 4);
        assert_eq!(order_of(&mut t, &w, 1000), [0, 1]);
        ran(&mut w, 0, 820, 4);
        assert_eq!(order_of(&mut t, &w, 1100), [1, 0]);
    }

    #[test]
    fn promotes_a_starved_job_back_to_queue_0() {
        // Knob 8. Job 0 (8 GPUs) ran 500 s = 4000 GPU-s: queue 1, behind the newer job 1.
        // Seen waiting from t = 1000 s; at t = 1000 + 8 x 500 = 5000 s it is starved and goes
        // back to queue 0, ahead of job 1 (FIFO by submit).
        let jobs = vec![gpu_job(0, 8), gpu_job(100, 1)];
        let mut w = World::new(jobs, uniform(1, 8, "V100", 64_000, 1 << 20));
        let mut t = Tiresias::new(&TiresiasConfig::default()).unwrap();
        ran(&mut w, 0, 500, 8);
        assert_eq!(order_of(&mut t, &w, 1000), [1, 0]);
        assert_eq!(order_of(&mut t, &w, 4999), [1, 0]);
        assert_eq!(order_of(&mut t, &w, 5000), [0, 1]);
        // It stays promoted: its service counter restarted at the promotion.
        assert_eq!(order_of(&mut t, &w, 5001), [0, 1]);
        // Knob 0: never promoted.
        let mut off = Tiresias::new(&TiresiasConfig {
            promote_knob: 0.0,
            ..TiresiasConfig::default()
        })
        .unwrap();
        assert_eq!(order_of(&mut off, &w, 1000), [1, 0]);
        assert_eq!(order_of(&mut off, &w, 100_000), [1, 0]);
    }

    #[test]
    fn a_run_restarts_the_waiting_clock() {
        // Job 0 ran 500 s on 8 GPUs, waits from t = 1000 s, then runs 10 s more (seen at
        // t = 3000 s with new service): its wait restarts there, so at t = 5000 s (2000 s of
        // waiting < 8 x 510 s) it is not yet promoted.
        let jobs = vec![gpu_job(0, 8), gpu_job(100, 1)];
        let mut w = World::new(jobs, uniform(1, 8, "V100", 64_000, 1 << 20));
        let mut t = Tiresias::new(&TiresiasConfig::default()).unwrap();
        ran(&mut w, 0, 500, 8);
        assert_eq!(order_of(&mut t, &w, 1000), [1, 0]);
        ran(&mut w, 0, 510, 8);
        assert_eq!(order_of(&mut t, &w, 3000), [1, 0]);
        assert_eq!(order_of(&mut t, &w, 5000), [1, 0]);
        assert_eq!(order_of(&mut t, &w, 3000 + 8 * 510), [0, 1]);
    }
}
