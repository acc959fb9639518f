//! `Room`: how many tasks of one job the cluster could hold if some running jobs were freed,
//! counted on node capacity alone, without touching the planner or its index.
//!
//! The victim searches ask "does the job fit once these victims are freed?" for many victim
//! sets: every prefix of a ranked list, every single candidate, every pruning step. Asking the
//! placer means freeing the victims through the planner (index updates per task) and undoing
//! them, which made a search cost O(victims x index updates) and a learned decision on a
//! 1,000-node cluster take seconds. `Room` answers the capacity part of the question with
//! arithmetic on the touched nodes, and the searches ask the placer only where capacity says
//! the job could fit. That is a necessary condition for every placer (no placement exists when
//! the nodes cannot hold all the tasks), so a search that skips the sets `Room` rules out
//! returns exactly what it returned before, only sooner.
//!
//! The count is exact for the tasks of one job, which are identical: a node holds
//! `min(GPU slots, CPU / task CPU, memory / task memory)` tasks, where GPU slots are its free
//! whole GPUs over the task's GPUs, or for a fractional task the sum over its GPUs of free
//! share over the task's share; CPU-only tasks need no GPU; a node of a model the job does not
//! allow holds none of a GPU task. The greedy gang placement takes one task at a time from a
//! node that can hold one, which lowers that node's count by exactly one, so it places the gang
//! exactly when the counts add up to the gang's size. A job freed twice is counted twice, which
//! only overestimates the room: the condition stays necessary.

use crate::cluster::{ClusterState, NodeMask};
use crate::job::{JobSpec, TaskRequest};
use crate::units::{GPU_MILLI, JobId, NodeId};
use std::cell::{Cell, RefCell};

/// The room for one job's tasks on the cluster as a planner holds it (see the module docs).
/// Valid while the planner stays in the state it was built from.
#[derive(Debug)]
pub(super) struct Room {
    task: TaskRequest,
    mask: NodeMask,
    /// Tasks the job needs.
    need: u64,
    /// Tasks of the job the cluster holds now, capped per node at `need`.
    now: u64,
    /// Each node as the planner holds it, by node index: what a freeing starts from.
    before: Vec<NodeRoom>,
    /// `node_may_make_room` by node index, as answered (`None`: not asked yet).
    may: Vec<Cell<Option<bool>>>,
    /// Reused by `admits_after` and `first_prefix` (see `Freed::spare`).
    scratch: RefCell<Freed>,
}

/// One node's room for the job before anything is freed.
#[derive(Debug, Clone, Copy)]
struct NodeRoom {
    /// Whether the node's GPUs may hold the job's tasks (always, for a CPU-only task).
    ok: bool,
    /// The node's GPU units (see `Room::units`), summed over its GPUs.
    units: u32,
    /// Tasks of the job the node holds.
    held: u64,
}

/// A touched node's free capacity with the freed jobs given back.
#[derive(Debug)]
struct Scratch {
    gpus: Vec<u32>,
    /// `Room::units` summed over `gpus`, kept as they change.
    units: u32,
    cpu: u64,
    mem: u64,
    /// Tasks of the job the node holds with what was freed on it so far.
    held: u64,
}

/// Freed capacity accumulated over a set of victims, per touched node.
#[derive(Debug, Default)]
pub(super) struct Freed {
    /// Touched nodes in first-touch order.
    nodes: Vec<(NodeId, Scratch)>,
    /// By node index: where the node is in `nodes`, `UNTOUCHED` if it is not (grown to the
    /// largest node touched; a search touches hundreds of nodes, found here without hashing).
    at: Vec<u32>,
    /// Tasks of the job the touched nodes hold now, minus what they held before.
    gained: u64,
    /// GPU vectors of cleared scratches, reused so a search that asks about thousands of sets
    /// does not allocate for each.
    spare: Vec<Vec<u32>>,
}

/// `Freed::at` of a node not touched.
const UNTOUCHED: u32 = u32::MAX;

/// The most tasks of a victim `Room::admits_single` compares pairwise for a shared node.
const FEW: usize = 8;

