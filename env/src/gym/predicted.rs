//! How long a fork's unfinished jobs last (`SchedEnv::predicted_trace`): the `DurationModel`
//! interface, and `PredictedDurations`, the one policy-improvement lookahead uses, which knows
//! only what a scheduler knows: run times of jobs seen to finish, user estimates, a prior.
//! Must never read a true duration.

use super::SchedEnv;
use crate::job::JobSpec;
use crate::policy::JobState;
use crate::policy::order::{GittinsConfig, GittinsEstimator};
use crate::units::SimTime;
use rand::RngExt;
use rand::rngs::StdRng;

/// Draws how long a job lasts in a sampled future.
pub trait DurationModel {
    /// A draw of `job`'s total run time (wall ms, as `JobRuntime::attained_ms` counts it)
    /// given that it has attained `attained_ms` so far: more than that.
    fn total(&self, job: &JobSpec, attained_ms: u64, rng: &mut StdRng) -> SimTime;
}

/// Run times drawn from the online empirical distribution the `gittins` policy keeps
/// (`GittinsEstimator`: the observed run times of finished jobs, per GPU-count class once the
/// class has 16, else all of them), conditioned on the service a job has attained (`Atoms::
/// sample_above`). A job that has outrun every observed run time gets, beyond what it has
/// attained, an exponential draw with mean its attained service (the hazard `1 / a` the
/// Gittins index assumes there). Before any job has finished: the user's estimate where the
/// trace has one and the job has not outrun it, else the attained service plus an
/// exponential draw with mean `prior_mean_s` (memoryless: the prior says nothing about which
/// job is longer).
#[derive(Debug, Clone)]
pub struct PredictedDurations {
    estimator: GittinsEstimator,
    prior_mean_ms: f64,
}

impl PredictedDurations {
    /// The prior's mean run time, seconds, when none is given.
    pub const DEFAULT_PRIOR_MEAN_S: f64 = 3600.0;

    /// A predictor that has seen nothing yet (see the type's docs for `prior_mean_s`).
    pub fn new(prior_mean_s: f64) -> Self {
        PredictedDurations {
            estimator: GittinsEstimator::new(&GittinsConfig::schema7()),
            prior_mean_ms: (prior_mean_s * 1000.0).max(1.0),
        }
    }

    /// A predictor on the censored (Kaplan-Meier) estimate (`GittinsConfig::default`): it
    /// learns from the jobs that finish and, through `observe`, from the service of the jobs
    /// that run or have run and not finished, so that long jobs still running count.
    pub fn censored(prior_mean_s: f64) -> Self {
        PredictedDurations {
            estimator: GittinsEstimator::new(&GittinsConfig::default()),
            prior_mean_ms: (prior_mean_s * 1000.0).max(1.0),
        }
    }

    /// Learns from a decision point: the jobs that finished since the previous one, and (for
    /// a censored predictor) the attained service of `running` and of jobs seen running before.
    pub fn observe(
        &mut self,
        ctx: &crate::policy::DecisionContext<'_>,
        running: impl Iterator<Item = crate::units::JobId>,
    ) {
        self.estimator.observe(ctx, running);
    }

    /// What a scheduler of `env`'s episode knows now: every job seen to finish so far, with
    /// the run time it was seen to take.
    pub fn from_episode(env: &SchedEnv<'_>, prior_mean_s: f64) -> Self {
        let mut p = Self::new(prior_mean_s);
        if let Some(ctx) = env.context() {
            for job in env.trace().jobs() {
                let rt = ctx.runtime(job.id);
                if rt.state == JobState::Finished {
                    p.estimator.record(job, rt.attained_ms);
                }
            }
        }
        p
    }

    /// Learns that `job` was seen to run `observed_ms` (history from before the episode).
    pub fn record(&mut self, job: &JobSpec, observed_ms: u64) {
        self.estimator.record(job, observed_ms);
    }

    /// Finished jobs learned from.
    pub fn samples(&self) -> u64 {
        self.estimator.samples()
    }
}

impl DurationModel for PredictedDurations {
    fn total(&self, job: &JobSpec, attained_ms: u64, rng: &mut StdRng) -> SimTime {
        let a = attained_ms as f64;
        let u: f64 = rng.random();
        // An exponential draw with mean `mean` beyond the attained service.
        let beyond = |mean: f64| a - mean * (1.0 - u).ln();
        let atoms = self.estimator.distribution(job);
        let total = if !atoms.is_empty() {
            atoms
                .sample_above(a, u)
                .unwrap_or_else(|| beyond(a.max(1000.0)))
        } else {
            match job.estimate {
                Some(e) if e.ms() > attained_ms => e.ms() as f64,
                _ => beyond(self.prior_mean_ms),
            }
        };
        SimTime((total.ceil() as u64).max(attained_ms.saturating_add(1)))
    }
}
