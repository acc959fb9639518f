//! Gavel's job generator (`scheduler/utils.py` `generate_job` and `scheduler.py`
//! `_sample_arrival_time_delta` of `stanford-futuredata/gavel` @
//! [`crate::throughput::gavel::COMMIT`]), deterministic under a seed:
//! - arrivals: a Poisson process of `jobs_per_hour` (exponential gaps, `-ln(1 - U) / rate`);
//! - duration on the reference GPU (V100) at the job's size, seconds: `60 x 10^U(3, 4)` with
//!   probability 0.2, else `60 x 10^U(1.5, 3)` (`_generate_duration`, "the Philly
//!   distribution": 31.6 min to 16.7 h, or 16.7 h to 6.9 days; mean 16.8 h);
//! - GPUs (`_generate_scale_factor`, only with `multi_gpu`): 1 for U < 0.7, 2 for U < 0.8, 4
//!   for U < 0.95, else 8;
//! - the job template: uniform over Gavel's 26, a multi-GPU job over the 19 `distributed`
//!   ones (drawn until one fits, in Gavel; one uniform draw over those that fit here).
//!
//! Jobs ask for whole GPUs on one task, no CPU or memory (Gavel models GPUs only), and carry
//! their template as workload type: run them with the `gavel` table.

use crate::job::{JobKind, JobSpec, Qos, TaskRequest, Trace, WorkloadType};
use crate::throughput::gavel::TEMPLATES;
use crate::units::{JobId, SimTime, TenantId};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// What to generate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GavelWorkload {
    pub jobs: usize,
    /// Poisson arrival rate, jobs per hour, > 0.
    pub jobs_per_hour: f64,
    /// Draw GPU counts from Gavel's scale-factor distribution (else every job 1 GPU).
    pub multi_gpu: bool,
    pub seed: u64,
}

/// Why a workload could not be generated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GavelWorkloadError {
    #[error("jobs_per_hour must be a finite number > 0, got {0}")]
    Rate(f64),
    #[error("no jobs to generate")]
    Empty,
    #[error("invalid generated trace: {0}")]
    Trace(String),
    #[error(
        "`{spec}`: {why}; expected gavel:RATE:JOBS[:SEED][:multi] (RATE in jobs/h, e.g. \
         gavel:5.6:3000:1)"
    )]
    Spec { spec: String, why: String },
}

impl GavelWorkload {
    /// Reads a generator spec, `gavel:RATE:JOBS[:SEED][:multi]`: Poisson arrivals at RATE jobs
    /// per hour, JOBS jobs, SEED (default 0), and Gavel's multi-GPU sizes with `multi` (else
    /// every job 1 GPU). `SEED` and `multi` may come in either order.
    pub fn parse(spec: &str) -> Result<Self, GavelWorkloadError> {
        let bad = |why: String| GavelWorkloadError::Spec {
            spec: spec.to_string(),
            why,
        };
        let mut parts = spec.trim().split(':');
        match parts.next() {
            Some("gavel") => {}
            Some(other) => return Err(bad(format!("unknown generator `{other}` (known: gavel)"))),
            None => return Err(bad("empty".into())),
        }
        let rate = parts.next().ok_or_else(|| bad("no RATE".into()))?;
        let jobs_per_hour: f64 = rate
            .trim_end_matches("/h")
            .parse()
            .map_err(|_| bad(format!("RATE `{rate}` is not a number of jobs per hour")))?;
        if !(jobs_per_hour.is_finite() && jobs_per_hour > 0.0) {
            return Err(bad(format!("RATE must be > 0 jobs/h, got {rate}")));
        }
        let count = parts.next().ok_or_else(|| bad("no JOBS".into()))?;
        let jobs: usize = count
            .parse()
            .ok()
            .filter(|n| (1..=u32::MAX as usize).contains(n))
            .ok_or_else(|| bad(format!("JOBS `{count}` is not a job count >= 1")))?;
        let (mut seed, mut multi_gpu) = (None, false);
        for part in parts {
            match part {
                "multi" if !multi_gpu => multi_gpu = true,
                s if seed.is_none() && s.parse::<u64>().is_ok() => seed = s.parse().ok(),
                other => return Err(bad(format!("unexpected `{other}`"))),
            }
        }
        Ok(GavelWorkload {
            jobs,
            jobs_per_hour,
            multi_gpu,
            seed: seed.unwrap_or(0),
        })
    }
}

