//! GPU sharing and elastic jobs in the simulator (issue #25 points 3 and 4): pairs at the
//! table's pair rates, refusals, resizes at the table's rate for the new size, and work
//! conservation over random runs of placements, shares, resizes and preemptions.

use super::*;
use crate::cluster::{FitStrategy, TaskPlacement, load_cluster};
use crate::job::tests::job;
use crate::job::{Elastic, JobSpec, TaskRequest, Trace, WorkloadType};
use crate::policy::{Decision, DecisionContext, Placement, Policy, PolicyError};
use crate::throughput::{Consolidation, ThroughputTable, load_table};
use crate::units::{JobId, NodeId, SimTime};
use std::sync::Arc;

const RESNET50: &str = "ResNet-50 (batch size 64)";
const LM: &str = "LM (batch size 20)";
/// Gavel's V100 pair of `RESNET50` and this is `[0, 0]`: they cannot share.
const RESNET50_128: &str = "ResNet-50 (batch size 128)";
const RESNET18: &str = "ResNet-18 (batch size 16)";

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
        restart_overhead_s: 5.0,
        ..SimConfig::default()
    }
}

fn finish_ms(r: &SimResult, job: usize) -> u64 {
    r.jobs[job].finish.expect("the job finished").ms()
}

fn one_gpu(node: u32, gpu: u8) -> Vec<TaskPlacement> {
    vec![TaskPlacement {
        node: NodeId(node),
        gpus: vec![gpu],
    }]
}

/// Shares each pending job onto the GPU of the first running job that shares with nobody;
/// places it first-fit when nothing runs.
struct ShareFirst;

impl Policy for ShareFirst {
    fn name(&self) -> &str {
        "test/share-first"
    }
    fn decide(&mut self, ctx: &DecisionContext<'_>) -> Result<Decision, PolicyError> {
        let mut d = Decision::default();
        let host = {
            let cluster = ctx.cluster();
            cluster
                .running()
                .find(|a| cluster.co_tenant(a.job).is_none())
                .map(|a| a.tasks[0].clone())
        };
        let mut planner = ctx.planner();
        for p in ctx.pending() {
            match host.clone() {
                Some(t) => d.shares.push(Placement {
                    job: p.spec.id,
                    tasks: vec![TaskPlacement {
                        node: t.node,
                        gpus: t.gpus.into_iter().take(1).collect(),
                    }],
                }),
                None => {
                    if let Some(tasks) = planner.place(p.spec, FitStrategy::FirstFit) {
                        d.placements.push(Placement {
                            job: p.spec.id,
                            tasks,
                        });
                    }
                }
            }
        }
        Ok(d)
    }
}

fn run_with(t: &Trace, cluster: &str, cfg: &SimConfig, policy: &mut dyn Policy) -> SimResult {
    Simulator::new(t, Arc::new(load_cluster(cluster).unwrap()), cfg)
        .unwrap()
        .run(policy, &mut |_| {})
}

/// `(speed of a, speed of b)` sharing one V100, from the table alone: pair rate over the
/// 1-GPU reference (V100) rate.
fn pair_speeds(table: &ThroughputTable, a: &str, b: &str) -> (f64, f64) {
    let (wa, wb) = (table.workload(a).unwrap(), table.workload(b).unwrap());
    let v100 = table.gpu("V100").unwrap();
    let [ra, rb] = table.pair(wa, wb, v100).unwrap();
    (
        ra / table.reference_rate(wa, 1).unwrap(),
        rb / table.reference_rate(wb, 1).unwrap(),
    )
}

#[test]
fn a_pair_shares_at_the_table_rates_and_the_survivor_returns_to_its_alone_rate() {
    // One V100. A (ResNet-50, 1000 s of work) runs alone at speed 1 (V100 is the reference)
    // for 100 s: 100,000 ms of work done. B (LM, 200 s) then shares its GPU: A runs at
    // 3.0214759821669617 / 4.394774823323071 = 0.6875, B at 24.79801703692631 over its
    // alone rate. B needs 200,000 / sb ms; A would need 900,000 / sa ms, far
    // more: B ends first, at 100,000 + ceil(200,000 / sb). A's work by then is (B's end -
    // 100,000) x sa; the rest it does alone at speed 1 again.
    let table = load_table("gavel").unwrap();
    let (sa, sb) = pair_speeds(&table, RESNET50, LM);
    assert!((sa - 3.0214759821669617 / 4.394774823323071).abs() < 1e-12);
    let t = trace(vec![
        (typed("A", 0, 1, RESNET50), 1000),
        (typed("B", 100, 1, LM), 200),
    ]);
    let r = run_with(&t, "1x1:V100", &gavel(), &mut ShareFirst);
    let b_end = 100_000 + (200_000.0 / sb).ceil() as u64;
    assert_eq!(finish_ms(&r, 1), b_end);
    // As the simulator sums it: work at speed 1 until 100 s, then at the pair's speed.
    let a_left = 1_000_000.0 - (100_000.0 + (b_end - 100_000) as f64 * sa);
    assert!(a_left > 0.0);
    assert_eq!(finish_ms(&r, 0), b_end + a_left.ceil() as u64);
    assert_eq!((r.summary.shares, r.summary.rejected_decisions), (1, 0));
    let json = serde_json::to_string(&r.summary).unwrap();
    assert!(
        json.contains("\"shares\":1") && !json.contains("resizes"),
        "{json}"
    );

    // The other way round: B (long) runs first, A (short) joins and leaves; B's end is
    // recomputed twice.
    let t = trace(vec![
        (typed("B", 0, 1, LM), 1000),
        (typed("A", 100, 1, RESNET50), 10),
    ]);
    let r = run_with(&t, "1x1:V100", &gavel(), &mut ShareFirst);
    let a_end = 100_000 + (10_000.0 / sa).ceil() as u64;
    assert_eq!(finish_ms(&r, 1), a_end);
    let b_left = 1_000_000.0 - (100_000.0 + (a_end - 100_000) as f64 * sb);
    assert_eq!(finish_ms(&r, 0), a_end + b_left.ceil() as u64);
}

