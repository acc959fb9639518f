//! `gavel-maxmin`, `gavel-maxmin-agnostic`, `gavel-maxsum`: Gavel's round-based policies
//! (Narayanan et al., OSDI'20, §3 and §5; `scheduler/scheduler.py` of
//! `stanford-futuredata/gavel` @ [`crate::throughput::gavel::COMMIT`]). Whole policies, not
//! ORDER/PLACE parts: the allocation decides order, placement and preemption together.
//!
//! - **Allocation.** The active jobs (pending and running GPU jobs) and the cluster's GPU
//!   models give an LP ([`crate::optim`]): `X[m][j]`, the fraction of time job `m` should run
//!   on model `j`. Rates come from the run's throughput view for typed jobs, the catalog speed
//!   for untyped ones (what the simulator runs them at); `-agnostic` sees 1 wherever a job can
//!   run. As Gavel's simulator, the allocation is recomputed at a round when the job set has
//!   changed and `reset_s` (1920 s) has passed since the last recomputation; jobs that arrived
//!   since have no allocation and wait for it.
//! - **Rounds** of `round_s` (360 s). At each, per model, jobs are ranked by priority =
//!   `X[m][j] / share of time on j received since the last recomputation` (allocation x 1e9
//!   before any), ties by deficit (time owed from earlier allocations), then allocation;
//!   models are served fastest catalog speed first, each taking jobs down its ranking while
//!   GPUs remain (`_schedule_jobs_on_workers_helper`). A running job given its current model
//!   stays on its GPUs; the others are preempted, and the jobs to start are placed largest
//!   first on their model (best fit, where the table rates the placement). Restarts pay the
//!   simulator's restart overhead.
//! - **Between rounds** (arrivals, completions) nothing is preempted: pending jobs with an
//!   allocation start on GPUs left free, by the same ranking. A decision with nothing
//!   running is a round at once, with a fresh allocation if the job set changed.
//! - A job whose node constraints keep it off the model it was given (the LP counts GPUs,
//!   not labels) tries the other models where its allocation is positive, then anywhere.
//!
//! - **POP** (`[gavel] pop_k = 8`): the allocation LP split into `pop_k` sub-problems
//!   solved independently ([`optim::Pop`]); 1 (the default) solves it exactly.
//! - **Space sharing** (the `-ss` names; Gavel's `*_packed` policies): the LP also gets a
//!   variable per pair of active 1-GPU typed jobs that the table lets share a GPU
//!   ([`optim::Pair`]; the `-agnostic` one sees each pair rate relative to the job's rate
//!   alone on that model). A pair is ranked like a job, by its own time received together;
//!   a chosen pair takes one GPU: one job is placed (or keeps its GPU, when it already runs
//!   alone there on that model) and the other starts on the same GPU through the
//!   simulator's sharing (`Decision::shares`, as the `colocate` modifier). A pair chosen
//!   again on the GPU it shares keeps it. When one job of a pair leaves, its time together
//!   goes to the other's time alone until the next recomputation (Gavel's
//!   `_allocation_thread`).
//!
//! The policy keeps its own round clock; run with `tick_s = round_s` (the CLI's default for
//! these names) so that it is asked at every round while jobs wait. It never reads a job's
//! duration or progress. CPU-only jobs and jobs no single model can hold (a gang larger than
//! every model) are outside the rounds: they start best fit when they fit and are not
//! preempted.

use super::context::DecisionContext;
use super::heuristic::{Placer, Rated, StrategyPlacer};
use super::modifier::one_gpu;
use super::place::restricted_to;
use super::planner::Planner;
use super::{Decision, Placement, Policy, PolicyError};
use crate::cluster::FitStrategy;
use crate::optim::{self, AllocationError, Lp, Pop, Problem, Split};
use crate::units::{GpuModelId, JobId, SimTime};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Gavel's round and allocation-reset intervals (`scheduler.py`: `time_per_iteration=360`,
/// `minimum_time_between_allocation_resets=1920`).
pub const GAVEL_RESET_S: f64 = 1920.0;

