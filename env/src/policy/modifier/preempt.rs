//! `preempt`: priority/QoS preemption with a minimal victim set.
//!
//! The rule, applied to each job the pass left unplaced, in the ordering's order:
//!
//! - A job's class is its QoS (`guaranteed` > `latency-sensitive` > `burstable` >
//!   `best-effort`), then its priority (larger first). A job may preempt only running jobs
//!   that are `preemptible` and of a strictly lower class: never an equal or higher class,
//!   never a non-preemptible job, never a job this decision already preempts.
//! - A job that fits without preempting anyone is left alone (starting it would jump the
//!   queue; that is backfilling's business, e.g. `easy`).
//! - Victims are ranked by the work they risk losing, cheapest first: GPU-time of their
//!   current run (the work since the last checkpoint is at most that), then fewer GPUs, then
//!   job id. The victim set is the first of these that lets the job fit (checked by freeing the
//!   victims on the planner and asking the policy's placer):
//!   1. one victim, the cheapest that suffices;
//!   2. else, on each node holding candidates, the cheapest-first prefix of that node's
//!      candidates that suffices, pruned so that no victim can be spared (most expensive
//!      dropped first); the set with the fewest victims wins, then the least GPU-time, then
//!      the lowest node;
//!   3. else (a gang, or a job larger than a node's victims free), the same greedy prefix and
//!      pruning over all candidates across nodes.
//!
//!   So no victim in the set can be spared (minimal by inclusion); the count is the smallest
//!   for one victim and a heuristic's beyond (finding the true minimum is a set-cover search).
//! - The victims are preempted (`Decision::preemptions`, applied before placements) and the
//!   job placed in their room, in the same decision.
//!
//! Preemption cannot cycle: a victim only ever has a lower class than its preemptor.

use super::super::Decision;
use super::super::context::DecisionContext;
use super::super::heuristic::{Modifier, Placer};
use super::super::planner::Planner;
use super::{
    Freed, Room, VictimPools, fits_after_freeing, placed, preempt_and_place, shortest_prefix,
};
use crate::job::{JobSpec, Qos};
use crate::units::{JobId, NodeId};
use std::cmp::Reverse;

/// Class-based preemption; see the module docs for the rule.
#[derive(Debug, Default)]
pub struct ClassPreempt;

/// How important a job is: QoS first, then priority (larger tuples are more important).
fn class(job: &JobSpec) -> (Reverse<Qos>, i32) {
    (Reverse(job.qos), job.priority)
}

/// A running job that may be preempted, with what preempting it risks.
#[derive(Debug, Clone, Copy)]
pub(super) struct Candidate {
    pub(super) job: JobId,
    /// GPU-time of the current run, milli-GPU x ms.
    risk: u128,
    gpus: u64,
    /// The job's `class`, kept so a search filters the pool without looking jobs up.
    class: (Reverse<Qos>, i32),
    /// The node all the job's tasks run on, if they run on one (see `alone_on`).
    node: Option<NodeId>,
}

impl Candidate {
    /// The node this candidate runs on alone, if it does and the planner has not freed it
    /// already: what `Room::node_may_make_room` bounds.
    fn alone_on(&self, planner: &Planner<'_>) -> Option<NodeId> {
        self.node.filter(|_| !planner.has_freed(self.job))
    }

    /// Whether freeing this candidate alone could let the job fit: `false` when its node's
    /// capacity rules that out, else freeing it and asking (`fits_after_freeing`).
    fn could_suffice(
        &self,
        planner: &mut Planner<'_>,
        placer: &mut dyn Placer,
        room: &Room,
        job: &JobSpec,
    ) -> bool {
        if let Some(node) = self.alone_on(planner)
            && !room.node_may_make_room(planner.state(), node)
        {
            return false;
        }
        fits_after_freeing(planner, placer, room, job, &[self.job])
    }
}

impl Candidate {
    fn rank(&self) -> (u128, u64, JobId) {
        (self.risk, self.gpus, self.job)
    }
}

