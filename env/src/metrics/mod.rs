//! Metrics with the definitions shared by everything (DESIGN.md): per-job records, the run
//! summary, the timeline, and their files (`summary.json`, `jobs.csv`, `timeline.csv`).
//!
//! - JCT = finish - submit; wait = first start - submit; run = finish - first start. A job
//!   with a dependency (`crate::deps`) waits from when its dependency was satisfied, not from
//!   its submit: the time it was held is no scheduler's doing. Its JCT still counts from
//!   submit.
//! - Bounded slowdown = max(1, JCT / max(run, 10 s)).
//! - Fairness: Jain's index over tenants of each tenant's mean run / JCT.
//! - Makespan = last finish - first submit, over every job replayed.
//! - Time averages (GPU and CPU allocation, fragmentation, queue length) and energy are integrated over
//!   the measured interval: from the first submit plus the warm-up to the last finish.
//! - Jobs submitted during the warm-up run but are left out of the job statistics.

mod frag;
pub mod paired;
mod pipeline;

pub use frag::{FragTracker, FragmentMemo, MixCounts, TaskMix};
pub use pipeline::{PipelineStats, StageTimes, pipeline_stats};

use crate::units::SimTime;
use serde::{Deserialize, Serialize};
use std::io::Write;

/// Bounded-slowdown threshold (DESIGN.md): runs shorter than this count as this long.
pub const BSLD_MIN_RUN: SimTime = SimTime::from_secs(10);

/// One job's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    pub name: String,
    pub submit: SimTime,
    pub first_start: Option<SimTime>,
    pub finish: Option<SimTime>,
    pub preemptions: u32,
    /// Node names of the last run, `;`-joined.
    pub nodes: String,
    pub gpus: u64,
    /// The job's tenant (user, group, queue or virtual cluster).
    pub tenant: String,
    /// Submitted after the warm-up: counted in the statistics.
    pub measured: bool,
    /// A job with a dependency: when it was satisfied and the job became pending (`None`:
    /// never, or the job has no dependency).
    pub ready: Option<SimTime>,
    /// Its dependency can never be satisfied (Slurm's `DependencyNeverSatisfied`).
    pub never_satisfied: bool,
}

impl JobRecord {
    /// First start minus when the job became pending: its submit, or when its dependency
    /// was satisfied.
    pub fn wait(&self) -> Option<SimTime> {
        Some(
            self.first_start?
                .saturating_sub(self.ready.unwrap_or(self.submit)),
        )
    }
    pub fn jct(&self) -> Option<SimTime> {
        Some(self.finish?.saturating_sub(self.submit))
    }
    pub fn bounded_slowdown(&self) -> Option<f64> {
        let run = self.finish?.saturating_sub(self.first_start?);
        let jct = self.jct()?;
        Some((jct.secs_f64() / run.max(BSLD_MIN_RUN).secs_f64()).max(1.0))
    }
}

/// One sample of the cluster over time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TimelineRow {
    pub time_s: f64,
    pub allocated_gpus: f64,
    pub running_jobs: u64,
    pub queue_len: u64,
    pub frag_gpus: f64,
    pub power_w: f64,
}

/// What quotas did to a run (docs/quotas.md), over the measured span (after the warm-up).
/// The queue states behind the time integrals are taken after every batch of events and
/// every decision, and hold until the next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuotaMetrics {
    /// Hours, summed over queues, during which a queue had a pending job its quota refused
    /// although the job fitted what is left of the queue's nominal quota (every
    /// flavor-resource it asks), while another queue of its cohort tree borrowed one of them:
    /// time its guarantee was not kept (a job that waits only for room on the nodes does not
    /// count).
    pub guarantee_violation_h: f64,
    /// GPU-hours used beyond nominal quotas (borrowed), summed over queues.
    pub borrowed_gpu_h: f64,
    /// Jobs preempted by quota preemption (`[queue.preemption]`: Kueue's policies).
    pub quota_preemptions: u64,
    /// Runs started (restarts included) while quotas were on.
    pub admissions: u64,
    /// All preemptions (the policy's and the quota's) per run started.
    pub preemptions_per_admission: f64,
    /// Starts of a job while a pending job of the same queue had a higher priority.
    pub priority_inversions: u64,
    /// Per queue, in the quota file's order.
    pub queues: Vec<QueueMetrics>,
}

