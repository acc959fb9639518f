//! Simulator tests: hand-computed scenarios, then properties over random worlds.

use super::*;
use crate::cluster::tests::uniform;
use crate::cluster::{ClusterSpec, TaskPlacement};
use crate::job::tests::job;
use crate::job::{JobSpec, TaskRequest, Trace};
use crate::policy::{Decision, DecisionContext, Placement, Policy, PolicyError, build_policy};
use crate::units::{JobId, NodeId, SimTime};
use std::sync::Arc;

fn trace(jobs: Vec<(JobSpec, u64)>) -> Trace {
    let (specs, durs): (Vec<_>, Vec<_>) = jobs
        .into_iter()
        .map(|(j, d)| (j, SimTime::from_secs(d)))
        .unzip();
    Trace::new("test", specs, durs, vec!["default".into()]).unwrap()
}

fn run(t: &Trace, spec: ClusterSpec, policy: &str, cfg: &SimConfig) -> SimResult {
    let mut p = build_policy(policy, cfg.seed).unwrap();
    Simulator::new(t, Arc::new(spec), cfg)
        .unwrap()
        .run(p.as_mut(), &mut |_| {})
}

/// What a test policy that starts everything decides: the pending jobs `keep` accepts, in
/// queue order, each placed first fit where it fits beside those placed before it.
pub(super) fn place_first_fit(
    ctx: &DecisionContext<'_>,
    keep: impl Fn(&JobSpec) -> bool,
) -> Vec<Placement> {
    let mut planner = ctx.planner();
    let mut out = Vec::new();
    for p in ctx.pending().filter(|p| keep(p.spec)) {
        if let Some(tasks) = planner.place(p.spec, crate::cluster::FitStrategy::FirstFit) {
            out.push(Placement {
                job: p.spec.id,
                tasks,
            });
        }
    }
    out
}
#[test]
fn fifo_blocks_and_metrics_add_up() {
    // One node of 4 V100s (speed 1, idle 40 W, busy 300 W). A: 4 GPUs at t=0 for 100 s.
    // B: 1 GPU at t=10 for 50 s waits for A (strict FIFO) and runs 100..150.
    let t = trace(vec![
        (job("A", 0, TaskRequest::whole(4, 0, 0)), 100),
        (job("B", 10, TaskRequest::whole(1, 0, 0)), 50),
    ]);
    let r = run(
        &t,
        uniform(1, 4, "V100", 1000, 1000),
        "fifo/first-fit",
        &SimConfig::default(),
    );
    let s = &r.summary;
    assert_eq!((s.jobs, s.finished), (2, 2));
    // JCT A = 100, B = 150 - 10 = 140; mean 120. Wait A = 0, B = 90; mean 45.
    assert_eq!(s.avg_jct_s, 120.0);
    // Alone, A would take 100 s and B 50 s: no policy averages below 75 s; 37.5% of FIFO's
    // 120 s is B's wait.
    assert_eq!(s.min_avg_jct_s, 75.0);
    assert_eq!(s.avg_wait_s, 45.0);
    // bsld A = 1; B = 140 / 50 = 2.8; mean 1.9.
    assert!((s.avg_bsld - 1.9).abs() < 1e-12);
    assert_eq!(s.makespan_s, 150.0);
    // Allocated: 4000 milli for 100 s, then 1000 for 50 s, over 4000 x 150:
    // (400000 + 50000) / 600000 = 0.75.
    assert!((s.gpu_alloc_rate - 0.75).abs() < 1e-12);
    // Power 4 x 300 = 1200 W for 100 s, then 300 + 3 x 40 = 420 W for 50 s:
    // 141000 J = 141000 / 3.6e6 kWh.
    assert!((s.energy_kwh - 141_000.0 / 3.6e6).abs() < 1e-12);
    assert_eq!(s.rejected_decisions, 0);
    assert_eq!(r.jobs[1].first_start, Some(SimTime::from_secs(100)));
}

