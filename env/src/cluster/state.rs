//! `ClusterState`: free capacity per GPU and node, and the placements of running jobs.
//!
//! The single source of truth for who holds what. It changes only through `allocate`,
//! `allocate_shared`, `resize`, `release` and `preempt`, which check every invariant (no GPU
//! above capacity, at most two jobs on a shared GPU, no job placed twice, all tasks of a gang
//! or none) and keep the free-capacity index current.

use super::feasibility::{FitStrategy, Infeasible};
use super::index::{FreeIndex, Need, NodeKey};
use super::{ClusterSpec, NodeMask};
use crate::job::{JobSpec, TaskRequest};
use crate::units::{GPU_MILLI, GpuModelId, JobId, NodeId};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

mod share;

pub use share::{ResizeRefusal, ShareRefusal};

/// Where one task of a job runs: a node and the indices of the GPUs it uses there.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct TaskPlacement {
    pub node: NodeId,
    /// GPU indices on the node (0-based): one per requested GPU; one for a fractional task;
    /// none for a CPU-only task.
    pub gpus: Vec<u8>,
}

/// A running job's resources.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Allocation {
    pub job: JobId,
    pub task: TaskRequest,
    /// Shared, never changed in place: a copy of the state (the service's spare world, a
    /// what-if) shares every running job's placement instead of copying two vectors per job.
    #[serde(serialize_with = "placements_as_list")]
    pub tasks: Arc<[TaskPlacement]>,
    pub preemptible: bool,
    /// Whether the job is elastic (`JobSpec::elastic`: it may be resized), kept here so that
    /// policies looking for resizable jobs need not read every running job's spec.
    #[serde(skip)]
    pub elastic: bool,
}

/// Writes shared placements as the list they are.
fn placements_as_list<S: serde::Serializer>(
    tasks: &Arc<[TaskPlacement]>,
    s: S,
) -> Result<S::Ok, S::Error> {
    serde::Serialize::serialize(&tasks[..], s)
}

impl Allocation {
    /// Distinct nodes the job spans, in first-use order.
    pub fn nodes(&self) -> Vec<NodeId> {
        let mut seen: Vec<NodeId> = Vec::with_capacity(self.tasks.len());
        for t in self.tasks.iter() {
            if !seen.contains(&t.node) {
                seen.push(t.node);
            }
        }
        seen
    }

    /// The one node every task of the job runs on, if there is one.
    pub fn only_node(&self) -> Option<NodeId> {
        let first = self.tasks.first()?.node;
        self.tasks.iter().all(|t| t.node == first).then_some(first)
    }
}

/// A refused change of state. Infeasibility of a proposed placement is one of them.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StateError {
    #[error("job {0} is already running")]
    AlreadyRunning(JobId),
    #[error("job {0} is not running")]
    NotRunning(JobId),
    #[error("job {0} is not preemptible")]
    NotPreemptible(JobId),
    #[error("job {job}: {reason}")]
    Infeasible { job: JobId, reason: Infeasible },
    #[error("job {job} cannot share a GPU: {why}")]
    Share { job: JobId, why: ShareRefusal },
    #[error("job {job} cannot be resized: {why}")]
    Resize { job: JobId, why: ResizeRefusal },
}

/// Why `ClusterState::try_decision` refused a decision: the victim's or placement's
/// position, and what went wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DecisionFault {
    #[error("victim {0}: {1}")]
    Victim(usize, StateError),
    #[error("placement {0}: {1}")]
    Placement(usize, StateError),
}

#[derive(Debug, Clone)]
pub struct ClusterState {
    spec: Arc<ClusterSpec>,
    /// Start of each node's GPUs in `gpu_free`.
    gpu_offset: Vec<u32>,
    /// Free milli-GPU of every GPU in the cluster.
    gpu_free: Vec<u16>,
    cpu_free: Vec<u64>,
    mem_free: Vec<u64>,
    index: FreeIndex,
    running: BTreeMap<JobId, Allocation>,
    /// Allocated milli-GPU per GPU model.
    allocated_by_model: Vec<u64>,
    /// Power of every GPU idling, watts (fixed by the spec).
    idle_watts: f64,
    /// Allocated milli-CPU over the whole cluster.
    allocated_cpu_milli: u64,
    /// True while `allocate_many` loads jobs: the index is rebuilt once at the end.
    index_deferred: bool,
    /// Nodes the node searches (`find_task_node`, `fit_task_on`, `nodes_fitting`) skip: those
    /// a gang that needs distinct nodes already uses while its tasks are placed one by one
    /// (`excluding_nodes`). Empty otherwise.
    excluded: Vec<NodeId>,
    /// GPUs that two jobs share (`allocate_shared`), by global GPU index (the node's start in
    /// `gpu_free` plus the GPU's index on it): the job that held it first, then the one that
    /// joined. A shared GPU's capacity is taken once, by whichever of the two holds it alone
    /// afterwards; the other job's task takes only CPU and memory. Empty in runs without
    /// sharing, which then take no other path.
    shared: BTreeMap<u32, [JobId; 2]>,
    /// Per global GPU: the job that last took it whole (`u32::MAX`: none yet). A hint that
    /// [`Self::gpu_holders`] checks against `running` before it trusts it (it is not cleared
    /// when the job leaves), so that finding a GPU's holder does not scan every running job.
    holder_hint: Vec<u32>,
}

