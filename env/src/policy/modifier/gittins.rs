//! `gittins-preempt`: preemption by the Gittins index (`order/gittins.rs`): a waiting job
//! preempts running jobs whose index per GPU, at the service they have attained so far, is
//! below its own by more than the configured margin.
//!
//! Where run times have a decreasing hazard a running job's index falls as it runs, so fresh
//! jobs overtake long-running ones (as `las-preempt` does, with thresholds that come from the
//! data instead of fixed GPU-seconds); where the hazard increases a running job's index rises
//! and it is never preempted (as FIFO or SJF would leave it). The rule, on every call:
//!
//! - The jobs the pass left unplaced are taken highest index first. A job that fits without
//!   preempting is left alone (starting it would jump the ordering's queue).
//! - Its candidates are running jobs that are `preemptible`, of no more important QoS class,
//!   and whose index times `1 + preempt_margin` is below the waiting job's; lowest index
//!   first. They are released in that order until the job fits (the policy's placer decides);
//!   those are preempted and the job placed in the same decision. If it does not fit even with
//!   every candidate released, nobody is preempted for it.
//! - The indices come from the same online estimator as the ordering's (finished jobs' observed
//!   run times, never a true duration). Before any job has finished every index is 0 and
//!   nobody is preempted.
//!
//! Needs `tick_s > 0` in the simulation config, as `las-preempt` does: indices change while
//! jobs run.

use super::super::Decision;
use super::super::context::DecisionContext;
use super::super::heuristic::{Modifier, Placer};
use super::super::planner::Planner;
use super::{VictimPools, placed, preempt_and_place, prefix_victims};
use crate::policy::order::{GittinsConfig, GittinsEstimator, Score};
use crate::units::JobId;

/// Gittins-index preemption; see the module docs for the rule.
#[derive(Debug, Clone)]
pub struct GittinsPreempt {
    estimator: GittinsEstimator,
    margin: f64,
}

impl GittinsPreempt {
    pub fn new(config: &GittinsConfig) -> Result<Self, String> {
        config.validate()?;
        Ok(GittinsPreempt {
            estimator: GittinsEstimator::new(config),
            margin: config.preempt_margin,
        })
    }

    /// The estimator its indices come from.
    pub fn estimator(&self) -> &GittinsEstimator {
        &self.estimator
    }
}

impl GittinsPreempt {
    /// Learns from the jobs finished since the previous call (the modifier does it itself).
    pub fn observe(&mut self, ctx: &DecisionContext<'_>) {
        self.estimator.observe(ctx);
    }

    /// The victims this rule would preempt for the waiting `job` alone, on the planner's
    /// cluster as it stands (running jobs excluded by `pools` left out): the shortest prefix,
    /// lowest index first, of the running jobs it may preempt that lets `job` fit with
    /// `placer`. `None` when it fits without preempting or no prefix lets it fit. Nothing
    /// changes on the planner. Call `observe` first, once per decision.
    pub fn victims_for(
        &self,
        ctx: &DecisionContext<'_>,
        planner: &mut Planner<'_>,
        placer: &mut dyn Placer,
        job: &crate::job::JobSpec,
        pools: &mut VictimPools,
    ) -> Option<Vec<JobId>> {
        if self.estimator.samples() == 0 {
            return None;
        }
        let priority = self.estimator.priority(job, ctx.attained_ms(job.id));
        let running = pools.gittins.get_or_insert_with(|| {
            running_by_index(&self.estimator, ctx, planner, &pools.exclude, |_| true)
        });
        self.victims_among(ctx, planner, placer, job, priority, running)
    }

    /// The shortest prefix of `running` (lowest index first) of jobs this rule lets a job of
    /// index `priority` preempt whose release lets `job` fit; `None` if it fits already or
    /// none does.
    fn victims_among(
        &self,
        ctx: &DecisionContext<'_>,
        planner: &mut Planner<'_>,
        placer: &mut dyn Placer,
        job: &crate::job::JobSpec,
        priority: f64,
        running: &[(Score, JobId)],
    ) -> Option<Vec<JobId>> {
        let threshold = 1.0 + self.margin;
        let victims: Vec<JobId> = running
            .iter()
            .take_while(|(r, _)| r.0 * threshold < priority)
            .filter(|(_, v)| ctx.job(*v).qos >= job.qos)
            .map(|(_, v)| *v)
            .collect();
        prefix_victims(planner, placer, job, victims)
    }
}

/// Preemptible running jobs not in `exclude` whose index per GPU passes `keep`, with it,
/// lowest first (distinct ids make the order total).
fn running_by_index(
    e: &GittinsEstimator,
    ctx: &DecisionContext<'_>,
    planner: &Planner<'_>,
    exclude: &[JobId],
    keep: impl Fn(f64) -> bool,
) -> Vec<(Score, JobId)> {
    let mut running: Vec<(Score, JobId)> = planner
        .state()
        .running()
        .filter(|a| a.preemptible && !exclude.contains(&a.job))
        .map(|a| {
            (
                Score(e.priority(ctx.job(a.job), ctx.attained_ms(a.job))),
                a.job,
            )
        })
        .filter(|(s, _)| keep(s.0))
        .collect();
    running.sort_unstable();
    running
}

impl Modifier for GittinsPreempt {
    fn name(&self) -> &str {
        "gittins-preempt"
    }