/// The `[gavel]` knobs of a policy config file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GavelConfig {
    /// Seconds per round (Gavel: 360).
    pub round_s: f64,
    /// Least seconds between two recomputations of the allocation (Gavel: 1920); 0: at every
    /// round where the job set changed.
    pub reset_s: f64,
    /// POP's sub-problems ([`optim::Pop`], stratified split, a new split at each
    /// recomputation): 1 solves the exact LP; 8 is POP's setting for large clusters.
    pub pop_k: usize,
    /// Serve the GPU models in a random order at each round for `gavel-maxmin-agnostic`, as
    /// Gavel does for its heterogeneity-agnostic policies (`_schedule_jobs_on_workers`
    /// shuffles the worker types unless the policy is a `Perf` or `Packing` one). On by
    /// default; off: the fastest model first for every policy, which lets the agnostic
    /// policy see speeds.
    pub shuffle_agnostic: bool,
    /// At a round, GPUs left once the allocated jobs are served go to jobs with no
    /// allocation on that model but a rate there, lowest priority last, as Gavel's
    /// `_schedule_jobs_on_workers_helper` does (work-conserving). On by default; off: a
    /// model only runs jobs the allocation gives time on it.
    pub fill_unallocated: bool,
    /// Hold a round every `round_s` while jobs run, even with nobody waiting, as Gavel's
    /// simulator does (it may move running jobs between models). On by default; off: rounds
    /// only while jobs wait (the simulator asks no policy otherwise).
    pub rounds_without_queue: bool,
}

impl Default for GavelConfig {
    fn default() -> Self {
        GavelConfig {
            round_s: super::modifier::GAVEL_ROUND_S,
            reset_s: GAVEL_RESET_S,
            pop_k: 1,
            shuffle_agnostic: true,
            fill_unallocated: true,
            rounds_without_queue: true,
        }
    }
}

impl GavelConfig {
    fn resolve(&self) -> Result<(SimTime, SimTime), String> {
        let round = SimTime::from_secs_f64(self.round_s)
            .filter(|t| *t > SimTime::ZERO)
            .ok_or_else(|| format!("gavel round_s must be > 0, got {}", self.round_s))?;
        let reset = SimTime::from_secs_f64(self.reset_s)
            .ok_or_else(|| format!("gavel reset_s must be >= 0, got {}", self.reset_s))?;
        if self.pop_k == 0 {
            return Err("gavel pop_k must be >= 1 (1: the exact LP)".into());
        }
        Ok((round, reset))
    }
}

/// Which of Gavel's objectives the rounds follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GavelObjective {
    /// Heterogeneity-aware max-min fairness (Gavel's LAS, `max_min_fairness_perf`).
    MaxMin,
    /// The same with every rate 1 (`max_min_fairness`): the baseline Gavel compares with.
    MaxMinAgnostic,
    /// Max-sum of normalised throughput (`max_sum_throughput_perf`).
    MaxSum,
    /// ORACLE: finish-time fairness (Themis; `finish_time_fairness_perf`) on true remaining
    /// work ([`optim::finish_time_fairness`]). An upper bound, not a scheduler.
    FinishTimeFairnessOracle,
    /// ORACLE: least makespan of the active jobs (`min_total_duration_perf`) on true
    /// remaining work ([`optim::min_makespan`]). An upper bound, not a scheduler.
    MakespanOracle,
}

impl GavelObjective {
    /// Whether it reads true durations.
    pub fn is_oracle(self) -> bool {
        matches!(
            self,
            GavelObjective::FinishTimeFairnessOracle | GavelObjective::MakespanOracle
        )
    }
}

/// A job's time on each GPU model since the allocation was last recomputed.
#[derive(Debug, Clone)]
struct Received {
    /// When the job entered the books, or the last recomputation if later.
    since: SimTime,
    /// Wall ms run on each cluster GPU model since then.
    ms: Vec<u64>,
    /// Per model: time owed from earlier allocations (allocated minus received), ms.
    deficit: Vec<f64>,
}

/// Gavel's round-based policy; see the module docs.
pub struct GavelRounds {
    name: String,
    objective: GavelObjective,
    round: SimTime,
    reset: SimTime,
    pop_k: usize,
    /// Recomputations so far (the seed of POP's split).
    reallocations: u64,
    shuffle: bool,
    fill_unallocated: bool,
    rounds_without_queue: bool,
    /// Rounds so far (the seed of the shuffled model order).
    rounds: u64,
    /// Per job of the allocation: the models it may run on (a rate there and room for its
    /// gang), as a bit mask of model indices.
    runs_on: BTreeMap<JobId, u64>,
    /// True durations by job id: the `-oracle` objectives only.
    oracle: Option<std::sync::Arc<[SimTime]>>,
    /// The oracles' count of each active job's work done, reference-seconds (time run on each
    /// model times its table speed there; restart overheads and lost work not subtracted).
    work_s: BTreeMap<JobId, f64>,
    next_round: Option<SimTime>,
    last_reset: Option<SimTime>,
    last_seen: Option<SimTime>,
    /// The allocation: per job in it, per cluster GPU model.
    x: BTreeMap<JobId, Vec<f64>>,
    /// Whether the LP may pair jobs on one GPU (the `-ss` names).
    space_sharing: bool,
    /// The allocation of job pairs (lower id first) sharing a GPU, per cluster GPU model;
    /// only pairs with some time.
    pairs: BTreeMap<(JobId, JobId), Vec<f64>>,
    /// Jobs of the allocation that no single GPU model can hold (a gang larger than every
    /// model, or rated nowhere): outside the rounds, started best fit when they fit.
    outside: BTreeSet<JobId>,
    /// Whether the active job set changed since the allocation was computed.
    stale: bool,
    /// Time received by each combination: a job alone `(id, None)`, or a pair sharing a
    /// GPU `(lower id, Some(higher id))`.
    books: BTreeMap<Combo, Received>,
    placer: Rated<StrategyPlacer>,
}

