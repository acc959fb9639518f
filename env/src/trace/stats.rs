//! Trace statistics: size, arrival span, GPU demand, job shapes, true durations and offered
//! load, as a serializable struct (for `--json`) and a compact human table (`Display`).
//!
//! Definitions:
//! - GPU demand buckets count jobs by the total GPU capacity their gang asks for,
//!   `tasks x gpus x gpu_milli`, rounded up to whole GPUs: `0` (CPU-only), `<1` (a share of
//!   one GPU), `1`, `2`, `3-4`, `5-8`, `9-16`, `17-32`, `33-64`, `>64`.
//! - Shares are fractions of all jobs: fractional (a task takes a share of one GPU), gang
//!   (more than one task), constrained (a GPU-type list is given).
//! - Duration quantiles use the true durations and the nearest-rank method: the p-quantile of
//!   n sorted values is the value at rank ceil(p x n).
//! - GPU-hours: sum of total milli-GPU x true duration, over 1000 x 3600 s.
//! - Offered load: [`Trace::offered_load`] on the given cluster.
//! - Arrivals: the mean rate over the span, and counts by hour of day and by day of the week of
//!   the trace's own clock (hour `(t / 3600) mod 24`, day `(t / 86400) mod 7`): relative-time
//!   traces do not say which weekday their origin was, so day 0 is the origin's day.
//! - GPUs per job: quantiles of the gang's total GPU capacity in GPUs (shares as fractions).
//! - A static workload (read from a format without times, see
//!   [`super::TraceFormat::has_times`]) has no submit range, durations, arrivals, GPU work or
//!   offered load: those are left out (empty, or 0), not computed from placeholder times.

use super::ReadReport;
use crate::cluster::ClusterSpec;
use crate::job::Trace;
use crate::units::{GPU_MILLI, SimTime};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Labels of the GPU demand buckets, in order; see the module docs.
pub const DEMAND_BUCKETS: [&str; 10] = [
    "0", "<1", "1", "2", "3-4", "5-8", "9-16", "17-32", "33-64", ">64",
];

/// Summary of one trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceStats {
    /// The trace's name (its file).
    pub name: String,
    pub jobs: u64,
    /// Entries in the tenant table.
    pub tenants: u64,
    /// What the reader kept and dropped, when the trace was read from a file.
    pub read: Option<ReadReport>,
    /// First and last submit time, seconds (absent for an empty trace).
    pub first_submit_s: Option<f64>,
    pub last_submit_s: Option<f64>,
    /// last - first submit, seconds.
    pub span_s: f64,
    /// Jobs per GPU demand bucket, in `DEMAND_BUCKETS` order.
    pub gpu_demand: Vec<DemandBucket>,
    pub fractional_share: f64,
    pub gang_share: f64,
    pub constrained_share: f64,
    /// True durations, seconds (absent for an empty trace).
    pub duration_s: Option<Quantiles>,
    /// GPUs per job (total of the gang, shares as fractions).
    pub gpus_per_job: Option<Quantiles>,
    /// Mean arrivals per hour over the span.
    pub arrivals_per_hour: f64,
    /// Arrivals by hour of day (24 counts, hour 0 first).
    pub arrivals_by_hour_of_day: Vec<u64>,
    /// Arrivals by day of the trace's week (7 counts, the origin's day first).
    pub arrivals_by_weekday: Vec<u64>,
    /// GPU work the trace asks for, GPU-hours at speed 1.0.
    pub gpu_hours: f64,
    /// Offered load on the given cluster.
    pub offered_load: Option<OfferedLoad>,
    /// The trace has no arrival or duration times (a static workload): the time-based fields
    /// are left out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub static_workload: bool,
}

/// One bar of the GPU demand histogram.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DemandBucket {
    /// Total GPUs per job, e.g. `3-4`.
    pub gpus: String,
    pub jobs: u64,
}

/// Nearest-rank quantiles and the mean, seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

/// The trace's offered load on one cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OfferedLoad {
    pub cluster: String,
    pub cluster_gpus: u64,
    pub load: f64,
}

impl TraceStats {
    /// Summarises `trace`, with its read report and its offered load on `cluster` when given.
    pub fn compute(
        trace: &Trace,
        report: Option<&ReadReport>,
        cluster: Option<&ClusterSpec>,
    ) -> TraceStats {
        let stats = Self::compute_timed(trace, report, cluster);
        match report {
            Some(r) if !r.format.has_times() => stats.without_times(),
            _ => stats,
        }
    }

