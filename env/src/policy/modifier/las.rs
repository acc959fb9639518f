//! `las-preempt`: Tiresias' least-attained-service preemption (Gu et al., NSDI '19), in its
//! discretised form: jobs fall into service queues, and a waiting job preempts running jobs of
//! a strictly higher (more served) queue.
//!
//! Needs `tick_s > 0` in the simulation config: service grows while jobs run, and without the
//! periodic tick the policy is only asked again at arrivals and completions.
//!
//! The rule, on every call:
//!
//! - Attained service is GPU-time, as Tiresias counts it: GPUs x wall time run, over every run
//!   so far (a CPU-only job counts as one GPU). The queues are the `tiresias` ordering's
//!   ([`TiresiasConfig`]: by default below 3,250 GPU-seconds, below 7,200, beyond), so the
//!   ordering and the preemption agree on who is least served. The queue boundary is the
//!   anti-thrashing margin: a job never preempts one in its own queue, so a job that was
//!   preempted can only come back by preempting a more-served queue, and service only grows.
//! - The jobs the pass left unplaced are taken least-served queue first (ties in the
//!   ordering's order). A job that fits without preempting is left alone (starting it would
//!   jump the queue).
//! - Its candidates are running jobs that are `preemptible`, in a strictly higher queue, and
//!   of no more important QoS class (a best-effort job never preempts a guaranteed one);
//!   most-served first. They are released in that order until the job fits (the policy's
//!   placer decides); those are preempted and the job placed in the same decision. If it does
//!   not fit even with every candidate released, nobody is preempted for it.

use super::super::Decision;
use super::super::context::DecisionContext;
use super::super::heuristic::{Modifier, Placer};
use super::super::planner::Planner;
use super::{VictimPools, placed, preempt_and_place, prefix_victims};
use crate::policy::order::{TiresiasConfig, tiresias_queue};
use crate::units::{GPU_MILLI, JobId};

/// Tiresias-style LAS preemption; see the module docs for the rule.
#[derive(Debug, Clone)]
pub struct LasPreempt {
    /// Queue boundaries, milli-GPU x ms, increasing.
    thresholds: Vec<u128>,
}

impl LasPreempt {
    /// LAS preemption over `config`'s queues (checked).
    pub fn new(config: &TiresiasConfig) -> Result<Self, String> {
        Ok(LasPreempt {
            thresholds: config.thresholds_milli_ms()?,
        })
    }

    /// The service queue of a job that attained `service` milli-GPU x ms (0 = least served).
    pub fn queue(&self, service: u128) -> usize {
        tiresias_queue(service, &self.thresholds)
    }

    /// The service queue `job` is in now.
    pub fn queue_of(&self, ctx: &DecisionContext<'_>, job: JobId) -> usize {
        self.queue(service(ctx, job))
    }

    /// The victims this rule would preempt for the waiting `job` alone, on the planner's
    /// cluster as it stands: running preemptible jobs (not excluded by `pools`) of a strictly
    /// more served queue and no more important QoS, most served first, the shortest prefix of
    /// them that lets `job` fit with `placer`. `None` when the job fits without preempting or
    /// no prefix lets it fit. Nothing changes on the planner.
    pub fn victims_for(
        &self,
        ctx: &DecisionContext<'_>,
        planner: &mut Planner<'_>,
        placer: &mut dyn Placer,
        job: &crate::job::JobSpec,
        pools: &mut VictimPools,
    ) -> Option<Vec<JobId>> {
        let q = self.queue_of(ctx, job.id);
        let running = pools
            .las
            .get_or_insert_with(|| running_by_service(ctx, planner, &pools.exclude));
        self.victims_among(ctx, planner, placer, job, q, running)
    }

    /// The shortest prefix of `running` (most served first) of a queue above `q` and no more
    /// important QoS whose release lets `job` fit; `None` if it fits already or none does.
    fn victims_among(
        &self,
        ctx: &DecisionContext<'_>,
        planner: &mut Planner<'_>,
        placer: &mut dyn Placer,
        job: &crate::job::JobSpec,
        q: usize,
        running: &[(u128, JobId)],
    ) -> Option<Vec<JobId>> {
        let victims: Vec<JobId> = running
            .iter()
            .filter(|(s, v)| self.queue(*s) > q && ctx.job(*v).qos >= job.qos)
            .map(|(_, v)| *v)
            .collect();
        prefix_victims(planner, placer, job, victims)
    }
}

