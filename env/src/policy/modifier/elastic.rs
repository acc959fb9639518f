//! Heuristics that use GPU sharing and elastic jobs (issue #25), each a registry modifier:
//!
//! - `colocate`: a 1-GPU typed job the pass could not place shares the GPU of a running 1-GPU
//!   typed job when the pair's summed normalised rate (each job's pair rate over its rate
//!   alone on that GPU) beats a threshold: Gavel's space-sharing criterion (OSDI'20, §3.1;
//!   it reports a median of 1.37 on a V100).
//! - `elastic`: Pollux/ElasticFlow/Sia in spirit: a blocked elastic job starts at a smaller
//!   size that fits now; else a blocked job is admitted by shrinking a running elastic job
//!   toward its `min_gpus`. While GPUs are idle, a running elastic job moves to another GPU
//!   model the table rates at least 1.25x faster (Gavel and Sia give each job its best GPU
//!   type), else grows where the extra GPUs are used at least half as well as its current
//!   ones. It also acts when nobody waits ([`Modifier::acts_without_queue`]).
//!
//! Both act in rounds, as Gavel, Pollux and Sia re-plan: at a decision point at least
//! `round_s` after the last one where they acted (`round_s = 0`: at every decision point).
//! `colocate` defaults to Gavel's 6-minute round, `elastic` to Pollux's and Sia's 60 s. Their knobs are `[colocate]` and `[elastic]` in a policy config
//! file ([`ColocateConfig`], [`ElasticConfig`]).
//!
//! Both read rates from the throughput table they are built with
//! (`PolicyOptions::throughputs`): they never see a true duration, only what the table and
//! the cluster say. The scoring rules are pure functions, tested by table below.

use super::super::heuristic::{Modifier, Placer};
use super::super::planner::Planner;
use super::super::{Decision, DecisionContext, Placement};
use crate::cluster::{Allocation, ClusterSpec, FitStrategy, TaskPlacement};
use crate::job::JobSpec;
use crate::throughput::{Consolidation, TableGpu, ThroughputTable, WorkloadId};
use crate::units::{GPU_MILLI, GpuModelId, JobId, NodeId, SimTime};
use foldhash::fast::FixedState;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// `colocate`'s knobs (`[colocate]` in a policy config file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ColocateConfig {
    /// A pair shares a GPU only when its summed normalised rate is above this (Gavel's
    /// break-even, 1.0: the GPU does more together than either job alone).
    pub threshold: f64,
    /// Seconds between the decision points where it acts (0: every one).
    pub round_s: f64,
}

impl Default for ColocateConfig {
    fn default() -> Self {
        ColocateConfig {
            threshold: 1.0,
            round_s: GAVEL_ROUND_S,
        }
    }
}

impl ColocateConfig {
    /// Checks the knobs: a finite threshold >= 0, a finite round >= 0.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.threshold.is_finite() && self.threshold >= 0.0) {
            return Err(format!(
                "colocate threshold must be a number >= 0, got {}",
                self.threshold
            ));
        }
        round(self.round_s, "colocate").map(|_| ())
    }
}

/// `elastic`'s knobs (`[elastic]` in a policy config file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ElasticConfig {
    /// The least [`marginal_efficiency`] worth a grow and its restart (0.5: the extra GPUs
    /// work at least half as well as the current ones).
    pub min_efficiency: f64,
    /// Seconds between the decision points where it acts (0: every one).
    pub round_s: f64,
}

impl Default for ElasticConfig {
    fn default() -> Self {
        ElasticConfig {
            min_efficiency: 0.5,
            round_s: DEFAULT_ROUND_S,
        }
    }
}

impl ElasticConfig {
    /// Checks the knobs: a finite efficiency > 0, a finite round >= 0.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.min_efficiency.is_finite() && self.min_efficiency > 0.0) {
            return Err(format!(
                "elastic min_efficiency must be a number > 0, got {}",
                self.min_efficiency
            ));
        }
        round(self.round_s, "elastic").map(|_| ())
    }
}

/// Sia's and Pollux's scheduling interval, seconds: `elastic`'s default round.
pub const DEFAULT_ROUND_S: f64 = 60.0;

/// Gavel's round, seconds (6 minutes, OSDI'20 §5): `colocate`'s default round.
pub const GAVEL_ROUND_S: f64 = 360.0;

/// `round_s` of part `part` as a time, or why it is refused.
fn round(round_s: f64, part: &str) -> Result<SimTime, String> {
    SimTime::from_secs_f64(round_s)
        .filter(|_| round_s >= 0.0)
        .ok_or_else(|| format!("{part} round_s must be a number of seconds >= 0, got {round_s}"))
}

/// When a part acting in rounds may act next.
#[derive(Debug, Clone, Default)]
struct Rounds {
    every: SimTime,
    next: Option<SimTime>,
}

impl Rounds {
    /// Whether a round starts at `now` (nothing is marked).
    fn is_due(&self, now: SimTime) -> bool {
        self.every == SimTime::ZERO || self.next.is_none_or(|next| now >= next)
    }

    /// Whether to act at `now`; when so, the next round starts `every` later.
    fn due(&mut self, now: SimTime) -> bool {
        if !self.is_due(now) {
            return false;
        }
        if self.every != SimTime::ZERO {
            self.next = Some(now.saturating_add(self.every));
        }
        true
    }
}

