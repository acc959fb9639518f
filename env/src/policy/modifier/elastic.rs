//! Heuristics that use GPU sharing and elastic jobs (issue #25), each a registry modifier:
//!
//! - `colocate`: a 1-GPU typed job the pass could not place shares the GPU of a running 1-GPU
//!   typed job when the pair's summed normalised rate (each job's pair rate over its rate
//!   alone on that GPU) beats a threshold: Gavel's space-sharing criterion (OSDI'20, §3.1;
//!   it reports a median of 1.37 on a V100).
//! - `elastic`: Pollux/ElasticFlow in spirit: a blocked elastic job starts at a smaller size
//!   that fits now; else a blocked job is admitted by shrinking a running elastic job toward
//!   its `min_gpus`. GPUs still idle then go to the running elastic job whose next size gives
//!   the best marginal speedup per extra GPU, when the extra GPUs are used at least half as
//!   well as its current ones.
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
use crate::cluster::{ClusterSpec, FitStrategy, TaskPlacement};
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
    /// The names of the cluster GPU models `gpus` was resolved for.
    models: Vec<String>,
    /// Per cluster GPU model (by `GpuModelId`): its table entry, `None` when the table lacks it.
    gpus: Vec<Option<TableGpu>>,
    /// The table's workload ids by their exact names (other spellings take the table's
    /// case-insensitive lookup).
    workloads: HashMap<String, WorkloadId, FixedState>,
    /// Per cluster GPU model: the most GPUs one node of it has ([`gpus_per_model`]).
    per_node: Vec<u32>,
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
            models: Vec::new(),
            gpus: Vec::new(),
            workloads,
            per_node: Vec::new(),
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

    /// Resolves `spec`'s GPU models against the table, when they differ from the last ones.
    fn sync(&mut self, spec: &ClusterSpec) {
        if self.models.len() == spec.models.len()
            && self
                .models
                .iter()
                .zip(&spec.models)
                .all(|(a, b)| *a == b.name)
        {
            return;
        }
        self.models = spec.models.iter().map(|m| m.name.clone()).collect();
        self.per_node = gpus_per_model(spec);
        self.memo.get_mut().clear();
        self.gpus = spec
            .models
            .iter()
            .map(|m| self.table.gpu(&m.name).ok())
            .collect();
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
        let rate = || {
            let w = self.workload(job)?;
            let model = spec.node(node).gpu_model?;
            let key = (w, model.0, gpus, placement);
            if let Some(r) = self.memo.borrow().get(&key) {
                return Some(*r);
            }
            let gpu = self.gpus.get(model.index()).copied().flatten();
            let r = gpu.and_then(|g| self.table.rate(w, g, gpus, placement).ok());
            let r = r.unwrap_or(0.0);
            self.memo.borrow_mut().insert(key, r);
            Some(r)
        };
        rate().unwrap_or(0.0)
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
fn one_gpu(job: &JobSpec) -> bool {
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
        self.rates.sync(planner.state().spec());
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
}

impl ElasticAlloc {
    /// Blocked jobs, from the head of the queue, that a decision tries to admit by a shrink:
    /// a bound on its cost (each try is a placement per running elastic job).
    pub const ADMIT_TRIES: usize = 4;
    /// Shrinks a decision tries (each a placement of a blocked job), in all.
    pub const SHRINK_TRIES: usize = 16;
    /// Grows and moves a decision makes at most (each a resize of one job).
    pub const GROWS: usize = 8;
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

    /// Running elastic typed jobs the decision has not touched, with their task counts and
    /// the GPU model of their first task.
    fn elastic_running(
        ctx: &DecisionContext<'_>,
        planner: &Planner<'_>,
        decision: &Decision,
    ) -> Vec<(JobId, usize, Option<GpuModelId>)> {
        let state = planner.state();
        state
            .running()
            .filter(|a| {
                a.elastic
                    && a.preemptible
                    && ctx.job(a.job).workload.is_some()
                    && !state.shares_gpu(a)
                    && !planner.has_freed(a.job)
                    && !decision.preemptions.contains(&a.job)
            })
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
    /// stays as consolidated as it can), else by best fit on another node of that model; `None` when they do not all fit (the caller undoes the partial reservation).
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

    /// Moves one running elastic job to GPUs of another model left idle where the table rates
    /// it at least [`Self::MOVE_GAIN`] times faster, using each GPU at least as well as now
    /// (Gavel and Sia give each job the GPU type it runs fastest on, round by round; a resize
    /// is the restart such a move costs). The job with the largest gain moves, at the size
    /// (in its range) the table rates fastest there. Returns whether it moved one.
    fn migrate(
        &self,
        ctx: &DecisionContext<'_>,
        planner: &mut Planner<'_>,
        decision: &mut Decision,
    ) -> bool {
        let state = planner.state();
        let spec = state.spec();
        let mut idle_by_model = vec![0u64; spec.models.len()];
        let mut model_node: Vec<Option<NodeId>> = vec![None; spec.models.len()];
        for (n, node) in spec.nodes.iter().enumerate() {
            if let Some(m) = node.gpu_model {
                idle_by_model[m.index()] += u64::from(state.free_whole_gpus(NodeId(n as u32)));
                model_node[m.index()].get_or_insert(NodeId(n as u32));
            }
        }
        // (gain, job, GPU model, size)
        let mut moves: Vec<(f64, JobId, GpuModelId, u32)> = Vec::new();
        for (id, _, model) in Self::elastic_running(ctx, planner, decision) {
            let job = ctx.job(id);
            let (Some(range), Some(model)) = (job.elastic, model) else {
                continue;
            };
            let state = planner.state();
            let Some(tasks) = state.allocation(id).map(|a| &a.tasks[..]) else {
                continue;
            };
            let now = self.rate_on(spec, job, tasks);
            let gpus_now = tasks.len() as u32 * job.task.gpus;
            if now <= 0.0 {
                continue;
            }
            let mask = spec.job_mask(job);
            let g = job.task.gpus;
            let mut best: Option<(f64, GpuModelId, u32)> = None;
            for (m, idle) in idle_by_model.iter().enumerate() {
                let other = GpuModelId(m as u32);
                let Some(node) = model_node[m] else { continue };
                if other == model || *idle == 0 || !mask.allows_model(other) {
                    continue;
                }
                for k in (range.min_gpus / g).max(1)..=range.max_gpus / g {
                    let n = k * g;
                    if u64::from(n) > *idle {
                        break;
                    }
                    let rate = self
                        .rates
                        .alone(spec, job, node, n, Consolidation::Consolidated);
                    let per_gpu_ok = rate / f64::from(n) >= now / f64::from(gpus_now);
                    if rate >= now * Self::MOVE_GAIN
                        && per_gpu_ok
                        && best.is_none_or(|b| rate / now > b.0)
                    {
                        best = Some((rate / now, other, n));
                    }
                }
            }
            if let Some((gain, m, n)) = best {
                moves.push((gain, id, m, n));
            }
        }
        moves.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        for (_, id, model, n) in moves.into_iter().take(Self::ADMIT_TRIES) {
            let job = ctx.job(id);
            let now = self.rate_on(planner.state().spec(), job, &Self::tasks_of(planner, id));
            let mark = planner.mark();
            planner.free_running(id);
            if let Some(tasks) = Self::place_extra(planner, job, n / job.task.gpus, &[], model)
                && self.rate_on(planner.state().spec(), job, &tasks) >= now * Self::MOVE_GAIN
            {
                decision.resizes.retain(|p| p.job != id);
                decision.resizes.push(Placement { job: id, tasks });
                return true;
            }
            planner.undo_to(mark);
        }
        false
    }

    /// Gives idle GPUs to the running elastic job with the best marginal efficiency at its
    /// next size the table has (one grow a decision). Jobs are ranked by the efficiency their
    /// next size would have consolidated (a table lookup); only the best
    /// [`Self::ADMIT_TRIES`] are placed and scored where the GPUs actually are.
    /// Returns whether it grew a job.
    fn grow(
        &self,
        ctx: &DecisionContext<'_>,
        planner: &mut Planner<'_>,
        decision: &mut Decision,
    ) -> bool {
        let state = planner.state();
        let spec = state.spec();
        // Whole GPUs idle per GPU model: a job grows within its model.
        let mut idle_by_model = vec![0u64; spec.models.len()];
        for (n, node) in spec.nodes.iter().enumerate() {
            if let Some(m) = node.gpu_model {
                idle_by_model[m.index()] += u64::from(state.free_whole_gpus(NodeId(n as u32)));
            }
        }
        if idle_by_model.iter().all(|i| *i == 0) {
            return false;
        }
        // (estimated efficiency of the largest size, job, GPUs now, its rate now, the sizes)
        let mut ranked = Vec::new();
        for (id, _, model) in Self::elastic_running(ctx, planner, decision) {
            let job = ctx.job(id);
            let Some(range) = job.elastic else { continue };
            let idle = model.map_or(0, |m| idle_by_model[m.index()]);
            if idle == 0 {
                continue;
            }
            let state = planner.state();
            let Some(tasks) = state.allocation(id).map(|a| &a.tasks[..]) else {
                continue;
            };
            let spec = state.spec();
            let now = self.rate_on(spec, job, tasks);
            let g = job.task.gpus;
            let gpus_now = tasks.len() as u32 * g;
            // The largest size up, within the GPUs left idle, that the table rates alone on
            // this model (consolidated) at a marginal efficiency of at least the knob.
            // Every such size, largest first: where the GPUs are may spread the job, so the
            // placement below tries them in turn.
            let mut sizes: Vec<(u32, f64)> = (gpus_now / g + 1..=range.max_gpus / g)
                .map(|k| k * g)
                .take_while(|n| u64::from(n - gpus_now) <= idle)
                .filter_map(|n| {
                    let rate =
                        self.rates
                            .alone(spec, job, tasks[0].node, n, Consolidation::Consolidated);
                    let estimate = marginal_efficiency(now, gpus_now, rate, n);
                    (rate > 0.0 && estimate >= self.min_efficiency).then_some((n, estimate))
                })
                .collect();
            sizes.reverse();
            if let Some((_, estimate)) = sizes.first() {
                let sizes: Vec<u32> = sizes.iter().map(|(n, _)| *n).collect();
                ranked.push((*estimate, id, gpus_now, now, sizes));
            }
        }
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut best: Option<(f64, JobId, Vec<TaskPlacement>)> = None;
        for (_, id, gpus_now, now, sizes) in ranked.into_iter().take(Self::ADMIT_TRIES) {
            let job = ctx.job(id);
            let tasks = Self::tasks_of(planner, id);
            let model = tasks
                .first()
                .and_then(|t| planner.state().spec().node(t.node).gpu_model);
            for next in sizes {
                let extra = (next - gpus_now) / job.task.gpus;
                let mark = planner.mark();
                let placed = model
                    .and_then(|m| Self::place_extra(planner, job, extra, &tasks, m))
                    .map(|more| {
                        let all: Vec<TaskPlacement> = tasks.iter().cloned().chain(more).collect();
                        let speed = self.rate_on(planner.state().spec(), job, &all);
                        (marginal_efficiency(now, gpus_now, speed, next), all)
                    });
                planner.undo_to(mark);
                if let Some((eff, all)) = placed
                    && eff >= self.min_efficiency
                {
                    if best.as_ref().is_none_or(|b| eff > b.0) {
                        best = Some((eff, id, all));
                    }
                    break;
                }
            }
        }
        if let Some((_, id, tasks)) = best {
            // The planner sees the grown job's tasks, for any modifier after this one.
            let mark = planner.mark();
            planner.free_running(id);
            if planner.reserve(ctx.job(id), &tasks).is_ok() {
                // A job grown twice in one decision is resized once, to its last size.
                decision.resizes.retain(|p| p.job != id);
                decision.resizes.push(Placement { job: id, tasks });
                return true;
            }
            planner.undo_to(mark);
        }
        false
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
        // Nobody waiting: idle GPUs go to elastic jobs at once (this is asked only when jobs
        // end, or ticks, so it cannot churn). Someone waiting: act once a round.
        if !rest.is_empty() && !self.rounds.due(ctx.now()) {
            return;
        }
        self.rates.sync(planner.state().spec());
        // Someone waits: start blocked elastic jobs smaller, else make room by a shrink. Then
        // GPUs still idle (nobody waiting can use them) go to running elastic jobs; a later
        // round shrinks one again when that admits someone.
        if !rest.is_empty() && !self.admit_smaller(ctx, planner, placer, rest, decision) {
            self.shrink_to_admit(ctx, planner, placer, rest, decision);
        }
        for _ in 0..Self::GROWS {
            if !self.migrate(ctx, planner, decision) && !self.grow(ctx, planner, decision) {
                break;
            }
        }
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
