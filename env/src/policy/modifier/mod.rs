//! The modifiers of the baseline library: what a `Composite` does, after its ordering pass,
//! with the jobs that pass could not place. `easy` backfills around a reservation for the
//! blocked head; `preempt` preempts lower-class jobs for a higher-class one; `las-preempt`
//! preempts the most-served jobs for less-served ones (Tiresias). Each plans through the pass's
//! `Planner`, so it sees what the pass (and any modifier before it) placed or preempted, and
//! none sees a true duration. Depends on the policy seams only, never on the simulator.

mod easy;
mod elastic;
mod gittins;
mod las;
mod preempt;
mod room;

pub use easy::Easy;
pub(crate) use elastic::one_gpu;
pub use elastic::{
    Colocate, ColocateConfig, DEFAULT_ROUND_S, ElasticAlloc, ElasticConfig, GAVEL_ROUND_S,
    best_above, marginal_efficiency, summed_normalised_rate,
};
pub use gittins::GittinsPreempt;
pub use las::LasPreempt;
pub use preempt::{ClassPreempt, minimal_victims};

use super::heuristic::Placer;
use super::planner::Planner;
use super::{Decision, Placement};
use crate::job::JobSpec;
use crate::units::{JobId, SimTime};
use room::{Freed, Room};

/// The running jobs the victim searches choose from, ranked once for many searches on one
/// cluster state (the gym asks for every shortlisted job of a decision point): `preempt`'s
/// pool, cheapest first, and `las-preempt`'s, most served first, each built on first use.
/// Valid while the clock and the planner's running jobs stay as they were (they do through a
/// decision built job by job: tentative placements and frees do not change who runs), and
/// kept from one point of such a decision to the next by `for_point`.
#[derive(Debug, Default)]
pub struct VictimPools {
    /// Sorted.
    exclude: Vec<JobId>,
    /// The clock and the number of running jobs the pools were built for.
    built_for: Option<(SimTime, usize)>,
    class: Option<Vec<preempt::Candidate>>,
    /// `class` by node, built by the first search that needs it.
    class_by_node: Option<preempt::ByNode>,
    las: Option<Vec<(u128, JobId)>>,
    /// `gittins-preempt`'s pool, lowest index per GPU first.
    gittins: Option<Vec<(crate::policy::order::Score, JobId)>>,
}

impl VictimPools {
    /// Pools without the jobs in `exclude` (preempted earlier in the decision being built).
    pub fn new(exclude: &[JobId]) -> Self {
        let mut exclude = exclude.to_vec();
        exclude.sort_unstable();
        exclude.dedup();
        VictimPools {
            exclude,
            ..VictimPools::default()
        }
    }

    /// Readies the pools for another point of the decision they were built in, at `now` on
    /// `planner`'s cluster, without the jobs in `exclude`: jobs excluded since are dropped
    /// from the pools built; anything else (another clock, another number of running jobs, a
    /// job no longer excluded) starts them afresh. The caller starts them afresh for a new
    /// decision (`VictimPools::default`).
    pub fn for_point(&mut self, now: SimTime, planner: &Planner<'_>, exclude: &[JobId]) {
        let key = (now, planner.state().running().len());
        // Sorted copies: a decision on a large cluster excludes hundreds of jobs, and its
        // pools hold thousands (no scan of one list per element of the other).
        let mut wanted = exclude.to_vec();
        wanted.sort_unstable();
        wanted.dedup();
        let kept = |j: &JobId| wanted.binary_search(j).is_ok();
        if self.built_for != Some(key) || !self.exclude.iter().all(kept) {
            *self = VictimPools {
                exclude: wanted,
                built_for: Some(key),
                ..VictimPools::default()
            };
            return;
        }
        if self.exclude.len() == wanted.len() {
            return;
        }
        // `self.exclude` is sorted and within `wanted`: what `wanted` has beyond it.
        let gone: Vec<JobId> = wanted
            .iter()
            .copied()
            .filter(|j| self.exclude.binary_search(j).is_err())
            .collect();
        let gone = |j: &JobId| gone.binary_search(j).is_ok();
        if let Some(pool) = &mut self.class {
            pool.retain(|c| !gone(&c.job));
            // Positions in the pool moved.
            self.class_by_node = None;
        }
        if let Some(pool) = &mut self.las {
            pool.retain(|(_, j)| !gone(j));
        }
        if let Some(pool) = &mut self.gittins {
            pool.retain(|(_, j)| !gone(j));
        }
        self.exclude = wanted;
    }
}