impl ClusterState {
    /// An empty cluster: everything free, nothing running.
    pub fn new(spec: Arc<ClusterSpec>) -> ClusterState {
        let mut gpu_offset = Vec::with_capacity(spec.nodes.len());
        let mut total = 0u32;
        for n in &spec.nodes {
            gpu_offset.push(total);
            total += n.gpus;
        }
        let gpu_free = vec![GPU_MILLI as u16; total as usize];
        let cpu_free: Vec<u64> = spec.nodes.iter().map(|n| n.cpu_milli).collect();
        let mem_free: Vec<u64> = spec.nodes.iter().map(|n| n.mem_mib).collect();
        let mut state = ClusterState {
            index: FreeIndex::new(Vec::new(), spec.models.len()),
            allocated_by_model: vec![0; spec.models.len()],
            spec,
            gpu_offset,
            gpu_free,
            cpu_free,
            mem_free,
            running: BTreeMap::new(),
            idle_watts: 0.0,
            allocated_cpu_milli: 0,
            index_deferred: false,
            excluded: Vec::new(),
            shared: BTreeMap::new(),
            holder_hint: vec![u32::MAX; total as usize],
        };
        state.idle_watts = state
            .spec
            .nodes
            .iter()
            .filter_map(|n| {
                n.gpu_model
                    .map(|m| n.gpus as f64 * state.spec.model(m).idle_watts)
            })
            .sum();
        let keys = state
            .spec
            .node_ids()
            .map(|n| state.compute_key(n))
            .collect();
        state.index = FreeIndex::new(keys, state.spec.models.len());
        state
    }

    pub fn spec(&self) -> &ClusterSpec {
        &self.spec
    }
    pub fn spec_arc(&self) -> &Arc<ClusterSpec> {
        &self.spec
    }
    /// Free milli-GPU of each GPU on `node`.
    /// Every node's free capacity as stored: the start of each node's GPUs in the second
    /// slice (a node's GPUs end where the next node's start), each GPU's free milli, each
    /// node's free CPU and memory. For scans that look at every node.
    pub(crate) fn free_arrays(&self) -> (&[u32], &[u16], &[u64], &[u64]) {
        (
            &self.gpu_offset,
            &self.gpu_free,
            &self.cpu_free,
            &self.mem_free,
        )
    }
    pub fn gpu_free(&self, node: NodeId) -> &[u16] {
        let start = self.gpu_offset[node.index()] as usize;
        &self.gpu_free[start..start + self.spec.node(node).gpus as usize]
    }
    pub fn cpu_free(&self, node: NodeId) -> u64 {
        self.cpu_free[node.index()]
    }
    pub fn mem_free(&self, node: NodeId) -> u64 {
        self.mem_free[node.index()]
    }
    /// GPUs on `node` with nothing allocated.
    pub fn free_whole_gpus(&self, node: NodeId) -> u32 {
        self.index.key(node).whole
    }
    /// Free milli-GPU on `node`, all GPUs together.
    pub fn free_gpu_milli(&self, node: NodeId) -> u32 {
        self.index.key(node).total_milli
    }
    /// Running jobs in id order.
    pub fn running(&self) -> impl ExactSizeIterator<Item = &Allocation> {
        self.running.values()
    }
    /// Running jobs with ids from `from` on, in id order.
    pub fn running_from(&self, from: JobId) -> impl Iterator<Item = &Allocation> {
        self.running.range(from..).map(|(_, a)| a)
    }
    /// Running jobs with ids below `to`, in id order.
    pub fn running_before(&self, to: JobId) -> impl Iterator<Item = &Allocation> {
        self.running.range(..to).map(|(_, a)| a)
    }
    /// Allocated milli-GPU on the nodes of GPU model `model`.
    pub fn allocated_gpu_milli_of(&self, model: GpuModelId) -> u64 {
        self.allocated_by_model
            .get(model.index())
            .copied()
            .unwrap_or(0)
    }
    pub fn allocation(&self, job: JobId) -> Option<&Allocation> {
        self.running.get(&job)
    }
    pub fn is_running(&self, job: JobId) -> bool {
        self.running.contains_key(&job)
    }
    /// Allocated milli-GPU over the whole cluster.
    pub fn allocated_gpu_milli(&self) -> u64 {
        self.allocated_by_model.iter().sum()
    }
    /// Allocated milli-CPU over the whole cluster.
    pub fn allocated_cpu_milli(&self) -> u64 {
        self.allocated_cpu_milli
    }
    /// GPU power draw now, watts: every GPU idles at its idle draw, and allocated shares add
    /// `(busy - idle)` pro rata.
    pub fn gpu_power_watts(&self) -> f64 {
        let busy: f64 = self
            .spec
            .models
            .iter()
            .zip(&self.allocated_by_model)
            .map(|(m, alloc)| *alloc as f64 / GPU_MILLI as f64 * (m.busy_watts - m.idle_watts))
            .sum();
        self.idle_watts + busy
    }

    /// Places every task of `job` as given, or nothing. Checks each task against what is free
    /// after the job's earlier tasks (two tasks may share a node, or a fractional GPU).
    pub fn allocate(&mut self, job: &JobSpec, tasks: Vec<TaskPlacement>) -> Result<(), StateError> {
        if self.running.contains_key(&job.id) {
            return Err(StateError::AlreadyRunning(job.id));
        }
        self.take_tasks(job, &tasks)?;
        self.hint_holder(job.id, &job.task, &tasks);
        self.running.insert(
            job.id,
            Allocation {
                job: job.id,
                task: job.task,
                tasks: tasks.into(),
                preemptible: job.preemptible,
                elastic: job.elastic.is_some(),
            },
        );
        Ok(())
    }

