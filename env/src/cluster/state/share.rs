//! GPU sharing and elastic resizing in `ClusterState`: two jobs on one GPU
//! (`allocate_shared`), and a running elastic job moved to another set of tasks (`resize`).
//!
//! Resource rules only. Whether two workloads may share, and how fast they then run, is the
//! throughput table's business (`crate::sim`); this module only keeps the books right: a
//! shared GPU holds exactly two jobs, both 1-task, 1-GPU, whole-GPU jobs; its capacity is taken
//! once; the second job takes its own CPU and memory on the node.

use super::{Allocation, ClusterState, StateError, TaskPlacement};
use crate::cluster::Infeasible;
use crate::job::JobSpec;
use crate::units::{GPU_MILLI, JobId, NodeId};

/// Why a job may not join a GPU (`ClusterState::allocate_shared`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShareRefusal {
    #[error("only a 1-task job on 1 whole GPU may share a GPU")]
    NotOneGpu,
    #[error("the share names {tasks} task(s) and {gpus} GPU(s), not 1 task on 1 GPU")]
    WrongShape { tasks: usize, gpus: usize },
    #[error("GPU {gpu} on node {node} is not used by exactly one job ({holders} hold it)")]
    NoPartner {
        node: NodeId,
        gpu: u8,
        holders: usize,
    },
    #[error("GPU {gpu} on node {node} is used by job {partner}, not a 1-task, 1-GPU job")]
    PartnerNotOneGpu {
        node: NodeId,
        gpu: u8,
        partner: JobId,
    },
    #[error("GPU {gpu} on node {node} already holds two jobs")]
    Full { node: NodeId, gpu: u8 },
}

/// Why a running job may not be resized (`ClusterState::resize`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResizeRefusal {
    #[error("it is a rigid gang (no min_gpus..max_gpus)")]
    Rigid,
    #[error("it shares a GPU")]
    Shared,
    #[error("{gpus} GPUs are outside its min_gpus..=max_gpus {min}..={max}")]
    OutOfRange { gpus: u64, min: u32, max: u32 },
}

impl ClusterState {
    /// Starts `job` on the one GPU named by `tasks` (one task, one GPU), which exactly one
    /// running job uses alone: GPU sharing. Both must be 1-task jobs asking for 1 whole GPU
    /// (no gangs, no fractional jobs); the GPU's model and node must be allowed to `job`; the
    /// node must have `job`'s CPU and memory free (the GPU's capacity is already taken, by the
    /// partner). Returns the partner. A refusal changes nothing.
    pub fn allocate_shared(
        &mut self,
        job: &JobSpec,
        tasks: Vec<TaskPlacement>,
    ) -> Result<JobId, StateError> {
        let refuse = |why| StateError::Share { job: job.id, why };
        let infeasible = |reason| StateError::Infeasible {
            job: job.id,
            reason,
        };
        if self.running.contains_key(&job.id) {
            return Err(StateError::AlreadyRunning(job.id));
        }
        if !one_whole_gpu(job.tasks, &job.task) {
            return Err(refuse(ShareRefusal::NotOneGpu));
        }
        let [t] = tasks.as_slice() else {
            return Err(refuse(ShareRefusal::WrongShape {
                tasks: tasks.len(),
                gpus: tasks.iter().map(|t| t.gpus.len()).sum(),
            }));
        };
        let (node, &[gpu]) = (t.node, t.gpus.as_slice()) else {
            return Err(refuse(ShareRefusal::WrongShape {
                tasks: 1,
                gpus: t.gpus.len(),
            }));
        };
        let Some(spec) = self.spec.nodes.get(node.index()) else {
            return Err(infeasible(Infeasible::UnknownNode(node)));
        };
        if u32::from(gpu) >= spec.gpus {
            return Err(infeasible(Infeasible::NoSuchGpu { node, gpu }));
        }
        let mask = self.spec.job_mask(job);
        if !spec.gpu_model.is_some_and(|m| mask.allows_model(m)) {
            return Err(infeasible(Infeasible::ModelNotAllowed { node }));
        }
        if mask.classes & (1u64 << self.spec.node_class(node)) == 0 {
            return Err(infeasible(Infeasible::LabelsNotMatched { node }));
        }
        let global = self.gpu_offset[node.index()] + u32::from(gpu);
        if self.shared.contains_key(&global) {
            return Err(refuse(ShareRefusal::Full { node, gpu }));
        }
        let holders: Vec<&Allocation> = self.gpu_holders(node, gpu);
        let partner = match holders.as_slice() {
            [a] if one_whole_gpu(a.tasks.len() as u32, &a.task) => a.job,
            [a] => {
                return Err(refuse(ShareRefusal::PartnerNotOneGpu {
                    node,
                    gpu,
                    partner: a.job,
                }));
            }
            _ => {
                return Err(refuse(ShareRefusal::NoPartner {
                    node,
                    gpu,
                    holders: holders.len(),
                }));
            }
        };
        self.check_host(&job.task, node).map_err(infeasible)?;
        self.take_host(&job.task, node);
        self.shared.insert(global, [partner, job.id]);
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
        Ok(partner)
    }