/// One queue's part of [`QuotaMetrics`], with the wait and JCT of its measured jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueMetrics {
    pub queue: String,
    pub guarantee_violation_h: f64,
    pub borrowed_gpu_h: f64,
    /// Its jobs preempted by quota preemption (victims).
    pub quota_preemptions: u64,
    pub priority_inversions: u64,
    /// Measured jobs, and the wait and JCT of those that finished.
    pub jobs: u64,
    pub avg_wait_s: f64,
    pub p99_wait_s: f64,
    pub avg_jct_s: f64,
    pub p99_jct_s: f64,
}

/// The run's summary (`summary.json`; `--json` prints it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub policy: String,
    pub trace: String,
    pub cluster: String,
    pub seed: u64,
    /// Jobs measured (submitted after the warm-up, not skipped as unplaceable).
    pub jobs: u64,
    /// Measured jobs that finished.
    pub finished: u64,
    /// Jobs run during the warm-up, left out of the statistics.
    pub warmup_jobs: u64,
    /// Jobs that could never fit the cluster, skipped on request.
    pub skipped_unplaceable: u64,
    pub avg_jct_s: f64,
    /// An upper bound on what any policy achieves, as a JCT (a lower bound on `avg_jct_s`):
    /// the average JCT of the same finished jobs if each ran alone from its submit at its
    /// fastest speed (no wait, no preemption, no spread): the cluster's fastest catalog
    /// speed, or for a typed job in a run with a throughput table its best table speed over
    /// the cluster's GPU models it may use, at its own size. `avg_jct_s` is never below it;
    /// how far above it is all that a better scheduler could still win. 0 in summaries
    /// written before it existed.
    #[serde(default)]
    pub min_avg_jct_s: f64,
    pub p50_jct_s: f64,
    pub p95_jct_s: f64,
    pub p99_jct_s: f64,
    pub avg_wait_s: f64,
    pub p50_wait_s: f64,
    pub p95_wait_s: f64,
    pub p99_wait_s: f64,
    /// The 99.9th percentile and the longest wait of the finished measured jobs (the
    /// starvation bound's measure).
    #[serde(default)]
    pub p999_wait_s: f64,
    #[serde(default)]
    pub max_wait_s: f64,
    pub avg_bsld: f64,
    pub p95_bsld: f64,
    pub makespan_s: f64,
    /// Time-averaged allocated / total GPU capacity.
    pub gpu_alloc_rate: f64,
    /// Time-averaged FGD fragmentation / total GPU capacity.
    pub frag_gpu_rate: f64,
    /// Time-averaged allocated / total CPU capacity.
    pub cpu_alloc_rate: f64,
    pub avg_queue_len: f64,
    /// Jain's index over tenants of their mean run / JCT (1 = every tenant's jobs are slowed
    /// down alike; 1 with one tenant).
    pub jain_fairness: f64,
    pub energy_kwh: f64,
    pub preemptions: u64,
    /// Jobs started on a GPU another job already used (GPU sharing, docs/heterogeneity.md).
    /// Left out of the JSON when 0, so summaries of runs without sharing are unchanged.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub shares: u64,
    /// Elastic jobs resized while running. Left out of the JSON when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub resizes: u64,
    /// GPU-hours of work lost to preemption (since the last checkpoint, plus restart overhead).
    pub preemption_waste_gpu_h: f64,
    pub decisions: u64,
    pub rejected_decisions: u64,
    pub policy_errors: u64,
    /// Parts of policies' decisions the starvation bound refused (a preemption or resize of
    /// a job it protects, a start on a node it holds for a job waiting past the bound), and
    /// jobs it started itself (`SimConfig::starvation_bound`).
    #[serde(default)]
    pub bound_vetoes: u64,
    #[serde(default)]
    pub bound_starts: u64,
    /// Runs with quotas only (`SimConfig::quotas`): what the quotas were (`equal` or the
    /// file), and the parts of policies' decisions they refused (a start, share or growth
    /// the job's queue could not admit). Left out of the JSON without quotas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quotas: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub quota_vetoes: u64,
    /// Runs with quotas only: guarantees, borrowing, preemption and inversions, per queue
    /// and in all ([`QuotaMetrics`]). Left out of the JSON without quotas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_metrics: Option<QuotaMetrics>,
    pub events: u64,
    pub wall_s: f64,
    /// Runs with a throughput table only: reference GPU-hours of work the typed jobs did
    /// (trace duration x GPUs, as measured on the table's reference GPU) per GPU-hour they
    /// were allocated (restarts and lost work included), over the measured, finished typed
    /// jobs. 1.0 = as if every job ran at its trace shape on the reference GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effective_throughput: Option<f64>,
    /// Runs with a throughput table only: the share of those jobs' allocated GPU-time spent
    /// on their fastest GPU model in the cluster (at their size, consolidated; ties count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fastest_gpu_share: Option<f64>,
    /// A meta-policy's run only (`select`): what it followed and why, in one line
    /// (`SelectionLog::line`), and the wall seconds it spent choosing (within `wall_s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub select_wall_s: Option<f64>,
    /// Traces with dependencies only: jobs whose dependency can never be satisfied (Slurm's
    /// `DependencyNeverSatisfied`, listed by `simulate`); left out of the JSON when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dependency_never_satisfied: u64,
    /// Traces with dependencies only: the pipelines' completion times and slowdowns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipelines: Option<PipelineStats>,
}

