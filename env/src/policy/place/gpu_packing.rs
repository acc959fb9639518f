//! `gpu-packing`: the "GPU packing" baseline of the FGD paper (Weng et al., ATC'23): a share
//! goes to the most occupied GPU that holds it, whole GPUs to the most occupied node, so that
//! idle GPUs and idle nodes stay idle as long as possible.

use super::{NodeView, place_by_node_score};
use crate::cluster::TaskPlacement;
use crate::job::{JobSpec, TaskRequest};
use crate::policy::{Placer, Planner};
use crate::units::GPU_MILLI;

/// Higher is more packed, and wins. Lexicographic keys folded into one number (each later key
/// is scaled below one step of the one before):
/// - a share: least free share on the GPU it would take (best fit), then fewest idle GPUs;
/// - whole GPUs: fewest idle GPUs on the node, then least free GPU capacity;
/// - CPU only: least free CPU, as a fraction of the node's.
pub fn packing_score(node: &NodeView<'_>, task: &TaskRequest) -> f64 {
    let idle = f64::from(node.whole_free());
    if task.gpus == 0 {
        return -super::ratio(node.cpu_free, node.cpu_cap).unwrap_or(0.0);
    }
    if task.is_fractional() {
        let gpu_free = node
            .best_fit_gpu(task.gpu_milli)
            .map_or(GPU_MILLI, |g| u32::from(node.gpu_free[g]));
        // Idle GPUs <= 64, so idle / 100 < 1 milli step.
        -f64::from(gpu_free) - idle / 100.0
    } else {
        // Free milli <= 64 000, so / 100 000 < 1 idle-GPU step.
        -idle - node.gpu_free_milli() as f64 / 100_000.0
    }
}

/// Places each task where `packing_score` rates highest.
#[derive(Debug, Default)]
pub struct GpuPacking;

impl Placer for GpuPacking {
    fn name(&self) -> &str {
        "gpu-packing"
    }
    fn place(&mut self, planner: &mut Planner<'_>, job: &JobSpec) -> Option<Vec<TaskPlacement>> {
        place_by_node_score(planner, job, |state, n, _| {
            packing_score(&NodeView::of(state, n), &job.task)
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
        let a = [1000, 1000, 400, 1000];
        let b = [1000, 700, 1000, 1000];
        let cases = [
            // 300 milli: A's best GPU has 400 free, 3 idle: -400 - 0.03. B's has 700: -700.03.
            // A wins (the fuller GPU).
            (share(300), &a, -400.03),
            (share(300), &b, -700.03),
            // 500 milli: 400 is too small, so A's best is an idle GPU: -1000.03; B: -700.03.
            // B wins.
            (share(500), &a, -1000.03),
            (share(500), &b, -700.03),
            // 1 whole GPU: both have 3 idle GPUs; A has 3400 free, B 3700: -3.034 vs -3.037.
            // A wins.
            (TaskRequest::whole(1, 0, 0), &a, -3.034),
            (TaskRequest::whole(1, 0, 0), &b, -3.037),
        ];
        for (task, gpus, want) in cases {
            let got = packing_score(&view(gpus, 8000, 32_768), &task);
            assert!((got - want).abs() < 1e-9, "{gpus:?}: {got} != {want}");
        }
        // CPU only: 2 of 8 cores free: -0.25.
        let got = packing_score(&view(&a, 2000, 0), &TaskRequest::whole(0, 1000, 0));
        assert!((got + 0.25).abs() < 1e-12);
    }

    #[test]
    fn shares_fill_partly_used_gpus_first() {
        // Node 0 idle; node 1 GPU 2 has 600 taken (400 free). A 300 share goes there, onto
        // GPU 2; a second one no longer fits GPU 2 (100 left), and goes to node 1's idle
        // GPUs ahead of idle node 0 (3 idle GPUs against 4).
        let s = cluster(2, &[(1, share(600), vec![2])]);
        let cell = RefCell::new(s);
        let mut planner = Planner::new(cell.borrow_mut());
        let j = crate::job::tests::job("j", 0, share(300));
        let first = GpuPacking.place(&mut planner, &j).unwrap();
        assert_eq!((first[0].node, first[0].gpus.clone()), (NodeId(1), vec![2]));
        let second = GpuPacking.place(&mut planner, &j).unwrap();
        assert_eq!(
            (second[0].node, second[0].gpus.clone()),
            (NodeId(1), vec![0])
        );
    }
}
