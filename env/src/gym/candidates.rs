//! Candidate actions at a decision point: (pending job, placement) pairs proposed by
//! heuristic placers, deduplicated by node set, each with its feature row.
//!
//! The shortlist: of `jobs_considered` jobs, a quarter are the oldest pending jobs (submit
//! order), a quarter the first in Tiresias' order (by queue of attained GPU service, starved
//! jobs promoted back to the first queue, FIFO within a queue: `snapshot_queue`), a quarter
//! the pending jobs with the shortest predicted remaining time among the others (the user's
//! estimate, else the online duration predictor that `sjf` uses, learned from jobs seen to
//! finish), the rest the first by Gittins index per GPU (the `gittins` ordering's, over the
//! run times of jobs seen to finish), so the head of the queue, the least served, the short
//! jobs behind it and the Gittins policy's pick can all be chosen. Only jobs that get a
//! candidate count: each quarter walks its ranking past jobs
//! that can neither start nor preempt, as Tiresias' greedy pass skips a job that does not
//! fit, so that in an overloaded cluster big jobs stuck at the head do not hide the small ones
//! that could run. For each shortlisted job every configured proposer places the job
//! tentatively on the live cluster through the decision's planner
//! (then undoes it), so a candidate is feasible now by construction and its features can read
//! the cluster as it would be after the placement.
//!
//! A considered job that no proposer can place gets at most one preemption candidate: the
//! minimal victim set of the `preempt` modifier (`minimal_victims`: preemptible running jobs of
//! a strictly lower class, QoS then priority) found with the first proposer, and that
//! proposer's placement once the victims are freed; failing that, with `las_preemption` on,
//! the victims Tiresias' LAS preemption would free for it (running jobs of a strictly more
//! served queue, most served first); failing that, with `gittins_preemption` on, the victims
//! `gittins-preempt` would free (running jobs of an index lower by its margin, lowest first).
//! Taking it applies one decision that
//! preempts the victims, then places the job. Works on a `DecisionContext` alone, so the
//! decision service can enumerate the same way.

use super::features::{
    CANDIDATE_WIDTH, CandidateStats, Featurizer, GLOBAL_WIDTH, GlobalStats, MAX_CANDIDATES,
    Observation,
};
use crate::cluster::ClusterSpec;
use crate::cluster::{ClusterState, FitStrategy, TaskPlacement};
use crate::constraint::Constraints;
use crate::job::{JobSpec, Qos, TaskRequest};
use crate::metrics::{FragmentMemo, MixCounts, TaskMix};
use crate::policy::order::{
    Atoms, DurationPredictor, GittinsConfig, GittinsEstimator, Score, TiresiasConfig, gpu_class,
    processors, snapshot_queue,
};
use crate::policy::place::{Fgd, MostAllocated};
use crate::policy::{
    DecisionContext, GittinsPreempt, LasPreempt, PendingJob, Placement, Placer, PlanMark, Planner,
    Rated, StrategyPlacer, VictimPools, minimal_victims,
};
use crate::units::{GPU_MILLI, GpuModelId, JobId, NodeId, SimTime};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;

/// A hash map with a fast, fixed (deterministic) hasher, for small keys.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::FixedState>;

/// A heuristic that proposes placements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Proposer {
    BestFit,
    WorstFit,
    MostAllocated,
    Fgd,
}

/// A proposer's placer, copied with what it has learned when an enumerator is (a fork's).
trait ProposerPlacer: Placer {
    fn boxed_clone(&self) -> Box<dyn ProposerPlacer>;
}

impl<T: Placer + Clone + 'static> ProposerPlacer for T {
    fn boxed_clone(&self) -> Box<dyn ProposerPlacer> {
        Box::new(self.clone())
    }
}

impl Proposer {
    fn build(self) -> Box<dyn ProposerPlacer> {
        match self {
            // Each placing typed jobs only where the table rates the placement (else as one
            // gang on one node), as the heuristics do.
            Proposer::BestFit => Box::new(Rated::new(StrategyPlacer::new(
                "best-fit",
                FitStrategy::BestFit,
            ))),
            Proposer::WorstFit => Box::new(Rated::new(StrategyPlacer::new(
                "worst-fit",
                FitStrategy::WorstFit,
            ))),
            Proposer::MostAllocated => Box::new(Rated::new(MostAllocated)),
            Proposer::Fgd => Box::new(Rated::new(Fgd::default())),
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
struct Proposers {
    kinds: Vec<Proposer>,
    placers: Vec<Box<dyn ProposerPlacer>>,
}

impl Clone for Proposers {
    fn clone(&self) -> Self {
        Proposers {
            kinds: self.kinds.clone(),
            placers: self.placers.iter().map(|p| p.boxed_clone()).collect(),
        }
    }
}

impl std::fmt::Debug for Proposers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(&self.kinds).finish()
    }
}

impl Proposers {
    fn new(kinds: &[Proposer]) -> Self {
        Proposers {
            kinds: kinds.to_vec(),
            placers: kinds.iter().map(|k| k.build()).collect(),
        }
    }
}

/// The workload's task mix as seen so far (jobs that have been pending at some decision), for
/// the fragmentation features: no knowledge of jobs yet to arrive.
#[derive(Debug, Clone, Default)]
struct OnlineMix {
    /// By job id: already counted.
    seen: Vec<bool>,
    /// Every job below this id is in `seen`: `observe` looks at the queue from here on.
    seen_below: u32,
    counts: MixCounts,
    mix: Option<TaskMix>,
    /// Node fragments under `mix` (cleared with it), for the cluster's fragmentation feature.
    memo: FragmentMemo,
}

impl OnlineMix {
    fn observe(&mut self, ctx: &DecisionContext<'_>) {
        for p in ctx.pending_from(JobId(self.seen_below)) {
            let i = p.spec.id.index();
            if i >= self.seen.len() {
                self.seen.resize(i + 1, false);
            }
            let new = !std::mem::replace(&mut self.seen[i], true);
            if new && p.spec.task.gpus > 0 {
                self.counts.add(&p.spec.task, p.spec.tasks);
                self.mix = None;
                self.memo.clear();
            }
        }
        self.seen_below = crate::policy::seen_below(&self.seen, self.seen_below);
    }
    /// The mix and its memo of node fragments.
    fn mix(&mut self) -> (&TaskMix, &mut FragmentMemo) {
        let counts = &self.counts;
        (self.mix.get_or_insert_with(|| counts.mix()), &mut self.memo)
    }
}

/// What taking a [`Candidate`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CandidateKind {
    /// Preempt `preemptions` (none for a plain start), then start the pending job.
    Start,
    /// Move running elastic job `placement.job` to `placement.tasks` (grown or shrunk).
    Resize,
    /// Start the pending job on the GPU running job `host` holds alone, sharing it.
    Share { host: JobId },
}

/// One legal non-wait action: see [`CandidateKind`].
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub preemptions: Vec<JobId>,
    pub placement: Placement,
    pub stats: CandidateStats,
    pub kind: CandidateKind,
}

impl Candidate {
    /// The decision that takes this candidate alone.
    pub fn decision(&self) -> crate::policy::Decision {
        let one = vec![self.placement.clone()];
        match self.kind {
            CandidateKind::Start => crate::policy::Decision {
                preemptions: self.preemptions.clone(),
                placements: one,
                ..crate::policy::Decision::default()
            },
            CandidateKind::Resize => crate::policy::Decision {
                resizes: one,
                ..crate::policy::Decision::default()
            },
            CandidateKind::Share { .. } => crate::policy::Decision {
                shares: one,
                ..crate::policy::Decision::default()
            },
        }
    }

    pub fn is_resize(&self) -> bool {
        self.kind == CandidateKind::Resize
    }

    /// The job it would share a GPU with, for a share.
    pub fn host(&self) -> Option<JobId> {
        match self.kind {
            CandidateKind::Share { host } => Some(host),
            _ => None,
        }
    }
}

/// A shortlisted pending job: its submit-order rank, predicted remaining time and rank by it.
#[derive(Clone, Copy)]
struct Listed<'a> {
    p: PendingJob<'a>,
    position: usize,
    remaining: SimTime,
    shortness_rank: usize,
    pending: usize,
    /// Its Tiresias queue and whether it got there by promotion (`snapshot_queue`).
    las_queue: (usize, bool),
    /// Its Gittins index per GPU, its rank by it, and its chance to finish within an hour.
    gittins: f64,
    gittins_rank: usize,
    finish_within_hour: f64,
}

