//! Indexes over free capacity, so that finding a node for a task costs O(log n), not a scan.
//!
//! Two structures, both updated on every change of a node's free capacity:
//! - a max segment tree over node ids (free whole GPUs, largest free GPU share, free CPU and
//!   memory, GPU model bits) answering "leftmost node with id >= k that fits" (first-fit);
//! - per GPU model, an ordered set keyed by (free GPU milli, free CPU, node), walked upwards for
//!   best-fit and downwards for worst-fit; and one over all nodes keyed by (free CPU, free
//!   memory, node) for CPU-only tasks.
//!
//! Owns no capacity itself: `ClusterState` tells it each node's new `NodeKey`.

use crate::units::NodeId;
use std::collections::BTreeSet;
use std::sync::OnceLock;

/// A node's free capacity as the indexes see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct NodeKey {
    /// GPUs with all 1000 milli free.
    pub whole: u32,
    /// Largest free share on any one GPU, milli.
    pub max_milli: u32,
    /// Free milli-GPU summed over the node's GPUs.
    pub total_milli: u32,
    pub cpu: u64,
    pub mem: u64,
    /// `1 << model` for a GPU node, 0 for a CPU-only node.
    pub model_bit: u64,
    /// `1 << label class` (every node has one; `ClusterSpec::node_class`).
    pub class_bit: u64,
}

/// What a task needs, in the indexes' terms.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Need {
    pub gpus: u32,
    pub milli: u32,
    pub cpu: u64,
    pub mem: u64,
    /// Allowed GPU models (ignored for CPU-only tasks).
    pub mask: u64,
    /// Allowed label classes (every task).
    pub classes: u64,
}

impl Need {
    /// Whether capacity described by `k` (a node, or the maxima of a subtree) can hold the task.
    /// For a subtree this is a necessary condition only; for a leaf it is exact.
    pub fn admits(&self, k: &NodeKey) -> bool {
        if k.cpu < self.cpu || k.mem < self.mem || k.class_bit & self.classes == 0 {
            return false;
        }
        if self.gpus == 0 {
            return true;
        }
        if k.model_bit & self.mask == 0 {
            return false;
        }
        if self.milli < crate::units::GPU_MILLI {
            k.max_milli >= self.milli
        } else {
            k.whole >= self.gpus
        }
    }
}

fn combine(a: &NodeKey, b: &NodeKey) -> NodeKey {
    NodeKey {
        whole: a.whole.max(b.whole),
        max_milli: a.max_milli.max(b.max_milli),
        total_milli: a.total_milli.max(b.total_milli),
        cpu: a.cpu.max(b.cpu),
        mem: a.mem.max(b.mem),
        model_bit: a.model_bit | b.model_bit,
        class_bit: a.class_bit | b.class_bit,
    }
}

#[derive(Debug, Clone)]
pub(crate) struct FreeIndex {
    /// Leaves at `size..size + n`; node `i` at `size + i`.
    tree: Vec<NodeKey>,
    size: usize,
    keys: Vec<NodeKey>,
    /// Per model: (free GPU milli, free CPU, node), packed into one `u128` (`packed`) that
    /// orders exactly as the tuple would: one integer comparison per step of a B-tree search
    /// instead of up to three (the sets are updated on every allocation and release).
    by_model: Vec<BTreeSet<u128>>,
    /// All nodes: (free CPU, free memory, node). Only CPU-only tasks ask for this order, so
    /// it is built on their first query and kept up to date from then on; a cluster that only
    /// ever sees GPU tasks never pays for it (half the B-tree work of every release and
    /// allocation, on the service's 1,000-node snapshots).
    by_cpu: OnceLock<BTreeSet<(u64, u64, NodeId)>>,
}

impl FreeIndex {
    pub fn new(keys: Vec<NodeKey>, models: usize) -> FreeIndex {
        let size = keys.len().next_power_of_two().max(1);
        let mut tree = vec![NodeKey::default(); 2 * size];
        tree[size..size + keys.len()].copy_from_slice(&keys);
        for i in (1..size).rev() {
            tree[i] = combine(&tree[2 * i], &tree[2 * i + 1]);
        }
        // Collected, so each set is built in bulk from a sorted run rather than by one
        // insertion per node (a third of a 1,000-node world's build went to those inserts).
        let ids = || keys.iter().enumerate().map(|(i, k)| (NodeId(i as u32), k));
        let mut per_model: Vec<Vec<u128>> = vec![Vec::new(); models];
        for (id, k) in ids() {
            if let Some(m) = model_of(k) {
                per_model[m].push(packed(k.total_milli, k.cpu, id));
            }
        }
        let by_model = per_model.into_iter().map(BTreeSet::from_iter).collect();
        FreeIndex {
            tree,
            size,
            keys,
            by_model,
            by_cpu: OnceLock::new(),
        }
    }