    /// The statistics of a static workload: the time-based fields emptied.
    fn without_times(self) -> TraceStats {
        TraceStats {
            first_submit_s: None,
            last_submit_s: None,
            span_s: 0.0,
            duration_s: None,
            arrivals_per_hour: 0.0,
            arrivals_by_hour_of_day: vec![0; 24],
            arrivals_by_weekday: vec![0; 7],
            gpu_hours: 0.0,
            offered_load: None,
            static_workload: true,
            ..self
        }
    }

    fn compute_timed(
        trace: &Trace,
        report: Option<&ReadReport>,
        cluster: Option<&ClusterSpec>,
    ) -> TraceStats {
        let jobs = trace.jobs();
        let share = |pred: &dyn Fn(&crate::job::JobSpec) -> bool| {
            let n = jobs.iter().filter(|j| pred(j)).count();
            if jobs.is_empty() {
                0.0
            } else {
                n as f64 / jobs.len() as f64
            }
        };
        let mut demand = [0u64; DEMAND_BUCKETS.len()];
        for job in jobs {
            demand[demand_bucket(job.gpu_milli_total())] += 1;
        }
        let durations: Vec<SimTime> = jobs.iter().map(|j| trace.true_duration(j.id)).collect();
        let gpu_milli_ms: f64 = jobs
            .iter()
            .zip(&durations)
            .map(|(j, d)| j.gpu_milli_total() as f64 * d.ms() as f64)
            .sum();
        let range = trace.submit_range();
        let span_s = range.map_or(0.0, |(first, last)| last.saturating_sub(first).secs_f64());
        let mut by_hour = vec![0u64; 24];
        let mut by_day = vec![0u64; 7];
        for job in jobs {
            let secs = job.submit.ms() / 1000;
            by_hour[(secs / 3600 % 24) as usize] += 1;
            by_day[(secs / 86_400 % 7) as usize] += 1;
        }
        let gpus: Vec<f64> = jobs
            .iter()
            .map(|j| j.gpu_milli_total() as f64 / f64::from(GPU_MILLI))
            .collect();
        TraceStats {
            name: trace.name.clone(),
            jobs: jobs.len() as u64,
            tenants: trace.tenants().len() as u64,
            read: report.cloned(),
            first_submit_s: range.map(|(first, _)| first.secs_f64()),
            last_submit_s: range.map(|(_, last)| last.secs_f64()),
            span_s,
            gpu_demand: DEMAND_BUCKETS
                .iter()
                .zip(demand)
                .map(|(label, jobs)| DemandBucket {
                    gpus: label.to_string(),
                    jobs,
                })
                .collect(),
            fractional_share: share(&|j| j.task.is_fractional()),
            gang_share: share(&|j| j.tasks > 1),
            constrained_share: share(&|j| !j.gpu_types.is_empty()),
            duration_s: quantiles(durations.iter().map(|d| d.secs_f64()).collect()),
            gpus_per_job: quantiles(gpus),
            arrivals_per_hour: if span_s > 0.0 {
                jobs.len() as f64 / (span_s / 3600.0)
            } else {
                0.0
            },
            arrivals_by_hour_of_day: by_hour,
            arrivals_by_weekday: by_day,
            gpu_hours: gpu_milli_ms / (f64::from(GPU_MILLI) * 3_600_000.0),
            offered_load: cluster.map(|c| OfferedLoad {
                cluster: c.name.clone(),
                cluster_gpus: c.total_gpus(),
                load: trace.offered_load(c),
            }),
            static_workload: false,
        }
    }
}

/// Index into `DEMAND_BUCKETS` of a job asking for `milli` milli-GPU in total.
fn demand_bucket(milli: u64) -> usize {
    let gpus = milli.div_ceil(u64::from(GPU_MILLI));
    match (milli, gpus) {
        (0, _) => 0,
        (m, _) if m < u64::from(GPU_MILLI) => 1,
        (_, 1) => 2,
        (_, 2) => 3,
        (_, 3..=4) => 4,
        (_, 5..=8) => 5,
        (_, 9..=16) => 6,
        (_, 17..=32) => 7,
        (_, 33..=64) => 8,
        _ => 9,
    }
}

/// Nearest-rank quantiles of `values`; `None` when empty.
fn quantiles(mut values: Vec<f64>) -> Option<Quantiles> {
    values.sort_unstable_by(f64::total_cmp);
    let n = values.len();
    let at = |p: f64| {
        let rank = (p * n as f64).ceil() as usize;
        values[rank.clamp(1, n) - 1]
    };
    let max = *values.last()?;
    Some(Quantiles {
        p50: at(0.5),
        p90: at(0.9),
        p99: at(0.99),
        max,
        mean: values.iter().sum::<f64>() / n as f64,
    })
}