/// The stats of placing shortlisted job `l` on `nodes`; the after-placement and victim fields
/// are left for the caller.
fn job_stats(l: &Listed<'_>, nodes: usize, min_nodes: u64) -> CandidateStats {
    let (p, position) = (&l.p, l.position);
    CandidateStats {
        predicted_remaining: l.remaining,
        shortness_rank: l.shortness_rank,
        pending: l.pending,
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
        las_queue: l.las_queue.0,
        promoted: l.las_queue.1,
        gittins: l.gittins,
        gittins_rank: l.gittins_rank,
        finish_within_hour: l.finish_within_hour,
        idle: p.idle(),
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
    /// Waiting is not allowed here, and some candidate can start: the environment is
    /// work-conserving and nothing would be running (waiting could only stall or idle the
    /// cluster), or a candidate's job has been held for `max_hold_s` already.
    pub must_act: bool,
}

impl DecisionPoint {
    /// The observation of this point: a row per candidate (legal), padding, and the wait row.
    /// With `live == false` (the episode ended here) only the wait row is legal.
    pub fn observation(&self, featurizer: &Featurizer, live: bool) -> Observation {
        use super::features::WAIT_ACTION;
        let rows = if live { self.candidates.len() } else { 0 };
        debug_assert!(rows <= WAIT_ACTION, "the wait row is never a candidate's");
        let rows = rows.min(WAIT_ACTION);
        // Written once, row by row: no zeroed buffer overwritten afterwards.
        let mut candidates = Vec::with_capacity(MAX_CANDIDATES * CANDIDATE_WIDTH);
        for c in &self.candidates[..rows] {
            candidates.extend_from_slice(&featurizer.candidate_row(&c.stats));
        }
        candidates.resize(WAIT_ACTION * CANDIDATE_WIDTH, 0.0);
        // Where waiting is masked, its row is zero padding like any other masked row.
        let wait = !(self.must_act && rows > 0);
        if wait {
            candidates.extend_from_slice(&featurizer.wait_row());
        } else {
            candidates.resize(MAX_CANDIDATES * CANDIDATE_WIDTH, 0.0);
        }
        let mut mask = vec![false; MAX_CANDIDATES];
        mask[..rows].fill(true);
        mask[WAIT_ACTION] = wait;
        Observation {
            candidates,
            global: self.global.to_vec(),
            mask,
        }
    }
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

/// One proposer's answer for a job shape: its placement, the distinct nodes it uses, the
/// fragmentation change and the free fractions after it.
#[derive(Debug, Clone)]
struct Proposal {
    tasks: Vec<TaskPlacement>,
    nodes: Vec<NodeId>,
    frag_delta: f64,
    free: (f64, f64, f64),
}

/// What a job asks for, as far as placement goes: jobs of one shape get the same answer from
/// every proposer.
type Shape<'a> = (TaskRequest, u32, &'a [String], &'a Constraints);

fn shape(job: &JobSpec) -> Shape<'_> {
    (job.task, job.tasks, &job.gpu_types, &job.constraints)
}

/// The proposers' answers by job shape, shared within a decision point: jobs of one shape get
/// the same answer from every proposer (it depends only on the cluster and the shape, and
/// every answer is undone before the next). Shapes are numbered once per job (job ids are an
/// episode's, as for `Enumerator::predicted`), so a decision point looks answers up by index,
/// not by hashing the shape; an answer of an earlier decision point is told apart by its
/// stamp.
#[derive(Debug, Default)]
struct ShapeAnswers {
    /// By job id: its shape's number (`None` until first asked).
    of_job: Vec<Option<usize>>,
    numbers: FastMap<(TaskRequest, u32, Vec<String>, Constraints), usize>,
    /// The decision point being enumerated: bumped by `next_point`, never 0 while in use.
    point: u64,
    /// By shape number x proposer: the decision point the answer belongs to, and the answer.
    slots: Vec<(u64, Option<Proposal>)>,
}

impl ShapeAnswers {
    fn next_point(&mut self) {
        self.point += 1;
    }

    /// The number of `job`'s shape (numbered now if it was not), and where its answers start
    /// in `slots`, `kinds` of them (grown as needed).
    fn base(&mut self, job: &JobSpec, kinds: usize) -> (usize, usize) {
        let i = job.id.index();
        if i >= self.of_job.len() {
            self.of_job.resize(i + 1, None);
        }
        let number = match self.of_job[i] {
            Some(n) => n,
            None => {
                let next = self.numbers.len();
                let (task, tasks, types, constraints) = shape(job);
                let n = *self
                    .numbers
                    .entry((task, tasks, types.to_vec(), constraints.clone()))
                    .or_insert(next);
                self.of_job[i] = Some(n);
                n
            }
        };
        let base = number * kinds;
        if self.slots.len() < base + kinds {
            self.slots.resize_with(base + kinds, || (0, None));
        }
        (number, base)
    }
}

/// What `placer` proposes for `job` on the planner's cluster as it is now, measured against
/// the cluster at `mark` (earlier when victims were freed since), then undone back to `mark`
/// whether or not the job fits.
fn propose(
    planner: &mut Planner<'_>,
    mark: PlanMark,
    placer: &mut dyn Placer,
    mix: &TaskMix,
    job: &JobSpec,
) -> Option<Proposal> {
    let Some(tasks) = placer.place(planner, job) else {
        planner.undo_to(mark);
        return None;
    };
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

/// The candidate of placing shortlisted `listed` as `proposal` says, found by the proposer
/// with flag `flag`, after preempting `preemptions`.
#[allow(clippy::too_many_arguments)]
fn candidate(
    ctx: &DecisionContext<'_>,
    gittins: &GittinsEstimator,
    listed: &Listed<'_>,
    proposal: &Proposal,
    flag: u8,
    min_nodes: u64,
    preemptions: Vec<JobId>,
    rates: &Rates<'_>,
) -> Candidate {
    let job = listed.p.spec;
    let tasks = u32::try_from(proposal.tasks.len()).unwrap_or(u32::MAX);
    let (speed, rate_vs_best, rates_known) = rates.of(ctx, job, &proposal.nodes, tasks);
    let (gpu_mean, gpu_min, cpu_mean) = proposal.free;
    let highest_victim = preemptions
        .iter()
        .map(|v| gittins.priority(ctx.job(*v), ctx.attained_ms(*v)))
        .fold(0.0, f64::max);
    let victim_index_ratio = if highest_victim > 0.0 {
        listed.gittins / highest_victim
    } else {
        0.0
    };
    Candidate {
        placement: Placement {
            job: listed.p.spec.id,
            tasks: proposal.tasks.clone(),
        },
        stats: CandidateStats {
            gpu_free_after_mean: gpu_mean,
            gpu_free_after_min: gpu_min,
            cpu_free_after_mean: cpu_mean,
            frag_delta_milli: proposal.frag_delta,
            proposed_by: flag,
            victims: preemptions.len(),
            victim_gpus: preemptions.iter().map(|v| ctx.job(*v).gpus_total()).sum(),
            victim_index_ratio,
            speed,
            rate_vs_best,
            rates_known,
            size_ratio: f64::from(tasks) / f64::from(job.tasks.max(1)),
            tasks,
            gpus_total: u64::from(tasks) * u64::from(job.task.gpus),
            gpu_milli_total: u64::from(tasks) * job.task.gpu_milli_total(),
            ..job_stats(listed, proposal.nodes.len(), min_nodes)
        },
        preemptions,
        kind: CandidateKind::Start,
    }
}

/// How a candidate's speeds are read: the throughput table's for a typed job (unless
/// hidden), else the GPU models' catalog speeds (what the simulator runs an untyped job at).
struct Rates<'s> {
    spec: &'s ClusterSpec,
    hide: bool,
    /// Bit i: some node has GPU model i.
    present: u64,
}

impl<'s> Rates<'s> {
    fn new(spec: &'s ClusterSpec, hide: bool) -> Self {
        let present = spec
            .nodes
            .iter()
            .filter_map(|n| n.gpu_model)
            .fold(0u64, |mask, m| mask | (1u64 << m.index()));
        Rates {
            spec,
            hide,
            present,
        }
    }

    /// The GPU models of the cluster `job` may use, fastest first by catalog speed.
    fn models_for(&self, job: &JobSpec) -> Vec<GpuModelId> {
        let mask = self.spec.model_mask(&job.gpu_types) & self.present;
        let mut models: Vec<GpuModelId> = (0..self.spec.models.len())
            .filter(|i| mask & (1u64 << i) != 0)
            .map(|i| GpuModelId(i as u32))
            .collect();
        models.sort_by(|a, b| {
            let speed = |m: &GpuModelId| self.spec.models[m.index()].speed;
            speed(b).total_cmp(&speed(a)).then(a.cmp(b))
        });
        models
    }

    /// `job`'s speed on `nodes` at `tasks` tasks (the slowest model among them), that speed
    /// over its speed on the fastest model it may use in the cluster, and whether both are
    /// the table's. Called for every candidate: it allocates nothing.
    fn of(
        &self,
        ctx: &DecisionContext<'_>,
        job: &JobSpec,
        nodes: &[NodeId],
        tasks: u32,
    ) -> (f64, f64, bool) {
        let models = || {
            nodes
                .iter()
                .filter_map(|n| self.spec.nodes.get(n.index())?.gpu_model)
        };
        if models().next().is_none() {
            return (0.0, 0.0, false);
        }
        let gpus = tasks.saturating_mul(job.task.gpus);
        if !self.hide
            && let Some(view) = ctx.throughputs()
            && let Some((_, best)) = view.best_model(job)
        {
            let here = models()
                .map(|m| view.speed(job, m, gpus))
                .try_fold(f64::INFINITY, |slowest, s| Some(slowest.min(s?)));
            if let Some(here) = here.filter(|s| s.is_finite()) {
                return (here, here / best, true);
            }
        }
        let catalog = |m: GpuModelId| self.spec.models.get(m.index()).map_or(1.0, |g| g.speed);
        let here = models().map(catalog).fold(f64::INFINITY, f64::min);
        let mask = self.spec.model_mask(&job.gpu_types) & self.present;
        let best = (0..self.spec.models.len())
            .filter(|i| mask & (1u64 << i) != 0)
            .map(|i| catalog(GpuModelId(i as u32)))
            .fold(here, f64::max);
        (here, here / best, false)
    }
}

/// `job` as a placer sees it on GPU model `model` only (`None`: any it may use), at `tasks`
/// tasks: the same request otherwise.
fn restrict(spec: &ClusterSpec, job: &JobSpec, model: Option<GpuModelId>, tasks: u32) -> JobSpec {
    let mut j = job.clone();
    if let Some(m) = model
        && let Some(g) = spec.models.get(m.index())
    {
        j.gpu_types = vec![g.name.clone()];
    }
    j.tasks = tasks;
    j
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

/// What a decision built job by job through one planner has taken so far at this instant:
/// jobs placed (no longer pending) and jobs preempted (no longer running), in the planner but
/// not yet in the cluster the context shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Taken {
    pub placed: Vec<JobId>,
    pub preempted: Vec<JobId>,
    /// Running jobs resized (each at most once a decision, and never then a victim).
    pub resized: Vec<JobId>,
    /// Running jobs a share placed a job beside (each at most once, never then a victim).
    pub hosts: Vec<JobId>,
    /// Whether a shrink was taken: the GPUs it frees are for the jobs waiting, so no grow is
    /// offered for the rest of the decision (a shrink and a grow together only move GPUs
    /// from one running job to another, each paying a restart).
    pub shrunk: bool,
    /// Whether a grow was taken: no shrink is then offered in this decision, for the same
    /// reason.
    pub grown: bool,
}

impl Taken {
    /// Records that `c` was chosen.
    pub fn take(&mut self, c: &Candidate) {
        match c.kind {
            CandidateKind::Resize => {
                self.resized.push(c.placement.job);
                if c.stats.size_ratio < 1.0 {
                    self.shrunk = true;
                } else {
                    self.grown = true;
                }
            }
            CandidateKind::Share { host } => {
                self.placed.push(c.placement.job);
                self.hosts.push(host);
            }
            CandidateKind::Start => {
                self.placed.push(c.placement.job);
                self.preempted.extend_from_slice(&c.preemptions);
            }
        }
    }

    /// Records `c` after the simulator applied it (the environment's steps at one instant,
    /// each applied as it is chosen): what the cluster does not show, which running jobs
    /// were resized (and which way) or hosted a share. The placements and preemptions it
    /// shows are not recorded again.
    pub fn take_applied(&mut self, c: &Candidate) {
        match c.kind {
            CandidateKind::Resize => self.take(c),
            CandidateKind::Share { host } => self.hosts.push(host),
            CandidateKind::Start => {}
        }
    }

    /// Whether `c` may still be taken after what was: never a grow and a shrink in one
    /// decision (see [`Self::shrunk`]).
    pub fn allows_resize(&self, c: &Candidate) -> bool {
        match c.kind {
            CandidateKind::Resize if c.stats.size_ratio < 1.0 => !self.grown,
            CandidateKind::Resize => !self.shrunk,
            _ => true,
        }
    }

    /// Whether running job `job` was touched by what was taken (preempted, resized or made a
    /// host): it may not be touched again in this decision.
    pub fn touches(&self, job: JobId) -> bool {
        self.preempted.contains(&job) || self.resized.contains(&job) || self.hosts.contains(&job)
    }

    pub fn is_empty(&self) -> bool {
        self.placed.is_empty()
            && self.preempted.is_empty()
            && self.resized.is_empty()
            && self.hosts.is_empty()
    }
}

/// Builds decision points: the proposers, the online task mix and the featurizer of one
/// episode (or one policy's life). The environment and `LearnedPolicy` share it, so a model
/// sees the same candidates and rows in training and in service. A clone (a fork's) keeps
/// what it has learned and starts its caches afresh.
#[derive(Debug)]
pub struct Enumerator {
    proposers: Proposers,
    las: Option<LasPreempt>,
    /// The Gittins indices (features, shortlist), and its victims when `gittins_preemption`.
    gittins: GittinsPreempt,
    /// What the shortlist read of `gittins`' estimator, while it holds.
    gittins_memo: GittinsMemo,
    gittins_preemption: bool,
    contention: Contention,
    work_conserving: bool,
    max_hold: Option<SimTime>,
    /// By job id: the predicted total run time, valid while the predictor has learned from
    /// `predicted_at` samples (it changes only when a job finishes).
    predicted: Vec<Option<SimTime>>,
    predicted_at: u64,
    mix: OnlineMix,
    durations: DurationPredictor,
    featurizer: Featurizer,
    limit: usize,
    /// Tiresias' queues (default thresholds and knob) for the shortlist and the features.
    tiresias: LasQueues,
    /// The proposers' answers by job shape (kept across calls for their allocations; each
    /// decision point uses only its own).
    answers: ShapeAnswers,
    /// The victim searches' ranked running jobs, kept through the points of one decision
    /// (`observe` starts them afresh).
    pools: VictimPools,
    /// Placements on each GPU model, and smaller starts of elastic jobs (`model_candidates`).
    model_candidates: bool,
    /// Speeds from the catalog only (`hide_rates`).
    hide_rates: bool,
}

impl Clone for Enumerator {
    fn clone(&self) -> Self {
        Enumerator {
            proposers: self.proposers.clone(),
            las: self.las.clone(),
            gittins: self.gittins.clone(),
            gittins_memo: self.gittins_memo.clone(),
            gittins_preemption: self.gittins_preemption,
            contention: self.contention.clone(),
            work_conserving: self.work_conserving,
            max_hold: self.max_hold,
            predicted: self.predicted.clone(),
            predicted_at: self.predicted_at,
            mix: self.mix.clone(),
            durations: self.durations.clone(),
            featurizer: self.featurizer,
            limit: self.limit,
            tiresias: self.tiresias.clone(),
            answers: ShapeAnswers::default(),
            pools: VictimPools::default(),
            model_candidates: self.model_candidates,
            hide_rates: self.hide_rates,
        }
    }
}

/// The Tiresias settings the shortlist and features use.
#[derive(Debug, Clone)]
struct LasQueues {
    thresholds: Vec<u128>,
    knob: f64,
}

impl LasQueues {
    fn new() -> Self {
        let cfg = TiresiasConfig::default();
        LasQueues {
            thresholds: cfg
                .thresholds_milli_ms()
                .expect("the default Tiresias thresholds are positive and increasing"),
            knob: cfg.promote_knob,
        }
    }
}

impl Enumerator {
    /// At most `limit` candidates per decision point from `proposers`.
    pub fn new(proposers: &[Proposer], featurizer: Featurizer, limit: usize) -> Self {
        Enumerator {
            proposers: Proposers::new(proposers),
            las: None,
            gittins: GittinsPreempt::new(&GittinsConfig::schema7())
                .expect("the default Gittins config is valid"),
            gittins_memo: GittinsMemo::default(),
            gittins_preemption: false,
            contention: Contention::default(),
            work_conserving: false,
            max_hold: None,
            predicted: Vec::new(),
            predicted_at: 0,
            mix: OnlineMix::default(),
            durations: DurationPredictor::new(),
            featurizer,
            limit,
            tiresias: LasQueues::new(),
            answers: ShapeAnswers::default(),
            pools: VictimPools::default(),
            model_candidates: false,
            hide_rates: false,
        }
    }

    /// As `EnvConfig` says: its proposers, and LAS preemption candidates when
    /// `las_preemption` is on (Tiresias' queues with their default thresholds).
    pub fn from_config(cfg: &super::EnvConfig, featurizer: Featurizer, limit: usize) -> Self {
        let mut e = Self::new(&cfg.proposers, featurizer, limit);
        if cfg.las_preemption {
            e.las = LasPreempt::new(&TiresiasConfig::default()).ok();
        }
        e.gittins_preemption = cfg.gittins_preemption;
        e.work_conserving = cfg.work_conserving;
        e.max_hold = cfg.max_hold_s.and_then(SimTime::from_secs_f64);
        e.model_candidates = cfg.model_candidates;
        e.hide_rates = cfg.hide_rates;
        e
    }

    /// Forgets the victim pools kept through the decision (tests compare against fresh ones).
    #[cfg(test)]
    pub(crate) fn forget_pools(&mut self) {
        self.pools = VictimPools::default();
    }

    pub fn featurizer(&self) -> &Featurizer {
        &self.featurizer
    }

    /// Where the proposer behind a candidate would place `job` on the planner's cluster as it
    /// is now (the first of this enumerator's proposers with a bit of `stats.proposed_by`;
    /// best fit within its GPU model for a per-model candidate, at its size for an elastic
    /// job started smaller); nothing changes on the planner. For a policy that takes several
    /// candidates of one decision point: a later one is placed again on the cluster the
    /// earlier ones left.
    pub fn propose_again(
        &mut self,
        planner: &mut Planner<'_>,
        job: &JobSpec,
        stats: &CandidateStats,
    ) -> Option<Vec<TaskPlacement>> {
        let mark = planner.mark();
        let tasks = if stats.model.is_some() || stats.tasks != job.tasks {
            let restricted = restrict(planner.state().spec(), job, stats.model, stats.tasks);
            StrategyPlacer::new("best-fit", FitStrategy::BestFit).place(planner, &restricted)
        } else {
            let k = self
                .proposers
                .kinds
                .iter()
                .position(|kind| kind.flag() & stats.proposed_by != 0)?;
            let placer = self.proposers.placers.get_mut(k)?;
            placer.place(planner, job)
        };
        planner.undo_to(mark);
        tasks
    }

    /// Lets the proposers and the task mix see the jobs of this decision point. Call it once
    /// per decision before taking a planner from `ctx` (`enumerate` does it itself).
    pub fn observe(&mut self, ctx: &DecisionContext<'_>) {
        self.mix.observe(ctx);
        self.durations.observe(ctx);
        self.gittins.observe(ctx);
        self.contention.observe(ctx);
        if self.durations.samples() != self.predicted_at {
            self.predicted_at = self.durations.samples();
            self.predicted.iter_mut().for_each(|p| *p = None);
        }
        for p in ctx.pending() {
            let i = p.spec.id.index();
            if i >= self.predicted.len() {
                self.predicted.resize(i + 1, None);
            }
            if self.predicted[i].is_none() {
                self.predicted[i] = Some(
                    p.spec
                        .estimate
                        .unwrap_or_else(|| self.durations.predict(p.spec)),
                );
            }
        }
        for p in &mut self.proposers.placers {
            p.observe(ctx);
        }
        self.pools = VictimPools::default();
    }

    /// The candidates now, on the cluster as the context shows it. `placed_now` (placements
    /// already made at this instant) and `elapsed` (time since the episode began) feed the
    /// global features.
    pub fn enumerate(
        &mut self,
        ctx: &DecisionContext<'_>,
        placed_now: u32,
        elapsed: SimTime,
    ) -> DecisionPoint {
        self.enumerate_after(ctx, &Taken::default(), placed_now, elapsed)
    }

    /// [`Self::enumerate`] after the choices in `applied` were applied at this instant
    /// ([`Taken::take_applied`]): no job is resized twice, nor grown and shrunk, in one.
    pub fn enumerate_after(
        &mut self,
        ctx: &DecisionContext<'_>,
        applied: &Taken,
        placed_now: u32,
        elapsed: SimTime,
    ) -> DecisionPoint {
        self.observe(ctx);
        let mut planner = ctx.planner();
        self.enumerate_in(ctx, &mut planner, applied, placed_now, elapsed)
    }

    /// The candidates on the cluster as `planner` holds it after the choices in `taken`
    /// (which the planner must already hold): for a policy that builds one decision job by
    /// job. Call `observe` first, once per decision. Leaves the planner as it found it.
    pub fn enumerate_in(
        &mut self,
        ctx: &DecisionContext<'_>,
        planner: &mut Planner<'_>,
        taken: &Taken,
        placed_now: u32,
        elapsed: SimTime,
    ) -> DecisionPoint {
        let (mix, memo) = self.mix.mix();
        // Never a victim: a job preempted at this instant (it is gone), nor one started at
        // it, by this decision or an earlier step of the instant. Offering those would let a
        // job preempt the job that just preempted it, at the same instant, without end: with
        // wait masked while any candidate exists, a policy could never leave the instant.
        let now = ctx.now();
        let mut exclude = taken.preempted.clone();
        exclude.extend_from_slice(&taken.placed);
        // Nor a job this decision resized or placed a guest beside (`Taken::touches`).
        exclude.extend_from_slice(&taken.resized);
        exclude.extend_from_slice(&taken.hosts);
        exclude.extend(
            planner
                .state()
                .running()
                .filter(|a| a.preemptible && ctx.runtime(a.job).run_start == Some(now))
                .map(|a| a.job),
        );
        self.pools.for_point(now, planner, &exclude);
        let parts = Parts {
            proposers: &mut self.proposers,
            answers: &mut self.answers,
            pools: &mut self.pools,
            las: self.las.as_ref(),
            gittins: &self.gittins,
            gittins_memo: &mut self.gittins_memo,
            gittins_preemption: self.gittins_preemption,
            contention: self.contention.mean(),
            mix,
            memo,
            durations: &self.durations,
            predicted: &self.predicted,
            featurizer: &self.featurizer,
            tiresias: &self.tiresias,
            limit: self.limit,
            placed_now,
            elapsed,
            model_candidates: self.model_candidates,
            hide_rates: self.hide_rates,
        };
        let mut point = candidates_in(ctx, planner, taken, parts);
        let idle = self.work_conserving && {
            let running = planner.state().running().len() + taken.placed.len();
            running <= taken.preempted.len()
        };
        // Only a job that could start without preempting anyone forces a choice: with
        // `max_hold_s = 0` counting preemption candidates too, an agent had to preempt whenever
        // LAS could, so every model trained that way preempted like LAS.
        let held_enough = self.max_hold.is_some_and(|h| {
            point
                .candidates
                .iter()
                .any(|c| c.preemptions.is_empty() && c.stats.waited >= h)
        });
        point.must_act = idle || held_enough;
        point
    }
}

/// The global stats of the cluster as `planner` holds it, the pending jobs being `pending`;
/// the caller fills in the fields about the episode (`placed_now`, `elapsed`, predictor).
fn global_stats(
    ctx: &DecisionContext<'_>,
    planner: &Planner<'_>,
    taken: &Taken,
    pending: &[PendingJob<'_>],
    mix: &TaskMix,
    memo: &mut FragmentMemo,
) -> GlobalStats {
    let cluster = planner.state();
    let frag = memo.cluster_fragment(mix, cluster);
    let running =
        (cluster.running().len() + taken.placed.len()).saturating_sub(taken.preempted.len());
    GlobalStats {
        now: ctx.now(),
        pending: pending.len(),
        running,
        alloc_gpu_milli: cluster.allocated_gpu_milli(),
        alloc_cpu_milli: cluster.allocated_cpu_milli(),
        frag_milli: frag,
        pending_gpus: pending.iter().map(|p| p.spec.gpus_total()).sum(),
        oldest_wait: pending.first().map_or(SimTime::ZERO, |p| p.waited),
        ..GlobalStats::default()
    }
}

/// What a pass of `candidates_in` works with, besides the context and the planner.
struct Parts<'e> {
    proposers: &'e mut Proposers,
    answers: &'e mut ShapeAnswers,
    /// Readied for this point (`VictimPools::for_point`).
    pools: &'e mut VictimPools,
    las: Option<&'e LasPreempt>,
    gittins: &'e GittinsPreempt,
    gittins_memo: &'e mut GittinsMemo,
    gittins_preemption: bool,
    contention: f64,
    mix: &'e TaskMix,
    memo: &'e mut FragmentMemo,
    durations: &'e DurationPredictor,
    /// By job id: cached predicted totals (see `Enumerator::predicted`).
    predicted: &'e [Option<SimTime>],
    featurizer: &'e Featurizer,
    tiresias: &'e LasQueues,
    limit: usize,
    placed_now: u32,
    elapsed: SimTime,
    model_candidates: bool,
    hide_rates: bool,
}

fn candidates_in(
    ctx: &DecisionContext<'_>,
    planner: &mut Planner<'_>,
    taken: &Taken,
    parts: Parts<'_>,
) -> DecisionPoint {
    let Parts {
        proposers,
        answers,
        pools,
        las,
        gittins,
        gittins_memo,
        gittins_preemption,
        contention,
        mix,
        memo,
        durations,
        predicted,
        featurizer,
        tiresias,
        limit,
        placed_now,
        elapsed,
        model_candidates,
        hide_rates,
    } = parts;
    let max_gpus_per_node = planner
        .state()
        .spec()
        .nodes
        .iter()
        .map(|n| u64::from(n.gpus))
        .max()
        .unwrap_or(1)
        .max(1);
    let pending: Vec<PendingJob<'_>> = ctx
        .pending()
        .filter(|p| !taken.placed.contains(&p.spec.id))
        .collect();
    let estimator = gittins.estimator();
    gittins_memo.follow(estimator);
    let (run_quantiles, index_trend) = gittins_memo.overall(estimator);
    let global = featurizer.global_row(&GlobalStats {
        placed_now,
        elapsed,
        predictor_samples: durations.samples(),
        run_quantiles,
        index_trend,
        contention,
        ..global_stats(ctx, planner, taken, &pending, mix, memo)
    });
    let ranked = rank(
        ctx,
        &pending,
        durations,
        predicted,
        tiresias,
        |job: &JobSpec, attained: u64| gittins_memo.view(estimator, job, attained),
        featurizer.jobs_considered,
    );
    // Sized for every proposer's answer for each job considered: no rehash on the way.
    let kinds = proposers.kinds.len();
    answers.next_point();
    let spec = Arc::clone(planner.state().spec_arc());
    let rates = Rates::new(&spec, hide_rates);
    let mut walk = Walk {
        rates: &rates,
        model_candidates,
        ctx,
        planner,
        proposers,
        las,
        gittins: gittins_preemption.then_some(gittins),
        estimator,
        mix,
        limit,
        max_gpus_per_node,
        candidates: Vec::new(),
        answers,
        seen: Vec::with_capacity(kinds),
        preemptions: FastMap::with_capacity_and_hasher(
            featurizer.jobs_considered,
            Default::default(),
        ),
        pools,
    };
    // Each quarter walks its ranking until its quota of jobs with a candidate is met: like
    // Tiresias' greedy pass, a job that can neither start nor preempt is passed over, so jobs
    // stuck at the head of a ranking do not crowd out those behind them that could run.
    let mut tried = vec![false; ranked.listed.len()];
    // Jobs considered that got no candidate: a share, or a shrink, may make room for them.
    let mut blocked: Vec<usize> = Vec::new();
    'quarters: for (order, quota) in ranked.orders.iter().zip(ranked.quotas) {
        let mut got = 0;
        for &i in order {
            if got >= quota {
                break;
            }
            if std::mem::replace(&mut tried[i], true) {
                continue;
            }
            if walk.offer(&ranked.listed[i]) {
                got += 1;
            } else {
                blocked.push(i);
            }
            if walk.candidates.len() >= limit {
                break 'quarters;
            }
        }
    }
    let mut candidates = walk.candidates;
    // A typed job's start where the table has no rate for it (a gang spread over nodes reads
    // the spread rate, an elastic job started smaller its rate at that size): the simulator
    // would refuse it.
    if let Some(view) = ctx.throughputs() {
        candidates.retain(|c| {
            let job = ctx.job(c.placement.job);
            c.kind != CandidateKind::Start
                || !view.is_typed(job.id)
                || view.runs_on(job, &c.placement.tasks)
        });
    }
    if model_candidates {
        let blocked: Vec<&Listed<'_>> = blocked.iter().map(|i| &ranked.listed[*i]).collect();
        share_candidates(
            ctx,
            planner,
            taken,
            &rates,
            &blocked,
            &mut candidates,
            limit,
        );
        let blocked = !blocked.is_empty();
        resize_candidates(ctx, planner, taken, &rates, blocked, &mut candidates, limit);
    }
    DecisionPoint {
        candidates,
        global,
        must_act: false,
    }
}