#[test]
fn a_job_alone_on_its_best_gpu_ends_at_work_over_rate_next_to_a_share() {
    // Two V100s: A and B start alone at 0, one a GPU; C arrives at 50 s and shares A's GPU
    // (the first running job). B, alone on the V100 (ResNet-50's fastest GPU model), ends at
    // its work / rate: speed 1 on the reference, 1000 s, untouched by the pair next to it.
    let t = trace(vec![
        (typed("A", 0, 1, RESNET18), 300),
        (typed("B", 0, 1, RESNET50), 1000),
        (typed("C", 50, 1, LM), 100),
    ]);
    let r = run_with(&t, "1x2:V100", &gavel(), &mut ShareFirst);
    assert_eq!(r.summary.shares, 1);
    assert_eq!(finish_ms(&r, 1), 1_000_000);
    assert_eq!(r.summary.finished, 3);
}

#[test]
fn forbidden_untyped_fractional_and_multi_gpu_shares_are_refused() {
    // ResNet-50 bs 64 with ResNet-50 bs 128 is [0, 0] on a V100 in Gavel's table: B's share
    // is refused at every decision until A ends, then B runs alone.
    let t = trace(vec![
        (typed("A", 0, 1, RESNET50), 100),
        (typed("B", 10, 1, RESNET50_128), 100),
    ]);
    let r = run_with(&t, "1x1:V100", &gavel(), &mut ShareFirst);
    assert_eq!(r.summary.shares, 0);
    assert!(r.summary.rejected_decisions >= 1);
    assert_eq!(r.jobs[1].first_start, Some(SimTime::from_secs(100)));
    assert_eq!(finish_ms(&r, 1), 200_000);
    // An untyped partner, a fractional job, a 2-GPU job: never shared with.
    let mut frac = typed("F", 10, 1, LM);
    frac.task.gpu_milli = 500;
    for (host, guest) in [
        (
            job("U", 0, TaskRequest::whole(1, 0, 0)),
            typed("G", 10, 1, LM),
        ),
        (
            typed("A", 0, 1, RESNET50),
            job("U", 10, TaskRequest::whole(1, 0, 0)),
        ),
        (typed("A", 0, 1, RESNET50), frac),
        (typed("A", 0, 2, RESNET18), typed("G", 10, 1, LM)),
    ] {
        let t = trace(vec![(host, 100), (guest, 100)]);
        let cluster = "1x2:V100";
        let r = run_with(&t, cluster, &gavel(), &mut ShareFirst);
        assert_eq!(r.summary.shares, 0, "{:?}", t.jobs());
        assert!(r.summary.rejected_decisions >= 1);
        assert_eq!(r.summary.finished, 2);
    }
}

#[test]
fn cluster_state_keeps_a_shared_gpu_to_two_jobs_and_frees_it_with_the_last() {
    let spec = Arc::new(load_cluster("1x2:V100").unwrap());
    let mut state = crate::cluster::ClusterState::new(spec);
    let mut jobs: Vec<JobSpec> = (0..4)
        .map(|i| {
            let mut j = typed(&format!("j{i}"), 0, 1, LM);
            j.id = JobId(i);
            j.task.cpu_milli = 1000;
            j
        })
        .collect();
    state.allocate(&jobs[0], one_gpu(0, 0)).unwrap();
    // Nothing runs on GPU 1: there is nobody to share with.
    assert!(state.allocate_shared(&jobs[1], one_gpu(0, 1)).is_err());
    assert_eq!(state.allocate_shared(&jobs[1], one_gpu(0, 0)), Ok(JobId(0)));
    state.check_invariants().unwrap();
    assert_eq!(state.co_tenant(JobId(0)), Some(JobId(1)));
    assert_eq!(state.gpu_free(NodeId(0)), &[0, 1000]);
    assert_eq!(state.allocated_gpu_milli(), 1000);
    assert_eq!(state.allocated_cpu_milli(), 2000);
    // A third job is refused, by sharing and by a plain placement alike.
    assert!(state.allocate_shared(&jobs[2], one_gpu(0, 0)).is_err());
    assert!(state.allocate(&jobs[2], one_gpu(0, 0)).is_err());
    // The first holder leaves: the second keeps the GPU; then it leaves too.
    state.release(JobId(0)).unwrap();
    state.check_invariants().unwrap();
    assert_eq!(state.co_tenant(JobId(1)), None);
    assert_eq!(state.gpu_free(NodeId(0)), &[0, 1000]);
    state.release(JobId(1)).unwrap();
    assert_eq!(state.gpu_free(NodeId(0)), &[1000, 1000]);
    assert_eq!(state.allocated_cpu_milli(), 0);
    state.check_invariants().unwrap();
    // Trying a decision that preempts one of a pair, and planning its preemption, leave the
    // pair as it was.
    state.allocate(&jobs[0], one_gpu(0, 0)).unwrap();
    assert_eq!(state.allocate_shared(&jobs[2], one_gpu(0, 0)), Ok(JobId(0)));
    let before = (
        state.gpu_free(NodeId(0)).to_vec(),
        state.cpu_free(NodeId(0)),
    );
    assert_eq!(state.try_decision(&[JobId(0)], &[]), Ok(()));
    assert_eq!(state.co_tenant(JobId(2)), Some(JobId(0)));
    assert!(state.give_back_job(JobId(0)));
    assert_eq!(
        state.gpu_free(NodeId(0)),
        &[0, 1000],
        "the partner keeps the GPU"
    );
    state.retake_job(JobId(0));
    assert_eq!(
        (
            state.gpu_free(NodeId(0)).to_vec(),
            state.cpu_free(NodeId(0))
        ),
        before
    );
    state.check_invariants().unwrap();
    state.release(JobId(0)).unwrap();
    state.release(JobId(2)).unwrap();
    // A guest whose node lacks its CPU is refused.
    jobs[3].task.cpu_milli = u64::MAX / 2;
    state.allocate(&jobs[0], one_gpu(0, 0)).unwrap();
    assert!(state.allocate_shared(&jobs[3], one_gpu(0, 0)).is_err());
    state.check_invariants().unwrap();
}

