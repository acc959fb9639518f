//! `topo`: topology-consolidating placement for gangs. A gang goes on as few nodes as
//! possible, then within one NVLink domain, then within one rack; a single-task job goes by
//! best fit.

use super::{NodeView, place_task_by_task};
use crate::cluster::{ClusterState, FitStrategy, NodeMask, TaskPlacement};
use crate::job::{JobSpec, TaskRequest};
use crate::policy::{Placer, Planner};
use crate::units::NodeId;
use std::collections::BTreeMap;

/// How many tasks like `task` fit on the node at once, at most `limit`. The node's GPU model
/// is not checked (candidates come from `nodes_fitting`, which does).
pub fn tasks_fitting(node: &NodeView<'_>, task: &TaskRequest, limit: u32) -> u32 {
    let per = |free: u64, need: u64| free.checked_div(need).unwrap_or(u64::MAX);
    let by_gpu = if task.gpus == 0 {
        u64::MAX
    } else if task.is_fractional() {
        node.gpu_free
            .iter()
            .map(|f| u64::from(*f) / u64::from(task.gpu_milli))
            .sum()
    } else {
        u64::from(node.whole_free()) / u64::from(task.gpus)
    };
    let n = by_gpu
        .min(per(node.cpu_free, task.cpu_milli))
        .min(per(node.mem_free, task.mem_mib))
        .min(u64::from(limit));
    n as u32
}

/// A candidate node for a gang: how many of its tasks fit there, and where it sits.
#[derive(Debug, Clone, Copy)]
struct Slot {
    node: NodeId,
    fits: u32,
    domain: u32,
    rack: u32,
}

/// Nodes (with task counts) for `k` tasks, taking the roomiest nodes of `slots` first; `None`
/// if they do not hold `k` in all.
fn greedy(slots: &[Slot], k: u32) -> Option<Vec<(NodeId, u32)>> {
    let mut sorted: Vec<&Slot> = slots.iter().collect();
    sorted.sort_by_key(|s| (std::cmp::Reverse(s.fits), s.node));
    let mut left = k;
    let mut plan = Vec::new();
    for s in sorted {
        if left == 0 {
            break;
        }
        let take = s.fits.min(left);
        plan.push((s.node, take));
        left -= take;
    }
    (left == 0).then_some(plan)
}

/// The topology cost of a plan, lower is better: (nodes, NVLink domains, racks) it spans.
fn spread(plan: &[(NodeId, u32)], slots: &BTreeMap<NodeId, Slot>) -> (usize, usize, usize) {
    let mut domains: Vec<u32> = plan.iter().map(|(n, _)| slots[n].domain).collect();
    let mut racks: Vec<u32> = plan.iter().map(|(n, _)| slots[n].rack).collect();
    domains.sort_unstable();
    domains.dedup();
    racks.sort_unstable();
    racks.dedup();
    (plan.len(), domains.len(), racks.len())
}

/// Where `k` tasks of `task` go: one node if one holds them all (best fit: least free GPU,
/// then CPU, then lowest id); otherwise the plan of least (nodes, domains, racks) among the
/// greedy plans within each NVLink domain, within each rack, and over the whole cluster.
/// `distinct`: at most one task a node.
fn plan_gang(
    state: &ClusterState,
    task: &TaskRequest,
    mask: NodeMask,
    k: u32,
    distinct: bool,
) -> Option<Vec<NodeId>> {
    let slots: BTreeMap<NodeId, Slot> = state
        .nodes_fitting(task, mask)
        .map(|node| {
            let spec = state.spec().node(node);
            let slot = Slot {
                node,
                fits: tasks_fitting(
                    &NodeView::of(state, node),
                    task,
                    if distinct { 1 } else { k },
                ),
                domain: spec.nvlink_domain,
                rack: spec.rack,
            };
            (node, slot)
        })
        .collect();
    let single = slots
        .values()
        .filter(|s| s.fits >= k)
        .min_by_key(|s| (state.free_gpu_milli(s.node), state.cpu_free(s.node), s.node));
    if let Some(s) = single {
        return Some(vec![s.node; k as usize]);
    }
    let all: Vec<Slot> = slots.values().copied().collect();
    let mut groups: Vec<Vec<Slot>> = Vec::new();
    for key in [|s: &Slot| s.domain, |s: &Slot| s.rack] {
        let mut by: BTreeMap<u32, Vec<Slot>> = BTreeMap::new();
        for s in &all {
            by.entry(key(s)).or_default().push(*s);
        }
        groups.extend(by.into_values());
    }
    groups.push(all);
    let best = groups
        .iter()
        .filter_map(|g| greedy(g, k))
        .min_by_key(|plan| spread(plan, &slots))?;
    Some(
        best.into_iter()
            .flat_map(|(n, c)| std::iter::repeat_n(n, c as usize))
            .collect(),
    )
}