/// The victims for `job` among the candidates of `pool` (ranked cheapest first) of a class
/// below `below`, by the module's rule. `by_node` is the pool's `ByNode`, built here if none.
fn victim_set(
    planner: &mut Planner<'_>,
    placer: &mut dyn Placer,
    room: &Room,
    job: &JobSpec,
    pool: &[Candidate],
    below: (Reverse<Qos>, i32),
    by_node: &mut Option<ByNode>,
) -> Option<Vec<JobId>> {
    // Most searches end here, a few candidates in: the pool is only filtered as it is walked.
    let mut lower = pool.iter().filter(|c| c.class < below);
    if let Some(single) = lower.find(|c| c.could_suffice(planner, placer, room, job)) {
        return Some(vec![single.job]);
    }
    let ids: Vec<JobId> = pool
        .iter()
        .filter(|c| c.class < below)
        .map(|c| c.job)
        .collect();
    let risk = |set: &[JobId]| -> u128 {
        pool.iter()
            .filter(|c| set.contains(&c.job))
            .map(|c| c.risk)
            .sum()
    };
    let by_node = by_node.get_or_insert_with(|| ByNode::new(planner, pool));
    let mut best: Option<(usize, u128, Vec<JobId>)> = None;
    let mut on: Vec<JobId> = Vec::new();
    for group in by_node.0.chunk_by(|a, b| a.0 == b.0) {
        // The node's lower-class candidates, in the pool's order; whether they all run on it
        // alone (and are not freed already), so that its capacity bounds what they can free.
        on.clear();
        let mut alone = true;
        for (_, i) in group {
            let c = &pool[*i as usize];
            if c.class < below {
                on.push(c.job);
                alone &= c.alone_on(planner).is_some();
            }
        }
        if on.is_empty() || (alone && !room.node_may_make_room(planner.state(), group[0].0)) {
            continue;
        }
        let Some(k) = shortest_prefix(planner, placer, room, job, &on) else {
            continue;
        };
        let set = prune(planner, placer, room, job, on[..k].to_vec());
        let key = (set.len(), risk(&set));
        if best.as_ref().is_none_or(|(n, r, _)| key < (*n, *r)) {
            best = Some((key.0, key.1, set));
        }
    }
    if let Some((_, _, set)) = best {
        return Some(set);
    }
    let k = shortest_prefix(planner, placer, room, job, &ids)?;
    Some(prune(planner, placer, room, job, ids[..k].to_vec()))
}

/// A pool's candidates on each node, nodes ascending, each node's in the pool's order
/// (cheapest first): (node, position in the pool) pairs of every task, sorted, a job's repeats
/// on one node (equal pairs, adjacent then) dropped. The position makes every other pair
/// distinct, so the unstable sort gives the order a stable sort by node would. One vector,
/// where a map of vectors allocated one per node; built once for a pool and every job class
/// (a search keeps the candidates of a class below its job's).
#[derive(Debug)]
pub(super) struct ByNode(Vec<(NodeId, u32)>);

impl ByNode {
    fn new(planner: &Planner<'_>, pool: &[Candidate]) -> Self {
        let mut by_node: Vec<(NodeId, u32)> = Vec::with_capacity(pool.len());
        for (i, c) in pool.iter().enumerate() {
            let i = u32::try_from(i)
                .expect("the pool's jobs have distinct u32 ids, so fewer than 2^32");
            match c.node {
                Some(node) => by_node.push((node, i)),
                None => {
                    if let Some(a) = planner.state().allocation(c.job) {
                        by_node.extend(a.tasks.iter().map(|t| (t.node, i)));
                    }
                }
            }
        }
        by_node.sort_unstable();
        by_node.dedup();
        ByNode(by_node)
    }
}

/// Drops every victim that can be spared, the most expensive (last) first. The set is freed
/// once, then each victim in turn is taken back and the placer asked: the cluster is then in
/// the state that freeing the others alone would leave (free capacity does not depend on the
/// order of frees), at one free or take per victim instead of a whole set each.
pub(super) fn prune(
    planner: &mut Planner<'_>,
    placer: &mut dyn Placer,
    room: &Room,
    job: &JobSpec,
    mut set: Vec<JobId>,
) -> Vec<JobId> {
    if placer.complete() {
        // Capacity decides for such a placer: take each victim back from the count instead.
        let mut freed = Freed::default();
        for v in &set {
            room.free(planner.state(), &mut freed, *v);
        }
        for i in (0..set.len()).rev() {
            room.unfree(planner.state(), &mut freed, set[i]);
            if room.admits(&freed) {
                set.remove(i);
            } else {
                room.free(planner.state(), &mut freed, set[i]);
            }
        }
        return set;
    }
    let mark = planner.mark();
    for v in &set {
        planner.free_running(*v);
    }
    for i in (0..set.len()).rev() {
        planner.retake(set[i]);
        let try_mark = planner.mark();
        let fits = placer.place(planner, job).is_some();
        planner.undo_to(try_mark);
        if fits {
            set.remove(i);
        } else {
            planner.free_running(set[i]);
        }
    }
    planner.undo_to(mark);
    set
}

