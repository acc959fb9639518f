//! `fastest`: a typed job goes to the GPU model where it runs fastest among those with room,
//! packed there by best fit. Gavel's observation (Narayanan et al., "Heterogeneity-Aware
//! Cluster Scheduling Policies for Deep Learning Workloads", OSDI'20, §2): a job's speedup
//! from one GPU model to another depends on the model it trains (0.66x to 11.6x V100/K80 in
//! its table), so the newest free GPU is not always the best choice. Gavel reaches this
//! through its LP's allocation; this placer is the greedy, per-job form: the models the job
//! may use are tried from the fastest down (its table speed at its own size, consolidated, as
//! [`crate::policy::ThroughputView::speed`] gives it), models of equal speed together, and
//! within them the `best-fit` node choice decides. Models where the job runs at speed 0 or
//! has no table entry are never used.
//!
//! Untyped jobs, CPU-only jobs and runs without a throughput table get exactly `best-fit`'s
//! placement.

use crate::cluster::{ClusterSpec, FitStrategy, TaskPlacement};
use crate::job::JobSpec;
use crate::policy::{DecisionContext, Placer, Planner, ThroughputView};
use crate::units::GpuModelId;
use std::sync::Arc;

/// GPU models grouped by speed, fastest group first; models of one speed keep their order;
/// speeds of 0 (cannot run) are left out. Speeds are compared exactly: the table's values are
/// measured, so equal speeds are the same entry or a deliberate tie.
pub fn fastest_groups(speeds: &[(GpuModelId, f64)]) -> Vec<Vec<GpuModelId>> {
    let mut sorted: Vec<(GpuModelId, f64)> = speeds
        .iter()
        .copied()
        .filter(|(_, s)| *s > 0.0 && s.is_finite())
        .collect();
    sorted.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut groups: Vec<(f64, Vec<GpuModelId>)> = Vec::new();
    for (m, s) in sorted {
        match groups.last_mut() {
            Some((speed, models)) if *speed == s => models.push(m),
            _ => groups.push((s, vec![m])),
        }
    }
    groups.into_iter().map(|(_, models)| models).collect()
}

/// `job` allowed only the GPU models `models` (a copy: the placement search reads a job's
/// `gpu_types`).
pub(crate) fn restricted_to(job: &JobSpec, spec: &ClusterSpec, models: &[GpuModelId]) -> JobSpec {
    let mut restricted = job.clone();
    restricted.gpu_types = models
        .iter()
        .filter_map(|m| Some(spec.models.get(m.index())?.name.clone()))
        .collect();
    restricted
}

/// Places typed jobs on their fastest GPU model with room; see the module docs.
#[derive(Debug, Default, Clone)]
pub struct Fastest {
    /// The run's throughput view, from the decision point (`observe`); `None`: best fit.
    view: Option<Arc<ThroughputView>>,
}

impl Placer for Fastest {
    fn name(&self) -> &str {
        "fastest"
    }
    fn observe(&mut self, ctx: &DecisionContext<'_>) {
        self.view = ctx.throughputs().cloned();
    }
    fn place(&mut self, planner: &mut Planner<'_>, job: &JobSpec) -> Option<Vec<TaskPlacement>> {
        let Some(view) = self.view.as_ref().filter(|v| v.is_typed(job.id)) else {
            return planner.place(job, FitStrategy::BestFit);
        };
        for models in fastest_groups(&view.speeds(job)) {
            let restricted = restricted_to(job, planner.state().spec(), &models);
            if let Some(tasks) = planner.place(&restricted, FitStrategy::BestFit) {
                return Some(tasks);
            }
        }
        None
    }
    /// Complete (every fit taken) only without a table: a typed job is refused on models
    /// where it cannot run, although they have room.
    fn complete(&self) -> bool {
        self.view.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{ClusterState, load_cluster};
    use crate::policy::view::tests::{toy_table, typed_job};
    use crate::policy::{JobRuntime, JobState};
    use crate::units::{JobId, SimTime};
    use std::cell::RefCell;
    use std::collections::BTreeSet;

    #[test]
    fn groups_table() {
        let m = GpuModelId;
        // (speeds, groups): fastest first, equal speeds together, 0 dropped.
        type Case<'a> = (&'a [(GpuModelId, f64)], Vec<Vec<GpuModelId>>);
        let cases: [Case<'_>; 4] = [
            (&[], vec![]),
            (
                &[(m(0), 0.2), (m(1), 1.0), (m(2), 0.5)],
                vec![vec![m(1)], vec![m(2)], vec![m(0)]],
            ),
            (
                &[(m(0), 0.5), (m(1), 0.5), (m(2), 2.0)],
                vec![vec![m(2)], vec![m(0), m(1)]],
            ),
            (&[(m(0), 0.0), (m(1), 0.3)], vec![vec![m(1)]]),
        ];
        for (speeds, want) in cases {
            assert_eq!(fastest_groups(speeds), want, "{speeds:?}");
        }
    }

