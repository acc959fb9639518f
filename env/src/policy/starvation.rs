//! The starvation bound: a guarantee below every policy, learned or not. A job that has waited
//! past the bound is started before any other job, by preemption where that is allowed, else
//! on nodes drained for it as EASY's blocked head is, and is not preempted again until it has
//! saved progress. The simulator applies it to every decision (`Simulator::apply`), the
//! service's shield to every answer.
//!
//! The rule, at each decision, for the jobs waiting past the bound, the longest overdue first:
//!
//! - If the job fits now, on nodes no older starving job holds, those nodes are reserved for
//!   it and the guard starts it there after the policy's own decision (the policy may start
//!   it itself, anywhere it fits).
//! - Else, if preempting running jobs would let it fit there, the guard preempts the cheapest
//!   set (`make_room`: preemptible, not protected, least GPU-time in their current run, none
//!   its placement does not need), reserves the room and starts it.
//! - Else, if it is the first such job, nodes are reserved for it to drain: those where it
//!   could run (GPU model, class, a task's size on the empty node), the ones with the most
//!   free GPUs first, enough to hold all its tasks once empty (every node it could use, once
//!   those are empty and it still does not fit). Nothing new starts on a reserved node but
//!   its job. The jobs behind it that do not fit wait for their turn: one drain at a time, as
//!   EASY reserves for its head only (draining for all at once, without run-time estimates to
//!   backfill against, held most of the cluster idle).
//! - Preempting or resizing a job the guard started, or a policy started past the bound, is
//!   refused until it has restarted and reached its first checkpoint (`protection`; to its
//!   end when jobs never checkpoint); so is starting, sharing or growing another job on a
//!   reserved node.
//!
//! So a starving job waits at most the bound (plus, where nothing in its way may be preempted,
//! the drains of the jobs ahead of it and of its own nodes), and each rescue saves at least a
//! checkpoint's progress.
//!
//! The bound (`StarvationBound`): a number of seconds (the same for every job, under any
//! load), `off`, or `auto` (the default). `auto` is a base, four times the 90th percentile of
//! the run times of the jobs seen to finish so far (at least one hour; no bound until 20 jobs
//! have finished), plus, for each job, twice its *submit-order wait*: how long it would wait if
//! the jobs ahead of it when it began to wait went first (the fair start time of Sabin,
//! Kochhar and Sadayappan, "Job fairness in non-preemptive job scheduling", ICPP 2004),
//! estimated then from the GPUs allocated and asked for by the pending jobs beyond the
//! cluster's, at the mean run time seen so far (`allowance`). So `auto` lets no policy
//! overtake a job indefinitely, and does not force submit order on every policy under a
//! backlog that no order could clear within the base.

use crate::cluster::{ClusterState, FitStrategy, TaskPlacement};
use crate::job::JobSpec;
use crate::policy::RestartCost;
use crate::units::{JobId, NodeId, SimTime};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// How long a job may wait before it is guaranteed a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum StarvationBound {
    /// No guarantee.
    Off,
    /// Derived from the run times of the jobs seen to finish (see the module docs).
    #[default]
    Auto,
    /// A fixed bound, seconds.
    Secs(f64),
}

impl StarvationBound {
    /// Reads `off`, `auto` or a number of seconds (`--starvation-bound`).
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.trim() {
            "off" => Ok(StarvationBound::Off),
            "auto" => Ok(StarvationBound::Auto),
            v => match v.parse::<f64>() {
                Ok(secs) if secs.is_finite() && secs > 0.0 => Ok(StarvationBound::Secs(secs)),
                _ => Err(format!(
                    "starvation bound must be `auto`, `off` or a number of seconds > 0, got `{v}`"
                )),
            },
        }
    }
}

impl std::fmt::Display for StarvationBound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StarvationBound::Off => f.write_str("off"),
            StarvationBound::Auto => f.write_str("auto"),
            StarvationBound::Secs(s) => write!(f, "{s}"),
        }
    }
}