    /// Takes the free capacity of every task of `job` as given (the task count checked
    /// first), or nothing: the checks of `allocate` (and of `try_decision`'s placements)
    /// after the job is known not to run, without entering it in `running`.
    fn take_tasks(&mut self, job: &JobSpec, tasks: &[TaskPlacement]) -> Result<(), StateError> {
        let infeasible = |reason| StateError::Infeasible {
            job: job.id,
            reason,
        };
        let elastic_size = job
            .elastic
            .is_some_and(|e| e.admits(tasks.len() as u64 * u64::from(job.task.gpus)));
        if tasks.len() != job.tasks as usize && !elastic_size {
            return Err(infeasible(Infeasible::TaskCount {
                want: job.tasks,
                got: tasks.len() as u32,
            }));
        }
        if job.constraints.distinct_nodes
            && let Some(i) =
                (1..tasks.len()).find(|i| tasks[..*i].iter().any(|t| t.node == tasks[*i].node))
        {
            return Err(infeasible(Infeasible::SameNode {
                node: tasks[i].node,
            }));
        }
        let mask = self.spec.job_mask(job);
        for (done, t) in tasks.iter().enumerate() {
            if let Err(reason) = self.take_task(&job.task, mask, t) {
                for undo in tasks[..done].iter().rev() {
                    self.give_back_task(&job.task, undo);
                }
                return Err(infeasible(reason));
            }
        }
        Ok(())
    }

    /// `allocate` for each job in order (loading a whole snapshot), with the free-capacity
    /// index rebuilt once at the end instead of updated per task. On the first refusal, the
    /// jobs before it stay placed and the error comes with the refused job's position.
    pub fn allocate_many<'a>(
        &mut self,
        jobs: impl IntoIterator<Item = (&'a JobSpec, Vec<TaskPlacement>)>,
    ) -> Result<(), (usize, StateError)> {
        self.index_deferred = true;
        let mut result = Ok(());
        for (i, (job, tasks)) in jobs.into_iter().enumerate() {
            if let Err(e) = self.allocate(job, tasks) {
                result = Err((i, e));
                break;
            }
        }
        self.index_deferred = false;
        let keys = self.spec.node_ids().map(|n| self.compute_key(n)).collect();
        self.index = FreeIndex::new(keys, self.spec.models.len());
        result
    }

    /// Frees everything `job` holds (it finished).
    pub fn release(&mut self, job: JobId) -> Result<Allocation, StateError> {
        let alloc = self
            .running
            .remove(&job)
            .ok_or(StateError::NotRunning(job))?;
        if let Some(gpu) = self.shared_gpu(&alloc) {
            // The partner keeps the GPU (and its capacity): only CPU and memory come back.
            if let Some(pair) = self.shared.remove(&gpu)
                && let Some(partner) = pair.iter().find(|j| **j != job)
                && let Some(h) = self.holder_hint.get_mut(gpu as usize)
            {
                *h = partner.0;
            }
            self.give_back_host(&alloc.task, alloc.tasks[0].node);
        } else {
            for t in alloc.tasks.iter() {
                self.give_back_task(&alloc.task, t);
            }
        }
        Ok(alloc)
    }

    /// Whether `victims` can all be preempted and then each of `placements` made, in order,
    /// on this state. Tried in place and undone exactly: the free capacity of every node it
    /// touches and the totals are saved first and written back, the running set restored, and
    /// the index left alone (it is not read by these checks, and the state it indexes comes
    /// back unchanged). So a check costs what the decision touches, not a copy of the cluster.
    /// The error gives the victim's or placement's position.
    pub fn try_decision(
        &mut self,
        victims: &[JobId],
        placements: &[(&JobSpec, &[TaskPlacement])],
    ) -> Result<(), DecisionFault> {
        /// A node's free capacity before the check first touched it; its GPUs' shares at
        /// `gpus..gpus + n` of one buffer (no allocation per node).
        struct Saved {
            node: NodeId,
            cpu: u64,
            mem: u64,
            gpus: usize,
        }
        let mut saved: Vec<Saved> = Vec::new();
        let mut saved_gpus: Vec<u16> = Vec::new();
        let mut seen: std::collections::HashSet<NodeId, foldhash::fast::FixedState> =
            std::collections::HashSet::default();
        let totals = (self.allocated_cpu_milli, self.allocated_by_model.clone());
        // A victim on a shared GPU leaves its pair; put the pairs back after.
        let shared = (!self.shared.is_empty()).then(|| self.shared.clone());
        let deferred = std::mem::replace(&mut self.index_deferred, true);
        let mut removed: Vec<Allocation> = Vec::with_capacity(victims.len());
        // Jobs placed by this check: they only need to be known as running (a second
        // placement of one is refused as `allocate` would), not entered in `running`.
        let mut added: std::collections::HashSet<JobId, foldhash::fast::FixedState> =
            std::collections::HashSet::with_capacity_and_hasher(
                placements.len(),
                Default::default(),
            );
        let mut save = |state: &ClusterState,
                        node: NodeId,
                        saved: &mut Vec<Saved>,
                        saved_gpus: &mut Vec<u16>| {
            if node.index() < state.spec.nodes.len() && seen.insert(node) {
                saved.push(Saved {
                    node,
                    cpu: state.cpu_free[node.index()],
                    mem: state.mem_free[node.index()],
                    gpus: saved_gpus.len(),
                });
                saved_gpus.extend_from_slice(state.gpu_free(node));
            }
        };
        let mut result = Ok(());
        for (i, v) in victims.iter().enumerate() {
            if let Some(a) = self.running.get(v) {
                for t in a.tasks.iter() {
                    save(self, t.node, &mut saved, &mut saved_gpus);
                }
            }
            match self.preempt(*v) {
                Ok(a) => removed.push(a),
                Err(e) => {
                    result = Err(DecisionFault::Victim(i, e));
                    break;
                }
            }
        }
        if result.is_ok() {
            for (i, (job, tasks)) in placements.iter().enumerate() {
                for t in tasks.iter() {
                    save(self, t.node, &mut saved, &mut saved_gpus);
                }
                // `allocate`'s checks, without entering the job in `running`: everything
                // this changes is written back below.
                let fault = if self.running.contains_key(&job.id) || !added.insert(job.id) {
                    Err(StateError::AlreadyRunning(job.id))
                } else {
                    self.take_tasks(job, tasks)
                };
                if let Err(e) = fault {
                    result = Err(DecisionFault::Placement(i, e));
                    break;
                }
            }
        }
        for a in removed {
            self.running.insert(a.job, a);
        }
        for s in saved {
            let start = self.gpu_offset[s.node.index()] as usize;
            let n = self.gpu_free(s.node).len();
            self.gpu_free[start..start + n].copy_from_slice(&saved_gpus[s.gpus..s.gpus + n]);
            self.cpu_free[s.node.index()] = s.cpu;
            self.mem_free[s.node.index()] = s.mem;
        }
        (self.allocated_cpu_milli, self.allocated_by_model) = totals;
        if let Some(shared) = shared {
            self.shared = shared;
        }
        self.index_deferred = deferred;
        result
    }

