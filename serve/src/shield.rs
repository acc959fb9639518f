//! The safety shield: a decision is re-checked against the snapshot before anyone sees it.
//! Every victim must be a running, preemptible job of the snapshot; every placement a pending
//! job placed once, on capacity that is free after the victims leave and the placements before
//! it are made (so no GPU is ever double-booked). One failure rejects the whole decision: the
//! service then falls back, it never forwards a partly impossible answer.
//!
//! The check runs on the world's own cluster state and undoes itself exactly
//! (`ClusterState::try_decision`): a 1,000-node cluster is not copied per request. A decision
//! that shares GPUs or resizes elastic jobs is tried on a copy instead, in the simulator's
//! order, and each share and resize must also be one the throughput table allows: a share
//! only beside exactly one 1-GPU job (never three on a GPU) of a workload the table pairs
//! with the newcomer's on that GPU model; a resize only of a running elastic job, within its
//! `min_gpus..max_gpus`, to a size the table rates on the models it lands on.

use crate::world::{World, describe};
use lachesis_env::cluster::{ClusterSpec, DecisionFault, StateError, TaskPlacement};
use lachesis_env::job::JobSpec;
use lachesis_env::policy::Decision;
use lachesis_env::units::JobId;
use std::collections::HashSet;

/// Checks `decision` against `world`; the error names the job at fault and why.
pub fn check(world: &World, decision: &Decision) -> Result<(), String> {
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
    for (p, verb) in (decision.placements.iter().map(|p| (p, "places")))
        .chain(decision.shares.iter().map(|p| (p, "shares a GPU with")))
    {
        if !world.is_real(p.job) {
            return Err(format!(
                "{verb} job {}, which is not in the snapshot",
                p.job
            ));
        }
        let job = world.job(p.job);
        if !world.is_pending(p.job) {
            return Err(format!("{verb} job {:?}, which is not pending", job.name));
        }
        if !placed.insert(p.job) {
            return Err(format!("starts job {:?} twice", job.name));
        }
        if verb == "places" {
            placements.push((job, &p.tasks));
        }
    }
    if !decision.shares.is_empty() || !decision.resizes.is_empty() {
        return check_typed(world, decision, &victims);
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
        Err(DecisionFault::Placement(i, e)) => Err(format!(
            "placement of job {:?} does not fit: {}",
            placements[i].0.name,
            why(&e, world.cluster().spec())
        )),
    }
}

/// `e` in words, nodes by name.
fn why(e: &StateError, spec: &ClusterSpec) -> String {
    match e {
        StateError::Infeasible { reason, .. } => describe(reason, spec),
        other => other.to_string(),
    }
}