/// A job alone, `(id, None)`, or two jobs sharing a GPU, `(lower id, Some(higher id))`.
type Combo = (JobId, Option<JobId>);

/// The jobs of a combination.
fn members(c: Combo) -> impl Iterator<Item = JobId> {
    std::iter::once(c.0).chain(c.1)
}

/// Each running job that shares a GPU, with its partner.
fn partners(cluster: &crate::cluster::ClusterState) -> BTreeMap<JobId, JobId> {
    cluster
        .shared_gpus()
        .flat_map(|(_, _, [a, b])| [(a, b), (b, a)])
        .collect()
}

/// The combination `job` runs in now: with its partner, or alone.
fn combo_of(partner: &BTreeMap<JobId, JobId>, job: JobId) -> Combo {
    match partner.get(&job) {
        Some(p) => (job.min(*p), Some(job.max(*p))),
        None => (job, None),
    }
}

impl std::fmt::Debug for GavelRounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GavelRounds")
            .field("name", &self.name)
            .field("jobs", &self.x.len())
            .finish()
    }
}

/// Priority of a job never run on a model since the last recomputation (`new_priority =
/// allocation * 1e9` in Gavel).
const UNSERVED: f64 = 1e9;

/// A pair's share of time below which the LP's answer counts as none (see `reallocate`).
const PAIR_NOISE: f64 = 1e-6;

impl GavelRounds {
    /// The rounds of a non-oracle `objective`.
    pub fn new(
        name: &str,
        objective: GavelObjective,
        config: &GavelConfig,
    ) -> Result<Self, String> {
        if objective.is_oracle() {
            return Err(format!(
                "`{name}` needs true durations (PolicyOptions::oracle_durations): it is an \
                 upper bound, not a real scheduler"
            ));
        }
        Self::build(name, objective, config, None)
    }

    /// The rounds of an `-oracle` objective, reading `durations` (true durations by job id:
    /// an upper bound, not a scheduler); any other objective ignores them.
    pub fn oracle(
        name: &str,
        objective: GavelObjective,
        config: &GavelConfig,
        durations: std::sync::Arc<[SimTime]>,
    ) -> Result<Self, String> {
        Self::build(name, objective, config, Some(durations))
    }

    fn build(
        name: &str,
        objective: GavelObjective,
        config: &GavelConfig,
        oracle: Option<std::sync::Arc<[SimTime]>>,
    ) -> Result<Self, String> {
        let (round, reset) = config.resolve()?;
        let oracle = oracle.filter(|_| objective.is_oracle());
        Ok(GavelRounds {
            name: name.to_string(),
            objective,
            round,
            reset,
            pop_k: config.pop_k,
            reallocations: 0,
            shuffle: config.shuffle_agnostic && objective == GavelObjective::MaxMinAgnostic,
            fill_unallocated: config.fill_unallocated,
            rounds_without_queue: config.rounds_without_queue,
            rounds: 0,
            runs_on: BTreeMap::new(),
            oracle,
            work_s: BTreeMap::new(),
            next_round: None,
            last_reset: None,
            last_seen: None,
            x: BTreeMap::new(),
            space_sharing: false,
            pairs: BTreeMap::new(),
            stale: true,
            outside: BTreeSet::new(),
            books: BTreeMap::new(),
            placer: Rated::new(StrategyPlacer::new("best-fit", FitStrategy::BestFit)),
        })
    }

    /// The same rounds with space sharing: the LP pairs 1-GPU typed jobs on one GPU where
    /// the run's throughput table lets them share (the `-ss` names).
    pub fn with_space_sharing(mut self) -> Self {
        self.space_sharing = true;
        self
    }

    /// The allocation row of `job` alone (per cluster GPU model), if it has one.
    pub fn allocation(&self, job: JobId) -> Option<&[f64]> {
        self.x.get(&job).map(Vec::as_slice)
    }

    /// The allocation row of jobs `a` and `b` sharing a GPU (per cluster GPU model), if the
    /// pair has time.
    pub fn pair_allocation(&self, a: JobId, b: JobId) -> Option<&[f64]> {
        self.pairs.get(&(a.min(b), a.max(b))).map(Vec::as_slice)
    }

