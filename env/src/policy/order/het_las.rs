//! `het-las`: Tiresias' discretized 2D-LAS (see `tiresias.rs`) on throughput-normalised
//! attained service, a heterogeneity-aware least-attained-service in the spirit of Gavel's
//! LAS policy (Narayanan et al., OSDI'20, §4.1: max-min fairness over *normalised*
//! throughputs, each job's throughput on its allocation divided by what it would get on a
//! reference allocation).
//!
//! A job's normalised service is its attained GPU-time (GPUs x wall time run, as Tiresias
//! counts it) weighted by the share of its best speed it got meanwhile: GPU-time on its
//! fastest GPU model counts in full, GPU-time on a model where it runs at a fifth of that
//! counts a fifth. It is work done in units of the job's best GPU, so a job held on slow GPUs
//! stays in a less-served queue and goes first, as max-min fairness over normalised
//! throughput would have it. The share is read from the run's throughput view
//! ([`crate::policy::ThroughputView::relative_speed_on`]) for running jobs at each decision;
//! a job's placement changes only at decisions, so the service a job gained since the
//! previous decision was all gained where it runs now. Untyped jobs, and runs without a
//! table, count service as `tiresias` does, and get its order exactly.
//!
//! What it is not: Gavel solves an LP each round for every job's time fraction on every GPU
//! type (and space sharing), then runs jobs in 6-minute rounds by priority = allocation /
//! time received. Here there are no rounds and no LP: the ordering ranks pending jobs once
//! per decision, a placer (e.g. `fastest`) chooses the GPU model greedily, and preemption
//! (`las-preempt`) uses Tiresias' raw GPU-time queues, not the normalised ones. Service
//! attained before the ordering first saw a job (a policy built mid-run) counts in full.

use super::sorted_by;
use super::tiresias::{Tiresias, TiresiasConfig, attained_gpu_service};
use crate::policy::{DecisionContext, Ordering};
use crate::units::JobId;
use std::collections::HashMap;

/// A job's normalised service after it attained `attained - seen` more milli-GPU x ms at
/// `relative` of its best speed: `previous + (attained - seen) x relative`.
pub fn normalised_service(previous: f64, seen: u128, attained: u128, relative: f64) -> f64 {
    previous + attained.saturating_sub(seen) as f64 * relative
}

/// What `het-las` remembers of a job: its raw attained service when last seen, and its
/// normalised service then (milli-GPU x ms at its best speed).
#[derive(Debug, Clone, Copy, Default)]
struct Served {
    seen: u128,
    normalised: f64,
}

/// Tiresias' queues on throughput-normalised service; see the module docs.
#[derive(Debug)]
pub struct HetLas {
    las: Tiresias,
    served: HashMap<JobId, Served>,
}

impl HetLas {
    /// Tiresias' queues and promotion from `config` (checked as `tiresias` checks them).
    pub fn new(config: &TiresiasConfig) -> Result<Self, String> {
        Ok(HetLas {
            las: Tiresias::new(config)?,
            served: HashMap::new(),
        })
    }

    /// Job `id`'s normalised service now, counting what it attained since last seen at
    /// `relative` of its best speed.
    fn observe(&mut self, ctx: &DecisionContext<'_>, id: JobId, relative: f64) -> f64 {
        let attained = attained_gpu_service(ctx, id);
        let s = self.served.entry(id).or_default();
        s.normalised = normalised_service(s.normalised, s.seen, attained, relative);
        s.seen = attained;
        s.normalised
    }
}

