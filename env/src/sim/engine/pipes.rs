//! Pipelines in the run (`crate::deps`): a job with a dependency is held, invisible to
//! policies, from its submit until its dependency is satisfied; then it becomes pending and
//! its wait counts from then. One that can never be satisfied is Slurm's
//! `DependencyNeverSatisfied`: reported, and from then on treated as cancelled (as Slurm does
//! with `SchedulerParameters=kill_invalid_depend`), so that its own dependents settle too.
//! A job skipped as unplaceable counts as cancelled before the run.
//!
//! Traces without dependencies never reach this code: the graph is empty and no job is held.

use super::{Event, Simulator};
use crate::deps::{DepState, ParentState};
use crate::job::Trace;
use crate::policy::JobState;
use crate::units::{JobId, SimTime};
use std::collections::HashMap;

/// The static shape of a trace's pipelines, built once per run.
#[derive(Debug, Clone, Default)]
pub(super) struct Graph {
    /// Per job: the jobs whose dependency its start or end may change (those that list it,
    /// and the later jobs of its singleton group). Empty without dependencies.
    dependents: Vec<Vec<JobId>>,
    /// Per singleton job: the earlier jobs of the same name and tenant.
    singleton_earlier: HashMap<JobId, Vec<JobId>>,
}

impl Graph {
    pub(super) fn new(trace: &Trace) -> Graph {
        if !trace.has_dependencies() {
            return Graph::default();
        }
        let mut dependents = vec![Vec::new(); trace.len()];
        let mut singleton_earlier = HashMap::new();
        let mut groups: HashMap<(&str, u32), Vec<JobId>> = HashMap::new();
        for job in trace.jobs() {
            if let Some(d) = trace.dependency(job.id) {
                let mut parents: Vec<JobId> = d.parents().copied().collect();
                parents.sort_unstable();
                parents.dedup();
                for p in parents {
                    dependents[p.index()].push(job.id);
                }
                if d.has_singleton() {
                    let earlier = groups
                        .get(&(job.name.as_str(), job.tenant.0))
                        .cloned()
                        .unwrap_or_default();
                    for e in &earlier {
                        dependents[e.index()].push(job.id);
                    }
                    singleton_earlier.insert(job.id, earlier);
                }
            }
            groups
                .entry((job.name.as_str(), job.tenant.0))
                .or_default()
                .push(job.id);
        }
        Graph {
            dependents,
            singleton_earlier,
        }
    }
}

impl Simulator<'_> {
    /// A job arrives: `None` without a dependency (it is pending at once); else it is held
    /// until its dependency is satisfied, which may be now: `Some(true)` when it or a job
    /// its settling released became pending.
    pub(super) fn hold_on_arrival(&mut self, id: JobId) -> Option<bool> {
        self.trace.dependency(id)?;
        self.hidden[id.index()].held = true;
        Some(self.settle_held(id))
    }

    /// What `id`'s dependents know of it now.
    fn parent_state(&self, id: JobId) -> ParentState {
        let rt = &self.runtime[id.index()];
        let h = &self.hidden[id.index()];
        match rt.state {
            JobState::Finished => ParentState::Ended {
                started: rt.first_start,
                at: h.finish.unwrap_or(self.now),
                ok: self.trace.succeeds(id),
            },
            JobState::Rejected => ParentState::Ended {
                started: None,
                at: self.first_submit,
                ok: false,
            },
            _ if h.never.is_some() => ParentState::Ended {
                started: None,
                at: h.never.unwrap_or(self.now),
                ok: false,
            },
            _ => match rt.first_start {
                Some(at) => ParentState::Started { at },
                None => ParentState::NotStarted,
            },
        }
    }

    /// Whether `id` has ended for `singleton`'s sake (finished, skipped, or never to run).
    fn ended(&self, id: JobId) -> bool {
        matches!(self.parent_state(id), ParentState::Ended { .. })
    }

    /// Re-reads held `id`'s dependency now: satisfied makes it pending (`true`); never
    /// satisfied reports it and settles its dependents in turn; waiting on an `after:ID+MIN`
    /// delay schedules a wake-up when it runs out.
    pub(super) fn settle_held(&mut self, id: JobId) -> bool {
        let mut became_pending = false;
        let mut stack = vec![id];
        while let Some(id) = stack.pop() {
            if !self.hidden[id.index()].held {
                continue;
            }
            // Only jobs with a dependency are held (a fork on a future's trace, which has
            // none, wakes none of them).
            let trace = self.trace;
            let Some(dep) = trace.dependency(id) else {
                continue;
            };
            let state = dep.state(
                self.now,
                |p| self.parent_state(*p),
                || {
                    self.graph
                        .singleton_earlier
                        .get(&id)
                        .is_none_or(|earlier| earlier.iter().all(|e| self.ended(*e)))
                },
            );
            match state {
                DepState::Satisfied => {
                    self.hidden[id.index()].held = false;
                    let rt = &mut self.runtime[id.index()];
                    rt.state = JobState::Pending;
                    rt.ready = Some(self.now);
                    self.enqueue(id);
                    became_pending = true;
                }
                DepState::Never => {
                    let h = &mut self.hidden[id.index()];
                    h.held = false;
                    h.never = Some(self.now);
                    self.never_satisfied.push(id);
                    stack.extend(self.graph.dependents[id.index()].iter().rev());
                }
                DepState::Waiting => {
                    let wakes: Vec<SimTime> = dep
                        .delays()
                        .filter(|(_, delay)| *delay > SimTime::ZERO)
                        // From its start, or its cancellation when it never started
                        // (as `crate::deps` counts `after`).
                        .filter_map(|(p, delay)| match self.parent_state(*p) {
                            ParentState::Started { at } => Some(at.saturating_add(delay)),
                            ParentState::Ended { started, at, .. } => {
                                Some(started.unwrap_or(at).saturating_add(delay))
                            }
                            ParentState::NotStarted => None,
                        })
                        .filter(|at| *at > self.now)
                        .collect();
                    for at in wakes {
                        self.push(at, Event::Wake { job: id });
                    }
                }
            }
        }
        became_pending
    }

    /// `id` started for the first time or ended: its held dependents re-read their
    /// dependency. `true` when one became pending.
    pub(super) fn settle_dependents(&mut self, id: JobId) -> bool {
        let Some(dependents) = self.graph.dependents.get(id.index()) else {
            return false;
        };
        let mut woke = false;
        for d in dependents.clone() {
            woke |= self.settle_held(d);
        }
        woke
    }

    /// `id` started for the first time outside a batch of events (a policy's decision): its
    /// dependents are re-read at a wake-up now, so that one made pending is seen by the
    /// policy at once.
    pub(super) fn wake_dependents(&mut self, id: JobId) {
        let Some(dependents) = self.graph.dependents.get(id.index()) else {
            return;
        };
        for d in dependents.clone() {
            if self.hidden[d.index()].held {
                self.push(self.now, Event::Wake { job: d });
            }
        }
    }
}
