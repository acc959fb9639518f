//! A hand-built world for the modifiers' table tests, and end-to-end runs of every modifier
//! through the simulator.

use crate::cluster::tests::uniform;
use crate::cluster::{ClusterSpec, ClusterState, FitStrategy, TaskPlacement, load_cluster};
use crate::job::tests::job;
use crate::job::{JobSpec, Qos, TaskRequest, Trace};
use crate::policy::{
    Decision, DecisionContext, JobRuntime, JobState, Modifier, StrategyPlacer, build_policy,
};
use crate::sim::{SimConfig, SimResult, Simulator};
use crate::units::{JobId, NodeId, SimTime};
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::sync::Arc;

/// Jobs running at given places and jobs waiting, at one moment, on uniform V100 nodes with
/// ample CPU and memory. The cluster is built when a modifier is asked, so a test may change
/// a job's spec (QoS, preemptible) after placing it.
pub(super) struct World {
    spec: Arc<ClusterSpec>,
    pub jobs: Vec<JobSpec>,
    pub runtime: Vec<JobRuntime>,
    pending: BTreeSet<JobId>,
    running: Vec<(JobId, TaskPlacement)>,
    pub now: SimTime,
    /// What a preemption costs (the simulator's defaults unless a test sets it).
    pub restart: crate::policy::RestartCost,
}

impl World {
    pub fn new(nodes: usize, gpus: u32, now_s: u64) -> World {
        World {
            spec: Arc::new(uniform(nodes, gpus, "V100", 1_000_000, 1 << 30)),
            jobs: Vec::new(),
            runtime: Vec::new(),
            pending: BTreeSet::new(),
            running: Vec::new(),
            now: SimTime::from_secs(now_s),
            restart: crate::policy::RestartCost::default(),
        }
    }

    fn add(&mut self, name: &str, tasks: u32, gpus: u32) -> JobId {
        let id = JobId(self.jobs.len() as u32);
        let mut j = job(name, 0, TaskRequest::whole(gpus, 1000, 1024));
        j.id = id;
        j.tasks = tasks;
        self.jobs.push(j);
        self.runtime.push(JobRuntime::default());
        id
    }

    /// A one-task job of `gpus` GPUs running on the lowest free GPUs of `node` for `ran_s`.
    pub fn run(&mut self, name: &str, node: u32, gpus: u32, ran_s: u64) -> JobId {
        let id = self.add(name, 1, gpus);
        let taken: Vec<u8> = self
            .running
            .iter()
            .filter(|(_, t)| t.node == NodeId(node))
            .flat_map(|(_, t)| t.gpus.iter().copied())
            .collect();
        let free: Vec<u8> = (0u8..)
            .filter(|g| !taken.contains(g))
            .take(gpus as usize)
            .collect();
        self.running.push((
            id,
            TaskPlacement {
                node: NodeId(node),
                gpus: free,
            },
        ));
        let start = self.now.saturating_sub(SimTime::from_secs(ran_s));
        self.runtime[id.index()] = JobRuntime {
            state: JobState::Running,
            first_start: Some(start),
            run_start: Some(start),
            ..JobRuntime::default()
        };
        id
    }

    /// A waiting job of `tasks` tasks of `gpus` GPUs each.
    pub fn pending(&mut self, name: &str, tasks: u32, gpus: u32) -> JobId {
        let id = self.add(name, tasks, gpus);
        self.runtime[id.index()].state = JobState::Pending;
        self.pending.insert(id);
        id
    }

    /// Wall time `job` has run so far, current run included, ms.
    pub fn attained(&self, job: JobId) -> u64 {
        let r = &self.runtime[job.index()];
        r.attained_ms + r.run_start.map_or(0, |s| self.now.saturating_sub(s).ms())
    }

    /// What `m` decides for the unplaced jobs `rest` (first-fit placer, nothing placed before).
    pub fn extend(&self, m: &mut dyn Modifier, rest: &[JobId]) -> Decision {
        let mut state = ClusterState::new(Arc::clone(&self.spec));
        for (id, t) in &self.running {
            state
                .allocate(&self.jobs[id.index()], vec![t.clone()])
                .expect("test placements fit");
        }
        let cluster = RefCell::new(state);
        let ctx =
            DecisionContext::new(self.now, &self.jobs, &self.runtime, &self.pending, &cluster)
                .with_restart_cost(self.restart);
        let mut planner = ctx.planner();
        let mut placer = StrategyPlacer::new("first-fit", FitStrategy::FirstFit);
        let mut d = Decision::default();
        m.extend(&ctx, &mut planner, &mut placer, rest, &mut d);
        d
    }
}

/// Steps a run by hand, checking the cluster's invariants after every decision.
fn checked_run(t: &Trace, spec: &ClusterSpec, policy: &str, cfg: &SimConfig) -> SimResult {
    let mut p = build_policy(policy, cfg.seed).unwrap();
    let mut sim = Simulator::new(t, Arc::new(spec.clone()), cfg).unwrap();
    while sim.advance() {
        let d = p.decide(&sim.context()).unwrap();
        sim.apply(&d);
        sim.cluster().check_invariants().unwrap();
    }
    sim.finish(p.name(), 0.0)
}

