//! What a policy that plans by simulating ahead (`select`) may ask of the world it decides
//! in: roll a policy forward from the present over a sampled future, the world's own rules
//! applied (feasibility, checkpoints, the starvation bound). The future is the caller's:
//! durations of the jobs that have arrived and the jobs that arrive next, drawn from what a
//! scheduler knows. The world never puts its own truth in (no true duration, no job that has
//! not arrived): `Simulator` implements it (`sim::engine::future`).

use super::{Policy, PolicyError};
use crate::units::{JobId, SimTime};

/// One sampled future.
#[derive(Debug, Clone, PartialEq)]
pub struct Future {
    /// Total run time (wall ms as `JobRuntime::attained_ms` counts it) of each job that has
    /// arrived, by id (`Lookahead::arrived` of them): a finished job's observed run time, a
    /// draw for every other (more than it has attained).
    pub durations: Vec<SimTime>,
    /// The jobs that arrive next, in submit order.
    pub arrivals: Vec<Arrival>,
}

/// A sampled arrival: a copy of an arrived job's spec, submitted later.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Arrival {
    /// The arrived job whose spec it copies (resources, tenant, workload, estimate).
    pub source: JobId,
    /// After now.
    pub submit: SimTime,
    pub duration: SimTime,
}

/// How a rollout went, over the stretch it covered.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RolloutScore {
    /// Jobs in the system (pending or running) x seconds, from now to the horizon: over a
    /// whole run, the sum of JCTs, so lower is better.
    pub job_s: f64,
    /// Jobs that finished.
    pub finished: u64,
    /// What is left at the horizon, seconds: the run time left of every job still in the
    /// system (pending: its work left; running: until its completion). Each such second keeps
    /// one job in the system at least that long, so `job_s + left_s` is a lower bound on the
    /// job-time from now on: it charges a policy for the work it lost or put off (preemption
    /// waste, long jobs left half done), which a finite horizon alone would not see.
    pub left_s: f64,
    /// Simulator events processed (what the rollout cost).
    pub events: u64,
}

impl RolloutScore {
    /// What a selector minimises: `job_s + left_s`.
    pub fn cost(&self) -> f64 {
        self.job_s + self.left_s
    }
}

/// A world that can be rolled forward (see the module docs).
pub trait Lookahead {
    /// How many jobs have arrived (or been skipped): ids `0..arrived`; the rest are unknown.
    fn arrived(&self) -> usize;
    /// Runs each of `policies`, built afresh (each is shown every job finished so far at its
    /// first decision), from now until `horizon` later, in a world where the jobs last and
    /// arrive as `future` says; a score per policy, in order.
    fn rollouts(
        &self,
        future: &Future,
        policies: &mut [Box<dyn Policy>],
        horizon: SimTime,
    ) -> Result<Vec<Result<RolloutScore, PolicyError>>, PolicyError>;
}