    /// Moves running elastic `job` to `tasks` (any count of its tasks within its
    /// `min_gpus..=max_gpus`), or changes nothing. Its old tasks are freed first, so the new
    /// ones may reuse their GPUs. Refused for rigid jobs, jobs not preemptible (a resize
    /// restarts the job), jobs sharing a GPU, and sizes out of range. Returns the old
    /// allocation.
    pub fn resize(
        &mut self,
        job: &JobSpec,
        tasks: Vec<TaskPlacement>,
    ) -> Result<Allocation, StateError> {
        let refuse = |why| StateError::Resize { job: job.id, why };
        let Some(old) = self.running.get(&job.id) else {
            return Err(StateError::NotRunning(job.id));
        };
        let Some(elastic) = job.elastic else {
            return Err(refuse(ResizeRefusal::Rigid));
        };
        if !old.preemptible {
            return Err(StateError::NotPreemptible(job.id));
        }
        if self.shared_gpu(old).is_some() {
            return Err(refuse(ResizeRefusal::Shared));
        }
        let gpus = tasks.len() as u64 * u64::from(job.task.gpus);
        if !elastic.admits(gpus) {
            return Err(refuse(ResizeRefusal::OutOfRange {
                gpus,
                min: elastic.min_gpus,
                max: elastic.max_gpus,
            }));
        }
        let old = self.running.remove(&job.id).expect("checked running above");
        for t in old.tasks.iter() {
            self.give_back_task(&old.task, t);
        }
        if let Err(e) = self.take_tasks(job, &tasks) {
            for t in old.tasks.iter() {
                self.take_task(&old.task, super::NodeMask::ANY, t)
                    .expect("re-taking what was just freed fits");
            }
            self.running.insert(job.id, old);
            return Err(e);
        }
        self.hint_holder(job.id, &old.task, &tasks);
        self.running.insert(
            job.id,
            Allocation {
                job: job.id,
                task: old.task,
                tasks: tasks.into(),
                preemptible: old.preemptible,
                elastic: old.elastic,
            },
        );
        Ok(old)
    }

    /// The job sharing a GPU with running `job`, if it shares one.
    pub fn co_tenant(&self, job: JobId) -> Option<JobId> {
        let a = self.running.get(&job)?;
        let gpu = self.shared_gpu(a)?;
        self.shared[&gpu].into_iter().find(|j| *j != job)
    }

    /// Whether running allocation `a` shares its GPU with another job (as
    /// [`Self::co_tenant`], without looking the job up again).
    pub fn shares_gpu(&self, a: &Allocation) -> bool {
        self.shared_gpu(a).is_some()
    }