/// Whether an earlier part of this decision already placed `job`.
fn placed(decision: &Decision, job: JobId) -> bool {
    decision.placements.iter().any(|p| p.job == job)
}

/// Whether `job` fits after tentatively freeing `victims` (all of them); nothing changes.
/// `room` is the job's room on the planner's cluster as it stands: the placer is asked only
/// when the capacity is there.
fn fits_after_freeing(
    planner: &mut Planner<'_>,
    placer: &mut dyn Placer,
    room: &Room,
    job: &JobSpec,
    victims: &[JobId],
) -> bool {
    if !room.admits_after(planner.state(), victims) {
        return false;
    }
    if placer.complete() {
        return true;
    }
    fits_freeing(planner, placer, job, victims)
}

/// Whether `job` fits with `victims` freed, by freeing them and asking the placer; nothing
/// changes. (The searches' reference: no `Room`, no shortcut.)
fn fits_freeing(
    planner: &mut Planner<'_>,
    placer: &mut dyn Placer,
    job: &JobSpec,
    victims: &[JobId],
) -> bool {
    let mark = planner.mark();
    for v in victims {
        planner.free_running(*v);
    }
    let fits = placer.place(planner, job).is_some();
    planner.undo_to(mark);
    fits
}

/// The shortest prefix of `victims` whose release lets `job` fit, freeing them in order and
/// trying after each; `None` if not even all of them do. Nothing changes. The prefixes too
/// short to make room (`room`, counted without the planner) are freed without asking the
/// placer, which could not have placed the job there.
fn shortest_prefix(
    planner: &mut Planner<'_>,
    placer: &mut dyn Placer,
    room: &Room,
    job: &JobSpec,
    victims: &[JobId],
) -> Option<usize> {
    let first = room.first_prefix(planner.state(), victims)?;
    if placer.complete() {
        return Some(first);
    }
    let mark = planner.mark();
    for v in &victims[..first - 1] {
        planner.free_running(*v);
    }
    let mut found = None;
    for (i, v) in victims.iter().enumerate().skip(first - 1) {
        planner.free_running(*v);
        if placer.place(planner, job).is_some() {
            found = Some(i + 1);
            break;
        }
    }
    planner.undo_to(mark);
    found
}

/// The shortest prefix of `victims` (in the rule's order) whose release lets `job` fit;
/// `None` when there are none, when it fits without preempting, or when no prefix makes room.
/// Nothing changes.
fn prefix_victims(
    planner: &mut Planner<'_>,
    placer: &mut dyn Placer,
    job: &JobSpec,
    mut victims: Vec<JobId>,
) -> Option<Vec<JobId>> {
    if victims.is_empty() {
        return None;
    }
    let room = Room::new(planner.state(), job);
    if fits_after_freeing(planner, placer, &room, job, &[]) {
        return None;
    }
    let k = shortest_prefix(planner, placer, &room, job, &victims)?;
    victims.truncate(k);
    Some(victims)
}

/// Preempts `victims` and places `job` in their room, for real in this decision: `false` (and
/// nothing changed) if it does not fit after all (a placer that chooses differently this time).
fn preempt_and_place(
    planner: &mut Planner<'_>,
    placer: &mut dyn Placer,
    job: &JobSpec,
    victims: &[JobId],
    decision: &mut Decision,
) -> bool {
    let mark = planner.mark();
    for v in victims {
        planner.free_running(*v);
    }
    let Some(tasks) = placer.place(planner, job) else {
        planner.undo_to(mark);
        return false;
    };
    decision.preemptions.extend_from_slice(victims);
    decision.placements.push(Placement { job: job.id, tasks });
    true
}

#[cfg(test)]
mod tests;