/// The preemptible running jobs not in `exclude`, ranked cheapest first.
pub(super) fn preemptible_pool(
    ctx: &DecisionContext<'_>,
    planner: &Planner<'_>,
    exclude: &[JobId],
) -> Vec<Candidate> {
    let now = ctx.now();
    let mut pool: Vec<Candidate> = planner
        .state()
        .running()
        .filter(|a| a.preemptible && !exclude.contains(&a.job))
        .map(|a| {
            let spec = ctx.job(a.job);
            let ran = ctx
                .runtime(a.job)
                .run_start
                .map_or(0, |s| now.saturating_sub(s).ms());
            Candidate {
                job: a.job,
                risk: u128::from(ran) * u128::from(spec.gpu_milli_total()),
                gpus: spec.gpus_total(),
                class: class(spec),
                node: a.only_node(),
            }
        })
        .collect();
    // The rank ends with the job id, unique in the pool, so no two keys tie and the unstable
    // sort gives exactly the stable sort's order, faster.
    pool.sort_unstable_by_key(Candidate::rank);
    pool
}

/// The victims for `job` among `pool` (ranked cheapest first): only those of a strictly lower
/// class, and none when the job already fits or no set of them lets it fit.
fn victims_among(
    planner: &mut Planner<'_>,
    placer: &mut dyn Placer,
    job: &JobSpec,
    pool: &[Candidate],
    by_node: &mut Option<ByNode>,
) -> Option<Vec<JobId>> {
    let below = class(job);
    if !pool.iter().any(|c| c.class < below) {
        return None;
    }
    let room = Room::new(planner.state(), job);
    if fits_after_freeing(planner, placer, &room, job, &[]) {
        return None;
    }
    victim_set(planner, placer, &room, job, pool, below, by_node)
}

/// The minimal victim set `ClassPreempt` would preempt for the blocked `job` on the planner's
/// cluster as it stands (see the module docs for the rule): `None` when the job fits without
/// preempting, or no set of preemptible lower-class running jobs lets it fit. Victims are
/// checked with `placer`; nothing changes on the planner. The jobs `pools` excludes (already
/// preempted in the decision being built) are not victims again.
pub fn minimal_victims(
    ctx: &DecisionContext<'_>,
    planner: &mut Planner<'_>,
    placer: &mut dyn Placer,
    job: &JobSpec,
    pools: &mut VictimPools,
) -> Option<Vec<JobId>> {
    if pools.class.is_none() {
        // The common case first, without building and ranking the pool: no preemptible
        // running job of a lower class (`victims_among` would find none either).
        let below = class(job);
        let any_lower = planner
            .state()
            .running()
            .any(|a| a.preemptible && class(ctx.job(a.job)) < below);
        if !any_lower {
            return None;
        }
    }
    let pool = pools
        .class
        .get_or_insert_with(|| preemptible_pool(ctx, planner, &pools.exclude));
    victims_among(planner, placer, job, pool, &mut pools.class_by_node)
}

impl Modifier for ClassPreempt {
    fn name(&self) -> &str {
        "preempt"
    }