/// Preemptible running jobs not in `exclude`, with their service, most served first (ties:
/// the later job first).
fn running_by_service(
    ctx: &DecisionContext<'_>,
    planner: &Planner<'_>,
    exclude: &[JobId],
) -> Vec<(u128, JobId)> {
    running_served(ctx, planner, exclude, |_| true)
}

/// `running_by_service`, only the jobs whose service passes `keep`: the same order.
fn running_served(
    ctx: &DecisionContext<'_>,
    planner: &Planner<'_>,
    exclude: &[JobId],
    keep: impl Fn(u128) -> bool,
) -> Vec<(u128, JobId)> {
    let mut running: Vec<(u128, JobId)> = planner
        .state()
        .running()
        .filter(|a| a.preemptible && !exclude.contains(&a.job))
        .map(|a| (service(ctx, a.job), a.job))
        .filter(|(s, _)| keep(*s))
        .collect();
    // Keys are distinct (job ids are), so an unstable sort gives the one order.
    running.sort_unstable_by(|a, b| b.cmp(a));
    running
}

/// A job's attained service so far, current run included, milli-GPU x ms.
fn service(ctx: &DecisionContext<'_>, job: JobId) -> u128 {
    let r = ctx.runtime(job);
    let current = u128::from(r.run_start.map_or(0, |s| ctx.now().saturating_sub(s).ms()));
    match ctx.job(job).gpu_milli_total() {
        // A CPU-only job counts as one GPU.
        0 => (u128::from(r.attained_ms) + current) * u128::from(GPU_MILLI),
        gpu_milli => r.attained_gpu_milli_ms + current * u128::from(gpu_milli),
    }
}

impl Modifier for LasPreempt {
    fn name(&self) -> &str {
        "las-preempt"
    }