/// Resizes `self.0`'s job to `self.1` tasks of its per-task GPUs, on node 0 from GPU 0, at
/// the first decision at or after `self.2`; places other pending jobs first-fit.
struct ResizeAt(JobId, u32, SimTime, bool);

impl Policy for ResizeAt {
    fn name(&self) -> &str {
        "test/resize-at"
    }
    fn decide(&mut self, ctx: &DecisionContext<'_>) -> Result<Decision, PolicyError> {
        let mut d = Decision::default();
        if !self.3 && ctx.now() >= self.2 && ctx.cluster().is_running(self.0) {
            self.3 = true;
            let g = ctx.job(self.0).task.gpus as u8;
            d.resizes.push(Placement {
                job: self.0,
                tasks: (0..self.1 as u8)
                    .map(|k| TaskPlacement {
                        node: NodeId(0),
                        gpus: (k * g..(k + 1) * g).collect(),
                    })
                    .collect(),
            });
        }
        d.placements = super::tests::place_first_fit(ctx, |_| true);
        Ok(d)
    }
}

fn elastic(name: &str, submit_s: u64, tasks: u32, workload: &str, min: u32, max: u32) -> JobSpec {
    let mut j = typed(name, submit_s, 1, workload);
    j.tasks = tasks;
    j.elastic = Some(Elastic {
        min_gpus: min,
        max_gpus: max,
    });
    j
}

#[test]
fn a_resize_restarts_at_the_table_rate_of_the_new_size_keeping_the_work() {
    // E: ResNet-18 (batch size 16) on 2 V100s, 1000 s of work measured there (speed 1).
    // At 100 s (a second job arrives, so the policy is asked) it grows to 4 GPUs on the same
    // node: it keeps its 100,000 ms of work, pays the 5 s restart, then runs at
    // rate(4 V100s) / rate(2 V100s).
    let table = load_table("gavel").unwrap();
    let w = table.workload(RESNET18).unwrap();
    let v100 = table.gpu("V100").unwrap();
    let s4 = table
        .speed(w, v100, 4, Consolidation::Consolidated, 2)
        .unwrap();
    let t = trace(vec![
        (elastic("E", 0, 2, RESNET18, 1, 8), 1000),
        (typed("x", 100, 1, RESNET18), 10),
    ]);
    let mut policy = ResizeAt(JobId(0), 4, SimTime::from_secs(100), false);
    let r = run_with(&t, "1x8:V100", &gavel(), &mut policy);
    assert_eq!(r.summary.resizes, 1);
    assert_eq!(r.summary.preemptions, 0);
    assert_eq!(finish_ms(&r, 0), 105_000 + (900_000.0 / s4).ceil() as u64);
    // Shrunk to 1 GPU instead: the 1-GPU rate over the 2-GPU one.
    let s1 = table
        .speed(w, v100, 1, Consolidation::Consolidated, 2)
        .unwrap();
    let mut policy = ResizeAt(JobId(0), 1, SimTime::from_secs(100), false);
    let r = run_with(&t, "1x8:V100", &gavel(), &mut policy);
    assert_eq!(finish_ms(&r, 0), 105_000 + (900_000.0 / s1).ceil() as u64);
}

#[test]
fn resizes_out_of_range_of_rigid_jobs_and_at_rate_zero_are_refused() {
    let t = |j: JobSpec| trace(vec![(j, 1000), (typed("x", 100, 1, RESNET18), 10)]);
    let cases = [
        // Below min_gpus (2), above max_gpus (4).
        (elastic("E", 0, 2, RESNET18, 2, 4), 1),
        (elastic("E", 0, 2, RESNET18, 2, 4), 5),
        // A rigid gang.
        (
            {
                let mut j = typed("R", 0, 1, RESNET18);
                j.tasks = 2;
                j
            },
            4,
        ),
        // 3 GPUs: Gavel has no 3-GPU rate.
        (elastic("E", 0, 2, RESNET18, 1, 4), 3),
    ];
    for (j, tasks) in cases {
        let mut policy = ResizeAt(JobId(0), tasks, SimTime::from_secs(100), false);
        let r = run_with(&t(j), "1x8:V100", &gavel(), &mut policy);
        assert_eq!((r.summary.resizes, r.summary.rejected_decisions), (0, 1));
        assert_eq!(finish_ms(&r, 0), 1_000_000);
    }
    // An elastic job's bounds are checked with the trace.
    let mut bad = elastic("E", 0, 1, RESNET18, 2, 4);
    bad.task.gpus = 2;
    bad.elastic = Some(Elastic {
        min_gpus: 3,
        max_gpus: 4,
    });
    let err = Trace::new("t", vec![bad], vec![SimTime(1)], vec!["d".into()]).unwrap_err();
    assert!(
        err.to_string().contains("min_gpus 3 is not a multiple"),
        "{err}"
    );
}