/// Gavel's summed normalised throughput of a pair sharing one GPU: `pair[i] / alone[i]`
/// summed over the two jobs. Above 1 the GPU does more together than either job alone. 0 when
/// either job cannot run alone there (no basis to normalise).
pub fn summed_normalised_rate(pair: [f64; 2], alone: [f64; 2]) -> f64 {
    if alone.iter().any(|a| *a <= 0.0 || !a.is_finite()) {
        return 0.0;
    }
    pair[0] / alone[0] + pair[1] / alone[1]
}

/// The candidate with the largest score strictly above `threshold` (the first of equals).
pub fn best_above(scores: &[f64], threshold: f64) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, s) in scores.iter().enumerate() {
        if *s > threshold && best.is_none_or(|b| *s > scores[b]) {
            best = Some(i);
        }
    }
    best
}

/// Speedup per extra GPU from `gpus_now` at `speed_now` to `gpus_next` at `speed_next`, as
/// a fraction of the job's speed per GPU now (1 = the extra GPUs work as well as its current
/// ones, linear scaling). 0 when it does not grow or runs at 0 now.
pub fn marginal_efficiency(speed_now: f64, gpus_now: u32, speed_next: f64, gpus_next: u32) -> f64 {
    if gpus_next <= gpus_now || speed_now <= 0.0 {
        return 0.0;
    }
    let per_gpu_now = speed_now / f64::from(gpus_now);
    (speed_next - speed_now) / f64::from(gpus_next - gpus_now) / per_gpu_now
}

/// A rate alone's key: workload, cluster GPU model (its `GpuModelId` number), GPUs, placement.
type RateKey = (WorkloadId, u32, u32, Consolidation);

/// A typed job's table rates as the heuristics need them. The cluster's GPU models are
/// resolved against the table once per cluster ([`Self::sync`]), not once per lookup.
#[derive(Debug, Clone)]
struct TableRates {
    table: Arc<ThroughputTable>,
    /// Per cluster GPU model (by `GpuModelId`): its table entry, `None` when the table lacks it.
    gpus: Vec<Option<TableGpu>>,
    /// The table's workload ids by their exact names (other spellings take the table's
    /// case-insensitive lookup).
    workloads: HashMap<String, WorkloadId, FixedState>,
    /// Per cluster GPU model: the most GPUs one node of it has ([`gpus_per_model`]).
    per_node: Vec<u32>,
    /// Per cluster GPU model: its GPUs in milli-GPU.
    capacity_milli: Vec<u64>,
    /// The cluster last synced (held, so that a new one is told by its address).
    spec: Option<Arc<ClusterSpec>>,
    /// Rates alone looked up so far, by (workload, cluster GPU model, GPUs, placement).
    memo: RefCell<HashMap<RateKey, f64, FixedState>>,
}

impl TableRates {
    fn new(table: Arc<ThroughputTable>) -> TableRates {
        let workloads = table
            .workloads()
            .iter()
            .filter_map(|w| Some((w.as_str().to_string(), table.workload(w.as_str()).ok()?)))
            .collect();
        TableRates {
            table,
            gpus: Vec::new(),
            workloads,
            per_node: Vec::new(),
            capacity_milli: Vec::new(),
            spec: None,
            memo: RefCell::default(),
        }
    }

    /// `job`'s workload id in the table; `None` when untyped or the table lacks its type.
    fn workload(&self, job: &JobSpec) -> Option<WorkloadId> {
        let name = job.workload.as_ref()?.as_str();
        match self.workloads.get(name) {
            Some(w) => Some(*w),
            None => self.table.workload(name).ok(),
        }
    }

    /// Resolves `spec`'s GPU models against the table, when it is another cluster than last
    /// time. Returns whether anything changed.
    fn sync(&mut self, spec: &Arc<ClusterSpec>) -> bool {
        if self.spec.as_ref().is_some_and(|s| Arc::ptr_eq(s, spec)) {
            return false;
        }
        self.spec = Some(Arc::clone(spec));
        self.per_node = gpus_per_model(spec);
        self.capacity_milli = vec![0; spec.models.len()];
        for (m, gpus) in spec
            .nodes
            .iter()
            .filter_map(|n| Some((n.gpu_model?, n.gpus)))
        {
            self.capacity_milli[m.index()] += u64::from(gpus) * u64::from(GPU_MILLI);
        }
        self.memo.get_mut().clear();
        self.gpus = spec
            .models
            .iter()
            .map(|m| self.table.gpu(&m.name).ok())
            .collect();
        true
    }

    /// The table entry of `node`'s GPU model (after [`Self::sync`] with its cluster).
    fn gpu(&self, spec: &ClusterSpec, node: NodeId) -> Option<TableGpu> {
        let model = spec.node(node).gpu_model?;
        self.gpus.get(model.index()).copied().flatten()
    }

    /// The rate of `job` alone on `gpus` GPUs of `node`'s model placed as `placement`; 0 when
    /// untyped, or the table lacks it.
    fn alone(
        &self,
        spec: &ClusterSpec,
        job: &JobSpec,
        node: NodeId,
        gpus: u32,
        placement: Consolidation,
    ) -> f64 {
        let (Some(w), Some(model)) = (self.workload(job), spec.node(node).gpu_model) else {
            return 0.0;
        };
        self.alone_id(w, model, gpus, placement)
    }