    fn extend(
        &mut self,
        ctx: &DecisionContext<'_>,
        planner: &mut Planner<'_>,
        placer: &mut dyn Placer,
        rest: &[JobId],
        decision: &mut Decision,
    ) {
        let mut pool = preemptible_pool(ctx, planner, &decision.preemptions);
        let mut by_node = None;
        for id in rest {
            if pool.is_empty() {
                return;
            }
            if placed(decision, *id) {
                continue;
            }
            let job = ctx.job(*id);
            let Some(victims) = victims_among(planner, placer, job, &pool, &mut by_node) else {
                continue;
            };
            if preempt_and_place(planner, placer, job, &victims, decision) {
                pool.retain(|c| !victims.contains(&c.job));
                by_node = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::World;
    use super::*;
    use crate::job::Qos::{BestEffort, Burstable, Guaranteed, LatencySensitive};

    /// A running job for the table: name, node, GPUs, seconds run, QoS, preemptible.
    type Run = (&'static str, u32, u32, u64, Qos, bool);

    /// Two nodes of 4 GPUs, now = 1000 s. Risk = GPUs x seconds run (x 1000 milli-ms).
    /// Default running set: node 0: a (1 GPU, 100 s: risk 100), b (1 GPU, 10 s: 10),
    /// c (2 GPUs, 50 s: 100); node 1: d (4 GPUs, 5 s: 20). All best-effort, preemptible.
    /// Cheapest first: b (10), d (20), a (100, 1 GPU), c (100, 2 GPUs).
    fn base() -> Vec<Run> {
        vec![
            ("a", 0, 1, 100, BestEffort, true),
            ("b", 0, 1, 10, BestEffort, true),
            ("c", 0, 2, 50, BestEffort, true),
            ("d", 1, 4, 5, BestEffort, true),
        ]
    }

    fn with(mut runs: Vec<Run>, name: &str, f: impl Fn(&mut Run)) -> Vec<Run> {
        runs.iter_mut().filter(|r| r.0 == name).for_each(f);
        runs
    }

    /// Preempts for one blocked job of `tasks` x `gpus` GPUs and class (`qos`, `priority`);
    /// the victims' names, sorted, and whether the job was placed.
    fn victims(
        runs: &[Run],
        tasks: u32,
        gpus: u32,
        qos: Qos,
        priority: i32,
    ) -> (Vec<String>, bool) {
        let mut w = World::new(2, 4, 1000);
        for (name, node, g, ran, q, preemptible) in runs {
            let id = w.run(name, *node, *g, *ran);
            w.jobs[id.index()].qos = *q;
            w.jobs[id.index()].preemptible = *preemptible;
        }
        let x = w.pending("x", tasks, gpus);
        w.jobs[x.index()].qos = qos;
        w.jobs[x.index()].priority = priority;
        let d = w.extend(&mut ClassPreempt, &[x]);
        let mut names: Vec<String> = d
            .preemptions
            .iter()
            .map(|v| w.jobs[v.index()].name.clone())
            .collect();
        names.sort();
        (names, d.placements.iter().any(|p| p.job == x))
    }

    /// The blocked job: tasks, GPUs per task, QoS, priority.
    type Ask = (u32, u32, Qos, i32);

    #[test]
    fn picks_a_minimal_victim_set() {
        let no_d = || with(base(), "d", |r| r.5 = false);
        let cases: Vec<(&str, Vec<Run>, Ask, &[&str])> = vec![
            // 2 GPUs: single victims cheapest first: b frees 1 (no), d frees node 1 (yes).
            (
                "cheapest single victim",
                base(),
                (1, 2, Guaranteed, 0),
                &["d"],
            ),
            // d cannot go: singles b (no), a (no), c (frees 2 on node 0: yes).
            (
                "single victim, not the cheapest",
                no_d(),
                (1, 2, Guaranteed, 0),
                &["c"],
            ),
            // d cannot go, 4 GPUs on node 0: no single; node 0 prefix b, a, c frees 4; none
            // spared (each is needed for 4).
            (
                "whole node",
                no_d(),
                (1, 4, Guaranteed, 0),
                &["a", "b", "c"],
            ),
            // d cannot go, 3 GPUs: node 0 prefix b (1), a (2), c (4) fits; pruning: without
            // c 2 free (no); without a, b + c free 3 (yes) -> {b, c}; without b, 2 (no).
            (
                "pruned greedy prefix",
                no_d(),
                (1, 3, Guaranteed, 0),
                &["b", "c"],
            ),
            // A gang of 2 x 4 GPUs needs both nodes: no single, no one node; across nodes
            // b, d, a, c, all needed.
            (
                "gang across nodes",
                base(),
                (2, 4, Guaranteed, 0),
                &["a", "b", "c", "d"],
            ),
            // Equal class (best-effort, priority 0): nobody.
            ("equal class", base(), (1, 2, BestEffort, 0), &[]),
            // Higher priority within best-effort is a higher class; d is still cheapest.
            (
                "priority breaks a QoS tie",
                base(),
                (1, 2, BestEffort, 1),
                &["d"],
            ),
            // d guaranteed (above burstable), c non-preemptible: singles b, a (no); node 0
            // candidates b, a free 2 together: {a, b}.
            (
                "never a higher class or a non-preemptible job",
                with(with(base(), "d", |r| r.4 = Guaranteed), "c", |r| {
                    r.5 = false
                }),
                (1, 2, Burstable, 0),
                &["a", "b"],
            ),
            // Only latency-sensitive jobs run: a burstable job preempts none of them.
            (
                "lower class preempts nobody",
                base()
                    .into_iter()
                    .map(|mut r| {
                        r.4 = LatencySensitive;
                        r
                    })
                    .collect(),
                (1, 1, Burstable, 0),
                &[],
            ),
        ];
        for (what, runs, (tasks, gpus, qos, prio), want) in cases {
            let want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
            let placed = !want.is_empty();
            assert_eq!(
                victims(&runs, tasks, gpus, qos, prio),
                (want, placed),
                "{what}"
            );
        }
    }

    #[test]
    fn a_job_that_fits_preempts_nobody() {
        // Node 1 is empty: a 2-GPU guaranteed job fits without preempting.
        let runs: Vec<Run> = base().into_iter().filter(|r| r.0 != "d").collect();
        assert_eq!(victims(&runs, 1, 2, Guaranteed, 0), (vec![], false));
    }

    mod against_the_rule {
        use super::super::super::fits_freeing as fits;
        use super::super::super::room::tests::{Built, build, placers, world};
        use super::*;
        use crate::cluster::FitStrategy;
        use proptest::prelude::*;
        use std::cell::RefCell;

        /// The module's rule as written, every set tried by freeing it and asking the placer:
        /// no `Room`, no bound, no shortcut.
        fn naive(
            planner: &mut Planner<'_>,
            placer: &mut dyn Placer,
            job: &JobSpec,
            lower: &[(JobId, u128)],
        ) -> Option<Vec<JobId>> {
            if fits(planner, placer, job, &[]) {
                return None;
            }
            if let Some((v, _)) = lower
                .iter()
                .find(|(v, _)| fits(planner, placer, job, &[*v]))
            {
                return Some(vec![*v]);
            }
            let mut search = |planner: &mut Planner<'_>, list: &[JobId]| {
                let k = (1..=list.len()).find(|k| fits(planner, placer, job, &list[..*k]))?;
                let mut set = list[..k].to_vec();
                for i in (0..set.len()).rev() {
                    let mut without = set.clone();
                    without.remove(i);
                    if fits(planner, placer, job, &without) {
                        set = without;
                    }
                }
                Some(set)
            };
            let risk = |set: &[JobId]| -> u128 {
                lower
                    .iter()
                    .filter(|(v, _)| set.contains(v))
                    .map(|(_, r)| r)
                    .sum()
            };
            let mut best: Option<(usize, u128, Vec<JobId>)> = None;
            for node in planner.state().spec().node_ids().collect::<Vec<_>>() {
                let on: Vec<JobId> = lower
                    .iter()
                    .map(|(v, _)| *v)
                    .filter(|v| {
                        planner
                            .state()
                            .allocation(*v)
                            .is_some_and(|a| a.tasks.iter().any(|t| t.node == node))
                    })
                    .collect();
                let Some(set) = search(planner, &on) else {
                    continue;
                };
                let key = (set.len(), risk(&set));
                if best.as_ref().is_none_or(|(n, r, _)| key < (*n, *r)) {
                    best = Some((key.0, key.1, set));
                }
            }
            if let Some((_, _, set)) = best {
                return Some(set);
            }
            let all: Vec<JobId> = lower.iter().map(|(v, _)| *v).collect();
            search(planner, &all)
        }

        proptest! {
            /// `victims_among` (the room counts, single-victim sums, nodes ruled out by
            /// capacity) picks the set the rule picks when every set is freed and tried, for
            /// random clusters, running jobs (one task or a gang, whole or fractional), pending
            /// shapes, classes and costs, with a placer that capacity decides and one that must
            /// be asked.
            #[test]
            fn victims_are_the_rules_victims(
                (nodes, running, pending, allowed, seed) in world(),
                classes in prop::collection::vec(0u8..3, 40),
            ) {
                let Built { state, pending, victims } =
                    build(&nodes, &running, pending, allowed, seed);
                let below = (Reverse(Qos::Burstable), 0);
                // Candidates in the victims' (random) order, which is their rank; some of a
                // class as high as the job's, which are never victims.
                let pool: Vec<Candidate> = victims
                    .iter()
                    .enumerate()
                    .map(|(i, v)| Candidate {
                        job: *v,
                        risk: (i as u128 * 7) % 5,
                        gpus: 0,
                        class: match classes[i % classes.len()] {
                            0 => (Reverse(Qos::BestEffort), 0),
                            1 => (Reverse(Qos::Burstable), -1),
                            _ => below,
                        },
                        node: state.allocation(*v).and_then(crate::cluster::Allocation::only_node),
                    })
                    .collect();
                let lower: Vec<(JobId, u128)> =
                    pool.iter().filter(|c| c.class < below).map(|c| (c.job, c.risk)).collect();
                let mut job = pending;
                job.qos = Qos::Burstable;
                job.priority = 0;
                let cell = RefCell::new(state);
                let mut planner = Planner::new(cell.borrow_mut());
                // One pool, so the second search reuses the by-node grouping the first built.
                let mut by_node = None;
                for mut placer in placers(FitStrategy::BestFit) {
                    let placer = placer.as_mut();
                    let fast = victims_among(&mut planner, placer, &job, &pool, &mut by_node);
                    let rule = naive(&mut planner, placer, &job, &lower);
                    prop_assert_eq!(fast, rule, "complete: {}", placer.complete());
                }
            }
        }
    }
}