/// Victims, and the proposal once they are freed.
type Preemption = (Vec<JobId>, Proposal);

/// What a preemption candidate depends on: shape number, class, LAS queue, Gittins index bits.
type PreemptionKey = (usize, Qos, i32, Option<usize>, Option<u64>);

/// The candidates of one decision point as they are collected job by job.
struct Walk<'w, 'a, 'p> {
    ctx: &'w DecisionContext<'a>,
    planner: &'w mut Planner<'p>,
    proposers: &'w mut Proposers,
    las: Option<&'w LasPreempt>,
    /// Offers `gittins-preempt`'s victims (with `gittins_preemption`).
    gittins: Option<&'w GittinsPreempt>,
    estimator: &'w GittinsEstimator,
    mix: &'w TaskMix,
    limit: usize,
    max_gpus_per_node: u64,
    candidates: Vec<Candidate>,
    /// Each proposer's answer by job shape (see `ShapeAnswers`).
    answers: &'w mut ShapeAnswers,
    /// Scratch of `offer`: the answers (by index) that made a candidate for the job being
    /// offered, with the candidate's index.
    seen: Vec<(usize, usize)>,
    /// Likewise the victim search and the proposal after it: they depend on the shape, the
    /// class (`preempt`), the service queue (`las-preempt`) and the index (`gittins-preempt`)
    /// only. By shape number (see `ShapeAnswers`), class, queue and the index's bits.
    preemptions: FastMap<PreemptionKey, Option<Preemption>>,
    pools: &'w mut VictimPools,
    rates: &'w Rates<'w>,
    /// Per-model placements and smaller elastic starts (`model_candidates`).
    model_candidates: bool,
}

