//! Heuristics that use GPU sharing and elastic jobs (issue #25), each a registry modifier:
//!
//! - `colocate`: a 1-GPU typed job the pass could not place shares the GPU of a running 1-GPU
//!   typed job when the pair's summed normalised rate (each job's pair rate over its rate
//!   alone on that GPU) beats a threshold: Gavel's space-sharing criterion (OSDI'20, §3.1;
//!   it reports a median of 1.37 on a V100).
//! - `elastic`: Pollux/ElasticFlow in spirit: a blocked job is admitted by shrinking a running
//!   elastic job toward its `min_gpus`; otherwise GPUs left idle go to the running elastic job
//!   whose next size gives the best marginal speedup per extra GPU, when the extra GPUs are
//!   used at least half as well as its current ones.
//!
//! Both read rates from the throughput table they are built with
//! (`PolicyOptions::throughputs`): they never see a true duration, only what the table and
//! the cluster say. The scoring rules are pure functions, tested by table below.

use super::super::heuristic::{Modifier, Placer};
use super::super::planner::Planner;
use super::super::{Decision, DecisionContext, Placement};
use crate::cluster::{ClusterSpec, FitStrategy, TaskPlacement};
use crate::job::JobSpec;
use crate::throughput::{Consolidation, ThroughputTable};
use crate::units::{GPU_MILLI, GpuModelId, JobId, NodeId};
use std::collections::BTreeMap;
use std::sync::Arc;

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

/// A typed job's table rates as the heuristics need them.
#[derive(Debug, Clone)]
struct TableRates {
    table: Arc<ThroughputTable>,
}

impl TableRates {
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
            let w = self.table.workload(job.workload.as_ref()?.as_str()).ok()?;
            let gpu = self.table.gpu(&spec.node_model(node)?.name).ok()?;
            self.table.rate(w, gpu, gpus, placement).ok()
        };
        rate().unwrap_or(0.0)
    }

    /// The pair rates of `a` and `b` sharing one GPU of `node`'s model.
    fn pair(&self, spec: &ClusterSpec, a: &JobSpec, b: &JobSpec, node: NodeId) -> Option<[f64; 2]> {
        let wa = self.table.workload(a.workload.as_ref()?.as_str()).ok()?;
        let wb = self.table.workload(b.workload.as_ref()?.as_str()).ok()?;
        let gpu = self.table.gpu(&spec.node_model(node)?.name).ok()?;
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
}

impl Colocate {
    /// Gavel's break-even: a pair is worth it when it does more than one job alone.
    pub const DEFAULT_THRESHOLD: f64 = 1.0;

    pub fn new(table: Arc<ThroughputTable>, threshold: f64) -> Colocate {
        Colocate {
            rates: TableRates { table },
            threshold,
        }
    }
}

impl Modifier for Colocate {
    fn name(&self) -> &str {
        "colocate"
    }

