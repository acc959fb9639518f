//! `easy`: EASY backfilling on runtime estimates (Lifka, "The ANL/IBM SP scheduling system",
//! JSSPP '95; Mu'alem & Feitelson, IEEE TPDS 2001).
//!
//! The first job the pass left unplaced (for a blocking ordering such as `fifo`, the blocked
//! head) gets a reservation; any later job that fits now may start if it cannot delay that
//! reservation. Rules, every one a choice:
//!
//! - A job's expected run time is its user estimate (`JobSpec::estimate`). Without one it is
//!   the mean observed run time (wall time run, `attained_ms`) of the jobs finished so far, or
//!   [`PRIOR_RUNTIME`] before any has finished. Never the true duration.
//! - A running job is expected to end at `run_start + expected run time` (a restarted job is
//!   assumed to start over: a late guess, which only makes the shadow time later), or now if
//!   that has passed (it overran its estimate and may end any moment). A job this decision
//!   already placed is expected to end at `now + expected run time`.
//! - Shadow time and reserved resources, for a cluster of many heterogeneous nodes: on the
//!   planner, release those jobs group by group in expected-end order and try the policy's own
//!   placer for the head after each group; the first end time at which it fits is the shadow
//!   time. The cluster as it would be then (every job ending by the shadow time released, the
//!   head placed) is kept as the *shadow state* (one copy of the cluster state per decision
//!   with a blocked head and someone behind it); the trial is then undone.
//! - A later job that fits now is backfilled if it is expected to end by the shadow time, or
//!   else if its placement (the same nodes and GPUs) also fits the shadow state, i.e. it does
//!   not use what the head is reserved, nor what earlier long backfills took there. It is then
//!   taken in the shadow state too. Jobs are tried in `rest` order.
//! - If the head fits nowhere even with every job released (a greedy placer's miss), nothing
//!   is backfilled.
//!
//! So, when estimates are upper bounds of run times, a backfilled job never delays the head
//! past its shadow time.

use super::super::context::DecisionContext;
use super::super::heuristic::{Modifier, Placer};
use super::super::planner::Planner;
use super::super::{Decision, Placement};
use super::placed;
use crate::cluster::ClusterState;
use crate::job::JobSpec;
use crate::units::{JobId, SimTime};
use std::cell::RefCell;

/// Run time assumed for a job without an estimate before any job has finished: one hour.
pub const PRIOR_RUNTIME: SimTime = SimTime::from_secs(3600);

/// EASY backfilling; see the module docs for the rules.
#[derive(Debug, Default)]
pub struct Easy {
    /// Sum of finished jobs' observed run times, ms.
    finished_ms: u128,
    finished: u64,
}

/// The head's reservation: when it can start, and the cluster as it would be then.
#[derive(Debug)]
pub(crate) struct Reservation {
    /// The shadow time: the earliest expected time the head fits.
    pub start: SimTime,
    /// The cluster at the shadow time with the head placed.
    pub shadow: ClusterState,
}

/// What frees resources at an expected time: a running job, or one placed by this decision.
#[derive(Debug, Clone, Copy)]
enum Release {
    Running(JobId),
    Placed(usize),
}

impl Easy {
    /// Folds the jobs that finished since the previous decision into the mean run time.
    fn observe(&mut self, ctx: &DecisionContext<'_>) {
        for id in ctx.recently_finished() {
            self.finished_ms += u128::from(ctx.runtime(*id).attained_ms);
            self.finished += 1;
        }
    }

    /// The run time this modifier expects of `job` (see the module docs).
    pub(crate) fn expected_runtime(&self, job: &JobSpec) -> SimTime {
        job.estimate.unwrap_or_else(|| match self.finished {
            0 => PRIOR_RUNTIME,
            n => SimTime((self.finished_ms / u128::from(n)) as u64),
        })
    }

