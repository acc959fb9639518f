//! Workload types for traces that name none, by a published rule, deterministic under a seed.
//! The rule and the seed come back with the trace ([`WorkloadAssignment`]) so that every report
//! can say which types were assumed and how.
//!
//! - [`WorkloadRule::Gavel`]: uniform over Gavel's 26 job templates; a job on more than one GPU
//!   only from the 19 `distributed` ones. Gavel draws `rng.choice(JobTable)` until a template
//!   fits the scale factor (`scheduler/utils.py:102-108` @ [`super::gavel::COMMIT`]); one
//!   uniform draw over the templates that fit has the same distribution.
//! - [`WorkloadRule::Sia`]: by the job's total GPU-hours (GPUs x true duration): < 1 `cifar10`;
//!   1 to < 10 `deepspeech2` or `bert`, a fair coin; 10 to < 100 `yolov3`; >= 100 `imagenet`
//!   (`sia-simulator/utils/generate_workload.py:55-76` @ [`super::sia::COMMIT`]). Sia also
//!   resamples each job's GPU count and batch size there; Lachesis keeps the trace's.
//!
//! Either rule leaves a job that asks for no GPU untyped, and a job that already has a type as
//! it is. Jobs are drawn in trace order from one generator seeded with the seed, so assign
//! before cutting windows to give a job the same type in every window.

use super::{gavel, sia};
use crate::job::{JobSpec, Trace, WorkloadType};
use crate::units::SimTime;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// A rule that gives a job a workload type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadRule {
    /// Gavel's job templates, uniformly; multi-GPU jobs from the distributed ones.
    Gavel,
    /// Sia's models by the job's GPU-hours.
    Sia,
}

impl WorkloadRule {
    pub const ALL: [WorkloadRule; 2] = [WorkloadRule::Gavel, WorkloadRule::Sia];

    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadRule::Gavel => "gavel",
            WorkloadRule::Sia => "sia",
        }
    }

    pub fn parse(text: &str) -> Option<WorkloadRule> {
        Self::ALL
            .into_iter()
            .find(|r| r.as_str().eq_ignore_ascii_case(text.trim()))
    }

    /// Where the rule is taken from, for reports.
    pub fn source(self) -> &'static str {
        match self {
            WorkloadRule::Gavel => {
                "Gavel (OSDI'20) scheduler/utils.py:102-108: uniform over job_table.py's 26 \
                 templates, multi-GPU jobs over the 19 distributed ones"
            }
            WorkloadRule::Sia => {
                "Sia (SOSP'23) sia-simulator/utils/generate_workload.py:55-76: by GPU-hours, \
                 <1 cifar10, <10 deepspeech2 or bert (fair coin), <100 yolov3, else imagenet"
            }
        }
    }
}

impl fmt::Display for WorkloadRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What [`assign_workloads`] did, for reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadAssignment {
    pub rule: WorkloadRule,
    pub seed: u64,
    /// Jobs given a type by the rule.
    pub assigned: u64,
    /// Jobs that already had a type, kept.
    pub kept: u64,
    /// Jobs left untyped because they ask for no GPU.
    pub cpu_only: u64,
    /// Jobs given each type by the rule.
    pub counts: BTreeMap<String, u64>,
}

impl WorkloadAssignment {
    /// `gavel (seed 7)`: the rule and seed, as a report's one-line label.
    pub fn label(&self) -> String {
        format!("{} (seed {})", self.rule, self.seed)
    }
}

/// One GPU-hour in milli-GPU x milliseconds.
const GPU_HOUR: u128 = 3_600 * 1_000 * 1_000;

/// `trace` with every untyped GPU job given a type by `rule`, and the account of it.
pub fn assign_workloads(
    trace: &Trace,
    rule: WorkloadRule,
    seed: u64,
) -> (Trace, WorkloadAssignment) {
    let mut account = WorkloadAssignment {
        rule,
        seed,
        assigned: 0,
        kept: 0,
        cpu_only: 0,
        counts: BTreeMap::new(),
    };
    let all: Vec<&str> = gavel::TEMPLATES.iter().map(|t| t.name).collect();
    let distributed: Vec<&str> = gavel::TEMPLATES
        .iter()
        .filter(|t| t.distributed)
        .map(|t| t.name)
        .collect();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut draw = |job: &JobSpec, duration: SimTime| -> &'static str {
        match rule {
            WorkloadRule::Gavel => {
                let fits = if job.gpus_total() > 1 {
                    &distributed
                } else {
                    &all
                };
                fits[rng.random_range(0..fits.len())]
            }
            WorkloadRule::Sia => {
                let gpu_time = u128::from(job.gpu_milli_total()) * u128::from(duration.ms());
                let [cifar10, imagenet, bert, deepspeech2, yolov3, _] = sia::MODELS;
                if gpu_time < GPU_HOUR {
                    cifar10
                } else if gpu_time < 10 * GPU_HOUR {
                    if rng.random_bool(0.5) {
                        bert
                    } else {
                        deepspeech2
                    }
                } else if gpu_time < 100 * GPU_HOUR {
                    yolov3
                } else {
                    imagenet
                }
            }
        }
    };
    let jobs: Vec<JobSpec> = trace
        .jobs()
        .iter()
        .zip(trace.true_durations())
        .map(|(job, duration)| {
            let mut job = job.clone();
            if job.workload.is_some() {
                account.kept += 1;
            } else if job.gpu_milli_total() == 0 {
                account.cpu_only += 1;
            } else {
                let name = draw(&job, *duration);
                *account.counts.entry(name.to_string()).or_insert(0) += 1;
                account.assigned += 1;
                job.workload = WorkloadType::new(name);
            }
            job
        })
        .collect();
    let typed = trace
        .rebuilt(jobs, trace.true_durations().to_vec())
        .expect("the same jobs with types are as valid as without");
    (typed, account)
}
