//! The safety shield: a decision is re-checked against the snapshot before anyone sees it.
//! Every victim must be a running, preemptible job of the snapshot; every placement a pending
//! job placed once, on capacity that is free after the victims leave and the placements before
//! it are made (so no GPU is ever double-booked). One failure rejects the whole decision: the
//! service then falls back, it never forwards a partly impossible answer.
//!
//! The check runs on the world's own cluster state and undoes itself exactly
//! (`ClusterState::try_decision`): a 1,000-node cluster is not copied per request.

use crate::world::{World, describe};
use lachesis_env::cluster::{DecisionFault, StateError, TaskPlacement};
use lachesis_env::job::JobSpec;
use lachesis_env::policy::Decision;
use std::collections::HashSet;

/// Checks `decision` against `world`; the error names the job at fault and why.
pub fn check(world: &World, decision: &Decision) -> Result<(), String> {
    // The wire format carries preemptions and placements only: a share or a resize would be
    // dropped silently, so the decision is refused (the service falls back) instead.
    if !decision.shares.is_empty() || !decision.resizes.is_empty() {
        return Err(format!(
            "shares GPUs ({}) or resizes jobs ({}), which the service does not carry yet",
            decision.shares.len(),
            decision.resizes.len()
        ));
    }
    let hasher = foldhash::fast::FixedState::default;
    let mut victims = HashSet::with_capacity_and_hasher(decision.preemptions.len(), hasher());
    for v in &decision.preemptions {
        if !world.is_real(*v) {
            return Err(format!("preempts job {v}, which is not in the snapshot"));
        }
        let name = &world.job(*v).name;
        if !victims.insert(*v) {
            return Err(format!("preempts job {name:?} twice"));
        }
    }
    let mut placed = HashSet::with_capacity_and_hasher(decision.placements.len(), hasher());
    let mut placements: Vec<(&JobSpec, &[TaskPlacement])> =
        Vec::with_capacity(decision.placements.len());
    for p in &decision.placements {
        if !world.is_real(p.job) {
            return Err(format!(
                "places job {}, which is not in the snapshot",
                p.job
            ));
        }
        let job = world.job(p.job);
        if !world.is_pending(p.job) {
            return Err(format!("places job {:?}, which is not pending", job.name));
        }
        if !placed.insert(p.job) {
            return Err(format!("places job {:?} twice", job.name));
        }
        placements.push((job, &p.tasks));
    }
    let fault = world
        .cluster_what_if()
        .try_decision(&decision.preemptions, &placements);
    match fault {
        Ok(()) => Ok(()),
        Err(DecisionFault::Victim(i, e)) => Err(format!(
            "cannot preempt job {:?}: {e}",
            world.job(decision.preemptions[i]).name
        )),
        Err(DecisionFault::Placement(i, e)) => {
            let why = match &e {
                StateError::Infeasible { reason, .. } => describe(reason, world.cluster().spec()),
                other => other.to_string(),
            };
            Err(format!(
                "placement of job {:?} does not fit: {why}",
                placements[i].0.name
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lachesis_env::policy::Placement;

    #[test]
    fn shares_and_resizes_are_refused_not_dropped() {
        let world = World::build(&crate::synthetic::snapshot(4, 2, 0.5, 1)).unwrap();
        let job = world.pending().next().unwrap();
        let share = Decision {
            shares: vec![Placement {
                job,
                tasks: Vec::new(),
            }],
            ..Decision::default()
        };
        let err = check(&world, &share).unwrap_err();
        assert!(err.contains("does not carry"), "{err}");
        assert_eq!(check(&world, &Decision::default()), Ok(()));
    }
}