impl Freed {
    /// Forgets every freed job, keeping the allocations for the next set.
    fn clear(&mut self) {
        for (node, scratch) in self.nodes.drain(..) {
            self.at[node.index()] = UNTOUCHED;
            self.spare.push(scratch.gpus);
        }
        self.gained = 0;
    }

    /// The scratch of `node`, made by `init` (given an empty vector to fill) on first touch.
    fn slot(&mut self, node: NodeId, init: impl FnOnce(Vec<u32>) -> Scratch) -> &mut Scratch {
        let n = node.index();
        if n >= self.at.len() {
            self.at.resize(n + 1, UNTOUCHED);
        }
        let i = match self.at[n] {
            UNTOUCHED => {
                let mut gpus = self.spare.pop().unwrap_or_default();
                gpus.clear();
                self.nodes.push((node, init(gpus)));
                let i = self.nodes.len() - 1;
                self.at[n] =
                    u32::try_from(i).expect("touched nodes are distinct node ids, so below 2^32");
                i
            }
            i => i as usize,
        };
        &mut self.nodes[i].1
    }
}

impl Room {
    pub fn new(state: &ClusterState, job: &JobSpec) -> Room {
        let mut room = Room {
            task: job.task,
            mask: state.spec().job_mask(job),
            need: u64::from(job.tasks),
            now: 0,
            before: Vec::with_capacity(state.spec().nodes.len()),
            may: vec![Cell::new(None); state.spec().nodes.len()],
            scratch: RefCell::new(Freed::default()),
        };
        let fractional = job.task.is_fractional();
        for node in state.spec().node_ids() {
            let ok = room.node_ok(state, node);
            let units = if room.task.gpus == 0 || !ok {
                0
            } else if fractional {
                state
                    .gpu_free(node)
                    .iter()
                    .map(|f| room.units(u32::from(*f)))
                    .sum()
            } else {
                state.free_whole_gpus(node)
            };
            let held = if ok {
                room.cap(units, state.cpu_free(node), state.mem_free(node))
            } else {
                0
            };
            room.before.push(NodeRoom { ok, units, held });
            room.now = room.now.saturating_add(held);
        }
        room
    }

    /// Whether the cluster could hold every task with `freed` given back.
    pub fn admits(&self, freed: &Freed) -> bool {
        self.now.saturating_add(freed.gained) >= self.need
    }

    /// Whether the cluster could hold every task with `victims` freed (all of them).
    pub fn admits_after(&self, state: &ClusterState, victims: &[JobId]) -> bool {
        if let [v] = victims
            && let Some(admits) = self.admits_single(state, *v)
        {
            return admits;
        }
        self.admits_freeing(state, victims)
    }

    /// `admits_after` through the scratch: every victim freed into it, node by node.
    fn admits_freeing(&self, state: &ClusterState, victims: &[JobId]) -> bool {
        let mut freed = self.scratch.borrow_mut();
        freed.clear();
        for v in victims {
            self.free(state, &mut freed, *v);
        }
        self.admits(&freed)
    }

    /// `admits_after` for one victim whose tasks are on distinct nodes (the single-victim
    /// scan asks this of every candidate): the same sums as `apply`, each node's taken from
    /// the cluster as it stands, without a scratch. `None` for a victim with two tasks on one
    /// node, or more tasks than `FEW`, which `admits_freeing` answers.
    fn admits_single(&self, state: &ClusterState, v: JobId) -> Option<bool> {
        let Some(alloc) = state.allocation(v) else {
            return Some(self.admits(&Freed::default()));
        };
        let tasks = &alloc.tasks[..];
        let shared = |i: usize| tasks[..i].iter().any(|t| t.node == tasks[i].node);
        if tasks.len() > FEW || (1..tasks.len()).any(shared) {
            return None;
        }
        let task = &alloc.task;
        let mut gained = 0u64;
        for t in tasks {
            let before = self.before[t.node.index()];
            if !before.ok {
                continue;
            }
            let free = state.gpu_free(t.node);
            let mut units = before.units;
            for g in &t.gpus {
                if let Some(f) = free.get(*g as usize) {
                    let f = u32::from(*f);
                    units = self.units_changed(units, f, f + task.gpu_milli);
                }
            }
            let held = self.cap(
                units,
                state.cpu_free(t.node) + task.cpu_milli,
                state.mem_free(t.node) + task.mem_mib,
            );
            gained = (gained + held).saturating_sub(before.held);
        }
        Some(self.now.saturating_add(gained) >= self.need)
    }