impl<'a> Walk<'_, 'a, '_> {
    /// Adds the candidates of `listed` (placements by every proposer, merged by node set;
    /// failing any, at most one preemption); whether it got any. Stops at the limit.
    fn offer(&mut self, listed: &Listed<'a>) -> bool {
        let p = listed.p;
        let job: &'a JobSpec = p.spec;
        let min_nodes = job.gpus_total().div_ceil(self.max_gpus_per_node).max(1);
        let kinds = &self.proposers.kinds;
        let (number, base) = self.answers.base(job, kinds.len());
        let point = self.answers.point;
        self.seen.clear();
        for (k, (kind, placer)) in kinds.iter().zip(&mut self.proposers.placers).enumerate() {
            let slot = base + k;
            if self.answers.slots[slot].0 != point {
                let mark = self.planner.mark();
                let answer = propose(self.planner, mark, placer.as_mut(), self.mix, job);
                self.answers.slots[slot] = (point, answer);
            }
            let answers = &self.answers.slots;
            let Some(proposal) = &answers[slot].1 else {
                continue;
            };
            let same = self.seen.iter().find(|(a, _)| {
                answers[*a]
                    .1
                    .as_ref()
                    .is_some_and(|other| other.nodes == proposal.nodes)
            });
            if let Some((_, i)) = same {
                self.candidates[*i].stats.proposed_by |= kind.flag();
                continue;
            }
            self.seen.push((slot, self.candidates.len()));
            self.candidates.push(candidate(
                self.ctx,
                self.estimator,
                listed,
                proposal,
                kind.flag(),
                min_nodes,
                Vec::new(),
                self.rates,
            ));
            if self.candidates.len() >= self.limit {
                return true;
            }
        }
        let first = self.candidates.len() - self.seen.len();
        if self.model_candidates {
            self.offer_per_model(listed, first, min_nodes);
        }
        if self.candidates.len() > first {
            return true;
        }
        let (Some(kind), Some(placer)) = (
            self.proposers.kinds.first().copied(),
            self.proposers.placers.first_mut(),
        ) else {
            return false;
        };
        let queue = self.las.map(|l| l.queue_of(self.ctx, job.id));
        let index = self.gittins.map(|_| listed.gittins.to_bits());
        let (ctx, las, gittins, mix) = (self.ctx, self.las, self.gittins, self.mix);
        let (planner, pools) = (&mut *self.planner, &mut *self.pools);
        let answer = self
            .preemptions
            .entry((number, job.qos, job.priority, queue, index))
            .or_insert_with(|| {
                let preempting = Preempting { las, gittins };
                preempt_proposal(ctx, planner, placer.as_mut(), preempting, mix, job, pools)
            });
        let Some((victims, proposal)) = answer else {
            return false;
        };
        self.candidates.push(candidate(
            ctx,
            self.estimator,
            listed,
            proposal,
            kind.flag(),
            min_nodes,
            victims.clone(),
            self.rates,
        ));
        true
    }