    fn extend(
        &mut self,
        ctx: &DecisionContext<'_>,
        planner: &mut Planner<'_>,
        _placer: &mut dyn Placer,
        rest: &[JobId],
        decision: &mut Decision,
    ) {
        let state = planner.state();
        let spec = state.spec();
        // Running 1-GPU typed jobs alone on their GPU, not being preempted, in running order.
        let hosts: Vec<(JobId, NodeId, u8)> = state
            .running()
            .filter(|a| {
                let job = ctx.job(a.job);
                // Its placement now, not its trace shape (an elastic job may have grown).
                a.tasks.len() == 1
                    && a.tasks[0].gpus.len() == 1
                    && a.task.gpu_milli == GPU_MILLI
                    && job.workload.is_some()
                    && state.co_tenant(a.job).is_none()
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
        let mut groups: BTreeMap<(&str, Option<GpuModelId>), Vec<usize>> = BTreeMap::new();
        for (i, (id, node, _)) in hosts.iter().enumerate() {
            let w = ctx.job(*id).workload.as_ref().map_or("", |w| w.as_str());
            groups
                .entry((w, spec.node(*node).gpu_model))
                .or_default()
                .push(i);
        }
        let groups: Vec<Vec<usize>> = groups.into_values().collect();
        // Per guest workload: the groups scoring above the threshold, best first (equal
        // scores in group order), computed once a decision.
        let mut ranked: BTreeMap<&str, Vec<(f64, usize)>> = BTreeMap::new();
        // CPU and memory the shares chosen here take, per node.
        let mut taken: BTreeMap<NodeId, (u64, u64)> = BTreeMap::new();
        for id in rest {
            let job = ctx.job(*id);
            let Some(guest) = job.workload.as_ref().map(|w| w.as_str()) else {
                continue;
            };
            if !one_gpu(job) {
                continue;
            }
            let mask = spec.job_mask(job);
            let fits = |node: NodeId, taken: &BTreeMap<NodeId, (u64, u64)>| {
                let (cpu, mem) = taken.get(&node).copied().unwrap_or_default();
                let n = spec.node(node);
                n.gpu_model.is_some_and(|m| mask.allows_model(m))
                    && mask.classes & (1u64 << spec.node_class(node)) != 0
                    && state.cpu_free(node) >= cpu + job.task.cpu_milli
                    && state.mem_free(node) >= mem + job.task.mem_mib
            };
            let order = ranked.entry(guest).or_insert_with(|| {
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
                let first = groups[*g]
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
}

impl ElasticAlloc {
    /// Grow only while the extra GPUs work at least half as well as the current ones.
    pub const DEFAULT_MIN_EFFICIENCY: f64 = 0.5;
    /// Blocked jobs, from the head of the queue, that a decision tries to admit by a shrink:
    /// a bound on its cost (each try is a placement per running elastic job).
    pub const ADMIT_TRIES: usize = 4;
    /// Shrinks a decision tries (each a placement of a blocked job), in all.
    pub const SHRINK_TRIES: usize = 16;

    pub fn new(table: Arc<ThroughputTable>, min_efficiency: f64) -> ElasticAlloc {
        ElasticAlloc {
            rates: TableRates { table },
            min_efficiency,
        }
    }

    /// `job`'s table rate on `tasks` (its GPU count there, consolidated or spread as the
    /// simulator judges it: more nodes than its model's largest node needs is spread).
    /// `per_node`: [`gpus_per_model`] of the cluster.
    fn rate_on(
        &self,
        spec: &ClusterSpec,
        per_node: &[u32],
        job: &JobSpec,
        tasks: &[TaskPlacement],
    ) -> f64 {
        let Some(first) = tasks.first() else {
            return 0.0;
        };
        let gpus = tasks.len() as u32 * job.task.gpus;
        let mut nodes: Vec<NodeId> = tasks.iter().map(|t| t.node).collect();
        nodes.sort_unstable();
        nodes.dedup();
        let model = spec.node(first.node).gpu_model;
        if nodes.iter().any(|n| spec.node(*n).gpu_model != model) {
            return 0.0;
        }
        let per_node = model
            .and_then(|m| per_node.get(m.index()).copied())
            .unwrap_or(1)
            .max(1);
        let placement = if nodes.len() as u32 > gpus.div_ceil(per_node) {
            Consolidation::Spread
        } else {
            Consolidation::Consolidated
        };
        self.rates.alone(spec, job, first.node, gpus, placement)
    }

    /// Running elastic typed jobs the decision has not touched, with their tasks.
    fn elastic_running(
        ctx: &DecisionContext<'_>,
        planner: &Planner<'_>,
        decision: &Decision,
    ) -> Vec<(JobId, Vec<TaskPlacement>)> {
        let state = planner.state();
        state
            .running()
            .filter(|a| {
                let job = ctx.job(a.job);
                job.elastic.is_some()
                    && job.workload.is_some()
                    && a.preemptible
                    && state.co_tenant(a.job).is_none()
                    && !planner.has_freed(a.job)
                    && !decision.preemptions.contains(&a.job)
            })
            .map(|a| (a.job, a.tasks.to_vec()))
            .collect()
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
        elastic.sort_by_key(|(id, tasks)| (std::cmp::Reverse(tasks.len()), *id));
        let state = planner.state();
        let free: u64 = (0..state.spec().nodes.len())
            .map(|n| u64::from(state.free_whole_gpus(NodeId(n as u32))))
            .sum();
        let per_node = gpus_per_model(state.spec());
        let mut budget = Self::SHRINK_TRIES;
        for blocked in rest.iter().take(Self::ADMIT_TRIES) {
            let needs = ctx.job(*blocked).gpus_total();
            for (id, tasks) in &elastic {
                if budget == 0 {
                    return;
                }
                let job = ctx.job(*id);
                let Some(range) = job.elastic else { continue };
                let keep = (range.min_gpus / job.task.gpus) as usize;
                if keep >= tasks.len() || keep == 0 {
                    continue;
                }
                // Shrinking it cannot free enough GPUs, whatever the placement.
                let freed = (tasks.len() - keep) as u64 * u64::from(job.task.gpus);
                if free + freed < needs {
                    continue;
                }
                budget -= 1;
                let mark = planner.mark();
                planner.free_running(*id);
                let kept = tasks[..keep].to_vec();
                if planner.reserve(job, &kept).is_ok()
                    && self.rate_on(planner.state().spec(), &per_node, job, &kept) > 0.0
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

    /// Gives idle GPUs to the running elastic job with the best marginal efficiency at its
    /// next size the table has (one grow a decision). Jobs are ranked by the efficiency their
    /// next size would have consolidated (a table lookup); only the best
    /// [`Self::ADMIT_TRIES`] are placed and scored where the GPUs actually are.
    fn grow(&self, ctx: &DecisionContext<'_>, planner: &mut Planner<'_>, decision: &mut Decision) {
        let state = planner.state();
        let spec = state.spec();
        let idle: u64 = (0..spec.nodes.len())
            .map(|n| u64::from(state.free_whole_gpus(NodeId(n as u32))))
            .sum();
        if idle == 0 {
            return;
        }
        let per_node = gpus_per_model(spec);
        // (estimated efficiency, job, its tasks, GPUs now, its rate now, next size)
        let mut ranked = Vec::new();
        for (id, tasks) in Self::elastic_running(ctx, planner, decision) {
            let job = ctx.job(id);
            let Some(range) = job.elastic else { continue };
            let spec = planner.state().spec();
            let now = self.rate_on(spec, &per_node, job, &tasks);
            let g = job.task.gpus;
            let gpus_now = tasks.len() as u32 * g;
            // The next size up that the table rates above 0 alone on this model, within the
            // GPUs left idle.
            let next = (gpus_now / g + 1..=range.max_gpus / g)
                .map(|k| k * g)
                .take_while(|n| u64::from(n - gpus_now) <= idle)
                .map(|n| {
                    let rate =
                        self.rates
                            .alone(spec, job, tasks[0].node, n, Consolidation::Consolidated);
                    (n, rate)
                })
                .find(|(_, rate)| *rate > 0.0);
            let Some((next, rate)) = next else { continue };
            let estimate = marginal_efficiency(now, gpus_now, rate, next);
            if estimate >= self.min_efficiency {
                ranked.push((estimate, id, tasks, gpus_now, now, next));
            }
        }
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut best: Option<(f64, JobId, Vec<TaskPlacement>)> = None;
        for (_, id, tasks, gpus_now, now, next) in ranked.into_iter().take(Self::ADMIT_TRIES) {
            let job = ctx.job(id);
            let mut extra = job.clone();
            extra.tasks = (next - gpus_now) / job.task.gpus;
            let mark = planner.mark();
            if let Some(more) = planner.place(&extra, FitStrategy::BestFit) {
                let all: Vec<TaskPlacement> = tasks.iter().cloned().chain(more).collect();
                let speed = self.rate_on(planner.state().spec(), &per_node, job, &all);
                let eff = marginal_efficiency(now, gpus_now, speed, next);
                if eff >= self.min_efficiency && best.as_ref().is_none_or(|b| eff > b.0) {
                    best = Some((eff, id, all));
                }
            }
            planner.undo_to(mark);
        }
        if let Some((_, id, tasks)) = best {
            // The planner sees the grown job's tasks, for any modifier after this one.
            let mark = planner.mark();
            planner.free_running(id);
            if planner.reserve(ctx.job(id), &tasks).is_ok() {
                decision.resizes.push(Placement { job: id, tasks });
            } else {
                planner.undo_to(mark);
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

    fn extend(
        &mut self,
        ctx: &DecisionContext<'_>,
        planner: &mut Planner<'_>,
        placer: &mut dyn Placer,
        rest: &[JobId],
        decision: &mut Decision,
    ) {
        // Nobody waits: idle GPUs go to elastic jobs. Someone waits: make room for them.
        if rest.is_empty() {
            self.grow(ctx, planner, decision);
        } else {
            self.shrink_to_admit(ctx, planner, placer, rest, decision);
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
