//! Pipeline metrics, for traces with dependencies (`crate::deps`). A pipeline is a connected
//! component of two or more jobs of the dependency graph (jobs joined by the jobs they list,
//! in either direction; `singleton` joins nobody).
//!
//! - Completion time: first submit to last finish of the pipeline's jobs. A pipeline counts
//!   once every job of it finished or was found never satisfiable (an `afternotok` branch
//!   that its successful parent never takes).
//! - Critical-path slowdown: completion time over the longest path through the pipeline,
//!   each job weighing its true duration at speed 1 (0 for a job that never ran). True
//!   durations are for metrics only, never for policies.
//! - Ready-wait share: over the pipelines' finished jobs, the time they waited after their
//!   dependency was satisfied, over the time from then to their finish.

use crate::job::Trace;
use crate::units::{JobId, SimTime};
use serde::{Deserialize, Serialize};

/// A run's pipeline metrics (`Summary::pipelines`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineStats {
    /// Pipelines in the trace.
    pub pipelines: u64,
    /// Those that completed (every job finished or never satisfiable).
    pub completed: u64,
    /// Mean completion time of the completed ones, s.
    pub avg_completion_s: f64,
    /// Mean of their completion time over their critical path.
    pub avg_critical_path_slowdown: f64,
    /// Share of the time after readiness their finished jobs spent waiting (0..=1).
    pub ready_wait_share: f64,
}

/// What a run did with one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StageTimes {
    /// When it became pending (its submit without a dependency); `None`: never.
    pub ready: Option<SimTime>,
    pub first_start: Option<SimTime>,
    pub finish: Option<SimTime>,
    /// Its dependency can never be satisfied.
    pub never_satisfied: bool,
}

/// The pipeline metrics of a run of `trace` (`times` by job id); `None` without pipelines.
pub fn pipeline_stats(trace: &Trace, times: &[StageTimes]) -> Option<PipelineStats> {
    let n = trace.len();
    let mut root: Vec<usize> = (0..n).collect();
    fn find(root: &mut [usize], mut i: usize) -> usize {
        while root[i] != i {
            root[i] = root[root[i]];
            i = root[i];
        }
        i
    }
    for j in trace.jobs() {
        for p in trace.dependency(j.id).into_iter().flat_map(|d| d.parents()) {
            let (a, b) = (find(&mut root, j.id.index()), find(&mut root, p.index()));
            root[a] = b;
        }
    }
    let mut members: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
    for i in 0..n {
        let r = find(&mut root, i);
        members.entry(r).or_default().push(i);
    }
    let pipelines: Vec<Vec<usize>> = members.into_values().filter(|m| m.len() > 1).collect();
    if pipelines.is_empty() {
        return None;
    }
    // Longest path ending at each job, in an order where parents come first.
    let by_index: Vec<_> = trace
        .jobs()
        .iter()
        .map(|j| trace.dependency(j.id).map(|d| d.map(|p| p.index())))
        .collect();
    let order = crate::deps::topological_order(&by_index, |i| trace.jobs()[i].name.clone())
        .expect("a trace's dependencies form no cycle");
    let mut path_ms = vec![0u64; n];
    for i in order {
        let longest_parent = by_index[i]
            .iter()
            .flat_map(|d| d.parents())
            .map(|&p| path_ms[p])
            .max()
            .unwrap_or(0);
        let own = if times[i].finish.is_some() {
            trace.true_duration(JobId(i as u32)).ms()
        } else {
            0
        };
        path_ms[i] = longest_parent + own;
    }
    let (mut completion_s, mut slowdown) = (Vec::new(), Vec::new());
    let (mut waited_ms, mut after_ready_ms) = (0u64, 0u64);
    for p in &pipelines {
        for &i in p {
            if let (Some(ready), Some(start), Some(end)) =
                (times[i].ready, times[i].first_start, times[i].finish)
            {
                waited_ms += start.saturating_sub(ready).ms();
                after_ready_ms += end.saturating_sub(ready).ms();
            }
        }
        if !p
            .iter()
            .all(|&i| times[i].finish.is_some() || times[i].never_satisfied)
        {
            continue;
        }
        let first = p.iter().map(|&i| trace.jobs()[i].submit).min();
        let last = p.iter().filter_map(|&i| times[i].finish).max();
        let (Some(first), Some(last)) = (first, last) else {
            continue;
        };
        let span = last.saturating_sub(first);
        completion_s.push(span.secs_f64());
        let critical = p.iter().map(|&i| path_ms[i]).max().unwrap_or(0);
        if critical > 0 {
            slowdown.push(span.ms() as f64 / critical as f64);
        }
    }
    Some(PipelineStats {
        pipelines: pipelines.len() as u64,
        completed: completion_s.len() as u64,
        avg_completion_s: super::mean(&completion_s),
        avg_critical_path_slowdown: super::mean(&slowdown),
        ready_wait_share: if after_ready_ms > 0 {
            waited_ms as f64 / after_ready_ms as f64
        } else {
            0.0
        },
    })
}
