//! Heuristics as small parts: an `Ordering` (which pending job next) and a `Placer` (where its
//! tasks go), composed into a `Policy` by `Composite`. Modifiers (backfilling, preemption)
//! plug in at the same seams.

use super::context::DecisionContext;
use super::planner::Planner;
use super::{Decision, Placement, Policy, PolicyError};
use crate::cluster::{FitStrategy, TaskPlacement};
use crate::job::JobSpec;
use crate::quota::QuotaPlan;
use crate::units::JobId;

/// Decides which pending job is considered next.
pub trait Ordering: Send {
    fn name(&self) -> &str;
    /// Pending jobs in the order to try them. Called before the decision's planner is taken,
    /// so it may read `ctx.cluster()`, but the iterator it returns must not hold that borrow.
    fn order<'c>(
        &'c mut self,
        ctx: &'c DecisionContext<'_>,
    ) -> Box<dyn Iterator<Item = JobId> + 'c>;
    /// Whether a job that does not fit blocks the ones behind it (strict order, as FIFO
    /// without backfilling) rather than being skipped.
    fn blocks_on_failure(&self) -> bool;
}

/// Decides where a job's tasks go, tentatively, through the planner.
pub trait Placer: Send {
    fn name(&self) -> &str;
    /// Sees the decision point before any placement of the decision (a placer that learns
    /// from what the scheduler has seen, such as FGD's online task mix). Default: nothing.
    fn observe(&mut self, _ctx: &DecisionContext<'_>) {}
    fn place(&mut self, planner: &mut Planner<'_>, job: &JobSpec) -> Option<Vec<TaskPlacement>>;
    /// Whether this placer places every job whose tasks the free capacity can hold (it puts
    /// tasks one at a time, each on any node that can hold one, and never refuses a fit). The
    /// victim searches then count capacity (`Room`) instead of asking it for every candidate
    /// set; the count is exact for such a placer. Default: `false` (asked every time).
    fn complete(&self) -> bool {
        false
    }
}

/// Changes a decision after the ordering pass: backfilling more jobs, or preempting running
/// ones to place waiting ones. Works through the same planner, so it sees what the pass
/// placed.
pub trait Modifier: Send {
    fn name(&self) -> &str;
    /// How many jobs of `rest` [`Self::extend`] reads at this decision point, from its front:
    /// the pass collects no more than the largest count its modifiers want (a long queue is
    /// then not copied at every decision). Default: all of them.
    fn rest_wanted(&self, _ctx: &DecisionContext<'_>) -> usize {
        usize::MAX
    }
    /// Whether it acts when nobody waits ([`Policy::acts_without_queue`]). Default: `false`.
    fn acts_without_queue(&self) -> bool {
        false
    }
    /// `rest` holds the pending jobs the pass did not place, in the ordering's order (for a
    /// blocking ordering, the blocked head first and everything behind it), at least the first
    /// [`Self::rest_wanted`] of them.
    fn extend(
        &mut self,
        ctx: &DecisionContext<'_>,
        planner: &mut Planner<'_>,
        placer: &mut dyn Placer,
        rest: &[JobId],
        decision: &mut Decision,
    );
}

/// First come, first served, strictly: the oldest pending job goes first and, if it cannot be
/// placed, nobody behind it starts (no backfilling; that is the `easy` modifier's job).
#[derive(Debug, Default)]
pub struct Fifo;

impl Ordering for Fifo {
    fn name(&self) -> &str {
        "fifo"
    }
    fn order<'c>(
        &'c mut self,
        ctx: &'c DecisionContext<'_>,
    ) -> Box<dyn Iterator<Item = JobId> + 'c> {
        Box::new(ctx.pending().map(|p| p.spec.id))
    }
    fn blocks_on_failure(&self) -> bool {
        true
    }
}

/// Placement by one of the index-backed strategies (first-fit, best-fit, worst-fit).
#[derive(Debug, Clone)]
pub struct StrategyPlacer {
    name: &'static str,
    strategy: FitStrategy,
}