    /// Whether freeing jobs that run on `node` alone (no task elsewhere) could make room for
    /// the job, whichever of them are freed: the node with all its capacity free holds at most
    /// so many tasks, so freeing there gains at most that less what it holds now. A bound for
    /// the victim searches to pass over a node's candidates without freeing them one by one.
    /// It holds when those jobs are freed once only (not already freed on the planner):
    /// what is free on a node and what its unfreed running jobs hold add up to at most its
    /// capacity.
    pub fn node_may_make_room(&self, state: &ClusterState, node: NodeId) -> bool {
        let memo = &self.may[node.index()];
        if let Some(may) = memo.get() {
            return may;
        }
        let may = self.node_bound(state, node);
        memo.set(Some(may));
        may
    }

    /// `node_may_make_room`, computed.
    fn node_bound(&self, state: &ClusterState, node: NodeId) -> bool {
        let before = self.before[node.index()];
        if !before.ok {
            return self.now >= self.need;
        }
        let spec = state.spec().node(node);
        let units = if self.task.gpus == 0 {
            0
        } else if self.task.is_fractional() {
            spec.gpus * (GPU_MILLI / self.task.gpu_milli)
        } else {
            spec.gpus
        };
        let most = self.cap(units, spec.cpu_milli, spec.mem_mib);
        self.now.saturating_add(most.saturating_sub(before.held)) >= self.need
    }

    /// The shortest prefix of `victims` (at least one) after whose release the cluster could
    /// hold every task; `None` if not even all of them make room.
    pub fn first_prefix(&self, state: &ClusterState, victims: &[JobId]) -> Option<usize> {
        let mut freed = self.scratch.borrow_mut();
        freed.clear();
        for (i, v) in victims.iter().enumerate() {
            self.free(state, &mut freed, *v);
            if self.admits(&freed) {
                return Some(i + 1);
            }
        }
        None
    }

    /// Adds running job `v`'s resources to `freed` (nothing if it is not running).
    pub fn free(&self, state: &ClusterState, freed: &mut Freed, v: JobId) {
        self.apply(state, freed, v, true);
    }

    /// Takes running job `v`'s resources back out of `freed`; `v` must have been added.
    pub fn unfree(&self, state: &ClusterState, freed: &mut Freed, v: JobId) {
        self.apply(state, freed, v, false);
    }

    fn apply(&self, state: &ClusterState, freed: &mut Freed, v: JobId, add: bool) {
        let Some(alloc) = state.allocation(v) else {
            return;
        };
        let task = &alloc.task;
        let step = |x: &mut u64, by: u64| *x = if add { *x + by } else { x.saturating_sub(by) };
        for t in alloc.tasks.iter() {
            let before = self.before[t.node.index()];
            if !before.ok {
                // A node of a model the job does not allow holds none of its tasks, whatever
                // is freed there.
                continue;
            }
            let scratch = freed.slot(t.node, |mut gpus| {
                gpus.extend(state.gpu_free(t.node).iter().map(|f| u32::from(*f)));
                Scratch {
                    gpus,
                    units: before.units,
                    cpu: state.cpu_free(t.node),
                    mem: state.mem_free(t.node),
                    held: before.held,
                }
            });
            for g in &t.gpus {
                if let Some(f) = scratch.gpus.get_mut(*g as usize) {
                    let old = *f;
                    *f = if add {
                        old + task.gpu_milli
                    } else {
                        old.saturating_sub(task.gpu_milli)
                    };
                    scratch.units = self.units_changed(scratch.units, old, *f);
                }
            }
            step(&mut scratch.cpu, task.cpu_milli);
            step(&mut scratch.mem, task.mem_mib);
            let held = self.cap(scratch.units, scratch.cpu, scratch.mem);
            // `gained` is the sum over touched nodes of what they hold now minus before.
            let before = std::mem::replace(&mut scratch.held, held);
            freed.gained = (freed.gained + held).saturating_sub(before);
        }
    }

