//! `ThroughputView`: what a heterogeneity-aware scheduler knows of job speeds after profiling,
//! read-only, for policies. Gavel and Sia profile each new job on each GPU type before they
//! schedule it, so a policy may know a typed job's table speed on every GPU model of the
//! cluster. It never learns a job's duration, remaining work or progress.
//!
//! Built once per run from the run's resolved throughput table (the simulator's
//! `SimConfig::throughputs`), the trace's jobs and the cluster; handed to policies through
//! [`super::DecisionContext::throughputs`]. Untyped jobs, CPU-only jobs and runs without a
//! table have no view entry: every lookup answers `None` and policies fall back to what they
//! do without rates.

use crate::cluster::{ClusterSpec, TaskPlacement};
use crate::job::JobSpec;
use crate::throughput::{Consolidation, TableGpu, ThroughputTable, WorkloadId};
use crate::units::{GpuModelId, JobId, NodeId};
use std::collections::BTreeSet;
use std::sync::Arc;

/// A throughput table resolved against one run's jobs and cluster, for policies.
#[derive(Debug, Clone)]
pub struct ThroughputView {
    table: Arc<ThroughputTable>,
    spec: Arc<ClusterSpec>,
    /// Per cluster GPU model (by `GpuModelId`): its table entry; `None` when the table lacks
    /// the model (a typed job then has no speed there).
    gpus: Vec<Option<TableGpu>>,
    /// Per cluster GPU model: the most GPUs one node of that model has (0: no such node).
    gpus_per_node: Vec<u64>,
    /// Per job (by `JobId`): its workload id; `None` for untyped jobs, CPU-only jobs and
    /// workloads the table lacks.
    workloads: Vec<Option<WorkloadId>>,
}

impl ThroughputView {
    /// The view of `table` for `jobs` (indexed by `JobId`) on `spec`.
    /// The table may be shared (`Arc`): a service builds a view per snapshot.
    pub fn new(
        table: impl Into<Arc<ThroughputTable>>,
        jobs: &[JobSpec],
        spec: Arc<ClusterSpec>,
    ) -> ThroughputView {
        let table = table.into();
        let gpus = spec
            .models
            .iter()
            .map(|m| table.gpu(&m.name).ok())
            .collect();
        let mut gpus_per_node = vec![0u64; spec.models.len()];
        for n in &spec.nodes {
            if let Some(m) = n.gpu_model {
                gpus_per_node[m.index()] = gpus_per_node[m.index()].max(n.gpus as u64);
            }
        }
        let workloads = jobs
            .iter()
            .map(|j| {
                let name = j.workload.as_ref().filter(|_| j.task.gpus > 0)?;
                table.workload(name.as_str()).ok()
            })
            .collect();
        ThroughputView {
            table,
            spec,
            gpus,
            gpus_per_node,
            workloads,
        }
    }

    /// The same view for a sampled future's jobs: the first `keep` are this view's, job
    /// `keep + i` a copy of job `sources[i]`.
    pub fn with_tail(&self, keep: usize, sources: &[JobId]) -> ThroughputView {
        let mut workloads = self.workloads[..keep].to_vec();
        workloads.extend(sources.iter().map(|s| self.workloads[s.index()]));
        ThroughputView {
            table: Arc::clone(&self.table),
            spec: Arc::clone(&self.spec),
            gpus: self.gpus.clone(),
            gpus_per_node: self.gpus_per_node.clone(),
            workloads,
        }
    }

    /// The table the view reads.
    pub fn table(&self) -> &ThroughputTable {
        &self.table
    }

    /// Whether job `id` has a workload type the table knows (it runs at table speeds).
    pub fn is_typed(&self, id: JobId) -> bool {
        self.workload(id).is_some()
    }

    fn workload(&self, id: JobId) -> Option<WorkloadId> {
        self.workloads.get(id.index()).copied().flatten()
    }

