//! Forking a run onto other durations: the simulator's half of policy-improvement lookahead
//! (`gym::lookahead`). A fork is the run as a scheduler sees it (the cluster, every job's
//! state and attained service, the clock, the pending ticks), continued in a world where each
//! unfinished job lasts as long as the fork's own trace says. Nothing of the original run's
//! true durations is carried over: no job's remaining work, and no pending completion event.

use super::{Event, Hidden, SimError, Simulator};
use crate::job::Trace;
use crate::policy::JobState;
use crate::units::{JobId, SimTime};
use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};
use std::sync::Arc;

impl Simulator<'_> {
    /// The run so far, continued on `trace`: a copy of this run's trace (the same jobs, in
    /// the same order) whose durations the fork takes for true. An unfinished job's duration
    /// there is its total run time as a scheduler measures it (wall ms, as `attained_ms`
    /// counts, at least 1 ms more than the service it has attained so far); the fork gives
    /// it that minus its attained service as work left, at speed 1 (a running job at the rate
    /// of its current placement, its completion rescheduled under a new epoch). Completion
    /// events of the original run are dropped, ticks kept. With `horizon`, nothing after
    /// `now + horizon` happens and the time integrals run exactly to it (`stopped`).
    ///
    /// The jobs that have finished are shown to the next decision as just finished, so a
    /// policy built afresh for the fork learns at once what the run's policy learned from
    /// them one by one.
    pub fn fork<'f>(
        &self,
        trace: &'f Trace,
        horizon: Option<SimTime>,
    ) -> Result<Simulator<'f>, SimError> {
        if trace.len() != self.trace.len() {
            return Err(SimError::Config(format!(
                "a fork's trace must hold the run's {} jobs, not {}",
                self.trace.len(),
                trace.len()
            )));
        }
        self.fork_inner(trace, horizon, None)
    }

    /// `fork` onto a sampled future's trace (`future_trace`): its jobs past the arrived ones
    /// are the future's arrivals, job `arrived + i` a copy of `sources[i]`.
    pub(crate) fn fork_onto_future<'f>(
        &self,
        trace: &'f Trace,
        sources: &[JobId],
        horizon: Option<SimTime>,
    ) -> Result<Simulator<'f>, SimError> {
        self.fork_inner(trace, horizon, Some(sources))
    }

    /// `fork`, or with `tail`, a fork whose jobs past the `arrived` ones are `trace`'s own
    /// (a sampled future's arrivals, `future.rs`), each a copy of the arrived job `tail[i]`
    /// (its workload's rates come from there); `trace`'s first `arrived` jobs must be this
    /// run's.
    pub(super) fn fork_inner<'f>(
        &self,
        trace: &'f Trace,
        horizon: Option<SimTime>,
        tail: Option<&[JobId]>,
    ) -> Result<Simulator<'f>, SimError> {
        let now = self.now;
        let known = match tail {
            None => self.trace.len(),
            Some(sources) => {
                let k = self.next_arrival;
                if trace.len() != k + sources.len() {
                    return Err(SimError::Config(format!(
                        "a future's trace must hold the run's {k} arrived jobs and its {} \
                         arrivals, not {} jobs",
                        sources.len(),
                        trace.len()
                    )));
                }
                if let Some(late) = trace.jobs()[k..].iter().find(|j| j.submit <= now) {
                    return Err(SimError::Config(format!(
                        "a future's arrival {} is submitted at {} s, not after now ({} s)",
                        late.name,
                        late.submit.secs_f64(),
                        now.secs_f64()
                    )));
                }
                k
            }
        };
        let mut hidden: Vec<Hidden> = Vec::with_capacity(trace.len());
        for ((job, rt), h) in trace.jobs()[..known]
            .iter()
            .zip(&self.runtime)
            .zip(&self.hidden)
        {
            let total_ms = trace.true_duration(job.id).ms();
            let mut h = Hidden {
                remaining_ms: 0.0,
                ..h.clone()
            };
            match rt.state {
                JobState::NotArrived | JobState::Pending => {
                    h.remaining_ms = total_ms.saturating_sub(rt.attained_ms).max(1) as f64;
                }
                JobState::Running => {
                    let run_start = rt.run_start.expect("running job has a run start");
                    let elapsed = now.saturating_sub(run_start).ms();
                    let attained = rt.attained_ms + elapsed;
                    let left_ms = total_ms.saturating_sub(attained).max(1);
                    let productive = elapsed.saturating_sub(h.overhead_ms);
                    // The work of the current run, as `start` counts it: done so far + left.
                    h.remaining_ms = (productive + left_ms) as f64 * h.rate;
                    // At its current rate throughout (a shared job's past rate changes are
                    // not carried into the fork).
                    h.first_rate = h.rate;
                    h.changes.clear();
                    h.epoch += 1;
                }
                JobState::Finished | JobState::Rejected => {}
            }
            hidden.push(h);
        }
        // A future's arrivals: nothing attained, their sampled durations as work.
        for job in &trace.jobs()[known..] {
            hidden.push(Hidden {
                remaining_ms: trace.true_duration(job.id).ms().max(1) as f64,
                ..Hidden::default()
            });
        }
        let mut runtime = self.runtime.clone();
        runtime.truncate(known);
        runtime.resize(trace.len(), Default::default());
        let (rates, view) = match tail {
            None => (self.rates.clone(), self.view.clone()),
            Some(sources) => (
                self.rates
                    .as_ref()
                    .map(|r| Arc::new(r.with_tail(known, sources))),
                self.view
                    .as_ref()
                    .map(|v| Arc::new(v.with_tail(known, sources))),
            ),
        };
        let mut heap = BinaryHeap::with_capacity(self.heap.len());
        for &Reverse((at, seq, event)) in self.heap.iter() {
            match event {
                Event::Tick => heap.push(Reverse((at, seq, event))),
                // A held job's wake-up: kept where the fork's trace is the run's.
                Event::Wake { .. } if tail.is_none() => heap.push(Reverse((at, seq, event))),
                Event::Wake { .. } => {}
                Event::Completion { job, .. }
                    if self.runtime[job.index()].state == JobState::Running =>
                {
                    // The running job's one live event (a stale one is superseded: its epoch
                    // is behind); the order of same-time events is kept by its sequence.
                    if event
                        == (Event::Completion {
                            job,
                            epoch: self.hidden[job.index()].epoch,
                        })
                    {
                        let h = &hidden[job.index()];
                        let rt = &self.runtime[job.index()];
                        let start = rt.run_start.expect("running job has a run start");
                        let run_ms = h.overhead_ms as f64 + (h.remaining_ms / h.rate).ceil();
                        let end = start.saturating_add(SimTime(run_ms as u64)).max(now);
                        heap.push(Reverse((
                            end,
                            seq,
                            Event::Completion {
                                job,
                                epoch: h.epoch,
                            },
                        )));
                    }
                }
                Event::Completion { .. } => {}
            }
        }
        let mut finished: Vec<(SimTime, JobId)> = hidden
            .iter()
            .zip(trace.jobs())
            .filter_map(|(h, j)| Some((h.finish?, j.id)))
            .collect();
        finished.sort_unstable();
        let mut fork = Simulator {
            trace,
            cfg: self.cfg.clone(),
            r: self.r.clone(),
            cluster: RefCell::new(self.cluster.borrow().clone()),
            runtime,
            hidden,
            pending: self.pending.clone(),
            // Rebuilt below from the fork's own runtime and trace.
            waiting: BTreeSet::new(),
            pending_gpu_milli: self.pending_gpu_milli,
            recently_finished: finished.into_iter().map(|(_, id)| id).collect(),
            heap,
            seq: self.seq,
            next_arrival: self.next_arrival,
            now,
            started: self.started,
            measure_start: self.measure_start,
            first_submit: self.first_submit,
            frag: self.frag.clone(),
            acc: self.acc.clone(),
            timeline: Vec::new(),
            last_row: self.last_row,
            max_gpus_per_node: self.max_gpus_per_node,
            max_nodes_per_rack: self.max_nodes_per_rack,
            capacity_gpu_milli: self.capacity_gpu_milli,
            rates,
            view,
            hetero: self.hetero.clone(),
            skipped: self.skipped,
            running: self.running,
            finished: self.finished,
            events: self.events,
            decisions: self.decisions,
            rejected: self.rejected,
            policy_errors: self.policy_errors,
            preemptions: self.preemptions,
            shares: self.shares,
            resizes: self.resizes,
            waste_gpu_milli_ms: self.waste_gpu_milli_ms,
            guard: self.guard.clone(),
            bound_vetoes: self.bound_vetoes,
            bound_starts: self.bound_starts,
            admission: self.admission.clone(),
            quota_vetoes: self.quota_vetoes,
            quota_stats: self.quota_stats.clone(),
            stop: horizon.map(|h| now.saturating_add(h)),
            stopped: false,
            ask_without_queue: self.ask_without_queue,
            graph: super::pipes::Graph::new(trace),
            never_satisfied: self.never_satisfied.clone(),
        };
        fork.waiting = fork
            .pending
            .iter()
            .map(|id| (fork.waiting_key(*id), *id))
            .collect();
        Ok(fork)
    }

    /// Whether a fork's run has reached its end (`fork`'s `horizon`): nothing more happens,
    /// and the time integrals cover the whole stretch to it.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Ends a fork's run at `stop`: the time up to it is integrated (jobs left pending stay in
    /// the system until then), whether events ran out earlier or went on past it.
    pub(super) fn run_to_stop(&mut self, stop: SimTime) {
        if self.now < stop {
            self.integrate_to(stop);
            self.now = stop;
        }
        self.stopped = true;
    }
}
