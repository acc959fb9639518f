//! Job durations as the duration-based orderings see them: the user's estimate where the trace
//! has one, else an online predictor learned from jobs seen to finish; or, for the labelled
//! oracle orderings only, the true durations.

use crate::job::JobSpec;
use crate::policy::{DecisionContext, PolicyOptions};
use crate::units::{JobId, SimTime, TenantId};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The predictor's maps: small fixed-size keys, looked up for every pending job whenever a job
/// has finished; foldhash's fixed state is deterministic and several times cheaper than SipHash.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::FixedState>;

/// What the predictor answers before any job has finished: one hour. Every job then gets the
/// same guess, so duration orderings start out as FIFO.
pub const PRIOR_DURATION: SimTime = SimTime::from_secs(3600);

/// A request shape: tasks, GPUs per task, milli-GPU per GPU, CPU per task. Jobs of one shape
/// from one tenant are usually reruns of one workload (the signal duration predictors for
/// Philly/Helios-like traces rely on).
type Shape = (u32, u32, u32, u64);

fn shape(job: &JobSpec) -> Shape {
    (
        job.tasks,
        job.task.gpus,
        job.task.gpu_milli,
        job.task.cpu_milli,
    )
}

/// Running mean of log durations: its exponential is the geometric mean, which a few very long
/// jobs do not dominate (durations are heavy-tailed).
#[derive(Debug, Clone, Copy, Default)]
struct LogMean {
    count: u64,
    sum_ln_ms: f64,
    /// The geometric mean of what was added, once anything was (kept: read far more often
    /// than added to).
    mean: Option<SimTime>,
}

impl LogMean {
    fn add(&mut self, d: SimTime) {
        self.count += 1;
        self.sum_ln_ms += (d.ms().max(1) as f64).ln();
        let ms = (self.sum_ln_ms / self.count as f64).exp();
        self.mean = Some(SimTime(ms.round() as u64));
    }
    fn mean(&self) -> Option<SimTime> {
        self.mean
    }
}

/// Predicts a job's run time from the observed run times of jobs that finished before it:
/// the geometric mean over finished jobs of the same tenant and shape, falling back to the
/// same shape (any tenant), then to every finished job, then to `PRIOR_DURATION`.
///
/// It learns only from what a scheduler sees: `DecisionContext::recently_finished` and their
/// observed wall time `attained_ms` (which includes restart overheads and work lost to
/// preemption), never the trace's true duration.
#[derive(Debug, Clone, Default)]
pub struct DurationPredictor {
    by_tenant_shape: FastMap<(TenantId, Shape), LogMean>,
    by_shape: FastMap<Shape, LogMean>,
    global: LogMean,
    /// Jobs already learned from, so that a context shown twice is not counted twice.
    learned: HashSet<JobId, foldhash::fast::FixedState>,
}

impl DurationPredictor {
    pub fn new() -> Self {
        Self::default()
    }

    /// Learns from the jobs that finished since the previous decision.
    pub fn observe(&mut self, ctx: &DecisionContext<'_>) {
        for &id in ctx.recently_finished() {
            if self.learned.insert(id) {
                self.record(ctx.job(id), SimTime(ctx.runtime(id).attained_ms));
            }
        }
    }

    /// Learns that `job` ran for `observed`.
    pub fn record(&mut self, job: &JobSpec, observed: SimTime) {
        let s = shape(job);
        self.by_tenant_shape
            .entry((job.tenant, s))
            .or_default()
            .add(observed);
        self.by_shape.entry(s).or_default().add(observed);
        self.global.add(observed);
    }

    /// The predicted run time of `job`.
    pub fn predict(&self, job: &JobSpec) -> SimTime {
        let s = shape(job);
        self.by_tenant_shape
            .get(&(job.tenant, s))
            .and_then(LogMean::mean)
            .or_else(|| self.by_shape.get(&s).and_then(LogMean::mean))
            .or_else(|| self.global.mean())
            .unwrap_or(PRIOR_DURATION)
    }

    /// How many finished jobs it has learned from.
    pub fn samples(&self) -> u64 {
        self.global.count
    }
}

/// Where a duration-based ordering gets a job's total run time.
#[derive(Debug, Clone)]
pub enum Durations {
    /// The user's estimate where the trace has one, else the online predictor.
    Learned(DurationPredictor),
    /// True durations by job id: labelled oracle orderings (upper bounds) only.
    Oracle(Arc<[SimTime]>),
}

impl Durations {
    pub fn learned() -> Self {
        Durations::Learned(DurationPredictor::new())
    }

    /// True durations from `options`; an error when the caller has none to give.
    pub fn oracle(options: &PolicyOptions, ordering: &str) -> Result<Self, String> {
        options
            .oracle_durations
            .clone()
            .map(Durations::Oracle)
            .ok_or_else(|| {
                format!(
                    "`{ordering}` needs true durations (PolicyOptions::oracle_durations): it is \
                     an upper bound, not a real scheduler"
                )
            })
    }

