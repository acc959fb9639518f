//! FGD-style GPU fragmentation (Weng et al., "Beware of Fragmentation", ATC'23).
//!
//! For a node `n` and a task class `m` (GPUs `g`, share `d` milli per GPU, CPU, memory), the
//! fragment `F_n(m)` is the free GPU capacity on `n` that `m` cannot use:
//! - if `m` cannot run on `n` at all (GPUs, CPU or memory short), all of `n`'s free GPU
//!   capacity is fragment;
//! - otherwise the free capacity of every GPU whose free share is below `min(d, 1000)` (a
//!   whole-GPU task cannot use a partly taken GPU; a 500-milli task cannot use 300 free).
//!
//! A node's fragmentation is the expectation over the workload's task mix, `sum_m p_m F_n(m)`,
//! and the cluster's the sum over nodes. The mix is the trace's own: the share of tasks of each
//! (GPUs, share) class, with the class's mean CPU and memory. GPU-type constraints are not part
//! of a class (FGD's definition has none). Kept incrementally: only changed nodes are rescored.

use crate::cluster::ClusterState;
use crate::job::Trace;
use crate::units::{GPU_MILLI, NodeId};
use std::collections::BTreeMap;

/// Most task classes kept; rarer ones are dropped and the rest renormalised.
const MAX_CLASSES: usize = 128;

#[derive(Debug, Clone, PartialEq)]
struct TaskClass {
    gpus: u32,
    milli: u32,
    cpu_milli: u64,
    mem_mib: u64,
    weight: f64,
}

/// The task mix of a workload, for fragmentation.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskMix {
    classes: Vec<TaskClass>,
}

impl TaskMix {
    /// The GPU tasks of `trace` by (GPUs, share) class, weighted by how many tasks they are.
    /// CPU-only tasks do not fragment GPUs and are left out.
    pub fn from_trace(trace: &Trace) -> TaskMix {
        let mut acc: BTreeMap<(u32, u32), (u64, u128, u128)> = BTreeMap::new();
        for j in trace.jobs().iter().filter(|j| j.task.gpus > 0) {
            let e = acc.entry((j.task.gpus, j.task.gpu_milli)).or_default();
            e.0 += j.tasks as u64;
            e.1 += j.task.cpu_milli as u128 * j.tasks as u128;
            e.2 += j.task.mem_mib as u128 * j.tasks as u128;
        }
        let mut classes: Vec<TaskClass> = acc
            .into_iter()
            .map(|((gpus, milli), (n, cpu, mem))| TaskClass {
                gpus,
                milli,
                cpu_milli: (cpu / n as u128) as u64,
                mem_mib: (mem / n as u128) as u64,
                weight: n as f64,
            })
            .collect();
        classes.sort_by(|a, b| {
            b.weight
                .total_cmp(&a.weight)
                .then((a.gpus, a.milli).cmp(&(b.gpus, b.milli)))
        });
        classes.truncate(MAX_CLASSES);
        let total: f64 = classes.iter().map(|c| c.weight).sum();
        for c in &mut classes {
            c.weight /= total;
        }
        TaskMix { classes }
    }

    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
    }

    /// Expected fragment of `node` now, milli-GPU.
    pub fn node_fragment(&self, state: &ClusterState, node: NodeId) -> f64 {
        let free = state.gpu_free(node);
        if free.is_empty() {
            return 0.0;
        }
        let total_free: u32 = free.iter().map(|f| u32::from(*f)).sum();
        let whole = state.free_whole_gpus(node);
        let max_free = free.iter().copied().max().map_or(0, u32::from);
        let (cpu, mem) = (state.cpu_free(node), state.mem_free(node));
        self.classes
            .iter()
            .map(|c| {
                let gpu_fits = if c.milli < GPU_MILLI {
                    max_free >= c.milli
                } else {
                    whole >= c.gpus
                };
                let fits = gpu_fits && cpu >= c.cpu_milli && mem >= c.mem_mib;
                let fragment = if fits {
                    let usable_from = c.milli.min(GPU_MILLI);
                    free.iter()
                        .map(|f| u32::from(*f))
                        .filter(|f| *f < usable_from)
                        .sum()
                } else {
                    total_free
                };
                c.weight * fragment as f64
            })
            .sum()
    }
}

/// The cluster's fragmentation, kept current node by node.
#[derive(Debug, Clone)]
pub struct FragTracker {
    mix: TaskMix,
    per_node: Vec<f64>,
    total: f64,
}

impl FragTracker {
    pub fn new(mix: TaskMix, state: &ClusterState) -> FragTracker {
        let per_node: Vec<f64> = state
            .spec()
            .node_ids()
            .map(|n| mix.node_fragment(state, n))
            .collect();
        let total = per_node.iter().sum();
        FragTracker {
            mix,
            per_node,
            total,
        }
    }
    /// Rescores `node` after its free capacity changed.
    pub fn update(&mut self, state: &ClusterState, node: NodeId) {
        let fresh = self.mix.node_fragment(state, node);
        let old = std::mem::replace(&mut self.per_node[node.index()], fresh);
        self.total += fresh - old;
    }
    /// Expected fragmented GPU capacity of the cluster, milli-GPU.
    pub fn total_milli(&self) -> f64 {
        // Summing deltas drifts by rounding; clamp tiny negatives.
        self.total.max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::TaskPlacement;
    use crate::cluster::tests::uniform;
    use crate::job::TaskRequest;
    use crate::job::tests::job;
    use crate::units::{JobId, SimTime};
    use std::sync::Arc;

    #[test]
    fn fragment_follows_the_definition() {
        // One node of 4 GPUs, 8 cores. Mix: half whole 1-GPU tasks, half 500-milli shares.
        let spec = Arc::new(uniform(1, 4, "V100", 8000, 65_536));
        let mut s = ClusterState::new(spec);
        let whole = job("w", 0, TaskRequest::whole(1, 1000, 0));
        let half = job(
            "h",
            0,
            TaskRequest {
                gpus: 1,
                gpu_milli: 500,
                cpu_milli: 1000,
                mem_mib: 0,
            },
        );
        let trace = Trace::new(
            "t",
            vec![whole, half],
            vec![SimTime(1), SimTime(1)],
            vec!["d".into()],
        )
        .unwrap();
        let mix = TaskMix::from_trace(&trace);
        // Empty node: both classes fit and no GPU is partly taken: fragment 0.
        assert_eq!(mix.node_fragment(&s, NodeId(0)), 0.0);
        // Take 700 of GPU 0: 300 free there. Whole task: 300 < 1000 is fragment. Share task:
        // 300 < 500 is fragment. Expected 0.5 * 300 + 0.5 * 300 = 300.
        let mut j = job(
            "x",
            0,
            TaskRequest {
                gpus: 1,
                gpu_milli: 700,
                cpu_milli: 0,
                mem_mib: 0,
            },
        );
        j.id = JobId(7);
        s.allocate(
            &j,
            vec![TaskPlacement {
                node: NodeId(0),
                gpus: vec![0],
            }],
        )
        .unwrap();
        assert_eq!(mix.node_fragment(&s, NodeId(0)), 300.0);
        // Take all 8 cores: nothing fits, all 3300 free milli are fragment for both classes.
        let mut c = job("c", 0, TaskRequest::whole(0, 8000, 0));
        c.id = JobId(8);
        s.allocate(
            &c,
            vec![TaskPlacement {
                node: NodeId(0),
                gpus: vec![],
            }],
        )
        .unwrap();
        assert_eq!(mix.node_fragment(&s, NodeId(0)), 3300.0);
    }
}