    /// Best fit within each GPU model `listed` may use (when there are several), each as a
    /// candidate unless a proposer's candidate of the job (from `first` on) already uses
    /// that node set; then, if the job has no candidate yet and is elastic, its start at the
    /// largest smaller size that fits (for a typed job, one the table rates there).
    fn offer_per_model(&mut self, listed: &Listed<'a>, first: usize, min_nodes: u64) {
        const BY_MODEL: u8 = 8;
        let job: &'a JobSpec = listed.p.spec;
        if job.task.gpus == 0 {
            return;
        }
        let spec = self.rates.spec;
        let mut placer = StrategyPlacer::new("best-fit", FitStrategy::BestFit);
        // One GPU model in the cluster: no list of them to build and sort for every job.
        let models = if self.rates.present.count_ones() > 1 {
            self.rates.models_for(job)
        } else {
            Vec::new()
        };
        if models.len() > 1 {
            for m in models {
                if self.candidates.len() >= self.limit {
                    return;
                }
                let restricted = restrict(spec, job, Some(m), job.tasks);
                let mark = self.planner.mark();
                let Some(proposal) =
                    propose(self.planner, mark, &mut placer, self.mix, &restricted)
                else {
                    continue;
                };
                if let Some(c) = self.candidates[first..]
                    .iter_mut()
                    .find(|c| node_set(&c.placement.tasks) == proposal.nodes)
                {
                    c.stats.proposed_by |= BY_MODEL;
                    continue;
                }
                let mut c = candidate(
                    self.ctx,
                    self.estimator,
                    listed,
                    &proposal,
                    BY_MODEL,
                    min_nodes,
                    Vec::new(),
                    self.rates,
                );
                c.stats.model = Some(m);
                self.candidates.push(c);
            }
        }
        let Some(elastic) = job.elastic else { return };
        if self.candidates.len() > first || self.candidates.len() >= self.limit {
            return;
        }
        let min_tasks = (elastic.min_gpus / job.task.gpus).max(1);
        for tasks in (min_tasks..job.tasks).rev() {
            let smaller = restrict(spec, job, None, tasks);
            let mark = self.planner.mark();
            if let Some(proposal) = propose(self.planner, mark, &mut placer, self.mix, &smaller) {
                // A typed job starts only at a size the table rates where it lands.
                let unrated = self.ctx.throughputs().is_some_and(|view| {
                    view.is_typed(job.id)
                        && proposal.tasks.iter().any(|t| {
                            spec.nodes[t.node.index()].gpu_model.is_none_or(|m| {
                                !view
                                    .speed(job, m, tasks * job.task.gpus)
                                    .is_some_and(|s| s > 0.0)
                            })
                        })
                });
                if unrated {
                    continue;
                }
                self.candidates.push(candidate(
                    self.ctx,
                    self.estimator,
                    listed,
                    &proposal,
                    BY_MODEL,
                    min_nodes,
                    Vec::new(),
                    self.rates,
                ));
                return;
            }
        }
    }
}

