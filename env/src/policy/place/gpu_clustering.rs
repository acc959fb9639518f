//! `gpu-clustering`: the "Clustering" baseline of the FGD paper (Weng et al., ATC'23): tasks
//! with the same GPU request go together, so that nodes serve one task shape each.

use super::{NodeView, place_by_node_score, ratio};
use crate::cluster::{ClusterState, TaskPlacement};
use crate::job::{JobSpec, TaskRequest};
use crate::policy::{Placer, Planner};

/// Higher wins: first the number of tasks with the same GPU request (GPUs and share) already
/// on the node (`same_tasks`), then best fit: the smaller free fraction of the resource the
/// task mainly uses (GPU, or CPU for a CPU-only task), scaled to half a step.
pub fn clustering_score(same_tasks: u32, node: &NodeView<'_>, task: &TaskRequest) -> f64 {
    let free = if task.gpus == 0 {
        ratio(node.cpu_free, node.cpu_cap)
    } else {
        ratio(node.gpu_free_milli(), node.gpu_cap_milli())
    };
    f64::from(same_tasks) - 0.5 * free.unwrap_or(0.0)
}

/// Tasks with `task`'s GPU request running on each node (indexed by node), from the running
/// jobs. Tentative placements of the current decision other than the gang's own are not
/// counted: the planner does not name their jobs.
fn same_request_per_node(state: &ClusterState, task: &TaskRequest) -> Vec<u32> {
    let mut counts = vec![0u32; state.spec().nodes.len()];
    let same = |t: &TaskRequest| (t.gpus, t.gpu_milli) == (task.gpus, task.gpu_milli);
    for a in state.running().filter(|a| same(&a.task)) {
        for t in a.tasks.iter() {
            counts[t.node.index()] += 1;
        }
    }
    counts
}

/// Places each task where `clustering_score` rates highest.
#[derive(Debug, Default)]
pub struct GpuClustering;

impl Placer for GpuClustering {
    fn name(&self) -> &str {
        "gpu-clustering"
    }
    fn place(&mut self, planner: &mut Planner<'_>, job: &JobSpec) -> Option<Vec<TaskPlacement>> {
        let running = same_request_per_node(planner.state(), &job.task);
        place_by_node_score(planner, job, |state, n, placed| {
            let gang = placed.iter().filter(|t| t.node == n).count() as u32;
            clustering_score(
                running[n.index()] + gang,
                &NodeView::of(state, n),
                &job.task,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::place::test_util::{cluster, share, view};
    use crate::units::NodeId;
    use std::cell::RefCell;

    #[test]
    fn scores_follow_the_definition() {
        let cases = [
            // 2 same-request tasks, GPUs 1000/4000 free: 2 - 0.5 * 0.25 = 1.875.
            (2, [1000, 0, 0, 0], 1.875),
            // None, all free: 0 - 0.5 = -0.5.
            (0, [1000; 4], -0.5),
            // None, half free: 0 - 0.25 = -0.25 (best fit among the unclustered).
            (0, [1000, 1000, 0, 0], -0.25),
        ];
        for (same, gpus, want) in cases {
            let got = clustering_score(same, &view(&gpus, 8000, 32_768), &share(500));
            assert!((got - want).abs() < 1e-12, "{gpus:?}: {got} != {want}");
        }
    }

    #[test]
    fn joins_tasks_of_the_same_request() {
        // Node 0 runs a 500 share, node 1 a 250 share (and is fuller, a whole GPU taken
        // too). A 250 share goes to node 1 (1 same-request task), a 500 share to node 0.
        let s = cluster(
            2,
            &[
                (0, share(500), vec![0]),
                (1, share(250), vec![0]),
                (1, TaskRequest::whole(1, 0, 0), vec![1]),
            ],
        );
        let cell = RefCell::new(s);
        let mut planner = Planner::new(cell.borrow_mut());
        let quarter = crate::job::tests::job("q", 0, share(250));
        assert_eq!(
            GpuClustering.place(&mut planner, &quarter).unwrap()[0].node,
            NodeId(1)
        );
        let half = crate::job::tests::job("h", 0, share(500));
        assert_eq!(
            GpuClustering.place(&mut planner, &half).unwrap()[0].node,
            NodeId(0)
        );
    }
}