    /// Gives every running job a new id (`new_id(old)`), as when the owner of the ids drops
    /// those of jobs that left. `new_id` must keep distinct ids distinct.
    pub fn renumber(&mut self, mut new_id: impl FnMut(JobId) -> JobId) {
        let running = std::mem::take(&mut self.running);
        self.running = running
            .into_values()
            .map(|mut a| {
                a.job = new_id(a.job);
                (a.job, a)
            })
            .collect();
        for pair in self.shared.values_mut() {
            *pair = pair.map(&mut new_id);
        }
        self.holder_hint.fill(u32::MAX);
        let held: Vec<(JobId, TaskRequest, Arc<[TaskPlacement]>)> = self
            .running
            .values()
            .map(|a| (a.job, a.task, a.tasks.clone()))
            .collect();
        for (job, task, tasks) in held {
            self.hint_holder(job, &task, &tasks);
        }
    }

    /// Records `job` as the holder of the GPUs of `tasks` when it takes them whole.
    pub(super) fn hint_holder(&mut self, job: JobId, task: &TaskRequest, tasks: &[TaskPlacement]) {
        if task.gpu_milli != GPU_MILLI {
            return;
        }
        for t in tasks {
            let Some(start) = self.gpu_offset.get(t.node.index()) else {
                continue;
            };
            for g in &t.gpus {
                if let Some(h) = self.holder_hint.get_mut((start + u32::from(*g)) as usize) {
                    *h = job.0;
                }
            }
        }
    }

    /// The running jobs whose tasks use GPU `gpu` of `node` (both jobs of a shared GPU, the
    /// first holder first). A GPU taken whole by a job that does not share it has that job
    /// alone, found without scanning every running job.
    pub fn gpu_holders(&self, node: NodeId, gpu: u8) -> Vec<&Allocation> {
        let uses = |a: &Allocation| {
            a.tasks
                .iter()
                .any(|t| t.node == node && t.gpus.contains(&gpu))
        };
        if let Some(global) = self
            .gpu_offset
            .get(node.index())
            .map(|s| s + u32::from(gpu))
        {
            if let Some(pair) = self.shared.get(&global) {
                return pair.iter().filter_map(|j| self.running.get(j)).collect();
            }
            let hinted = self
                .holder_hint
                .get(global as usize)
                .filter(|h| **h != u32::MAX)
                .and_then(|h| self.running.get(&JobId(*h)))
                .filter(|a| a.task.gpu_milli == GPU_MILLI && uses(a));
            if let Some(a) = hinted {
                return vec![a];
            }
        }
        self.running.values().filter(|a| uses(a)).collect()
    }

    /// Frees everything a preemptible `job` holds (it goes back to the queue).
    pub fn preempt(&mut self, job: JobId) -> Result<Allocation, StateError> {
        match self.running.get(&job) {
            None => Err(StateError::NotRunning(job)),
            Some(a) if !a.preemptible => Err(StateError::NotPreemptible(job)),
            Some(_) => self.release(job),
        }
    }