    fn extend(
        &mut self,
        ctx: &DecisionContext<'_>,
        planner: &mut Planner<'_>,
        placer: &mut dyn Placer,
        rest: &[JobId],
        decision: &mut Decision,
    ) {
        self.estimator.observe(ctx);
        if self.estimator.samples() == 0 {
            return;
        }
        let e = &self.estimator;
        let mut waiting: Vec<(Score, JobId)> = rest
            .iter()
            .filter(|id| !placed(decision, **id))
            .map(|id| (Score(-e.priority(ctx.job(*id), ctx.attained_ms(*id))), *id))
            .collect();
        // Highest index first; ties keep the pass's order (a stable sort).
        waiting.sort_by_key(|(s, _)| *s);
        let Some(best) = waiting.first().map(|(s, _)| -s.0) else {
            return;
        };
        // Only jobs some waiting job could preempt are ranked.
        let threshold = 1.0 + self.margin;
        let mut running = running_by_index(e, ctx, planner, &decision.preemptions, |s| {
            s * threshold < best
        });
        for (s, id) in waiting {
            let job = ctx.job(id);
            let Some(victims) = self.victims_among(ctx, planner, placer, job, -s.0, &running)
            else {
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

    const HOUR_S: u64 = 3600;

    /// One node of 4 GPUs at 100 h, full: r1 (1 GPU, ran 20 h), r2 (2 GPUs, 2 h), r3 (1 GPU,
    /// 0.5 h). `history_h`: run times (hours) of finished 1-GPU jobs the modifier learned from.
    fn world(history_h: &[f64]) -> (World, GittinsPreempt, [JobId; 3]) {
        let mut w = World::new(1, 4, 100 * HOUR_S);
        let r1 = w.run("r1", 0, 1, 20 * HOUR_S);
        let r2 = w.run("r2", 0, 2, 2 * HOUR_S);
        let r3 = w.run("r3", 0, 1, HOUR_S / 2);
        let mut g = GittinsPreempt::new(&GittinsConfig {
            min_class_samples: 1_000,
            ..GittinsConfig::default()
        })
        .unwrap();
        for h in history_h {
            g.estimator
                .record(&w.jobs[r1.index()], (h * 3_600_000.0) as u64);
        }
        (w, g, [r1, r2, r3])
    }

    fn preempted(w: &World, g: &mut GittinsPreempt, x: JobId) -> Vec<String> {
        let d = w.extend(g, &[x]);
        if !d.preemptions.is_empty() {
            assert!(d.placements.iter().any(|p| p.job == x));
        }
        d.preemptions
            .iter()
            .map(|v| w.jobs[v.index()].name.clone())
            .collect()
    }

    /// Heavy-tailed history: most jobs short, a few very long. Every run time up to 100 h.
    fn heavy() -> Vec<f64> {
        let mut h = vec![0.1; 60];
        h.extend([0.2; 20]);
        h.extend([1.0; 10]);
        h.extend([10.0; 6]);
        h.extend([100.0; 4]);
        h
    }

    #[test]
    fn heavy_tails_preempt_the_longest_served_like_las() {
        // A fresh job's index (most jobs finish within 0.1 h) dwarfs r1's at 20 h.
        let (mut w, mut g, _) = world(&heavy());
        let x = w.pending("x", 1, 1);
        assert_eq!(preempted(&w, &mut g, x), ["r1"]);
        // A 2-GPU job: r1 then r3 (lowest per-GPU index first; r3 at 0.5 h is past most
        // of the mass too) before r2... the shortest prefix that frees 2 GPUs.
        let (mut w, mut g, [_, r2, r3]) = world(&heavy());
        let x = w.pending("x", 1, 2);
        let got = preempted(&w, &mut g, x);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0], "r1");
        let e = g.estimator();
        let at = |j: JobId| e.priority(&w.jobs[j.index()], w.attained(j));
        // The second victim is the lower-indexed of r2 and r3 per GPU.
        let second = if at(r2) < at(r3) { "r2" } else { "r3" };
        assert_eq!(got[1], second);
    }

    #[test]
    fn similar_run_times_never_preempt() {
        // Every job runs 21 to 24 h: a running job's index rises as it runs, so nothing that
        // runs is preempted for a fresh job of the same size as any of them (2 GPUs, like r2:
        // per GPU, r1 and r3 rank above it too).
        let hist: Vec<f64> = (0..40).map(|i| 21.0 + (i % 4) as f64).collect();
        let (mut w, mut g, _) = world(&hist);
        let x = w.pending("x", 1, 2);
        assert!(preempted(&w, &mut g, x).is_empty());
    }

    #[test]
    fn nothing_learned_nothing_preempted_and_classes_respected() {
        let (mut w, mut g, _) = world(&[]);
        let x = w.pending("x", 1, 1);
        assert!(preempted(&w, &mut g, x).is_empty());
        // r1 guaranteed, the job latency-sensitive: r1 is spared.
        let (mut w, mut g, [r1, _, _]) = world(&heavy());
        w.jobs[r1.index()].qos = Qos::Guaranteed;
        let x = w.pending("x", 1, 1);
        let got = preempted(&w, &mut g, x);
        assert!(
            !got.contains(&"r1".to_string()) && got.len() == 1,
            "{got:?}"
        );
        // Not preemptible: spared too.
        let (mut w, mut g, [r1, _, _]) = world(&heavy());
        w.jobs[r1.index()].preemptible = false;
        let x = w.pending("x", 1, 1);
        assert!(!preempted(&w, &mut g, x).contains(&"r1".to_string()));
    }
}