    /// The rate of workload `w` alone on `gpus` GPUs of cluster GPU model `model` placed as
    /// `placement`; 0 when the table lacks it.
    fn alone_id(
        &self,
        w: WorkloadId,
        model: GpuModelId,
        gpus: u32,
        placement: Consolidation,
    ) -> f64 {
        let key = (w, model.0, gpus, placement);
        if let Some(r) = self.memo.borrow().get(&key) {
            return *r;
        }
        let gpu = self.gpus.get(model.index()).copied().flatten();
        let r = gpu
            .and_then(|g| self.table.rate(w, g, gpus, placement).ok())
            .unwrap_or(0.0);
        self.memo.borrow_mut().insert(key, r);
        r
    }

    /// The pair rates of `a` and `b` sharing one GPU of `node`'s model.
    fn pair(&self, spec: &ClusterSpec, a: &JobSpec, b: &JobSpec, node: NodeId) -> Option<[f64; 2]> {
        let wa = self.workload(a)?;
        let wb = self.workload(b)?;
        let gpu = self.gpu(spec, node)?;
        self.table.pair(wa, wb, gpu)
    }
}

/// Whether a job is one task on one whole GPU: the only shape that shares.
pub(crate) fn one_gpu(job: &JobSpec) -> bool {
    job.tasks == 1 && job.task.gpus == 1 && job.task.gpu_milli == GPU_MILLI
}

/// `colocate`: see the module docs.
#[derive(Debug, Clone)]
pub struct Colocate {
    rates: TableRates,
    threshold: f64,
    rounds: Rounds,
}

impl Colocate {
    /// Reads rates from `table`; refused when `config` is not valid.
    pub fn new(table: Arc<ThroughputTable>, config: &ColocateConfig) -> Result<Colocate, String> {
        config.validate()?;
        Ok(Colocate {
            rates: TableRates::new(table),
            threshold: config.threshold,
            rounds: Rounds {
                every: round(config.round_s, "colocate")?,
                next: None,
            },
        })
    }
}

impl Modifier for Colocate {
    fn name(&self) -> &str {
        "colocate"
    }

    fn rest_wanted(&self, ctx: &DecisionContext<'_>) -> usize {
        if self.rounds.is_due(ctx.now()) {
            usize::MAX
        } else {
            0
        }
    }