    /// What a GPU with free share `free` counts towards the job's GPU slots on its node:
    /// whether it is whole, for a task of whole GPUs; how many of the task's shares it holds,
    /// for a fractional task; nothing for a CPU-only task.
    fn units(&self, free: u32) -> u32 {
        if self.task.gpus == 0 {
            0
        } else if self.task.is_fractional() {
            free / self.task.gpu_milli
        } else {
            u32::from(free >= GPU_MILLI)
        }
    }

    /// A node's `units` once one of its GPUs goes from free share `old` to `new`. `units` is
    /// the sum of its GPUs' units, so it holds that GPU's old units: no underflow.
    fn units_changed(&self, units: u32, old: u32, new: u32) -> u32 {
        units - self.units(old) + self.units(new)
    }

    /// Whether the job may use `node` at all (GPU model for a GPU task, labels for any).
    fn node_ok(&self, state: &ClusterState, node: NodeId) -> bool {
        state.spec().node_allowed(self.mask, node, self.task.gpus)
    }

    /// The tasks a node of an allowed model holds given its GPU units (see `units`) and free
    /// CPU and memory, capped at the need: a task needs `task.gpus` whole GPUs, or one share.
    fn cap(&self, units: u32, cpu: u64, mem: u64) -> u64 {
        // Most nodes asked hold none of the tasks or all the job needs: told by products
        // first, and only the others divided (three divisions a node, for every node of the
        // cluster and every freeing, were the larger part of a count).
        let holds = |k: u64| {
            let gpu = if self.task.gpus == 0 {
                true
            } else if self.task.is_fractional() {
                k <= u64::from(units)
            } else {
                k * u64::from(self.task.gpus) <= u64::from(units)
            };
            let within = |free: u64, per: u64| k.checked_mul(per).is_some_and(|p| p <= free);
            gpu && within(cpu, self.task.cpu_milli) && within(mem, self.task.mem_mib)
        };
        if self.need == 0 || !holds(1) {
            return 0;
        }
        if holds(self.need) {
            return self.need;
        }
        let by = |free: u64, per: u64| free.checked_div(per).unwrap_or(u64::MAX);
        let gpu = if self.task.gpus == 0 {
            u64::MAX
        } else if self.task.is_fractional() {
            u64::from(units)
        } else {
            u64::from(units / self.task.gpus)
        };
        gpu.min(by(cpu, self.task.cpu_milli))
            .min(by(mem, self.task.mem_mib))
            .min(self.need)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::shortest_prefix;
    use super::*;
    use crate::cluster::FitStrategy;
    use crate::job::tests::job;
    use crate::policy::StrategyPlacer;
    use crate::policy::heuristic::Placer;
    use crate::policy::planner::Planner;
    use proptest::prelude::*;
    use std::cell::RefCell;
    use std::sync::Arc;

    /// A task shape: 0 = CPU-only, 1 = whole GPUs, 2 = a fractional GPU.
    fn task(kind: u8, gpus: u32, milli: u32, cpu: u64, mem: u64) -> TaskRequest {
        match kind {
            0 => TaskRequest::whole(0, cpu, mem),
            1 => TaskRequest::whole(gpus, cpu, mem),
            _ => TaskRequest {
                gpus: 1,
                gpu_milli: milli,
                cpu_milli: cpu,
                mem_mib: mem,
            },
        }
    }

    /// A node: model (0 V100, 1 T4, 2 CPU-only), GPUs, cores, memory in 16 GiB.
    pub(in crate::policy::modifier) type NodeShape = (u8, u32, u64, u64);
    /// A job: task kind (see `task`), GPUs, share, CPU, memory, tasks.
    pub(in crate::policy::modifier) type Shape = (u8, u32, u32, u64, u64, u32);

    fn shape() -> impl Strategy<Value = Shape> {
        (0u8..3, 1u32..=4, 1u32..1000, 0u64..=8, 0u64..=4, 1u32..=3)
            .prop_map(|(k, g, m, c, mem, t)| (k, g, m, c * 1000, mem * 8192, t))
    }

    /// A cluster of V100, T4 and CPU-only nodes, jobs placed first-fit until they stop
    /// fitting, a pending job (maybe restricted to one model) and a victim order.
    pub(in crate::policy::modifier) fn world()
    -> impl Strategy<Value = (Vec<NodeShape>, Vec<Shape>, Shape, u8, u64)> {
        (
            prop::collection::vec((0u8..3, 1u32..=8, 4u64..=32, 1u64..=8), 1..14),
            prop::collection::vec(shape(), 0..40),
            shape(),
            0u8..3,
            any::<u64>(),
        )
    }

    /// A placer that says it is not complete, so the searches ask it for every set.
    struct Asking(StrategyPlacer);

    impl Placer for Asking {
        fn name(&self) -> &str {
            "asking"
        }
        fn place(
            &mut self,
            planner: &mut Planner<'_>,
            job: &JobSpec,
        ) -> Option<Vec<crate::cluster::TaskPlacement>> {
            self.0.place(planner, job)
        }
    }

    /// Both paths of the searches: counting (a complete placer) and asking.
    pub(in crate::policy::modifier) fn placers(strategy: FitStrategy) -> [Box<dyn Placer>; 2] {
        [
            Box::new(StrategyPlacer::new("s", strategy)),
            Box::new(Asking(StrategyPlacer::new("s", strategy))),
        ]
    }

    pub(in crate::policy::modifier) struct Built {
        pub state: ClusterState,
        pub pending: JobSpec,
        pub victims: Vec<JobId>,
    }

    pub(in crate::policy::modifier) fn build(
        nodes: &[NodeShape],
        running: &[Shape],
        pending: Shape,
        allowed: u8,
        seed: u64,
    ) -> Built {
        let nodes: Vec<_> = nodes
            .iter()
            .map(|(m, g, cpu, mem)| {
                (
                    (*m < 2).then_some(u32::from(*m)),
                    *g,
                    cpu * 1000,
                    mem * 16384,
                )
            })
            .collect();
        let spec = crate::cluster::tests::v100_t4(&nodes, usize::MAX);
        let mut state = ClusterState::new(Arc::new(spec));
        let mut placed = Vec::new();
        for (i, (k, g, m, c, mem, t)) in running.iter().enumerate() {
            let mut j = job(&format!("r{i}"), 0, task(*k, *g, *m, *c, *mem));
            j.id = JobId(i as u32);
            j.tasks = *t;
            if let Some(tasks) = state.find_job_placement(&j, FitStrategy::FirstFit) {
                state.allocate(&j, tasks).unwrap();
                placed.push(j.id);
            }
        }
        let (k, g, m, c, mem, t) = pending;
        let mut p = job("x", 0, task(k, g, m, c, mem));
        p.id = JobId(running.len() as u32);
        p.tasks = t;
        p.gpu_types = match allowed {
            0 => Vec::new(),
            1 => vec!["V100".into()],
            _ => vec!["T4".into()],
        };
        // A victim order from the seed (Fisher-Yates on a small LCG).
        let mut x = seed | 1;
        for i in (1..placed.len()).rev() {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            placed.swap(i, (x >> 33) as usize % (i + 1));
        }
        Built {
            state,
            pending: p,
            victims: placed,
        }
    }

    proptest! {
        /// Room's count is exact for the index-backed strategies: for every prefix of the
        /// victims, it admits the job exactly when the strategy places it with them freed.
        #[test]
        fn room_is_exact_for_greedy_strategies(
            (nodes, running, pending, allowed, seed) in world()
        ) {
            let b = build(&nodes, &running, pending, allowed, seed);
            let room = Room::new(&b.state, &b.pending);
            let cell = RefCell::new(b.state);
            for k in 0..=b.victims.len() {
                let admits = room.admits_after(&cell.borrow(), &b.victims[..k]);
                let mut planner = Planner::new(cell.borrow_mut());
                for v in &b.victims[..k] {
                    planner.free_running(*v);
                }
                for strategy in [FitStrategy::FirstFit, FitStrategy::BestFit, FitStrategy::WorstFit] {
                    let mark = planner.mark();
                    let fits = planner.place(&b.pending, strategy).is_some();
                    planner.undo_to(mark);
                    prop_assert_eq!(admits, fits, "prefix {} {:?}", k, strategy);
                }
            }
        }

        /// The single-victim sums give what freeing the victim through the scratch gives, for
        /// every running job (tasks on one node or several) and every pending shape.
        #[test]
        fn single_victims_are_counted_as_through_the_scratch(
            (nodes, running, pending, allowed, seed) in world()
        ) {
            let b = build(&nodes, &running, pending, allowed, seed);
            let room = Room::new(&b.state, &b.pending);
            for v in &b.victims {
                prop_assert_eq!(
                    room.admits_after(&b.state, &[*v]),
                    room.admits_freeing(&b.state, &[*v]),
                    "victim {:?}", v
                );
            }
        }

        /// A node whose jobs cannot make room by `node_may_make_room` has no prefix of its
        /// jobs (those with no task elsewhere, in any order) that makes room.
        #[test]
        fn a_node_ruled_out_has_no_set_that_makes_room(
            (nodes, running, pending, allowed, seed) in world()
        ) {
            let b = build(&nodes, &running, pending, allowed, seed);
            let room = Room::new(&b.state, &b.pending);
            for node in b.state.spec().node_ids() {
                let alone: Vec<JobId> = b
                    .victims
                    .iter()
                    .copied()
                    .filter(|v| {
                        b.state
                            .allocation(*v)
                            .is_some_and(|a| a.tasks.iter().all(|t| t.node == node))
                    })
                    .collect();
                if !room.node_may_make_room(&b.state, node) {
                    prop_assert_eq!(room.first_prefix(&b.state, &alone), None, "{:?}", node);
                }
            }
        }

        /// The search with `Room` returns what freeing and asking the placer after every
        /// victim returned.
        #[test]
        fn prefix_search_matches_asking_after_every_victim(
            (nodes, running, pending, allowed, seed) in world()
        ) {
            let b = build(&nodes, &running, pending, allowed, seed);
            let room = Room::new(&b.state, &b.pending);
            let cell = RefCell::new(b.state);
            let mut planner = Planner::new(cell.borrow_mut());
            for mut placer in placers(FitStrategy::BestFit) {
            let placer = placer.as_mut();
            let start = planner.mark();
            let naive = {
                let mark = planner.mark();
                let mut found = None;
                for (i, v) in b.victims.iter().enumerate() {
                    planner.free_running(*v);
                    let m = planner.mark();
                    if placer.place(&mut planner, &b.pending).is_some() {
                        found = Some(i + 1);
                        break;
                    }
                    planner.undo_to(m);
                }
                planner.undo_to(mark);
                found
            };
            let fast = shortest_prefix(&mut planner, placer, &room, &b.pending, &b.victims);
            prop_assert_eq!(fast, naive, "complete: {}", placer.complete());
            prop_assert_eq!(planner.mark(), start);
            }
        }

        /// `prune` (free the set once, take each victim back in turn) keeps exactly the
        /// victims that freeing each set without one from scratch would keep.
        #[test]
        fn pruning_matches_freeing_each_set_from_scratch(
            (nodes, running, pending, allowed, seed) in world()
        ) {
            let b = build(&nodes, &running, pending, allowed, seed);
            let before = b.state.clone();
            let cell = RefCell::new(b.state);
            let mut planner = Planner::new(cell.borrow_mut());
            for mut placer in placers(FitStrategy::FirstFit) {
            let placer = placer.as_mut();
            let mut naive = b.victims.clone();
            for i in (0..naive.len()).rev() {
                let mut without = naive.clone();
                without.remove(i);
                let mark = planner.mark();
                for v in &without {
                    planner.free_running(*v);
                }
                if placer.place(&mut planner, &b.pending).is_some() {
                    naive = without;
                }
                planner.undo_to(mark);
            }
            let room = Room::new(planner.state(), &b.pending);
            let fast = super::super::preempt::prune(
                &mut planner,
                placer,
                &room,
                &b.pending,
                b.victims.clone(),
            );
            prop_assert_eq!(fast, naive, "complete: {}", placer.complete());
            }
            drop(planner);
            let after = cell.into_inner();
            prop_assert!(after.check_invariants().is_ok());
            for n in after.spec().node_ids() {
                prop_assert_eq!(after.gpu_free(n), before.gpu_free(n));
                prop_assert_eq!(after.cpu_free(n), before.cpu_free(n));
            }
        }
    }
}
