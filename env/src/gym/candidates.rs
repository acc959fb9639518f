//! Candidate actions at a decision point: (pending job, placement) pairs proposed by
//! heuristic placers, deduplicated by node set, each with its feature row.
//!
//! For each of the first `jobs_considered` pending jobs (submit order), every configured
//! proposer places the job tentatively on the live cluster through the decision's planner
//! (then undoes it), so a candidate is feasible now by construction and its features can read
//! the cluster as it would be after the placement. Jobs of one gang shape (task, tasks, GPU
//! types) share each proposer's answer within a decision point: it is computed once.
//!
//! A considered job that no proposer can place gets at most one preemption candidate: the
//! minimal victim set of the `preempt` modifier (`minimal_victims`: preemptible running jobs of
//! a strictly lower class, QoS then priority) found with the first proposer, and that
//! proposer's placement once the victims are freed. Taking it applies one decision that
//! preempts the victims, then places the job. Works on a `DecisionContext` alone, so the
//! decision service can enumerate the same way.

use super::features::{CandidateStats, Featurizer, GLOBAL_WIDTH, GlobalStats};
use crate::cluster::{ClusterState, FitStrategy, TaskPlacement};
use crate::job::JobSpec;
use crate::metrics::{MixCounts, TaskMix};
use crate::policy::place::{Fgd, MostAllocated};
use crate::policy::{
    DecisionContext, PendingJob, Placement, Placer, PlanMark, Planner, StrategyPlacer,
    minimal_victims,
};
use crate::units::{GPU_MILLI, JobId, NodeId, SimTime};
use serde::{Deserialize, Serialize};

/// A heuristic that proposes placements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Proposer {
    BestFit,
    WorstFit,
    MostAllocated,
    Fgd,
}

impl Proposer {
    fn build(self) -> Box<dyn Placer> {
        match self {
            Proposer::BestFit => Box::new(StrategyPlacer::new("best-fit", FitStrategy::BestFit)),
            Proposer::WorstFit => Box::new(StrategyPlacer::new("worst-fit", FitStrategy::WorstFit)),
            Proposer::MostAllocated => Box::new(MostAllocated),
            Proposer::Fgd => Box::new(Fgd::default()),
        }
    }
    /// The `by_*` flag bit of the feature row.
    fn flag(self) -> u8 {
        match self {
            Proposer::BestFit => 1,
            Proposer::WorstFit => 2,
            Proposer::MostAllocated | Proposer::Fgd => 4,
        }
    }
}

/// The proposers of one episode (some learn online, so they are rebuilt on reset).
pub struct Proposers {
    kinds: Vec<Proposer>,
    placers: Vec<Box<dyn Placer>>,
}

impl std::fmt::Debug for Proposers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(&self.kinds).finish()
    }
}

impl Proposers {
    pub fn new(kinds: &[Proposer]) -> Self {
        Proposers {
            kinds: kinds.to_vec(),
            placers: kinds.iter().map(|k| k.build()).collect(),
        }
    }
}

/// The workload's task mix as seen so far (jobs that have been pending at some decision), for
/// the fragmentation features: no knowledge of jobs yet to arrive.
#[derive(Debug, Clone, Default)]
pub struct OnlineMix {
    /// `seen[id.index()]`: the job has been counted (job ids are dense trace indices).
    seen: Vec<bool>,
    counts: MixCounts,
    mix: Option<TaskMix>,
}

impl OnlineMix {
    fn observe(&mut self, ctx: &DecisionContext<'_>) {
        for p in ctx.pending() {
            let i = p.spec.id.index();
            if i >= self.seen.len() {
                self.seen.resize(i + 1, false);
            }
            if !std::mem::replace(&mut self.seen[i], true) && p.spec.task.gpus > 0 {
                self.counts.add(&p.spec.task, p.spec.tasks);
                self.mix = None;
            }
        }
    }
    fn mix(&mut self) -> &TaskMix {
        self.mix.get_or_insert_with(|| self.counts.mix())
    }
}

/// One legal non-wait action: preempt `preemptions` (empty for a plain placement), then place.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub preemptions: Vec<JobId>,
    pub placement: Placement,
    pub stats: CandidateStats,
}

