//! Rolling a run forward over a sampled future (`policy::lookahead`): the simulator's half of
//! the `select` meta-policy. A future is the caller's draw: every arrived job's total run time
//! and the jobs that arrive next (copies of arrived ones). The fork keeps the run as a
//! scheduler sees it (cluster, queue, attained service, the clock, ticks, the starvation
//! bound's state) and nothing of its truth: no true duration, no job yet to arrive.

use super::{Event, Integrals, SimError, Simulator};
use crate::job::Trace;
use crate::policy::JobState;
use crate::policy::lookahead::{Future, Lookahead, RolloutScore};
use crate::policy::{Policy, PolicyError};
use crate::units::{JobId, SimTime};
use std::cmp::Reverse;

impl Simulator<'_> {
    /// The trace a future runs on: this run's arrived jobs (ids `0..arrived`) with the
    /// future's durations, then its arrivals, each a copy of its source's spec.
    pub fn future_trace(&self, future: &Future) -> Result<Trace, SimError> {
        let k = self.next_arrival;
        if future.durations.len() != k {
            return Err(SimError::Config(format!(
                "a future must give a duration for each of the {k} arrived jobs, not {}",
                future.durations.len()
            )));
        }
        let mut jobs = self.trace.jobs()[..k].to_vec();
        let mut durations = future.durations.clone();
        let mut last = self.now;
        for (i, a) in future.arrivals.iter().enumerate() {
            let Some(src) = jobs.get(a.source.index()).filter(|_| a.source.index() < k) else {
                return Err(SimError::Config(format!(
                    "a future's arrival {i} copies job {}, which has not arrived",
                    a.source.0
                )));
            };
            if a.submit < last || a.submit <= self.now {
                return Err(SimError::Config(format!(
                    "a future's arrivals must come after now and in submit order (arrival {i})"
                )));
            }
            last = a.submit;
            let mut job = src.clone();
            job.id = JobId((k + i) as u32);
            job.name = format!("future-{i}-of-{}", src.name);
            job.submit = a.submit;
            jobs.push(job);
            durations.push(a.duration.max(SimTime(1)));
        }
        Trace::new(
            self.trace.name.clone(),
            jobs,
            durations,
            self.trace.tenants().to_vec(),
        )
        .map_err(|e| SimError::Config(format!("a future's trace: {e}")))
    }

    /// This run continued on `trace` (from `future_trace`) until `horizon` later, its time
    /// integrals measured from now.
    fn fork_future<'f>(
        &self,
        trace: &'f Trace,
        future: &Future,
        horizon: SimTime,
    ) -> Result<Simulator<'f>, SimError> {
        let sources: Vec<JobId> = future.arrivals.iter().map(|a| a.source).collect();
        let mut fork = self.fork_inner(trace, Some(horizon), Some(&sources))?;
        fork.measure_start = self.now;
        fork.acc = Integrals {
            last: self.now,
            ..Integrals::default()
        };
        fork.record_timeline_off();
        Ok(fork)
    }

    fn record_timeline_off(&mut self) {
        self.cfg.record_timeline = false;
    }
}

impl Lookahead for Simulator<'_> {
    fn arrived(&self) -> usize {
        self.next_arrival
    }

    fn rollouts(
        &self,
        future: &Future,
        policies: &mut [Box<dyn Policy>],
        horizon: SimTime,
    ) -> Result<Vec<Result<RolloutScore, PolicyError>>, PolicyError> {
        let failed = |e: SimError| PolicyError::Failed {
            policy: "select".to_string(),
            message: format!("a sampled future: {e}"),
        };
        let trace = self.future_trace(future).map_err(failed)?;
        Ok(policies
            .iter_mut()
            .map(|policy| {
                let fork =
                    self.fork_future(&trace, future, horizon)
                        .map_err(|e| PolicyError::Failed {
                            policy: policy.name().to_string(),
                            message: format!("rollout: {e}"),
                        })?;
                fork.roll(policy.as_mut(), self.finished)
            })
            .collect())
    }
}

impl Simulator<'_> {
    /// Runs `policy` on this fork to its end; `finished_before`: the jobs finished when it
    /// was forked.
    fn roll(
        mut self,
        policy: &mut dyn Policy,
        finished_before: u64,
    ) -> Result<RolloutScore, PolicyError> {
        self.ask_without_queue(policy.acts_without_queue());
        if policy.acts_every_round() {
            self.ask_every_round();
        }
        let events = self.events;
        // The fork stands at the decision point it was forked at: the policy decides first.
        let mut asked = !self.pending.is_empty() || self.ask_without_queue;
        loop {
            if asked {
                let decision = policy.decide(&self.context())?;
                self.apply(&decision);
            }
            if !self.advance() {
                break;
            }
            asked = true;
        }
        let mut left_ms: f64 = self
            .pending
            .iter()
            .map(|id| self.hidden[id.index()].remaining_ms)
            .sum();
        for Reverse((at, _, event)) in self.heap.iter() {
            if let Event::Completion { job, epoch } = *event
                && self.runtime[job.index()].state == JobState::Running
                && self.hidden[job.index()].epoch == epoch
            {
                left_ms += at.saturating_sub(self.now).ms() as f64;
            }
        }
        Ok(RolloutScore {
            job_s: self.acc.system_ms / 1000.0,
            left_s: left_ms / 1000.0,
            finished: self.finished - finished_before,
            events: self.events - events,
        })
    }
}
