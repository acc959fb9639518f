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
//! - A candidate is kept only if the preemption pays (`preempt_cost_factor > 0`): the expected
//!   gain in total completion time of serving the waiting job's Gittins quantum before the
//!   victim's, `S_w x S_v x (p_w - p_v)` with per-GPU indices `p` and quanta `S` in GPU-time,
//!   is at least the factor times what the preemption wastes, the victim's work since its
//!   last checkpoint and its restart overhead on its GPUs (`RestartCost::waste_ms`).
//! - The indices come from the same online estimator as the ordering's (finished jobs' observed
//!   run times, and with `censoring` the service of jobs still running or preempted as
//!   right-censored observations; never a true duration). Before any job has finished every
//!   index is 0 and nobody is preempted.
//!
//! Needs `tick_s > 0` in the simulation config, as `las-preempt` does: indices change while
//! jobs run.

use super::super::Decision;
use super::super::context::DecisionContext;
use super::super::heuristic::{Modifier, Placer};
use super::super::planner::Planner;
use super::{VictimPools, placed, preempt_and_place, prefix_victims};
use crate::policy::order::{GittinsConfig, GittinsEstimator, Score, processors};
use crate::units::JobId;

/// Gittins-index preemption; see the module docs for the rule.
#[derive(Debug, Clone)]
pub struct GittinsPreempt {
    estimator: GittinsEstimator,
    margin: f64,
    cost_factor: f64,
}

impl GittinsPreempt {
    pub fn new(config: &GittinsConfig) -> Result<Self, String> {
        config.validate()?;
        Ok(GittinsPreempt {
            estimator: GittinsEstimator::new(config),
            margin: config.preempt_margin,
            cost_factor: config.preempt_cost_factor,
        })
    }

    /// The estimator its indices come from.
    pub fn estimator(&self) -> &GittinsEstimator {
        &self.estimator
    }
}

impl GittinsPreempt {
    /// Learns from the jobs finished since the previous call and the running ones (the
    /// modifier does it itself). Borrows the context's cluster: no planner may be alive.
    pub fn observe(&mut self, ctx: &DecisionContext<'_>) {
        let cluster = ctx.cluster();
        self.estimator
            .observe(ctx, cluster.running().map(|a| a.job));
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
        // The waiting job's quantum in GPU-ms, computed once and only if a cost test runs.
        let mut served = None;
        let victims: Vec<JobId> = running
            .iter()
            .take_while(|(r, _)| r.0 * threshold < priority)
            .filter(|(_, v)| ctx.job(*v).qos >= job.qos)
            .filter(|(r, v)| {
                if self.cost_factor == 0.0 {
                    return true;
                }
                let served = *served.get_or_insert_with(|| {
                    let (_, quantum) = self
                        .estimator
                        .index_and_quantum(job, ctx.attained_ms(job.id));
                    quantum * processors(job) as f64
                });
                self.worth_preempting(ctx, priority, served, r.0, *v)
            })
            .map(|(_, v)| *v)
            .collect();
        prefix_victims(planner, placer, job, victims)
    }

    /// The cost test: whether serving a waiting job (index per GPU `priority`, per hour; its
    /// Gittins quantum `served`, in GPU-ms) before running `victim` (index per GPU
    /// `victim_priority`) gains more total completion time than `cost_factor` times the
    /// GPU-time the preemption wastes.
    ///
    /// The gain is the interchange argument behind the index: with per-GPU indices `p` and
    /// quanta `S` (expected GPU-ms of service until the job finishes or its quantum ends),
    /// serving the waiting job's quantum first rather than the victim's saves `S_w x S_v x
    /// (p_w - p_v)` in expectation (`p = P(finish in quantum) / S`). The waste is the victim's
    /// work since its last checkpoint and its restart overhead (`RestartCost::waste_ms`), on
    /// its GPUs.
    fn worth_preempting(
        &self,
        ctx: &DecisionContext<'_>,
        priority: f64,
        served: f64,
        victim_priority: f64,
        victim: JobId,
    ) -> bool {
        let spec = ctx.job(victim);
        let gpus = processors(spec) as f64;
        let (_, quantum) = self
            .estimator
            .index_and_quantum(spec, ctx.attained_ms(victim));
        let gain = served * quantum * gpus * (priority - victim_priority) / HOUR_MS;
        let waste = ctx.restart_cost().waste_ms(ctx.runtime(victim), ctx.now()) as f64 * gpus;
        gain >= self.cost_factor * waste
    }
}

