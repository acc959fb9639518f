//! Typed jobs in the simulator: rates from a throughput table, worked out by hand from
//! `traces/throughputs/gavel.csv`, then work conservation over random runs.

use super::*;
use crate::cluster::{ClusterSpec, TaskPlacement, load_cluster};
use crate::job::tests::job;
use crate::job::{JobSpec, TaskRequest, Trace, WorkloadType};
use crate::policy::{Decision, DecisionContext, Placement, Policy, PolicyError, build_policy};
use crate::throughput::RateError;
use crate::units::{JobId, NodeId, SimTime};
use std::sync::Arc;

const RESNET18: &str = "ResNet-18 (batch size 16)";
const RECOMMENDATION: &str = "Recommendation (batch size 512)";

fn typed(name: &str, submit_s: u64, gpus: u32, workload: &str) -> JobSpec {
    let mut j = job(name, submit_s, TaskRequest::whole(gpus, 0, 0));
    j.workload = WorkloadType::new(workload);
    j
}

fn trace(jobs: Vec<(JobSpec, u64)>) -> Trace {
    let (specs, durs): (Vec<_>, Vec<_>) = jobs
        .into_iter()
        .map(|(j, d)| (j, SimTime::from_secs(d)))
        .unzip();
    Trace::new("test", specs, durs, vec!["default".into()]).unwrap()
}

fn gavel() -> SimConfig {
    SimConfig {
        throughputs: Some("gavel".into()),
        ..SimConfig::default()
    }
}

fn run(t: &Trace, cluster: &str, policy: &str, cfg: &SimConfig) -> SimResult {
    let mut p = build_policy(policy, cfg.seed).unwrap();
    Simulator::new(t, Arc::new(load_cluster(cluster).unwrap()), cfg)
        .unwrap()
        .run(p.as_mut(), &mut |_| {})
}

fn finish_ms(r: &SimResult, job: usize) -> u64 {
    r.jobs[job].finish.expect("the job finished").ms()
}

#[test]
fn a_typed_job_alone_on_its_best_gpu_ends_at_work_over_rate() {
    // Recommendation (batch size 512), 1 GPU: 48.882390510045944 steps/s on a P100, its best
    // GPU; 23.317634950657975 on a V100, the reference its 1000 s were measured on. Speed
    // 48.88 / 23.32 = 2.09637, so 1,000,000 ms of work take ceil(477,015.03) = 477,016 ms
    // (the catalog's P100 speed, 0.55, would have given 1,818,182 ms).
    let t = trace(vec![(typed("A", 0, 1, RECOMMENDATION), 1000)]);
    let r = run(&t, "1x4:P100", "fifo/first-fit", &gavel());
    let speed: f64 = 48.882390510045944 / 23.317634950657975;
    assert_eq!(finish_ms(&r, 0), (1e6 / speed).ceil() as u64);
    assert_eq!(finish_ms(&r, 0), 477_016);
    // The bound is the job's best table speed: the same 477.016 s.
    assert_eq!(r.summary.min_avg_jct_s, 477.016);
}

#[test]
fn k80_against_v100_ends_at_the_measured_ratio() {
    // ResNet-18 (batch size 16), 1 GPU: 4.795294551566172 steps/s on a K80, 32.353384328946916
    // on the reference V100. 1000 s of work: 1000 s on the V100, 1000 x 32.35 / 4.795 =
    // 6746.9 s on the K80.
    let t = trace(vec![(typed("A", 0, 1, RESNET18), 1000)]);
    let v100 = run(&t, "1x4:V100", "fifo/first-fit", &gavel());
    let k80 = run(&t, "1x4:K80", "fifo/first-fit", &gavel());
    assert_eq!(finish_ms(&v100, 0), 1_000_000);
    let speed: f64 = 4.795294551566172 / 32.353384328946916;
    assert_eq!(finish_ms(&k80, 0), (1e6 / speed).ceil() as u64);
    let ratio = finish_ms(&k80, 0) as f64 / finish_ms(&v100, 0) as f64;
    assert!(
        (ratio - 32.353384328946916 / 4.795294551566172).abs() < 1e-6,
        "{ratio}"
    );
    // Untyped, the same job runs at the catalog's K80 speed, 0.35: 2857.143 s.
    let mut untyped = t.jobs().to_vec();
    untyped[0].workload = None;
    let t = Trace::new(
        "test",
        untyped,
        t.true_durations().to_vec(),
        vec!["default".into()],
    )
    .unwrap();
    let catalog = run(&t, "1x4:K80", "fifo/first-fit", &gavel());
    assert_eq!(finish_ms(&catalog, 0), 2_857_143);
}