    fn extend(
        &mut self,
        ctx: &DecisionContext<'_>,
        planner: &mut Planner<'_>,
        _placer: &mut dyn Placer,
        rest: &[JobId],
        decision: &mut Decision,
    ) {
        // Only a 1-GPU typed job may share: without one waiting there is nothing to do.
        if !self.rounds.is_due(ctx.now())
            || !rest.iter().any(|id| {
                let job = ctx.job(*id);
                one_gpu(job) && job.workload.is_some()
            })
        {
            return;
        }
        self.rounds.due(ctx.now());
        self.rates.sync(planner.state().spec_arc());
        let state = planner.state();
        let spec = state.spec();
        // Running 1-GPU typed jobs alone on their GPU, not being preempted, in running order.
        let hosts: Vec<(JobId, NodeId, u8)> = state
            .running()
            .filter(|a| {
                // Its placement now, not its trace shape (an elastic job may have grown); the
                // checks that read no other memory first.
                if a.task.gpus != 1 || a.task.gpu_milli != GPU_MILLI {
                    return false;
                }
                let job = ctx.job(a.job);
                a.tasks.len() == 1
                    && a.tasks[0].gpus.len() == 1
                    && a.task.gpu_milli == GPU_MILLI
                    && job.workload.is_some()
                    && !state.shares_gpu(a)
                    && !planner.has_freed(a.job)
                    && !decision.preemptions.contains(&a.job)
            })
            .map(|a| (a.job, a.tasks[0].node, a.tasks[0].gpus[0]))
            .collect();
        if hosts.is_empty() {
            return;
        }
        // Whether a share chosen here has taken the host.
        let mut taken_host = vec![false; hosts.len()];
        // A pair's score depends only on the two workloads and the GPU model: hosts are
        // grouped by (workload, model) and each guest is scored once per group, so a decision
        // costs (pending x groups) table lookups, not (pending x hosts).
        // Keyed by the host's workload id in the table (`None`: a type the table lacks, which
        // never scores) and GPU model.
        let mut groups: BTreeMap<(Option<WorkloadId>, Option<GpuModelId>), Vec<usize>> =
            BTreeMap::new();
        for (i, (id, node, _)) in hosts.iter().enumerate() {
            let w = self.rates.workload(ctx.job(*id));
            groups
                .entry((w, spec.node(*node).gpu_model))
                .or_default()
                .push(i);
        }
        let groups: Vec<Vec<usize>> = groups.into_values().collect();
        // Per group: its members before this index are all taken (hosts are taken, never
        // given back, within a decision), so a search starts there.
        let mut cursor = vec![0usize; groups.len()];
        let mut free_hosts = hosts.len();
        // Per guest workload: the groups scoring above the threshold, best first (equal
        // scores in group order), computed once a decision.
        let mut ranked: Vec<Option<Vec<(f64, usize)>>> =
            vec![None; self.rates.table.workloads().len()];
        // CPU and memory the shares chosen here take, per node.
        let mut taken: BTreeMap<NodeId, (u64, u64)> = BTreeMap::new();
        for id in rest {
            if free_hosts == 0 {
                break;
            }
            let job = ctx.job(*id);
            if !one_gpu(job) {
                continue;
            }
            // A type the table lacks never scores above the threshold.
            let Some(guest) = self.rates.workload(job) else {
                continue;
            };
            let mask = spec.job_mask(job);
            let fits = |node: NodeId, taken: &BTreeMap<NodeId, (u64, u64)>| {
                let (cpu, mem) = taken.get(&node).copied().unwrap_or_default();
                let n = spec.node(node);
                n.gpu_model.is_some_and(|m| mask.allows_model(m))
                    && mask.classes & (1u64 << spec.node_class(node)) != 0
                    && state.cpu_free(node) >= cpu + job.task.cpu_milli
                    && state.mem_free(node) >= mem + job.task.mem_mib
            };
            let order = ranked[guest.index()].get_or_insert_with(|| {
                let mut order: Vec<(f64, usize)> = groups
                    .iter()
                    .enumerate()
                    .map(|(g, members)| {
                        let (host, node, _) = hosts[members[0]];
                        let other = ctx.job(host);
                        let score = self.rates.pair(spec, job, other, node).map_or(0.0, |pair| {
                            let alone = [job, other].map(|j| {
                                self.rates
                                    .alone(spec, j, node, 1, Consolidation::Consolidated)
                            });
                            summed_normalised_rate(pair, alone)
                        });
                        (score, g)
                    })
                    .filter(|(score, _)| *score > self.threshold)
                    .collect();
                order.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                order
            });
            // The best score, and among hosts of that score the first (in running order) that
            // is still free and whose node fits.
            let mut best: Option<(f64, usize)> = None;
            for (score, g) in order.iter() {
                if best.is_some_and(|(b, _)| *score < b) {
                    break;
                }
                let members = &groups[*g];
                while cursor[*g] < members.len() && taken_host[members[cursor[*g]]] {
                    cursor[*g] += 1;
                }
                let first = members[cursor[*g]..]
                    .iter()
                    .copied()
                    .find(|m| !taken_host[*m] && fits(hosts[*m].1, &taken));
                let Some(first) = first else { continue };
                best = match best {
                    Some((b, i)) => Some((b, i.min(first))),
                    None => Some((*score, first)),
                };
            }
            let Some((_, i)) = best else { continue };
            taken_host[i] = true;
            free_hosts -= 1;
            let (_, node, gpu) = hosts[i];
            let t = taken.entry(node).or_default();
            t.0 += job.task.cpu_milli;
            t.1 += job.task.mem_mib;
            decision.shares.push(Placement {
                job: *id,
                tasks: vec![TaskPlacement {
                    node,
                    gpus: vec![gpu],
                }],
            });
        }
    }
}

/// `elastic`: see the module docs.
#[derive(Debug, Clone)]
pub struct ElasticAlloc {
    rates: TableRates,
    /// The least `marginal_efficiency` worth a grow (and its restart).
    min_efficiency: f64,
    rounds: Rounds,
    /// Candidate moves and grows by job shape ([`Self::candidates`]).
    cache: RefCell<HashMap<CandidateKey, Arc<Candidates>, FixedState>>,
    /// Where the next round's scan of running jobs starts ([`Self::use_idle`]).
    cursor: JobId,
}

/// An elastic job's shape: workload, GPU model (its number), GPUs now, GPUs a task,
/// `min_gpus`, `max_gpus`.
type CandidateKey = (WorkloadId, u32, u32, u32, u32, u32);

/// What an elastic job of one shape may do with idle GPUs, from the table alone.
#[derive(Debug, Default)]
struct Candidates {
    /// (gain, GPU model, size), largest gain first.
    moves: Vec<(f64, GpuModelId, u32)>,
    /// (size, estimated marginal efficiency), largest size first.
    grows: Vec<(u32, f64)>,
}

impl ElasticAlloc {
    /// Blocked jobs, from the head of the queue, that a decision tries to admit by a shrink:
    /// a bound on its cost (each try is a placement per running elastic job).
    pub const ADMIT_TRIES: usize = 4;
    /// Shrinks a decision tries (each a placement of a blocked job), in all.
    pub const SHRINK_TRIES: usize = 16;
    /// Grows and moves a decision makes at most (each a resize of one job).
    pub const GROWS: usize = 8;
    /// Running elastic jobs a round looks at for moves and grows.
    pub const SCAN: usize = 128;
    /// The least speedup a move to another GPU model must bring (it pays a restart).
    pub const MOVE_GAIN: f64 = 1.25;

    /// Reads rates from `table`; refused when `config` is not valid.
    pub fn new(
        table: Arc<ThroughputTable>,
        config: &ElasticConfig,
    ) -> Result<ElasticAlloc, String> {
        config.validate()?;
        Ok(ElasticAlloc {
            rates: TableRates::new(table),
            cache: RefCell::default(),
            cursor: JobId(0),
            min_efficiency: config.min_efficiency,
            rounds: Rounds {
                every: round(config.round_s, "elastic")?,
                next: None,
            },
        })
    }