impl StrategyPlacer {
    pub fn new(name: &'static str, strategy: FitStrategy) -> Self {
        StrategyPlacer { name, strategy }
    }
}

impl Placer for StrategyPlacer {
    fn name(&self) -> &str {
        self.name
    }
    fn place(&mut self, planner: &mut Planner<'_>, job: &JobSpec) -> Option<Vec<TaskPlacement>> {
        planner.place(job, self.strategy)
    }
    fn complete(&self) -> bool {
        true
    }
}

/// A placer whose placements of typed jobs the simulator runs. Where the throughput table has
/// no rate for the placement the inner placer found (a gang of 1-GPU tasks spread over nodes
/// where the table rates its size on one node only, or a GPU model the table does not rate at
/// that size), the job is tried again as one gang on one node; failing that, it does not fit
/// now, as if the room were not there. Without the check a heuristic would propose starts the
/// simulator refuses, decision after decision, and its job would wait for no reason a real
/// scheduler has. Untyped jobs, and runs without a table, are the inner placer's alone.
#[derive(Debug, Clone)]
pub struct Rated<P> {
    inner: P,
    view: Option<std::sync::Arc<super::ThroughputView>>,
}

impl<P: Placer> Rated<P> {
    pub fn new(inner: P) -> Self {
        Rated { inner, view: None }
    }
}

impl Placer for Box<dyn Placer> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn observe(&mut self, ctx: &DecisionContext<'_>) {
        (**self).observe(ctx);
    }
    fn place(&mut self, planner: &mut Planner<'_>, job: &JobSpec) -> Option<Vec<TaskPlacement>> {
        (**self).place(planner, job)
    }
    fn complete(&self) -> bool {
        (**self).complete()
    }
}

impl<P: Placer> Placer for Rated<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn observe(&mut self, ctx: &DecisionContext<'_>) {
        self.view = ctx.throughputs().cloned();
        self.inner.observe(ctx);
    }
    fn place(&mut self, planner: &mut Planner<'_>, job: &JobSpec) -> Option<Vec<TaskPlacement>> {
        let Some(view) = self.view.as_deref().filter(|v| v.is_typed(job.id)) else {
            return self.inner.place(planner, job);
        };
        let mark = planner.mark();
        let tasks = self.inner.place(planner, job)?;
        if view.runs_on(job, &tasks) {
            return Some(tasks);
        }
        planner.undo_to(mark);
        // As one gang on one node: the job's tasks as one task of all their GPUs.
        let n = job.tasks;
        let whole = job.task.gpu_milli == crate::units::GPU_MILLI && job.task.gpus > 0;
        if n < 2 || !whole {
            return None;
        }
        let mut gang = job.clone();
        gang.tasks = 1;
        gang.task.gpus = job.task.gpus.checked_mul(n)?;
        gang.task.cpu_milli = job.task.cpu_milli.saturating_mul(u64::from(n));
        gang.task.mem_mib = job.task.mem_mib.saturating_mul(u64::from(n));
        let one = self.inner.place(planner, &gang)?;
        planner.undo_to(mark);
        let tasks: Vec<TaskPlacement> = one.first().map_or_else(Vec::new, |t| {
            t.gpus
                .chunks(job.task.gpus as usize)
                .map(|gpus| TaskPlacement {
                    node: t.node,
                    gpus: gpus.to_vec(),
                })
                .collect()
        });
        if tasks.len() == n as usize
            && view.runs_on(job, &tasks)
            && planner.reserve(job, &tasks).is_ok()
        {
            Some(tasks)
        } else {
            planner.undo_to(mark);
            None
        }
    }
    fn complete(&self) -> bool {
        // With a table a placement may be refused where the capacity is there.
        self.view.is_none() && self.inner.complete()
    }
}

