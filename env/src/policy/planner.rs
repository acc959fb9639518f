//! `Planner`: tentative placements and preemptions on the live cluster, undone on drop.
//!
//! A policy builds a decision of many jobs; each choice must see the ones before it. Rather
//! than copying the cluster (O(nodes) per decision), the planner applies each choice to the
//! state with its index and keeps a journal to roll back, so a decision costs O(k log n).

use crate::cluster::{ClusterState, FitStrategy, Infeasible, TaskPlacement};
use crate::job::{JobSpec, TaskRequest};
use crate::units::JobId;
use std::cell::RefMut;

enum Entry {
    Took(TaskRequest, TaskPlacement),
    Freed(JobId),
}

/// A point in a planner's journal to roll back to (see `Planner::mark`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanMark(usize);

pub struct Planner<'a> {
    state: RefMut<'a, ClusterState>,
    journal: Vec<Entry>,
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
    pub fn reserve(&mut self, job: &JobSpec, tasks: &[TaskPlacement]) -> Result<(), Infeasible> {
        let mask = self.state.spec().model_mask(&job.gpu_types);
        let mark = self.mark();
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
        let already = self
            .journal
            .iter()
            .any(|e| matches!(e, Entry::Freed(j) if *j == job));
        let Some(alloc) = self.state.allocation(job).cloned() else {
            return false;
        };
        if already {
            return false;
        }
        for t in &alloc.tasks {
            self.state.give_back_task(&alloc.task, t);
        }
        self.journal.push(Entry::Freed(job));
        true
    }

    /// The current point of the plan, to undo everything after it with `rollback_to` (a
    /// placer that reserves a gang task by task and then finds a task without room).
    pub fn mark(&self) -> PlanMark {
        PlanMark(self.journal.len())
    }

    /// Undoes every tentative change made since `mark`, latest first.
    pub fn rollback_to(&mut self, mark: PlanMark) {
        while self.journal.len() > mark.0 {
            match self.journal.pop().expect("journal longer than mark") {
                Entry::Took(task, t) => self.state.give_back_task(&task, &t),
                Entry::Freed(job) => {
                    let alloc = self
                        .state
                        .allocation(job)
                        .cloned()
                        .expect("freed job still running");
                    for t in &alloc.tasks {
                        self.state
                            .take_task(&alloc.task, u64::MAX, t)
                            .expect("re-taking what this planner freed fits");
                    }
                }
            }
        }
    }
}

impl Drop for Planner<'_> {
    fn drop(&mut self) {
        self.rollback_to(PlanMark(0));
    }
}