/// At most this many share candidates a decision point.
const SHARES: usize = 4;

/// Share candidates, as Gavel's space sharing: for each job considered that got no candidate
/// (`blocked`, in the order considered) and is one task on one whole GPU with a workload type,
/// the running job it would best share a GPU with. Hosts are typed jobs of that shape alone on
/// their GPU (not touched by this decision), the pair one the table lets share on the GPU's
/// model, the node with CPU and memory for the guest; the best host maximises the pair's
/// summed normalised rate (each job's shared rate over its rate alone there), the earliest
/// node among equals. The candidate's speed features are the guest's shared rate (unless
/// rates are hidden), with `partner_rate` the host's shared rate over its rate alone.
fn share_candidates(
    ctx: &DecisionContext<'_>,
    planner: &Planner<'_>,
    taken: &Taken,
    rates: &Rates<'_>,
    blocked: &[&Listed<'_>],
    out: &mut Vec<Candidate>,
    limit: usize,
) {
    let Some(view) = ctx.throughputs() else {
        return;
    };
    let one_gpu =
        |job: &JobSpec| job.tasks == 1 && job.task.gpus == 1 && job.task.gpu_milli == GPU_MILLI;
    let guests: Vec<&Listed<'_>> = blocked
        .iter()
        .copied()
        .filter(|l| one_gpu(l.p.spec) && view.is_typed(l.p.spec.id))
        .collect();
    if guests.is_empty() {
        return;
    }
    let state = planner.state();
    let spec = rates.spec;
    // (host, node, GPU, model), in running order.
    let mut hosts: Vec<(JobId, NodeId, u8, GpuModelId)> = state
        .running()
        .filter(|a| {
            a.task.gpus == 1
                && a.task.gpu_milli == GPU_MILLI
                && a.tasks.len() == 1
                && a.tasks[0].gpus.len() == 1
                && view.is_typed(a.job)
                && !state.shares_gpu(a)
                && !planner.has_freed(a.job)
                && !taken.touches(a.job)
                && !taken.placed.contains(&a.job)
        })
        .filter_map(|a| {
            let t = &a.tasks[0];
            let model = spec.nodes.get(t.node.index())?.gpu_model?;
            Some((a.job, t.node, t.gpus[0], model))
        })
        .collect();
    let mut offered = 0;
    for l in guests {
        if offered >= SHARES || out.len() >= limit || hosts.is_empty() {
            return;
        }
        let job = l.p.spec;
        let mask = spec.job_mask(job);
        let mut best: Option<(f64, usize, [f64; 2], f64)> = None;
        for (i, &(host, node, _, model)) in hosts.iter().enumerate() {
            if !mask.allows_model(model)
                || mask.classes & (1u64 << spec.node_class(node)) == 0
                || state.cpu_free(node) < job.task.cpu_milli
                || state.mem_free(node) < job.task.mem_mib
            {
                continue;
            }
            let other = ctx.job(host);
            let Some(pair) = view.pair_speeds(job, other, model) else {
                continue;
            };
            let (Some(alone), Some(other_alone)) =
                (view.speed(job, model, 1), view.speed(other, model, 1))
            else {
                continue;
            };
            if alone <= 0.0 || other_alone <= 0.0 {
                continue;
            }
            let partner = pair[1] / other_alone;
            let score = pair[0] / alone + partner;
            if best.is_none_or(|(b, ..)| score > b) {
                best = Some((score, i, pair, partner));
            }
        }
        let Some((_, i, pair, partner)) = best else {
            continue;
        };
        // One guest a host.
        let (host, node, gpu, _) = hosts.remove(i);
        let tasks = vec![TaskPlacement {
            node,
            gpus: vec![gpu],
        }];
        let (speed, rate_vs_best, rates_known) = if rates.hide {
            rates.of(ctx, job, &[node], 1)
        } else {
            let best = view.best_model(job).map_or(pair[0], |(_, s)| s);
            (pair[0], pair[0] / best, true)
        };
        out.push(Candidate {
            preemptions: Vec::new(),
            stats: CandidateStats {
                speed,
                rate_vs_best,
                rates_known,
                share: true,
                partner_rate: if rates.hide { 0.0 } else { partner },
                size_ratio: 1.0,
                ..job_stats(l, 1, 1)
            },
            placement: Placement { job: job.id, tasks },
            kind: CandidateKind::Share { host },
        });
        offered += 1;
    }
}

/// With resize candidates, a decision point with nobody waiting (where only a grow can be
/// taken) comes at most once a round, as Pollux and Sia reallocate once a minute: asking at
/// every event while elastic jobs run multiplies the decisions of a run several times over.
pub const RESIZE_ROUND: SimTime = SimTime::from_secs(60);

/// Whether a point with nobody waiting is due at `now`, the last one having been at `last`.
pub fn idle_due(last: Option<SimTime>, now: SimTime) -> bool {
    last.is_none_or(|t| now >= t.saturating_add(RESIZE_ROUND))
}

/// At most this many grow and this many shrink candidates a decision point.
const RESIZES: usize = 4;
/// Running elastic jobs tried for a grow a decision point (each a placement search).
const GROW_TRIES: usize = 8;

/// Resize candidates of running elastic jobs (typed, preemptible, not sharing a GPU, not
/// touched by this decision, nor started or resized less than a [`RESIZE_ROUND`] ago): a grow to the next size the table rates on the job's GPU model,
/// where best fit within that model finds room once the job's own tasks are freed (smallest
/// jobs tried first); and when some considered job got no candidate (`blocked`), a shrink of
/// the largest jobs to the next smaller rated size, keeping their first tasks.
fn resize_candidates(
    ctx: &DecisionContext<'_>,
    planner: &mut Planner<'_>,
    taken: &Taken,
    rates: &Rates<'_>,
    blocked: bool,
    out: &mut Vec<Candidate>,
    limit: usize,
) {
    let Some(view) = ctx.throughputs() else {
        return;
    };
    let spec = rates.spec;
    let mut jobs: Vec<(JobId, Vec<TaskPlacement>)> = {
        let state = planner.state();
        state
            .running()
            .filter(|a| a.elastic && a.preemptible && a.task.gpus > 0 && !state.shares_gpu(a))
            .filter(|a| {
                !taken.touches(a.job)
                    && !taken.placed.contains(&a.job)
                    && !planner.has_freed(a.job)
                    && view.is_typed(a.job)
                    // Started or resized less than a round ago: not yet, or a policy could
                    // grow and shrink jobs back and forth, each time paying the restart and
                    // never progressing (as Pollux, a job keeps its size for a round).
                    && ctx
                        .runtime(a.job)
                        .run_start
                        .is_some_and(|t| ctx.now() >= t.saturating_add(RESIZE_ROUND))
            })
            .map(|a| (a.job, a.tasks.to_vec()))
            .collect()
    };
    if jobs.is_empty() {
        return;
    }
    // The rated task counts of `job` on model `m`, ascending.
    let rated = |job: &JobSpec, m: GpuModelId| -> Vec<u32> {
        let Some(e) = job.elastic else {
            return Vec::new();
        };
        let g = job.task.gpus.max(1);
        ((e.min_gpus / g).max(1)..=(e.max_gpus / g))
            .filter(|t| view.speed(job, m, t * g).is_some_and(|s| s > 0.0))
            .collect()
    };
    let model_of = |tasks: &[TaskPlacement]| {
        tasks
            .first()
            .and_then(|t| spec.nodes.get(t.node.index())?.gpu_model)
    };
    jobs.sort_by_key(|(id, tasks)| (tasks.len(), *id));
    let mut grown = 0;
    let tries = if taken.shrunk { 0 } else { GROW_TRIES };
    for (id, tasks) in jobs.iter().take(tries) {
        if grown >= RESIZES || out.len() >= limit {
            break;
        }
        let job = ctx.job(*id);
        let Some(m) = model_of(tasks) else { continue };
        let k = tasks.len() as u32;
        let Some(&next) = rated(job, m).iter().find(|t| **t > k) else {
            continue;
        };
        let mark = planner.mark();
        let placed = planner.free_running(*id).then(|| {
            let bigger = restrict(spec, job, Some(m), next);
            StrategyPlacer::new("best-fit", FitStrategy::BestFit).place(planner, &bigger)
        });
        planner.undo_to(mark);
        // As the simulator will run it (a gang spread over nodes reads the spread rate).
        if let Some(Some(new)) =
            placed.filter(|p| p.as_deref().is_some_and(|t| view.runs_on(job, t)))
        {
            out.push(resize_candidate(ctx, rates, job, k, new));
            grown += 1;
        }
    }
    if !blocked || taken.grown {
        return;
    }
    let mut shrunk = 0;
    for (id, tasks) in jobs.iter().rev() {
        if shrunk >= RESIZES || out.len() >= limit {
            break;
        }
        let job = ctx.job(*id);
        let Some(m) = model_of(tasks) else { continue };
        let k = tasks.len() as u32;
        let Some(&next) = rated(job, m).iter().rev().find(|t| **t < k) else {
            continue;
        };
        if !view.runs_on(job, &tasks[..next as usize]) {
            continue;
        }
        out.push(resize_candidate(
            ctx,
            rates,
            job,
            k,
            tasks[..next as usize].to_vec(),
        ));
        shrunk += 1;
    }
}

/// The candidate of moving running `job` (on `current` tasks) to `tasks`.
fn resize_candidate(
    ctx: &DecisionContext<'_>,
    rates: &Rates<'_>,
    job: &JobSpec,
    current: u32,
    tasks: Vec<TaskPlacement>,
) -> Candidate {
    let nodes = node_set(&tasks);
    let n = tasks.len() as u32;
    let (speed, rate_vs_best, rates_known) = rates.of(ctx, job, &nodes, n);
    let rt = ctx.runtime(job.id);
    let running = ctx
        .now()
        .saturating_sub(rt.run_start.unwrap_or(ctx.now()))
        .ms();
    Candidate {
        preemptions: Vec::new(),
        stats: CandidateStats {
            gpus_total: u64::from(n) * u64::from(job.task.gpus),
            gpu_share_milli: job.task.gpu_milli,
            tasks: n,
            cpu_milli_per_task: job.task.cpu_milli,
            gpu_milli_total: u64::from(n) * job.task.gpu_milli_total(),
            waited: ctx.now().saturating_sub(job.submit),
            estimate: job.estimate,
            attained_ms: rt.attained_ms + running,
            preemptions: rt.preemptions,
            priority: job.priority,
            nodes_used: nodes.len(),
            speed,
            rate_vs_best,
            rates_known,
            size_ratio: f64::from(n) / f64::from(current.max(1)),
            resize: true,
            ..CandidateStats::default()
        },
        placement: Placement { job: job.id, tasks },
        kind: CandidateKind::Resize,
    }
}

/// The distinct nodes of `tasks`, sorted.
fn node_set(tasks: &[TaskPlacement]) -> Vec<NodeId> {
    let mut nodes: Vec<NodeId> = tasks.iter().map(|t| t.node).collect();
    nodes.sort_unstable();
    nodes.dedup();
    nodes
}

/// The preemption rules offered besides `preempt`'s.
#[derive(Clone, Copy)]
struct Preempting<'a> {
    las: Option<&'a LasPreempt>,
    gittins: Option<&'a GittinsPreempt>,
}

