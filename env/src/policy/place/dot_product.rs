//! `dot-product`: Tetris' alignment score (Grandl et al., SIGCOMM'14): the node whose free
//! capacity lines up best with what the task asks for.

use super::{NodeView, place_by_node_score, ratio};
use crate::cluster::TaskPlacement;
use crate::job::{JobSpec, TaskRequest};
use crate::policy::{Placer, Planner};

/// Dot product of the task's demand and the node's free capacity, each resource (GPU, CPU,
/// memory; those the node has) normalised by the node's capacity. Higher wins.
pub fn dot_product_score(node: &NodeView<'_>, task: &TaskRequest) -> f64 {
    let term = |cap: u64, free: u64, req: u64| Some(ratio(req, cap)? * ratio(free, cap)?);
    [
        term(
            node.gpu_cap_milli(),
            node.gpu_free_milli(),
            task.gpu_milli_total(),
        ),
        term(node.cpu_cap, node.cpu_free, task.cpu_milli),
        term(node.mem_cap, node.mem_free, task.mem_mib),
    ]
    .iter()
    .flatten()
    .sum()
}

/// Places each task on the node `dot_product_score` rates highest.
#[derive(Debug, Default)]
pub struct DotProduct;

impl Placer for DotProduct {
    fn name(&self) -> &str {
        "dot-product"
    }
    fn place(&mut self, planner: &mut Planner<'_>, job: &JobSpec) -> Option<Vec<TaskPlacement>> {
        place_by_node_score(planner, job, |state, n, _| {
            dot_product_score(&NodeView::of(state, n), &job.task)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::place::test_util::{cluster, view};
    use crate::units::NodeId;
    use std::cell::RefCell;

    #[test]
    fn scores_follow_the_definition() {
        // Nodes of 4 GPUs, 8 cores, 32 GiB. Task: 1 GPU, 1 core, 4 GiB: demand
        // (1000/4000, 1000/8000, 4096/32768) = (0.25, 0.125, 0.125).
        let task = TaskRequest::whole(1, 1000, 4096);
        let cases = [
            // A: free (3000/4000, 6000/8000, 16384/32768) = (0.75, 0.75, 0.5).
            // 0.25*0.75 + 0.125*0.75 + 0.125*0.5 = 0.1875 + 0.09375 + 0.0625 = 0.34375.
            ([1000, 1000, 0, 1000], 6000, 16_384, 0.34375),
            // B: empty, free (1, 1, 1): 0.25 + 0.125 + 0.125 = 0.5. B wins (Tetris spreads
            // a task toward the free room that matches its shape).
            ([1000; 4], 8000, 32_768, 0.5),
            // C: GPUs free but CPU nearly gone, (1, 0.125, 1): 0.25 + 0.015625 + 0.125.
            ([1000; 4], 1000, 32_768, 0.390625),
        ];
        for (gpus, cpu, mem, want) in cases {
            let got = dot_product_score(&view(&gpus, cpu, mem), &task);
            assert!((got - want).abs() < 1e-12, "{gpus:?}: {got} != {want}");
        }
    }

    #[test]
    fn picks_the_best_aligned_node() {
        // Node 0 has 7 of its 8 cores taken, node 1 half its GPUs. A light task (1 GPU, half a
        // core) scores node 0: 0.25*1 + 0.0625*0.125 = 0.2578, node 1: 0.25*0.5 + 0.0625*1 =
        // 0.1875, and goes to node 0. A CPU-heavy one (1 GPU, 4 cores) fits node 1 only.
        let s = cluster(
            2,
            &[
                (0, TaskRequest::whole(0, 7000, 0), vec![]),
                (1, TaskRequest::whole(2, 0, 0), vec![0, 1]),
            ],
        );
        let cell = RefCell::new(s);
        let mut planner = Planner::new(cell.borrow_mut());
        let light = crate::job::tests::job("l", 0, TaskRequest::whole(1, 500, 0));
        assert_eq!(
            DotProduct.place(&mut planner, &light).unwrap()[0].node,
            NodeId(0)
        );
        let heavy = crate::job::tests::job("h", 0, TaskRequest::whole(1, 4000, 0));
        assert_eq!(
            DotProduct.place(&mut planner, &heavy).unwrap()[0].node,
            NodeId(1)
        );
    }
}