/// Milliseconds in an hour: indices are per hour.
const HOUR_MS: f64 = 3_600_000.0;

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
        self.estimator
            .observe(ctx, planner.state().running().map(|a| a.job));
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
    use crate::units::SimTime;

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

    /// `n` run times (hours) at the midpoints of `n` equal-probability slices of the
    /// distribution whose quantile function (of u in (0, 1), hours) is `q`.
    fn quantiles(n: usize, q: impl Fn(f64) -> f64) -> Vec<f64> {
        (0..n).map(|i| q((i as f64 + 0.5) / n as f64)).collect()
    }

    /// One node of 4 GPUs at 100 h, full of 1-GPU jobs that have run 20 h, 10 h, 2 h and
    /// 0.5 h; `history_h` learned; a fresh 1-GPU job waits. Whom `gittins-preempt` preempts.
    fn preempted_for_a_fresh_job(history_h: &[f64], config: &GittinsConfig) -> Vec<String> {
        let mut w = World::new(1, 4, 100 * HOUR_S);
        let r = w.run("r20", 0, 1, 20 * HOUR_S);
        w.run("r10", 0, 1, 10 * HOUR_S);
        w.run("r2", 0, 1, 2 * HOUR_S);
        w.run("r0.5", 0, 1, HOUR_S / 2);
        let mut g = GittinsPreempt::new(config).unwrap();
        for h in history_h {
            g.estimator
                .record(&w.jobs[r.index()], (h * 3_600_000.0) as u64);
        }
        let x = w.pending("x", 1, 1);
        preempted(&w, &mut g, x)
    }

    #[test]
    fn increasing_hazards_never_preempt() {
        // Deterministic (every job 24 h), uniform on [0, 24 h] and Weibull of shape 2 (hazard
        // rising linearly, scale 12 h): a running job's index only rises as it runs, so none
        // of the running jobs (all inside the support) is preempted for a fresh one, with or
        // without censoring and the cost test.
        let weibull = quantiles(400, |u| 12.0 * (-(1.0 - u).ln()).sqrt());
        for (name, history) in [
            ("deterministic", vec![24.0; 50]),
            ("uniform", quantiles(400, |u| 24.0 * u)),
            ("weibull-2", weibull),
        ] {
            for config in [GittinsConfig::default(), GittinsConfig::schema7()] {
                let got = preempted_for_a_fresh_job(&history, &config);
                assert!(got.is_empty(), "{name} {config:?}: {got:?}");
            }
        }
    }

    #[test]
    fn pareto_preempts_the_most_served_first_like_las() {
        // Pareto of shape 1.2, scale 0.1 h (decreasing hazard 1.2 / a): the fresh job's index
        // is far above every running job's, the lowest being the most served: r20 goes.
        let pareto = quantiles(20_000, |u| 0.1 * (1.0 - u).powf(-1.0 / 1.2));
        assert_eq!(
            preempted_for_a_fresh_job(&pareto, &GittinsConfig::default()),
            ["r20"]
        );
    }

    #[test]
    fn a_preemption_that_wastes_more_than_it_gains_is_not_made() {
        // heavy(): 60% of jobs run 0.1 h, 20% 0.2 h, 10% 1 h, 6% 10 h, 4% 100 h. A fresh
        // 1-GPU job's index is 6 per hour (0.6 finish within the first 0.1 h, which costs
        // 0.1 h of service in expectation): quantum 0.1 GPU-h. r1 has run 20 h: only the
        // 100 h runs lie above, index 1/80 per hour, quantum 80 h. Expected gain of serving
        // the fresh job first: 0.1 x 80 x (6 - 1/80) = 47.9 GPU-h. Waste: where r1
        // checkpoints every 30 min (it ran exactly 40 of them) the 60 s restart, 0.017 h;
        // where nothing checkpoints it starts over: 20 h + 60 s = 20.017 h.
        for (checkpoint, cost_factor, want) in [
            (Some(1800), 3.0, vec!["r1"]),
            (None, 2.0, vec!["r1"]), // 40.03 < 47.9
            (None, 3.0, vec![]),     // 60.05 > 47.9: spared
            (None, 0.0, vec!["r1"]), // no cost test
        ] {
            let (mut w, _, _) = world(&[]);
            w.restart.checkpoint = checkpoint.map(SimTime::from_secs);
            let mut g = GittinsPreempt::new(&GittinsConfig {
                min_class_samples: 1_000,
                preempt_cost_factor: cost_factor,
                ..GittinsConfig::default()
            })
            .unwrap();
            for h in heavy() {
                g.estimator.record(&w.jobs[0], (h * 3_600_000.0) as u64);
            }
            let x = w.pending("x", 1, 1);
            let got = preempted(&w, &mut g, x);
            assert_eq!(
                got, want,
                "checkpoint {checkpoint:?}, cost factor {cost_factor}"
            );
        }
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
