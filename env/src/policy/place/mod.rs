//! The placement baselines: one small `Placer` per file, each around a pure scoring function
//! of a node's free capacity and a task (`NodeView`, `TaskRequest`), unit-tested on its own.
//!
//! Feasibility stays with `cluster`: candidates are the nodes `ClusterState::nodes_fitting`
//! returns (index-pruned), so a scorer only says how good a feasible node is. A gang is placed
//! task by task through the planner (each task sees the ones before it), all or nothing.
//! Must not depend on the simulator.

mod dot_product;
mod fastest;
mod fgd;
mod gpu_clustering;
mod gpu_packing;
mod most_allocated;
mod random_fit;
mod topo;

#[cfg(test)]
mod tests;

pub use dot_product::{DotProduct, dot_product_score};
pub(crate) use fastest::restricted_to;
pub use fastest::{Fastest, fastest_groups};
pub use fgd::{Fgd, fgd_choice, fgd_node_choice};
pub use gpu_clustering::{GpuClustering, clustering_score};
pub use gpu_packing::{GpuPacking, packing_score};
pub use most_allocated::{MostAllocated, most_allocated_score};
pub use random_fit::RandomFit;
pub use topo::{Topo, tasks_fitting};

use super::planner::Planner;
use crate::cluster::{ClusterState, FitStrategy, NodeMask, TaskPlacement};
use crate::job::{JobSpec, TaskRequest};
use crate::units::{GPU_MILLI, NodeId};

/// One node's free capacity and size, as the scorers see it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeView<'a> {
    /// Free milli-GPU of each GPU on the node (empty for a CPU-only node).
    pub gpu_free: &'a [u16],
    pub cpu_free: u64,
    pub mem_free: u64,
    /// CPU capacity, milli-cores.
    pub cpu_cap: u64,
    /// Memory capacity, MiB.
    pub mem_cap: u64,
}