#[test]
fn a_spread_gang_runs_at_the_spread_rate_without_the_node_penalty() {
    // ResNet-18 (batch size 16) on 2 GPUs: 100.14206200421837 consolidated on a V100 node,
    // 35.33651986363828 spread over two. Two nodes of 2 GPUs, worst-fit: x (1 GPU) goes to
    // the emptiest node n1 (ties to the higher id), y to n0; the gang G of 2 x 1 GPU then
    // spans both where one node would do. 1000 s of work at 35.34 / 100.14 = 0.35286 take
    // 2834.0 s. The cross-node penalty (1.1) is not applied on top: the table measured the
    // spread.
    let mut g = typed("G", 1, 1, RESNET18);
    g.tasks = 2;
    let t = trace(vec![
        (job("x", 0, TaskRequest::whole(1, 0, 0)), 5000),
        (job("y", 0, TaskRequest::whole(1, 0, 0)), 5000),
        (g, 1000),
    ]);
    let r = run(&t, "2x2:V100", "fifo/worst-fit", &gavel());
    assert_eq!(r.jobs[2].nodes, "v100-0001;v100-0000");
    let speed: f64 = 35.33651986363828 / 100.14206200421837;
    assert_eq!(finish_ms(&r, 2), 1000 + (1e6 / speed).ceil() as u64);
    // Over two racks (8 nodes a rack) it also pays the rack penalty, 1.1, which tables do
    // not measure.
    let mut g = typed("G", 0, 1, RESNET18);
    g.tasks = 2;
    let one = trace(vec![(g, 1000)]);
    let r = Simulator::new(&one, Arc::new(load_cluster("9x2:V100").unwrap()), &gavel())
        .unwrap()
        .run(&mut OnNodes(vec![0, 8]), &mut |_| {});
    assert_eq!(finish_ms(&r, 0), (1e6 / (speed / 1.1)).ceil() as u64);
    // First-fit packs it on one node: consolidated, on its trace shape, speed 1.
    let r = run(&t, "2x2:V100+1x2:V100", "fifo/first-fit", &gavel());
    assert_eq!(r.jobs[2].nodes, "v100-0001");
    assert_eq!(finish_ms(&r, 2), 1000 + 1_000_000);
}

#[test]
fn untyped_jobs_run_as_without_a_table() {
    // The same untyped trace, with and without the Gavel table: the identical run.
    let t = trace(vec![
        (job("A", 0, TaskRequest::whole(2, 0, 0)), 300),
        (job("B", 5, TaskRequest::whole(1, 0, 0)), 100),
        (job("C", 9, TaskRequest::whole(4, 0, 0)), 50),
    ]);
    let cfg = SimConfig {
        tick_s: 20.0,
        ..SimConfig::default()
    };
    let with = SimConfig {
        throughputs: Some("gavel".into()),
        ..cfg.clone()
    };
    for policy in ["fifo/best-fit", "tiresias/first-fit/las-preempt"] {
        let a = run(&t, "1x2:K80+1x4:A100", policy, &cfg);
        let b = run(&t, "1x2:K80+1x4:A100", policy, &with);
        assert_eq!(a.jobs, b.jobs);
        assert_eq!(a.timeline, b.timeline);
        let (mut sa, mut sb) = (a.summary, b.summary);
        (sa.wall_s, sb.wall_s) = (0.0, 0.0);
        assert_eq!(sa, sb);
    }
}

fn new_err(t: &Trace, cluster: &str, cfg: &SimConfig) -> SimError {
    Simulator::new(t, Arc::new(load_cluster(cluster).unwrap()), cfg).unwrap_err()
}

#[test]
fn a_cluster_gpu_absent_from_the_table_is_refused_naming_it() {
    let t = trace(vec![(typed("A", 0, 1, RESNET18), 10)]);
    let err = new_err(&t, "1x4:V100+1x4:A100", &gavel());
    assert!(
        matches!(&err, SimError::Rate { job, source: RateError::GpuModelAbsent { gpu, .. } }
            if job == "A" && gpu == "A100"),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("A100") && msg.contains("job A"), "{msg}");
    // A job kept off the A100s by its gpu_types runs.
    let mut only_v100 = t.jobs().to_vec();
    only_v100[0].gpu_types = vec!["V100".into()];
    let t = Trace::new(
        "test",
        only_v100,
        t.true_durations().to_vec(),
        vec!["default".into()],
    )
    .unwrap();
    let r = run(&t, "1x4:V100+1x4:A100", "fifo/first-fit", &gavel());
    assert_eq!(finish_ms(&r, 0), 10_000);
}

