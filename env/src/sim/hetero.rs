//! Heterogeneity metrics of a run with a throughput table: how much reference work typed jobs
//! got per allocated GPU-hour, and how much of their GPU-time they spent on their fastest GPU
//! model. Fed one record per run start (the engine's only hook); summed once at the end.
//! Knows nothing of events.

use crate::job::JobSpec;
use crate::policy::ThroughputView;
use crate::units::{JobId, NodeId};

/// One run of a typed job: its GPU service attained before the run, and whether the run is on
/// the job's fastest GPU model.
#[derive(Debug, Clone, Copy)]
struct Run {
    job: JobId,
    attained_before: u128,
    on_fastest: bool,
}

/// What a typed job did over the run, for [`hetero_summary`]: its trace duration (reference
/// work), its GPUs in milli-GPU, and its attained GPU service (allocated milli-GPU x ms).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TypedJob {
    pub(crate) id: JobId,
    pub(crate) duration_ms: u64,
    pub(crate) gpu_milli: u64,
    pub(crate) attained_gpu_milli_ms: u128,
}

/// Runs of typed jobs, in start order.
#[derive(Debug, Clone, Default)]
pub(crate) struct HeteroRuns {
    runs: Vec<Run>,
}

impl HeteroRuns {
    /// Records that `job` starts a run on `nodes` having attained `attained_before` milli-GPU
    /// x ms; untyped jobs are not recorded.
    pub(crate) fn started(
        &mut self,
        view: &ThroughputView,
        job: &JobSpec,
        nodes: &[NodeId],
        attained_before: u128,
    ) {
        if let Some(on_fastest) = view.on_fastest_model(job, nodes) {
            self.runs.push(Run {
                job: job.id,
                attained_before,
                on_fastest,
            });
        }
    }

    /// Milli-GPU x ms each job spent on its fastest model, by job id (length `jobs`): a run's
    /// GPU-time is the service attained from its start to the next run's start, or to
    /// `attained(job)` for its last run.
    fn fastest_gpu_milli_ms(&self, jobs: usize, attained: impl Fn(JobId) -> u128) -> Vec<u128> {
        let mut fastest = vec![0u128; jobs];
        let mut last: Vec<Option<Run>> = vec![None; jobs];
        let close = |run: Run, end: u128, fastest: &mut [u128]| {
            if run.on_fastest
                && let Some(f) = fastest.get_mut(run.job.index())
            {
                *f += end.saturating_sub(run.attained_before);
            }
        };
        for run in &self.runs {
            let Some(slot) = last.get_mut(run.job.index()) else {
                continue;
            };
            if let Some(previous) = slot.replace(*run) {
                close(previous, run.attained_before, &mut fastest);
            }
        }
        for run in last.into_iter().flatten() {
            close(run, attained(run.job), &mut fastest);
        }
        fastest
    }
}

/// `(effective throughput, fastest-model share)` over `jobs` (the typed jobs measured and
/// finished): reference GPU-time of work done (trace duration x GPUs) per allocated GPU-time
/// (restarts and lost work included), and the share of their allocated GPU-time spent on
/// their fastest GPU model. `None` when no such job has GPU-time.
pub(crate) fn hetero_summary(
    runs: &HeteroRuns,
    total_jobs: usize,
    jobs: &[TypedJob],
) -> Option<(f64, f64)> {
    let attained: Vec<u128> = {
        let mut a = vec![0u128; total_jobs];
        for j in jobs {
            if let Some(slot) = a.get_mut(j.id.index()) {
                *slot = j.attained_gpu_milli_ms;
            }
        }
        a
    };
    let fastest = runs.fastest_gpu_milli_ms(total_jobs, |id| {
        attained.get(id.index()).copied().unwrap_or(0)
    });
    let allocated: u128 = jobs.iter().map(|j| j.attained_gpu_milli_ms).sum();
    if allocated == 0 {
        return None;
    }
    let work: f64 = jobs
        .iter()
        .map(|j| j.duration_ms as f64 * j.gpu_milli as f64)
        .sum();
    let on_fastest: u128 = jobs
        .iter()
        .map(|j| fastest.get(j.id.index()).copied().unwrap_or(0))
        .sum();
    Some((
        work / allocated as f64,
        on_fastest as f64 / allocated as f64,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(job: u32, attained_before: u128, on_fastest: bool) -> Run {
        Run {
            job: JobId(job),
            attained_before,
            on_fastest,
        }
    }

    #[test]
    fn runs_split_attained_service_and_the_summary_divides_it() {
        // Job 0 (1 GPU = 1000 milli, trace duration 100 s): ran 40 s on its fastest model,
        // was preempted, then 80 s on a slower one: in milli-GPU x ms, 40,000 x 1000 on its
        // fastest of 120,000 x 1000.
        // Job 1 (2 GPUs, 50 s): one run of 50 s on its fastest model: 100,000 x 1000.
        let runs = HeteroRuns {
            runs: vec![
                run(0, 0, true),
                run(1, 0, true),
                run(0, 40_000 * 1000, false),
            ],
        };
        let jobs = [
            TypedJob {
                id: JobId(0),
                duration_ms: 100_000,
                gpu_milli: 1000,
                attained_gpu_milli_ms: 120_000 * 1000,
            },
            TypedJob {
                id: JobId(1),
                duration_ms: 50_000,
                gpu_milli: 2000,
                attained_gpu_milli_ms: 100_000 * 1000,
            },
        ];
        let (effective, share) = hetero_summary(&runs, 2, &jobs).expect("GPU-time");
        // Work: 100,000 x 1000 + 50,000 x 2000 = 200,000,000; allocated 220,000,000.
        assert!((effective - 200.0 / 220.0).abs() < 1e-12, "{effective}");
        // On fastest: 40,000,000 + 100,000,000 of 220,000,000.
        assert!((share - 140.0 / 220.0).abs() < 1e-12, "{share}");
        assert_eq!(hetero_summary(&HeteroRuns::default(), 0, &[]), None);
    }
}
