//! Typed jobs' progress rates: which throughput-table speed a job with a workload type gets
//! where it runs. Owns the table lookups the simulator makes (ids resolved once, at
//! `Simulator::new`), the checks that every typed job has a rate wherever it may run, and
//! which typed jobs can never run under the table ([`unrated_jobs`]). Knows nothing of events
//! or time.
//!
//! A typed job's rate is a function of its placement (the GPU models of its nodes, its GPU
//! count, consolidated or spread), and, while it shares a GPU, of its partner's workload
//! (`pair_speeds`). An elastic job's GPU count is that of its current placement; its work
//! stays measured at its trace size.

use super::engine::SimError;
use crate::cluster::ClusterSpec;
use crate::job::{JobSpec, Trace};
use crate::throughput::{Consolidation, RateError, TableGpu, ThroughputTable, WorkloadId};
use crate::units::{GpuModelId, JobId, NodeId};
use std::collections::{BTreeMap, BTreeSet};

/// A throughput table resolved against one trace and cluster.
#[derive(Debug, Clone)]
pub(crate) struct Rates {
    table: ThroughputTable,
    /// Per cluster GPU model (by `GpuModelId`): its table entry, or why the table lacks it.
    /// A typed job is never placed on a lacking model: `Rates::new` refuses the run first.
    gpus: Vec<Result<TableGpu, RateError>>,
    /// Per cluster GPU model: the most GPUs one node of that model has.
    gpus_per_node: Vec<u64>,
    /// Per job (by `JobId`): its workload id; `None` for untyped and CPU-only jobs.
    workloads: Vec<Option<WorkloadId>>,
}

impl Rates {
    /// Resolves `table` for `trace` on `spec`, refusing the run when a typed job's workload is
    /// not in the table, when the table has no rate for the job's GPU count on the reference
    /// GPU or on a cluster GPU model the job may use (its `gpu_types`), or when the job can run
    /// (rate > 0) on none of them at any size it may run at (its GPU count; for an elastic job,
    /// any size of its range). Jobs in `skip` (unplaceable, skipped) are not checked.
    pub(crate) fn new(
        table: ThroughputTable,
        trace: &Trace,
        spec: &ClusterSpec,
        skip: &BTreeSet<JobId>,
    ) -> Result<Rates, SimError> {
        let gpus = table_gpus(&table, spec);
        let gpus_per_node = gpus_per_node(spec);
        let present = present_models(&gpus_per_node);
        let mut workloads = Vec::with_capacity(trace.len());
        // Jobs of one (workload, GPU count, allowed models, sizes) are checked once.
        let mut checked = BTreeSet::new();
        for j in trace.jobs() {
            let Some(name) = j.workload.as_ref().filter(|_| j.task.gpus > 0) else {
                workloads.push(None);
                continue;
            };
            let fault = |source: RateError| SimError::Rate {
                job: j.name.clone(),
                source,
            };
            let w = table.workload(name.as_str()).map_err(fault)?;
            workloads.push(Some(w));
            let mask = spec.model_mask(&j.gpu_types);
            let n = job_gpus(j);
            let sizes = run_sizes(j);
            if skip.contains(&j.id) || !checked.insert((w, n, mask, sizes.clone())) {
                continue;
            }
            table.reference_rate(w, n).map_err(fault)?;
            let mut runnable = false;
            for m in present.iter().filter(|m| mask & (1u64 << m.0) != 0) {
                let gpu = gpus[m.index()].clone().map_err(fault)?;
                table
                    .rate(w, gpu, n, Consolidation::Consolidated)
                    .map_err(fault)?;
                runnable |= runs_at_some_size(&table, w, gpu, &sizes);
            }
            if !runnable {
                return Err(SimError::NowhereToRun {
                    job: j.name.clone(),
                    table: table.name().to_string(),
                    workload: name.to_string(),
                    gpus: n,
                });
            }
        }
        Ok(Rates {
            table,
            gpus,
            gpus_per_node,
            workloads,
        })
    }

    /// The same rates for a sampled future's trace: its first `keep` jobs are this trace's,
    /// job `keep + i` a copy of job `sources[i]`.
    pub(crate) fn with_tail(&self, keep: usize, sources: &[JobId]) -> Rates {
        let mut workloads = self.workloads[..keep].to_vec();
        workloads.extend(sources.iter().map(|s| self.workloads[s.index()]));
        Rates {
            table: self.table.clone(),
            gpus: self.gpus.clone(),
            gpus_per_node: self.gpus_per_node.clone(),
            workloads,
        }
    }

