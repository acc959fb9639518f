//! `Planner`: tentative placements and preemptions on the live cluster, undone on drop.
//!
//! A policy builds a decision of many jobs; each choice must see the ones before it. Rather
//! than copying the cluster (O(nodes) per decision), the planner applies each choice to the
//! state with its index and keeps a journal to roll back, so a decision costs O(k log n).

use crate::cluster::{ClusterState, FitStrategy, Infeasible, NodeMask, TaskPlacement};
use crate::job::{JobSpec, TaskRequest};
use crate::units::JobId;
use std::cell::RefMut;
use std::collections::HashSet;

enum Entry {
    Took(TaskRequest, TaskPlacement),
    Freed(JobId),
    Retook(JobId),
    Gave(TaskRequest, TaskPlacement),
}

/// A point in a planner's journal to come back to with [`Planner::undo_to`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanMark(usize);

pub struct Planner<'a> {
    state: RefMut<'a, ClusterState>,
    journal: Vec<Entry>,
    /// The jobs the journal holds as `Freed` (victim searches free hundreds: no journal scan).
    /// Only asked and changed, never walked: a fixed fast hash is as good as any.
    freed: HashSet<JobId, foldhash::fast::FixedState>,
}

impl std::fmt::Debug for Planner<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Planner")
            .field("entries", &self.journal.len())
            .finish()
    }
}

impl<'a> Planner<'a> {
    pub(crate) fn new(state: RefMut<'a, ClusterState>) -> Self {
        Planner {
            state,
            journal: Vec::new(),
            freed: HashSet::default(),
        }
    }

    /// The cluster with this planner's tentative changes applied.
    pub fn state(&self) -> &ClusterState {
        &self.state
    }

    /// Tentatively places every task of `job` by `strategy`; `None` (and nothing changed) when
    /// they do not all fit.
    pub fn place(&mut self, job: &JobSpec, strategy: FitStrategy) -> Option<Vec<TaskPlacement>> {
        let tasks = self.state.find_job_placement(job, strategy)?;
        self.reserve(job, &tasks)
            .expect("a placement just found fits");
        Some(tasks)
    }

    /// Tentatively takes the given placement (for placers with their own node choice).
    /// Checked as `ClusterState::allocate` checks it, distinct nodes included.
    pub fn reserve(&mut self, job: &JobSpec, tasks: &[TaskPlacement]) -> Result<(), Infeasible> {
        if job.constraints.distinct_nodes
            && let Some(i) =
                (1..tasks.len()).find(|i| tasks[..*i].iter().any(|t| t.node == tasks[*i].node))
        {
            return Err(Infeasible::SameNode {
                node: tasks[i].node,
            });
        }
        self.reserve_tasks(job, tasks)
    }

    /// One more task of a gang being placed task by task (whose caller keeps its nodes
    /// distinct where the job needs it).
    pub(crate) fn reserve_task(
        &mut self,
        job: &JobSpec,
        t: &TaskPlacement,
    ) -> Result<(), Infeasible> {
        self.reserve_tasks(job, std::slice::from_ref(t))
    }

    /// Hides `node` from node searches until `clear_excluded` (a distinct-nodes gang's).
    pub(crate) fn exclude_node(&mut self, node: crate::units::NodeId) {
        self.state.exclude_node(node);
    }
    pub(crate) fn clear_excluded(&mut self) {
        self.state.clear_excluded();
    }

    fn reserve_tasks(&mut self, job: &JobSpec, tasks: &[TaskPlacement]) -> Result<(), Infeasible> {
        let mask = self.state.spec().job_mask(job);
        let mark = self.journal.len();
        for t in tasks {
            if let Err(e) = self.state.take_task(&job.task, mask, t) {
                self.rollback_to(mark);
                return Err(e);
            }
            self.journal.push(Entry::Took(job.task, t.clone()));
        }
        Ok(())
    }