    /// `job`'s table rate on `tasks` (its GPU count there, consolidated or spread as the
    /// simulator judges it: more nodes than its model's largest node needs is spread).
    fn rate_on(&self, spec: &ClusterSpec, job: &JobSpec, tasks: &[TaskPlacement]) -> f64 {
        let Some(first) = tasks.first() else {
            return 0.0;
        };
        let gpus = tasks.len() as u32 * job.task.gpus;
        let model = spec.node(first.node).gpu_model;
        // Distinct nodes, without allocating (an elastic job has a handful of tasks).
        let mut nodes = 0u32;
        for (i, t) in tasks.iter().enumerate() {
            if tasks[..i].iter().any(|u| u.node == t.node) {
                continue;
            }
            if spec.node(t.node).gpu_model != model {
                return 0.0;
            }
            nodes += 1;
        }
        let per_node = model
            .and_then(|m| self.rates.per_node.get(m.index()).copied())
            .unwrap_or(1)
            .max(1);
        let placement = if nodes > gpus.div_ceil(per_node) {
            Consolidation::Spread
        } else {
            Consolidation::Consolidated
        };
        self.rates.alone(spec, job, first.node, gpus, placement)
    }

    /// Whether running `a` is an elastic typed job this decision may resize: preemptible,
    /// alone on its GPUs, not freed or preempted by the decision so far.
    fn resizable(
        ctx: &DecisionContext<'_>,
        planner: &Planner<'_>,
        decision: &Decision,
        a: &Allocation,
    ) -> bool {
        a.elastic
            && a.preemptible
            && ctx.job(a.job).workload.is_some()
            && !planner.state().shares_gpu(a)
            && !planner.has_freed(a.job)
            && !decision.preemptions.contains(&a.job)
    }

    /// Running elastic typed jobs the decision has not touched ([`Self::resizable`]), with
    /// their task counts and the GPU model of their first task.
    fn elastic_running(
        ctx: &DecisionContext<'_>,
        planner: &Planner<'_>,
        decision: &Decision,
    ) -> Vec<(JobId, usize, Option<GpuModelId>)> {
        let state = planner.state();
        state
            .running()
            .filter(|a| Self::resizable(ctx, planner, decision, a))
            .map(|a| {
                let model = a
                    .tasks
                    .first()
                    .and_then(|t| state.spec().node(t.node).gpu_model);
                (a.job, a.tasks.len(), model)
            })
            .collect()
    }

    /// Whether shrinking running job `id` to its first `keep` tasks leaves some node it uses
    /// with at least `gpus` whole GPUs free.
    fn frees_a_node(planner: &Planner<'_>, id: JobId, keep: usize, gpus: u32) -> bool {
        let state = planner.state();
        let Some(a) = state.allocation(id) else {
            return false;
        };
        let dropped = &a.tasks[keep.min(a.tasks.len())..];
        dropped.iter().any(|t| {
            let freed: u32 = dropped
                .iter()
                .filter(|u| u.node == t.node)
                .map(|u| u.gpus.len() as u32)
                .sum();
            state.free_whole_gpus(t.node) + freed >= gpus
        })
    }

    /// Reserves `extra` more tasks of running `job` on GPU model `model`, each on a node of
    /// `tasks` (its current ones) or of the tasks placed so far where one fits (a grown job
    /// stays as consolidated as it can), else by best fit on another node of that model;
    /// `None` when they do not all fit (the caller undoes the partial reservation).
    fn place_extra(
        planner: &mut Planner<'_>,
        job: &JobSpec,
        extra: u32,
        tasks: &[TaskPlacement],
        model: GpuModelId,
    ) -> Option<Vec<TaskPlacement>> {
        let mut one = job.clone();
        one.tasks = 1;
        let spec = planner.state().spec();
        let mut mask = spec.job_mask(job);
        mask.models &= 1u64.checked_shl(model.0).unwrap_or(0);
        let mut out: Vec<TaskPlacement> = Vec::with_capacity(extra as usize);
        for _ in 0..extra {
            let state = planner.state();
            let task = tasks
                .iter()
                .chain(&out)
                .find_map(|t| state.fit_task_on(&job.task, mask, t.node, FitStrategy::BestFit))
                .or_else(|| state.find_task_node(&job.task, mask, FitStrategy::BestFit))?;
            planner.reserve(&one, std::slice::from_ref(&task)).ok()?;
            out.push(task);
        }
        Some(out)
    }

    /// The tasks running job `id` holds in the planner's state (empty if none).
    fn tasks_of(planner: &Planner<'_>, id: JobId) -> Vec<TaskPlacement> {
        planner
            .state()
            .allocation(id)
            .map(|a| a.tasks.to_vec())
            .unwrap_or_default()
    }