/// Gangs consolidated by topology (`plan_gang`); single tasks by best fit.
#[derive(Debug, Default)]
pub struct Topo;

impl Placer for Topo {
    fn name(&self) -> &str {
        "topo"
    }
    fn place(&mut self, planner: &mut Planner<'_>, job: &JobSpec) -> Option<Vec<TaskPlacement>> {
        if job.tasks <= 1 {
            return planner.place(job, FitStrategy::BestFit);
        }
        let mask = planner.state().spec().job_mask(job);
        let distinct = job.constraints.distinct_nodes;
        let nodes = plan_gang(planner.state(), &job.task, mask, job.tasks, distinct)?;
        place_task_by_task(planner, job, |state, mask, placed| {
            state.fit_task_on(&job.task, mask, nodes[placed.len()], FitStrategy::BestFit)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{ClusterSpec, NodeSpec};
    use crate::gpu::GpuModel;
    use crate::job::tests::job;
    use crate::policy::place::test_util::{cluster, share, view};
    use crate::units::GpuModelId;
    use std::cell::RefCell;
    use std::sync::Arc;

    #[test]
    fn tasks_fitting_counts_the_binding_resource() {
        let cases = [
            // 3 idle GPUs, 1-GPU tasks of 1 core: GPUs bind at 3 (8 cores would take 8).
            (
                [1000, 1000, 0, 1000],
                TaskRequest::whole(1, 1000, 0),
                8000,
                9,
                3,
            ),
            // 2-GPU tasks: 3 idle / 2 = 1.
            (
                [1000, 1000, 0, 1000],
                TaskRequest::whole(2, 1000, 0),
                8000,
                9,
                1,
            ),
            // 300 shares: 1000/300 + 1000/300 + 400/300 + 0 = 3 + 3 + 1 = 7, CPU 8: 7.
            ([1000, 1000, 400, 0], share(300), 8000, 9, 7),
            // ... with 5 cores free (1 core each): 5.
            ([1000, 1000, 400, 0], share(300), 5000, 9, 5),
            // ... and a limit of 4: 4.
            ([1000, 1000, 400, 0], share(300), 8000, 4, 4),
            // CPU only, 2 cores each, 7 free: 3.
            ([0, 0, 0, 0], TaskRequest::whole(0, 2000, 0), 7000, 9, 3),
        ];
        for (gpus, task, cpu, limit, want) in cases {
            assert_eq!(
                tasks_fitting(&view(&gpus, cpu, 32_768), &task, limit),
                want,
                "{gpus:?} {task:?}"
            );
        }
    }

    fn gang(tasks: u32, task: TaskRequest) -> JobSpec {
        let mut j = job("g", 0, task);
        j.tasks = tasks;
        j
    }

    fn nodes_of(placed: &[TaskPlacement]) -> Vec<u32> {
        placed.iter().map(|t| t.node.0).collect()
    }

    #[test]
    fn a_gang_goes_on_one_node_when_one_has_room() {
        // 8 nodes of 4 GPUs. Node 0 has 2 idle GPUs, node 5 all 4, the rest 1. A gang of 2
        // tasks x 2 GPUs: only node 5 holds both -> both there (first fit would split 0 + 5).
        let two = TaskRequest::whole(2, 0, 0);
        let three = TaskRequest::whole(3, 0, 0);
        let mut taken = vec![(0, two, vec![0, 1])];
        taken.extend(
            (1..8)
                .filter(|n| *n != 5)
                .map(|n| (n, three, vec![0, 1, 2])),
        );
        let cell = RefCell::new(cluster(8, &taken));
        let mut planner = Planner::new(cell.borrow_mut());
        let placed = Topo.place(&mut planner, &gang(2, two)).unwrap();
        assert_eq!(nodes_of(&placed), vec![5, 5]);
        assert_eq!(placed[0].gpus, vec![0, 1]);
        assert_eq!(placed[1].gpus, vec![2, 3]);
    }

    #[test]
    fn otherwise_a_gang_stays_in_one_rack() {
        // 8 nodes of 4 GPUs, racks {0..3} and {4..7}. 3 idle GPUs on nodes 1, 4 and 6, fewer
        // elsewhere. A gang of 2 x 3 GPUs needs 2 nodes: 4 and 6 share rack 1; first fit
        // would take 1 and 4 across racks.
        let two = TaskRequest::whole(2, 0, 0);
        let one = TaskRequest::whole(1, 0, 0);
        let taken: Vec<_> = (0..8u32)
            .map(|n| {
                if [1, 4, 6].contains(&n) {
                    (n, one, vec![0])
                } else {
                    (n, two, vec![0, 1])
                }
            })
            .collect();
        let cell = RefCell::new(cluster(8, &taken));
        let mut planner = Planner::new(cell.borrow_mut());
        let placed = Topo
            .place(&mut planner, &gang(2, TaskRequest::whole(3, 0, 0)))
            .unwrap();
        assert_eq!(nodes_of(&placed), vec![4, 6]);
        // A gang that does not fit at all is refused with nothing reserved.
        let before = planner.state().allocated_gpu_milli();
        assert!(
            Topo.place(&mut planner, &gang(3, TaskRequest::whole(3, 0, 0)))
                .is_none()
        );
        assert_eq!(planner.state().allocated_gpu_milli(), before);
    }

    #[test]
    fn an_nvlink_domain_beats_a_rack() {
        // 4 nodes of 4 GPUs in one rack; NVLink domains {0, 1} and {2, 3}. Idle GPUs: node 0
        // 2, nodes 1, 2 and 3 3 each. A gang of 2 x 3 GPUs needs 2 nodes of 1..3: nodes 1 + 2
        // come first by id, but 2 + 3 share a domain.
        let models = vec![GpuModel::from_catalog("V100").expect("catalog model")];
        let nodes = (0..4)
            .map(|i| NodeSpec {
                name: format!("n{i}"),
                gpu_model: Some(GpuModelId(0)),
                gpus: 4,
                cpu_milli: 8000,
                mem_mib: 32_768,
                rack: 0,
                nvlink_domain: i / 2,
                labels: Default::default(),
            })
            .collect();
        let spec = ClusterSpec::new(
            "nv",
            models,
            nodes,
            vec!["r0".into()],
            vec!["d0".into(), "d1".into()],
        )
        .unwrap();
        let mut s = ClusterState::new(Arc::new(spec));
        let taken = [(0u32, 2u32), (1, 1), (2, 1), (3, 1)];
        for (i, (node, gpus)) in taken.into_iter().enumerate() {
            let mut j = job("t", 0, TaskRequest::whole(gpus, 0, 0));
            j.id = crate::units::JobId(50 + i as u32);
            let t = TaskPlacement {
                node: NodeId(node),
                gpus: (0..gpus as u8).collect(),
            };
            s.allocate(&j, vec![t]).unwrap();
        }
        let cell = RefCell::new(s);
        let mut planner = Planner::new(cell.borrow_mut());
        let placed = Topo
            .place(&mut planner, &gang(2, TaskRequest::whole(3, 0, 0)))
            .unwrap();
        assert_eq!(nodes_of(&placed), vec![2, 3]);
    }
}