/// A decision that shares GPUs or resizes elastic jobs, tried in the simulator's order
/// (preemptions, resizes, placements, shares) on a copy of the cluster: its size and the
/// table's word on every share and resize are checked beside capacity. (Decisions without
/// either take `try_decision`, which copies nothing.)
fn check_typed(
    world: &World,
    decision: &Decision,
    victims: &HashSet<JobId, foldhash::fast::FixedState>,
) -> Result<(), String> {
    let Some(view) = world.throughputs() else {
        return Err(format!(
            "shares GPUs ({}) or resizes jobs ({}), but the service has no throughput table \
             to check them against (serve.toml `throughputs`)",
            decision.shares.len(),
            decision.resizes.len()
        ));
    };
    let mut state = world.cluster_clone();
    for v in &decision.preemptions {
        state
            .preempt(*v)
            .map_err(|e| format!("cannot preempt job {:?}: {e}", world.job(*v).name))?;
    }
    let mut resized = HashSet::with_capacity_and_hasher(
        decision.resizes.len(),
        foldhash::fast::FixedState::default(),
    );
    for p in &decision.resizes {
        if !world.is_real(p.job) {
            return Err(format!(
                "resizes job {}, which is not in the snapshot",
                p.job
            ));
        }
        let job = world.job(p.job);
        if victims.contains(&p.job) {
            return Err(format!(
                "resizes job {:?}, which it also preempts",
                job.name
            ));
        }
        if !resized.insert(p.job) {
            return Err(format!("resizes job {:?} twice", job.name));
        }
        let gpus = p.tasks.len() as u64 * u64::from(job.task.gpus);
        let gpus = u32::try_from(gpus).unwrap_or(u32::MAX);
        let models: std::collections::BTreeSet<_> = p
            .tasks
            .iter()
            .filter_map(|t| state.spec().nodes.get(t.node.index())?.gpu_model)
            .collect();
        for m in models {
            if !view.speed(job, m, gpus).is_some_and(|s| s > 0.0) {
                return Err(format!(
                    "resizes job {:?} to {gpus} GPUs of {}, which the throughput table does \
                     not rate for its workload",
                    job.name,
                    state.spec().models[m.index()].name
                ));
            }
        }
        state.resize(job, p.tasks.clone()).map_err(|e| {
            format!(
                "cannot resize job {:?}: {}",
                job.name,
                why(&e, state.spec())
            )
        })?;
    }
    for p in &decision.placements {
        let job = world.job(p.job);
        state.allocate(job, p.tasks.clone()).map_err(|e| {
            format!(
                "placement of job {:?} does not fit: {}",
                job.name,
                why(&e, state.spec())
            )
        })?;
    }
    for p in &decision.shares {
        let job = world.job(p.job);
        let target = match p.tasks.as_slice() {
            [t] => match t.gpus.as_slice() {
                [g] => Some((t.node, *g)),
                _ => None,
            },
            _ => None,
        };
        let Some((node, gpu)) = target else {
            return Err(format!(
                "shares a GPU with job {:?} on {} task(s), not one task on one GPU",
                job.name,
                p.tasks.len()
            ));
        };
        let spec = std::sync::Arc::clone(state.spec_arc());
        let Some(node_spec) = spec.nodes.get(node.index()) else {
            return Err(format!(
                "shares a GPU with job {:?} on node {node}, which is not in the snapshot",
                job.name
            ));
        };
        let holders: Vec<JobId> = state.gpu_holders(node, gpu).iter().map(|a| a.job).collect();
        let partner = match holders.as_slice() {
            [one] => *one,
            [] => {
                return Err(format!(
                    "shares GPU {gpu} of node {:?} with job {:?}, but no job uses that GPU",
                    node_spec.name, job.name
                ));
            }
            _ => {
                return Err(format!(
                    "puts job {:?} on GPU {gpu} of node {:?}, which {} jobs hold already: at \
                     most two jobs share a GPU",
                    job.name,
                    node_spec.name,
                    holders.len()
                ));
            }
        };
        let partner = world.job(partner);
        let allowed = node_spec
            .gpu_model
            .and_then(|m| view.pair_speeds(job, partner, m));
        if allowed.is_none() {
            let workload = |j: &JobSpec| {
                j.workload
                    .as_ref()
                    .map_or_else(|| "untyped".to_string(), |w| w.as_str().to_string())
            };
            return Err(format!(
                "puts job {:?} ({}) beside job {:?} ({}) on GPU {gpu} of node {:?}, a pair \
                 the throughput table does not let share that GPU model",
                job.name,
                workload(job),
                partner.name,
                workload(partner),
                node_spec.name
            ));
        }
        state.allocate_shared(job, p.tasks.clone()).map_err(|e| {
            format!(
                "job {:?} cannot share GPU {gpu} of node {:?}: {}",
                job.name,
                node_spec.name,
                why(&e, state.spec())
            )
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lachesis_env::policy::Placement;

    #[test]
    fn shares_and_resizes_without_a_table_are_refused_not_dropped() {
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
        assert!(err.contains("no throughput table"), "{err}");
        assert_eq!(check(&world, &Decision::default()), Ok(()));
    }
}