impl Ordering for HetLas {
    fn name(&self) -> &str {
        "het-las"
    }
    fn order<'c>(
        &'c mut self,
        ctx: &'c DecisionContext<'_>,
    ) -> Box<dyn Iterator<Item = JobId> + 'c> {
        self.las.forget_finished(ctx);
        for id in ctx.recently_finished() {
            self.served.remove(id);
        }
        if let Some(view) = ctx.throughputs() {
            let running: Vec<(JobId, f64)> = ctx
                .cluster()
                .running()
                .map(|a| {
                    let relative = view.relative_speed_on(ctx.job(a.job), &a.nodes());
                    (a.job, relative.unwrap_or(1.0))
                })
                .collect();
            for (id, relative) in running {
                self.observe(ctx, id, relative);
            }
        }
        let now = ctx.now();
        sorted_by(ctx, |p| {
            let id = p.spec.id;
            // A pending job gained nothing since it was last seen (it ran only where the
            // running pass above saw it), except before this ordering first saw it.
            let service = self.observe(ctx, id, 1.0);
            self.las
                .queue(id, ctx.attained_ms(id), service.round() as u128, now)
        })
    }
    fn blocks_on_failure(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{FitStrategy, load_cluster};
    use crate::policy::ThroughputView;
    use crate::policy::order::tests::World;
    use crate::policy::view::tests::{toy_table, typed_job};
    use crate::policy::{JobState, Ordering};
    use crate::units::SimTime;
    use std::sync::Arc;

    const GPU_S: u128 = 1_000_000; // milli-GPU x ms in one GPU-second

    #[test]
    fn normalised_service_table() {
        // (previous, seen, attained, relative) -> previous + (attained - seen) x relative.
        let cases = [
            (0.0, 0, 1000, 1.0, 1000.0),
            (0.0, 0, 1000, 0.2, 200.0),
            (500.0, 1000, 3000, 0.5, 1500.0),
            (500.0, 3000, 3000, 0.5, 500.0), // nothing new
            (500.0, 3000, 2000, 0.5, 500.0), // never goes back
        ];
        for (previous, seen, attained, relative, want) in cases {
            assert_eq!(
                normalised_service(previous, seen, attained, relative),
                want,
                "{previous} {seen} {attained} {relative}"
            );
        }
    }

    /// Starts job `i` at `now_s` on a node of GPU model `model` (best fit among those).
    fn start_on(w: &mut World, i: usize, model: &str, now_s: u64) {
        let mut only = w.jobs[i].clone();
        only.gpu_types = vec![model.into()];
        let mut c = w.cluster.borrow_mut();
        let tasks = c
            .find_job_placement(&only, FitStrategy::BestFit)
            .expect("room on the model");
        c.allocate(&w.jobs[i], tasks).expect("placement just found");
        w.pending.remove(&w.jobs[i].id);
        w.runtime[i].state = JobState::Running;
        w.runtime[i].run_start = Some(SimTime::from_secs(now_s));
    }

    /// Preempts running job `i` at `now_s`: its run's GPU-time becomes attained service.
    fn stop(w: &mut World, i: usize, now_s: u64) {
        let id = w.jobs[i].id;
        w.cluster.borrow_mut().release(id).expect("running");
        let rt = &mut w.runtime[i];
        let ran_ms = now_s * 1000 - rt.run_start.take().expect("running").ms();
        rt.attained_ms += ran_ms;
        rt.attained_gpu_milli_ms += ran_ms as u128 * w.jobs[i].gpu_milli_total() as u128;
        rt.state = JobState::Pending;
        w.pending.insert(id);
    }

    fn order(
        o: &mut dyn Ordering,
        w: &World,
        view: Option<&Arc<ThroughputView>>,
        now_s: u64,
    ) -> Vec<u32> {
        let ctx = w.ctx(now_s).with_throughputs(view);
        o.order(&ctx).map(|id| id.0).collect()
    }

    #[test]
    fn a_job_held_on_slow_gpus_counts_less_service_and_goes_first() {
        // Two 1-GPU fast-v100 jobs (toy table: K80 0.2 of its V100 speed). Job 0 runs on the
        // V100, job 1 on the K80, both 4000 s: 4000 GPU-s each, queue 1 for Tiresias (over
        // 3250). Normalised: job 0 4000 GPU-s (queue 1), job 1 4000 x 0.2 = 800 (queue 0).
        // Both preempted: Tiresias keeps submit order [0, 1], het-las puts job 1 first.
        let spec = load_cluster("1x1:K80+1x1:V100").expect("shape");
        let jobs = vec![
            typed_job(0, 1, Some("fast-v100")),
            typed_job(1, 1, Some("fast-v100")),
        ];
        let mut w = World::new(jobs.clone(), spec.clone());
        let view = Arc::new(ThroughputView::new(toy_table(), &jobs, Arc::new(spec)));
        let config = TiresiasConfig::default();
        let mut het = HetLas::new(&config).expect("valid config");
        let mut tiresias = Tiresias::new(&config).expect("valid config");
        start_on(&mut w, 0, "V100", 0);
        start_on(&mut w, 1, "K80", 0);
        // A decision while both run (nothing pending): het-las sees where they run.
        assert!(order(&mut het, &w, Some(&view), 4000).is_empty());
        stop(&mut w, 0, 4000);
        stop(&mut w, 1, 4000);
        assert_eq!(order(&mut het, &w, Some(&view), 4001), [1, 0]);
        assert_eq!(order(&mut tiresias, &w, Some(&view), 4001), [0, 1]);
        assert_eq!(het.served[&JobId(1)].normalised, 800.0 * GPU_S as f64);
        // Without a table, het-las is Tiresias.
        let mut plain = HetLas::new(&config).expect("valid config");
        assert_eq!(order(&mut plain, &w, None, 4001), [0, 1]);
    }
}