/// Gavel's `_generate_duration`, seconds.
fn duration_s(rng: &mut StdRng) -> f64 {
    let (lo, hi) = if rng.random::<f64>() >= 0.8 {
        (3.0, 4.0)
    } else {
        (1.5, 3.0)
    };
    60.0 * 10f64.powf(rng.random_range(lo..hi))
}

/// Gavel's `_generate_scale_factor`.
fn scale_factor(rng: &mut StdRng) -> u32 {
    let r: f64 = rng.random();
    if r >= 0.95 {
        8
    } else if r >= 0.8 {
        4
    } else if r >= 0.7 {
        2
    } else {
        1
    }
}

/// The trace Gavel's generator would draw (in distribution, not its exact stream).
pub fn gavel_workload(w: &GavelWorkload) -> Result<Trace, GavelWorkloadError> {
    if !(w.jobs_per_hour.is_finite() && w.jobs_per_hour > 0.0) {
        return Err(GavelWorkloadError::Rate(w.jobs_per_hour));
    }
    if w.jobs == 0 {
        return Err(GavelWorkloadError::Empty);
    }
    let mut rng = StdRng::seed_from_u64(w.seed);
    let rate_per_s = w.jobs_per_hour / 3600.0;
    let distributed: Vec<_> = TEMPLATES.iter().filter(|t| t.distributed).collect();
    let mut t_s = 0.0;
    let mut jobs = Vec::with_capacity(w.jobs);
    let mut durations = Vec::with_capacity(w.jobs);
    for i in 0..w.jobs {
        if i > 0 {
            t_s += -(1.0 - rng.random::<f64>()).ln() / rate_per_s;
        }
        let gpus = if w.multi_gpu {
            scale_factor(&mut rng)
        } else {
            1
        };
        let run_s = duration_s(&mut rng);
        let template = if gpus > 1 {
            distributed[rng.random_range(0..distributed.len())]
        } else {
            &TEMPLATES[rng.random_range(0..TEMPLATES.len())]
        };
        let submit = SimTime::from_secs_f64(t_s).unwrap_or(SimTime::ZERO);
        jobs.push(JobSpec {
            id: JobId(u32::try_from(i).unwrap_or(u32::MAX)),
            name: format!("gavel-{i:06}"),
            submit,
            tasks: 1,
            task: TaskRequest::whole(gpus, 0, 0),
            gpu_types: Vec::new(),
            tenant: TenantId(0),
            priority: 0,
            qos: Qos::LatencySensitive,
            preemptible: true,
            kind: JobKind::Training,
            estimate: None,
            workload: WorkloadType::new(template.name),
            constraints: Default::default(),
            elastic: None,
        });
        durations.push(SimTime::from_secs_f64(run_s).unwrap_or(SimTime::ZERO));
    }
    Trace::new(
        format!(
            "gavel-workload ({} jobs, {} jobs/h, {}, seed {})",
            w.jobs,
            w.jobs_per_hour,
            if w.multi_gpu { "multi-GPU" } else { "1-GPU" },
            w.seed
        ),
        jobs,
        durations,
        vec!["default".into()],
    )
    .map_err(|e| GavelWorkloadError::Trace(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_bad_ones_say_why() {
        let w = |jobs_per_hour, jobs, seed, multi_gpu| GavelWorkload {
            jobs,
            jobs_per_hour,
            multi_gpu,
            seed,
        };
        for (spec, want) in [
            ("gavel:5.6:3000", w(5.6, 3000, 0, false)),
            ("gavel:4:100:7", w(4.0, 100, 7, false)),
            ("gavel:4.0/h:100:multi", w(4.0, 100, 0, true)),
            ("gavel:4:100:multi:3", w(4.0, 100, 3, true)),
            ("gavel:4:100:3:multi", w(4.0, 100, 3, true)),
        ] {
            assert_eq!(GavelWorkload::parse(spec).unwrap(), want, "{spec}");
        }
        for (spec, why) in [
            ("", "unknown generator"),
            ("sia:4:100", "unknown generator `sia`"),
            ("gavel", "no RATE"),
            ("gavel:fast:100", "RATE `fast`"),
            ("gavel:0:100", "RATE must be > 0"),
            ("gavel:-1:100", "RATE must be > 0"),
            ("gavel:inf:100", "RATE must be > 0"),
            ("gavel:4", "no JOBS"),
            ("gavel:4:0", "JOBS `0`"),
            ("gavel:4:1.5", "JOBS `1.5`"),
            ("gavel:4:10:1:2", "unexpected `2`"),
            ("gavel:4:10:multi:multi", "unexpected `multi`"),
            ("gavel:4:10:big", "unexpected `big`"),
        ] {
            let e = GavelWorkload::parse(spec).unwrap_err().to_string();
            assert!(
                e.contains(why) && e.contains("gavel:RATE:JOBS"),
                "{spec}: {e}"
            );
        }
    }

    #[test]
    fn moments_match_gavels_distributions() {
        let w = GavelWorkload {
            jobs: 20_000,
            jobs_per_hour: 5.6,
            multi_gpu: true,
            seed: 1,
        };
        let t = gavel_workload(&w).unwrap();
        let n = t.len() as f64;
        // Mean gap: 3600 / 5.6 = 642.9 s; over 19,999 gaps the standard error is 0.7%.
        let span = t.jobs().last().unwrap().submit.ms() as f64 / 1000.0;
        let gap = span / (n - 1.0);
        assert!((gap / 642.857 - 1.0).abs() < 0.03, "{gap}");
        // Duration mean: E[60 x 10^U(a, b)] = 60 (10^b - 10^a) / ((b - a) ln 10).
        // Short: 60 (1000 - 31.62) / (1.5 x 2.3026) = 16,820 s; long: 60 x 9000 / 2.3026 =
        // 234,520 s; mixed 0.8 x 16,820 + 0.2 x 234,520 = 60,360 s.
        let mean = t
            .true_durations()
            .iter()
            .map(|d| d.ms() as f64 / 1000.0)
            .sum::<f64>()
            / n;
        assert!((mean / 60_360.0 - 1.0).abs() < 0.04, "{mean}");
        let long = t
            .true_durations()
            .iter()
            .filter(|d| d.ms() >= 60_000_000)
            .count() as f64;
        assert!((long / n - 0.2).abs() < 0.01, "{}", long / n);
        // GPU counts: 0.7, 0.1, 0.15, 0.05; multi-GPU jobs only from distributed templates.
        for (gpus, p) in [(1, 0.7), (2, 0.1), (4, 0.15), (8, 0.05)] {
            let share = t.jobs().iter().filter(|j| j.task.gpus == gpus).count() as f64 / n;
            assert!((share - p).abs() < 0.012, "{gpus}: {share}");
        }
        for j in t.jobs().iter().filter(|j| j.task.gpus > 1) {
            let name = j.workload.as_ref().unwrap().as_str();
            assert!(TEMPLATES.iter().any(|t| t.name == name && t.distributed));
        }
        // Same seed, same trace; 1-GPU mode is all 1-GPU.
        assert_eq!(gavel_workload(&w).unwrap().jobs(), t.jobs());
        let one = gavel_workload(&GavelWorkload {
            multi_gpu: false,
            jobs: 100,
            ..w
        })
        .unwrap();
        assert!(one.jobs().iter().all(|j| j.task.gpus == 1));
        assert!(matches!(
            gavel_workload(&GavelWorkload {
                jobs_per_hour: 0.0,
                ..w
            }),
            Err(GavelWorkloadError::Rate(_))
        ));
    }
}