    fn extend(
        &mut self,
        ctx: &DecisionContext<'_>,
        planner: &mut Planner<'_>,
        placer: &mut dyn Placer,
        rest: &[JobId],
        decision: &mut Decision,
    ) {
        let mut waiting: Vec<(usize, JobId)> = rest
            .iter()
            .filter(|id| !placed(decision, **id))
            .map(|id| (self.queue(service(ctx, *id)), *id))
            .collect();
        waiting.sort_by_key(|(q, _)| *q);
        // A job preempts only a strictly more served queue, so a running job no more served
        // than the least served waiting job's queue is nobody's victim: leave it unranked
        // (most of a busy cluster, on a call where few jobs wait).
        let Some(least) = waiting.first().map(|(q, _)| *q) else {
            return;
        };
        let mut running = running_served(ctx, planner, &decision.preemptions, |s| {
            self.queue(s) > least
        });
        let Some(top) = running.first().map(|(s, _)| self.queue(*s)) else {
            return;
        };
        for (q, id) in waiting {
            if q >= top {
                break;
            }
            let job = ctx.job(id);
            let Some(victims) = self.victims_among(ctx, planner, placer, job, q, &running) else {
                continue;
            };
            if preempt_and_place(planner, placer, job, &victims, decision) {
                running.retain(|(_, v)| !victims.contains(v));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::World;
    use super::*;
    use crate::job::Qos;

    /// LAS over queues split at 1 and 10 GPU-hours (the tests' worlds are built on these).
    fn las() -> LasPreempt {
        let config = TiresiasConfig {
            thresholds_gpu_s: vec![3_600.0, 36_000.0],
            ..TiresiasConfig::default()
        };
        LasPreempt::new(&config).unwrap()
    }

    #[test]
    fn queues_split_at_the_configured_thresholds() {
        let gpu_h = |h: u128| h * 3_600_000 * 1000;
        let l = las();
        assert_eq!(l.queue(0), 0);
        assert_eq!(l.queue(gpu_h(1) - 1), 0);
        assert_eq!(l.queue(gpu_h(1)), 1);
        assert_eq!(l.queue(gpu_h(10)), 2);
        assert_eq!(l.queue(gpu_h(1000)), 2);
        // The defaults are the tiresias ordering's: 3,250 and 7,200 GPU-seconds.
        let d = LasPreempt::new(&TiresiasConfig::default()).unwrap();
        assert_eq!(
            (d.queue(3_249 * 1_000_000), d.queue(3_250 * 1_000_000)),
            (0, 1)
        );
        assert!(
            LasPreempt::new(&TiresiasConfig {
                thresholds_gpu_s: vec![5.0, 1.0],
                ..TiresiasConfig::default()
            })
            .is_err()
        );
    }

    /// One node of 4 GPUs, now = 100 000 s. Running: r1 (1 GPU, 20 h: 20 GPU-h, queue 2),
    /// r2 (2 GPUs, 2.5 h: 5 GPU-h, queue 1), r3 (1 GPU, 0.5 h: queue 0). The node is full.
    fn world() -> (World, [JobId; 3]) {
        let mut w = World::new(1, 4, 100_000);
        let r1 = w.run("r1", 0, 1, 72_000);
        let r2 = w.run("r2", 0, 2, 9_000);
        let r3 = w.run("r3", 0, 1, 1_800);
        (w, [r1, r2, r3])
    }

    fn preempted(w: &World, x: JobId) -> Vec<&str> {
        let d = w.extend(&mut las(), &[x]);
        if !d.preemptions.is_empty() {
            assert!(
                d.placements.iter().any(|p| p.job == x),
                "placed after preempting"
            );
        }
        d.preemptions
            .iter()
            .map(|v| w.jobs[v.index()].name.as_str())
            .collect()
    }

    #[test]
    fn a_fresh_job_preempts_the_most_served() {
        let (mut w, _) = world();
        let x = w.pending("x", 1, 1);
        assert_eq!(preempted(&w, x), vec!["r1"]);
    }

    #[test]
    fn victims_go_most_served_first_until_the_job_fits() {
        // 2 GPUs: r1 frees 1 (no), then r2 frees 2 more (fits). r3 (queue 0) is never a
        // candidate for a queue-0 job.
        let (mut w, _) = world();
        let x = w.pending("x", 1, 2);
        assert_eq!(preempted(&w, x), vec!["r1", "r2"]);
        // 4 GPUs would need r3 too, which is in the job's own queue: nobody is preempted.
        let (mut w, _) = world();
        let x = w.pending("x", 1, 4);
        assert!(preempted(&w, x).is_empty());
    }

    #[test]
    fn queue_boundaries_class_and_preemptibility_are_respected() {
        // A job with 2 GPU-h attained (queue 1) may preempt only queue 2: r1.
        let (mut w, _) = world();
        let x = w.pending("x", 1, 1);
        w.runtime[x.index()].attained_gpu_milli_ms = 2 * 3_600_000 * 1000;
        w.runtime[x.index()].attained_ms = 2 * 3_600_000;
        assert_eq!(preempted(&w, x), vec!["r1"]);
        // With 15 GPU-h (queue 2, like r1) it preempts nobody.
        w.runtime[x.index()].attained_gpu_milli_ms = 15 * 3_600_000 * 1000;
        assert!(preempted(&w, x).is_empty());
        // r1 not preemptible: the next most served, r2, goes.
        let (mut w, [r1, _, _]) = world();
        w.jobs[r1.index()].preemptible = false;
        let x = w.pending("x", 1, 1);
        assert_eq!(preempted(&w, x), vec!["r2"]);
        // r1 guaranteed, the job (like r2) latency-sensitive: r1 is spared, r2 goes.
        let (mut w, [r1, _, _]) = world();
        w.jobs[r1.index()].qos = Qos::Guaranteed;
        let x = w.pending("x", 1, 1);
        assert_eq!(preempted(&w, x), vec!["r2"]);
        // A best-effort job preempts neither (both more important than it).
        w.jobs[x.index()].qos = Qos::BestEffort;
        assert!(preempted(&w, x).is_empty());
    }
}
