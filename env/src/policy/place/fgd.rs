//! `fgd`: Fragmentation Gradient Descent (Weng et al., "Beware of Fragmentation", ATC'23):
//! each task goes to the node, and GPU, where the expected fragmentation under the workload's
//! task mix grows least, `Δ = F_n(after) − F_n(before)` (`metrics::TaskMix`).
//!
//! The mix is learned online, from the jobs the scheduler has seen arrive (pending or running
//! at some decision), never from the trace's future.

use super::{NodeView, place_task_by_task};
use crate::cluster::{ClusterState, NodeMask, TaskPlacement};
use crate::job::{JobSpec, TaskRequest};
use crate::metrics::{MixCounts, TaskMix};
use crate::policy::{DecisionContext, Placer, Planner};
use crate::units::{GPU_MILLI, JobId, NodeId};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};

/// Which GPUs of a node an option uses (materialized only for the chosen node).
#[derive(Debug, Clone, Copy)]
enum Pick {
    /// A CPU-only task: none.
    NoGpu,
    /// A share of this GPU.
    Share(u8),
    /// The node's lowest idle GPUs, as many as the task asks.
    Whole,
}

impl Pick {
    fn gpus(self, node: &NodeView<'_>, task: &TaskRequest) -> Vec<u8> {
        match self {
            Pick::NoGpu => Vec::new(),
            Pick::Share(g) => vec![g],
            Pick::Whole => idle_gpus(node.gpu_free).take(task.gpus as usize).collect(),
        }
    }
}

/// The node's idle GPUs, lowest first.
fn idle_gpus(gpu_free: &[u16]) -> impl Iterator<Item = u8> + '_ {
    (0..gpu_free.len())
        .filter(|g| u32::from(gpu_free[*g]) == GPU_MILLI)
        .map(|g| g as u8)
}

/// `fgd_node_choice` without building the GPU list: the change and which option.
fn fgd_node_delta(mix: &TaskMix, node: &NodeView<'_>, task: &TaskRequest) -> Option<(f64, Pick)> {
    if node.cpu_free < task.cpu_milli || node.mem_free < task.mem_mib {
        return None;
    }
    let (cpu, mem) = (node.cpu_free - task.cpu_milli, node.mem_free - task.mem_mib);
    let before = mix.fragment(node.gpu_free, node.cpu_free, node.mem_free);
    // The node's free shares, changed in place for each option and restored (on the stack:
    // a node has at most MAX_GPUS_PER_NODE GPUs; a longer list is copied to the heap).
    let mut stack = [0u16; crate::cluster::MAX_GPUS_PER_NODE as usize];
    let mut heap = Vec::new();
    let free: &mut [u16] = match stack.get_mut(..node.gpu_free.len()) {
        Some(f) => f,
        None => {
            heap.resize(node.gpu_free.len(), 0);
            &mut heap
        }
    };
    free.copy_from_slice(node.gpu_free);
    let mut delta_of = |gpus: &mut dyn Iterator<Item = u8>| {
        let mut used = [0u8; crate::cluster::MAX_GPUS_PER_NODE as usize];
        let mut n = 0;
        for g in gpus {
            free[g as usize] -= task.gpu_milli as u16;
            used[n] = g;
            n += 1;
        }
        let delta = mix.fragment(free, cpu, mem) - before;
        for g in &used[..n] {
            free[*g as usize] += task.gpu_milli as u16;
        }
        delta
    };
    if task.gpus == 0 {
        return Some((delta_of(&mut std::iter::empty()), Pick::NoGpu));
    }
    if !task.is_fractional() {
        if idle_gpus(node.gpu_free).count() < task.gpus as usize {
            return None;
        }
        let mut idle = idle_gpus(node.gpu_free).take(task.gpus as usize);
        return Some((delta_of(&mut idle), Pick::Whole));
    }
    // One option per distinct free share that holds the task (equal GPUs score alike), the
    // first GPU of each; the least change wins, ties to the first.
    let mut best: Option<(f64, Pick)> = None;
    for (g, f) in node.gpu_free.iter().enumerate() {
        if u32::from(*f) < task.gpu_milli || node.gpu_free[..g].contains(f) {
            continue;
        }
        let delta = delta_of(&mut std::iter::once(g as u8));
        if best.as_ref().is_none_or(|(b, _)| delta < *b) {
            best = Some((delta, Pick::Share(g as u8)));
        }
    }
    best
}