impl Serialize for StarvationBound {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            StarvationBound::Secs(v) => s.serialize_f64(*v),
            other => s.serialize_str(&other.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for StarvationBound {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Secs(f64),
            Word(String),
        }
        match Raw::deserialize(d)? {
            Raw::Secs(v) => StarvationBound::parse(&v.to_string()),
            Raw::Word(w) => StarvationBound::parse(&w),
        }
        .map_err(serde::de::Error::custom)
    }
}

/// `auto`: the bound is this many times the 90th percentile of observed run times...
const AUTO_FACTOR: f64 = 4.0;
/// ... at least this...
const AUTO_FLOOR: SimTime = SimTime::from_secs(3600);
/// ... once this many jobs have finished.
const AUTO_MIN_FINISHED: u64 = 20;
/// `auto`: each job may wait, beyond the base, this many times its submit-order wait.
const AUTO_FAIR_FACTOR: f64 = 2.0;
/// Run-time histogram resolution for `auto`: buckets per doubling.
const BUCKETS_PER_OCTAVE: f64 = 16.0;

/// Nodes held for starving jobs: the holder by node index, and the held nodes in the order
/// they were first held. A node is looked up at every part of every decision while a bound
/// is in force, and the held set is walked for every starving job: an array and a list, not
/// a hash map.
#[derive(Debug, Clone, Default, PartialEq)]
struct Held {
    by_node: Vec<Option<JobId>>,
    nodes: Vec<NodeId>,
}

impl Held {
    fn get(&self, node: NodeId) -> Option<JobId> {
        self.by_node.get(node.index()).copied().flatten()
    }

    fn contains(&self, node: NodeId) -> bool {
        self.get(node).is_some()
    }

    fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Holds `node` for `job` (for it instead, if another held it).
    fn insert(&mut self, node: NodeId, job: JobId) {
        let i = node.index();
        if i >= self.by_node.len() {
            self.by_node.resize(i + 1, None);
        }
        if self.by_node[i].replace(job).is_none() {
            self.nodes.push(node);
        }
    }
}

/// What the guard lets through this decision and what it starts itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reservations {
    /// Node -> the starving job it is held for.
    held: Held,
    /// Starving jobs that fit now (once `preempt` has run), with where the guard starts them
    /// if the policy does not.
    pub starts: Vec<(JobId, Vec<TaskPlacement>)>,
    /// Running jobs the guard preempts to make room for starving jobs in `starts`: to be
    /// preempted before anything of the decision starts.
    pub preempt: Vec<JobId>,
    /// The jobs waiting past the bound, longest waiting first.
    pub starving: Vec<JobId>,
}

impl Reservations {
    /// Whether starting (or sharing, or growing) `job` on `tasks` leaves every reservation
    /// alone: no task on a node held for another job.
    pub fn admits(&self, job: JobId, tasks: &[TaskPlacement]) -> bool {
        tasks
            .iter()
            .all(|t| self.held.get(t.node).is_none_or(|owner| owner == job))
    }

    /// The starving job `node` is held for, if any.
    pub fn holder(&self, node: NodeId) -> Option<JobId> {
        self.held.get(node)
    }

    pub fn is_empty(&self) -> bool {
        self.starving.is_empty()
    }
}

/// The starvation guard of one run (or one service): the bound, what `auto` has learned, and
/// the jobs it protects.
#[derive(Debug, Clone)]
pub struct StarvationGuard {
    setting: StarvationBound,
    /// `auto`: finished run times, bucket -> count.
    run_times: BTreeMap<u32, u64>,
    finished: u64,
    /// `auto`: the sum of the finished run times, ms (their mean prices the submit-order
    /// wait).
    ran_ms: f64,
    /// `auto`: the 90th percentile's bucket and how many run times lie in it or below, kept
    /// as run times are added (a walk over every bucket at each finish cost more than the
    /// simulator's own work per event on a long replay).
    p90: Option<(u32, u64)>,
    bound: Option<SimTime>,
    /// Jobs that started past the bound, with when their protection from preemption and
    /// resizing ends (`None`: at their end).
    protected: HashMap<JobId, Option<SimTime>, foldhash::fast::FixedState>,
    /// The empty cluster, to ask where a job could ever run.
    empty: Option<ClusterState>,
}

