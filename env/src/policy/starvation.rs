//! The starvation bound: a guarantee below every policy, learned or not. A job that has waited
//! past the bound gets a reservation that no policy may bypass, as EASY's blocked head does,
//! and once it starts no policy may preempt or resize it. The simulator applies it to every
//! decision (`Simulator::apply`), the service's shield to every answer.
//!
//! The rule, at each decision, for the jobs waiting past the bound, longest waiting first:
//!
//! - If the job fits now, on nodes no older starving job holds, those nodes are reserved for
//!   it and the guard starts it there after the policy's own decision (the policy may start
//!   it itself, anywhere it fits).
//! - If it does not fit, nodes are reserved for it to drain: those where it could run (GPU
//!   model, class, a task's size on the empty node), the ones with the most free GPUs first,
//!   enough to hold all its tasks once empty (every node it could use, once those are empty
//!   and it still does not fit). Nothing new starts on a reserved node but its job.
//! - Preempting or resizing a job the guard protects (one that started past the bound) is
//!   refused; so is starting, sharing or growing another job on a reserved node.
//!
//! Without a time estimate there is no backfilling window (EASY's needs run times): a starving
//! job waits at most the bound plus the time the jobs on its reserved nodes take to finish.
//!
//! The bound (`StarvationBound`): a number of seconds, `off`, or `auto` (the default): four
//! times the 90th percentile of the run times of the jobs seen to finish so far, at least one
//! hour, and no bound until 20 jobs have finished (nothing to derive it from). Run times, not
//! waits: a job that waits several times as long as nearly every job runs is starving, under
//! any load.

use crate::cluster::{ClusterState, FitStrategy, TaskPlacement};
use crate::job::JobSpec;
use crate::units::{JobId, NodeId, SimTime};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
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
    /// Starving jobs that fit now, with where the guard starts them if the policy does not.
    pub starts: Vec<(JobId, Vec<TaskPlacement>)>,
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
    /// `auto`: the 90th percentile's bucket and how many run times lie in it or below, kept
    /// as run times are added (a walk over every bucket at each finish cost more than the
    /// simulator's own work per event on a long replay).
    p90: Option<(u32, u64)>,
    bound: Option<SimTime>,
    /// Jobs that started past the bound and have not finished: never preempted or resized.
    protected: HashSet<JobId, foldhash::fast::FixedState>,
    /// The empty cluster, to ask where a job could ever run.
    empty: Option<ClusterState>,
}

impl StarvationGuard {
    pub fn new(setting: StarvationBound) -> Self {
        StarvationGuard {
            setting,
            run_times: BTreeMap::new(),
            finished: 0,
            p90: None,
            bound: match setting {
                StarvationBound::Secs(s) => SimTime::from_secs_f64(s),
                _ => None,
            },
            protected: HashSet::default(),
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

    /// Whether `job` started past the bound and is still protected from preemption and
    /// resizing.
    pub fn protects(&self, job: JobId) -> bool {
        self.protected.contains(&job)
    }

    /// Marks `job`, waiting past the bound, as started: protected until it finishes.
    pub fn started(&mut self, job: JobId) {
        self.protected.insert(job);
    }

    /// The reservations for this decision on `state` (after the decision's preemptions):
    /// `waiting` is the pending jobs with how long each has waited (since its submit, or its
    /// last preemption), in any order. `state` is left as it was.
    pub fn plan<'j>(
        &mut self,
        state: &mut ClusterState,
        waiting: impl Iterator<Item = (&'j JobSpec, SimTime)>,
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
        // Longest waiting first; ties by id (ids are unique: an unstable sort orders them as a
        // stable one would).
        starving.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.id.cmp(&b.1.id)));
        out.starving.reserve_exact(starving.len());
        let spec = Arc::clone(state.spec_arc());
        let empty = self
            .empty
            .get_or_insert_with(|| ClusterState::new(Arc::clone(&spec)));
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
