//! Forking an episode onto other durations, for policy-improvement lookahead (`lookahead`):
//! the trace copy a fork runs on, and the fork itself.

use super::{EnvError, SchedEnv};
use crate::gym::predicted::DurationModel;
use crate::job::Trace;
use crate::policy::lookahead::{Future, Lookahead};
use crate::policy::{
    ARRIVAL_HISTORY_JOBS, DecisionContext, JobState, sample_arrivals, sample_durations,
};
use crate::units::JobId;
use crate::units::SimTime;
use rand::rngs::StdRng;
use std::sync::Arc;

impl<'t> SchedEnv<'t> {
    /// What a scheduler knows now (`None` before the first reset).
    pub fn context(&self) -> Option<DecisionContext<'_>> {
        self.sim.as_ref().map(|s| s.context())
    }

    /// A copy of the episode's trace for a fork, built from what a scheduler knows only: the
    /// same job specs; as duration, a finished job gets the run time it was seen to take
    /// (`attained_ms`), and every other job (running, pending, yet to arrive) a draw from
    /// `model` given its spec and the service it has attained so far (more than that). The
    /// episode's own durations are never read.
    pub fn predicted_trace(
        &self,
        model: &dyn DurationModel,
        rng: &mut StdRng,
    ) -> Result<Trace, EnvError> {
        let ctx = self.context().ok_or(EnvError::EpisodeOver)?;
        let durations = self
            .trace
            .jobs()
            .iter()
            .map(|job| {
                let rt = ctx.runtime(job.id);
                match rt.state {
                    JobState::Finished => SimTime(rt.attained_ms),
                    JobState::Rejected => SimTime::ZERO,
                    JobState::NotArrived | JobState::Pending | JobState::Running => {
                        let attained = ctx.attained_ms(job.id);
                        model
                            .total(job, attained, rng)
                            .max(SimTime(attained.saturating_add(1)))
                    }
                }
            })
            .collect();
        self.trace
            .rebuilt(self.trace.jobs().to_vec(), durations)
            .map_err(|e| EnvError::Config(format!("predicted trace: {e}")))
    }

    /// Like `predicted_trace`, but the jobs yet to arrive are not the episode's: its arrived
    /// jobs with durations drawn from `model` (finished ones at their observed run times),
    /// then arrivals over `horizon_s` drawn as the `select` meta-policy draws them
    /// (`policy::sample_arrivals`: the recent arrival rate, copies of recent jobs). Nothing
    /// of the episode's future is read. The trace and each arrival's source, for
    /// `fork_future`.
    pub fn predicted_future(
        &self,
        model: &dyn DurationModel,
        horizon_s: f64,
        rng: &mut StdRng,
    ) -> Result<(Trace, Vec<JobId>), EnvError> {
        let sim = self.sim.as_ref().ok_or(EnvError::EpisodeOver)?;
        let ctx = sim.context();
        let arrived = Lookahead::arrived(sim);
        let durations = sample_durations(&ctx, arrived, model, rng);
        let arrivals = sample_arrivals(&ctx, arrived, ARRIVAL_HISTORY_JOBS, horizon_s, model, rng);
        let future = Future {
            durations,
            arrivals,
        };
        let trace = sim.future_trace(&future)?;
        Ok((trace, future.arrivals.iter().map(|a| a.source).collect()))
    }

    /// `fork` onto a trace from `predicted_future` (`sources`: its arrivals' sources).
    pub fn fork_future<'f>(
        &self,
        trace: &'f Trace,
        sources: &[JobId],
        horizon: Option<SimTime>,
    ) -> Result<SchedEnv<'f>, EnvError> {
        self.fork_inner(trace, horizon, Some(sources))
    }

    /// The episode as it is now, continued on `trace` (from `predicted_trace`): same
    /// observation, mask and candidates, same steps and rewards from here on as the episode
    /// would give if its unfinished jobs lasted as `trace` says (`Simulator::fork`). The
    /// fork has no step or time limit of its own but `horizon`: it ends, truncated with
    /// `EndReason::TimeLimit`, at `now + horizon`, its rewards covering exactly the stretch
    /// up to it (jobs left waiting are charged to its end). A policy built afresh for the
    /// fork is shown, at its first decision, every job finished so far.
    pub fn fork<'f>(
        &self,
        trace: &'f Trace,
        horizon: Option<SimTime>,
    ) -> Result<SchedEnv<'f>, EnvError> {
        self.fork_inner(trace, horizon, None)
    }

    fn fork_inner<'f>(
        &self,
        trace: &'f Trace,
        horizon: Option<SimTime>,
        sources: Option<&[JobId]>,
    ) -> Result<SchedEnv<'f>, EnvError> {
        let (Some(sim), false) = (self.sim.as_ref(), self.done) else {
            return Err(EnvError::EpisodeOver);
        };
        let sim = match sources {
            None => sim.fork(trace, horizon)?,
            Some(sources) => sim.fork_onto_future(trace, sources, horizon)?,
        };
        let mut cfg = self.cfg.clone();
        cfg.max_steps = 0;
        cfg.max_sim_time_s = 0.0;
        Ok(SchedEnv {
            trace,
            spec: Arc::clone(&self.spec),
            cfg,
            featurizer: self.featurizer,
            sim: Some(sim),
            enumerator: self.enumerator.clone(),
            point: self.point.clone(),
            mask: self.mask.clone(),
            live: self.live,
            steps: self.steps,
            start: self.start,
            instant: self.instant.clone(),
            done: false,
            resizes: self.resizes,
            idle_at: self.idle_at,
        })
    }
}