#[test]
fn gpu_speed_scales_run_time() {
    // 110 s of work at speed 1 on an A100 (speed 2.2) takes 50 s; with speeds off, 110 s.
    let t = trace(vec![(job("A", 0, TaskRequest::whole(1, 0, 0)), 110)]);
    let r = run(
        &t,
        uniform(1, 8, "A100", 1000, 1000),
        "fifo/best-fit",
        &SimConfig::default(),
    );
    assert_eq!(r.summary.avg_jct_s, 50.0);
    assert_eq!(r.summary.min_avg_jct_s, 50.0);
    let off = SimConfig {
        gpu_speed: false,
        ..SimConfig::default()
    };
    let slow = run(&t, uniform(1, 8, "A100", 1000, 1000), "fifo/best-fit", &off).summary;
    assert_eq!((slow.avg_jct_s, slow.min_avg_jct_s), (110.0, 110.0));
}

#[test]
fn the_jct_bound_assumes_the_fastest_gpus() {
    // A V100 node (speed 1) and an A100 node (2.2). First-fit puts A on the V100, where its
    // 110 s of work take 110 s; alone on the A100 it would have taken 50 s, the bound.
    let spec = crate::cluster::load_cluster("1x8:V100+1x8:A100").unwrap();
    assert_eq!(spec.node_model(NodeId(0)).unwrap().name, "V100");
    let t = trace(vec![(job("A", 0, TaskRequest::whole(1, 0, 0)), 110)]);
    let s = run(&t, spec, "fifo/first-fit", &SimConfig::default()).summary;
    assert_eq!((s.avg_jct_s, s.min_avg_jct_s), (110.0, 50.0));
}

#[test]
fn spread_gangs_pay_the_locality_penalty() {
    // 2 nodes x 4 GPUs in one rack, worst-fit: x (2 GPUs) goes to the emptiest node n1 (ties to
    // the higher id), y (2 GPUs) to n0. The gang of 2 tasks x 2 GPUs then has 2 free GPUs on
    // each node and spans both, where 1 node of 4 GPUs would do: 100 s x 1.1 = 110 s.
    let mut g = job("G", 1, TaskRequest::whole(2, 0, 0));
    g.tasks = 2;
    let t = trace(vec![
        (job("x", 0, TaskRequest::whole(2, 0, 0)), 1000),
        (job("y", 0, TaskRequest::whole(2, 0, 0)), 1000),
        (g, 100),
    ]);
    let r = run(
        &t,
        uniform(2, 4, "V100", 1000, 1000),
        "fifo/worst-fit",
        &SimConfig::default(),
    );
    let gang = r.jobs.iter().find(|j| j.name == "G").unwrap();
    assert_eq!(gang.nodes, "n1;n0");
    assert_eq!(gang.jct(), Some(SimTime::from_secs(110)));
    // Penalties off: 100 s.
    let cfg = SimConfig {
        cross_node_penalty: 1.0,
        ..SimConfig::default()
    };
    let r = run(
        &t,
        uniform(2, 4, "V100", 1000, 1000),
        "fifo/worst-fit",
        &cfg,
    );
    assert_eq!(r.jobs[2].jct(), Some(SimTime::from_secs(100)));
}

/// Preempts job 0 at the first tick and puts it straight back on the same GPU.
struct PreemptOnce {
    done: bool,
}

impl Policy for PreemptOnce {
    fn name(&self) -> &str {
        "test/preempt-once"
    }
    fn decide(&mut self, ctx: &DecisionContext<'_>) -> Result<Decision, PolicyError> {
        let mut d = Decision::default();
        let a = JobId(0);
        let mut planner = ctx.planner();
        if !self.done && planner.state().is_running(a) && ctx.now() > SimTime::ZERO {
            self.done = true;
            d.preemptions.push(a);
            planner.free_running(a);
        }
        let on_gpu0 = vec![TaskPlacement {
            node: NodeId(0),
            gpus: vec![0],
        }];
        if ctx.pending().any(|p| p.spec.id == a) || !d.preemptions.is_empty() {
            planner
                .reserve(ctx.job(a), &on_gpu0)
                .expect("GPU 0 is free for A");
            d.placements.push(Placement {
                job: a,
                tasks: on_gpu0,
            });
        }
        d.placements.extend(first_fit(
            &mut planner,
            ctx.pending().filter(|p| p.spec.id != a),
        ));
        Ok(d)
    }
}

/// First-fit placements of `jobs` in turn, each reserved on the planner.
fn first_fit<'a>(
    planner: &mut crate::policy::Planner<'_>,
    jobs: impl Iterator<Item = crate::policy::PendingJob<'a>>,
) -> Vec<Placement> {
    jobs.filter_map(|p| {
        let tasks = planner.place(p.spec, crate::cluster::FitStrategy::FirstFit)?;
        Some(Placement {
            job: p.spec.id,
            tasks,
        })
    })
    .collect()
}

