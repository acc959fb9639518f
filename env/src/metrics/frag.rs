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
use crate::job::{TaskRequest, Trace};
use crate::units::{GPU_MILLI, NodeId};
use std::collections::BTreeMap;

/// Entries a `FragmentMemo` holds before it starts afresh.
const MEMO_LIMIT: usize = 1 << 16;

/// A node state (free shares, CPU, memory) and its fragment.
type Remembered = (Box<[u16]>, u64, u64, f64);

/// Node fragments under one mix, remembered by the node's state (free shares, CPU, memory):
/// a cluster's nodes are in few distinct states, and most do not change between two looks.
/// A node's fragment is a pure function of its state and the mix, so a remembered value is
/// exactly what `TaskMix::node_fragment` gives. The owner clears it when the mix changes.
#[derive(Debug, Clone, Default)]
pub struct FragmentMemo {
    /// By a hash of the state; each entry keeps the whole state (a collision is a miss).
    buckets: std::collections::HashMap<u64, Vec<Remembered>, foldhash::fast::FixedState>,
    entries: usize,
    /// The cluster as `cluster_fragment` last saw it (`ClusterState::free_arrays`) and each
    /// node's fragment then, so a look at a node that has not changed since costs a
    /// comparison, not a hash and a search.
    last: LastSeen,
}

#[derive(Debug, Clone, Default)]
struct LastSeen {
    offsets: Vec<u32>,
    gpus: Vec<u16>,
    cpu: Vec<u64>,
    mem: Vec<u64>,
    fragment: Vec<f64>,
}

impl FragmentMemo {
    /// Forgets every value (the mix changed).
    pub fn clear(&mut self) {
        self.buckets.clear();
        self.entries = 0;
        self.last = LastSeen::default();
    }

    /// The sum of every node's fragment, in node order (the same sum as adding
    /// `node_fragment` over the nodes). A node in the state it was last seen in, under this
    /// memo's mix, gives its fragment back without a lookup.
    pub fn cluster_fragment(&mut self, mix: &TaskMix, state: &ClusterState) -> f64 {
        let (offsets, gpus, cpu, mem) = state.free_arrays();
        let nodes = offsets.len();
        if self.last.offsets != offsets || self.last.gpus.len() != gpus.len() {
            // Another layout of nodes and GPUs (or the first look): every node is new.
            self.last = LastSeen {
                offsets: offsets.to_vec(),
                gpus: gpus.to_vec(),
                cpu: cpu.to_vec(),
                mem: mem.to_vec(),
                fragment: vec![f64::NAN; nodes],
            };
            for n in state.spec().node_ids() {
                self.last.fragment[n.index()] = self.node_fragment(mix, state, n);
            }
        } else {
            for (i, n) in state.spec().node_ids().enumerate() {
                let start = offsets[i] as usize;
                let end = offsets.get(i + 1).map_or(gpus.len(), |e| *e as usize);
                let last = &mut self.last;
                if last.cpu[i] == cpu[i]
                    && last.mem[i] == mem[i]
                    && last.gpus[start..end] == gpus[start..end]
                {
                    continue;
                }
                last.cpu[i] = cpu[i];
                last.mem[i] = mem[i];
                last.gpus[start..end].copy_from_slice(&gpus[start..end]);
                self.last.fragment[i] = self.node_fragment(mix, state, n);
            }
        }
        self.last.fragment.iter().sum()
    }