/// Seconds in the largest unit that keeps the number readable: `45 s`, `12.5 min`, `3.2 h`,
/// `1.5 d`.
fn human_secs(s: f64) -> String {
    if s < 120.0 {
        format!("{s:.0} s")
    } else if s < 7_200.0 {
        format!("{:.1} min", s / 60.0)
    } else if s < 172_800.0 {
        format!("{:.1} h", s / 3_600.0)
    } else {
        format!("{:.1} d", s / 86_400.0)
    }
}

fn percent(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

impl fmt::Display for TraceStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{:<14}{}", "trace", self.name)?;
        if let Some(r) = &self.read {
            let dropped: Vec<String> = r.dropped.iter().map(|(k, v)| format!("{k} {v}")).collect();
            writeln!(
                f,
                "{:<14}{} format, {} rows, {} kept, {} dropped{}, {} censored",
                "read",
                r.format,
                r.rows,
                r.kept,
                r.dropped_total(),
                if dropped.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", dropped.join(", "))
                },
                r.censored
            )?;
            if !r.notes.is_empty() {
                let notes: Vec<String> = r.notes.iter().map(|(k, v)| format!("{k}: {v}")).collect();
                writeln!(f, "{:<14}{}", "file notes", notes.join("; "))?;
            }
            if !r.unmodelled.is_empty() {
                let left_out: Vec<String> = r
                    .unmodelled
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect();
                writeln!(
                    f,
                    "{:<14}{} (jobs, left out)",
                    "not modelled",
                    left_out.join(", ")
                )?;
            }
        }
        write!(
            f,
            "{:<14}{} from {} tenant(s)",
            "jobs", self.jobs, self.tenants
        )?;
        if let (Some(first), Some(last)) = (self.first_submit_s, self.last_submit_s) {
            write!(
                f,
                ", submitted over {} ({first:.0} s .. {last:.0} s)",
                human_secs(self.span_s)
            )?;
        }
        writeln!(f)?;
        if self.static_workload {
            writeln!(
                f,
                "{:<14}none: a static workload (jobs arrive once and never leave)",
                "times"
            )?;
        }
        writeln!(f, "{:<14}{:>8}  {:>6}", "GPUs per job", "jobs", "share")?;
        for bucket in &self.gpu_demand {
            let share = if self.jobs == 0 {
                0.0
            } else {
                bucket.jobs as f64 / self.jobs as f64
            };
            writeln!(
                f,
                "{:<14}{:>8}  {:>6}",
                format!("  {}", bucket.gpus),
                bucket.jobs,
                percent(share)
            )?;
        }
        writeln!(
            f,
            "{:<14}fractional {}, gang {}, GPU-type constrained {}",
            "shares",
            percent(self.fractional_share),
            percent(self.gang_share),
            percent(self.constrained_share)
        )?;
        if let Some(q) = &self.duration_s {
            writeln!(
                f,
                "{:<14}p50 {}, p90 {}, p99 {}, max {}, mean {}",
                "duration",
                human_secs(q.p50),
                human_secs(q.p90),
                human_secs(q.p99),
                human_secs(q.max),
                human_secs(q.mean)
            )?;
        }
        if let Some(q) = &self.gpus_per_job {
            writeln!(
                f,
                "{:<14}p50 {}, p90 {}, p99 {}, max {}, mean {:.2}",
                "GPUs per job", q.p50, q.p90, q.p99, q.max, q.mean
            )?;
        }
        if self.static_workload {
            return Ok(());
        }
        writeln!(
            f,
            "{:<14}{:.1} per hour; by hour of day {:?}",
            "arrivals", self.arrivals_per_hour, self.arrivals_by_hour_of_day
        )?;
        writeln!(
            f,
            "{:<14}by day of the trace's week (origin's day first) {:?}",
            "", self.arrivals_by_weekday
        )?;
        writeln!(f, "{:<14}{:.1} GPU-hours", "GPU work", self.gpu_hours)?;
        if let Some(load) = &self.offered_load {
            writeln!(
                f,
                "{:<14}{:.3} on {} ({} GPUs)",
                "offered load", load.load, load.cluster, load.cluster_gpus
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::TaskRequest;
    use crate::job::tests::job;

    #[test]
    fn demand_buckets_round_up_to_whole_gpus() {
        let cases = [
            (0, "0"),
            (1, "<1"),
            (999, "<1"),
            (1000, "1"),
            (1001, "2"),
            (2000, "2"),
            (4000, "3-4"),
            (8000, "5-8"),
            (16_000, "9-16"),
            (32_000, "17-32"),
            (64_000, "33-64"),
            (64_001, ">64"),
        ];
        for (milli, label) in cases {
            assert_eq!(DEMAND_BUCKETS[demand_bucket(milli)], label, "{milli}");
        }
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let q = quantiles((1..=10).map(f64::from).collect()).unwrap();
        // n = 10: p50 -> rank 5, p90 -> rank 9, p99 -> rank ceil(9.9) = 10.
        assert_eq!(
            (q.p50, q.p90, q.p99, q.max, q.mean),
            (5.0, 9.0, 10.0, 10.0, 5.5)
        );
        assert!(quantiles(Vec::new()).is_none());
    }

    #[test]
    fn stats_of_a_small_trace() {
        let frac = TaskRequest {
            gpus: 1,
            gpu_milli: 500,
            cpu_milli: 0,
            mem_mib: 0,
        };
        let mut gang = job("g", 100, TaskRequest::whole(8, 0, 0));
        gang.tasks = 2;
        gang.gpu_types = vec!["V100".into()];
        let trace = Trace::new(
            "t",
            vec![
                job("f", 0, frac),
                gang,
                job("c", 50, TaskRequest::whole(0, 1000, 0)),
            ],
            vec![
                SimTime::from_secs(3600),
                SimTime::from_secs(1800),
                SimTime(1),
            ],
            vec!["default".into()],
        )
        .unwrap();
        let cluster = crate::cluster::tests::uniform(2, 8, "V100", 64_000, 1 << 20);
        let s = TraceStats::compute(&trace, None, Some(&cluster));
        assert_eq!((s.jobs, s.span_s), (3, 100.0));
        let counts: Vec<u64> = s.gpu_demand.iter().map(|b| b.jobs).collect();
        assert_eq!(counts, [1, 1, 0, 0, 0, 0, 1, 0, 0, 0]);
        assert!((s.gang_share - 1.0 / 3.0).abs() < 1e-12);
        assert!((s.constrained_share - 1.0 / 3.0).abs() < 1e-12);
        // 0.5 GPU x 1 h + 16 GPUs x 0.5 h = 8.5 GPU-hours
        assert!((s.gpu_hours - 8.5).abs() < 1e-9);
        // work 8.5 GPU-h over 16 GPUs x 100 s
        let load = s.offered_load.as_ref().unwrap().load;
        assert!((load - 8.5 * 3600.0 / (16.0 * 100.0)).abs() < 1e-9);
        let table = s.to_string();
        assert!(table.contains("  9-16               1   33.3%"), "{table}");
        assert!(
            table.contains("offered load  19.125 on test (16 GPUs)"),
            "{table}"
        );
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["gpu_demand"][1]["gpus"], "<1");
    }

    #[test]
    fn a_static_workload_has_no_times() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../traces/fixtures/openb-static-format.csv");
        let read = crate::trace::read_trace(&path, None).unwrap();
        let cluster = crate::cluster::tests::uniform(2, 8, "V100", 64_000, 1 << 20);
        let s = TraceStats::compute(&read.trace, Some(&read.report), Some(&cluster));
        assert!(s.static_workload && s.duration_s.is_none() && s.first_submit_s.is_none());
        assert!(s.offered_load.is_none() && s.arrivals_by_hour_of_day.iter().all(|n| *n == 0));
        assert_eq!((s.jobs, s.gpu_demand[1].jobs), (20, 4));
        let table = s.to_string();
        assert!(
            table.contains("times         none: a static workload"),
            "{table}"
        );
        assert!(
            !table.contains("arrivals") && !table.contains("GPU work"),
            "{table}"
        );
        assert_eq!(serde_json::to_value(&s).unwrap()["static_workload"], true);
        // A timed trace does not mention it.
        let timed = TraceStats::compute(&read.trace, None, None);
        assert!(
            serde_json::to_value(&timed)
                .unwrap()
                .get("static_workload")
                .is_none()
        );
    }

    #[test]
    fn empty_trace_has_no_quantiles() {
        let t = Trace::new("e", vec![], vec![], vec![]).unwrap();
        let s = TraceStats::compute(&t, None, None);
        assert!(s.duration_s.is_none() && s.first_submit_s.is_none());
        assert_eq!(s.fractional_share, 0.0);
        assert!(s.to_string().contains("0 from 0 tenant(s)"));
    }
}
