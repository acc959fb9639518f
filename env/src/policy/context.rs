//! `DecisionContext`: what a real scheduler knows when it decides, and nothing more.

use super::planner::Planner;
use crate::cluster::ClusterState;
use crate::job::JobSpec;
use crate::units::{JobId, SimTime};
use std::cell::{Ref, RefCell};
use std::collections::BTreeSet;

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JobState {
    #[default]
    NotArrived,
    Pending,
    Running,
    Finished,
    /// Never admitted: it cannot fit the cluster (reported, skipped on request).
    Rejected,
}

/// What the scheduler has observed of a job so far (no true duration).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobRuntime {
    pub state: JobState,
    /// When the job first started, if it has.
    pub first_start: Option<SimTime>,
    /// When its current run started (while running).
    pub run_start: Option<SimTime>,
    /// Wall time run before the current run, ms (attained service, as Tiresias counts it).
    pub attained_ms: u64,
    /// GPU-time attained before the current run, milli-GPU x ms.
    pub attained_gpu_milli_ms: u128,
    pub preemptions: u32,
    /// When its last run ended (it was preempted), if it has run.
    pub last_stop: Option<SimTime>,
}

/// A pending job as a policy sees it.
#[derive(Debug, Clone, Copy)]
pub struct PendingJob<'a> {
    pub spec: &'a JobSpec,
    pub runtime: &'a JobRuntime,
    /// Time since submission.
    pub waited: SimTime,
}

impl PendingJob<'_> {
    /// Time since its last run ended, or since submission if it never ran.
    pub fn idle(&self) -> SimTime {
        let now = self.spec.submit.saturating_add(self.waited);
        self.runtime
            .last_stop
            .map_or(self.waited, |t| now.saturating_sub(t))
    }
}

/// The state of the world at a decision point.
#[derive(Debug)]
pub struct DecisionContext<'a> {
    now: SimTime,
    jobs: &'a [JobSpec],
    runtime: &'a [JobRuntime],
    pending: &'a BTreeSet<JobId>,
    cluster: &'a RefCell<ClusterState>,
    finished: &'a [JobId],
}

impl<'a> DecisionContext<'a> {
    /// `jobs` and `runtime` are indexed by `JobId`; `pending` holds the queued jobs' ids (job
    /// ids follow submit order, so the set iterates in submit order).
    pub fn new(
        now: SimTime,
        jobs: &'a [JobSpec],
        runtime: &'a [JobRuntime],
        pending: &'a BTreeSet<JobId>,
        cluster: &'a RefCell<ClusterState>,
    ) -> Self {
        DecisionContext {
            now,
            jobs,
            runtime,
            pending,
            cluster,
            finished: &[],
        }
    }
    /// The jobs that finished since the previous decision (what a scheduler sees complete; their
    /// observed run time is `attained_ms`). Learned duration predictors feed on these.
    pub fn with_recently_finished(mut self, finished: &'a [JobId]) -> Self {
        self.finished = finished;
        self
    }
    pub fn recently_finished(&self) -> &'a [JobId] {
        self.finished
    }
    pub fn now(&self) -> SimTime {
        self.now
    }
    /// Pending jobs in submit order.
    pub fn pending(&self) -> impl DoubleEndedIterator<Item = PendingJob<'a>> + 'a {
        let (jobs, runtime, now) = (self.jobs, self.runtime, self.now);
        self.pending.iter().map(move |id| PendingJob {
            spec: &jobs[id.index()],
            runtime: &runtime[id.index()],
            waited: now.saturating_sub(jobs[id.index()].submit),
        })
    }
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }
    pub fn job(&self, id: JobId) -> &'a JobSpec {
        &self.jobs[id.index()]
    }
    pub fn runtime(&self, id: JobId) -> &'a JobRuntime {
        &self.runtime[id.index()]
    }
    /// Wall time the job has run so far, current run included, ms.
    pub fn attained_ms(&self, id: JobId) -> u64 {
        let r = self.runtime(id);
        r.attained_ms + r.run_start.map_or(0, |s| self.now.saturating_sub(s).ms())
    }
    /// The cluster as it is (read-only).
    pub fn cluster(&self) -> Ref<'_, ClusterState> {
        self.cluster.borrow()
    }
    /// A scratch view of the cluster for building a decision: tentative placements made
    /// through it are seen by later queries and undone when it is dropped.
    ///
    /// # Panics
    /// If another planner or cluster borrow from this context is alive.
    pub fn planner(&self) -> Planner<'_> {
        Planner::new(self.cluster.borrow_mut())
    }
}