    /// The CPU-only order, built now if no query asked for it before.
    fn by_cpu(&self) -> &BTreeSet<(u64, u64, NodeId)> {
        self.by_cpu.get_or_init(|| {
            self.keys
                .iter()
                .enumerate()
                .map(|(i, k)| (k.cpu, k.mem, NodeId(i as u32)))
                .collect()
        })
    }

    pub fn key(&self, node: NodeId) -> &NodeKey {
        &self.keys[node.index()]
    }

    pub fn update(&mut self, node: NodeId, new: NodeKey) {
        let old = std::mem::replace(&mut self.keys[node.index()], new);
        if old == new {
            return;
        }
        if let Some(m) = model_of(&old)
            && (old.total_milli, old.cpu) != (new.total_milli, new.cpu)
        {
            self.by_model[m].remove(&packed(old.total_milli, old.cpu, node));
            self.by_model[m].insert(packed(new.total_milli, new.cpu, node));
        }
        if let Some(by_cpu) = self.by_cpu.get_mut() {
            by_cpu.remove(&(old.cpu, old.mem, node));
            by_cpu.insert((new.cpu, new.mem, node));
        }
        let mut i = self.size + node.index();
        self.tree[i] = new;
        while i > 1 {
            i /= 2;
            let above = combine(&self.tree[2 * i], &self.tree[2 * i + 1]);
            // Every position above depends on this one only through its value: unchanged
            // here, unchanged up to the root (on a busy cluster most updates stop within a
            // few levels, the larger maxima held by other nodes).
            if self.tree[i] == above {
                break;
            }
            self.tree[i] = above;
        }
    }

    /// Every node that admits `need`, in id order: the nodes repeated `first_fit` calls would
    /// give, in one walk of the tree (each call would descend from the root again).
    pub fn fitting(&self, need: Need) -> impl Iterator<Item = NodeId> + '_ {
        // Tree positions still to visit, leftmost on top.
        let mut stack: Vec<usize> =
            Vec::with_capacity(2 * (self.size.trailing_zeros() as usize + 1));
        if !self.keys.is_empty() {
            stack.push(1);
        }
        std::iter::from_fn(move || {
            while let Some(at) = stack.pop() {
                if !need.admits(&self.tree[at]) {
                    continue;
                }
                if at >= self.size {
                    let leaf = at - self.size;
                    if leaf < self.keys.len() {
                        return Some(NodeId(leaf as u32));
                    }
                    continue;
                }
                stack.push(2 * at + 1);
                stack.push(2 * at);
            }
            None
        })
    }

    /// The leftmost node with id >= `from` that admits `need` (first-fit).
    pub fn first_fit(&self, need: &Need, from: usize) -> Option<NodeId> {
        if from >= self.keys.len() {
            return None;
        }
        self.leftmost(1, 0, self.size, need, from)
            .map(|i| NodeId(i as u32))
    }

    fn leftmost(&self, at: usize, lo: usize, hi: usize, need: &Need, from: usize) -> Option<usize> {
        if hi <= from || !need.admits(&self.tree[at]) {
            return None;
        }
        if hi - lo == 1 {
            return (lo < self.keys.len()).then_some(lo);
        }
        let mid = (lo + hi) / 2;
        self.leftmost(2 * at, lo, mid, need, from)
            .or_else(|| self.leftmost(2 * at + 1, mid, hi, need, from))
    }

    /// Nodes in best-fit order (least free GPU, then least free CPU, then id) that might hold
    /// `need`, starting at the first with enough free GPU in total. For a CPU-only task, nodes
    /// in order of least free CPU, then memory. Callers check each candidate exactly.
    pub fn ascending<'a>(&'a self, need: &'a Need) -> Box<dyn Iterator<Item = NodeId> + 'a> {
        if need.gpus == 0 {
            let it = self
                .by_cpu()
                .range((need.cpu, need.mem, NodeId(0))..)
                .map(|k| k.2);
            return Box::new(it.filter(move |n| need.admits(&self.keys[n.index()])));
        }
        let total = need.gpus * need.milli;
        let mut sets: Vec<_> = self
            .models_in(need.mask)
            .map(|m| {
                self.by_model[m]
                    .range(packed(total, 0, NodeId(0))..)
                    .peekable()
            })
            .collect();
        let it = std::iter::from_fn(move || {
            // Merge the per-model runs, smallest key first.
            let (best, _) = sets
                .iter_mut()
                .enumerate()
                .filter_map(|(i, s)| s.peek().map(|k| (i, *k)))
                .min_by_key(|(_, k)| *k)?;
            sets[best].next().map(|k| node_of(*k))
        });
        Box::new(it.filter(move |n| need.admits(&self.keys[n.index()])))
    }

    /// Nodes in worst-fit order (most free GPU, then most free CPU, then highest id); CPU-only
    /// tasks by most free CPU. Callers check each candidate exactly.
    pub fn descending<'a>(&'a self, need: &'a Need) -> Box<dyn Iterator<Item = NodeId> + 'a> {
        if need.gpus == 0 {
            let it = self.by_cpu().iter().rev().map(|k| k.2);
            return Box::new(it.filter(move |n| need.admits(&self.keys[n.index()])));
        }
        let mut sets: Vec<_> = self
            .models_in(need.mask)
            .map(|m| self.by_model[m].iter().rev().peekable())
            .collect();
        let it = std::iter::from_fn(move || {
            let (best, _) = sets
                .iter_mut()
                .enumerate()
                .filter_map(|(i, s)| s.peek().map(|k| (i, **k)))
                .max_by_key(|(_, k)| *k)?;
            sets[best].next().map(|k| node_of(*k))
        });
        Box::new(it.filter(move |n| need.admits(&self.keys[n.index()])))
    }

    fn models_in(&self, mask: u64) -> impl Iterator<Item = usize> + '_ {
        (0..self.by_model.len()).filter(move |m| mask & (1u64 << m) != 0)
    }

    /// Rebuilds from `keys` and compares, for invariant checks in tests.
    pub fn matches(&self, keys: &[NodeKey]) -> bool {
        let fresh = FreeIndex::new(keys.to_vec(), self.by_model.len());
        fresh.keys == self.keys
            && fresh.tree == self.tree
            && fresh.by_model == self.by_model
            && self.by_cpu.get().is_none_or(|b| b == fresh.by_cpu())
    }
}