/// The synthetic trace with estimates of 1x..2.5x the true duration, QoS classes and
/// priorities mixed, guaranteed jobs not preemptible.
fn mixed_trace(jobs: usize, spec: &ClusterSpec, load: f64, seed: u64) -> Trace {
    let t = crate::trace::synthetic::synthetic_trace(jobs, spec, load, seed);
    let qos = [
        Qos::BestEffort,
        Qos::Burstable,
        Qos::LatencySensitive,
        Qos::Guaranteed,
    ];
    let (specs, durs): (Vec<JobSpec>, Vec<SimTime>) = t
        .jobs()
        .iter()
        .map(|j| {
            let i = j.id.index();
            let d = t.true_duration(j.id);
            let mut j = j.clone();
            j.estimate = Some(SimTime(d.ms() * (2 + (i % 4) as u64) / 2));
            j.qos = qos[i * 7 % 4];
            j.priority = (i % 3) as i32;
            j.preemptible = j.qos != Qos::Guaranteed;
            (j, d)
        })
        .unzip();
    Trace::new(t.name.clone(), specs, durs, t.tenants().to_vec()).unwrap()
}

#[test]
fn every_modifier_runs_a_mixed_synthetic_trace_cleanly() {
    let spec = load_cluster("8x8:V100").unwrap();
    let t = mixed_trace(150, &spec, 1.2, 7);
    for (policy, tick_s) in [
        ("fifo/best-fit", 0.0),
        ("fifo/best-fit/easy", 0.0),
        ("fifo/best-fit/preempt", 0.0),
        ("fifo/best-fit/las-preempt", 600.0),
        ("gittins/best-fit/gittins-preempt", 600.0),
        ("fifo/best-fit/preempt/easy", 0.0),
    ] {
        let cfg = SimConfig {
            tick_s,
            ..SimConfig::default()
        };
        let r = checked_run(&t, &spec, policy, &cfg);
        let s = &r.summary;
        eprintln!(
            "{policy}: avg wait {:.0} s, avg bsld {:.2}, preemptions {}",
            s.avg_wait_s, s.avg_bsld, s.preemptions
        );
        assert_eq!((s.finished, s.jobs), (150, 150), "{policy}");
        assert_eq!(s.rejected_decisions, 0, "{policy}");
        assert_eq!(s.policy_errors, 0, "{policy}");
        if policy.contains("preempt") {
            assert!(s.preemptions > 0, "{policy} never preempted");
        }
    }
}

#[test]
fn easy_cuts_wait_and_slowdown_on_kth() {
    // KTH SP2: 100 single-processor nodes. SWF jobs are one task of all their processors (the
    // reader's default), so the machine is one node of 100 cores: a processor count, as in the
    // EASY papers.
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../traces/swf/KTH-SP2-1996-2.1-cln-first1000.swf"
    );
    let t = crate::trace::read_trace(std::path::Path::new(path), None)
        .unwrap()
        .trace;
    let spec = uniform(1, 0, "V100", 100_000, u64::MAX / 4);
    let cfg = SimConfig::default();
    let fifo = checked_run(&t, &spec, "fifo/first-fit", &cfg).summary;
    let easy = checked_run(&t, &spec, "fifo/first-fit/easy", &cfg).summary;
    for s in [&fifo, &easy] {
        eprintln!(
            "{}: avg wait {:.0} s, p95 wait {:.0} s, avg bsld {:.2}, p95 bsld {:.2}, \
             cpu alloc {:.3}, makespan {:.0} s",
            s.policy,
            s.avg_wait_s,
            s.p95_wait_s,
            s.avg_bsld,
            s.p95_bsld,
            s.cpu_alloc_rate,
            s.makespan_s
        );
        assert_eq!((s.finished, s.jobs), (1000, 1000));
        assert_eq!(s.rejected_decisions, 0);
    }
    assert!(easy.avg_wait_s < fifo.avg_wait_s);
    assert!(easy.avg_bsld < fifo.avg_bsld);
}

/// A modifier that wants the first `wants` jobs of `rest` and records how many it got.
struct RestProbe {
    wants: usize,
    got: Arc<std::sync::atomic::AtomicUsize>,
}

impl Modifier for RestProbe {
    fn name(&self) -> &str {
        "probe"
    }
    fn rest_wanted(&self, _ctx: &DecisionContext<'_>) -> usize {
        self.wants
    }
    fn extend(
        &mut self,
        _ctx: &DecisionContext<'_>,
        _planner: &mut crate::policy::Planner<'_>,
        _placer: &mut dyn crate::policy::Placer,
        rest: &[JobId],
        _decision: &mut Decision,
    ) {
        self.got
            .store(rest.len(), std::sync::atomic::Ordering::Relaxed);
    }
}

#[test]
fn the_pass_collects_as_much_of_the_queue_as_its_modifiers_want() {
    // One GPU, taken; five 1-GPU jobs wait, so FIFO's head blocks and everything is `rest`.
    let mut w = World::new(1, 1, 100);
    w.run("r", 0, 1, 10);
    for i in 0..5 {
        w.pending(&format!("p{i}"), 1, 1);
    }
    let state = {
        let mut s = ClusterState::new(Arc::clone(&w.spec));
        for (id, t) in &w.running {
            s.allocate(&w.jobs[id.index()], vec![t.clone()]).unwrap();
        }
        RefCell::new(s)
    };
    let ctx = DecisionContext::new(w.now, &w.jobs, &w.runtime, &w.pending, &state);
    for (wants, expect) in [(usize::MAX, 5), (2, 2), (1, 1), (0, 0)] {
        let got = Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX));
        let mut p = crate::policy::Composite::with_modifiers(
            Box::new(crate::policy::Fifo),
            Box::new(StrategyPlacer::new("first-fit", FitStrategy::FirstFit)),
            vec![Box::new(RestProbe {
                wants,
                got: Arc::clone(&got),
            })],
        );
        let d = crate::policy::Policy::decide(&mut p, &ctx).unwrap();
        assert!(d.placements.is_empty());
        assert_eq!(
            got.load(std::sync::atomic::Ordering::Relaxed),
            expect,
            "wants {wants}"
        );
    }
}