impl StarvationGuard {
    pub fn new(setting: StarvationBound) -> Self {
        StarvationGuard {
            setting,
            run_times: BTreeMap::new(),
            finished: 0,
            ran_ms: 0.0,
            p90: None,
            bound: match setting {
                StarvationBound::Secs(s) => SimTime::from_secs_f64(s),
                _ => None,
            },
            protected: HashMap::default(),
            empty: None,
        }
    }

    pub fn setting(&self) -> StarvationBound {
        self.setting
    }

    /// The bound in force now; `None` when off (or `auto` with too little history).
    pub fn bound(&self) -> Option<SimTime> {
        self.bound
    }

    /// Learns that `job` finished after running `ran_ms` in all (for `auto`), and that it
    /// needs no protection any more.
    pub fn finished(&mut self, job: JobId, ran_ms: u64) {
        self.protected.remove(&job);
        if self.setting != StarvationBound::Auto {
            return;
        }
        let b = (BUCKETS_PER_OCTAVE * (ran_ms.max(1) as f64).log2()).floor() as u32;
        *self.run_times.entry(b).or_insert(0) += 1;
        self.finished += 1;
        self.ran_ms += ran_ms as f64;
        if let Some((top, below)) = &mut self.p90
            && b <= *top
        {
            *below += 1;
        }
        if self.finished >= AUTO_MIN_FINISHED {
            // The 90th percentile, at its bucket's upper edge.
            let target = (0.9 * self.finished as f64).ceil() as u64;
            let top = p90_bucket(&self.run_times, self.p90, target);
            self.p90 = Some(top);
            let p90 = ((top.0 + 1) as f64 / BUCKETS_PER_OCTAVE).exp2();
            let bound = SimTime((AUTO_FACTOR * p90) as u64).max(AUTO_FLOOR);
            self.bound = Some(bound);
        }
    }

    /// How much longer than the bound a job that begins to wait now may wait (zero unless
    /// `auto`): twice its submit-order wait, estimated from `backlog_gpu_milli` (milli-GPUs
    /// allocated, plus those the pending jobs ask for, plus its own) beyond the cluster's
    /// `capacity_gpu_milli`, all to be freed at the rate the cluster frees GPUs when every
    /// job runs for the mean run time seen so far. Under no backlog, zero.
    pub fn allowance(&self, backlog_gpu_milli: u64, capacity_gpu_milli: u64) -> SimTime {
        if self.setting != StarvationBound::Auto || self.finished == 0 || capacity_gpu_milli == 0 {
            return SimTime::ZERO;
        }
        let excess = backlog_gpu_milli.saturating_sub(capacity_gpu_milli) as f64;
        let mean_ms = self.ran_ms / self.finished as f64;
        let wait_ms = excess / capacity_gpu_milli as f64 * mean_ms;
        SimTime((AUTO_FAIR_FACTOR * wait_ms) as u64)
    }

    /// Whether `job` started past the bound and is still protected from preemption and
    /// resizing at `now`.
    pub fn protects(&self, job: JobId, now: SimTime) -> bool {
        protected_at(&self.protected, job, now)
    }

    /// Marks `job`, waiting past the bound, as started: protected until `until` (`protection`;
    /// `None`: until it finishes).
    pub fn started(&mut self, job: JobId, until: Option<SimTime>) {
        self.protected.insert(job, until);
    }