    /// Checks one task against `node`'s free capacity, and picks its GPUs with `strategy`'s
    /// GPU-level rule. `None` when the task does not fit there.
    pub fn fit_task_on(
        &self,
        task: &TaskRequest,
        mask: NodeMask,
        node: NodeId,
        strategy: FitStrategy,
    ) -> Option<TaskPlacement> {
        if !need(task, mask).admits(self.index.key(node)) || self.excluded.contains(&node) {
            return None;
        }
        let free = self.gpu_free(node);
        let gpus: Vec<u8> = if task.gpus == 0 {
            Vec::new()
        } else if task.is_fractional() {
            let fits = free
                .iter()
                .enumerate()
                .filter(|(_, f)| u32::from(**f) >= task.gpu_milli);
            let pick = match strategy {
                FitStrategy::FirstFit => fits.map(|(i, _)| i).next(),
                FitStrategy::BestFit => fits.min_by_key(|(i, f)| (**f, *i)).map(|(i, _)| i),
                FitStrategy::WorstFit => fits
                    .max_by_key(|(i, f)| (**f, std::cmp::Reverse(*i)))
                    .map(|(i, _)| i),
            };
            vec![pick.expect("the index said some GPU has this share free") as u8]
        } else {
            free.iter()
                .enumerate()
                .filter(|(_, f)| u32::from(**f) == GPU_MILLI)
                .map(|(i, _)| i as u8)
                .take(task.gpus as usize)
                .collect()
        };
        Some(TaskPlacement { node, gpus })
    }

    /// A node for one task by `strategy`, using the free-capacity index (O(log n) typical).
    pub fn find_task_node(
        &self,
        task: &TaskRequest,
        mask: NodeMask,
        strategy: FitStrategy,
    ) -> Option<TaskPlacement> {
        let need = need(task, mask);
        let free = |n: &NodeId| !self.excluded.contains(n);
        let node = match (strategy, self.excluded.is_empty()) {
            (FitStrategy::FirstFit, true) => self.index.first_fit(&need, 0),
            (FitStrategy::FirstFit, false) => self.index.fitting(need).find(free),
            (FitStrategy::BestFit, _) => self.index.ascending(&need).find(free),
            (FitStrategy::WorstFit, _) => self.index.descending(&need).find(free),
        }?;
        self.fit_task_on(task, mask, node, strategy)
    }