    /// Tentatively frees a running job's resources, to plan what a preemption would allow.
    /// `false` if the job is not running or was already freed here.
    pub fn free_running(&mut self, job: JobId) -> bool {
        if self.freed.contains(&job) || !self.state.give_back_job(job) {
            return false;
        }
        self.freed.insert(job);
        self.journal.push(Entry::Freed(job));
        true
    }

    /// Frees the GPU that running `a` and `b` share, once this planner has freed both
    /// (`free_running` leaves a shared GPU taken: the partner still holds it); `false`, and
    /// nothing changed, unless both are freed here and are the GPU's only two holders. Not to
    /// be followed by `retake` of either (undo with `undo_to`).
    pub fn free_shared_gpu(&mut self, a: JobId, b: JobId) -> bool {
        if !(self.freed.contains(&a) && self.freed.contains(&b)) {
            return false;
        }
        let Some(t) = self
            .state
            .allocation(a)
            .and_then(|alloc| alloc.tasks.first().cloned())
        else {
            return false;
        };
        let Some(&gpu) = t.gpus.first() else {
            return false;
        };
        let mut holders: Vec<JobId> = self
            .state
            .gpu_holders(t.node, gpu)
            .iter()
            .map(|h| h.job)
            .collect();
        holders.sort();
        let mut pair = [a, b];
        pair.sort();
        if holders != pair {
            return false;
        }
        // The GPU's capacity alone: each job's CPU and memory came back with it.
        let gpu_only = TaskRequest::whole(1, 0, 0);
        let one = TaskPlacement {
            node: t.node,
            gpus: vec![gpu],
        };
        self.state.give_back_task(&gpu_only, &one);
        self.journal.push(Entry::Gave(gpu_only, one));
        true
    }

    /// Whether this planner has freed `job` (and not taken it back).
    pub fn has_freed(&self, job: JobId) -> bool {
        self.freed.contains(&job)
    }

    /// Takes back the resources of a job this planner freed (out of journal order, to try the
    /// sets that spare one victim without freeing the others again); undone like any change.
    /// `false` if the job is not freed here.
    pub fn retake(&mut self, job: JobId) -> bool {
        if !self.freed.remove(&job) {
            return false;
        }
        self.state.retake_job(job);
        self.journal.push(Entry::Retook(job));
        true
    }

    /// Tentatively gives back a placement reserved through this planner earlier in this
    /// decision, to plan past that job's end (EASY's shadow time). `tasks` must be a placement
    /// this planner reserved for `job` and still holds.
    pub fn unreserve(&mut self, job: &JobSpec, tasks: &[TaskPlacement]) {
        for t in tasks {
            self.state.give_back_task(&job.task, t);
            self.journal.push(Entry::Gave(job.task, t.clone()));
        }
    }

    /// Where the journal is now: `undo_to` this mark undoes every later change.
    pub fn mark(&self) -> PlanMark {
        PlanMark(self.journal.len())
    }

    /// Undoes every tentative change made since `mark` (what-if planning: try, then undo).
    pub fn undo_to(&mut self, mark: PlanMark) {
        self.rollback_to(mark.0);
    }

    fn rollback_to(&mut self, mark: usize) {
        while self.journal.len() > mark {
            match self.journal.pop().expect("journal longer than mark") {
                Entry::Took(task, t) => self.state.give_back_task(&task, &t),
                Entry::Gave(task, t) => self
                    .state
                    .take_task(&task, NodeMask::ANY, &t)
                    .expect("re-taking what this planner gave back fits"),
                Entry::Freed(job) => {
                    self.freed.remove(&job);
                    self.state.retake_job(job);
                }
                Entry::Retook(job) => {
                    self.freed.insert(job);
                    self.state.give_back_job(job);
                }
            }
        }
    }
}

impl Drop for Planner<'_> {
    fn drop(&mut self) {
        self.rollback_to(0);
    }
}