    /// The allocation of combination `c` on model `j`.
    fn share_of(&self, c: Combo, j: usize) -> f64 {
        let row = match c.1 {
            None => self.x.get(&c.0),
            Some(b) => self.pairs.get(&(c.0, b)),
        };
        row.and_then(|r| r.get(j)).copied().unwrap_or(0.0)
    }

    /// Adds the time running jobs ran since the previous decision to their books (a pair's
    /// time once, to the pair).
    fn account(&mut self, ctx: &DecisionContext<'_>, models: usize) {
        let now = ctx.now();
        let cluster = ctx.cluster();
        let partner = partners(&cluster);
        let started = |id: JobId| ctx.runtime(id).run_start.unwrap_or(now);
        for alloc in cluster.running() {
            let Some(model) = model_of(&cluster, alloc.job) else {
                continue;
            };
            let last = self.last_seen.unwrap_or(now);
            if self.oracle.is_some() {
                let from = started(alloc.job).max(last);
                let gpus = u32::try_from(ctx.job(alloc.job).gpus_total()).unwrap_or(u32::MAX);
                let speed = ctx.speed(alloc.job, model, gpus).unwrap_or_else(|| {
                    cluster
                        .spec()
                        .models
                        .get(model.index())
                        .map_or(1.0, |m| m.speed)
                });
                *self.work_s.entry(alloc.job).or_insert(0.0) +=
                    now.saturating_sub(from).secs_f64() * speed;
            }
            let combo = combo_of(&partner, alloc.job);
            if combo.0 != alloc.job {
                continue;
            }
            // Together since the later of the two started.
            let from = members(combo).map(started).fold(last, SimTime::max);
            let entry = self.books.entry(combo).or_insert_with(|| Received {
                since: from,
                ms: vec![0; models],
                deficit: vec![0.0; models],
            });
            if let Some(ms) = entry.ms.get_mut(model.index()) {
                *ms += now.saturating_sub(from.max(entry.since)).ms();
            }
        }
    }