impl<'a> NodeView<'a> {
    /// `node` as it is in `state` (tentative placements included).
    pub fn of(state: &'a ClusterState, node: NodeId) -> NodeView<'a> {
        let spec = state.spec().node(node);
        NodeView {
            gpu_free: state.gpu_free(node),
            cpu_free: state.cpu_free(node),
            mem_free: state.mem_free(node),
            cpu_cap: spec.cpu_milli,
            mem_cap: spec.mem_mib,
        }
    }
    /// GPU capacity, milli-GPU.
    pub fn gpu_cap_milli(&self) -> u64 {
        self.gpu_free.len() as u64 * u64::from(GPU_MILLI)
    }
    /// Free milli-GPU, all GPUs together.
    pub fn gpu_free_milli(&self) -> u64 {
        self.gpu_free.iter().map(|f| u64::from(*f)).sum()
    }
    /// GPUs with nothing allocated.
    pub fn whole_free(&self) -> u32 {
        self.gpu_free
            .iter()
            .filter(|f| u32::from(**f) == GPU_MILLI)
            .count() as u32
    }
    /// The GPU a share of `milli` goes to by best fit: the least free share that holds it
    /// (lowest index on ties), as `FitStrategy::BestFit` picks.
    pub fn best_fit_gpu(&self, milli: u32) -> Option<usize> {
        self.gpu_free
            .iter()
            .enumerate()
            .filter(|(_, f)| u32::from(**f) >= milli)
            .min_by_key(|(i, f)| (**f, *i))
            .map(|(i, _)| i)
    }
}

/// `used / cap`, 0 for a resource the node does not have.
fn ratio(used: u64, cap: u64) -> Option<f64> {
    (cap > 0).then(|| used as f64 / cap as f64)
}

/// Places `job`'s tasks one by one where `choose` says, given the cluster with the gang's
/// earlier tasks reserved (and those tasks), so each task sees the ones before it. All of them,
/// or, when `choose` finds no room for one, none (the gang's reservations are rolled back).
pub(crate) fn place_task_by_task(
    planner: &mut Planner<'_>,
    job: &JobSpec,
    mut choose: impl FnMut(&ClusterState, NodeMask, &[TaskPlacement]) -> Option<TaskPlacement>,
) -> Option<Vec<TaskPlacement>> {
    let mask = planner.state().spec().job_mask(job);
    let distinct = job.constraints.distinct_nodes;
    let mark = planner.mark();
    let mut tasks: Vec<TaskPlacement> = Vec::with_capacity(job.tasks as usize);
    for _ in 0..job.tasks {
        // A distinct-nodes gang's nodes so far are hidden from the node searches `choose`
        // uses, so it never picks one of them again.
        let Some(t) = choose(planner.state(), mask, &tasks) else {
            planner.clear_excluded();
            planner.undo_to(mark);
            return None;
        };
        planner
            .reserve_task(job, &t)
            .expect("placers choose among nodes that fit the task");
        if distinct {
            planner.exclude_node(t.node);
        }
        tasks.push(t);
    }
    planner.clear_excluded();
    Some(tasks)
}

/// Places `job` task by task, each on the node that fits with the highest `score` (ties: the
/// lowest node id), on that node's GPUs by best fit. `score` sees the cluster, the candidate
/// and the gang's tasks placed so far.
pub(crate) fn place_by_node_score(
    planner: &mut Planner<'_>,
    job: &JobSpec,
    mut score: impl FnMut(&ClusterState, NodeId, &[TaskPlacement]) -> f64,
) -> Option<Vec<TaskPlacement>> {
    place_task_by_task(planner, job, |state, mask, placed| {
        let node = best_node(state, &job.task, mask, |n| score(state, n, placed))?;
        state.fit_task_on(&job.task, mask, node, FitStrategy::BestFit)
    })
}

/// The node that fits `task` with the highest score; ties go to the lowest id.
fn best_node(
    state: &ClusterState,
    task: &TaskRequest,
    mask: NodeMask,
    mut score: impl FnMut(NodeId) -> f64,
) -> Option<NodeId> {
    let mut best: Option<(f64, NodeId)> = None;
    for n in state.nodes_fitting(task, mask) {
        let s = score(n);
        if best.is_none_or(|(b, _)| s > b) {
            best = Some((s, n));
        }
    }
    best.map(|(_, n)| n)
}

#[cfg(test)]
pub(crate) mod test_util {
    //! Small worlds for the scorers' tests.
    use super::NodeView;
    use crate::cluster::tests::uniform;
    use crate::cluster::{ClusterState, TaskPlacement};
    use crate::job::TaskRequest;
    use crate::job::tests::job;
    use crate::units::{JobId, NodeId};
    use std::sync::Arc;

    /// A 4-GPU node view with 8 cores and 32 GiB, and the given free capacity.
    pub fn view(gpu_free: &[u16], cpu_free: u64, mem_free: u64) -> NodeView<'_> {
        NodeView {
            gpu_free,
            cpu_free,
            mem_free,
            cpu_cap: 8000,
            mem_cap: 32_768,
        }
    }

    /// A share of one GPU with 1 core and 1 GiB.
    pub fn share(milli: u32) -> TaskRequest {
        TaskRequest {
            gpus: 1,
            gpu_milli: milli,
            cpu_milli: 1000,
            mem_mib: 1024,
        }
    }

    /// `n` nodes of 4 V100s, 8 cores and 32 GiB each (4 nodes a rack), with `taken` running:
    /// (node, task, GPUs) each as its own job.
    pub fn cluster(n: usize, taken: &[(u32, TaskRequest, Vec<u8>)]) -> ClusterState {
        let mut s = ClusterState::new(Arc::new(uniform(n, 4, "V100", 8000, 32_768)));
        for (i, (node, task, gpus)) in taken.iter().enumerate() {
            let mut j = job("taken", 0, *task);
            j.id = JobId(1000 + i as u32);
            s.allocate(
                &j,
                vec![TaskPlacement {
                    node: NodeId(*node),
                    gpus: gpus.clone(),
                }],
            )
            .expect("test allocation fits");
        }
        s
    }
}