    /// Expected ends of everything holding resources in `planner`, soonest first (ties by job
    /// id, so runs repeat).
    fn releases(
        &self,
        ctx: &DecisionContext<'_>,
        planner: &Planner<'_>,
        decision: &Decision,
    ) -> Vec<(SimTime, Release)> {
        let now = ctx.now();
        let mut out: Vec<(SimTime, JobId, Release)> = planner
            .state()
            .running()
            .filter(|a| !decision.preemptions.contains(&a.job))
            .map(|a| {
                let start = ctx.runtime(a.job).run_start.unwrap_or(now);
                let end = start.saturating_add(self.expected_runtime(ctx.job(a.job)));
                (end.max(now), a.job, Release::Running(a.job))
            })
            .collect();
        out.extend(decision.placements.iter().enumerate().map(|(i, p)| {
            let end = now.saturating_add(self.expected_runtime(ctx.job(p.job)));
            (end, p.job, Release::Placed(i))
        }));
        out.sort_by_key(|(end, job, _)| (*end, *job));
        out.into_iter().map(|(end, _, r)| (end, r)).collect()
    }

    /// The reservation of `head`: releases every group of same-time ends in turn until the
    /// placer fits the head, then undoes the trial. `None` if it never fits.
    pub(crate) fn reservation(
        &self,
        ctx: &DecisionContext<'_>,
        planner: &mut Planner<'_>,
        placer: &mut dyn Placer,
        head: JobId,
        decision: &Decision,
    ) -> Option<Reservation> {
        let releases = self.releases(ctx, planner, decision);
        let job = ctx.job(head);
        let mark = planner.mark();
        let mut found = None;
        let mut i = 0;
        while i < releases.len() {
            let end = releases[i].0;
            while let Some((_, r)) = releases.get(i).filter(|(e, _)| *e == end) {
                match *r {
                    Release::Running(id) => {
                        planner.free_running(id);
                    }
                    Release::Placed(k) => {
                        let p = &decision.placements[k];
                        planner.unreserve(ctx.job(p.job), &p.tasks);
                    }
                }
                i += 1;
            }
            if placer.place(planner, job).is_some() {
                found = Some(Reservation {
                    start: end,
                    shadow: planner.state().clone(),
                });
                break;
            }
        }
        planner.undo_to(mark);
        found
    }
}

impl Modifier for Easy {
    fn name(&self) -> &str {
        "easy"
    }