    /// Recomputes the allocation for `active` and starts new books: each job's time owed
    /// under the old allocation goes to its deficit (`_reset_time_run_so_far`).
    fn reallocate(
        &mut self,
        ctx: &DecisionContext<'_>,
        active: &[JobId],
    ) -> Result<(), AllocationError> {
        let now = ctx.now();
        let cluster = ctx.cluster();
        let spec = cluster.spec();
        let models = spec.models.len();
        let mut capacity = vec![0.0; models];
        for n in &spec.nodes {
            if let Some(m) = n.gpu_model {
                capacity[m.index()] += f64::from(n.gpus);
            }
        }
        let view = ctx.throughputs();
        let rows: Vec<Vec<f64>> = active
            .iter()
            .map(|id| {
                let job = ctx.job(*id);
                let mut row = vec![0.0; models];
                match view.filter(|v| v.is_typed(*id)) {
                    Some(v) => {
                        for (m, speed) in v.speeds(job) {
                            row[m.index()] = speed;
                        }
                    }
                    None => {
                        let mask = spec.model_mask(&job.gpu_types);
                        for (i, m) in spec.models.iter().enumerate() {
                            if mask & (1u64 << i) != 0 && capacity[i] > 0.0 {
                                row[i] = m.speed;
                            }
                        }
                    }
                }
                row
            })
            .collect();
        let pairs = match view.filter(|_| self.space_sharing) {
            Some(v) => self.pairs_of(ctx, v, active, &rows),
            None => Vec::new(),
        };
        let rows = match self.objective {
            GavelObjective::MaxMinAgnostic => optim::agnostic(&rows),
            _ => rows,
        };
        let scale: Vec<f64> = active
            .iter()
            .map(|id| (ctx.job(*id).gpus_total() as f64).max(1.0))
            .collect();
        self.outside = active
            .iter()
            .zip(&rows)
            .zip(&scale)
            .filter(|((_, row), s)| {
                !row.iter()
                    .zip(&capacity)
                    .any(|(t, c)| *t > 0.0 && **s <= *c)
            })
            .map(|((id, _), _)| *id)
            .collect();
        self.runs_on = active
            .iter()
            .zip(&rows)
            .zip(&scale)
            .map(|((id, row), s)| {
                let mask = row
                    .iter()
                    .zip(&capacity)
                    .enumerate()
                    .filter(|(_, (t, c))| **t > 0.0 && *s <= **c)
                    .fold(0u64, |m, (i, _)| m | (1u64 << i));
                (*id, mask)
            })
            .collect();
        let weights = vec![1.0; active.len()];
        let problem = Problem {
            throughputs: &rows,
            scale: &scale,
            capacity: &capacity,
            weights: &weights,
            pairs: &pairs,
        };
        let lp = match self.objective {
            GavelObjective::MaxSum => Lp::MaxSum,
            _ => Lp::MaxMin,
        };
        let pop = Pop {
            k: self.pop_k,
            seed: self.reallocations,
            split: Split::Stratified,
        };
        self.reallocations += 1;
        let allocation = match (&self.oracle, self.objective) {
            (Some(truth), objective) if objective.is_oracle() => {
                let done: Vec<f64> = active
                    .iter()
                    .map(|id| self.work_s.get(id).copied().unwrap_or(0.0))
                    .collect();
                // At least a second left: the count of work done runs ahead of the
                // simulator's by restart overheads and lost work.
                let remaining: Vec<f64> = active
                    .iter()
                    .zip(&done)
                    .map(|(id, d)| {
                        let total = truth.get(id.index()).map_or(0.0, |t| t.secs_f64());
                        (total - d).max(1.0)
                    })
                    .collect();
                if objective == GavelObjective::MakespanOracle {
                    optim::min_makespan(&problem, &remaining)?
                } else {
                    let elapsed_s: Vec<f64> = active
                        .iter()
                        .map(|id| now.saturating_sub(ctx.job(*id).submit).secs_f64())
                        .collect();
                    let progress = optim::Progress {
                        elapsed_s: &elapsed_s,
                        done: &done,
                        remaining: &remaining,
                    };
                    optim::finish_time_fairness(&problem, &progress)?
                }
            }
            _ => pop.solve(lp, &problem)?,
        };
        for (combo, book) in self.books.iter_mut() {
            let elapsed = now.saturating_sub(book.since).ms() as f64;
            let old = match combo.1 {
                None => self.x.get(&combo.0),
                Some(b) => self.pairs.get(&(combo.0, b)),
            };
            if let Some(old) = old {
                for (j, owed) in book.deficit.iter_mut().enumerate() {
                    *owed += old.get(j).copied().unwrap_or(0.0) * elapsed
                        - book.ms.get(j).copied().unwrap_or(0) as f64;
                }
            }
            book.since = now;
            book.ms.iter_mut().for_each(|ms| *ms = 0);
        }
        self.x = active.iter().copied().zip(allocation.x).collect();
        // Shares below PAIR_NOISE are the interior point's rounding, not time: dropped, or
        // thousands of pairs, each ranked `UNSERVED` times its share until first served,
        // would each take a round.
        self.pairs = pairs
            .iter()
            .zip(allocation.pairs)
            .map(|(pair, row)| {
                let row: Vec<f64> = row
                    .into_iter()
                    .map(|v| if v < PAIR_NOISE { 0.0 } else { v })
                    .collect();
                ((active[pair.jobs[0]], active[pair.jobs[1]]), row)
            })
            .filter(|(_, row)| row.iter().any(|v| *v > 0.0))
            .collect();
        for id in active {
            self.books.entry((*id, None)).or_insert_with(|| Received {
                since: now,
                ms: vec![0; models],
                deficit: vec![0.0; models],
            });
        }
        self.last_reset = Some(now);
        self.stale = false;
        Ok(())
    }

    /// The pairs of `active` jobs the LP may give shared time ([`optim::gaining_pairs`];
    /// `rows`: their rates alone, as the view gives them): 1-GPU typed jobs at the view's
    /// pair speeds, which the agnostic objective sees relative to each job's rate alone.
    fn pairs_of(
        &self,
        ctx: &DecisionContext<'_>,
        view: &crate::policy::ThroughputView,
        active: &[JobId],
        rows: &[Vec<f64>],
    ) -> Vec<optim::Pair> {
        let sharers: Vec<usize> = (0..active.len())
            .filter(|i| {
                let job = ctx.job(active[*i]);
                one_gpu(job) && view.is_typed(job.id)
            })
            .collect();
        let agnostic = self.objective == GavelObjective::MaxMinAgnostic;
        optim::gaining_pairs(rows, &sharers, agnostic, |a, b, j| {
            view.pair_speeds(ctx.job(active[a]), ctx.job(active[b]), GpuModelId(j as u32))
        })
    }

    /// `(priority, deficit, allocation)` of combination `c` on model `j`
    /// (`_update_priorities`).
    fn rank(&self, now: SimTime, c: Combo, j: usize) -> (f64, f64, f64) {
        let x = self.share_of(c, j);
        let Some(book) = self.books.get(&c) else {
            return (x * UNSERVED, 0.0, x);
        };
        let elapsed = now.saturating_sub(book.since).ms() as f64;
        let got = book.ms.get(j).copied().unwrap_or(0) as f64;
        let deficit = book.deficit.get(j).copied().unwrap_or(0.0);
        let priority = if got > 0.0 && elapsed > 0.0 {
            x / (got / elapsed)
        } else {
            x * UNSERVED
        };
        (priority, deficit, x)
    }
}