/// Whether a count is 0 (a summary field then left out of the JSON).
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Mean of `xs` (0 when empty).
pub fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        0.0
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

/// The `q` quantile (0..=1) of sorted `xs` by linear interpolation (0 when empty).
pub fn quantile_sorted(xs: &[f64], q: f64) -> f64 {
    match xs.len() {
        0 => 0.0,
        1 => xs[0],
        n => {
            let pos = q.clamp(0.0, 1.0) * (n - 1) as f64;
            let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
            xs[lo] + (xs[hi] - xs[lo]) * (pos - lo as f64)
        }
    }
}

/// Jain's fairness over tenants: each tenant's mean of run / JCT over its measured finished
/// jobs (the inverse slowdown, in (0, 1]).
pub(crate) fn tenant_fairness(records: &[JobRecord]) -> f64 {
    let mut per_tenant: std::collections::BTreeMap<&str, (f64, u64)> = Default::default();
    for r in records.iter().filter(|r| r.measured) {
        let (Some(start), Some(end), Some(jct)) = (r.first_start, r.finish, r.jct()) else {
            continue;
        };
        let run = end.saturating_sub(start).secs_f64();
        let share = if jct.ms() == 0 {
            1.0
        } else {
            run / jct.secs_f64()
        };
        let e = per_tenant.entry(r.tenant.as_str()).or_default();
        e.0 += share;
        e.1 += 1;
    }
    let means: Vec<f64> = per_tenant.values().map(|(s, n)| s / *n as f64).collect();
    paired::jain(&means)
}

/// Job statistics for the summary: (avg, p50, p95, p99) of JCT and wait, (avg, p95) bsld.
pub(crate) struct JobStats {
    pub jobs: u64,
    pub finished: u64,
    pub jct: [f64; 4],
    pub wait: [f64; 4],
    /// p99.9 and max of wait.
    pub wait_tail: [f64; 2],
    pub bsld: [f64; 2],
}

pub(crate) fn job_stats(records: &[JobRecord]) -> JobStats {
    let measured: Vec<&JobRecord> = records.iter().filter(|r| r.measured).collect();
    let mut jct: Vec<f64> = measured
        .iter()
        .filter_map(|r| r.jct())
        .map(SimTime::secs_f64)
        .collect();
    let mut wait: Vec<f64> = measured
        .iter()
        .filter(|r| r.finish.is_some())
        .filter_map(|r| r.wait())
        .map(SimTime::secs_f64)
        .collect();
    let mut bsld: Vec<f64> = measured
        .iter()
        .filter_map(|r| r.bounded_slowdown())
        .collect();
    for v in [&mut jct, &mut wait, &mut bsld] {
        v.sort_by(f64::total_cmp);
    }
    let four = |v: &[f64]| {
        [
            mean(v),
            quantile_sorted(v, 0.5),
            quantile_sorted(v, 0.95),
            quantile_sorted(v, 0.99),
        ]
    };
    JobStats {
        jobs: measured.len() as u64,
        finished: jct.len() as u64,
        jct: four(&jct),
        wait: four(&wait),
        wait_tail: [
            quantile_sorted(&wait, 0.999),
            wait.last().copied().unwrap_or(0.0),
        ],
        bsld: [mean(&bsld), quantile_sorted(&bsld, 0.95)],
    }
}