    /// The workload id of job `id`, or `None` when it runs at catalog speed (untyped).
    pub(crate) fn workload(&self, id: JobId) -> Option<WorkloadId> {
        self.workloads[id.index()]
    }

    /// Reference-ms of work per ms for typed `job` (workload `w`) on `gpus` GPUs over `nodes`
    /// (its trace size, or another size of an elastic job): the table's speed for that GPU
    /// count on the slowest GPU model among the nodes, consolidated when the gang spans no more
    /// nodes than that model's largest node needs, else spread, over the rate its trace size
    /// has on the reference GPU. 0 when it cannot run there (a 0 rate, or no entry for the
    /// shape, e.g. a spread entry the table lacks).
    pub(crate) fn speed(
        &self,
        job: &JobSpec,
        w: WorkloadId,
        spec: &ClusterSpec,
        nodes: &[NodeId],
        gpus: u32,
    ) -> f64 {
        let n = gpus;
        let models: BTreeSet<GpuModelId> = nodes
            .iter()
            .filter_map(|id| spec.node(*id).gpu_model)
            .collect();
        let per_node = models
            .iter()
            .map(|m| self.gpus_per_node[m.index()])
            .max()
            .unwrap_or(1)
            .max(1);
        let placement = if nodes.len() as u64 > (n as u64).div_ceil(per_node) {
            Consolidation::Spread
        } else {
            Consolidation::Consolidated
        };
        models
            .iter()
            .map(|m| match &self.gpus[m.index()] {
                Ok(gpu) => self
                    .table
                    .speed(w, *gpu, n, placement, job_gpus(job))
                    .unwrap_or(0.0),
                Err(_) => 0.0,
            })
            .reduce(f64::min)
            .unwrap_or(0.0)
    }

    /// The speeds (reference-ms per ms) of typed jobs `a` and `b` (workloads `wa`, `wb`)
    /// while they share one GPU of `model`: the table's pair rates, each over its job's
    /// reference rate at its trace size. `None` when the table has no non-zero pair entry for
    /// the two on that model, or either speed would be 0: they may not share there.
    pub(crate) fn pair_speeds(
        &self,
        (a, wa): (&JobSpec, WorkloadId),
        (b, wb): (&JobSpec, WorkloadId),
        model: GpuModelId,
    ) -> Option<[f64; 2]> {
        let gpu = *self.gpus.get(model.index())?.as_ref().ok()?;
        let [ra, rb] = self.table.pair(wa, wb, gpu)?;
        let sa = ra / self.table.reference_rate(wa, job_gpus(a)).ok()?;
        let sb = rb / self.table.reference_rate(wb, job_gpus(b)).ok()?;
        (sa > 0.0 && sb > 0.0).then_some([sa, sb])
    }

    /// The fastest speed typed `job` (workload `w`) could get anywhere on `spec` alone: the
    /// largest table speed, consolidated or spread, over the cluster's GPU models it may use
    /// and, for an elastic job, every size it may run at. For the JCT lower bound.
    pub(crate) fn best_speed(&self, job: &JobSpec, w: WorkloadId, spec: &ClusterSpec) -> f64 {
        let n = job_gpus(job);
        let sizes = run_sizes(job);
        let mask = spec.model_mask(&job.gpu_types);
        (0..spec.models.len())
            .filter(|i| self.gpus_per_node[*i] > 0 && mask & (1u64 << i) != 0)
            .filter_map(|i| self.gpus[i].as_ref().ok())
            .flat_map(|gpu| {
                sizes.iter().flat_map(move |m| {
                    [Consolidation::Consolidated, Consolidation::Spread]
                        .map(|c| self.table.speed(w, *gpu, *m, c, n).unwrap_or(0.0))
                })
            })
            .fold(0.0, f64::max)
    }
}