    /// The reservations for this decision on `state` (after the decision's preemptions) at
    /// `now`: `waiting` is the pending jobs with how long each has waited (since its submit,
    /// or its last preemption) beyond its `allowance`, in any order; `victims` prices a
    /// running job the guard may preempt (`Victim`; `None`: it may not). `state` is left as
    /// it was.
    pub fn plan<'j>(
        &mut self,
        state: &mut ClusterState,
        now: SimTime,
        waiting: impl Iterator<Item = (&'j JobSpec, SimTime)>,
        victims: &dyn Fn(JobId) -> Option<Victim<'j>>,
    ) -> Reservations {
        self.plan_admitted(state, now, waiting, victims, &|_, _| true)
    }

    /// [`Self::plan`], where room is made by preemption only for a start `admits` (its
    /// queue's quota, `quota/`): a job its queue would refuse there drains instead, so that
    /// no job is preempted for a start that would then be refused.
    pub fn plan_admitted<'j>(
        &mut self,
        state: &mut ClusterState,
        now: SimTime,
        waiting: impl Iterator<Item = (&'j JobSpec, SimTime)>,
        victims: &dyn Fn(JobId) -> Option<Victim<'j>>,
        admits: &dyn Fn(&JobSpec, &[TaskPlacement]) -> bool,
    ) -> Reservations {
        let mut out = Reservations::default();
        let Some(bound) = self.bound else {
            return out;
        };
        // Sized for every job offered at once: under a long queue most are starving, and a
        // list grown as it fills was reallocated a dozen times at every decision.
        let (least, most) = waiting.size_hint();
        let mut starving: Vec<(SimTime, &JobSpec)> = Vec::with_capacity(most.unwrap_or(least));
        starving.extend(
            waiting
                .filter(|(_, waited)| *waited >= bound)
                .map(|(j, waited)| (waited, j)),
        );
        if starving.is_empty() {
            return out;
        }
        // Longest overdue first; ties by id (ids are unique: an unstable sort orders them as a
        // stable one would).
        starving.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.id.cmp(&b.1.id)));
        out.starving.reserve_exact(starving.len());
        let spec = Arc::clone(state.spec_arc());
        let empty = self
            .empty
            .get_or_insert_with(|| ClusterState::new(Arc::clone(&spec)));
        let mut draining = false;
        for (_, job) in starving {
            out.starving.push(job.id);
            if out.held.len() >= spec.nodes.len() {
                // Every node is held for an older one: nothing is left to hold or start on.
                continue;
            }
            // Where it fits now, away from nodes older starving jobs hold.
            for n in &out.held.nodes {
                state.exclude_node(*n);
            }
            let fit = state.find_job_placement(job, FitStrategy::BestFit);
            state.clear_excluded();
            if let Some(tasks) = fit {
                for t in &tasks {
                    out.held.insert(t.node, job.id);
                }
                out.starts.push((job.id, tasks));
                continue;
            }
            // Room by preemption, where the jobs in its way may be preempted.
            let price = |id: JobId| {
                if protected_at(&self.protected, id, now) || out.preempt.contains(&id) {
                    None
                } else {
                    victims(id)
                }
            };
            if let Some((preempt, tasks)) =
                make_room(state, job, &out.held, &price).filter(|(_, tasks)| admits(job, tasks))
            {
                for t in &tasks {
                    out.held.insert(t.node, job.id);
                }
                out.preempt.extend(preempt);
                out.starts.push((job.id, tasks));
                continue;
            }
            if draining {
                // Its turn to drain comes when the one ahead of it starts.
                continue;
            }
            draining = true;
            // Drain: the nodes it could use, the most free GPUs first, until they could hold
            // its tasks once empty; all of them once those are empty and it still waits.
            let mask = spec.job_mask(job);
            let mut nodes: Vec<NodeId> = empty
                .nodes_fitting(&job.task, mask)
                .filter(|n| !out.held.contains(*n))
                .collect();
            nodes.sort_by_key(|n| (std::cmp::Reverse(state.free_gpu_milli(*n)), *n));
            let per_node = |n: NodeId| tasks_on_empty(&spec.nodes[n.index()], job);
            let mut room = 0u64;
            let mut chosen = Vec::new();
            for n in nodes.iter().copied() {
                if room >= u64::from(job.tasks) {
                    break;
                }
                room += per_node(n);
                chosen.push(n);
            }
            let drained = chosen.iter().all(|n| node_is_empty(state, *n));
            let take = if drained { &nodes } else { &chosen };
            for n in take {
                out.held.insert(*n, job.id);
            }
        }
        out
    }
}