/// The victims for `job` (`preempt`'s minimal set, else LAS's, else Gittins', as offered) and
/// where `placer` puts it once they are freed; nothing changes on the planner.
fn preempt_proposal(
    ctx: &DecisionContext<'_>,
    planner: &mut Planner<'_>,
    placer: &mut dyn Placer,
    rules: Preempting<'_>,
    mix: &TaskMix,
    job: &JobSpec,
    pools: &mut VictimPools,
) -> Option<Preemption> {
    let victims = minimal_victims(ctx, planner, placer, job, pools)
        .or_else(|| {
            rules
                .las
                .and_then(|l| l.victims_for(ctx, planner, placer, job, pools))
        })
        .or_else(|| {
            rules
                .gittins
                .and_then(|g| g.victims_for(ctx, planner, placer, job, pools))
        })?;
    let mark = planner.mark();
    for v in &victims {
        planner.free_running(*v);
    }
    let proposal = propose(planner, mark, placer, mix, job)?;
    Some((victims, proposal))
}

/// The `q`-quantile of `atoms` (0 before any run time is known).
fn run_quantile(atoms: &Atoms, q: f64) -> SimTime {
    atoms
        .quantile(q)
        .map_or(SimTime::ZERO, |ms| SimTime(ms.round() as u64))
}