#[test]
fn preemption_resumes_from_the_last_checkpoint() {
    // A: 1 GPU, 100 s of work. Checkpoints every 30 s, restart costs 5 s, tick at 50 s.
    // A second job B keeps the queue non-empty so the tick asks the policy.
    // At 50 s A is preempted: 50 s done, checkpoint at 30 s, so 70 s remain and 20 s are lost.
    // Restarted at once: 5 s overhead + 70 s = ends at 125 s.
    let t = trace(vec![
        (job("A", 0, TaskRequest::whole(1, 0, 0)), 100),
        (job("B", 0, TaskRequest::whole(2, 0, 0)), 10),
    ]);
    let cfg = SimConfig {
        tick_s: 50.0,
        checkpoint_interval_s: 30.0,
        restart_overhead_s: 5.0,
        ..SimConfig::default()
    };
    let mut p = PreemptOnce { done: false };
    let r = Simulator::new(&t, Arc::new(uniform(1, 2, "V100", 1000, 1000)), &cfg)
        .unwrap()
        .run(&mut p, &mut |_| {});
    let a = &r.jobs[0];
    assert_eq!(a.finish, Some(SimTime::from_secs(125)));
    assert_eq!(a.preemptions, 1);
    assert_eq!(r.summary.preemptions, 1);
    assert!((r.summary.preemption_waste_gpu_h - 20.0 / 3600.0).abs() < 1e-12);
    // Without checkpoints the job starts over: 50 + 5 + 100 = 155 s.
    let cfg = SimConfig {
        checkpoint_interval_s: 0.0,
        ..cfg
    };
    let mut p = PreemptOnce { done: false };
    let r = Simulator::new(&t, Arc::new(uniform(1, 2, "V100", 1000, 1000)), &cfg)
        .unwrap()
        .run(&mut p, &mut |_| {});
    assert_eq!(r.jobs[0].finish, Some(SimTime::from_secs(155)));
}

/// Always proposes job 0 on GPU 0 of node 0, whatever its state.
struct Stubborn;

impl Policy for Stubborn {
    fn name(&self) -> &str {
        "test/stubborn"
    }
    fn decide(&mut self, ctx: &DecisionContext<'_>) -> Result<Decision, PolicyError> {
        let first = ctx.pending().next().map(|p| p.spec.id).unwrap_or(JobId(0));
        Ok(Decision {
            preemptions: vec![JobId(99)],
            placements: vec![Placement {
                job: first,
                tasks: vec![TaskPlacement {
                    node: NodeId(0),
                    gpus: vec![0],
                }],
            }],
            ..Decision::default()
        })
    }
}

#[test]
fn infeasible_decisions_are_counted_and_not_applied() {
    // A and B both want GPU 0 of the only node; B's placement while A runs is rejected, and so
    // is every preemption of the unknown job 99.
    let t = trace(vec![
        (job("A", 0, TaskRequest::whole(1, 0, 0)), 10),
        (job("B", 5, TaskRequest::whole(1, 0, 0)), 10),
    ]);
    let mut p = Stubborn;
    let sim = Simulator::new(
        &t,
        Arc::new(uniform(1, 2, "V100", 1000, 1000)),
        &SimConfig::default(),
    )
    .unwrap();
    let r = sim.run(&mut p, &mut |_| {});
    // Decisions at 0 (A placed), 5 (B rejected), 10 (B placed): 3 preemptions rejected + 1.
    assert_eq!(r.summary.decisions, 3);
    assert_eq!(r.summary.rejected_decisions, 4);
    assert_eq!(r.jobs[1].first_start, Some(SimTime::from_secs(10)));
}