    /// The GPU models `jobs[which]`'s tasks go to when `jobs[..=which]` are placed in order
    /// on the empty cluster `spec` (with the toy table's view, or without a table); empty
    /// when it is not placed.
    fn placed_models(spec: &str, jobs: &[JobSpec], which: usize, table: bool) -> Vec<String> {
        let spec = Arc::new(load_cluster(spec).expect("shape"));
        let view = Arc::new(ThroughputView::new(toy_table(), jobs, Arc::clone(&spec)));
        let runtime = vec![
            JobRuntime {
                state: JobState::Pending,
                ..JobRuntime::default()
            };
            jobs.len()
        ];
        let pending: BTreeSet<JobId> = jobs.iter().map(|j| j.id).collect();
        let cluster = RefCell::new(ClusterState::new(Arc::clone(&spec)));
        let ctx = DecisionContext::new(SimTime::ZERO, jobs, &runtime, &pending, &cluster)
            .with_throughputs(table.then_some(&view));
        let mut placer = Fastest::default();
        placer.observe(&ctx);
        let mut planner = ctx.planner();
        // Earlier jobs first, as a decision places them.
        let mut last = None;
        for j in &jobs[..=which] {
            last = placer.place(&mut planner, j);
        }
        last.map_or_else(Vec::new, |tasks| {
            tasks
                .iter()
                .map(|t| spec.node_model(t.node).expect("GPU node").name.clone())
                .collect()
        })
    }

    #[test]
    fn typed_jobs_go_to_their_fastest_model_with_room() {
        // One node of 2 GPUs per model (K80, P100, V100). Speeds (toy table, 1 GPU):
        // fast-v100 V100 1.0 > P100 0.5 > K80 0.2; fast-k80 K80 2.0 > V100 1.0 = P100 1.0.
        let cluster = "1x2:K80+1x2:P100+1x2:V100";
        let v = |id, w| typed_job(id, 1, Some(w));
        // A fast-v100 job alone: V100 (best fit alone would pick the first node, K80).
        assert_eq!(
            placed_models(cluster, &[v(0, "fast-v100")], 0, true),
            ["V100"]
        );
        assert_eq!(
            placed_models(cluster, &[v(0, "fast-v100")], 0, false),
            ["K80"]
        );
        // A fast-k80 job: K80, although V100 is "faster" by the catalog.
        assert_eq!(
            placed_models(cluster, &[v(0, "fast-k80")], 0, true),
            ["K80"]
        );
        // Third fast-v100 job: the V100 node is full, P100 next.
        let three = [v(0, "fast-v100"), v(1, "fast-v100"), v(2, "fast-v100")];
        assert_eq!(placed_models(cluster, &three, 2, true), ["P100"]);
        // 2-GPU fast-v100 jobs: V100, then P100, then none (speed 0 on K80 although it fits).
        let big = |id| typed_job(id, 2, Some("fast-v100"));
        let jobs = [big(0), big(1), big(2)];
        assert_eq!(placed_models(cluster, &jobs, 0, true), ["V100"]);
        assert_eq!(placed_models(cluster, &jobs, 1, true), ["P100"]);
        assert!(placed_models(cluster, &jobs, 2, true).is_empty());
    }

    #[test]
    fn untyped_jobs_get_best_fits_choice() {
        // Best fit packs onto the fullest node: after a 1-GPU job on the K80 node, another
        // untyped 1-GPU job joins it, table or not.
        let cluster = "1x2:K80+1x2:P100+1x2:V100";
        let jobs = [typed_job(0, 1, None), typed_job(1, 1, None)];
        assert_eq!(placed_models(cluster, &jobs, 1, true), ["K80"]);
        assert_eq!(placed_models(cluster, &jobs, 1, false), ["K80"]);
    }
}