    /// Starts blocked elastic typed jobs of `rest` (among its first [`Self::ADMIT_TRIES`]) at
    /// the largest size below their trace size, down to `min_gpus`, that the placer fits now
    /// and the table rates above 0 there: they start at once instead of waiting for their full
    /// size (Pollux and ElasticFlow admit jobs at any size in range), and may grow later.
    /// Returns whether it started any.
    fn admit_smaller(
        &self,
        ctx: &DecisionContext<'_>,
        planner: &mut Planner<'_>,
        placer: &mut dyn Placer,
        rest: &[JobId],
        decision: &mut Decision,
    ) -> bool {
        let mut started = false;
        for id in rest.iter().take(Self::ADMIT_TRIES) {
            let job = ctx.job(*id);
            let Some(range) = job.elastic else { continue };
            if self.rates.workload(job).is_none() {
                continue;
            }
            let g = job.task.gpus.max(1);
            let least = (range.min_gpus / g).max(1);
            for tasks in (least..job.tasks).rev() {
                let mut smaller = job.clone();
                smaller.tasks = tasks;
                let mark = planner.mark();
                if let Some(placed) = placer.place(planner, &smaller)
                    && self.rate_on(planner.state().spec(), job, &placed) > 0.0
                {
                    decision.placements.push(Placement {
                        job: *id,
                        tasks: placed,
                    });
                    started = true;
                    break;
                }
                planner.undo_to(mark);
            }
        }
        started
    }

    /// Admits the first blocked job of `rest` (among its first [`Self::ADMIT_TRIES`]) that fits
    /// once one running elastic job shrinks to its `min_gpus` (keeping its first tasks): the
    /// largest such job first.
    fn shrink_to_admit(
        &self,
        ctx: &DecisionContext<'_>,
        planner: &mut Planner<'_>,
        placer: &mut dyn Placer,
        rest: &[JobId],
        decision: &mut Decision,
    ) {
        let mut elastic = Self::elastic_running(ctx, planner, decision);
        if elastic.is_empty() {
            return;
        }
        elastic.sort_by_key(|(id, tasks, _)| (std::cmp::Reverse(*tasks), *id));
        let state = planner.state();
        let spec = state.spec();
        // Whole GPUs free per GPU model.
        let mut free = vec![0u64; spec.models.len()];
        for (n, node) in spec.nodes.iter().enumerate() {
            if let Some(m) = node.gpu_model {
                free[m.index()] += u64::from(state.free_whole_gpus(NodeId(n as u32)));
            }
        }
        let mut budget = Self::SHRINK_TRIES;
        for blocked in rest.iter().take(Self::ADMIT_TRIES) {
            let blocked_job = ctx.job(*blocked);
            let needs = blocked_job.gpus_total();
            let mask = planner.state().spec().job_mask(blocked_job);
            let free_allowed: u64 = free
                .iter()
                .enumerate()
                .filter(|(m, _)| mask.allows_model(GpuModelId(*m as u32)))
                .map(|(_, f)| *f)
                .sum();
            for (id, tasks, model) in &elastic {
                if budget == 0 {
                    return;
                }
                let job = ctx.job(*id);
                let Some(range) = job.elastic else { continue };
                let keep = (range.min_gpus / job.task.gpus) as usize;
                if keep >= *tasks || keep == 0 {
                    continue;
                }
                // Shrinking it cannot free enough GPUs the blocked job may use, whatever the
                // placement.
                let freed = (tasks - keep) as u64 * u64::from(job.task.gpus);
                if !model.is_some_and(|m| mask.allows_model(m)) || free_allowed + freed < needs {
                    continue;
                }
                // A one-task blocked job needs one node with room for all of its GPUs: some
                // node of the shrunk job must then have that many free.
                if blocked_job.tasks == 1
                    && blocked_job.task.gpus > 1
                    && !Self::frees_a_node(planner, *id, keep, blocked_job.task.gpus)
                {
                    continue;
                }
                budget -= 1;
                let mut kept = Self::tasks_of(planner, *id);
                kept.truncate(keep);
                let mark = planner.mark();
                planner.free_running(*id);
                if planner.reserve(job, &kept).is_ok()
                    && self.rate_on(planner.state().spec(), job, &kept) > 0.0
                    && let Some(placed) = placer.place(planner, ctx.job(*blocked))
                {
                    decision.resizes.push(Placement {
                        job: *id,
                        tasks: kept,
                    });
                    decision.placements.push(Placement {
                        job: *blocked,
                        tasks: placed,
                    });
                    return;
                }
                planner.undo_to(mark);
            }
        }
    }

