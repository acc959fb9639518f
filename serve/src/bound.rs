//! The starvation bound on the service's answers: the simulator's rule
//! (`lachesis_env::policy::StarvationGuard`, docs/simulator.md) applied to whatever answer the
//! service gives, the model's or a fallback heuristic's, after the shield. A pending job
//! waiting past the bound (since its submit, or since it last ran: `wait_ms`, `idle_ms`) gets
//! nodes reserved; the answer's starts, shares and resizes onto them are dropped, the job is
//! started where it fits now, and a running job that had waited past the bound when its run
//! began (its `wait_ms` less its `run_ms`) is not preempted or resized until its first
//! checkpoint.
//!
//! Everything is read from the snapshot, so a session answers as the same cluster sent whole
//! would. `auto` derives the bound from the run times of finished jobs, which a snapshot does
//! not carry: in the service it is no bound, and `starvation_bound` in seconds sets one.

use crate::proto;
use crate::world::World;
use lachesis_env::policy::{Decision, JobState, Placement, Reservations, Victim, protection};
use lachesis_env::units::JobId;

/// What the bound changed in an answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BoundEffect {
    /// Preemptions, resizes, starts and shares dropped.
    pub vetoed: usize,
    /// Jobs waiting past the bound that the service started itself.
    pub started: usize,
    /// Running jobs it preempted to make room for them.
    pub preempted: usize,
}

/// Applies `world`'s starvation bound to `decision` (one the shield accepted): the answer
/// that keeps every reservation, still feasible on `world`.
pub fn apply(world: &mut World, decision: Decision) -> (Decision, BoundEffect) {
    let (decision, effect, _) = apply_held(world, decision);
    (decision, effect)
}

/// [`apply`], with the reservations it kept (empty when no job waits past the bound).
pub fn apply_held(
    world: &mut World,
    mut decision: Decision,
) -> (Decision, BoundEffect, Reservations) {
    let mut effect = BoundEffect::default();
    let Some(bound) = world.starvation_guard().bound() else {
        return (decision, effect, Reservations::default());
    };
    let now = world.now();
    let waited = |world: &World, id: JobId| {
        let ctx = world.context();
        let since = ctx.runtime(id).last_stop.unwrap_or(world.job(id).submit);
        now.saturating_sub(since)
    };
    let starving = world.pending().any(|id| waited(world, id) >= bound);
    // A running job that had waited past the bound when its run began, until its first
    // checkpoint (the simulator's `protection`).
    let cost = world.context().restart_cost();
    let protects = |id: JobId| {
        let rt = *world.context().runtime(id);
        let since = rt.last_stop.unwrap_or(world.job(id).submit);
        rt.run_start.is_some_and(|start| {
            start.saturating_sub(since) >= bound
                && protection(start, cost).is_none_or(|until| now < until)
        })
    };
    let touches_protected = decision.preemptions.iter().any(|j| protects(*j))
        || decision.resizes.iter().any(|p| protects(p.job));
    if !starving && !touches_protected {
        return (decision, effect, Reservations::default());
    }
    // Tried on a copy, in the simulator's order: what the bound refuses is dropped, and what
    // counted on room a refused preemption would have freed no longer fits and goes too.
    let mut state = world.cluster_clone();
    let before = decision.preemptions.len() + decision.resizes.len();
    decision.preemptions.retain(|j| !protects(*j));
    decision.preemptions.retain(|j| state.preempt(*j).is_ok());
    let waiting: Vec<(JobId, lachesis_env::units::SimTime)> =
        world.pending().map(|id| (id, waited(world, id))).collect();
    let mut guard = world.starvation_guard().clone();
    // The simulator's victims: any preemptible running job the bound does not protect, and
    // none the answer preempts already, priced by the GPU-time of its current run.
    let victims = |id: JobId| {
        if protects(id) || decision.preemptions.contains(&id) {
            return None;
        }
        let spec = world.job(id);
        let ran = world
            .context()
            .runtime(id)
            .run_start
            .map_or(0, |s| now.saturating_sub(s).ms());
        Some(Victim {
            risk: u128::from(ran) * u128::from(spec.gpu_milli_total()),
            spec,
        })
    };
    let held = guard.plan(
        &mut state,
        now,
        waiting.iter().map(|(id, w)| (world.job(*id), *w)),
        &victims,
    );
    decision.resizes.retain(|p| {
        !protects(p.job)
            && held.admits(p.job, &p.tasks)
            && state.resize(world.job(p.job), p.tasks.clone()).is_ok()
    });
    effect.vetoed += before - decision.preemptions.len() - decision.resizes.len();
    // Room for the starving jobs it starts, freed before any start of the answer.
    for id in &held.preempt {
        if state.preempt(*id).is_ok() {
            decision.preemptions.push(*id);
            effect.preempted += 1;
        }
    }
    let mut keep = |p: &Placement, shared: bool| {
        let job = world.job(p.job);
        let ok = held.admits(p.job, &p.tasks)
            && if shared {
                state.allocate_shared(job, p.tasks.clone()).is_ok()
            } else {
                state.allocate(job, p.tasks.clone()).is_ok()
            };
        effect.vetoed += usize::from(!ok);
        ok
    };
    decision.placements.retain(|p| keep(p, false));
    decision.shares.retain(|p| keep(p, true));
    for (job, tasks) in &held.starts {
        let placed = (decision.placements.iter().chain(&decision.shares)).any(|p| p.job == *job);
        if !placed && state.allocate(world.job(*job), tasks.clone()).is_ok() {
            decision.placements.push(Placement {
                job: *job,
                tasks: tasks.clone(),
            });
            effect.started += 1;
        }
    }
    *world.starvation_guard_mut() = guard;
    debug_assert!(
        decision
            .placements
            .iter()
            .all(|p| world.context().runtime(p.job).state == JobState::Pending)
    );
    (decision, effect, held)
}

