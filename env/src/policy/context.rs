//! `DecisionContext`: what a real scheduler knows when it decides, and nothing more.

use super::lookahead::Lookahead;
use super::planner::Planner;
use super::view::ThroughputView;
use crate::cluster::ClusterState;
use crate::job::JobSpec;
use crate::quota::{Admission, Blocked};
use crate::units::{GpuModelId, JobId, SimTime};
use std::cell::{Ref, RefCell};
use std::collections::BTreeSet;
use std::sync::Arc;

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
    /// A job that waited for others (`crate::deps`): when its dependency was satisfied and
    /// it became pending. `None` for a job without one: pending from its submit.
    pub ready: Option<SimTime>,
}

impl JobRuntime {
    /// When the job became pending for the first time: its submit, or when its dependency
    /// was satisfied.
    pub fn pending_since(&self, spec: &JobSpec) -> SimTime {
        self.ready.unwrap_or(spec.submit)
    }
}

/// What a preemption costs on this cluster, as its operators configured it (a scheduler knows
/// its own checkpoint policy): the restart overhead a preempted job pays when it starts again,
/// and the interval at which running jobs checkpoint (`None`: never; a preempted job starts
/// over). The simulator passes its `SimConfig`'s; elsewhere the simulator's defaults serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartCost {
    pub overhead: SimTime,
    pub checkpoint: Option<SimTime>,
}

impl Default for RestartCost {
    /// The simulator's defaults: 60 s to restart, a checkpoint every 30 min.
    fn default() -> Self {
        RestartCost {
            overhead: SimTime::from_secs(60),
            checkpoint: Some(SimTime::from_secs(1800)),
        }
    }
}

impl RestartCost {
    /// Wall time a job that runs now would lose if preempted now, ms: its run since the last
    /// checkpoint (all it has attained where nothing checkpoints), the restart overhead its
    /// current run has spent (if it was restarted), and the overhead of its next start. As
    /// the simulator counts waste; 0 for a job not running.
    pub fn waste_ms(&self, rt: &JobRuntime, now: SimTime) -> u64 {
        let Some(start) = rt.run_start else {
            return 0;
        };
        let elapsed = now.saturating_sub(start).ms();
        let spent = if rt.preemptions > 0 {
            self.overhead.ms().min(elapsed)
        } else {
            0
        };
        let productive = elapsed - spent;
        let lost = match self.checkpoint {
            Some(iv) if iv.ms() > 0 => productive % iv.ms(),
            _ => rt.attained_ms + productive,
        };
        spent + lost + self.overhead.ms()
    }
}

/// A pending job as a policy sees it.
#[derive(Debug, Clone, Copy)]
pub struct PendingJob<'a> {
    pub spec: &'a JobSpec,
    pub runtime: &'a JobRuntime,
    /// Time since submission, or since its dependency was satisfied for a job that waited
    /// for others ([`JobRuntime::pending_since`]).
    pub waited: SimTime,
}

impl PendingJob<'_> {
    /// Time since its last run ended, or since submission if it never ran.
    pub fn idle(&self) -> SimTime {
        let now = self
            .runtime
            .pending_since(self.spec)
            .saturating_add(self.waited);
        self.runtime
            .last_stop
            .map_or(self.waited, |t| now.saturating_sub(t))
    }
}

/// The state of the world at a decision point.
#[derive(Clone)]
pub struct DecisionContext<'a> {
    now: SimTime,
    jobs: &'a [JobSpec],
    runtime: &'a [JobRuntime],
    pending: &'a BTreeSet<JobId>,
    cluster: &'a RefCell<ClusterState>,
    finished: &'a [JobId],
    throughputs: Option<&'a Arc<ThroughputView>>,
    restart: RestartCost,
    lookahead: Option<&'a dyn Lookahead>,
    quota: Option<&'a Admission>,
}