#[test]
fn typed_jobs_without_a_rate_are_refused_naming_them() {
    // An unknown workload; a 2-GPU Recommendation (Gavel measured it on 1 GPU only); a table
    // that does not load.
    let t = trace(vec![(typed("A", 0, 1, "no such model"), 10)]);
    let err = new_err(&t, "1x4:V100", &gavel());
    assert!(matches!(
        &err,
        SimError::Rate {
            source: RateError::UnknownWorkload { .. },
            ..
        }
    ));
    let t = trace(vec![(typed("B", 0, 2, RECOMMENDATION), 10)]);
    let err = new_err(&t, "1x4:V100", &gavel());
    assert!(
        matches!(&err, SimError::Rate { job, source: RateError::NoEntry { gpus: 2, .. } }
            if job == "B"),
        "{err:?}"
    );
    let cfg = SimConfig {
        throughputs: Some("/no/such/table.csv".into()),
        ..SimConfig::default()
    };
    let err = new_err(&t, "1x4:V100", &cfg).to_string();
    assert!(err.contains("/no/such/table.csv"), "{err}");
    // ResNet-50 (batch size 128) on 2 K80s runs at rate 0: on a K80-only cluster it can run
    // nowhere.
    let t = trace(vec![(typed("C", 0, 2, "ResNet-50 (batch size 128)"), 10)]);
    let err = new_err(&t, "1x4:K80", &gavel());
    assert!(
        matches!(&err, SimError::NowhereToRun { job, .. } if job == "C"),
        "{err:?}"
    );
}

#[test]
fn typed_jobs_the_table_rates_nowhere_are_skipped_as_unplaceable() {
    // Four K80s under Gavel's table (`traces/throughputs/gavel.csv`):
    // - A: ResNet-18 (batch size 16) on 1 GPU: rated, runs.
    // - B: Recommendation (batch size 512) on 2 GPUs: Gavel measured it on 1 GPU only, so no
    //   rate on 2 V100s measures its work and none on 2 K80s runs it: it can never run.
    // - C: ResNet-50 (batch size 128) on 2 GPUs: rate 0 on 2 K80s, the only model.
    // - D: ResNet-18 elastic 1..=8 at trace size 3: sizes 1, 2, 4 and 8 are rated, but its
    //   work is measured on 3 V100s, which Gavel lacks: no size gives it a speed.
    // - E: C made elastic 1..=2 (2 tasks of 1 GPU): 0.347 steps/s on 1 K80 (above 0), so it
    //   may run shrunk to 1 GPU (`fastest` never proposes 2 K80s; `elastic` then starts it
    //   smaller): not skipped.
    let elastic = |name: &str, tasks: u32, workload: &str, max_gpus: u32| {
        let mut j = typed(name, 0, 1, workload);
        j.tasks = tasks;
        j.elastic = Some(crate::job::Elastic {
            min_gpus: 1,
            max_gpus,
        });
        j
    };
    let resnet50 = "ResNet-50 (batch size 128)";
    let jobs = vec![
        (typed("A", 0, 1, RESNET18), 10),
        (typed("B", 0, 2, RECOMMENDATION), 10),
        (typed("C", 0, 2, resnet50), 10),
        (elastic("D", 3, RESNET18, 8), 10),
        (elastic("E", 2, resnet50, 2), 10),
    ];
    let t = trace(jobs.clone());
    let policy = || {
        let options = crate::policy::PolicyOptions {
            throughputs: Some(Arc::new(crate::throughput::load_table("gavel").unwrap())),
            ..crate::policy::PolicyOptions::default()
        };
        crate::policy::build_policy_with("fifo/fastest/elastic", &options).unwrap()
    };
    let run_on_k80s = |t: &Trace, cfg: &SimConfig| {
        Simulator::new(t, Arc::new(load_cluster("1x4:K80").unwrap()), cfg)
            .map(|sim| sim.run(policy().as_mut(), &mut |_| {}))
    };
    // Without skipping, the first such job stops the run, named with its workload and size.
    let err = run_on_k80s(&t, &gavel()).unwrap_err();
    assert!(
        matches!(&err, SimError::Rate { job, source: RateError::NoEntry { gpus: 2, gpu: "V100", .. } }
            if job == "B"),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("job B") && msg.contains(RECOMMENDATION) && msg.contains("2 x V100"),
        "{msg}"
    );
    // Skipping, B, C and D are counted as unplaceable and every other job finishes.
    let skip = SimConfig {
        skip_unplaceable: true,
        ..gavel()
    };
    let r = run_on_k80s(&t, &skip).unwrap();
    let s = &r.summary;
    assert_eq!((s.jobs, s.finished, s.skipped_unplaceable), (2, 2, 3));
    let ran: Vec<&str> = r.jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(ran, ["A", "E"]);
    // E alone is no fault even without skipping: it may run at 1 GPU.
    let t = trace(vec![jobs[0].clone(), jobs[4].clone()]);
    let r = run_on_k80s(&t, &gavel()).unwrap();
    assert_eq!((r.summary.finished, r.summary.skipped_unplaceable), (2, 0));
}