/// Rewrites the pending reasons of an answer the bound shaped (`held`, on `after`, the world
/// with the answer applied): a job waiting past the bound is `reserved`; a job that would fit
/// now but only on nodes held for one is `behind` it.
pub fn reasons(after: &World, held: &Reservations, reasons: &mut [proto::PendingReason]) {
    if held.is_empty() {
        return;
    }
    let bound_s = after
        .starvation_guard()
        .bound()
        .map_or(0.0, |b| b.secs_f64());
    for r in reasons.iter_mut() {
        let Some(id) = after.job_id(&r.job) else {
            continue;
        };
        if held.starving.contains(&id) {
            r.kind = "reserved".into();
            r.message = format!(
                "waited past the starvation bound ({bound_s:.0} s): nodes it can use are held \
                 for it, no other job starts there, until it fits ({})",
                r.message
            );
        } else if r.kind == "held" {
            let fit = after
                .cluster_what_if()
                .find_job_placement(after.job(id), lachesis_env::cluster::FitStrategy::BestFit);
            let owner = fit
                .iter()
                .flatten()
                .find_map(|t| held.holder(t.node))
                .filter(|o| *o != id);
            if let Some(owner) = owner {
                let name = after.job(owner).name.clone();
                r.kind = "behind".into();
                r.message = format!(
                    "fits only on nodes held for job {name:?}, which waited past the \
                     starvation bound"
                );
                r.blocked_by = name;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lachesis_env::cluster::TaskPlacement;
    use lachesis_env::policy::{StarvationBound, StarvationGuard};
    use lachesis_env::units::NodeId;

    const HOUR_MS: u64 = 3_600_000;

    fn job(id: &str, gpus: u32, wait_ms: u64) -> proto::Job {
        proto::Job {
            id: id.into(),
            gpus_per_task: gpus,
            cpu_milli: 1000,
            mem_mib: 1024,
            preemptible: true,
            wait_ms,
            ..Default::default()
        }
    }

    /// One node of 4 V100s; `running` 1-GPU jobs on GPUs 0.. (run 1 h, not preemptible);
    /// pending: `big` (4 GPUs, waited 10 h) and `small` (1 GPU, waited 1 min).
    fn world(running: usize) -> World {
        world_of(running, false)
    }

    fn world_of(running: usize, preemptible: bool) -> World {
        let snap = proto::Snapshot {
            now_ms: 100 * HOUR_MS,
            nodes: vec![proto::Node {
                name: "n0".into(),
                gpu_model: "V100".into(),
                gpus: 4,
                cpu_milli: 64_000,
                mem_mib: 512_000,
                ..Default::default()
            }],
            running: (0..running)
                .map(|i| proto::RunningJob {
                    job: Some(proto::Job {
                        preemptible,
                        ..job(&format!("r{i}"), 1, 2 * HOUR_MS)
                    }),
                    tasks: vec![proto::TaskPlacement {
                        node: "n0".into(),
                        gpus: vec![i as u32],
                    }],
                    run_ms: HOUR_MS,
                })
                .collect(),
            pending: vec![job("big", 4, 10 * HOUR_MS), job("small", 1, 60_000)],
            ..Default::default()
        };
        World::build(&snap).unwrap()
    }

    /// The pending jobs of `w` with how long each has waited since its submit.
    fn waiting_of(w: &World) -> Vec<(&lachesis_env::job::JobSpec, lachesis_env::units::SimTime)> {
        w.pending()
            .map(|id| (w.job(id), w.now().saturating_sub(w.job(id).submit)))
            .collect()
    }

    fn start(world: &World, name: &str, gpus: &[u8]) -> Placement {
        Placement {
            job: world.job_id(name).unwrap(),
            tasks: vec![TaskPlacement {
                node: NodeId(0),
                gpus: gpus.to_vec(),
            }],
        }
    }

    #[test]
    fn a_job_past_the_bound_drains_its_node_and_is_started_and_kept_there() {
        // Off: the answer goes through as it is.
        let mut w = world(1);
        let small = start(&w, "small", &[1]);
        let d = Decision {
            placements: vec![small.clone()],
            ..Decision::default()
        };
        let (same, effect) = apply(&mut w, d.clone());
        assert_eq!((same, effect), (d.clone(), BoundEffect::default()));
        // A 2 h bound: `big` (10 h) does not fit beside r0, so the node drains for it and
        // `small` may not start there.
        w.set_starvation_bound(StarvationBound::Secs(7200.0));
        let (d, effect, held) = apply_held(&mut w, d);
        assert!(d.placements.is_empty(), "{d:?}");
        assert_eq!(
            effect,
            BoundEffect {
                vetoed: 1,
                started: 0,
                preempted: 0
            }
        );
        // Their pending reasons say so: `big` is reserved, `small` behind it.
        w.apply(&d).unwrap();
        let mut why = crate::reasons::pending_reasons(&w, &d);
        reasons(&w, &held, &mut why);
        let of = |name: &str| why.iter().find(|r| r.job == name).unwrap().clone();
        assert_eq!(of("big").kind, "reserved", "{why:?}");
        assert!(
            of("big").message.contains("starvation bound (7200 s)"),
            "{why:?}"
        );
        assert_eq!(
            (of("small").kind.as_str(), of("small").blocked_by.as_str()),
            ("behind", "big")
        );
        // The same reservation as the simulator's guard makes on the same state.
        let mut sim = StarvationGuard::new(StarvationBound::Secs(7200.0));
        let mut state = w.cluster_clone();
        let waiting = waiting_of(&w);
        let held = sim.plan(&mut state, w.now(), waiting.into_iter(), &|_| None);
        assert_eq!(held.holder(NodeId(0)), w.job_id("big"));
        // With the node empty, the service starts `big` on an empty answer, and a later
        // answer that preempts it is refused.
        let mut w = world(0);
        w.set_starvation_bound(StarvationBound::Secs(7200.0));
        let (d, effect) = apply(&mut w, Decision::default());
        assert_eq!(
            effect,
            BoundEffect {
                vetoed: 0,
                started: 1,
                preempted: 0
            }
        );
        assert_eq!(d.placements.len(), 1);
        let big = w.job_id("big").unwrap();
        assert_eq!(d.placements[0].job, big);
        w.apply(&d).unwrap();
        let evict = Decision {
            preemptions: vec![big],
            ..Decision::default()
        };
        let (d, effect) = apply(&mut w, evict);
        assert!(d.preemptions.is_empty());
        assert_eq!(effect.vetoed, 1);
    }

    #[test]
    fn a_job_past_the_bound_preempts_the_cheapest_jobs_in_its_way_as_the_simulator_does() {
        // r0 and r1 preemptible: `big` (10 h, bound 2 h) does not fit beside them, so the
        // service preempts both and starts it; `small` may not start on its node.
        let mut w = world_of(2, true);
        w.set_starvation_bound(StarvationBound::Secs(7200.0));
        let small = start(&w, "small", &[2]);
        let d = Decision {
            placements: vec![small],
            ..Decision::default()
        };
        let (d, effect) = apply(&mut w, d);
        assert_eq!(
            effect,
            BoundEffect {
                vetoed: 1,
                started: 1,
                preempted: 2
            }
        );
        let names = |ids: &[JobId]| {
            let mut n: Vec<String> = ids.iter().map(|j| w.job(*j).name.clone()).collect();
            n.sort();
            n
        };
        let victims = names(&d.preemptions);
        assert_eq!(victims, ["r0", "r1"]);
        assert_eq!(d.placements.len(), 1);
        assert_eq!(Some(d.placements[0].job), w.job_id("big"));
        // The simulator's guard makes the same choice on the same state.
        let mut sim = StarvationGuard::new(StarvationBound::Secs(7200.0));
        let mut state = w.cluster_clone();
        let waiting = waiting_of(&w);
        let price = |id: JobId| {
            Some(lachesis_env::policy::Victim {
                risk: 1,
                spec: w.job(id),
            })
        };
        let held = sim.plan(&mut state, w.now(), waiting.into_iter(), &price);
        assert_eq!(names(&held.preempt), victims);
        // The answer applies: `big` runs.
        w.apply(&d).unwrap();
        assert!(w.cluster_clone().is_running(w.job_id("big").unwrap()));
    }
}