/// The registry policy `name` with the Gavel table (for `colocate` and `elastic`).
fn with_table(name: &str) -> Box<dyn Policy> {
    let options = crate::policy::PolicyOptions {
        throughputs: Some(Arc::new(load_table("gavel").unwrap())),
        ..crate::policy::PolicyOptions::default()
    };
    crate::policy::build_policy_with(name, &options).unwrap()
}

#[test]
fn colocate_shares_a_gpu_when_the_pair_beats_the_threshold() {
    // One V100. A (ResNet-50 bs 64) runs; B (LM bs 20) is blocked. Summed normalised rate:
    // 3.0214759821669617 / 4.394774823323071 + 24.79801703692631 / 64.74245099960703 =
    // 0.6875 + 0.3830 = 1.0705 > 1: B shares A's GPU at once.
    let t = trace(vec![
        (typed("A", 0, 1, RESNET50), 1000),
        (typed("B", 10, 1, LM), 100),
    ]);
    let r = run_with(
        &t,
        "1x1:V100",
        &gavel(),
        with_table("fifo/first-fit/colocate").as_mut(),
    );
    assert_eq!((r.summary.shares, r.summary.rejected_decisions), (1, 0));
    assert_eq!(r.jobs[1].first_start, Some(SimTime::from_secs(10)));
    // A pair the table forbids: B waits for A.
    let t = trace(vec![
        (typed("A", 0, 1, RESNET50), 1000),
        (typed("B", 10, 1, RESNET50_128), 100),
    ]);
    let r = run_with(
        &t,
        "1x1:V100",
        &gavel(),
        with_table("fifo/first-fit/colocate").as_mut(),
    );
    assert_eq!((r.summary.shares, r.summary.rejected_decisions), (0, 0));
    assert_eq!(r.jobs[1].first_start, Some(SimTime::from_secs(1000)));
    // Without a table the part is refused, saying why.
    let err = crate::policy::build_policy("fifo/first-fit/colocate", 0)
        .err()
        .unwrap();
    assert!(err.to_string().contains("throughput table"), "{err}");
}

#[test]
fn elastic_grows_into_idle_gpus_and_shrinks_to_admit() {
    // E: ResNet-18 bs 16 on 4 V100s (elastic 1..8), on the 8-GPU node. x arrives at 100 s
    // and takes the K80 (its only model); nobody waits, so the 4 idle V100s go to E: 4 -> 8
    // GPUs is 123.85 -> 382.60 steps/s, an efficiency of (382.60 - 123.85) / 4 /
    // (123.85 / 4) = 2.09 >= 0.5. E keeps its 100 s of work and restarts (5 s) at
    // 382.60 / 123.85.
    let mut x = typed("x", 100, 1, LM);
    x.gpu_types = vec!["K80".into()];
    let t = trace(vec![(elastic("E", 0, 4, RESNET18, 1, 8), 1000), (x, 10)]);
    let r = run_with(
        &t,
        "1x8:V100+1x1:K80",
        &gavel(),
        with_table("fifo/first-fit/elastic").as_mut(),
    );
    assert_eq!((r.summary.resizes, r.summary.rejected_decisions), (1, 0));
    let speed: f64 = 382.5974422686407 / 123.85376642692827;
    assert_eq!(
        finish_ms(&r, 0),
        105_000 + (900_000.0 / speed).ceil() as u64
    );
    // E holds all 8 GPUs (elastic 2..8); y (1 GPU) arrives at 100 s and is blocked: E
    // shrinks to 2 GPUs (its first two) and y starts at once. When y ends at 110 s nobody
    // waits, and E grows back to 8: two resizes.
    let t = trace(vec![
        (elastic("E", 0, 8, RESNET18, 2, 8), 1000),
        (typed("y", 100, 1, LM), 10),
    ]);
    let r = run_with(
        &t,
        "1x8:V100",
        &gavel(),
        with_table("fifo/first-fit/elastic").as_mut(),
    );
    assert_eq!((r.summary.resizes, r.summary.rejected_decisions), (2, 0));
    assert_eq!(r.jobs[1].first_start, Some(SimTime::from_secs(100)));
    assert_eq!(finish_ms(&r, 1), 110_000);
    // 100 s at 8 GPUs, 10 s at 2 (after a 5 s restart), the rest at 8 after another.
    let w = load_table("gavel").unwrap();
    let rw = w.workload(RESNET18).unwrap();
    let v100 = w.gpu("V100").unwrap();
    let s2 = w
        .speed(rw, v100, 2, Consolidation::Consolidated, 8)
        .unwrap();
    let left = 900_000.0 - 5_000.0 * s2;
    let fin = finish_ms(&r, 0) as f64;
    assert!((fin - (115_000.0 + left)).abs() <= 2.0, "E ends at {fin}");
}