/// Places each pending job's task `t` on node `self.0[t]`, from GPU 0 on.
struct OnNodes(Vec<u32>);

impl Policy for OnNodes {
    fn name(&self) -> &str {
        "test/on-node"
    }
    fn decide(&mut self, ctx: &DecisionContext<'_>) -> Result<Decision, PolicyError> {
        let placements = ctx
            .pending()
            .map(|p| Placement {
                job: p.spec.id,
                tasks: (0..p.spec.tasks as usize)
                    .map(|t| TaskPlacement {
                        node: NodeId(self.0[t]),
                        gpus: (0..p.spec.task.gpus as u8).collect(),
                    })
                    .collect(),
            })
            .collect();
        Ok(Decision {
            preemptions: Vec::new(),
            placements,
            ..Decision::default()
        })
    }
}

#[test]
fn a_placement_at_rate_zero_is_rejected() {
    // ResNet-50 (batch size 128) runs at rate 0 on 2 K80s (Gavel measured nothing): the
    // placement on the K80 node is rejected and the job stays pending; on the V100 node it
    // runs, at speed 1 on its reference shape.
    let t = trace(vec![(typed("C", 0, 2, "ResNet-50 (batch size 128)"), 10)]);
    let spec = Arc::new(load_cluster("1x4:K80+1x4:V100").unwrap());
    let r = Simulator::new(&t, Arc::clone(&spec), &gavel())
        .unwrap()
        .run(&mut OnNodes(vec![0]), &mut |_| {});
    assert_eq!((r.summary.finished, r.summary.rejected_decisions), (0, 1));
    let r = Simulator::new(&t, spec, &gavel())
        .unwrap()
        .run(&mut OnNodes(vec![1]), &mut |_| {});
    assert_eq!(finish_ms(&r, 0), 10_000);
}