    /// The candidates of an elastic job of workload `w` on `gpus_now` GPUs of `model` (range
    /// `min..=max` by `g`-GPU tasks), from the table alone, cached: the moves (gain over its
    /// consolidated rate now, GPU model, size; largest gain first) and the grows on its model
    /// (size, estimated marginal efficiency; largest size first).
    fn candidates(&self, key: CandidateKey) -> Arc<Candidates> {
        if let Some(c) = self.cache.borrow().get(&key) {
            return Arc::clone(c);
        }
        let (w, model, gpus_now, g, min, max) = key;
        let rates = &self.rates;
        let rate =
            |m: u32, n: u32| rates.alone_id(w, GpuModelId(m), n, Consolidation::Consolidated);
        let now = rate(model, gpus_now);
        let mut moves = Vec::new();
        let mut grows = Vec::new();
        if now > 0.0 {
            let sizes = || ((min / g).max(1)..=max / g).map(|k| k * g);
            for other in 0..rates.gpus.len() as u32 {
                if other == model {
                    continue;
                }
                // The fastest size there that uses each GPU at least as well as now.
                let best = sizes()
                    .map(|n| (rate(other, n), n))
                    .filter(|(r, n)| {
                        *r >= now * Self::MOVE_GAIN
                            && r / f64::from(*n) >= now / f64::from(gpus_now)
                    })
                    .max_by(|a, b| a.0.total_cmp(&b.0));
                if let Some((r, n)) = best {
                    moves.push((r / now, GpuModelId(other), n));
                }
            }
            moves.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.0.cmp(&b.1.0)));
            for n in sizes().filter(|n| *n > gpus_now) {
                let estimate = marginal_efficiency(now, gpus_now, rate(model, n), n);
                if estimate >= self.min_efficiency {
                    grows.push((n, estimate));
                }
            }
            grows.reverse();
        }
        let c = Arc::new(Candidates { moves, grows });
        self.cache.borrow_mut().insert(key, Arc::clone(&c));
        c
    }

    /// Gives GPUs left idle to running elastic jobs, up to [`Self::GROWS`] resizes: first
    /// moves to another GPU model the table rates at least [`Self::MOVE_GAIN`] times faster
    /// (largest gain first), then grows on the job's own model (largest estimated marginal
    /// efficiency first, sizes largest first, scored where the GPUs actually are). Looks at
    /// [`Self::SCAN`] elastic jobs a round, taking the running jobs in turn from a cursor, so
    /// that a round costs the same on any cluster.
    fn use_idle(
        &mut self,
        ctx: &DecisionContext<'_>,
        planner: &mut Planner<'_>,
        decision: &mut Decision,
    ) {
        let state = planner.state();
        let spec = state.spec();
        // Whole GPUs idle per model, at most (fractional jobs may hold parts of some).
        let idle: Vec<u64> = (0..spec.models.len())
            .map(|m| {
                let free = self.rates.capacity_milli[m]
                    .saturating_sub(state.allocated_gpu_milli_of(GpuModelId(m as u32)));
                free / u64::from(GPU_MILLI)
            })
            .collect();
        if idle.iter().all(|i| *i == 0) {
            return;
        }
        // (gain or efficiency, job, target model, sizes to try largest first, GPUs now, rate now)
        let mut moves: Vec<(f64, JobId, GpuModelId, u32, f64)> = Vec::new();
        let mut grows: Vec<(f64, JobId, Vec<u32>, u32, f64)> = Vec::new();
        let mut seen = 0usize;
        let mut visited = 0usize;
        let start = self.cursor;
        let running = state.running_from(start).chain(state.running_before(start));
        for a in running {
            visited += 1;
            if seen >= Self::SCAN || visited > 4 * Self::SCAN {
                self.cursor = a.job;
                break;
            }
            let job = ctx.job(a.job);
            let Some(range) = job.elastic else { continue };
            if !Self::resizable(ctx, planner, decision, a) {
                continue;
            }
            let (Some(w), Some(model)) = (
                self.rates.workload(job),
                a.tasks.first().and_then(|t| spec.node(t.node).gpu_model),
            ) else {
                continue;
            };
            seen += 1;
            let g = job.task.gpus.max(1);
            let gpus_now = a.tasks.len() as u32 * g;
            let c = self.candidates((w, model.0, gpus_now, g, range.min_gpus, range.max_gpus));
            if c.moves.is_empty() && c.grows.is_empty() {
                continue;
            }
            let now = self.rate_on(spec, job, &a.tasks);
            if now <= 0.0 {
                continue;
            }
            if let Some((gain, m, n)) = c
                .moves
                .iter()
                .find(|(_, m, n)| u64::from(*n) <= idle[m.index()])
            {
                moves.push((*gain, a.job, *m, *n, now));
            }
            // The sizes that fit the idle GPUs, largest first; ranked by the largest's estimate.
            let room = idle[model.index()];
            let fit: Vec<&(u32, f64)> = c
                .grows
                .iter()
                .filter(|(n, _)| u64::from(n - gpus_now) <= room)
                .collect();
            if let Some((_, estimate)) = fit.first() {
                let sizes = fit.iter().map(|(n, _)| *n).collect();
                grows.push((*estimate, a.job, sizes, gpus_now, now));
            }
        }
        if seen < Self::SCAN && visited <= 4 * Self::SCAN {
            self.cursor = JobId(0);
        }
        moves.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        grows.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut done = 0;
        for (_, id, model, n, now) in moves.into_iter().take(2 * Self::GROWS) {
            if done >= Self::GROWS {
                return;
            }
            let job = ctx.job(id);
            let mark = planner.mark();
            planner.free_running(id);
            if let Some(tasks) = Self::place_extra(planner, job, n / job.task.gpus, &[], model)
                && self.rate_on(planner.state().spec(), job, &tasks) >= now * Self::MOVE_GAIN
            {
                decision.resizes.push(Placement { job: id, tasks });
                done += 1;
            } else {
                planner.undo_to(mark);
            }
        }
        for (_, id, sizes, gpus_now, now) in grows.into_iter().take(2 * Self::GROWS) {
            if done >= Self::GROWS {
                return;
            }
            if planner.has_freed(id) {
                continue; // moved above
            }
            let job = ctx.job(id);
            let tasks = Self::tasks_of(planner, id);
            let Some(model) = tasks
                .first()
                .and_then(|t| planner.state().spec().node(t.node).gpu_model)
            else {
                continue;
            };
            for next in sizes {
                let extra = (next - gpus_now) / job.task.gpus;
                let mark = planner.mark();
                let grown =
                    Self::place_extra(planner, job, extra, &tasks, model).and_then(|more| {
                        let all: Vec<TaskPlacement> = tasks.iter().cloned().chain(more).collect();
                        let speed = self.rate_on(planner.state().spec(), job, &all);
                        (marginal_efficiency(now, gpus_now, speed, next) >= self.min_efficiency)
                            .then_some(all)
                    });
                planner.undo_to(mark);
                if let Some(all) = grown {
                    // The planner sees the grown job's tasks, for any modifier after this one.
                    let mark = planner.mark();
                    planner.free_running(id);
                    if planner.reserve(job, &all).is_ok() {
                        decision.resizes.push(Placement {
                            job: id,
                            tasks: all,
                        });
                        done += 1;
                    } else {
                        planner.undo_to(mark);
                    }
                    break;
                }
            }
        }
    }
}