    /// Every shared GPU: its node, its index there, and the two jobs on it (the first holder,
    /// then the one that joined), in node and GPU order.
    pub fn shared_gpus(&self) -> impl Iterator<Item = (NodeId, u8, [JobId; 2])> + '_ {
        self.shared.iter().map(|(global, pair)| {
            let node = self.gpu_offset.partition_point(|start| *start <= *global) - 1;
            let gpu = (*global - self.gpu_offset[node]) as u8;
            (NodeId(node as u32), gpu, *pair)
        })
    }

    /// The global index of the GPU running `a` shares with another job, if it does.
    pub(super) fn shared_gpu(&self, a: &Allocation) -> Option<u32> {
        self.shared_gpu_of(a.job, &a.tasks)
    }

    /// `shared_gpu` for job `job` on `tasks`.
    pub(super) fn shared_gpu_of(&self, job: JobId, tasks: &[TaskPlacement]) -> Option<u32> {
        if self.shared.is_empty() {
            return None;
        }
        let [t] = tasks else { return None };
        let [gpu] = t.gpus.as_slice() else {
            return None;
        };
        let global = self.gpu_offset.get(t.node.index())? + u32::from(*gpu);
        self.shared
            .get(&global)
            .filter(|pair| pair.contains(&job))
            .map(|_| global)
    }

    /// Why `node` cannot hold `task`'s CPU and memory now, if it cannot.
    fn check_host(&self, task: &crate::job::TaskRequest, node: NodeId) -> Result<(), Infeasible> {
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

    /// Takes `task`'s CPU and memory on `node` (checked by the caller), not its GPU.
    pub(super) fn take_host(&mut self, task: &crate::job::TaskRequest, node: NodeId) {
        self.cpu_free[node.index()] -= task.cpu_milli;
        self.mem_free[node.index()] -= task.mem_mib;
        self.allocated_cpu_milli += task.cpu_milli;
        if !self.index_deferred {
            self.index.update(node, self.compute_key(node));
        }
    }

    /// Returns what `take_host` took.
    pub(super) fn give_back_host(&mut self, task: &crate::job::TaskRequest, node: NodeId) {
        self.cpu_free[node.index()] += task.cpu_milli;
        self.mem_free[node.index()] += task.mem_mib;
        self.allocated_cpu_milli -= task.cpu_milli;
        let spec = self.spec.node(node);
        assert!(
            self.cpu_free[node.index()] <= spec.cpu_milli
                && self.mem_free[node.index()] <= spec.mem_mib,
            "node {node} freed above capacity"
        );
        if !self.index_deferred {
            self.index.update(node, self.compute_key(node));
        }
    }

    /// The shared-GPU books agree with the running jobs: each pair is two distinct running
    /// 1-task, 1-GPU whole-GPU jobs, both on that GPU, no job in two pairs, and the GPU's
    /// capacity is fully taken.
    pub(super) fn check_shared(&self) -> Result<(), String> {
        let mut seen = std::collections::BTreeSet::new();
        for (node, gpu, pair) in self.shared_gpus() {
            if pair[0] == pair[1] {
                return Err(format!(
                    "GPU {gpu} on node {node} is shared by job {} with itself",
                    pair[0]
                ));
            }
            for j in pair {
                let Some(a) = self.running.get(&j) else {
                    return Err(format!(
                        "GPU {gpu} on node {node} is shared by job {j}, which is not running"
                    ));
                };
                let on_it = a.tasks.len() == 1
                    && a.tasks[0].node == node
                    && a.tasks[0].gpus == [gpu]
                    && one_whole_gpu(1, &a.task);
                if !on_it {
                    return Err(format!(
                        "job {j} shares GPU {gpu} on node {node} but is not a 1-GPU job there"
                    ));
                }
                if !seen.insert(j) {
                    return Err(format!("job {j} shares more than one GPU"));
                }
            }
            if self.gpu_free(node)[gpu as usize] != 0 {
                return Err(format!("shared GPU {gpu} on node {node} has free capacity"));
            }
        }
        Ok(())
    }
}

/// Whether a job of `tasks` tasks of `task` is one task on one whole GPU: the only shape that
/// shares a GPU (Gavel's pair table measures 1-GPU jobs only).
fn one_whole_gpu(tasks: u32, task: &crate::job::TaskRequest) -> bool {
    tasks == 1 && task.gpus == 1 && task.gpu_milli == GPU_MILLI
}