    /// `mix.node_fragment(state, node)`, remembered.
    pub fn node_fragment(&mut self, mix: &TaskMix, state: &ClusterState, node: NodeId) -> f64 {
        use std::hash::{BuildHasher, Hash, Hasher};
        let (gpu_free, cpu, mem) = (
            state.gpu_free(node),
            state.cpu_free(node),
            state.mem_free(node),
        );
        let key = {
            let mut h = foldhash::fast::FixedState::default().build_hasher();
            gpu_free.hash(&mut h);
            (cpu, mem).hash(&mut h);
            h.finish()
        };
        if let Some((.., f)) = self.buckets.get(&key).and_then(|b| {
            b.iter()
                .find(|(g, c, m, _)| **g == *gpu_free && *c == cpu && *m == mem)
        }) {
            return *f;
        }
        let f = mix.fragment(gpu_free, cpu, mem);
        if self.entries >= MEMO_LIMIT {
            self.clear();
        }
        self.buckets
            .entry(key)
            .or_default()
            .push((gpu_free.into(), cpu, mem, f));
        self.entries += 1;
        f
    }
}

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
        let mut counts = MixCounts::default();
        for j in trace.jobs() {
            counts.add(&j.task, j.tasks);
        }
        counts.mix()
    }

    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
    }

    /// Expected fragment of `node` now, milli-GPU.
    pub fn node_fragment(&self, state: &ClusterState, node: NodeId) -> f64 {
        self.fragment(
            state.gpu_free(node),
            state.cpu_free(node),
            state.mem_free(node),
        )
    }

    /// Expected fragment, milli-GPU, of a node whose GPUs have `gpu_free` milli free each and
    /// that has `cpu_free` milli-CPU and `mem_free` MiB free (for what-if scoring).
    pub fn fragment(&self, gpu_free: &[u16], cpu_free: u64, mem_free: u64) -> f64 {
        if gpu_free.is_empty() {
            return 0.0;
        }
        let total_free: u32 = gpu_free.iter().map(|f| u32::from(*f)).sum();
        let node = FreeShape::of(gpu_free, cpu_free, mem_free);
        self.classes
            .iter()
            .map(|c| {
                let fragment = match c.usable_from(&node) {
                    Some(usable_from) => gpu_free
                        .iter()
                        .map(|f| u32::from(*f))
                        .filter(|f| *f < usable_from)
                        .sum(),
                    None => total_free,
                };
                c.weight * fragment as f64
            })
            .sum()
    }

    /// Each GPU's share of `fragment` (same arguments): the expected milli-GPU of that GPU's
    /// free capacity the mix cannot use. Sums to `fragment` (for views that draw GPUs).
    pub fn gpu_fragments(&self, gpu_free: &[u16], cpu_free: u64, mem_free: u64) -> Vec<f64> {
        let mut out = vec![0.0; gpu_free.len()];
        let node = FreeShape::of(gpu_free, cpu_free, mem_free);
        for c in &self.classes {
            let usable_from = c.usable_from(&node);
            for (o, f) in out.iter_mut().zip(gpu_free) {
                let f = u32::from(*f);
                if usable_from.is_none_or(|u| f < u) {
                    *o += c.weight * f as f64;
                }
            }
        }
        out
    }
}

/// What a class's fit on a node depends on: its whole free GPUs, its largest free share, CPU
/// and memory.
struct FreeShape {
    whole: u32,
    max_free: u32,
    cpu_free: u64,
    mem_free: u64,
}

impl FreeShape {
    fn of(gpu_free: &[u16], cpu_free: u64, mem_free: u64) -> FreeShape {
        FreeShape {
            whole: gpu_free
                .iter()
                .filter(|f| u32::from(**f) == GPU_MILLI)
                .count() as u32,
            max_free: gpu_free.iter().copied().max().map_or(0, u32::from),
            cpu_free,
            mem_free,
        }
    }
}

impl TaskClass {
    /// Where this class can run on `node`: the least free share of a GPU it can use; `None`
    /// when it cannot run there at all (GPUs, CPU or memory short).
    fn usable_from(&self, node: &FreeShape) -> Option<u32> {
        let gpu_fits = if self.milli < GPU_MILLI {
            node.max_free >= self.milli
        } else {
            node.whole >= self.gpus
        };
        let fits = gpu_fits && node.cpu_free >= self.cpu_milli && node.mem_free >= self.mem_mib;
        fits.then_some(self.milli.min(GPU_MILLI))
    }
}

/// Task counts by (GPUs, share) class, built up job by job: a `TaskMix` in the making (from a
/// whole trace, or online from the jobs a scheduler has seen so far).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MixCounts {
    /// (GPUs, share) -> (tasks, total milli-CPU, total MiB).
    acc: BTreeMap<(u32, u32), (u64, u128, u128)>,
}

impl MixCounts {
    /// Counts the `tasks` tasks of a job asking `task` each (CPU-only tasks are left out).
    pub fn add(&mut self, task: &TaskRequest, tasks: u32) {
        if task.gpus == 0 || tasks == 0 {
            return;
        }
        let e = self.acc.entry((task.gpus, task.gpu_milli)).or_default();
        e.0 += u64::from(tasks);
        e.1 += u128::from(task.cpu_milli) * u128::from(tasks);
        e.2 += u128::from(task.mem_mib) * u128::from(tasks);
    }