#[test]
fn unplaceable_jobs_stop_the_run_unless_skipped() {
    let t = trace(vec![
        (job("ok", 0, TaskRequest::whole(1, 0, 0)), 10),
        (job("huge", 0, TaskRequest::whole(16, 0, 0)), 10),
    ]);
    let spec = Arc::new(uniform(2, 8, "V100", 1000, 1000));
    let err = Simulator::new(&t, spec.clone(), &SimConfig::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("1 job(s) can never fit") && err.contains("huge"),
        "{err}"
    );
    let cfg = SimConfig {
        skip_unplaceable: true,
        ..SimConfig::default()
    };
    let mut p = build_policy("fifo/best-fit", 0).unwrap();
    let r = Simulator::new(&t, spec, &cfg)
        .unwrap()
        .run(p.as_mut(), &mut |_| {});
    assert_eq!(
        (
            r.summary.jobs,
            r.summary.finished,
            r.summary.skipped_unplaceable
        ),
        (1, 1, 1)
    );
}

#[test]
fn warmup_jobs_run_but_are_not_measured() {
    let t = trace(vec![
        (job("early", 0, TaskRequest::whole(1, 0, 0)), 10),
        (job("late", 100, TaskRequest::whole(1, 0, 0)), 10),
    ]);
    let cfg = SimConfig {
        warmup_s: 50.0,
        ..SimConfig::default()
    };
    let r = run(
        &t,
        uniform(1, 1, "V100", 1000, 1000),
        "fifo/first-fit",
        &cfg,
    );
    assert_eq!((r.summary.jobs, r.summary.warmup_jobs), (1, 1));
    // Measured from 50 s to 110 s: the GPU is busy 10 of those 60 s.
    assert!((r.summary.gpu_alloc_rate - 10.0 / 60.0).abs() < 1e-12);
}

mod props {
    use super::*;
    use proptest::prelude::*;
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    /// Proposes random preemptions and placements, most of them nonsense, from a seed.
    struct Chaos {
        rng: StdRng,
    }

    impl Policy for Chaos {
        fn name(&self) -> &str {
            "test/chaos"
        }
        fn decide(&mut self, ctx: &DecisionContext<'_>) -> Result<Decision, PolicyError> {
            let mut d = Decision::default();
            let running: Vec<JobId> = ctx.cluster().running().map(|a| a.job).collect();
            if !running.is_empty() && self.rng.random_range(0..4) == 0 {
                d.preemptions
                    .push(running[self.rng.random_range(0..running.len())]);
            }
            let nodes = ctx.cluster().spec().nodes.len() as u32;
            for p in ctx.pending().take(3) {
                let tasks = (0..p.spec.tasks)
                    .map(|_| TaskPlacement {
                        node: NodeId(self.rng.random_range(0..nodes + 1)),
                        gpus: (0..p.spec.task.gpus)
                            .map(|_| self.rng.random_range(0..8u8))
                            .collect(),
                    })
                    .collect();
                d.placements.push(Placement {
                    job: p.spec.id,
                    tasks,
                });
            }
            // Sometimes also a sensible placement, so that the run makes progress.
            let first = ctx.pending().next();
            if let Some(p) = first
                && let Some(tasks) = ctx
                    .planner()
                    .place(p.spec, crate::cluster::FitStrategy::BestFit)
            {
                d.placements.push(Placement {
                    job: p.spec.id,
                    tasks,
                });
            }
            Ok(d)
        }
    }

    fn cluster_strategy() -> impl Strategy<Value = ClusterSpec> {
        prop::collection::vec((0u32..=8, 1u64..=4, prop::bool::ANY), 1..6).prop_map(|nodes| {
            let nodes: Vec<_> = nodes
                .iter()
                .map(|(gpus, cpu, t4)| {
                    let model = (*gpus > 0).then_some(u32::from(*t4));
                    (model, *gpus, cpu * 8000, 65_536)
                })
                .collect();
            crate::cluster::tests::v100_t4(&nodes, 2)
        })
    }

    fn trace_strategy() -> impl Strategy<Value = Trace> {
        let job = (
            0u64..200,
            0u64..120,
            1u32..=3,
            0u32..=4,
            1u32..=1000,
            0u64..=8000,
            prop::bool::ANY,
        );
        prop::collection::vec(job, 1..30).prop_map(|jobs| {
            let (specs, durs): (Vec<_>, Vec<_>) = jobs
                .into_iter()
                .enumerate()
                .map(|(i, (submit, dur, tasks, gpus, milli, cpu, t4_only))| {
                    let task = match gpus {
                        0 => TaskRequest::whole(0, cpu, 1024),
                        1 => TaskRequest {
                            gpus: 1,
                            gpu_milli: milli,
                            cpu_milli: cpu,
                            mem_mib: 1024,
                        },
                        g => TaskRequest::whole(g, cpu, 1024),
                    };
                    let mut j = super::job(&format!("j{i}"), submit, task);
                    j.tasks = tasks;
                    if t4_only {
                        j.gpu_types = vec!["T4".into()];
                    }
                    (j, SimTime::from_secs(dur))
                })
                .unzip();
            Trace::new("prop", specs, durs, vec!["default".into()]).unwrap()
        })
    }