impl std::fmt::Debug for DecisionContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecisionContext")
            .field("now", &self.now)
            .field("pending", &self.pending.len())
            .field("finished", &self.finished.len())
            .field("lookahead", &self.lookahead.is_some())
            .finish()
    }
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
            throughputs: None,
            restart: RestartCost::default(),
            lookahead: None,
            quota: None,
        }
    }
    /// The run's quota admission (`SimConfig::quotas`; `None`: no quotas). Whatever a policy
    /// decides, the simulator refuses starts a job's queue cannot admit.
    pub fn with_quota(mut self, quota: Option<&'a Admission>) -> Self {
        self.quota = quota;
        self
    }
    pub fn quota(&self) -> Option<&'a Admission> {
        self.quota
    }
    /// Whether pending `id`'s queue admits its whole request now on some GPU model it may use
    /// (`Admission::admits`); otherwise the quota that blocks it. Always admitted without
    /// quotas. Safe to call while a planner is alive (it reads no cluster state).
    pub fn admits(&self, id: JobId) -> Result<(), Blocked> {
        self.quota.map_or(Ok(()), |q| q.admits(self.job(id)))
    }
    /// The world to roll forward from here, where there is one (the simulator; `None` in the
    /// service and wherever the state is only a snapshot).
    pub fn with_lookahead(mut self, world: Option<&'a dyn Lookahead>) -> Self {
        self.lookahead = world;
        self
    }
    pub fn lookahead(&self) -> Option<&'a dyn Lookahead> {
        self.lookahead
    }
    /// What a preemption costs on this cluster (default: the simulator's defaults).
    pub fn with_restart_cost(mut self, restart: RestartCost) -> Self {
        self.restart = restart;
        self
    }
    pub fn restart_cost(&self) -> RestartCost {
        self.restart
    }
    /// The run's throughput table as profiling tells a scheduler (`None`: no table, every
    /// job at catalog speed). Policies read typed jobs' speeds through it, never durations.
    pub fn with_throughputs(mut self, view: Option<&'a Arc<ThroughputView>>) -> Self {
        self.throughputs = view;
        self
    }
    /// The throughput view, shared (a placer keeps it from `observe` to `place`).
    pub fn throughputs(&self) -> Option<&'a Arc<ThroughputView>> {
        self.throughputs
    }
    /// Typed job `id`'s table speed on `gpus` GPUs of cluster GPU model `model`, consolidated
    /// ([`ThroughputView::speed`]); `None` for untyped jobs, runs without a table, or no entry.
    pub fn speed(&self, id: JobId, model: GpuModelId, gpus: u32) -> Option<f64> {
        self.throughputs?.speed(self.job(id), model, gpus)
    }
    /// The cluster GPU model where typed job `id` runs fastest at its size, with that speed
    /// ([`ThroughputView::best_model`]); `None` for untyped jobs or runs without a table.
    pub fn best_model(&self, id: JobId) -> Option<(GpuModelId, f64)> {
        self.throughputs?.best_model(self.job(id))
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
            waited: now.saturating_sub(runtime[id.index()].pending_since(&jobs[id.index()])),
        })
    }
    /// Pending jobs with id `first` or above, in submit order: for a caller that has already
    /// seen every job below `first` and only looks for new ones.
    pub fn pending_from(
        &self,
        first: JobId,
    ) -> impl DoubleEndedIterator<Item = PendingJob<'a>> + 'a {
        let (jobs, runtime, now) = (self.jobs, self.runtime, self.now);
        self.pending.range(first..).map(move |id| PendingJob {
            spec: &jobs[id.index()],
            runtime: &runtime[id.index()],
            waited: now.saturating_sub(runtime[id.index()].pending_since(&jobs[id.index()])),
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

/// The first id at or after `from` that `seen` does not hold: every id below it is seen.
pub(crate) fn seen_below(seen: &[bool], from: u32) -> u32 {
    let start = from as usize;
    let run = seen
        .get(start..)
        .map_or(0, |rest| rest.iter().take_while(|s| **s).count());
    from.saturating_add(u32::try_from(run).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::tests::uniform;
    use crate::job::TaskRequest;
    use crate::job::tests::job;
    use std::sync::Arc;

    #[test]
    fn seen_below_is_the_first_unseen_id_from_where_it_was() {
        let seen = [true, true, false, true, true];
        assert_eq!(seen_below(&seen, 0), 2);
        assert_eq!(seen_below(&seen, 2), 2);
        assert_eq!(seen_below(&seen, 3), 5);
        assert_eq!(seen_below(&seen, 5), 5);
        assert_eq!(seen_below(&seen, 9), 9);
        assert_eq!(seen_below(&[], 0), 0);
    }

    #[test]
    fn pending_from_is_the_tail_of_the_queue() {
        let jobs: Vec<JobSpec> = (0..6)
            .map(|i| {
                let mut j = job(&format!("j{i}"), i, TaskRequest::whole(1, 1000, 1024));
                j.id = JobId(i as u32);
                j
            })
            .collect();
        let runtime = vec![JobRuntime::default(); 6];
        let pending: BTreeSet<JobId> = [1, 3, 4].into_iter().map(JobId).collect();
        let cluster = RefCell::new(ClusterState::new(Arc::new(uniform(
            1, 8, "V100", 8000, 1024,
        ))));
        let ctx = DecisionContext::new(SimTime::from_secs(10), &jobs, &runtime, &pending, &cluster);
        let ids = |from: u32| -> Vec<(u32, SimTime)> {
            ctx.pending_from(JobId(from))
                .map(|p| (p.spec.id.0, p.waited))
                .collect()
        };
        let all: Vec<(u32, SimTime)> = ctx.pending().map(|p| (p.spec.id.0, p.waited)).collect();
        assert_eq!(ids(0), all);
        assert_eq!(ids(2), all[1..]);
        assert_eq!(ids(4), all[2..]);
        assert!(ids(5).is_empty());
    }
}