    /// Reference-seconds of work per second `job` does on `gpus` GPUs of cluster model
    /// `model`, consolidated ([`ThroughputTable::speed`], relative to its trace shape on the
    /// table's reference GPU). `None` when the job is untyped, or the table has no entry for
    /// the model or the count; `Some(0.0)` when it cannot run that way.
    pub fn speed(&self, job: &JobSpec, model: GpuModelId, gpus: u32) -> Option<f64> {
        self.speed_placed(job, model, gpus, Consolidation::Consolidated)
    }

    fn speed_placed(
        &self,
        job: &JobSpec,
        model: GpuModelId,
        gpus: u32,
        placement: Consolidation,
    ) -> Option<f64> {
        let w = self.workload(job.id)?;
        let gpu = (*self.gpus.get(model.index())?)?;
        self.table
            .speed(w, gpu, gpus, placement, job_gpus(job))
            .ok()
    }

    /// The speeds of `a` and `b` sharing one GPU of cluster model `model`, in that order:
    /// each its pair rate over its reference rate at its own size, as the simulator runs
    /// them. `None` when either is untyped or the table does not let them share there (no
    /// pair entry, or a zero rate).
    pub fn pair_speeds(&self, a: &JobSpec, b: &JobSpec, model: GpuModelId) -> Option<[f64; 2]> {
        let (wa, wb) = (self.workload(a.id)?, self.workload(b.id)?);
        let gpu = (*self.gpus.get(model.index())?)?;
        let [ra, rb] = self.table.pair(wa, wb, gpu)?;
        let sa = ra / self.table.reference_rate(wa, job_gpus(a)).ok()?;
        let sb = rb / self.table.reference_rate(wb, job_gpus(b)).ok()?;
        (sa > 0.0 && sb > 0.0).then_some([sa, sb])
    }

    /// The cluster GPU models `job` may use (present in the cluster, allowed by its
    /// `gpu_types`) with its speed there at its own size, consolidated; models without a
    /// table entry are left out. Empty for an untyped job.
    pub fn speeds(&self, job: &JobSpec) -> Vec<(GpuModelId, f64)> {
        if !self.is_typed(job.id) {
            return Vec::new();
        }
        let mask = self.spec.model_mask(&job.gpu_types);
        let n = job_gpus(job);
        (0..self.gpus_per_node.len())
            .filter(|i| self.gpus_per_node[*i] > 0 && mask & (1u64 << i) != 0)
            .filter_map(|i| {
                let m = GpuModelId(i as u32);
                Some((m, self.speed(job, m, n)?))
            })
            .collect()
    }

    /// The GPU model where `job` runs fastest at its own size, consolidated, among those of
    /// [`Self::speeds`], with that speed; the lowest model id among equals. `None` when the
    /// job is untyped or runs nowhere (every speed 0 or absent).
    pub fn best_model(&self, job: &JobSpec) -> Option<(GpuModelId, f64)> {
        self.speeds(job).into_iter().filter(|(_, s)| *s > 0.0).fold(
            None,
            |best: Option<(GpuModelId, f64)>, (m, s)| match best {
                Some((_, b)) if b >= s => best,
                _ => Some((m, s)),
            },
        )
    }

    /// `job`'s speed on `nodes` as the simulator runs it: the table speed for its GPU count on
    /// the slowest GPU model among the nodes, consolidated when the gang spans no more nodes
    /// than that model's largest node needs, else spread. `None` when untyped or the table
    /// lacks an entry.
    pub fn speed_on(&self, job: &JobSpec, nodes: &[NodeId]) -> Option<f64> {
        self.speed_on_sized(job, nodes, job_gpus(job))
    }