    fn policy(which: u8, seed: u64) -> Box<dyn Policy> {
        match which {
            0 => build_policy("fifo/first-fit", seed).unwrap(),
            1 => build_policy("fifo/best-fit", seed).unwrap(),
            2 => build_policy("fifo/worst-fit", seed).unwrap(),
            _ => Box::new(Chaos {
                rng: StdRng::seed_from_u64(seed),
            }),
        }
    }

    /// Steps a run by hand, checking the invariants after every decision.
    /// `None` when no job of the trace fits the cluster at all (nothing to replay).
    fn checked_run(
        t: &Trace,
        spec: &ClusterSpec,
        which: u8,
        seed: u64,
        tick: f64,
    ) -> Option<SimResult> {
        let cfg = SimConfig {
            seed,
            skip_unplaceable: true,
            tick_s: tick,
            checkpoint_interval_s: 7.0,
            ..SimConfig::default()
        };
        let mut sim = match Simulator::new(t, Arc::new(spec.clone()), &cfg) {
            Err(SimError::EmptyTrace) => return None,
            other => other.unwrap(),
        };
        let mut p = policy(which, seed);
        let mut last = SimTime::ZERO;
        while sim.advance() {
            assert!(sim.now() >= last, "time went back");
            last = sim.now();
            let d = p.decide(&sim.context()).unwrap();
            sim.apply(&d);
            sim.cluster().check_invariants().unwrap();
        }
        Some(sim.finish(p.name(), 0.0))
    }

    proptest! {
        // 96 cases by default; PROPTEST_CASES=N for a longer search.
        #![proptest_config(ProptestConfig {
            cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(96),
            ..ProptestConfig::default()
        })]

        #[test]
        fn capacity_holds_every_job_ends_once_and_runs_repeat(
            spec in cluster_strategy(), t in trace_strategy(), which in 0u8..4, seed in 0u64..1000,
            tick in prop::sample::select(vec![0.0, 13.0]),
        ) {
            let Some(r) = checked_run(&t, &spec, which, seed, tick) else {
                return Ok(());
            };
            // Every admitted job finishes exactly once, after it started.
            prop_assert_eq!(r.summary.finished, r.summary.jobs);
            // No policy beats the bound, and a lone job meets it. It is zero only when every
            // finished job took no time at all (a trace may hold 0-duration jobs).
            prop_assert!(r.summary.min_avg_jct_s >= 0.0);
            if r.summary.finished > 0 && t.true_durations().iter().all(|d| d.ms() > 0) {
                prop_assert!(r.summary.min_avg_jct_s > 0.0);
            }
            prop_assert!(
                r.summary.avg_jct_s + 1e-6 >= r.summary.min_avg_jct_s,
                "avg JCT {} below its bound {}", r.summary.avg_jct_s, r.summary.min_avg_jct_s
            );
            prop_assert_eq!(r.jobs.len() as u64 + r.summary.skipped_unplaceable, t.len() as u64);
            for j in &r.jobs {
                let (start, end) = (j.first_start.unwrap(), j.finish.unwrap());
                prop_assert!(j.submit <= start && start <= end);
            }
            // Same inputs and seed: the identical run.
            let again = checked_run(&t, &spec, which, seed, tick).unwrap();
            prop_assert_eq!(&r.jobs, &again.jobs);
            prop_assert_eq!(&r.timeline, &again.timeline);
            prop_assert_eq!(&r.summary, &again.summary);
        }
    }
}

/// Preempts job 0 at the first tick after it started, then records what the next decision
/// sees of it (time, last stop, idle time) and places it back.
#[derive(Default)]
struct PreemptAndWatch {
    preempted: bool,
    seen: Option<(SimTime, Option<SimTime>, SimTime)>,
}