/// An ordering, a placer and modifiers as one policy, named `ORDER/PLACE[/MODIFIER...]`.
pub struct Composite {
    name: String,
    ordering: Box<dyn Ordering>,
    placer: Box<dyn Placer>,
    modifiers: Vec<Box<dyn Modifier>>,
}

impl std::fmt::Debug for Composite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Composite")
            .field("name", &self.name)
            .finish()
    }
}

impl Composite {
    pub fn new(ordering: Box<dyn Ordering>, placer: Box<dyn Placer>) -> Self {
        Self::with_modifiers(ordering, placer, Vec::new())
    }

    pub fn with_modifiers(
        ordering: Box<dyn Ordering>,
        placer: Box<dyn Placer>,
        modifiers: Vec<Box<dyn Modifier>>,
    ) -> Self {
        let mut name = format!("{}/{}", ordering.name(), placer.name());
        for m in &modifiers {
            name.push('/');
            name.push_str(m.name());
        }
        Composite {
            name,
            ordering,
            placer: Box::new(Rated::new(placer)),
            modifiers,
        }
    }
}

impl Policy for Composite {
    fn name(&self) -> &str {
        &self.name
    }

    fn decide(&mut self, ctx: &DecisionContext<'_>) -> Result<Decision, PolicyError> {
        let mut decision = Decision::default();
        let blocks = self.ordering.blocks_on_failure();
        let wanted = self
            .modifiers
            .iter()
            .map(|m| m.rest_wanted(ctx))
            .max()
            .unwrap_or(0);
        let keep_rest = wanted > 0;
        let mut rest = Vec::new();
        self.placer.observe(ctx);
        // The order first: it may read the cluster, which the planner then borrows mutably.
        let mut order = self.ordering.order(ctx);
        let mut planner = ctx.planner();
        // Under quotas, capacity comes first, as without them: a job that does not fit is
        // handled as ever (it blocks a blocking order). One that fits where its queue cannot
        // admit it now (this decision's starts counted) is taken back and skipped: it blocks
        // nobody (Kueue's BestEffortFIFO). The modifiers are shown only jobs their queue
        // admits now: none backfills or preempts for a start the quota would refuse
        // (preempting for quota is Kueue's preemption, not done yet). A blocking order's head
        // stays if its queue could ever admit it, as EASY must reserve for it.
        let mut quota = ctx.quota().map(|q| q.plan());
        for id in order.by_ref() {
            let job = ctx.job(id);
            let mark = planner.mark();
            match self.placer.place(&mut planner, job) {
                Some(tasks) if quota.as_mut().is_some_and(|q| !q.take(job, &tasks)) => {
                    planner.undo_to(mark);
                    if let Some(q) = quota.as_mut()
                        && let Some(tasks) =
                            place_by_flavor(&mut *self.placer, &mut planner, q, job)
                    {
                        decision.placements.push(Placement { job: id, tasks });
                    }
                }
                Some(tasks) => decision.placements.push(Placement { job: id, tasks }),
                None if blocks => {
                    if keep_rest {
                        rest.push(id);
                        rest.extend(order.take(wanted - 1));
                    }
                    break;
                }
                None if rest.len() < wanted => rest.push(id),
                None => {}
            }
        }
        if let Some(q) = &quota {
            let head = rest.first().copied().filter(|_| blocks);
            rest.retain(|id| {
                let job = ctx.job(*id);
                q.admits(job).is_ok() || (Some(*id) == head && q.could_ever_admit(job))
            });
        }
        for m in &mut self.modifiers {
            // A job an earlier modifier started (preempting for it, or on a shared GPU) waits
            // no more: the next must not place it again.
            rest.retain(|id| {
                !decision
                    .placements
                    .iter()
                    .chain(&decision.shares)
                    .any(|p| p.job == *id)
            });
            m.extend(
                ctx,
                &mut planner,
                self.placer.as_mut(),
                &rest,
                &mut decision,
            );
        }
        Ok(decision)
    }

    fn acts_without_queue(&self) -> bool {
        self.modifiers.iter().any(|m| m.acts_without_queue())
    }
}