    /// [`Self::speed_on`] at `n` GPUs (an elastic job started or resized to another size), as
    /// the simulator runs it: `None` where it refuses that start or resize.
    pub fn speed_on_sized(&self, job: &JobSpec, nodes: &[NodeId], n: u32) -> Option<f64> {
        let models: BTreeSet<GpuModelId> = nodes
            .iter()
            .filter_map(|id| self.spec.nodes.get(id.index())?.gpu_model)
            .collect();
        let per_node = models
            .iter()
            .filter_map(|m| self.gpus_per_node.get(m.index()).copied())
            .max()
            .unwrap_or(1)
            .max(1);
        let mut distinct = nodes.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        let placement = if distinct.len() as u64 > (n as u64).div_ceil(per_node) {
            Consolidation::Spread
        } else {
            Consolidation::Consolidated
        };
        models
            .iter()
            .map(|m| self.speed_placed(job, *m, n, placement))
            .try_fold(f64::INFINITY, |slowest, s| Some(slowest.min(s?)))
            .filter(|s| s.is_finite())
    }

    /// Whether the simulator runs `job` on `tasks` (a start or a resize there): the table
    /// rates it above 0 at their size, spread or consolidated as they lie
    /// ([`Self::speed_on_sized`]).
    pub fn runs_on(&self, job: &JobSpec, tasks: &[TaskPlacement]) -> bool {
        let nodes: Vec<NodeId> = tasks.iter().map(|t| t.node).collect();
        let gpus = u32::try_from(tasks.len())
            .unwrap_or(u32::MAX)
            .saturating_mul(job.task.gpus);
        self.speed_on_sized(job, &nodes, gpus)
            .is_some_and(|s| s > 0.0)
    }

    /// Whether `job` runs on its fastest GPU model on `nodes`: every GPU model among them
    /// gives it, at its size and consolidated, the speed of [`Self::best_model`] (ties count
    /// as fastest). `None` when untyped or it runs nowhere.
    pub fn on_fastest_model(&self, job: &JobSpec, nodes: &[NodeId]) -> Option<bool> {
        let (_, best) = self.best_model(job)?;
        let n = job_gpus(job);
        Some(nodes.iter().all(|id| {
            self.spec
                .nodes
                .get(id.index())
                .and_then(|node| node.gpu_model)
                .and_then(|m| self.speed(job, m, n))
                .is_some_and(|s| s >= best)
        }))
    }

    /// The share of its best speed `job` gets on `nodes`: [`Self::speed_on`] over
    /// [`Self::best_model`]'s speed, in [0, 1] where the table is monotone in placement (a
    /// spread entry can exceed it). `None` when untyped or either is unknown.
    pub fn relative_speed_on(&self, job: &JobSpec, nodes: &[NodeId]) -> Option<f64> {
        let (_, best) = self.best_model(job)?;
        Some(self.speed_on(job, nodes)? / best)
    }
}