fn opt_secs(t: Option<SimTime>) -> String {
    t.map_or_else(String::new, |t| format!("{:.3}", t.secs_f64()))
}

/// Writes `jobs.csv`: one row per job, times in seconds (empty when it never happened).
/// A run of a trace with dependencies adds `ready_s` (when the job's dependency was
/// satisfied) and `never_satisfied`.
pub fn write_jobs_csv(mut out: impl Write, records: &[JobRecord]) -> std::io::Result<()> {
    let pipelines = records
        .iter()
        .any(|r| r.ready.is_some() || r.never_satisfied);
    writeln!(
        out,
        "job_id,submit_s,start_s,end_s,wait_s,jct_s,bsld,preemptions,gpus,tenant,measured,nodes{}",
        if pipelines {
            ",ready_s,never_satisfied"
        } else {
            ""
        }
    )?;
    for r in records {
        write!(
            out,
            "{},{:.3},{},{},{},{},{},{},{},{},{},{}",
            csv_field(&r.name),
            r.submit.secs_f64(),
            opt_secs(r.first_start),
            opt_secs(r.finish),
            opt_secs(r.wait()),
            opt_secs(r.jct()),
            r.bounded_slowdown()
                .map_or_else(String::new, |b| format!("{b:.4}")),
            r.preemptions,
            r.gpus,
            csv_field(&r.tenant),
            r.measured,
            csv_field(&r.nodes),
        )?;
        if pipelines {
            write!(out, ",{},{}", opt_secs(r.ready), r.never_satisfied)?;
        }
        writeln!(out)?;
    }
    Ok(())
}

/// Writes `timeline.csv`.
pub fn write_timeline_csv(mut out: impl Write, rows: &[TimelineRow]) -> std::io::Result<()> {
    writeln!(
        out,
        "time_s,allocated_gpus,running_jobs,queue_len,frag_gpus,power_w"
    )?;
    for r in rows {
        writeln!(
            out,
            "{:.3},{:.3},{},{},{:.3},{:.1}",
            r.time_s, r.allocated_gpus, r.running_jobs, r.queue_len, r.frag_gpus, r.power_w
        )?;
    }
    Ok(())
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(submit: u64, start: u64, end: u64) -> JobRecord {
        JobRecord {
            name: "j".into(),
            submit: SimTime::from_secs(submit),
            first_start: Some(SimTime::from_secs(start)),
            finish: Some(SimTime::from_secs(end)),
            preemptions: 0,
            nodes: "n0".into(),
            gpus: 1,
            tenant: "t".into(),
            measured: true,
            ready: None,
            never_satisfied: false,
        }
    }

    #[test]
    fn bounded_slowdown_uses_the_10s_floor() {
        // wait 20, run 100: (20 + 100) / 100 = 1.2
        assert_eq!(rec(0, 20, 120).bounded_slowdown(), Some(1.2));
        // wait 20, run 2: (20 + 2) / max(2, 10) = 2.2
        assert_eq!(rec(0, 20, 22).bounded_slowdown(), Some(2.2));
        // no wait, run 2: 2 / 10 = 0.2, bounded below by 1
        assert_eq!(rec(0, 0, 2).bounded_slowdown(), Some(1.0));
    }

    #[test]
    fn quantiles_interpolate() {
        let xs = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(quantile_sorted(&xs, 0.5), 3.0);
        assert_eq!(quantile_sorted(&xs, 0.95), 4.8);
        assert_eq!(quantile_sorted(&[], 0.5), 0.0);
    }

    #[test]
    fn jobs_csv_quotes_what_needs_it() {
        let mut r = rec(0, 1, 2);
        r.name = "a,b".into();
        let mut out = Vec::new();
        write_jobs_csv(&mut out, &[r]).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.lines()
                .nth(1)
                .unwrap()
                .starts_with("\"a,b\",0.000,1.000,2.000,1.000,2.000,")
        );
    }
}