/// The best way to put `task` on one node: the GPUs to use and the fragmentation change
/// `Δ` (milli-GPU) under `mix`, the least over the node's options; `None` if it does not fit.
/// A share considers each GPU that holds it (one per distinct free share: equal GPUs score
/// alike); whole GPUs are interchangeable, so the lowest idle ones are taken.
pub fn fgd_node_choice(
    mix: &TaskMix,
    node: &NodeView<'_>,
    task: &TaskRequest,
) -> Option<(f64, Vec<u8>)> {
    fgd_node_delta(mix, node, task).map(|(delta, pick)| (delta, pick.gpus(node, task)))
}

/// The node and GPUs for one task with the least fragmentation change under `mix`, among the
/// nodes that fit it (ties: the lowest node id), and that change.
pub fn fgd_choice(
    mix: &TaskMix,
    state: &ClusterState,
    task: &TaskRequest,
    mask: NodeMask,
) -> Option<(f64, TaskPlacement)> {
    least_delta(state, task, mask, |node| fgd_node_delta(mix, node, task))
}

/// The node among those that fit `task` (within `mask`) whose `delta` is least (ties: the
/// lowest node id), with the GPUs its pick takes and that delta.
fn least_delta(
    state: &ClusterState,
    task: &TaskRequest,
    mask: NodeMask,
    mut delta: impl FnMut(&NodeView<'_>) -> Option<(f64, Pick)>,
) -> Option<(f64, TaskPlacement)> {
    let mut best: Option<(f64, NodeId, Pick)> = None;
    for node in state.nodes_fitting(task, mask) {
        let Some((d, pick)) = delta(&NodeView::of(state, node)) else {
            continue;
        };
        if best.as_ref().is_none_or(|(b, _, _)| d < *b) {
            best = Some((d, node, pick));
        }
    }
    best.map(|(d, node, pick)| {
        let gpus = pick.gpus(&NodeView::of(state, node), task);
        (d, TaskPlacement { node, gpus })
    })
}

/// Entries a memo holds before it starts afresh (each a node state, a task shape and FGD's
/// answer: about 100 bytes).
const MEMO_LIMIT: usize = 1 << 16;

/// FGD's answer for one node, remembered by everything that decides it: the node's free
/// shares, CPU and memory, and the task (under one task mix). Nodes in the same state share
/// an entry, and a node that has not changed since it was last scored is not scored again.
/// The answer is a pure function of the key, so a remembered one is exactly what scoring
/// would give. Cleared with the mix; starts afresh past `MEMO_LIMIT` entries.
#[derive(Debug, Default)]
pub struct FgdMemo {
    /// By a hash of the key; each entry keeps its whole key, so a collision is only a miss.
    buckets: HashMap<u64, Vec<MemoEntry>, foldhash::fast::FixedState>,
    entries: usize,
}

#[derive(Debug)]
struct MemoEntry {
    gpu_free: Box<[u16]>,
    cpu_free: u64,
    mem_free: u64,
    task: TaskRequest,
    answer: Option<(f64, Pick)>,
}

impl FgdMemo {
    /// Forgets every answer (the mix changed).
    pub fn clear(&mut self) {
        self.buckets.clear();
        self.entries = 0;
    }

    /// `fgd_node_delta`, remembered.
    fn delta(
        &mut self,
        mix: &TaskMix,
        node: &NodeView<'_>,
        task: &TaskRequest,
    ) -> Option<(f64, Pick)> {
        let key = {
            let mut h = foldhash::fast::FixedState::default().build_hasher();
            node.gpu_free.hash(&mut h);
            (node.cpu_free, node.mem_free, task).hash(&mut h);
            h.finish()
        };
        let same = |e: &MemoEntry| {
            *e.gpu_free == *node.gpu_free
                && e.cpu_free == node.cpu_free
                && e.mem_free == node.mem_free
                && e.task == *task
        };
        if let Some(e) = self
            .buckets
            .get(&key)
            .and_then(|b| b.iter().find(|e| same(e)))
        {
            return e.answer;
        }
        let answer = fgd_node_delta(mix, node, task);
        if self.entries >= MEMO_LIMIT {
            self.clear();
        }
        self.buckets.entry(key).or_default().push(MemoEntry {
            gpu_free: node.gpu_free.into(),
            cpu_free: node.cpu_free,
            mem_free: node.mem_free,
            task: *task,
            answer,
        });
        self.entries += 1;
        answer
    }
}

/// `fgd_choice` with each node's answer taken from `memo` where it has one: the same choice.
pub fn fgd_choice_memo(
    mix: &TaskMix,
    memo: &mut FgdMemo,
    state: &ClusterState,
    task: &TaskRequest,
    mask: NodeMask,
) -> Option<(f64, TaskPlacement)> {
    least_delta(state, task, mask, |node| memo.delta(mix, node, task))
}

/// FGD with its task mix built from the jobs seen so far.
#[derive(Debug, Default)]
pub struct Fgd {
    /// `seen[id.index()]`: the job is already counted in the mix (ids are dense trace
    /// indices; a bitmap, as `observe` runs over the queue at every decision).
    seen: Vec<bool>,
    /// Every job below this id is in `seen`: `observe` looks at the queue from here on.
    seen_below: u32,
    counts: MixCounts,
    mix: Option<TaskMix>,
    /// Node answers under `mix` (cleared with it).
    memo: FgdMemo,
}

/// A copy with the same mix; its memo of answers (a cache) starts afresh.
impl Clone for Fgd {
    fn clone(&self) -> Self {
        Fgd {
            seen: self.seen.clone(),
            seen_below: self.seen_below,
            counts: self.counts.clone(),
            mix: self.mix.clone(),
            memo: FgdMemo::default(),
        }
    }
}

impl Fgd {
    /// Counts a job in the mix the first time it is seen.
    fn see(&mut self, job: JobId, task: &TaskRequest, tasks: u32) {
        let i = job.index();
        if i >= self.seen.len() {
            self.seen.resize(i + 1, false);
        }
        if !std::mem::replace(&mut self.seen[i], true) {
            self.counts.add(task, tasks);
            if task.gpus > 0 {
                self.mix = None;
                self.memo.clear();
            }
        }
    }
}

#[cfg(test)]
impl Fgd {
    fn mix(&mut self) -> &TaskMix {
        self.mix.get_or_insert_with(|| self.counts.mix())
    }
}

impl Placer for Fgd {
    fn name(&self) -> &str {
        "fgd"
    }
    /// Counts the jobs pending or running now that it has not seen before.
    fn observe(&mut self, ctx: &DecisionContext<'_>) {
        for p in ctx.pending_from(JobId(self.seen_below)) {
            self.see(p.spec.id, &p.spec.task, p.spec.tasks);
        }
        for a in ctx.cluster().running() {
            self.see(a.job, &a.task, a.tasks.len() as u32);
        }
        self.seen_below = crate::policy::seen_below(&self.seen, self.seen_below);
    }
    fn place(&mut self, planner: &mut Planner<'_>, job: &JobSpec) -> Option<Vec<TaskPlacement>> {
        self.see(job.id, &job.task, job.tasks);
        let counts = &self.counts;
        let mix = self.mix.get_or_insert_with(|| counts.mix());
        let memo = &mut self.memo;
        place_task_by_task(planner, job, |state, mask, _| {
            fgd_choice_memo(mix, memo, state, &job.task, mask).map(|(_, t)| t)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::tests::job;
    use crate::policy::place::test_util::{cluster, share, view};
    use crate::units::NodeId;
    use proptest::prelude::*;
    use std::cell::RefCell;

    /// A mix of the given (task, count) classes.
    fn mix_of(classes: &[(TaskRequest, u32)]) -> TaskMix {
        let mut c = MixCounts::default();
        for (t, n) in classes {
            c.add(t, *n);
        }
        c.mix()
    }

    #[test]
    fn node_choice_follows_the_definition() {
        // Mix: half 1-GPU tasks, half 500 shares (1 core, 1 GiB each). Node of 4 GPUs.
        let mix = mix_of(&[(TaskRequest::whole(1, 1000, 1024), 1), (share(500), 1)]);
        // GPUs free [1000, 1000, 600, 1000]. Before: whole tasks can't use 600 (fragment 600),
        // shares can: 0.5 * 600 + 0.5 * 0 = 300.
        // A 500 share on GPU 2 leaves 100: whole 100, share 100 -> 100. Δ = -200.
        // On GPU 0 it leaves [500, 1000, 600, 1000]: whole 1100, share 0 -> 550. Δ = +250.
        // GPUs 1 and 3 equal GPU 0 (not scored again). Best: GPU 2, Δ = -200.
        let gpus = [1000, 1000, 600, 1000];
        let (delta, pick) = fgd_node_choice(&mix, &view(&gpus, 8000, 32_768), &share(500)).unwrap();
        assert_eq!(pick, vec![2]);
        assert!((delta + 200.0).abs() < 1e-9, "{delta}");
        // A whole GPU: the first idle one, leaving [0, 1000, 600, 1000]: still 300. Δ = 0.
        let w = TaskRequest::whole(1, 1000, 1024);
        let (delta, pick) = fgd_node_choice(&mix, &view(&gpus, 8000, 32_768), &w).unwrap();
        assert_eq!((pick, delta), (vec![0], 0.0));
        // Taking the last core: nothing fits after, so all 3600 - 500 = 3100 left free is
        // fragment, whichever GPU: Δ = 3100 - 300 = 2800.
        let (delta, _) = fgd_node_choice(&mix, &view(&gpus, 1000, 32_768), &share(500)).unwrap();
        assert!((delta - 2800.0).abs() < 1e-9, "{delta}");
        // Does not fit: None.
        assert!(fgd_node_choice(&mix, &view(&gpus, 500, 32_768), &share(500)).is_none());
    }

    #[test]
    fn picks_the_node_that_fragments_least() {
        // Mix: only 2-GPU tasks. Node 0 has 2 idle GPUs, node 1 has 3. A 1-GPU task:
        // on node 0 it leaves 1 idle GPU, where no 2-GPU task fits: fragment 0 -> 1000,
        // Δ = +1000. On node 1 it leaves 2 idle: still fits, Δ = 0. FGD takes node 1, where
        // best fit would take node 0.
        let mix = mix_of(&[(TaskRequest::whole(2, 0, 0), 1)]);
        let s = cluster(
            2,
            &[
                (0, TaskRequest::whole(2, 0, 0), vec![0, 1]),
                (1, TaskRequest::whole(1, 0, 0), vec![0]),
            ],
        );
        let one = TaskRequest::whole(1, 0, 0);
        let (delta, t) = fgd_choice(&mix, &s, &one, NodeMask::ANY).unwrap();
        assert_eq!((t.node, t.gpus, delta), (NodeId(1), vec![1], 0.0));
        // Through the placer, having seen five 2-GPU tasks and now this job: mix 5/6 2-GPU,
        // 1/6 1-GPU. Node 0: Δ = 5/6 * 1000; node 1: Δ = 0. Node 1 again.
        let cell = RefCell::new(s);
        let mut planner = Planner::new(cell.borrow_mut());
        let mut fgd = Fgd::default();
        fgd.see(JobId(100), &TaskRequest::whole(2, 0, 0), 5);
        let mut j = job("j", 0, one);
        j.id = JobId(101);
        assert_eq!(fgd.place(&mut planner, &j).unwrap()[0].node, NodeId(1));
    }

    /// Allocates a random small world: tasks drawn from the proptests' shapes onto nodes
    /// picked among those that fit.
    fn random_state(nodes: usize, picks: &[(u8, u8)]) -> ClusterState {
        let shapes = task_shapes();
        let mut s = cluster(nodes, &[]);
        for (i, (shape, pick)) in picks.iter().enumerate() {
            let task = shapes[*shape as usize % shapes.len()];
            let fits: Vec<NodeId> = s.nodes_fitting(&task, NodeMask::ANY).collect();
            if fits.is_empty() {
                continue;
            }
            let node = fits[*pick as usize % fits.len()];
            let t = s
                .fit_task_on(
                    &task,
                    NodeMask::ANY,
                    node,
                    crate::cluster::FitStrategy::WorstFit,
                )
                .expect("node fits");
            let mut j = job("r", 0, task);
            j.id = JobId(i as u32);
            s.allocate(&j, vec![t]).expect("fits");
        }
        s
    }

    /// The proptests' task shapes: whole GPUs, shares, a 3-GPU task, a CPU-only task.
    fn task_shapes() -> [TaskRequest; 7] {
        [
            TaskRequest::whole(1, 1000, 2048),
            TaskRequest::whole(2, 2000, 4096),
            share(250),
            share(500),
            share(750),
            TaskRequest::whole(3, 0, 0),
            TaskRequest::whole(0, 3000, 8192),
        ]
    }

    proptest! {
        /// FGD's choice is the least Δ over every node and GPU that fits, measured on the real
        /// state after placing: so it never increases fragmentation when some option does not.
        #[test]
        fn never_worse_than_any_option(
            nodes in 1usize..4,
            picks in prop::collection::vec((0u8..6, 0u8..8), 0..14),
            mix_counts in prop::collection::vec(0u32..4, 7),
            task_shape in 0u8..7,
        ) {
            let s = random_state(nodes, &picks);
            let shapes = task_shapes();
            let mix = mix_of(&shapes.iter().copied().zip(mix_counts).collect::<Vec<_>>());
            let task = shapes[task_shape as usize];
            // Every option (node, set of its 4 GPUs of the task's size), by brute force on a
            // copy of the state.
            let mut deltas = Vec::new();
            for node in s.spec().node_ids() {
                for set in 0u8..16 {
                    if set.count_ones() != task.gpus {
                        continue;
                    }
                    let gpus: Vec<u8> = (0..4u8).filter(|g| set & (1 << g) != 0).collect();
                    let mut c = s.clone();
                    let mut j = job("o", 0, task);
                    j.id = JobId(9999);
                    let before = mix.node_fragment(&c, node);
                    if c.allocate(&j, vec![TaskPlacement { node, gpus }]).is_ok() {
                        deltas.push(mix.node_fragment(&c, node) - before);
                    }
                }
            }
            let chosen = fgd_choice(&mix, &s, &task, NodeMask::ANY);
            prop_assert_eq!(chosen.is_some(), !deltas.is_empty());
            if let Some((delta, t)) = chosen {
                let mut c = s.clone();
                let before = mix.node_fragment(&c, t.node);
                let mut j = job("o", 0, task);
                j.id = JobId(9999);
                c.allocate(&j, vec![t.clone()]).expect("FGD's choice fits");
                let measured = mix.node_fragment(&c, t.node) - before;
                prop_assert!((measured - delta).abs() < 1e-6);
                let least = deltas.iter().copied().fold(f64::INFINITY, f64::min);
                prop_assert!(measured <= least + 1e-6, "chose {} but {} exists", measured, least);
                if least <= 0.0 {
                    prop_assert!(measured <= 1e-6);
                }
            }
        }
    }

    proptest! {
        /// The memo gives exactly the choice scoring every node gives, whatever it remembers
        /// from earlier states and tasks (and past its limit).
        #[test]
        fn the_memo_chooses_exactly_as_scoring_every_node(
            nodes in 1usize..5,
            steps in prop::collection::vec(
                (prop::collection::vec((0u8..6, 0u8..8), 0..10), 0u8..7),
                1..6,
            ),
            mix_counts in prop::collection::vec(0u32..4, 7),
        ) {
            let shapes = task_shapes();
            let mix = mix_of(&shapes.iter().copied().zip(mix_counts).collect::<Vec<_>>());
            let mut memo = FgdMemo::default();
            for (picks, shape) in &steps {
                let s = random_state(nodes, picks);
                let task = shapes[*shape as usize];
                for mask in [NodeMask::ANY, NodeMask { models: 1, classes: u64::MAX }] {
                    let plain = fgd_choice(&mix, &s, &task, mask);
                    let remembered = fgd_choice_memo(&mix, &mut memo, &s, &task, mask);
                    prop_assert_eq!(&plain, &remembered);
                    // Asked again, from the memo alone.
                    let again = fgd_choice_memo(&mix, &mut memo, &s, &task, mask);
                    prop_assert_eq!(&plain, &again);
                }
            }
            prop_assert!(memo.entries <= MEMO_LIMIT);
        }
    }

    #[test]
    fn the_memo_starts_afresh_past_its_limit() {
        let mix = mix_of(&[(share(500), 1)]);
        let mut memo = FgdMemo::default();
        let gpus = [1000u16, 1000, 600, 1000];
        for cpu in 0..(MEMO_LIMIT as u64 + 10) {
            let v = view(&gpus, 1000 + cpu, 32_768);
            let want = fgd_node_choice(&mix, &v, &share(500)).map(|(d, _)| d);
            let got = memo.delta(&mix, &v, &share(500)).map(|(d, _)| d);
            assert_eq!(want, got);
        }
        assert_eq!(memo.entries, 10);
    }

    #[test]
    fn the_mix_is_learned_from_jobs_seen_only() {
        let mut fgd = Fgd::default();
        assert!(fgd.mix().is_empty());
        fgd.see(JobId(0), &share(500), 1);
        fgd.see(JobId(0), &share(500), 1);
        fgd.see(JobId(1), &TaskRequest::whole(0, 1000, 0), 1);
        assert_eq!(fgd.mix(), &mix_of(&[(share(500), 1)]));
    }
}