/// The most GPUs one node of each cluster GPU model has (by `GpuModelId`).
fn gpus_per_model(spec: &ClusterSpec) -> Vec<u32> {
    let mut out = vec![0u32; spec.models.len()];
    for n in &spec.nodes {
        if let Some(m) = n.gpu_model {
            out[m.index()] = out[m.index()].max(n.gpus);
        }
    }
    out
}

impl Modifier for ElasticAlloc {
    fn name(&self) -> &str {
        "elastic"
    }

    fn acts_without_queue(&self) -> bool {
        true
    }

    fn rest_wanted(&self, ctx: &DecisionContext<'_>) -> usize {
        if self.rounds.is_due(ctx.now()) {
            Self::ADMIT_TRIES
        } else {
            0
        }
    }

    fn extend(
        &mut self,
        ctx: &DecisionContext<'_>,
        planner: &mut Planner<'_>,
        placer: &mut dyn Placer,
        rest: &[JobId],
        decision: &mut Decision,
    ) {
        // Once a round; and with nobody waiting, also as soon as jobs end (their GPUs are
        // idle now, and no arrival can want them before the next decision).
        let freed = ctx.pending().next().is_none() && !ctx.recently_finished().is_empty();
        if !self.rounds.due(ctx.now()) && !freed {
            return;
        }
        if self.rates.sync(planner.state().spec_arc()) {
            self.cache.get_mut().clear();
        }
        // Someone waits: start blocked elastic jobs smaller, else make room by a shrink. Then
        // GPUs still idle (nobody waiting can use them) go to running elastic jobs; a later
        // round shrinks one again when that admits someone.
        if !rest.is_empty() && !self.admit_smaller(ctx, planner, placer, rest, decision) {
            self.shrink_to_admit(ctx, planner, placer, rest, decision);
        }
        self.use_idle(ctx, planner, decision);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summed_normalised_rate_is_gavels() {
        // (pair, alone, summed): 3.0215 / 4.3948 + 24.798 / 34.2 = 0.6875 + 0.7251.
        let cases = [
            ([3.0215, 24.798], [4.3948, 34.2], 0.6875 + 0.7251),
            ([1.0, 1.0], [2.0, 2.0], 1.0),
            ([0.5, 0.25], [1.0, 1.0], 0.75),
            // Cannot run alone: no basis.
            ([1.0, 1.0], [0.0, 1.0], 0.0),
        ];
        for (pair, alone, want) in cases {
            let got = summed_normalised_rate(pair, alone);
            assert!((got - want).abs() < 1e-4, "{pair:?} {alone:?}: {got}");
        }
    }

    #[test]
    fn best_above_takes_the_largest_strictly_above_the_threshold() {
        let cases: [(&[f64], f64, Option<usize>); 5] = [
            (&[], 1.0, None),
            (&[0.9, 1.0], 1.0, None), // 1.0 does not beat 1.0
            (&[1.2, 1.37, 1.1], 1.0, Some(1)),
            (&[1.37, 1.37], 1.0, Some(0)), // the first of equals
            (&[1.2, 1.37], 1.3, Some(1)),
        ];
        for (scores, threshold, want) in cases {
            assert_eq!(
                best_above(scores, threshold),
                want,
                "{scores:?} > {threshold}"
            );
        }
    }

    #[test]
    fn marginal_efficiency_compares_extra_gpus_with_current_ones() {
        // (now, gpus, next, gpus, efficiency): linear 2 -> 4 at 1 per GPU is 1; 100.14 on 2
        // GPUs, 120.2 on 4: (120.2 - 100.14) / 2 extra GPUs / 50.07 per GPU now = 0.2003.
        let cases = [
            (2.0, 2, 4.0, 4, 1.0),
            (100.14, 2, 120.2, 4, (120.2 - 100.14) / 2.0 / 50.07),
            (1.0, 1, 1.5, 2, 0.5),
            (4.0, 4, 3.0, 8, -0.25), // slower when larger
            (1.0, 2, 2.0, 2, 0.0),   // not a grow
            (0.0, 1, 1.0, 2, 0.0),   // cannot run now
        ];
        for (now, n, next, m, want) in cases {
            let got = marginal_efficiency(now, n, next, m);
            assert!((got - want).abs() < 1e-9, "{now} {n} {next} {m}: {got}");
        }
    }
}