/// The GPU count a table rate is looked up at: every GPU of the gang (a fractional task counts
/// as one GPU), as the simulator counts it.
fn job_gpus(job: &JobSpec) -> u32 {
    u32::try_from(job.gpus_total()).unwrap_or(u32::MAX)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cluster::load_cluster;
    use crate::job::tests::job;
    use crate::job::{TaskRequest, WorkloadType};
    use crate::throughput::TableBuilder;

    /// A table with two workloads on K80, P100, V100 (reference V100), 1 and 2 GPUs:
    /// - `fast-v100`: 1 GPU V100 10, P100 5, K80 2; 2 GPUs V100 18, P100 9, K80 0 (cannot).
    /// - `fast-k80`: 1 GPU V100 4, P100 4, K80 8 (as Gavel's Recommendation jobs).
    pub fn toy_table() -> ThroughputTable {
        let mut b = TableBuilder::new("toy", "V100").expect("catalog GPU");
        let cc = Consolidation::Consolidated;
        let fast_v100 = WorkloadType::new("fast-v100").expect("a name");
        let fast_k80 = WorkloadType::new("fast-k80").expect("a name");
        for (w, gpu, n, rate) in [
            (&fast_v100, "V100", 1, 10.0),
            (&fast_v100, "P100", 1, 5.0),
            (&fast_v100, "K80", 1, 2.0),
            (&fast_v100, "V100", 2, 18.0),
            (&fast_v100, "P100", 2, 9.0),
            (&fast_v100, "K80", 2, 0.0),
            (&fast_k80, "V100", 1, 4.0),
            (&fast_k80, "P100", 1, 4.0),
            (&fast_k80, "K80", 1, 8.0),
        ] {
            b.single(w, gpu, n, cc, rate, 0).expect("valid entry");
        }
        b.single(&fast_v100, "V100", 2, Consolidation::Spread, 9.0, 0)
            .expect("valid entry");
        b.finish().expect("valid table")
    }

    /// A job of `gpus` whole GPUs with workload `w` (`None`: untyped), id `id`.
    pub fn typed_job(id: u32, gpus: u32, w: Option<&str>) -> JobSpec {
        let mut j = job(&format!("j{id}"), 0, TaskRequest::whole(gpus, 1000, 1024));
        j.id = JobId(id);
        j.workload = w.and_then(WorkloadType::new);
        j
    }

    #[test]
    fn speeds_and_best_model_follow_the_table() {
        // Models in shape order: K80 = 0, P100 = 1, V100 = 2.
        let spec = load_cluster("1x2:K80+1x2:P100+1x2:V100").expect("shape");
        let jobs = vec![
            typed_job(0, 1, Some("fast-v100")),
            typed_job(1, 1, Some("fast-k80")),
            typed_job(2, 2, Some("fast-v100")),
            typed_job(3, 1, None),
        ];
        let v = ThroughputView::new(toy_table(), &jobs, Arc::new(spec.clone()));
        let id = |name: &str| spec.model_id(name).expect("model");
        let (k80, p100, v100) = (id("K80"), id("P100"), id("V100"));
        // (job, model, gpus) -> speed: rate / reference rate at the job's own size.
        let cases = [
            (0, v100, 1, Some(1.0)), // 10 / 10
            (0, p100, 1, Some(0.5)), // 5 / 10
            (0, k80, 1, Some(0.2)),  // 2 / 10
            (1, k80, 1, Some(2.0)),  // 8 / 4
            (2, p100, 2, Some(0.5)), // 9 / 18
            (2, k80, 2, Some(0.0)),  // cannot run
            (2, v100, 4, None),      // no 4-GPU entry
            (3, v100, 1, None),      // untyped
        ];
        for (j, m, n, want) in cases {
            assert_eq!(v.speed(&jobs[j], m, n), want, "job {j} on {m:?} x {n}");
        }
        assert_eq!(v.best_model(&jobs[0]), Some((v100, 1.0)));
        assert_eq!(v.best_model(&jobs[1]), Some((k80, 2.0)));
        assert_eq!(v.best_model(&jobs[3]), None);
        // A job restricted to P100 and K80 by gpu_types: P100 is its best there.
        let mut restricted = jobs[0].clone();
        restricted.gpu_types = vec!["P100".into(), "K80".into()];
        assert_eq!(v.best_model(&restricted), Some((p100, 0.5)));
    }

    #[test]
    fn speed_on_nodes_is_the_slowest_model_and_spread_when_over_the_nodes_needed() {
        let spec = load_cluster("2x2:V100+1x2:P100").expect("shape");
        let jobs = vec![typed_job(0, 2, Some("fast-v100"))];
        let v = ThroughputView::new(toy_table(), &jobs, Arc::new(spec.clone()));
        let (a, b, p) = (NodeId(0), NodeId(1), NodeId(2));
        // One V100 node: consolidated 18 / 18; two V100 nodes: spread 9 / 18; V100 + P100
        // nodes: spread, the P100 has no spread entry -> None.
        assert_eq!(v.speed_on(&jobs[0], &[a, a]), Some(1.0));
        assert_eq!(v.speed_on(&jobs[0], &[a, b]), Some(0.5));
        assert_eq!(v.speed_on(&jobs[0], &[a, p]), None);
        assert_eq!(v.relative_speed_on(&jobs[0], &[p]), Some(0.5));
        assert_eq!(v.on_fastest_model(&jobs[0], &[a, b]), Some(true));
        assert_eq!(v.on_fastest_model(&jobs[0], &[a, p]), Some(false));
    }
}