/// Places `job`, which its queue does not admit where the placer put it, on the first GPU
/// flavor of its queue that admits it and has room (Kueue tries a queue's flavors in order),
/// charging it to `quota`; `None`, and nothing changed, if no flavor does.
fn place_by_flavor(
    placer: &mut dyn Placer,
    planner: &mut Planner<'_>,
    quota: &mut QuotaPlan<'_>,
    job: &JobSpec,
) -> Option<Vec<TaskPlacement>> {
    for models in quota.flavor_choices(job) {
        let mut on_flavor = job.clone();
        on_flavor.gpu_types = models;
        let mark = planner.mark();
        if let Some(tasks) = placer.place(planner, &on_flavor) {
            if quota.take(job, &tasks) {
                return Some(tasks);
            }
            planner.undo_to(mark);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::load_cluster;
    use crate::job::tests::job;
    use crate::job::{TaskRequest, Trace};
    use crate::sim::{SimConfig, Simulator};
    use crate::units::SimTime;
    use std::sync::{Arc, Mutex};

    /// Starts the first job of the rest that fits, first fit.
    struct StartOne;
    /// Records the rest it is shown.
    struct Record(Arc<Mutex<Vec<Vec<JobId>>>>);

    impl Modifier for StartOne {
        fn name(&self) -> &str {
            "start-one"
        }
        fn extend(
            &mut self,
            ctx: &DecisionContext<'_>,
            planner: &mut Planner<'_>,
            _placer: &mut dyn Placer,
            rest: &[JobId],
            decision: &mut Decision,
        ) {
            for &id in rest {
                if let Some(tasks) = planner.place(ctx.job(id), FitStrategy::FirstFit) {
                    decision.placements.push(Placement { job: id, tasks });
                    return;
                }
            }
        }
    }

    impl Modifier for Record {
        fn name(&self) -> &str {
            "record"
        }
        fn extend(
            &mut self,
            _ctx: &DecisionContext<'_>,
            _planner: &mut Planner<'_>,
            _placer: &mut dyn Placer,
            rest: &[JobId],
            _decision: &mut Decision,
        ) {
            self.0.lock().expect("not poisoned").push(rest.to_vec());
        }
    }

    #[test]
    fn a_job_one_modifier_started_is_not_shown_to_the_next() {
        // One 3-GPU node; at 0, a and b take 2 GPUs each and c 1. Strict FIFO starts a; b
        // does not fit and blocks c. The first modifier starts c (it fits); the second must
        // then be shown b alone: c placed twice would be refused.
        let t = Trace::new(
            "rest",
            vec![
                job("a", 0, TaskRequest::whole(2, 0, 0)),
                job("b", 0, TaskRequest::whole(2, 0, 0)),
                job("c", 0, TaskRequest::whole(1, 0, 0)),
            ]
            .into_iter()
            .enumerate()
            .map(|(i, mut j)| {
                j.id = JobId(i as u32);
                j
            })
            .collect(),
            vec![SimTime::from_secs(10); 3],
            vec!["t".into()],
        )
        .expect("valid trace");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut policy = Composite::with_modifiers(
            Box::new(Fifo),
            Box::new(StrategyPlacer::new("first-fit", FitStrategy::FirstFit)),
            vec![Box::new(StartOne), Box::new(Record(Arc::clone(&seen)))],
        );
        let spec = Arc::new(load_cluster("1x3:V100").expect("cluster"));
        let r = Simulator::new(&t, spec, &SimConfig::default())
            .expect("valid run")
            .run(&mut policy, &mut |_| {});
        assert_eq!(r.summary.rejected_decisions, 0);
        assert_eq!(r.summary.finished, 3);
        assert_eq!(r.jobs[2].first_start, Some(SimTime::ZERO));
        let seen = seen.lock().expect("not poisoned");
        assert_eq!(seen.first(), Some(&vec![JobId(1)]));
    }
}