/// The cluster GPU model of running `job` (its first node's).
fn model_of(cluster: &crate::cluster::ClusterState, job: JobId) -> Option<GpuModelId> {
    let alloc = cluster.allocation(job)?;
    let node = alloc.tasks.first()?.node;
    cluster.spec().nodes.get(node.index())?.gpu_model
}

impl Policy for GavelRounds {
    fn name(&self) -> &str {
        &self.name
    }

    fn acts_every_round(&self) -> bool {
        self.rounds_without_queue
    }

    fn decide(&mut self, ctx: &DecisionContext<'_>) -> Result<Decision, PolicyError> {
        let now = ctx.now();
        let models = ctx.cluster().spec().models.len();
        self.account(ctx, models);
        self.last_seen = Some(now);
        // Active GPU jobs, in id order.
        let running: BTreeSet<JobId> = ctx.cluster().running().map(|a| a.job).collect();
        let active: Vec<JobId> = ctx
            .pending()
            .map(|p| p.spec.id)
            .chain(running.iter().copied())
            .filter(|id| ctx.job(*id).gpus_total() > 0)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let is_active = |id: &JobId| active.binary_search(id).is_ok();
        self.books
            .retain(|(a, b), _| is_active(a) && b.is_none_or(|b| is_active(&b)));
        // A pair one of whose jobs left: its time together goes to the other's time alone.
        let broken: Vec<(JobId, JobId)> = self
            .pairs
            .keys()
            .filter(|(a, b)| !(is_active(a) && is_active(b)))
            .copied()
            .collect();
        for key in broken {
            let Some(row) = self.pairs.remove(&key) else {
                continue;
            };
            for id in [key.0, key.1].into_iter().filter(|id| is_active(id)) {
                if let Some(alone) = self.x.get_mut(&id) {
                    alone.iter_mut().zip(&row).for_each(|(x, y)| *x += y);
                }
            }
        }
        self.work_s.retain(|id, _| active.binary_search(id).is_ok());
        if self.x.len() != active.len() || active.iter().any(|id| !self.x.contains_key(id)) {
            self.stale = true;
        }
        // An idle cluster does not wait for the round (nor for the reset interval): nothing
        // runs to be preempted, and the simulator stops asking once nothing runs.
        let idle = running.is_empty();
        let round = idle || self.next_round.is_none_or(|t| now >= t);
        if round {
            self.next_round = Some(now.saturating_add(self.round));
            let reset_due = idle
                || self
                    .last_reset
                    .is_none_or(|t| now.saturating_sub(t) >= self.reset);
            if self.stale && reset_due {
                self.reallocate(ctx, &active)
                    .map_err(|e| PolicyError::Failed {
                        policy: self.name.clone(),
                        message: e.to_string(),
                    })?;
            }
        }
        Ok(self.plan(ctx, &active, &running, round))
    }
}