/// (free GPU milli, free CPU, node) as one integer ordered as the tuple is: 32 + 64 + 32 bits.
fn packed(total_milli: u32, cpu: u64, node: NodeId) -> u128 {
    (u128::from(total_milli) << 96) | (u128::from(cpu) << 32) | u128::from(node.0)
}

fn node_of(key: u128) -> NodeId {
    NodeId(key as u32)
}

fn model_of(k: &NodeKey) -> Option<usize> {
    (k.model_bit != 0).then(|| k.model_bit.trailing_zeros() as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The packed key orders exactly as the (milli, CPU, node) tuple, extremes included.
    #[test]
    fn packed_keys_order_as_their_tuples() {
        let edge_u32 = [0, 1, 999, 1000, u32::MAX - 1, u32::MAX];
        let edge_u64 = [0, 1, 1 << 32, (1 << 32) - 1, u64::MAX - 1, u64::MAX];
        let mut keys = Vec::new();
        for &m in &edge_u32 {
            for &c in &edge_u64 {
                for &n in &edge_u32 {
                    keys.push((m, c, NodeId(n)));
                }
            }
        }
        for a in &keys {
            for b in &keys {
                let (pa, pb) = (packed(a.0, a.1, a.2), packed(b.0, b.1, b.2));
                assert_eq!(pa.cmp(&pb), a.cmp(b), "{a:?} against {b:?}");
                assert_eq!(node_of(pa), a.2);
            }
        }
    }

    /// `fitting` walks the tree once and gives exactly the nodes repeated `first_fit` calls
    /// give, in the same order, over many random clusters (sizes around powers of two) and
    /// needs, after updates too.
    #[test]
    fn fitting_is_repeated_first_fit_in_one_walk() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for round in 0..300 {
            let nodes = [0, 1, 2, 3, 7, 8, 9, 31, 33, 100][round % 10];
            let key = |r: &mut dyn FnMut(u64) -> u64| NodeKey {
                whole: r(9) as u32,
                max_milli: r(1001) as u32,
                total_milli: r(8001) as u32,
                cpu: r(64_000),
                mem: r(1 << 20),
                model_bit: [0, 1, 2, 4][r(4) as usize],
                class_bit: [1, 2][r(2) as usize],
            };
            let keys: Vec<NodeKey> = (0..nodes).map(|_| key(&mut rnd)).collect();
            let mut index = FreeIndex::new(keys, 3);
            for _ in 0..3 {
                let need = Need {
                    gpus: rnd(5) as u32,
                    milli: [250, 500, 1000][rnd(3) as usize],
                    cpu: rnd(32_000),
                    mem: rnd(1 << 19),
                    mask: rnd(8),
                    classes: 1 + rnd(3),
                };
                let mut want = Vec::new();
                let mut from = 0;
                while let Some(n) = index.first_fit(&need, from) {
                    want.push(n);
                    from = n.index() + 1;
                }
                let got: Vec<NodeId> = index.fitting(need).collect();
                assert_eq!(got, want, "round {round}, {nodes} nodes, {need:?}");
                if nodes > 0 {
                    let n = NodeId(rnd(nodes as u64) as u32);
                    index.update(n, key(&mut rnd));
                }
            }
        }
    }
}