impl Policy for PreemptAndWatch {
    fn name(&self) -> &str {
        "test/preempt-and-watch"
    }
    fn decide(&mut self, ctx: &DecisionContext<'_>) -> Result<Decision, PolicyError> {
        let a = JobId(0);
        let mut planner = ctx.planner();
        if !self.preempted && planner.state().is_running(a) && ctx.now() > SimTime::ZERO {
            self.preempted = true;
            return Ok(Decision {
                preemptions: vec![a],
                placements: Vec::new(),
                ..Decision::default()
            });
        }
        if let Some(p) = ctx.pending().find(|p| p.spec.id == a)
            && self.preempted
            && self.seen.is_none()
        {
            self.seen = Some((ctx.now(), p.runtime.last_stop, p.idle()));
        }
        Ok(Decision {
            preemptions: Vec::new(),
            placements: first_fit(&mut planner, ctx.pending()),
            ..Decision::default()
        })
    }
}

#[test]
fn a_preempted_job_carries_when_it_stopped() {
    // A runs from 0 while B (both GPUs) waits, so the tick at 50 s asks the policy, which
    // preempts A; the next decision that sees A pending sees it stopped at 50 s.
    let t = trace(vec![
        (job("A", 0, TaskRequest::whole(1, 0, 0)), 100),
        (job("B", 0, TaskRequest::whole(2, 0, 0)), 10),
    ]);
    let cfg = SimConfig {
        tick_s: 50.0,
        ..SimConfig::default()
    };
    let mut p = PreemptAndWatch::default();
    let r = Simulator::new(&t, Arc::new(uniform(1, 2, "V100", 1000, 1000)), &cfg)
        .unwrap()
        .run(&mut p, &mut |_| {});
    let (now, stop, idle) = p.seen.expect("A was seen pending after its preemption");
    assert_eq!(stop, Some(SimTime::from_secs(50)));
    assert_eq!(idle, now.saturating_sub(SimTime::from_secs(50)));
    assert!(now >= SimTime::from_secs(50));
    assert_eq!(r.jobs[0].preemptions, 1);
}

/// Preempts job 0 for job 1 as soon as job 1 waits; starts whatever else waits first fit.
/// Records when it was asked.
#[derive(Default)]
struct PreemptForSecond {
    asked: Vec<SimTime>,
}

impl Policy for PreemptForSecond {
    fn name(&self) -> &str {
        "test/preempt-for-second"
    }
    fn decide(&mut self, ctx: &DecisionContext<'_>) -> Result<Decision, PolicyError> {
        self.asked.push(ctx.now());
        let (a, b) = (JobId(0), JobId(1));
        let mut d = Decision::default();
        let mut planner = ctx.planner();
        if planner.state().is_running(a) && ctx.pending().any(|p| p.spec.id == b) {
            d.preemptions.push(a);
            planner.free_running(a);
            d.placements.extend(first_fit(
                &mut planner,
                ctx.pending().filter(|p| p.spec.id == b),
            ));
            return Ok(d);
        }
        d.placements.extend(first_fit(&mut planner, ctx.pending()));
        Ok(d)
    }
}

#[test]
fn a_superseded_completion_wakes_no_policy() {
    // One GPU. A (100 s) starts at 0; B (200 s) arrives at 10 and preempts it. A's first run
    // would have ended at 100 s: nothing happens then (B runs, A waits), and asking the
    // policy at that instant would tell it when A would have finished. B ends at 210 s and
    // A restarts from scratch (no checkpoint yet, no restart overhead): it ends at 310 s.
    let t = trace(vec![
        (job("A", 0, TaskRequest::whole(1, 0, 0)), 100),
        (job("B", 10, TaskRequest::whole(1, 0, 0)), 200),
    ]);
    let cfg = SimConfig {
        restart_overhead_s: 0.0,
        ..SimConfig::default()
    };
    let mut p = PreemptForSecond::default();
    let r = Simulator::new(&t, Arc::new(uniform(1, 1, "V100", 1000, 1000)), &cfg)
        .unwrap()
        .run(&mut p, &mut |_| {});
    assert_eq!(r.jobs[1].finish, Some(SimTime::from_secs(210)));
    assert_eq!(r.jobs[0].finish, Some(SimTime::from_secs(310)));
    assert_eq!(
        p.asked,
        [0, 10, 210].map(SimTime::from_secs).to_vec(),
        "asked only at arrivals and live completions"
    );
}