/// Typed jobs that can never run under `table` on `spec`, in trace order, the jobs in `skip`
/// aside: the table has no rate (above 0) for their trace size on its reference GPU, where
/// their work is measured, or rates no size they may run at (their trace size; any size of an
/// elastic job's range) above 0, consolidated, on any GPU model of the cluster they may use.
/// `Simulator::new` skips them as unplaceable under `skip_unplaceable`. A job whose workload the
/// table lacks, or that may use a cluster GPU model the table lacks, is not one of them:
/// [`Rates::new`] refuses the run naming it, as those are faults of the table, not of the job.
pub(crate) fn unrated_jobs(
    table: &ThroughputTable,
    trace: &Trace,
    spec: &ClusterSpec,
    skip: &BTreeSet<JobId>,
) -> Vec<JobId> {
    let gpus = table_gpus(table, spec);
    let present = present_models(&gpus_per_node(spec));
    // Jobs of one (workload, GPU count, allowed models, sizes) are judged once.
    let mut judged: BTreeMap<(WorkloadId, u32, u64, Vec<u32>), bool> = BTreeMap::new();
    let mut out = Vec::new();
    for j in trace.jobs() {
        if j.task.gpus == 0 || skip.contains(&j.id) {
            continue;
        }
        let Some(w) = j
            .workload
            .as_ref()
            .and_then(|n| table.workload(n.as_str()).ok())
        else {
            continue;
        };
        let n = job_gpus(j);
        let mask = spec.model_mask(&j.gpu_types);
        let unrated =
            *judged
                .entry((w, n, mask, run_sizes(j)))
                .or_insert_with_key(|(_, _, _, sizes)| {
                    let models = present
                        .iter()
                        .filter(|m| mask & (1u64 << m.0) != 0)
                        .map(|m| &gpus[m.index()]);
                    never_rated(table, w, n, sizes, models)
                });
        if unrated {
            out.push(j.id);
        }
    }
    out
}

/// Whether a job of workload `w` and trace size `n` that may run at `sizes` on `models` (the
/// table's entries for the cluster GPU models it may use) has no rate: none for `n` on the
/// reference GPU, or none above 0 for any size on any of the models. `false` when one of the
/// models is absent from the table (a fault `Rates::new` reports).
fn never_rated<'a>(
    table: &ThroughputTable,
    w: WorkloadId,
    n: u32,
    sizes: &[u32],
    models: impl Iterator<Item = &'a Result<TableGpu, RateError>>,
) -> bool {
    if table.reference_rate(w, n).is_err() {
        return true;
    }
    let mut rated = false;
    for gpu in models {
        let Ok(gpu) = gpu else {
            return false;
        };
        rated |= runs_at_some_size(table, w, *gpu, sizes);
    }
    !rated
}

/// Whether `table` rates workload `w` above 0 on `gpu` at one of `sizes` GPUs, consolidated.
fn runs_at_some_size(table: &ThroughputTable, w: WorkloadId, gpu: TableGpu, sizes: &[u32]) -> bool {
    sizes.iter().any(|m| {
        table
            .rate(w, gpu, *m, Consolidation::Consolidated)
            .is_ok_and(|r| r > 0.0)
    })
}

/// Per cluster GPU model (by `GpuModelId`): its table entry, or why the table lacks it.
fn table_gpus(table: &ThroughputTable, spec: &ClusterSpec) -> Vec<Result<TableGpu, RateError>> {
    spec.models.iter().map(|m| table.gpu(&m.name)).collect()
}

/// Per cluster GPU model (by `GpuModelId`): the most GPUs one node of that model has.
fn gpus_per_node(spec: &ClusterSpec) -> Vec<u64> {
    let mut most = vec![0u64; spec.models.len()];
    for n in &spec.nodes {
        if let Some(m) = n.gpu_model {
            most[m.index()] = most[m.index()].max(n.gpus as u64);
        }
    }
    most
}

/// The cluster GPU models some node has, by id, from `gpus_per_node`.
fn present_models(gpus_per_node: &[u64]) -> Vec<GpuModelId> {
    (0..gpus_per_node.len())
        .map(|i| GpuModelId(i as u32))
        .filter(|m| gpus_per_node[m.index()] > 0)
        .collect()
}

/// The GPU counts `job` may run at: its trace size, or each size of its elastic range (whole
/// tasks).
fn run_sizes(job: &JobSpec) -> Vec<u32> {
    match job.elastic {
        Some(e) => (e.min_gpus / job.task.gpus..=e.max_gpus / job.task.gpus)
            .map(|k| k * job.task.gpus)
            .collect(),
        None => vec![job_gpus(job)],
    }
}

/// The GPU count a table rate is looked up at: every GPU of the gang (a fractional task counts
/// as one GPU: it runs at its 1-GPU rate until sharing is modelled).
fn job_gpus(job: &JobSpec) -> u32 {
    u32::try_from(job.gpus_total()).unwrap_or(u32::MAX)
}