#[test]
fn elastic_starts_smaller_and_grows_when_a_job_ends_with_nobody_waiting() {
    // One 8-V100 node. A (rigid, ResNet-18 bs 16 on 4 GPUs) runs from 0 to 200 s. E (the same
    // model, trace size 8, elastic 1..8) arrives at 60 s, when `elastic`'s next round is due,
    // with 4 GPUs free: it starts E at 4 at once, where the rigid policy waits for A. When A
    // ends nobody waits, but the simulator still asks a policy that acts without a queue: E
    // grows to 8 at 200 s, keeps its work and pays the 5 s restart.
    let table = load_table("gavel").unwrap();
    let w = table.workload(RESNET18).unwrap();
    let v100 = table.gpu("V100").unwrap();
    let s4 = table
        .speed(w, v100, 4, Consolidation::Consolidated, 8)
        .unwrap();
    let t = trace(vec![
        (typed("A", 0, 4, RESNET18), 200),
        (elastic("E", 60, 8, RESNET18, 1, 8), 1000),
    ]);
    let r = run_with(
        &t,
        "1x8:V100",
        &gavel(),
        with_table("fifo/first-fit/elastic").as_mut(),
    );
    assert_eq!((r.summary.resizes, r.summary.rejected_decisions), (1, 0));
    assert_eq!(r.jobs[1].first_start, Some(SimTime::from_secs(60)));
    let fin = finish_ms(&r, 1) as f64;
    let expect = 205_000.0 + (1000.0 - 140.0 * s4) * 1000.0;
    assert!(
        (fin - expect).abs() <= 2.0,
        "E ends at {fin} ms, expected {expect}"
    );
    // The 4-GPU run's superseded completion (at 60 + 1000 / s4 s) is not an event: the
    // measured span ends with E, so the allocation rate is A's 4 GPUs to 200 s, E's 4 from
    // 60 s and its 8 from 200 s, over 8 GPUs to E's end.
    assert!(60_000.0 + 1_000_000.0 / s4 > fin);
    let alloc = 4.0 * 200_000.0 + 4.0 * 140_000.0 + 8.0 * (fin - 200_000.0);
    let rate = alloc / (8.0 * fin);
    assert!(
        (r.summary.gpu_alloc_rate - rate).abs() < 1e-9,
        "{} vs {rate}",
        r.summary.gpu_alloc_rate
    );
    // Rigid, E waits for A and runs 1000 s at its trace size.
    let rigid = run_with(
        &t,
        "1x8:V100",
        &gavel(),
        with_table("fifo/first-fit").as_mut(),
    );
    assert_eq!(finish_ms(&rigid, 1), 1_200_000);
}

#[test]
fn elastic_moves_a_job_to_a_faster_gpu_model_left_idle() {
    // Four K80s and four V100s. B (rigid, 4 GPUs, V100 only) holds the V100s until 100 s; E
    // (ResNet-18 bs 16, 4 GPUs, elastic 1..4) arrives at 1 s and can only take the K80s. When
    // B ends nobody waits, and the table rates E far faster on V100s: E moves there (one
    // resize) and ends long before it would on the K80s.
    let table = load_table("gavel").unwrap();
    let w = table.workload(RESNET18).unwrap();
    let (k80, v100) = (table.gpu("K80").unwrap(), table.gpu("V100").unwrap());
    let rate = |gpu, n| table.rate(w, gpu, n, Consolidation::Consolidated).unwrap();
    assert!(rate(v100, 4) >= 1.25 * rate(k80, 4));
    let mut b = typed("B", 0, 4, RESNET18);
    b.gpu_types = vec!["V100".into()];
    let t = trace(vec![(b, 100), (elastic("E", 1, 4, RESNET18, 1, 4), 1000)]);
    let cluster = "1x4:K80+1x4:V100";
    let r = run_with(
        &t,
        cluster,
        &gavel(),
        with_table("fifo/fastest/elastic").as_mut(),
    );
    assert_eq!((r.summary.resizes, r.summary.rejected_decisions), (1, 0));
    assert!(r.jobs[1].nodes.starts_with("v100"), "{}", r.jobs[1].nodes);
    let rigid = run_with(&t, cluster, &gavel(), with_table("fifo/fastest").as_mut());
    assert!(
        rigid.jobs[1].nodes.starts_with("k80"),
        "{}",
        rigid.jobs[1].nodes
    );
    assert!(finish_ms(&r, 1) < finish_ms(&rigid, 1));
    // On the K80s E would end at 1 s + its work at the K80 speed; it moved at 100 s.
    let on_k80 = 1_000.0 + 1_000_000.0 * rate(v100, 4) / rate(k80, 4);
    assert!((finish_ms(&rigid, 1) as f64 - on_k80).abs() <= 1.0);
}

#[test]
fn colocate_acts_once_a_round() {
    // Two V100s, each running a ResNet-50; LM jobs (which share with it, see above) arrive at
    // 10 s and 20 s. With `round_s = 0` both share at once; with Gavel's 6-minute round the
    // second waits for the next round, and then for a GPU, since both hosts run to 1000 s.
    let t = trace(vec![
        (typed("A", 0, 1, RESNET50), 1000),
        (typed("A2", 0, 1, RESNET50), 1000),
        (typed("B", 10, 1, LM), 100),
        (typed("B2", 20, 1, LM), 100),
    ]);
    let build = |round_s: f64| {
        let options = crate::policy::PolicyOptions {
            throughputs: Some(Arc::new(load_table("gavel").unwrap())),
            colocate: crate::policy::ColocateConfig {
                round_s,
                ..Default::default()
            },
            ..crate::policy::PolicyOptions::default()
        };
        crate::policy::build_policy_with("fifo/first-fit/colocate", &options).unwrap()
    };
    let r = run_with(&t, "1x2:V100", &gavel(), build(0.0).as_mut());
    assert_eq!(r.summary.shares, 2);
    assert_eq!(r.jobs[3].first_start, Some(SimTime::from_secs(20)));
    let r = run_with(&t, "1x2:V100", &gavel(), build(360.0).as_mut());
    assert_eq!(r.summary.shares, 1);
    assert_eq!(r.jobs[2].first_start, Some(SimTime::from_secs(10)));
    assert_eq!(r.jobs[3].first_start, Some(SimTime::from_secs(1000)));
    // Bad knobs are refused, naming them.
    for (config, field) in [
        (
            crate::policy::ColocateConfig {
                threshold: f64::NAN,
                ..Default::default()
            },
            "threshold",
        ),
        (
            crate::policy::ColocateConfig {
                round_s: -1.0,
                ..Default::default()
            },
            "round_s",
        ),
    ] {
        let options = crate::policy::PolicyOptions {
            throughputs: Some(Arc::new(load_table("gavel").unwrap())),
            colocate: config,
            ..crate::policy::PolicyOptions::default()
        };
        let err = crate::policy::build_policy_with("fifo/first-fit/colocate", &options)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains(field), "{err}");
    }
    let options = crate::policy::PolicyOptions {
        throughputs: Some(Arc::new(load_table("gavel").unwrap())),
        elastic: crate::policy::ElasticConfig {
            min_efficiency: 0.0,
            ..Default::default()
        },
        ..crate::policy::PolicyOptions::default()
    };
    let err = crate::policy::build_policy_with("fifo/first-fit/elastic", &options)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("min_efficiency"), "{err}");
}