impl GavelRounds {
    /// The round's (or, between rounds, the fill's) decision; see the module docs.
    fn plan(
        &mut self,
        ctx: &DecisionContext<'_>,
        active: &[JobId],
        running: &BTreeSet<JobId>,
        round: bool,
    ) -> Decision {
        let now = ctx.now();
        let cluster = ctx.cluster();
        let spec = cluster.spec();
        // GPUs left per model once pinned jobs are counted: all running jobs between rounds;
        // at a round, those it may not move (not preemptible, or outside the allocation).
        let mut left = vec![0u64; spec.models.len()];
        for n in &spec.nodes {
            if let Some(m) = n.gpu_model {
                left[m.index()] += u64::from(n.gpus);
            }
        }
        let old_tasks: BTreeMap<JobId, std::sync::Arc<[crate::cluster::TaskPlacement]>> = running
            .iter()
            .filter_map(|id| Some((*id, cluster.allocation(*id)?.tasks.clone())))
            .collect();
        let current: BTreeMap<JobId, GpuModelId> = running
            .iter()
            .filter_map(|id| Some((*id, model_of(&cluster, *id)?)))
            .collect();
        let partner = partners(&cluster);
        let movable_set: BTreeSet<JobId> = running
            .iter()
            .copied()
            .filter(|id| {
                round
                    && cluster.allocation(*id).is_some_and(|a| a.preemptible)
                    && self.x.contains_key(id)
                    && !self.outside.contains(id)
            })
            .collect();
        let movable = |id: &JobId| movable_set.contains(id);
        for id in running.iter().filter(|id| !movable(id)) {
            // Two pinned jobs sharing a GPU hold it once.
            if partner.get(id).is_some_and(|p| p < id && !movable(p)) {
                continue;
            }
            if let Some(m) = current.get(id) {
                left[m.index()] = left[m.index()].saturating_sub(ctx.job(*id).gpus_total());
            }
        }
        // Models fastest catalog speed first (Gavel: v100, p100, k80), then by id.
        let mut order: Vec<usize> = (0..spec.models.len()).collect();
        order.sort_by(|a, b| {
            spec.models[*b]
                .speed
                .total_cmp(&spec.models[*a].speed)
                .then(a.cmp(b))
        });
        // Placement fallbacks keep the fastest-first order; the round's serving order is
        // shuffled for the agnostic policy where Gavel shuffles it.
        let fallbacks = order.clone();
        if round && self.shuffle {
            use rand::SeedableRng;
            use rand::seq::SliceRandom;
            order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(self.rounds));
        }
        if round {
            self.rounds += 1;
        }
        let candidates: Vec<JobId> = active
            .iter()
            .copied()
            .filter(|id| !running.contains(id) || movable(id))
            .filter(|id| self.x.contains_key(id))
            .collect();
        let candidate_pairs: Vec<Combo> = self
            .pairs
            .keys()
            .filter(|(a, b)| {
                candidates.binary_search(a).is_ok() && candidates.binary_search(b).is_ok()
            })
            .map(|(a, b)| (*a, Some(*b)))
            .collect();
        // Per job chosen: its model and combination; and the combinations chosen, in order.
        let mut chosen: BTreeMap<JobId, (usize, Combo)> = BTreeMap::new();
        let mut picks: Vec<(Combo, usize)> = Vec::new();
        for &j in &order {
            let fill = round && self.fill_unallocated;
            let alone = candidates
                .iter()
                .filter(|id| {
                    self.x[*id].get(j).is_some_and(|x| *x > 0.0)
                        || (fill && self.runs_on.get(*id).is_some_and(|m| m & (1 << j) != 0))
                })
                .map(|id| (*id, None));
            let together = candidate_pairs
                .iter()
                .filter(|c| self.share_of(**c, j) > 0.0)
                .copied();
            let mut queue: Vec<(Combo, (f64, f64, f64))> = alone
                .chain(together)
                .map(|c| (c, self.rank(now, c, j)))
                .collect();
            queue.sort_by(|a, b| {
                let (pa, da, xa) = a.1;
                let (pb, db, xb) = b.1;
                pb.total_cmp(&pa)
                    .then(db.total_cmp(&da))
                    .then(xb.total_cmp(&xa))
                    .then(a.0.cmp(&b.0))
            });
            for (c, _) in queue {
                // A pair holds the GPUs of one of its jobs (both have the same size).
                let need = ctx.job(c.0).gpus_total();
                if members(c).any(|id| chosen.contains_key(&id)) || need > left[j] {
                    continue;
                }
                left[j] -= need;
                for id in members(c) {
                    chosen.insert(id, (j, c));
                }
                picks.push((c, j));
            }
        }
        // Running jobs that keep their GPUs: a pair chosen again where it shares, or the
        // host of a chosen combination: a job on that model that is alone on its GPU or,
        // where a pair breaks up, its lower id (so that one GPU keeps one host).
        let mut stays: BTreeSet<JobId> = BTreeSet::new();
        let mut hosts: BTreeMap<Combo, JobId> = BTreeMap::new();
        for (c, j) in &picks {
            let on_j = |id: &JobId| movable(id) && current.get(id).is_some_and(|m| m.index() == *j);
            if c.1.is_some() && members(*c).all(|id| on_j(&id)) && combo_of(&partner, c.0) == *c {
                stays.extend(members(*c));
                hosts.insert(*c, c.0);
                continue;
            }
            let may_host =
                |id: &JobId| on_j(id) && partner.get(id).is_none_or(|p| id < p && movable(p));
            if let Some(h) = members(*c).find(|id| may_host(id)) {
                stays.insert(h);
                hosts.insert(*c, h);
            }
        }
        drop(cluster);
        let mut decision = Decision::default();
        let mut planner = ctx.planner();
        // Movable jobs that do not stay stop (the chosen ones to start again elsewhere): all
        // are freed first, so that two jobs can swap models.
        for id in running.iter().filter(|id| movable(id)) {
            if stays.contains(id) {
                continue;
            }
            if !chosen.contains_key(id) {
                decision.preemptions.push(*id);
            }
            planner.free_running(*id);
        }
        // A GPU both of whose jobs leave it is free.
        for (a, b) in partner.iter().filter(|(a, b)| a < b) {
            planner.free_shared_gpu(*a, *b);
        }
        self.placer.observe(ctx);
        // Combinations to start (or move), largest first: the first job placed, unless a
        // member stays as its host.
        let mut starts: Vec<(Combo, usize)> = picks
            .iter()
            .filter(|(c, _)| !members(*c).all(|id| stays.contains(&id)))
            .copied()
            .collect();
        starts.sort_by_key(|(c, _)| (std::cmp::Reverse(ctx.job(c.0).gpus_total()), *c));
        let mut stuck = Vec::new();
        // Per pair to share a GPU: its host, the GPU (where the host is, or will be), and
        // the guest.
        let mut guests: Vec<(JobId, crate::cluster::TaskPlacement, JobId)> = Vec::new();
        for (c, j) in starts {
            let host = hosts.get(&c).copied().unwrap_or(c.0);
            let gpu = if stays.contains(&host) {
                old_tasks.get(&host).and_then(|t| t.first().cloned())
            } else {
                match self.place_on(&mut planner, ctx.job(host), j, &fallbacks) {
                    Some(tasks) => {
                        if running.contains(&host) {
                            decision.preemptions.push(host);
                        }
                        let first = tasks.first().cloned();
                        decision.placements.push(Placement { job: host, tasks });
                        first
                    }
                    None => {
                        if running.contains(&host) {
                            stuck.push(host);
                        }
                        None
                    }
                }
            };
            let Some(guest) = members(c).find(|id| *id != host) else {
                continue;
            };
            match gpu {
                Some(t) => guests.push((host, t, guest)),
                None if running.contains(&guest) => stuck.push(guest),
                None => {}
            }
        }
        // A job that could not move stays where it was if its GPUs are still free.
        for id in stuck {
            let tasks = old_tasks.get(&id).map(|t| t.to_vec()).unwrap_or_default();
            if tasks.is_empty() || planner.reserve(ctx.job(id), &tasks).is_err() {
                decision.preemptions.push(id);
            }
        }
        // Jobs outside the rounds (CPU-only, or no single model holds them): best fit when
        // they fit.
        let outside = ctx
            .pending()
            .filter(|p| p.spec.gpus_total() == 0 || self.outside.contains(&p.spec.id));
        for p in outside {
            if let Some(tasks) = self.placer.place(&mut planner, p.spec) {
                decision.placements.push(Placement {
                    job: p.spec.id,
                    tasks,
                });
            }
        }
        // Guests last: the simulator starts shares after placements, on what they left.
        let mut taken: BTreeMap<crate::units::NodeId, (u64, u64)> = BTreeMap::new();
        for (host, t, guest) in guests {
            let job = ctx.job(guest);
            let state = planner.state();
            let spec = state.spec();
            let node = t.node;
            let (cpu, mem) = taken.get(&node).copied().unwrap_or_default();
            let mask = spec.job_mask(job);
            let model = spec.node(node).gpu_model;
            let fits = model.is_some_and(|m| {
                mask.allows_model(m)
                    && ctx
                        .throughputs()
                        .is_some_and(|v| v.pair_speeds(ctx.job(host), job, m).is_some())
            }) && mask.classes & (1u64 << spec.node_class(node)) != 0
                && state.cpu_free(node) >= cpu + job.task.cpu_milli
                && state.mem_free(node) >= mem + job.task.mem_mib;
            let Some(&gpu) = t.gpus.first().filter(|_| fits) else {
                if running.contains(&guest) {
                    decision.preemptions.push(guest);
                }
                continue;
            };
            let entry = taken.entry(node).or_default();
            entry.0 += job.task.cpu_milli;
            entry.1 += job.task.mem_mib;
            if running.contains(&guest) {
                decision.preemptions.push(guest);
            }
            decision.shares.push(Placement {
                job: guest,
                tasks: vec![crate::cluster::TaskPlacement {
                    node,
                    gpus: vec![gpu],
                }],
            });
        }
        decision
    }

    /// Places `job` on model `j`, else (its node constraints keep it off `j`, or `j`'s free
    /// GPUs are fragmented) on the first model of `fallbacks` where its allocation is
    /// positive, else anywhere it runs: never stuck where the LP's capacity count, which
    /// knows no constraints, says it fits.
    fn place_on(
        &mut self,
        planner: &mut Planner<'_>,
        job: &crate::job::JobSpec,
        j: usize,
        fallbacks: &[usize],
    ) -> Option<Vec<crate::cluster::TaskPlacement>> {
        let row = self.x.get(&job.id).cloned().unwrap_or_default();
        let others = fallbacks
            .iter()
            .copied()
            .filter(|k| *k != j && row.get(*k).is_some_and(|x| *x > 0.0));
        for k in std::iter::once(j).chain(others) {
            let restricted = restricted_to(job, planner.state().spec(), &[GpuModelId(k as u32)]);
            if let Some(tasks) = self.placer.place(planner, &restricted) {
                return Some(tasks);
            }
        }
        self.placer.place(planner, job)
    }
}