/// The stats of placing pending job `p` (at `position` in the queue) on `nodes`; the
/// after-placement and victim fields are left for the caller.
fn job_stats(p: &PendingJob<'_>, position: usize, nodes: usize, min_nodes: u64) -> CandidateStats {
    CandidateStats {
        gpus_total: p.spec.gpus_total(),
        gpu_share_milli: p.spec.task.gpu_milli,
        tasks: p.spec.tasks,
        cpu_milli_per_task: p.spec.task.cpu_milli,
        gpu_milli_total: p.spec.gpu_milli_total(),
        waited: p.waited,
        estimate: p.spec.estimate,
        attained_ms: p.runtime.attained_ms,
        preemptions: p.runtime.preemptions,
        priority: p.spec.priority,
        queue_position: position,
        nodes_used: nodes,
        cross_node: nodes as u64 > min_nodes,
        ..CandidateStats::default()
    }
}

/// The candidates of a decision point and its global features.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionPoint {
    pub candidates: Vec<Candidate>,
    pub global: [f32; GLOBAL_WIDTH],
}

/// Measures a tentative placement on `nodes` (free fractions after it), undoes the plan back
/// to `mark`, and returns the change of those nodes' fragmentation against the cluster as it
/// was at `mark`, with the free fractions.
fn measure_and_undo(
    planner: &mut Planner<'_>,
    mark: PlanMark,
    mix: &TaskMix,
    nodes: &[NodeId],
) -> (f64, (f64, f64, f64)) {
    let frag = |planner: &Planner<'_>| -> f64 {
        nodes
            .iter()
            .map(|n| mix.node_fragment(planner.state(), *n))
            .sum()
    };
    let after = frag(planner);
    let free = free_after(planner.state(), nodes);
    planner.undo_to(mark);
    (after - frag(planner), free)
}

/// A proposer's tentative placement of a job, measured and undone: the placement, its
/// distinct nodes (ascending), the fragmentation change and the free fractions after it.
#[derive(Clone)]
struct Proposal {
    tasks: Vec<TaskPlacement>,
    nodes: Vec<NodeId>,
    frag_delta: f64,
    free: (f64, f64, f64),
}

/// What decides a proposer's placement besides the cluster: the gang's shape.
fn same_shape(a: &JobSpec, b: &JobSpec) -> bool {
    a.task == b.task && a.tasks == b.tasks && a.gpu_types == b.gpu_types
}

/// Places `job` with `placer` on the planner, measures and undoes it (`None`: it does not fit).
fn propose(
    planner: &mut Planner<'_>,
    placer: &mut dyn Placer,
    mix: &TaskMix,
    job: &JobSpec,
) -> Option<Proposal> {
    let mark = planner.mark();
    let tasks = placer.place(planner, job)?;
    let mut nodes: Vec<NodeId> = tasks.iter().map(|t| t.node).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let (frag_delta, free) = measure_and_undo(planner, mark, mix, &nodes);
    Some(Proposal {
        tasks,
        nodes,
        frag_delta,
        free,
    })
}

/// Free fractions of `nodes` in `state`: (mean GPU, least GPU, mean CPU).
fn free_after(state: &ClusterState, nodes: &[NodeId]) -> (f64, f64, f64) {
    let mut gpu_sum = 0.0;
    let mut gpu_min = f64::INFINITY;
    let mut cpu_sum = 0.0;
    for n in nodes {
        let spec = state.spec().node(*n);
        let cap = spec.gpus as f64 * GPU_MILLI as f64;
        let g = if cap > 0.0 {
            state.free_gpu_milli(*n) as f64 / cap
        } else {
            0.0
        };
        gpu_sum += g;
        gpu_min = gpu_min.min(g);
        cpu_sum += if spec.cpu_milli > 0 {
            state.cpu_free(*n) as f64 / spec.cpu_milli as f64
        } else {
            0.0
        };
    }
    let k = nodes.len().max(1) as f64;
    (gpu_sum / k, gpu_min.clamp(0.0, 1.0), cpu_sum / k)
}