mod props {
    use super::*;
    use crate::policy::JobState;
    use crate::throughput::gavel::TEMPLATES;
    use proptest::prelude::*;
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};
    use std::collections::{BTreeMap, BTreeSet};

    /// Preempts, resizes, shares and places at random (often refused), bounded so that every
    /// run ends: at most 3 preemptions and 2 resizes a job.
    struct Chaos {
        rng: StdRng,
        resized: BTreeMap<JobId, u32>,
    }

    impl Policy for Chaos {
        fn name(&self) -> &str {
            "test/chaos"
        }
        fn decide(&mut self, ctx: &DecisionContext<'_>) -> Result<Decision, PolicyError> {
            let mut d = Decision::default();
            let cluster = ctx.cluster();
            let nodes = cluster.spec().nodes.len() as u32;
            let running: Vec<(JobId, TaskPlacement)> = cluster
                .running()
                .map(|a| (a.job, a.tasks[0].clone()))
                .collect();
            drop(cluster);
            if let Some((victim, _)) = running.get(self.rng.random_range(0..running.len() + 2))
                && ctx.runtime(*victim).preemptions < 3
            {
                d.preemptions.push(*victim);
            }
            for (id, _) in &running {
                let job = ctx.job(*id);
                let count = self.resized.entry(*id).or_default();
                if job.elastic.is_none() || *count >= 2 || self.rng.random_range(0..3) != 0 {
                    continue;
                }
                *count += 1;
                let g = job.task.gpus as u8;
                let node = NodeId(self.rng.random_range(0..nodes));
                let k = self.rng.random_range(1..=8 / g);
                d.resizes.push(Placement {
                    job: *id,
                    tasks: (0..k)
                        .map(|i| TaskPlacement {
                            node,
                            gpus: (i * g..(i + 1) * g).collect(),
                        })
                        .collect(),
                });
            }
            let mut planner = ctx.planner();
            for p in ctx.pending() {
                if !running.is_empty() && self.rng.random_range(0..2) == 0 {
                    let (_, host) = &running[self.rng.random_range(0..running.len())];
                    d.shares.push(Placement {
                        job: p.spec.id,
                        tasks: vec![TaskPlacement {
                            node: host.node,
                            gpus: host.gpus.iter().take(1).copied().collect(),
                        }],
                    });
                    continue;
                }
                let mut on_v100 = p.spec.clone();
                on_v100.gpu_types = vec!["V100".into()];
                if let Some(tasks) = planner.place(&on_v100, FitStrategy::BestFit) {
                    d.placements.push(Placement {
                        job: p.spec.id,
                        tasks,
                    });
                }
            }
            Ok(d)
        }
    }

    /// What the test saw of a running job at one decision: enough to work its rate out
    /// from the table alone.
    #[derive(Debug, Clone)]
    struct Seen {
        at: SimTime,
        nodes: Vec<NodeId>,
        gpus: u32,
        partner: Option<JobId>,
    }

    /// One run of a job: its start, restart overhead, and the configurations seen.
    #[derive(Debug, Clone)]
    struct Run {
        start: SimTime,
        overhead_ms: u64,
        seen: Vec<Seen>,
    }

    /// The table's speed of typed `job` alone on `gpus` GPUs over `nodes` (one model, one
    /// rack in these clusters), from the table alone.
    fn alone(
        table: &ThroughputTable,
        spec: &crate::cluster::ClusterSpec,
        job: &JobSpec,
        s: &Seen,
    ) -> f64 {
        let w = table
            .workload(job.workload.as_ref().unwrap().as_str())
            .unwrap();
        let per_node = spec.nodes.iter().map(|n| n.gpus as u64).max().unwrap();
        let placement = if s.nodes.len() as u64 > (s.gpus as u64).div_ceil(per_node) {
            Consolidation::Spread
        } else {
            Consolidation::Consolidated
        };
        let gpu = table
            .gpu(&spec.node_model(s.nodes[0]).unwrap().name)
            .unwrap();
        table
            .speed(w, gpu, s.gpus, placement, job.gpus_total() as u32)
            .unwrap_or(0.0)
    }

    /// The run's rate pieces `(from, speed)`: each configuration seen, and where a partner
    /// ended between two decisions, the job's alone speed from the partner's end.
    fn pieces(
        table: &ThroughputTable,
        spec: &crate::cluster::ClusterSpec,
        t: &Trace,
        finish: &[Option<SimTime>],
        run: &Run,
        id: JobId,
    ) -> Vec<(SimTime, f64)> {
        let job = t.job(id);
        let mut out = Vec::new();
        for (k, s) in run.seen.iter().enumerate() {
            let next = run
                .seen
                .get(k + 1)
                .map(|n| n.at)
                .unwrap_or(SimTime(u64::MAX));
            match s.partner {
                None => out.push((s.at, alone(table, spec, job, s))),
                Some(p) => {
                    let w = |j: &JobSpec| {
                        table
                            .workload(j.workload.as_ref().unwrap().as_str())
                            .unwrap()
                    };
                    let gpu = table
                        .gpu(&spec.node_model(s.nodes[0]).unwrap().name)
                        .unwrap();
                    let [r, _] = table.pair(w(job), w(t.job(p)), gpu).unwrap();
                    let reference = table
                        .reference_rate(w(job), job.gpus_total() as u32)
                        .unwrap();
                    out.push((s.at, r / reference));
                    if let Some(end) = finish[p.index()].filter(|e| *e > s.at && *e < next) {
                        out.push((end, alone(table, spec, job, s)));
                    }
                }
            }
        }
        out
    }

    /// Work of a run with `pieces` from `from` to `to`.
    fn work(pieces: &[(SimTime, f64)], from: SimTime, to: SimTime) -> f64 {
        let mut w = 0.0;
        for (k, (at, speed)) in pieces.iter().enumerate() {
            let end = pieces.get(k + 1).map_or(to, |n| n.0).min(to);
            let begin = (*at).max(from);
            if end > begin {
                w += (end.ms() - begin.ms()) as f64 * speed;
            }
        }
        w
    }

    fn cluster_strategy() -> impl Strategy<Value = String> {
        prop::collection::vec(0usize..3, 0..3).prop_map(|extra| {
            let mut parts = vec!["1x8:V100".to_string()];
            for model in extra {
                parts.push(format!("1x8:{}", ["K80", "P100", "V100"][model]));
            }
            parts.join("+")
        })
    }

    fn trace_strategy() -> impl Strategy<Value = Trace> {
        // (tasks of 1 GPU, elastic?) with 1, 2 or 4 GPUs; multi-GPU jobs distributed only.
        let job = (
            0u64..60,
            1u64..150,
            prop::sample::select(vec![1u32, 1, 2, 4]),
            0usize..26,
            proptest::bool::ANY,
        );
        prop::collection::vec(job, 1..12).prop_map(|jobs| {
            let distributed: Vec<&str> = TEMPLATES
                .iter()
                .filter(|t| t.distributed)
                .map(|t| t.name)
                .collect();
            let (specs, durs): (Vec<_>, Vec<_>) = jobs
                .into_iter()
                .enumerate()
                .map(|(i, (submit, dur, tasks, w, is_elastic))| {
                    let workload = if tasks == 1 && !is_elastic {
                        TEMPLATES[w].name
                    } else {
                        distributed[w % distributed.len()]
                    };
                    let mut j = typed(&format!("j{i}"), submit, 1, workload);
                    j.tasks = tasks;
                    if is_elastic {
                        j.elastic = Some(Elastic {
                            min_gpus: 1,
                            max_gpus: 8,
                        });
                    }
                    (j, SimTime::from_secs(dur))
                })
                .unzip();
            Trace::new("prop", specs, durs, vec!["default".into()]).unwrap()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48),
            ..ProptestConfig::default()
        })]

        /// Under any sequence of placements, shares, resizes and preemptions: capacity is
        /// never exceeded and a shared GPU holds two jobs at most (`check_invariants`), every
        /// job ends exactly once, and each ends when the work it kept (checkpointed work of
        /// preempted runs, all the work of resized ones) plus its last run's work, at the
        /// table's alone or pair speeds worked out here, reaches its trace duration.
        #[test]
        fn work_is_conserved_under_placements_shares_resizes_and_preemptions(
            cluster in cluster_strategy(), t in trace_strategy(), seed in 0u64..1000,
            checkpoint in prop::sample::select(vec![0.0, 7.0]),
        ) {
            let spec = load_cluster(&cluster).unwrap();
            let table = load_table("gavel").unwrap();
            let cfg = SimConfig {
                tick_s: 11.0,
                checkpoint_interval_s: checkpoint,
                restart_overhead_s: 3.0,
                ..gavel()
            };
            let mut sim = Simulator::new(&t, Arc::new(spec.clone()), &cfg).unwrap();
            let mut policy = Chaos { rng: StdRng::seed_from_u64(seed), resized: BTreeMap::new() };
            let n = t.len();
            // Per job: its closed runs, with how each ended; its open run.
            let mut closed: Vec<Vec<(Run, SimTime, bool)>> = vec![Vec::new(); n];
            let mut open: Vec<Option<Run>> = vec![None; n];
            let mut preemptions = vec![0u32; n];
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
                let cluster = ctx.cluster();
                prop_assert!(cluster.check_invariants().is_ok(), "{:?}", cluster.check_invariants());
                let mut per_gpu: BTreeMap<(NodeId, u8), u32> = BTreeMap::new();
                for a in cluster.running() {
                    for tp in a.tasks.iter() {
                        for g in &tp.gpus {
                            *per_gpu.entry((tp.node, *g)).or_default() += 1;
                        }
                    }
                }
                prop_assert!(per_gpu.values().all(|c| *c <= 2));
                for j in t.jobs() {
                    let i = j.id.index();
                    let rt = ctx.runtime(j.id);
                    let preempted = rt.preemptions > preemptions[i];
                    preemptions[i] = rt.preemptions;
                    let restarted = rt.run_start.is_some_and(|s| open[i].as_ref().is_some_and(|r| r.start != s));
                    if preempted || restarted {
                        let run = open[i].take().expect("a stopped job was running");
                        // A preemption keeps the checkpointed work; a resize (a restart
                        // without a preemption) all of it.
                        closed[i].push((run, now, preempted));
                    }
                    if rt.state == JobState::Running {
                        let a = cluster.allocation(j.id).unwrap();
                        let seen = Seen {
                            at: now,
                            nodes: a.nodes(),
                            gpus: a.tasks.len() as u32 * a.task.gpus,
                            partner: cluster.co_tenant(j.id),
                        };
                        match &mut open[i] {
                            Some(run) => run.seen.push(seen),
                            None => {
                                let resized = closed[i].last().is_some_and(|(_, _, p)| !p);
                                open[i] = Some(Run {
                                    start: now,
                                    overhead_ms: if rt.preemptions > 0 || resized { 3000 } else { 0 },
                                    seen: vec![seen],
                                });
                            }
                        }
                    }
                }
            }
            let r = sim.finish("test/chaos", 0.0);
            prop_assert_eq!(r.summary.finished, r.summary.jobs);
            let finish: Vec<Option<SimTime>> = r.jobs.iter().map(|j| j.finish).collect();
            for j in t.jobs() {
                let i = j.id.index();
                let mut left = t.true_duration(j.id).ms() as f64;
                for (run, stop, preempted) in &closed[i] {
                    let ps = run.start.saturating_add(SimTime(run.overhead_ms));
                    let p = pieces(&table, &spec, &t, &finish, run, j.id);
                    let kept_until = if !preempted {
                        (*stop).max(ps)
                    } else if checkpoint > 0.0 {
                        let productive = stop.ms().saturating_sub(ps.ms());
                        ps.saturating_add(SimTime(productive / 7000 * 7000))
                    } else {
                        left = t.true_duration(j.id).ms() as f64;
                        continue;
                    };
                    left = (left - work(&p, ps, kept_until)).max(0.0);
                }
                let run = open[i].as_ref().expect("a finished job's last run was seen");
                let end = finish[i].unwrap();
                let ps = run.start.saturating_add(SimTime(run.overhead_ms));
                let p = pieces(&table, &spec, &t, &finish, run, j.id);
                prop_assert!(p.iter().all(|(_, s)| *s > 0.0), "job {} ran at speed 0", j.name);
                let done = work(&p, ps, end);
                let last = p.last().unwrap().1;
                // The last run did exactly the work left, rounded up to the ms (each rate
                // change may round up once more).
                let slack = last * (p.len() as f64 + 1.0) + 1e-6;
                prop_assert!(done + 1e-6 >= left && done < left + slack,
                    "job {}: done {} left {} pieces {:?}", j.name, done, left, p);
            }
        }
    }
}