    /// Learns from jobs finished since the previous decision (the predictor only).
    pub fn observe(&mut self, ctx: &DecisionContext<'_>) {
        if let Durations::Learned(p) = self {
            p.observe(ctx);
        }
    }

    /// The job's total run time as this source knows it.
    pub fn total(&self, job: &JobSpec) -> SimTime {
        match self {
            Durations::Learned(p) => job.estimate.unwrap_or_else(|| p.predict(job)),
            Durations::Oracle(truth) => *truth
                .get(job.id.index())
                .expect("oracle durations are given for every job of the trace"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::tests::uniform;
    use crate::policy::order::tests::{World, gpu_job};

    #[test]
    fn predicts_the_geometric_mean_of_observed_runtimes_with_fallbacks() {
        // Jobs 0, 1: tenant 0, 1 GPU. Job 2: tenant 1, 1 GPU. Job 3: tenant 0, 2 GPUs.
        // Jobs 4..7 wait: same shapes/tenants as 0, 2, 3, plus a 4-GPU shape nobody ran.
        let mut jobs: Vec<JobSpec> = [1, 1, 1, 2, 1, 1, 2, 4]
            .iter()
            .map(|g| gpu_job(0, *g))
            .collect();
        jobs[2].tenant = TenantId(1);
        jobs[5].tenant = TenantId(1);
        let mut w = World::new(jobs, uniform(1, 8, "V100", 64_000, 1 << 20));
        let mut p = DurationPredictor::new();
        // Nothing finished: the prior for everyone.
        p.observe(&w.ctx(0));
        assert_eq!(p.predict(&w.jobs[4]), PRIOR_DURATION);

        w.finish(0, 100);
        w.finish(1, 400);
        w.finish(2, 1000);
        w.finish(3, 50);
        p.observe(&w.ctx(1000));
        // The same context again learns nothing new.
        p.observe(&w.ctx(1000));
        assert_eq!(p.samples(), 4);
        // Tenant 0, 1 GPU: geometric mean of 100 s and 400 s = sqrt(40000) = 200 s.
        assert_eq!(p.predict(&w.jobs[4]), SimTime::from_secs(200));
        // Tenant 1, 1 GPU: its own job only, 1000 s.
        assert_eq!(p.predict(&w.jobs[5]), SimTime::from_secs(1000));
        // Tenant 0, 2 GPUs: 50 s.
        assert_eq!(p.predict(&w.jobs[6]), SimTime::from_secs(50));
        // Tenant 2 (never seen), 1 GPU: the 1-GPU shape over all tenants,
        // (100 x 400 x 1000)^(1/3) = 40,000,000^(1/3) = 341.995 s.
        let mut stranger = w.jobs[4].clone();
        stranger.tenant = TenantId(2);
        assert_eq!(p.predict(&stranger), SimTime(341_995));
        // 4 GPUs, a shape nobody ran: all four, (100 x 400 x 1000 x 50)^(1/4) = (2e21 ms^4)^(1/4)
        // = 211.474 s.
        assert_eq!(p.predict(&w.jobs[7]), SimTime(211_474));
    }

    #[test]
    fn prediction_improves_as_jobs_finish() {
        // Every job runs 600 s (observed). The prior (3600 s) is 3000 s off; after one job of
        // the same shape and tenant finishes, the prediction is exact.
        let jobs: Vec<JobSpec> = (0..3).map(|_| gpu_job(0, 1)).collect();
        let mut w = World::new(jobs, uniform(1, 8, "V100", 64_000, 1 << 20));
        let mut p = DurationPredictor::new();
        p.observe(&w.ctx(0));
        let before = p.predict(&w.jobs[2]).ms().abs_diff(600_000);
        w.finish(0, 600);
        p.observe(&w.ctx(600));
        let after = p.predict(&w.jobs[2]).ms().abs_diff(600_000);
        assert_eq!((before, after), (3_000_000, 0));
    }

    #[test]
    fn learns_observed_runtime_never_the_true_duration() {
        // The world holds no true durations at all: the predictor can only have used the
        // observed attained time. A job observed for 123 s predicts 123 s.
        let mut w = World::new(
            vec![gpu_job(0, 1), gpu_job(0, 1)],
            uniform(1, 8, "V100", 1, 1),
        );
        w.finish(0, 123);
        let mut d = Durations::learned();
        d.observe(&w.ctx(123));
        assert_eq!(d.total(&w.jobs[1]), SimTime::from_secs(123));
        // A user estimate wins over the prediction.
        w.jobs[1].estimate = Some(SimTime::from_secs(7));
        assert_eq!(d.total(&w.jobs[1]), SimTime::from_secs(7));
    }
}