    /// The mix: each class weighted by its share of the tasks, with its mean CPU and memory;
    /// the `MAX_CLASSES` most common classes kept and renormalised.
    pub fn mix(&self) -> TaskMix {
        let mut classes: Vec<TaskClass> = self
            .acc
            .iter()
            .map(|(&(gpus, milli), &(n, cpu, mem))| TaskClass {
                gpus,
                milli,
                cpu_milli: (cpu / u128::from(n)) as u64,
                mem_mib: (mem / u128::from(n)) as u64,
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
    use crate::cluster::tests::uniform;
    use crate::cluster::{NodeMask, TaskPlacement};
    use crate::job::TaskRequest;
    use crate::job::tests::job;
    use crate::units::{JobId, SimTime};
    use std::sync::Arc;

    #[test]
    fn the_memo_gives_each_nodes_fragment_exactly() {
        // 6 nodes of 4 GPUs; tasks of a few shapes placed and released at random; after each
        // change every node's remembered fragment equals the one computed afresh.
        let spec = Arc::new(uniform(6, 4, "V100", 8000, 65_536));
        let mut s = ClusterState::new(spec);
        let mut counts = MixCounts::default();
        let shapes = [
            TaskRequest::whole(1, 1000, 1024),
            TaskRequest::whole(2, 2000, 1024),
            TaskRequest {
                gpus: 1,
                gpu_milli: 300,
                cpu_milli: 500,
                mem_mib: 512,
            },
        ];
        for t in &shapes {
            counts.add(t, 1);
        }
        let mix = counts.mix();
        let mut memo = FragmentMemo::default();
        let mut cluster = FragmentMemo::default();
        let mut running: Vec<JobId> = Vec::new();
        let mut seed = 7u64;
        let mut next = || {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) as usize
        };
        for step in 0..200u32 {
            if next() % 3 == 0 && !running.is_empty() {
                let k = next() % running.len();
                s.release(running.swap_remove(k)).unwrap();
            } else {
                let task = shapes[next() % shapes.len()];
                let fits: Vec<NodeId> = s.nodes_fitting(&task, NodeMask::ANY).collect();
                if let Some(node) = fits.get(next() % fits.len().max(1)).copied() {
                    let t = s
                        .fit_task_on(
                            &task,
                            NodeMask::ANY,
                            node,
                            crate::cluster::FitStrategy::BestFit,
                        )
                        .unwrap();
                    let mut j = job("j", 0, task);
                    j.id = JobId(step);
                    s.allocate(&j, vec![t]).unwrap();
                    running.push(j.id);
                }
            }
            for n in s.spec().node_ids() {
                assert_eq!(
                    memo.node_fragment(&mix, &s, n).to_bits(),
                    mix.node_fragment(&s, n).to_bits(),
                    "step {step}, node {n}"
                );
            }
            // The cluster's sum from the per-node memory: the fresh sum, to the bit, every
            // step (most nodes unchanged since the last look, some changed).
            let fresh: f64 = s.spec().node_ids().map(|n| mix.node_fragment(&s, n)).sum();
            assert_eq!(
                cluster.cluster_fragment(&mix, &s).to_bits(),
                fresh.to_bits(),
                "step {step}"
            );
            // And a look at another cluster (other size, other states) in between changes
            // nothing of that.
            if step % 17 == 0 {
                let other = ClusterState::new(Arc::new(uniform(3, 2, "V100", 8000, 65_536)));
                let fresh: f64 = other
                    .spec()
                    .node_ids()
                    .map(|n| mix.node_fragment(&other, n))
                    .sum();
                assert_eq!(
                    cluster.cluster_fragment(&mix, &other).to_bits(),
                    fresh.to_bits()
                );
            }
        }
        // Nodes in equal states share entries: far fewer than nodes x steps.
        assert!(memo.entries < 6 * 200, "{}", memo.entries);
    }

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
        // All of it on GPU 0; the whole free GPUs are usable by both classes.
        let per_gpu = |s: &ClusterState| {
            let n = NodeId(0);
            mix.gpu_fragments(s.gpu_free(n), s.cpu_free(n), s.mem_free(n))
        };
        assert_eq!(per_gpu(&s), vec![300.0, 0.0, 0.0, 0.0]);
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
        assert_eq!(per_gpu(&s), vec![300.0, 1000.0, 1000.0, 1000.0]);
    }
}