    /// Nodes that can hold one task of `task` now, in id order, without a scan of the ones that
    /// cannot (index-pruned).
    pub fn nodes_fitting<'a>(
        &'a self,
        task: &TaskRequest,
        mask: NodeMask,
    ) -> impl Iterator<Item = NodeId> + 'a {
        self.index
            .fitting(need(task, mask))
            .filter(|n| !self.excluded.contains(n))
    }

    /// Makes the node searches skip `nodes` (a distinct-nodes gang's nodes so far) until
    /// `clear_excluded`. Feasibility's exact check (`allocate`) enforces distinct nodes by
    /// itself; this only keeps searches from proposing a node the check would refuse.
    pub(crate) fn exclude_node(&mut self, node: NodeId) {
        self.excluded.push(node);
    }
    pub(crate) fn clear_excluded(&mut self) {
        self.excluded.clear();
    }

    /// Takes one task's resources (public to the crate for tentative planning).
    pub(crate) fn take_task(
        &mut self,
        task: &TaskRequest,
        mask: NodeMask,
        t: &TaskPlacement,
    ) -> Result<(), Infeasible> {
        self.check_task(task, mask, t)?;
        let node = t.node;
        let start = self.gpu_offset[node.index()] as usize;
        for g in &t.gpus {
            self.gpu_free[start + *g as usize] -= task.gpu_milli as u16;
        }
        self.cpu_free[node.index()] -= task.cpu_milli;
        self.mem_free[node.index()] -= task.mem_mib;
        self.allocated_cpu_milli += task.cpu_milli;
        if let Some(m) = self.spec.node(node).gpu_model {
            self.allocated_by_model[m.index()] += task.gpu_milli_total();
        }
        if !self.index_deferred {
            self.index.update(node, self.compute_key(node));
        }
        Ok(())
    }

    /// Returns every task of running `job`'s resources, the job staying on the books
    /// (tentative planning: `retake_job` undoes it); `false` if it is not running.
    pub(crate) fn give_back_job(&mut self, job: JobId) -> bool {
        let Some(alloc) = self.running.get_mut(&job) else {
            return false;
        };
        let (task, tasks) = (alloc.task, Arc::clone(&alloc.tasks));
        if self.shared_gpu_of(job, &tasks).is_some() {
            // Its partner still holds the GPU: a tentative plan never counts it as freed.
            self.give_back_host(&task, tasks[0].node);
            return true;
        }
        for t in tasks.iter() {
            self.give_back_task(&task, t);
        }
        true
    }

    /// Takes back what `give_back_job` returned for `job`.
    pub(crate) fn retake_job(&mut self, job: JobId) {
        let alloc = self.running.get_mut(&job).expect("freed job still running");
        let (task, tasks) = (alloc.task, Arc::clone(&alloc.tasks));
        if self.shared_gpu_of(job, &tasks).is_some() {
            self.take_host(&task, tasks[0].node);
            return;
        }
        for t in tasks.iter() {
            self.take_task(&task, NodeMask::ANY, t)
                .expect("re-taking what was freed fits");
        }
    }

    /// Returns one task's resources, taken earlier by `take_task`.
    pub(crate) fn give_back_task(&mut self, task: &TaskRequest, t: &TaskPlacement) {
        let node = t.node;
        let spec = self.spec.node(node);
        let start = self.gpu_offset[node.index()] as usize;
        for g in &t.gpus {
            let f = &mut self.gpu_free[start + *g as usize];
            *f += task.gpu_milli as u16;
            assert!(
                u32::from(*f) <= GPU_MILLI,
                "GPU {g} on node {node} freed above capacity"
            );
        }
        self.cpu_free[node.index()] += task.cpu_milli;
        self.mem_free[node.index()] += task.mem_mib;
        self.allocated_cpu_milli -= task.cpu_milli;
        assert!(
            self.cpu_free[node.index()] <= spec.cpu_milli
                && self.mem_free[node.index()] <= spec.mem_mib,
            "node {node} freed above capacity"
        );
        if let Some(m) = spec.gpu_model {
            self.allocated_by_model[m.index()] -= task.gpu_milli_total();
        }
        if !self.index_deferred {
            self.index.update(node, self.compute_key(node));
        }
    }

    /// Why `t` cannot take `task` now, if it cannot.
    fn check_task(
        &self,
        task: &TaskRequest,
        mask: NodeMask,
        t: &TaskPlacement,
    ) -> Result<(), Infeasible> {
        let node = t.node;
        let Some(spec) = self.spec.nodes.get(node.index()) else {
            return Err(Infeasible::UnknownNode(node));
        };
        if t.gpus.len() != task.gpus as usize {
            return Err(Infeasible::GpuCount {
                node,
                want: task.gpus,
                got: t.gpus.len() as u32,
            });
        }
        if task.gpus > 0 {
            let allowed = spec.gpu_model.is_some_and(|m| mask.allows_model(m));
            if !allowed {
                return Err(Infeasible::ModelNotAllowed { node });
            }
        }
        if mask.classes & (1u64 << self.spec.node_class(node)) == 0 {
            return Err(Infeasible::LabelsNotMatched { node });
        }
        let free = self.gpu_free(node);
        for (i, g) in t.gpus.iter().enumerate() {
            let Some(f) = free.get(*g as usize) else {
                return Err(Infeasible::NoSuchGpu { node, gpu: *g });
            };
            if t.gpus[..i].contains(g) {
                return Err(Infeasible::DuplicateGpu { node, gpu: *g });
            }
            if u32::from(*f) < task.gpu_milli {
                return Err(Infeasible::GpuBusy {
                    node,
                    gpu: *g,
                    free_milli: *f as u32,
                    need_milli: task.gpu_milli,
                });
            }
        }
        if self.cpu_free(node) < task.cpu_milli {
            return Err(Infeasible::CpuShort {
                node,
                free: self.cpu_free(node),
                need: task.cpu_milli,
            });
        }
        if self.mem_free(node) < task.mem_mib {
            return Err(Infeasible::MemShort {
                node,
                free: self.mem_free(node),
                need: task.mem_mib,
            });
        }
        Ok(())
    }

    fn compute_key(&self, node: NodeId) -> NodeKey {
        let spec = self.spec.node(node);
        let free = self.gpu_free(node);
        NodeKey {
            whole: free.iter().filter(|f| u32::from(**f) == GPU_MILLI).count() as u32,
            max_milli: free.iter().map(|f| u32::from(*f)).max().unwrap_or(0),
            total_milli: free.iter().map(|f| u32::from(*f)).sum(),
            cpu: self.cpu_free[node.index()],
            mem: self.mem_free[node.index()],
            model_bit: spec.gpu_model.map_or(0, |m| 1u64 << m.0),
            class_bit: 1u64 << self.spec.node_class(node),
        }
    }

    /// Recomputes free capacity from the running allocations and compares with the books.
    /// For tests and debug checks; `Err` names the first discrepancy.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.check_shared()?;
        let mut fresh = ClusterState::new(self.spec.clone());
        for a in self.running.values() {
            // The second job of a shared GPU takes only CPU and memory; any other job on a
            // GPU already taken (a third job, or a pair not on the books) is refused here.
            if let Some(gpu) = self.shared_gpu(a)
                && fresh.shared.contains_key(&gpu)
            {
                let node = a.tasks[0].node;
                if fresh.cpu_free(node) < a.task.cpu_milli || fresh.mem_free(node) < a.task.mem_mib
                {
                    return Err(format!(
                        "job {} overfills node {node}'s CPU or memory",
                        a.job
                    ));
                }
                fresh.take_host(&a.task, node);
                continue;
            }
            for t in a.tasks.iter() {
                fresh
                    .take_task(&a.task, NodeMask::ANY, t)
                    .map_err(|e| format!("job {} cannot be re-placed: {e}", a.job))?;
            }
            if let Some(gpu) = self.shared_gpu(a) {
                fresh.shared.insert(gpu, self.shared[&gpu]);
            }
        }
        if fresh.gpu_free != self.gpu_free {
            return Err("per-GPU free capacity disagrees with the running jobs".into());
        }
        if fresh.cpu_free != self.cpu_free || fresh.mem_free != self.mem_free {
            return Err("CPU or memory free capacity disagrees with the running jobs".into());
        }
        if fresh.allocated_by_model != self.allocated_by_model
            || fresh.allocated_cpu_milli != self.allocated_cpu_milli
        {
            return Err("allocated GPU totals disagree with the running jobs".into());
        }
        let keys: Vec<NodeKey> = self.spec.node_ids().map(|n| self.compute_key(n)).collect();
        if !self.index.matches(&keys) {
            return Err("free-capacity index is stale".into());
        }
        // Every GPU's holders as `gpu_holders` finds them (through its hint) are those a scan
        // of every running job finds.
        for (n, node) in self.spec.nodes.iter().enumerate() {
            let node_id = NodeId(n as u32);
            for gpu in 0..node.gpus.min(256) {
                let gpu = gpu as u8;
                let mut found: Vec<JobId> = self
                    .gpu_holders(node_id, gpu)
                    .iter()
                    .map(|a| a.job)
                    .collect();
                let mut scanned: Vec<JobId> = self
                    .running
                    .values()
                    .filter(|a| {
                        a.tasks
                            .iter()
                            .any(|t| t.node == node_id && t.gpus.contains(&gpu))
                    })
                    .map(|a| a.job)
                    .collect();
                found.sort_unstable();
                scanned.sort_unstable();
                if found != scanned {
                    return Err(format!(
                        "GPU {gpu} of node {node_id}: holders {found:?}, but the running jobs on \
                         it are {scanned:?}"
                    ));
                }
            }
        }
        Ok(())
    }
}