/// `ln(G(median) / G(0))` of `atoms`: below 0 when the index falls as jobs run (a decreasing
/// hazard: LAS's world), above 0 when it rises (FIFO's and SJF's); 0 before anything is known.
fn index_trend(atoms: &Atoms) -> f64 {
    let (Some(median), Some(g0)) = (atoms.quantile(0.5), atoms.index(0.0)) else {
        return 0.0;
    };
    // Just below the median, so the median's own atom still lies above.
    match atoms.index((median - 1.0).max(0.0)) {
        Some(g) if g > 0.0 && g0 > 0.0 => (g / g0).ln(),
        _ => 0.0,
    }
}

/// The queue's GPU demand over the cluster's GPUs, `ln(1 + pending GPUs / GPUs)`, averaged
/// over the time before now with a one-hour time constant (what "the cluster has been busy
/// lately" means): the demand seen last at an instant holds until the next one. Before any
/// time has passed it is the demand now (the latest seen at this instant).
#[derive(Debug, Clone, Default)]
struct Contention {
    /// When the demand was last seen, and what it was.
    last: Option<(SimTime, f64)>,
    /// The average over the time up to `last` (`None` while no time has passed).
    before: Option<f64>,
}

impl Contention {
    const TAU_MS: f64 = 3_600_000.0;

    fn observe(&mut self, ctx: &DecisionContext<'_>) {
        let gpus = ctx.cluster().spec().total_gpus().max(1) as f64;
        let demand: u64 = ctx.pending().map(|p| p.spec.gpus_total()).sum();
        let now = ctx.now();
        if let Some((t, held)) = self.last
            && now > t
        {
            let keep = (-(now.saturating_sub(t).ms() as f64) / Self::TAU_MS).exp();
            self.before = Some(self.before.map_or(held, |m| keep * m + (1.0 - keep) * held));
        }
        self.last = Some((now, (demand as f64 / gpus).ln_1p()));
    }

    fn mean(&self) -> f64 {
        self.before.or(self.last.map(|(_, v)| v)).unwrap_or(0.0)
    }
}

/// What the shortlist and the global row read of the Gittins estimator, kept from one point
/// to the next while its distributions stay (its `generation`): a pending job's index per
/// GPU and chance to finish within the hour depend on its GPU-count class, processors and
/// attained service only, and the run-time quantiles and index trend on every finished job's
/// distribution only.
#[derive(Debug, Clone, Default)]
struct GittinsMemo {
    generation: u64,
    /// (class, processors, attained ms) -> (index per GPU, chance within the hour).
    views: FastMap<(usize, u64, u64), (f64, f64)>,
    /// The run-time quantiles (10%, 50%, 90%) and the index trend.
    overall: Option<([SimTime; 3], f64)>,
}

impl GittinsMemo {
    /// Forgets what was computed at another generation than `estimator`'s.
    fn follow(&mut self, estimator: &GittinsEstimator) {
        if self.generation != estimator.generation() {
            self.generation = estimator.generation();
            self.views.clear();
            self.overall = None;
        }
    }

    /// `job`'s index per GPU and chance to finish within the hour at `attained` ms, from
    /// `estimator` (see `follow`): a job's depend on its class, size and attained service
    /// only.
    fn view(&mut self, estimator: &GittinsEstimator, job: &JobSpec, attained: u64) -> (f64, f64) {
        *self
            .views
            .entry((gpu_class(job), processors(job), attained))
            .or_insert_with(|| {
                let within = estimator
                    .distribution(job)
                    .finish_within(attained as f64, 3_600_000.0)
                    .unwrap_or(0.0);
                (estimator.priority(job, attained), within)
            })
    }

    /// The run-time quantiles and index trend of `estimator` (see `follow`).
    fn overall(&mut self, estimator: &GittinsEstimator) -> ([SimTime; 3], f64) {
        *self.overall.get_or_insert_with(|| {
            let all = estimator.overall();
            (
                [0.1, 0.5, 0.9].map(|q| run_quantile(all, q)),
                index_trend(all),
            )
        })
    }
}

/// Every pending job with what its rows need, and the four rankings the shortlist walks (see
/// the module docs): submit order, Tiresias' order, shortest predicted remaining time and
/// Gittins index, with how many jobs with candidates each contributes (`ceil(k / 4)`, up to
/// `ceil(2k / 4)`, ..., up to `k` in all).
struct Ranked<'a> {
    /// In submit order.
    listed: Vec<Listed<'a>>,
    orders: [Vec<usize>; 4],
    quotas: [usize; 4],
}

fn rank<'a>(
    ctx: &DecisionContext<'a>,
    pending: &[PendingJob<'a>],
    durations: &DurationPredictor,
    predicted: &[Option<SimTime>],
    tiresias: &LasQueues,
    mut view: impl FnMut(&JobSpec, u64) -> (f64, f64),
    k: usize,
) -> Ranked<'a> {
    let mut listed: Vec<Listed<'a>> = pending
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let (index, within) = view(p.spec, ctx.attained_ms(p.spec.id));
            let total = predicted
                .get(p.spec.id.index())
                .copied()
                .flatten()
                .unwrap_or_else(|| p.spec.estimate.unwrap_or_else(|| durations.predict(p.spec)));
            Listed {
                p: *p,
                position: i,
                remaining: total.saturating_sub(SimTime(ctx.attained_ms(p.spec.id))),
                shortness_rank: 0,
                pending: pending.len(),
                las_queue: snapshot_queue(p, &tiresias.thresholds, tiresias.knob),
                gittins: index,
                gittins_rank: 0,
                finish_within_hour: within,
            }
        })
        .collect();
    // Ties go by submit order, the index itself: unstable sorts by (key, index) give what
    // stable sorts by key would, without their buffer.
    // Pending indices by predicted remaining time.
    let mut by_shortness: Vec<usize> = (0..pending.len()).collect();
    by_shortness.sort_unstable_by_key(|i| (listed[*i].remaining, *i));
    for (r, i) in by_shortness.iter().enumerate() {
        listed[*i].shortness_rank = r;
    }
    // Tiresias' order: by queue, FIFO within.
    let mut by_queue: Vec<usize> = (0..pending.len()).collect();
    by_queue.sort_unstable_by_key(|i| (listed[*i].las_queue.0, *i));
    // The Gittins order: highest index per GPU first.
    let mut by_index: Vec<usize> = (0..pending.len()).collect();
    by_index.sort_unstable_by_key(|i| (Score(-listed[*i].gittins), *i));
    for (r, i) in by_index.iter().enumerate() {
        listed[*i].gittins_rank = r;
    }
    let cut = |j: usize| (j * k).div_ceil(4);
    Ranked {
        listed,
        orders: [
            (0..pending.len()).collect(),
            by_queue,
            by_shortness,
            by_index,
        ],
        quotas: [cut(1), cut(2) - cut(1), cut(3) - cut(2), k - cut(3)],
    }
}