/// Enumerates at most `limit` candidates for the first `jobs_considered` pending jobs.
/// `placed_now` and `elapsed` feed the global features.
pub fn enumerate(
    ctx: &DecisionContext<'_>,
    proposers: &mut Proposers,
    mix: &mut OnlineMix,
    featurizer: &Featurizer,
    limit: usize,
    placed_now: u32,
    elapsed: SimTime,
) -> DecisionPoint {
    mix.observe(ctx);
    for p in &mut proposers.placers {
        p.observe(ctx);
    }
    let mix = mix.mix();
    let max_gpus_per_node = {
        let cluster = ctx.cluster();
        cluster
            .spec()
            .nodes
            .iter()
            .map(|n| u64::from(n.gpus))
            .max()
            .unwrap_or(1)
            .max(1)
    };
    let global = {
        let cluster = ctx.cluster();
        let frag: f64 = cluster
            .spec()
            .node_ids()
            .map(|n| mix.node_fragment(&cluster, n))
            .sum();
        featurizer.global_row(&GlobalStats {
            now: ctx.now(),
            pending: ctx.pending_len(),
            running: cluster.running().len(),
            alloc_gpu_milli: cluster.allocated_gpu_milli(),
            alloc_cpu_milli: cluster.allocated_cpu_milli(),
            frag_milli: frag,
            pending_gpus: ctx.pending().map(|p| p.spec.gpus_total()).sum(),
            placed_now,
            oldest_wait: ctx.pending().next().map_or(SimTime::ZERO, |p| p.waited),
            elapsed,
        })
    };
    let mut candidates: Vec<Candidate> = Vec::new();
    let mut planner = ctx.planner();
    // Each proposer's answer per gang shape at this decision point. Every proposal is undone
    // before the next, so the planner is back at the same cluster for each, and the proposers
    // are deterministic in the cluster and the shape (the mix they read is fixed once observed
    // above): jobs of one shape get the same placement, measured once.
    let mut answers: Vec<(&JobSpec, usize, Option<Proposal>)> = Vec::new();
    'jobs: for (position, p) in ctx.pending().take(featurizer.jobs_considered).enumerate() {
        let mut seen: Vec<(Vec<NodeId>, usize)> = Vec::new();
        for (k, (kind, placer)) in proposers
            .kinds
            .iter()
            .zip(&mut proposers.placers)
            .enumerate()
        {
            let known = answers
                .iter()
                .find(|(job, at, _)| *at == k && same_shape(job, p.spec));
            let proposal = match known {
                Some((_, _, answer)) => answer.clone(),
                None => {
                    let answer = propose(&mut planner, placer.as_mut(), mix, p.spec);
                    answers.push((p.spec, k, answer.clone()));
                    answer
                }
            };
            let Some(Proposal {
                tasks,
                nodes,
                frag_delta,
                free: (gpu_mean, gpu_min, cpu_mean),
            }) = proposal
            else {
                continue;
            };
            if let Some((_, i)) = seen.iter().find(|(n, _)| *n == nodes) {
                candidates[*i].stats.proposed_by |= kind.flag();
                continue;
            }
            let min_nodes = p.spec.gpus_total().div_ceil(max_gpus_per_node).max(1);
            seen.push((nodes.clone(), candidates.len()));
            candidates.push(Candidate {
                preemptions: Vec::new(),
                placement: Placement {
                    job: p.spec.id,
                    tasks,
                },
                stats: CandidateStats {
                    gpu_free_after_mean: gpu_mean,
                    gpu_free_after_min: gpu_min,
                    cpu_free_after_mean: cpu_mean,
                    frag_delta_milli: frag_delta,
                    proposed_by: kind.flag(),
                    ..job_stats(&p, position, nodes.len(), min_nodes)
                },
            });
            if candidates.len() >= limit {
                break 'jobs;
            }
        }
        if !seen.is_empty() {
            continue;
        }
        let (Some(kind), Some(placer)) = (proposers.kinds.first(), proposers.placers.first_mut())
        else {
            continue;
        };
        let Some(victims) = minimal_victims(ctx, &mut planner, placer.as_mut(), p.spec) else {
            continue;
        };
        let mark = planner.mark();
        for v in &victims {
            planner.free_running(*v);
        }
        let Some(tasks) = placer.place(&mut planner, p.spec) else {
            planner.undo_to(mark);
            continue;
        };
        let mut nodes: Vec<NodeId> = tasks.iter().map(|t| t.node).collect();
        nodes.sort_unstable();
        nodes.dedup();
        let (frag_delta, (gpu_mean, gpu_min, cpu_mean)) =
            measure_and_undo(&mut planner, mark, mix, &nodes);
        let min_nodes = p.spec.gpus_total().div_ceil(max_gpus_per_node).max(1);
        let victim_gpus = victims.iter().map(|v| ctx.job(*v).gpus_total()).sum();
        candidates.push(Candidate {
            placement: Placement {
                job: p.spec.id,
                tasks,
            },
            stats: CandidateStats {
                gpu_free_after_mean: gpu_mean,
                gpu_free_after_min: gpu_min,
                cpu_free_after_mean: cpu_mean,
                frag_delta_milli: frag_delta,
                proposed_by: kind.flag(),
                victims: victims.len(),
                victim_gpus,
                ..job_stats(&p, position, nodes.len(), min_nodes)
            },
            preemptions: victims,
        });
        if candidates.len() >= limit {
            break;
        }
    }
    DecisionPoint { candidates, global }
}
