//! `most-allocated`: Kubernetes' `MostAllocated` scoring (`noderesources/most_allocated.go`):
//! pack onto the fullest node, resources weighed equally.

use super::{NodeView, place_by_node_score, ratio};
use crate::cluster::TaskPlacement;
use crate::job::{JobSpec, TaskRequest};
use crate::policy::{Placer, Planner};

/// Mean over the node's resources (GPU, CPU, memory; those it has) of what would be allocated
/// after placing `task`, over capacity. Higher is fuller, and wins.
pub fn most_allocated_score(node: &NodeView<'_>, task: &TaskRequest) -> f64 {
    let after = |cap: u64, free: u64, req: u64| ratio(cap - free + req, cap);
    let parts = [
        after(
            node.gpu_cap_milli(),
            node.gpu_free_milli(),
            task.gpu_milli_total(),
        ),
        after(node.cpu_cap, node.cpu_free, task.cpu_milli),
        after(node.mem_cap, node.mem_free, task.mem_mib),
    ];
    let (sum, n) = parts
        .iter()
        .flatten()
        .fold((0.0, 0u32), |(s, n), r| (s + r, n + 1));
    if n == 0 { 0.0 } else { sum / f64::from(n) }
}

/// Places each task on the node `most_allocated_score` rates highest.
#[derive(Debug, Default, Clone)]
pub struct MostAllocated;

impl Placer for MostAllocated {
    fn name(&self) -> &str {
        "most-allocated"
    }
    fn place(&mut self, planner: &mut Planner<'_>, job: &JobSpec) -> Option<Vec<TaskPlacement>> {
        place_by_node_score(planner, job, |state, n, _| {
            most_allocated_score(&NodeView::of(state, n), &job.task)
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
        // Nodes of 4 GPUs, 8 cores, 32 GiB. Task: 1 GPU, 1 core, 4 GiB.
        let task = TaskRequest::whole(1, 1000, 4096);
        let cases = [
            // A: 3 GPUs, 6 cores, 16 GiB free. After: GPU (4000-3000+1000)/4000 = 0.5,
            // CPU (8000-6000+1000)/8000 = 0.375, mem (32768-16384+4096)/32768 = 0.625.
            // Mean 1.5 / 3 = 0.5.
            ([1000, 1000, 0, 1000], 6000, 16_384, 0.5),
            // B: empty. After: 1000/4000 = 0.25, 1000/8000 = 0.125, 4096/32768 = 0.125.
            // Mean 0.5 / 3 = 1/6: B is emptier, A wins.
            ([1000; 4], 8000, 32_768, 0.5 / 3.0),
        ];
        for (gpus, cpu, mem, want) in cases {
            let got = most_allocated_score(&view(&gpus, cpu, mem), &task);
            assert!((got - want).abs() < 1e-12, "{gpus:?}: {got} != {want}");
        }
        // A CPU-only node and task: GPU is left out of the mean. CPU (8000-4000+2000)/8000 =
        // 0.75, mem (32768-32768+0)/32768 = 0: mean 0.375.
        let cpu_task = TaskRequest::whole(0, 2000, 0);
        let got = most_allocated_score(&view(&[], 4000, 32_768), &cpu_task);
        assert!((got - 0.375).abs() < 1e-12);
    }

    #[test]
    fn picks_the_fullest_node() {
        // Node 0 empty, node 1 half taken: a share goes to node 1.
        let s = cluster(2, &[(1, TaskRequest::whole(2, 4000, 0), vec![0, 1])]);
        let cell = RefCell::new(s);
        let mut planner = Planner::new(cell.borrow_mut());
        let j = crate::job::tests::job("j", 0, share(500));
        let got = MostAllocated.place(&mut planner, &j).unwrap();
        assert_eq!(got[0].node, NodeId(1));
    }
}