fn need(task: &TaskRequest, mask: NodeMask) -> Need {
    Need {
        gpus: task.gpus,
        milli: task.gpu_milli,
        cpu: task.cpu_milli,
        mem: task.mem_mib,
        mask: mask.models,
        classes: mask.classes,
    }
}

#[cfg(test)]
mod try_decision_tests {
    use super::*;
    use crate::cluster::tests::uniform;
    use crate::cluster::{DecisionFault, StateError};
    use crate::job::TaskRequest;
    use crate::job::tests::job;
    use crate::units::JobId;

    /// Everything a check could disturb, in comparable form.
    fn fingerprint(s: &ClusterState) -> String {
        let nodes: Vec<_> = s
            .spec()
            .node_ids()
            .map(|n| {
                (
                    s.gpu_free(n).to_vec(),
                    s.cpu_free(n),
                    s.mem_free(n),
                    *s.index.key(n),
                )
            })
            .collect();
        let running: Vec<_> = s.running().map(|a| (a.job, a.tasks.clone())).collect();
        format!(
            "{nodes:?} {running:?} {} {}",
            s.allocated_gpu_milli(),
            s.allocated_cpu_milli()
        )
    }

    #[test]
    fn a_tried_decision_leaves_the_state_exactly_as_it_was() {
        let mut state = ClusterState::new(Arc::new(uniform(3, 4, "V100", 32_000, 262_144)));
        let mut jobs = Vec::new();
        for (id, (node, gpus, preemptible)) in [
            (0, vec![0u8, 1], true),
            (1, vec![0], false),
            (2, vec![2, 3], true),
        ]
        .into_iter()
        .enumerate()
        {
            let mut j = job(
                &format!("r{id}"),
                0,
                TaskRequest::whole(gpus.len() as u32, 1000, 1024),
            );
            j.id = JobId(id as u32);
            j.preemptible = preemptible;
            state
                .allocate(
                    &j,
                    vec![TaskPlacement {
                        node: NodeId(node),
                        gpus,
                    }],
                )
                .unwrap();
            jobs.push(j);
        }
        state.check_invariants().unwrap();
        let before = fingerprint(&state);
        let mut new = job("p", 0, TaskRequest::whole(2, 1000, 1024));
        new.id = JobId(9);
        let on = |node: u32, gpus: Vec<u8>| {
            vec![TaskPlacement {
                node: NodeId(node),
                gpus,
            }]
        };
        // Fits only once victim 0 has left node 0's GPUs 0-1.
        let ok = on(0, vec![0, 1]);
        assert_eq!(state.try_decision(&[JobId(0)], &[(&new, &ok)]), Ok(()));
        assert_eq!(fingerprint(&state), before);
        // Without the victim it is refused, at placement 0.
        assert!(matches!(
            state.try_decision(&[], &[(&new, &ok)]),
            Err(DecisionFault::Placement(0, StateError::Infeasible { .. }))
        ));
        assert_eq!(fingerprint(&state), before);
        // A second placement double-booking the first's GPUs, after a victim left.
        let mut other = new.clone();
        other.id = JobId(10);
        assert!(matches!(
            state.try_decision(&[JobId(0)], &[(&new, &ok), (&other, &ok)]),
            Err(DecisionFault::Placement(1, _))
        ));
        assert_eq!(fingerprint(&state), before);
        // A non-preemptible victim after a good one, and an unknown node.
        assert!(matches!(
            state.try_decision(&[JobId(2), JobId(1)], &[]),
            Err(DecisionFault::Victim(1, StateError::NotPreemptible(_)))
        ));
        assert_eq!(fingerprint(&state), before);
        assert!(matches!(
            state.try_decision(&[], &[(&new, &on(7, vec![0, 1]))]),
            Err(DecisionFault::Placement(0, _))
        ));
        assert_eq!(fingerprint(&state), before);
        state.check_invariants().unwrap();
        // And the state still works: the decision applied for real.
        state.preempt(JobId(0)).unwrap();
        state.allocate(&new, ok).unwrap();
        state.check_invariants().unwrap();
    }

    /// A job of the proptests: `tasks` alike tasks of `gpus` GPUs at `milli` each.
    fn shaped(id: u32, tasks: u32, gpus: u32, milli: u32, preemptible: bool) -> JobSpec {
        let mut j = job(
            &format!("j{id}"),
            0,
            TaskRequest {
                gpus,
                gpu_milli: if gpus == 0 { 0 } else { milli },
                cpu_milli: 1000 * u64::from(gpus.max(1)),
                mem_mib: 1024,
            },
        );
        j.id = JobId(id);
        j.tasks = tasks;
        j.preemptible = preemptible;
        j
    }