    fn extend(
        &mut self,
        ctx: &DecisionContext<'_>,
        planner: &mut Planner<'_>,
        placer: &mut dyn Placer,
        rest: &[JobId],
        decision: &mut Decision,
    ) {
        self.observe(ctx);
        let mut waiting = rest.iter().copied().filter(|id| !placed(decision, *id));
        let Some(head) = waiting.next() else {
            return;
        };
        let later: Vec<JobId> = waiting.collect();
        if later.is_empty() {
            return;
        }
        let Some(res) = self.reservation(ctx, planner, placer, head, decision) else {
            return;
        };
        let shadow_cell = RefCell::new(res.shadow);
        let mut shadow = Planner::new(shadow_cell.borrow_mut());
        for id in later {
            let job = ctx.job(id);
            let mark = planner.mark();
            let Some(tasks) = placer.place(planner, job) else {
                continue;
            };
            let ends = ctx.now().saturating_add(self.expected_runtime(job));
            if ends <= res.start || shadow.reserve(job, &tasks).is_ok() {
                decision.placements.push(Placement { job: id, tasks });
            } else {
                planner.undo_to(mark);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::FitStrategy;
    use crate::cluster::tests::uniform;
    use crate::job::tests::job;
    use crate::job::{TaskRequest, Trace};
    use crate::policy::{Composite, Fifo, Policy, StrategyPlacer};
    use crate::sim::{SimConfig, Simulator};
    use std::sync::Arc;

    fn est(mut j: JobSpec, estimate_s: u64) -> JobSpec {
        j.estimate = Some(SimTime::from_secs(estimate_s));
        j
    }

    fn fifo_easy() -> Composite {
        Composite::with_modifiers(
            Box::new(Fifo),
            Box::new(StrategyPlacer::new("first-fit", FitStrategy::FirstFit)),
            vec![Box::new(Easy::default())],
        )
    }

    /// First start of each job, by name order in the trace.
    fn starts(t: &Trace, gpus: u32) -> Vec<u64> {
        let mut p = fifo_easy();
        let r = Simulator::new(
            t,
            Arc::new(uniform(1, gpus, "V100", 64_000, 1 << 20)),
            &exact(),
        )
        .unwrap()
        .run(&mut p, &mut |_| {});
        assert_eq!(r.summary.rejected_decisions, 0);
        r.jobs
            .iter()
            .map(|j| j.first_start.unwrap().ms() / 1000)
            .collect()
    }

    /// Run times exactly the trace durations (no speed or locality factors).
    fn exact() -> SimConfig {
        SimConfig {
            gpu_speed: false,
            cross_node_penalty: 1.0,
            cross_rack_penalty: 1.0,
            ..SimConfig::default()
        }
    }

    #[test]
    fn backfills_a_short_job_and_refuses_a_long_one() {
        // One node of 4 GPUs. A: 2 GPUs, 0..100 s (estimate 100). H (head): 4 GPUs at 1 s,
        // blocked until A ends: shadow time 100, reserved all 4 GPUs.
        // S: 1 GPU at 2 s, estimate 50: ends by 52 <= 100, backfilled at 2.
        // L: 1 GPU at 3 s, estimate 500: would hold a GPU the head needs at 100; refused.
        // H starts at 100 (not delayed), L after H ends at 100 + 10 = 110.
        let t = Trace::new(
            "easy",
            vec![
                est(job("A", 0, TaskRequest::whole(2, 0, 0)), 100),
                est(job("H", 1, TaskRequest::whole(4, 0, 0)), 10),
                est(job("S", 2, TaskRequest::whole(1, 0, 0)), 50),
                est(job("L", 3, TaskRequest::whole(1, 0, 0)), 500),
            ],
            [100, 10, 50, 500].map(SimTime::from_secs).to_vec(),
            vec!["d".into()],
        )
        .unwrap();
        assert_eq!(starts(&t, 4), vec![0, 100, 2, 110]);
    }

    #[test]
    fn a_long_job_off_the_reserved_resources_is_backfilled() {
        // One node of 8 GPUs. A: 6 GPUs, 0..100. H: 4 GPUs at 1: shadow 100; at 100, 8 GPUs
        // free, the head takes 4 (first-fit: GPUs 0-3), leaving 4 extra. L: 2 GPUs at 2,
        // estimate 500: fits now on GPUs 6-7, which stay free of the head at 100: backfilled.
        // M: 2 GPUs at 3, estimate 500: nothing free now; starts after A at 100 with H.
        let t = Trace::new(
            "easy",
            vec![
                est(job("A", 0, TaskRequest::whole(6, 0, 0)), 100),
                est(job("H", 1, TaskRequest::whole(4, 0, 0)), 10),
                est(job("L", 2, TaskRequest::whole(2, 0, 0)), 500),
                est(job("M", 3, TaskRequest::whole(2, 0, 0)), 500),
            ],
            [100, 10, 500, 500].map(SimTime::from_secs).to_vec(),
            vec!["d".into()],
        )
        .unwrap();
        assert_eq!(starts(&t, 8), vec![0, 100, 2, 100]);
    }

    #[test]
    fn expected_runtime_falls_back_to_the_mean_of_finished_jobs() {
        let mut e = Easy::default();
        let j = job("x", 0, TaskRequest::whole(1, 0, 0));
        assert_eq!(e.expected_runtime(&j), PRIOR_RUNTIME);
        e.finished_ms = 300_000;
        e.finished = 3;
        assert_eq!(e.expected_runtime(&j), SimTime::from_secs(100));
        assert_eq!(
            e.expected_runtime(&est(j, 7)),
            SimTime::from_secs(7),
            "an estimate wins"
        );
    }

    mod props {
        use super::*;
        use crate::cluster::ClusterSpec;
        use crate::policy::{Decision, Placement};
        use proptest::prelude::*;
        use std::collections::HashMap;

        fn cluster_strategy() -> impl Strategy<Value = ClusterSpec> {
            prop::collection::vec((1u32..=8, prop::bool::ANY), 1..4).prop_map(|nodes| {
                let nodes: Vec<_> = nodes
                    .iter()
                    .map(|(gpus, t4)| (Some(u32::from(*t4)), *gpus, 64_000, 65_536))
                    .collect();
                crate::cluster::tests::v100_t4(&nodes, usize::MAX)
            })
        }

        /// Random queues: gangs of 1-2 whole-GPU tasks, some fractional, some T4-only; the
        /// estimate is the true duration.
        fn trace_strategy() -> impl Strategy<Value = Trace> {
            let shape = (0u64..60, 1u64..100, 1u32..=2, 1u32..=8, 0u32..4, 0u8..4);
            prop::collection::vec(shape, 2..25).prop_map(|jobs| {
                let (specs, durs): (Vec<_>, Vec<_>) = jobs
                    .into_iter()
                    .enumerate()
                    .map(|(i, (submit, dur, tasks, gpus, shape, t4))| {
                        let task = if shape == 0 {
                            TaskRequest {
                                gpus: 1,
                                gpu_milli: 500,
                                cpu_milli: 1000,
                                mem_mib: 1024,
                            }
                        } else {
                            TaskRequest::whole(gpus, 1000, 1024)
                        };
                        let mut j = est(job(&format!("j{i}"), submit, task), dur);
                        j.tasks = if shape == 0 { 1 } else { tasks };
                        if t4 == 0 {
                            j.gpu_types = vec!["T4".into()];
                        }
                        (j, SimTime::from_secs(dur))
                    })
                    .unzip();
                Trace::new("prop", specs, durs, vec!["d".into()]).unwrap()
            })
        }

        /// What `Composite` does before its modifiers, for `fifo`: place in submit order until
        /// one job does not fit; the rest are left.
        fn fifo_pass(
            ctx: &DecisionContext<'_>,
            planner: &mut Planner<'_>,
            placer: &mut dyn Placer,
        ) -> (Decision, Vec<JobId>) {
            let mut d = Decision::default();
            let ids: Vec<JobId> = ctx.pending().map(|p| p.spec.id).collect();
            for (i, id) in ids.iter().enumerate() {
                match placer.place(planner, ctx.job(*id)) {
                    Some(tasks) => d.placements.push(Placement { job: *id, tasks }),
                    None => return (d, ids[i..].to_vec()),
                }
            }
            (d, Vec::new())
        }

        proptest! {
            #![proptest_config(ProptestConfig {
                cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(96),
                ..ProptestConfig::default()
            })]

            /// With exact estimates, every job that was ever the blocked head starts no later
            /// than the shadow time computed when it was first blocked.
            #[test]
            fn easy_never_delays_the_heads_reservation(
                spec in cluster_strategy(), t in trace_strategy(),
            ) {
                let cfg = SimConfig { skip_unplaceable: true, ..exact() };
                let mut sim = match Simulator::new(&t, Arc::new(spec), &cfg) {
                    Err(crate::sim::SimError::EmptyTrace) => return Ok(()),
                    other => other.unwrap(),
                };
                let mut policy = fifo_easy();
                let mut placer = StrategyPlacer::new("first-fit", FitStrategy::FirstFit);
                let mut shadows: HashMap<JobId, SimTime> = HashMap::new();
                while sim.advance() {
                    {
                        let ctx = sim.context();
                        let mut planner = ctx.planner();
                        let (d, rest) = fifo_pass(&ctx, &mut planner, &mut placer);
                        if let Some(head) = rest.first() {
                            let res = Easy::default()
                                .reservation(&ctx, &mut planner, &mut placer, *head, &d)
                                .expect("every admitted job fits the emptied cluster");
                            shadows.entry(*head).or_insert(res.start);
                        }
                    }
                    let d = policy.decide(&sim.context()).unwrap();
                    sim.apply(&d);
                    sim.cluster().check_invariants().unwrap();
                }
                let r = sim.finish(policy.name(), 0.0);
                prop_assert_eq!(r.summary.finished, r.summary.jobs);
                prop_assert_eq!(r.summary.rejected_decisions, 0);
                let by_name: HashMap<&str, SimTime> = r
                    .jobs
                    .iter()
                    .map(|j| (j.name.as_str(), j.first_start.unwrap()))
                    .collect();
                for (head, shadow) in &shadows {
                    let start = by_name[t.job(*head).name.as_str()];
                    prop_assert!(
                        start <= *shadow,
                        "head {} started at {} after its shadow time {}",
                        t.job(*head).name, start, shadow
                    );
                }
            }
        }
    }
}