mod props {
    use super::*;
    use crate::policy::JobState;
    use crate::throughput::{Consolidation, ThroughputTable, gavel::TEMPLATES};
    use proptest::prelude::*;
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};
    use std::collections::BTreeSet;

    /// Preempts a random running job now and then, and places pending jobs on random nodes
    /// (often infeasible, or at rate 0) while another job runs (so a tick asks again), else
    /// best-fit where the job can run.
    struct Shuffle {
        rng: StdRng,
        table: ThroughputTable,
    }

    impl Policy for Shuffle {
        fn name(&self) -> &str {
            "test/shuffle"
        }
        fn decide(&mut self, ctx: &DecisionContext<'_>) -> Result<Decision, PolicyError> {
            let mut d = Decision::default();
            let mut planner = ctx.planner();
            let spec = Arc::clone(planner.state().spec_arc());
            // At most 3 preemptions a job, so that every run ends.
            let running: Vec<JobId> = planner
                .state()
                .running()
                .map(|a| a.job)
                .filter(|id| ctx.runtime(*id).preemptions < 3)
                .collect();
            if !running.is_empty() && self.rng.random_range(0..3) == 0 {
                let victim = running[self.rng.random_range(0..running.len())];
                d.preemptions.push(victim);
                planner.free_running(victim);
            }
            let still_running = planner.state().running().count() > d.preemptions.len();
            let nodes = spec.nodes.len() as u32;
            // The victim too, restarted at once: a run with nothing running and nothing left
            // to arrive would end with it pending.
            let candidates = ctx
                .pending()
                .map(|p| p.spec)
                .chain(d.preemptions.iter().map(|id| ctx.job(*id)))
                .collect::<Vec<_>>();
            for job in candidates {
                if still_running && self.rng.random_range(0..2) == 0 {
                    let tasks: Vec<TaskPlacement> = (0..job.tasks)
                        .map(|_| TaskPlacement {
                            node: NodeId(self.rng.random_range(0..nodes)),
                            gpus: (0..job.task.gpus as u8).collect(),
                        })
                        .collect();
                    if planner.reserve(job, &tasks).is_ok() {
                        d.placements.push(Placement { job: job.id, tasks });
                    }
                    continue;
                }
                let mut on_v100 = job.clone();
                on_v100.gpu_types = vec!["V100".into()];
                let runs_at = |tasks: &[TaskPlacement]| {
                    let mut nodes: Vec<NodeId> = tasks.iter().map(|t| t.node).collect();
                    nodes.sort_unstable();
                    nodes.dedup();
                    speed(&self.table, job, &spec, &nodes)
                };
                // `place` reserves what it returns.
                let tasks = match planner.place(job, crate::cluster::FitStrategy::BestFit) {
                    Some(tasks) if runs_at(&tasks) > 0.0 => Some(tasks),
                    Some(tasks) => {
                        planner.unreserve(job, &tasks);
                        planner.place(&on_v100, crate::cluster::FitStrategy::BestFit)
                    }
                    None => None,
                };
                if let Some(tasks) = tasks {
                    d.placements.push(Placement { job: job.id, tasks });
                }
            }
            Ok(d)
        }
    }

    /// One run of a job as the test saw it.
    #[derive(Debug, Clone, Copy)]
    struct Run {
        start: SimTime,
        overhead_ms: u64,
        speed: f64,
    }

    /// The table's speed of typed `job` on `nodes`, worked out here from the table alone.
    fn speed(table: &ThroughputTable, job: &JobSpec, spec: &ClusterSpec, nodes: &[NodeId]) -> f64 {
        let w = table
            .workload(job.workload.as_ref().unwrap().as_str())
            .unwrap();
        let n = job.gpus_total() as u32;
        // The most GPUs a node of the placement's models has, anywhere in the cluster.
        let models: BTreeSet<_> = nodes.iter().map(|id| spec.node(*id).gpu_model).collect();
        let per_node = spec
            .nodes
            .iter()
            .filter(|n| models.contains(&n.gpu_model))
            .map(|n| n.gpus as u64)
            .max()
            .unwrap();
        let placement = if nodes.len() as u64 > (n as u64).div_ceil(per_node) {
            Consolidation::Spread
        } else {
            Consolidation::Consolidated
        };
        nodes
            .iter()
            .map(|id| {
                let gpu = table.gpu(&spec.node_model(*id).unwrap().name).unwrap();
                table.speed(w, gpu, n, placement, n).unwrap_or(0.0)
            })
            .fold(f64::INFINITY, f64::min)
    }

    fn cluster_strategy() -> impl Strategy<Value = String> {
        // Always a V100 node of 8, so that every job can run somewhere; one rack.
        prop::collection::vec(
            (0usize..3, 1u32..=2, prop::sample::select(vec![2u32, 4])),
            0..4,
        )
        .prop_map(|extra| {
            let mut parts = vec!["1x8:V100".to_string()];
            for (model, count, gpus) in extra {
                parts.push(format!("{count}x{gpus}:{}", ["K80", "P100", "V100"][model]));
            }
            parts.join("+")
        })
    }

    fn trace_strategy() -> impl Strategy<Value = Trace> {
        // (tasks, GPUs per task): 1, 2, 4 or 8 GPUs in all; multi-GPU jobs of the distributed
        // templates only.
        let shapes = vec![(1u32, 1u32), (1, 2), (2, 1), (1, 4), (2, 2), (4, 1), (2, 4)];
        let job = (
            0u64..100,
            1u64..200,
            prop::sample::select(shapes),
            0usize..26,
        );
        prop::collection::vec(job, 1..14).prop_map(|jobs| {
            let distributed: Vec<&str> = TEMPLATES
                .iter()
                .filter(|t| t.distributed)
                .map(|t| t.name)
                .collect();
            let (specs, durs): (Vec<_>, Vec<_>) = jobs
                .into_iter()
                .enumerate()
                .map(|(i, (submit, dur, (tasks, gpus), w))| {
                    let workload = if tasks * gpus == 1 {
                        TEMPLATES[w].name
                    } else {
                        distributed[w % distributed.len()]
                    };
                    let mut j = typed(&format!("j{i}"), submit, gpus, workload);
                    j.tasks = tasks;
                    (j, SimTime::from_secs(dur))
                })
                .unzip();
            Trace::new("prop", specs, durs, vec!["default".into()]).unwrap()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64),
            ..ProptestConfig::default()
        })]

        /// Every typed job ends exactly once, when the work it kept (checkpointed work of its
        /// preempted runs, then its last run) reaches its trace duration at the table's speeds.
        #[test]
        fn typed_work_is_conserved_under_placements_and_preemptions(
            cluster in cluster_strategy(), t in trace_strategy(), seed in 0u64..1000,
            checkpoint in prop::sample::select(vec![0.0, 7.0]),
        ) {
            let spec = load_cluster(&cluster).unwrap();
            let table = crate::throughput::load_table("gavel").unwrap();
            let cfg = SimConfig {
                tick_s: 11.0,
                checkpoint_interval_s: checkpoint,
                restart_overhead_s: 3.0,
                // Typed gangs over racks pay it on top (a unit test above); not modelled here.
                cross_rack_penalty: 1.0,
                ..gavel()
            };
            let mut sim = Simulator::new(&t, Arc::new(spec.clone()), &cfg).unwrap();
            let mut policy = Shuffle { rng: StdRng::seed_from_u64(seed), table: table.clone() };
            // Per job: work left (ms at speed 1), its current run, preemptions seen.
            let mut left: Vec<f64> = t.true_durations().iter().map(|d| d.ms() as f64).collect();
            let mut runs: Vec<Option<Run>> = vec![None; t.len()];
            let mut seen_preemptions = vec![0u32; t.len()];
            let mut ended = BTreeSet::new();
            let mut decisions = 0;
            while sim.advance() && decisions < 20_000 {
                decisions += 1;
                let d = policy.decide(&sim.context()).unwrap();
                for id in sim.context().recently_finished() {
                    prop_assert!(ended.insert(*id), "job {} ended twice", id.index());
                }
                sim.apply(&d);
                let now = sim.now();
                let ctx = sim.context();
                for j in t.jobs() {
                    let i = j.id.index();
                    let rt = ctx.runtime(j.id);
                    if rt.preemptions > seen_preemptions[i] {
                        // Preempted now: it keeps the work of its last checkpoint.
                        seen_preemptions[i] = rt.preemptions;
                        let run = runs[i].take().expect("a preempted job was running");
                        let productive =
                            (now.ms() - run.start.ms()).saturating_sub(run.overhead_ms);
                        left[i] = if checkpoint > 0.0 {
                            let saved = productive / 7000 * 7000;
                            (left[i] - saved as f64 * run.speed).max(0.0)
                        } else {
                            t.true_duration(j.id).ms() as f64
                        };
                    }
                    if rt.state == JobState::Running && runs[i].is_none() {
                        let cluster = ctx.cluster();
                        let nodes = cluster.allocation(j.id).unwrap().nodes();
                        let s = speed(&table, j, &spec, &nodes);
                        prop_assert!(s > 0.0, "job {} started where it cannot run", j.name);
                        runs[i] = Some(Run {
                            start: now,
                            overhead_ms: if rt.preemptions > 0 { 3000 } else { 0 },
                            speed: s,
                        });
                    }
                }
            }
            let r = sim.finish("test/shuffle", 0.0);
            prop_assert_eq!(r.summary.finished, r.summary.jobs);
            for (j, rec) in t.jobs().iter().zip(&r.jobs) {
                let i = j.id.index();
                let run = runs[i].expect("a finished job's last run was seen");
                let end = rec.finish.unwrap();
                // The last run did exactly the work left, rounded up to the ms.
                let expected = run.start.ms() + run.overhead_ms + (left[i] / run.speed).ceil() as u64;
                prop_assert_eq!(end.ms(), expected, "job {}", j.name);
                let done = (end.ms() - run.start.ms() - run.overhead_ms) as f64 * run.speed;
                prop_assert!(done + 1e-6 >= left[i] && done < left[i] + run.speed + 1e-6);
            }
        }
    }
}