/// `gavel()` with quotas: one queue, `default`, holding `gpus` V100 GPUs.
fn gavel_with_quota(name: &str, gpus: u32) -> SimConfig {
    let path = std::env::temp_dir().join(format!(
        "lachesis-share-quota-{}-{name}.toml",
        std::process::id()
    ));
    let text = format!(
        "[[queue]]\nname = \"default\"\n[[queue.quota]]\nflavor = \"V100\"\n\
         resource = \"gpu\"\nnominal = {gpus}\n"
    );
    std::fs::write(&path, text).unwrap();
    SimConfig {
        quotas: Some(path.to_str().unwrap().to_string()),
        ..gavel()
    }
}

#[test]
fn quotas_hold_growth_and_shares_and_a_shrink_returns_its_quota() {
    // E on 2 V100s grows to 4 at 100 s: refused under a quota of 3 GPUs (counted as a quota
    // veto, not a rejection; x then starts beside it), done under 4 (x's start in the same
    // decision is then refused: E holds all 4).
    let t = trace(vec![
        (elastic("E", 0, 2, RESNET18, 1, 8), 1000),
        (typed("x", 100, 1, RESNET18), 10),
    ]);
    for (gpus, resizes, vetoes) in [(3, 0, 1), (4, 1, 1)] {
        let mut policy = ResizeAt(JobId(0), 4, SimTime::from_secs(100), false);
        let r = run_with(&t, "1x8:V100", &gavel_with_quota("grow", gpus), &mut policy);
        let s = &r.summary;
        assert_eq!(
            (s.resizes, s.quota_vetoes, s.rejected_decisions),
            (resizes, vetoes, 0)
        );
        assert_eq!(s.finished, 2);
    }
    // Shrunk from 2 to 1 GPU at 100 s under a quota of 2: x (1 GPU, at 100 s) is placed in
    // the same decision, after the shrink has returned a GPU of quota.
    let mut policy = ResizeAt(JobId(0), 1, SimTime::from_secs(100), false);
    let r = run_with(&t, "1x8:V100", &gavel_with_quota("shrink", 2), &mut policy);
    assert_eq!((r.summary.resizes, r.summary.quota_vetoes), (1, 0));
    assert_eq!(r.jobs[1].first_start, Some(SimTime::from_secs(100)));
    // A shared GPU counts for both jobs: under a quota of 1 GPU, B may not share A's.
    let t = trace(vec![
        (typed("A", 0, 1, RESNET50), 1000),
        (typed("B", 100, 1, LM), 200),
    ]);
    let r = run_with(
        &t,
        "1x1:V100",
        &gavel_with_quota("share", 1),
        &mut ShareFirst,
    );
    assert_eq!((r.summary.shares, r.summary.quota_vetoes), (0, 1));
    assert!(r.jobs[1].first_start >= r.jobs[0].finish);
    let r = run_with(
        &t,
        "1x1:V100",
        &gavel_with_quota("share2", 2),
        &mut ShareFirst,
    );
    assert_eq!((r.summary.shares, r.summary.quota_vetoes), (1, 0));
}