    proptest::proptest! {
        /// Over random states and random decisions (victims that run or not, twice, or
        /// that may not be preempted; placements of running, repeated or unknown jobs, wrong
        /// task counts, unknown nodes and GPUs, double-booked GPUs), the check answers
        /// exactly what preempting and allocating on a copy answers, and changes nothing.
        #[test]
        fn a_tried_decision_answers_as_the_decision_applied_to_a_copy(
            running in proptest::collection::vec(
                (0u32..3, 0u32..3, proptest::bool::ANY, proptest::collection::vec(0u8..4, 0..3)),
                0..8,
            ),
            victims in proptest::collection::vec(0u32..14, 0..4),
            placements in proptest::collection::vec(
                (0u32..14, 0u32..6, proptest::collection::vec(0u8..5, 0..3), 1u32..3, 0u32..3, 0u32..2),
                0..6,
            ),
        ) {
            let mut state = ClusterState::new(Arc::new(uniform(3, 4, "V100", 32_000, 262_144)));
            let mut jobs: Vec<JobSpec> = Vec::new();
            for (i, (node, gpus, preemptible, g)) in running.into_iter().enumerate() {
                let id = i as u32;
                let j = shaped(id, 1, gpus, 1000, preemptible);
                let placement = vec![TaskPlacement {
                    node: NodeId(node),
                    gpus: g.into_iter().take(gpus as usize).collect(),
                }];
                // Only what fits runs; the rest stays a job the decision may name.
                let _ = state.allocate(&j, placement);
                jobs.push(j);
            }
            let specs: Vec<JobSpec> = placements
                .iter()
                .map(|(id, _, _, tasks, gpus, half)| {
                    let milli = if *half == 1 && *gpus == 1 { 500 } else { 1000 };
                    shaped(*id, *tasks, *gpus, milli, true)
                })
                .collect();
            let tasks: Vec<Vec<TaskPlacement>> = placements
                .iter()
                .map(|(_, node, g, tasks, _, _)| {
                    (0..*tasks)
                        .map(|k| TaskPlacement {
                            node: NodeId((*node + k) % 7),
                            gpus: g.clone(),
                        })
                        .collect()
                })
                .collect();
            let decision: Vec<(&JobSpec, &[TaskPlacement])> =
                specs.iter().zip(&tasks).map(|(j, t)| (j, t.as_slice())).collect();
            let victims: Vec<JobId> = victims.into_iter().map(JobId).collect();

            let mut copy = state.clone();
            let mut want = Ok(());
            for (i, v) in victims.iter().enumerate() {
                if let Err(e) = copy.preempt(*v) {
                    want = Err(DecisionFault::Victim(i, e));
                    break;
                }
            }
            if want.is_ok() {
                for (i, (j, t)) in decision.iter().enumerate() {
                    if let Err(e) = copy.allocate(j, t.to_vec()) {
                        want = Err(DecisionFault::Placement(i, e));
                        break;
                    }
                }
            }
            let before = fingerprint(&state);
            proptest::prop_assert_eq!(state.try_decision(&victims, &decision), want);
            proptest::prop_assert_eq!(fingerprint(&state), before);
            proptest::prop_assert!(state.check_invariants().is_ok());
        }
    }
}

#[cfg(test)]
mod lazy_cpu_order_tests {
    use super::*;
    use crate::cluster::FitStrategy;
    use crate::cluster::tests::uniform;
    use crate::job::tests::job;

    /// The CPU-only order is built on the first CPU-only query and kept up to date after:
    /// placements asked before, between and after match a state built afresh.
    #[test]
    fn cpu_only_placements_see_every_change_before_and_after_their_order_is_built() {
        let spec = Arc::new(uniform(4, 4, "V100", 32_000, 262_144));
        let mut state = ClusterState::new(Arc::clone(&spec));
        let mut placed: Vec<(JobSpec, Vec<TaskPlacement>)> = Vec::new();
        let mut next = 0u32;
        let mut run = |state: &mut ClusterState, gpus: u32, cpu: u64| {
            let mut j = job(&format!("j{next}"), 0, TaskRequest::whole(gpus, cpu, 1024));
            j.id = JobId(next);
            next += 1;
            let tasks = state.find_job_placement(&j, FitStrategy::BestFit).unwrap();
            state.allocate(&j, tasks.clone()).unwrap();
            (j, tasks)
        };
        let cpu_only = job("c", 0, TaskRequest::whole(0, 6_000, 1024));
        let fresh = |placed: &[(JobSpec, Vec<TaskPlacement>)]| {
            let mut s = ClusterState::new(Arc::clone(&spec));
            s.allocate_many(placed.iter().map(|(j, t)| (j, t.clone())))
                .unwrap();
            s
        };
        // GPU jobs change CPU before any CPU-only query.
        for (g, c) in [(2, 20_000), (1, 4_000), (4, 30_000)] {
            placed.push(run(&mut state, g, c));
        }
        let want = fresh(&placed).find_job_placement(&cpu_only, FitStrategy::BestFit);
        assert_eq!(
            state.find_job_placement(&cpu_only, FitStrategy::BestFit),
            want
        );
        state.check_invariants().unwrap();
        // Changes after the order exists, releases included.
        placed.push(run(&mut state, 1, 10_000));
        let (gone, _) = placed.remove(0);
        state.release(gone.id).unwrap();
        placed.push(run(&mut state, 0, 9_000));
        state.check_invariants().unwrap();
        let want = fresh(&placed).find_job_placement(&cpu_only, FitStrategy::BestFit);
        assert_eq!(
            state.find_job_placement(&cpu_only, FitStrategy::BestFit),
            want
        );
        let want = fresh(&placed).find_job_placement(&cpu_only, FitStrategy::WorstFit);
        assert_eq!(
            state.find_job_placement(&cpu_only, FitStrategy::WorstFit),
            want
        );
    }
}