/// Whether `protected` (job -> end of its protection, `None`: its end) covers `job` at `now`.
fn protected_at(
    protected: &HashMap<JobId, Option<SimTime>, foldhash::fast::FixedState>,
    job: JobId,
    now: SimTime,
) -> bool {
    protected
        .get(&job)
        .is_some_and(|until| until.is_none_or(|t| now < t))
}

/// A running job the starvation guard may preempt: what preempting it risks (GPU-time of its
/// current run, milli-GPU x ms: the work since its last checkpoint is at most that), and its
/// spec.
#[derive(Debug, Clone, Copy)]
pub struct Victim<'j> {
    pub risk: u128,
    pub spec: &'j JobSpec,
}

/// Room for `job` (one that does not fit now) by preemption, away from the `held` nodes: the
/// preemptible running jobs `victims` prices, cheapest first, freed on a copy of `state` until
/// the job fits (best fit), then each one its placement does not need spared, the most
/// expensive first (taken back where it ran). The victims, cheapest first, and the placement;
/// `None` when freeing every one of them would not let it fit.
fn make_room<'j>(
    state: &ClusterState,
    job: &JobSpec,
    held: &Held,
    victims: &dyn Fn(JobId) -> Option<Victim<'j>>,
) -> Option<(Vec<JobId>, Vec<TaskPlacement>)> {
    let mut pool: Vec<(u128, JobId, &'j JobSpec)> = state
        .running()
        .filter(|a| a.preemptible)
        .filter_map(|a| victims(a.job).map(|v| (v.risk, a.job, v.spec)))
        .collect();
    if pool.is_empty() {
        return None;
    }
    pool.sort_unstable_by_key(|(risk, id, _)| (*risk, *id));
    let mut copy = state.clone();
    for n in &held.nodes {
        copy.exclude_node(*n);
    }
    let mut freed = Vec::new();
    let mut fit = None;
    for (_, id, spec) in pool {
        let Ok(alloc) = copy.preempt(id) else {
            continue;
        };
        freed.push((id, spec, alloc));
        fit = copy.find_job_placement(job, FitStrategy::BestFit);
        if fit.is_some() {
            break;
        }
    }
    let tasks = fit?;
    copy.clear_excluded();
    copy.allocate(job, tasks.clone()).ok()?;
    let mut needed = Vec::new();
    for (id, spec, alloc) in freed.into_iter().rev() {
        if copy.allocate(spec, alloc.tasks.to_vec()).is_err() {
            needed.push(id);
        }
    }
    needed.reverse();
    Some((needed, tasks))
}

/// When the protection of a job started past the bound at `start` ends: once it has restarted
/// (`cost.overhead`) and reached its first checkpoint, so that every rescue saves progress and
/// a job preempted then waits at most the bound again; `None` (at its end) when jobs never
/// checkpoint, as a preemption would lose all it did. Protected to its end in every case, a
/// days-long run held its GPUs against every job behind it, and under a preemptive policy the
/// waits of the jobs it blocked passed the bound in turn.
pub fn protection(start: SimTime, cost: RestartCost) -> Option<SimTime> {
    let checkpoint = cost.checkpoint?;
    Some(
        start
            .saturating_add(cost.overhead)
            .saturating_add(checkpoint),
    )
}

/// The first bucket of `run_times` (bucket -> count) at which the cumulative count reaches
/// `target`, with that cumulative count: moved from `from` (a bucket and the count in it or
/// below, kept up to date) when there is one, else walked to from the first bucket.
/// `target` is at least 1 and at most the total count.
fn p90_bucket(run_times: &BTreeMap<u32, u64>, from: Option<(u32, u64)>, target: u64) -> (u32, u64) {
    use std::ops::Bound::{Excluded, Unbounded};
    let (mut top, mut below) = from.unwrap_or_else(|| {
        let (b, n) = run_times
            .first_key_value()
            .expect("a run time was just added");
        (*b, *n)
    });
    // Up while short of the target...
    while below < target {
        let (b, n) = run_times
            .range((Excluded(top), Unbounded))
            .next()
            .expect("the target is at most the total count");
        top = *b;
        below += n;
    }
    // ... down while the bucket below still reaches it.
    while let Some(n) = run_times.get(&top).copied()
        && let Some((b, _)) = run_times.range(..top).next_back()
        && below - n >= target
    {
        top = *b;
        below -= n;
    }
    (top, below)
}

/// How many tasks of `job` the empty node could hold, by GPUs (or cores for CPU-only tasks),
/// CPU and memory: an estimate for choosing nodes to drain, not a feasibility check.
fn tasks_on_empty(node: &crate::cluster::NodeSpec, job: &JobSpec) -> u64 {
    let t = &job.task;
    let by_gpu = if t.gpus == 0 {
        u64::MAX
    } else if t.is_fractional() {
        u64::from(node.gpus) * (u64::from(crate::units::GPU_MILLI) / u64::from(t.gpu_milli.max(1)))
    } else {
        u64::from(node.gpus / t.gpus)
    };
    let by_cpu = node.cpu_milli.checked_div(t.cpu_milli).unwrap_or(u64::MAX);
    let by_mem = node.mem_mib.checked_div(t.mem_mib).unwrap_or(u64::MAX);
    let n = by_gpu.min(by_cpu).min(by_mem);
    if job.constraints.distinct_nodes {
        n.min(1)
    } else {
        n
    }
}

/// Whether nothing runs on `node`.
fn node_is_empty(state: &ClusterState, node: NodeId) -> bool {
    let spec = &state.spec().nodes[node.index()];
    state.cpu_free(node) == spec.cpu_milli && state.free_whole_gpus(node) == spec.gpus
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bound `auto` derives from `run_times`, walked from the first bucket as it was
    /// before the 90th percentile was kept.
    fn naive_bound(run_times: &[u64]) -> Option<SimTime> {
        if (run_times.len() as u64) < AUTO_MIN_FINISHED {
            return None;
        }
        let mut buckets: BTreeMap<u32, u64> = BTreeMap::new();
        for ms in run_times {
            let b = (BUCKETS_PER_OCTAVE * ((*ms).max(1) as f64).log2()).floor() as u32;
            *buckets.entry(b).or_insert(0) += 1;
        }
        let target = (0.9 * run_times.len() as f64).ceil() as u64;
        let mut seen = 0;
        let p90 = buckets
            .iter()
            .find(|(_, n)| {
                seen += **n;
                seen >= target
            })
            .map_or(0.0, |(b, _)| ((*b + 1) as f64 / BUCKETS_PER_OCTAVE).exp2());
        Some(SimTime((AUTO_FACTOR * p90) as u64).max(AUTO_FLOOR))
    }

    #[test]
    fn auto_allows_twice_the_submit_order_wait_and_a_fixed_bound_nothing() {
        let mut guard = StarvationGuard::new(StarvationBound::Auto);
        // No history, no price.
        assert_eq!(guard.allowance(12_000, 4_000), SimTime::ZERO);
        for i in 0..20 {
            guard.finished(JobId(i), 3_600_000);
        }
        // 8 GPUs beyond the cluster's 4 to free, 4 at a time every mean run (1 h): a 2 h
        // submit-order wait, allowed twice.
        assert_eq!(guard.allowance(12_000, 4_000), SimTime::from_secs(4 * 3600));
        // Room for it now: no wait to allow.
        assert_eq!(guard.allowance(3_000, 4_000), SimTime::ZERO);
        assert_eq!(guard.allowance(4_000, 4_000), SimTime::ZERO);
        let mut fixed = StarvationGuard::new(StarvationBound::Secs(7200.0));
        for i in 0..20 {
            fixed.finished(JobId(i), 3_600_000);
        }
        assert_eq!(fixed.allowance(12_000, 4_000), SimTime::ZERO);
    }

    #[test]
    fn one_starving_job_drains_at_a_time_and_the_ones_that_fit_still_start() {
        use crate::cluster::{TaskPlacement, tests::uniform};
        use crate::job::{TaskRequest, tests::job};
        // Three nodes of 4 GPUs, one GPU busy on each: two starving 4-GPU jobs fit nowhere,
        // a starving 1-GPU job fits anywhere.
        let spec = Arc::new(uniform(3, 4, "V100", 64_000, 512_000));
        let mut state = ClusterState::new(spec);
        let mut busy = job("busy", 0, TaskRequest::whole(1, 1000, 1024));
        for n in 0..3u32 {
            busy.id = JobId(10 + n);
            let tasks = vec![TaskPlacement {
                node: NodeId(n),
                gpus: vec![0],
            }];
            state.allocate(&busy, tasks).unwrap();
        }
        let mut big1 = job("big1", 0, TaskRequest::whole(4, 1000, 1024));
        big1.id = JobId(0);
        let mut big2 = job("big2", 0, TaskRequest::whole(4, 1000, 1024));
        big2.id = JobId(1);
        let mut small = job("small", 0, TaskRequest::whole(1, 1000, 1024));
        small.id = JobId(2);
        let mut guard = StarvationGuard::new(StarvationBound::Secs(3600.0));
        let h = |n: u64| SimTime::from_secs(n * 3600);
        let waiting = [(&big1, h(3)), (&big2, h(2)), (&small, h(1))];
        // Nothing may be preempted: `big1` drains.
        let held = guard.plan(&mut state, SimTime::ZERO, waiting.into_iter(), &|_| None);
        assert_eq!(held.starving, vec![JobId(0), JobId(1), JobId(2)]);
        // `big1` drains one node (the node it needs); `big2` waits for its turn and holds
        // none; `small` starts on a node `big1` does not hold.
        let holders: Vec<Option<JobId>> = (0..3).map(|n| held.holder(NodeId(n))).collect();
        assert_eq!(
            holders.iter().filter(|h| **h == Some(JobId(0))).count(),
            1,
            "{holders:?}"
        );
        assert!(!holders.contains(&Some(JobId(1))), "{holders:?}");
        assert_eq!(held.starts.len(), 1);
        assert_eq!(held.starts[0].0, JobId(2));
        assert_ne!(held.holder(held.starts[0].1[0].node), Some(JobId(0)));
    }

    #[test]
    fn room_is_made_by_the_cheapest_preemptions_the_placement_needs() {
        use crate::cluster::{TaskPlacement, tests::uniform};
        use crate::job::{TaskRequest, tests::job};
        // Three nodes of 4 GPUs. Node 0: a (2 GPUs, risk 10) and b (2 GPUs, risk 100);
        // node 1: c (4 GPUs, risk 50); node 2: d (4 GPUs, not preemptible).
        let spec = Arc::new(uniform(3, 4, "V100", 64_000, 512_000));
        let mut state = ClusterState::new(spec);
        let mut specs = Vec::new();
        for (i, (name, node, gpus, preemptible)) in [
            ("a", 0, vec![0u8, 1], true),
            ("b", 0, vec![2, 3], true),
            ("c", 1, vec![0, 1, 2, 3], true),
            ("d", 2, vec![0, 1, 2, 3], false),
        ]
        .into_iter()
        .enumerate()
        {
            let mut j = job(name, 0, TaskRequest::whole(gpus.len() as u32, 1000, 1024));
            j.id = JobId(10 + i as u32);
            j.preemptible = preemptible;
            let tasks = vec![TaskPlacement {
                node: NodeId(node),
                gpus,
            }];
            state.allocate(&j, tasks).unwrap();
            specs.push(j);
        }
        let risk = [10u128, 100, 50, 0];
        let mut big = job("big", 0, TaskRequest::whole(4, 1000, 1024));
        big.id = JobId(0);
        let h = SimTime::from_secs(3600);
        let plan = |state: &mut ClusterState, guard: &mut StarvationGuard| {
            let victims = |id: JobId| {
                let i = (id.0 - 10) as usize;
                Some(Victim {
                    risk: risk[i],
                    spec: &specs[i],
                })
            };
            guard.plan(state, h, [(&big, h)].into_iter(), &victims)
        };
        let mut guard = StarvationGuard::new(StarvationBound::Secs(1800.0));
        // a alone is not enough; a then c is, and big's placement (node 1) spares a.
        let held = plan(&mut state, &mut guard);
        assert_eq!(held.preempt, vec![JobId(12)]);
        assert_eq!(held.starts.len(), 1);
        assert_eq!(held.starts[0].1[0].node, NodeId(1));
        assert_eq!(held.holder(NodeId(1)), Some(JobId(0)));
        // c protected (started past the bound, before its first checkpoint): a and b go.
        guard.started(JobId(12), Some(h.saturating_add(h)));
        let held = plan(&mut state, &mut guard);
        assert_eq!(held.preempt, vec![JobId(10), JobId(11)]);
        assert_eq!(held.starts[0].1[0].node, NodeId(0));
        // Once its protection has ended, c is a victim again; d never is.
        guard.started(JobId(12), Some(h));
        let held = plan(&mut state, &mut guard);
        assert_eq!(held.preempt, vec![JobId(12)]);
        assert!(!held.preempt.contains(&JobId(13)));
        // Its queue would refuse the start preemption makes room for: nobody is preempted,
        // it drains.
        let held = guard.plan_admitted(
            &mut state,
            h,
            [(&big, h)].into_iter(),
            &|id: JobId| {
                let i = (id.0 - 10) as usize;
                Some(Victim {
                    risk: risk[i],
                    spec: &specs[i],
                })
            },
            &|_, _| false,
        );
        assert!(held.preempt.is_empty() && held.starts.is_empty());
        assert!((0..3).any(|n| held.holder(NodeId(n)) == Some(JobId(0))));
        // Nothing to preempt: the first starving job that does not fit drains.
        let held = guard.plan(&mut state, h, [(&big, h)].into_iter(), &|_| None);
        assert!(held.preempt.is_empty() && held.starts.is_empty());
        assert!((0..3).any(|n| held.holder(NodeId(n)) == Some(JobId(0))));
        // The state is left as it was.
        assert_eq!(state.running().count(), 4);
    }

    #[test]
    fn the_kept_percentile_is_the_walked_one_after_every_finish() {
        // Run times rising, falling and scattered (a fixed LCG), so the percentile's bucket
        // moves both ways.
        let mut state = 7u64;
        let mut scattered = || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            (state >> 33) % 50_000_000
        };
        let runs: Vec<u64> = (0..300u64)
            .map(|i| i * 60_000)
            .chain((0..300u64).map(|i| 100_000_000 / (i + 1)))
            .chain((0..600).map(|_| scattered()))
            .collect();
        let mut guard = StarvationGuard::new(StarvationBound::Auto);
        for (i, ms) in runs.iter().enumerate() {
            guard.finished(JobId(i as u32), *ms);
            assert_eq!(
                guard.bound(),
                naive_bound(&runs[..=i]),
                "after {} run times",
                i + 1
            );
        }
    }
}
