//! `random-fit`: a uniformly random node among those that fit, from a seeded generator (the
//! floor every placement should beat; deterministic for a seed).

use super::place_task_by_task;
use crate::cluster::{FitStrategy, TaskPlacement};
use crate::job::JobSpec;
use crate::policy::{Placer, Planner};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// Places each task on a node drawn uniformly among those that fit it, on its lowest free GPUs.
#[derive(Debug)]
pub struct RandomFit {
    rng: StdRng,
}

impl RandomFit {
    pub fn new(seed: u64) -> Self {
        RandomFit {
            rng: StdRng::seed_from_u64(seed),
        }
    }
}

impl Placer for RandomFit {
    fn name(&self) -> &str {
        "random-fit"
    }
    fn place(&mut self, planner: &mut Planner<'_>, job: &JobSpec) -> Option<Vec<TaskPlacement>> {
        let rng = &mut self.rng;
        place_task_by_task(planner, job, |state, mask, _| {
            let nodes: Vec<_> = state.nodes_fitting(&job.task, mask).collect();
            if nodes.is_empty() {
                return None;
            }
            let node = nodes[rng.random_range(0..nodes.len())];
            state.fit_task_on(&job.task, mask, node, FitStrategy::FirstFit)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::TaskRequest;
    use crate::job::tests::job;
    use crate::policy::place::test_util::cluster;
    use std::cell::RefCell;

    /// The nodes 20 one-GPU jobs land on, from an idle cluster of 8 nodes.
    fn draws(seed: u64) -> Vec<u32> {
        let cell = RefCell::new(cluster(8, &[]));
        let mut planner = Planner::new(cell.borrow_mut());
        let mut placer = RandomFit::new(seed);
        let j = job("j", 0, TaskRequest::whole(1, 0, 0));
        (0..20)
            .map(|_| placer.place(&mut planner, &j).expect("room left")[0].node.0)
            .collect()
    }

    #[test]
    fn same_seed_same_nodes_other_seeds_differ() {
        assert_eq!(draws(7), draws(7));
        let distinct: std::collections::BTreeSet<Vec<u32>> = (0..5).map(draws).collect();
        assert!(distinct.len() > 1, "five seeds drew one sequence");
        // Not first-fit in disguise: the draws use more than the first nodes.
        assert!(draws(7).iter().any(|n| *n >= 4));
    }

    #[test]
    fn a_gang_that_does_not_fit_leaves_nothing_reserved() {
        // 2 nodes x 4 GPUs; a 3-task gang of 3 GPUs needs 3 nodes: refused, all undone.
        let cell = RefCell::new(cluster(2, &[]));
        let mut planner = Planner::new(cell.borrow_mut());
        let mut j = job("g", 0, TaskRequest::whole(3, 0, 0));
        j.tasks = 3;
        assert!(RandomFit::new(1).place(&mut planner, &j).is_none());
        assert_eq!(planner.state().allocated_gpu_milli(), 0);
        let n = crate::units::NodeId(0);
        assert_eq!(planner.state().free_whole_gpus(n), 4);
        assert_eq!(planner.state().free_whole_gpus(crate::units::NodeId(1)), 4);
    }
}
