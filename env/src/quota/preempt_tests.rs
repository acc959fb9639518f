//! Conformance with Kueue's own preemption tests: the scenarios of `TestPreemption` in
//! `pkg/scheduler/preemption/preemption_test.go` of `kubernetes-sigs/kueue` at commit
//! `ff69552e79ad21652c36caa97038382e55625cf7`, ported case by case (same names, same
//! ClusterQueues as its `defaultClusterQueues`, same admitted workloads, priorities, usage,
//! quota reservation and creation times, same incoming workload) with the victims and reasons
//! Kueue's test expects.
//!
//! Units: CPU in milli-cores, memory in MiB (`Gi` x 1024; cohort-three's memory in its own
//! unit). Kueue's assignment names the flavor of each resource of the incoming workload; here
//! the request is given per flavor-resource and the ones needing preemption are those its
//! queue cannot give, which is what every ported assignment marks `Preempt` (one also marks
//! memory that fits; it changes nothing there).
//!
//! Also ported: 13 scenarios of `TestHierarchicalPreemptions` in
//! `preemption_hierarchical_test.go` (same commit): cohorts nested, with quotas of their own
//! and lending limits.
//!
//! Not ported: cases that need what this model has not (fair sharing (`preemption_fair_test`),
//! topology-aware scheduling, workloads already evicted (`prefer to preempt evicted
//! workloads`) or with a preemption already issued (`skip duplicate preemption across
//! calls`), priority boosts, LocalQueue usage ordering, several pod sets asking one resource
//! of one flavor with partial admission); the `long range preemption`, `exhausted` and
//! `reclaim in complex hierarchy` cases (larger hierarchies, not ported yet); and the
//! candidate-ordering unit cases (the ordering is asserted through the victims chosen).

use super::*;

const NOW: u64 = 1_000;

fn cpu(cores: i64) -> (FlavorResource, i64) {
    (FlavorResource::new("default", Resource::Cpu), cores * 1000)
}

fn mem(flavor: &str, gib: i64) -> (FlavorResource, i64) {
    (FlavorResource::new(flavor, Resource::Memory), gib * 1024)
}

/// cohort-three's memory, in Kueue's bare units.
fn mem_units(v: i64) -> (FlavorResource, i64) {
    (FlavorResource::new("default", Resource::Memory), v)
}

fn quota(
    fr: (FlavorResource, i64),
    borrowing: Option<i64>,
    lending: Option<i64>,
) -> (FlavorResource, Quota) {
    (
        fr.0,
        Quota {
            nominal: fr.1,
            borrowing_limit: borrowing,
            lending_limit: lending,
        },
    )
}

fn policy(within: PreemptionPolicy, reclaim: PreemptionPolicy, borrow: Option<i32>) -> Preemption {
    Preemption {
        within_cluster_queue: within,
        reclaim_within_cohort: reclaim,
        borrow_within_cohort: BorrowWithinCohort {
            lower_priority: borrow.is_some(),
            max_priority_threshold: borrow,
        },
    }
}

fn queue(
    name: &str,
    cohort: Option<&str>,
    quotas: Vec<(FlavorResource, Quota)>,
    p: Preemption,
) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        kind: NodeKind::Queue,
        parent: cohort.map(str::to_string),
        quotas,
        strategy: QueueingStrategy::BestEffortFifo,
        weight: 1.0,
        preemption: p,
    }
}

fn cohort(name: &str) -> NodeSpec {
    NodeSpec {
        kind: NodeKind::Cohort,
        ..queue(name, None, Vec::new(), Preemption::default())
    }
}

/// Kueue's `defaultClusterQueues` of `TestPreemption`, and their cohorts.
fn default_cluster_queues() -> QuotaTree {
    use PreemptionPolicy::*;
    let gi = 1024;
    let pair = |b: Option<i64>, bm: Option<i64>| {
        vec![quota(cpu(6), b, None), quota(mem("default", 3), bm, None)]
    };
    let one =
        |nominal: i64, borrowing: i64| vec![quota(cpu(nominal), Some(borrowing * 1000), None)];
    let specs = vec![
        cohort("cohort"),
        cohort("cohort-no-limits"),
        cohort("legion"),
        cohort("with_shared_cq"),
        cohort("cohort-lend"),
        cohort("cohort-three"),
        queue(
            "standalone",
            None,
            vec![
                quota(cpu(6), None, None),
                quota(mem("alpha", 3), None, None),
                quota(mem("beta", 3), None, None),
            ],
            policy(LowerPriority, Never, None),
        ),
        queue(
            "c1",
            Some("cohort"),
            pair(Some(6000), Some(3 * gi)),
            policy(LowerPriority, LowerPriority, None),
        ),
        queue(
            "c2",
            Some("cohort"),
            pair(Some(6000), Some(3 * gi)),
            policy(Never, Any, None),
        ),
        queue(
            "d1",
            Some("cohort-no-limits"),
            pair(None, None),
            policy(LowerPriority, LowerPriority, None),
        ),
        queue(
            "d2",
            Some("cohort-no-limits"),
            pair(None, None),
            policy(Never, Any, None),
        ),
        queue(
            "l1",
            Some("legion"),
            pair(Some(12000), Some(6 * gi)),
            policy(LowerPriority, LowerPriority, None),
        ),
        queue(
            "preventStarvation",
            None,
            vec![quota(cpu(6), None, None)],
            policy(LowerOrNewerEqualPriority, Never, None),
        ),
        queue(
            "a_standard",
            Some("with_shared_cq"),
            one(1, 12),
            policy(Never, LowerPriority, Some(0)),
        ),
        queue(
            "b_standard",
            Some("with_shared_cq"),
            one(1, 12),
            policy(LowerPriority, Any, Some(0)),
        ),
        queue(
            "a_best_effort",
            Some("with_shared_cq"),
            one(1, 12),
            policy(Never, LowerPriority, Some(0)),
        ),
        queue(
            "b_best_effort",
            Some("with_shared_cq"),
            one(0, 13),
            policy(Never, LowerPriority, Some(0)),
        ),
        queue(
            "shared",
            Some("with_shared_cq"),
            vec![quota(cpu(10), None, None)],
            Preemption::default(),
        ),
        queue(
            "lend1",
            Some("cohort-lend"),
            vec![quota(cpu(6), None, Some(4000))],
            policy(LowerPriority, LowerPriority, None),
        ),
        queue(
            "lend2",
            Some("cohort-lend"),
            vec![quota(cpu(6), None, Some(2000))],
            policy(LowerPriority, LowerPriority, None),
        ),
        queue(
            "a",
            Some("cohort-three"),
            vec![quota(cpu(2), None, None), quota(mem_units(2), None, None)],
            policy(LowerPriority, Any, None),
        ),
        queue(
            "b",
            Some("cohort-three"),
            vec![quota(cpu(2), None, None), quota(mem_units(2), None, None)],
            Preemption::default(),
        ),
        queue(
            "c",
            Some("cohort-three"),
            vec![quota(cpu(2), None, None), quota(mem_units(2), None, None)],
            Preemption::default(),
        ),
    ];
    QuotaTree::new(specs).expect("Kueue's default ClusterQueues form a tree")
}

/// An admitted workload: name, ClusterQueue, priority, usage; reserved at `NOW`, created at 0.
struct Admitted {
    name: &'static str,
    queue: &'static str,
    priority: i32,
    usage: Vec<(FlavorResource, i64)>,
    reserved_at: u64,
    created_at: u64,
}

fn wl(
    name: &'static str,
    queue: &'static str,
    priority: i32,
    usage: Vec<(FlavorResource, i64)>,
) -> Admitted {
    Admitted {
        name,
        queue,
        priority,
        usage,
        reserved_at: NOW,
        created_at: 0,
    }
}

struct Case {
    name: &'static str,
    admitted: Vec<Admitted>,
    /// The incoming workload: its ClusterQueue, priority, creation time and request.
    queue: &'static str,
    priority: i32,
    created_at: u64,
    request: Vec<(FlavorResource, i64)>,
    /// The victims Kueue's test expects, with the reason of each.
    want: Vec<(&'static str, PreemptionReason)>,
}

fn case(
    name: &'static str,
    admitted: Vec<Admitted>,
    (queue, priority, request): (&'static str, i32, Vec<(FlavorResource, i64)>),
    want: Vec<(&'static str, PreemptionReason)>,
) -> Case {
    Case {
        name,
        admitted,
        queue,
        priority,
        created_at: 0,
        request,
        want,
    }
}

fn cases() -> Vec<Case> {
    use PreemptionReason::*;
    vec![
        case(
            "preempt lowest priority",
            vec![
                wl("low", "standalone", -1, vec![cpu(2)]),
                wl("mid", "standalone", 0, vec![cpu(2)]),
                wl("high", "standalone", 1, vec![cpu(2)]),
            ],
            ("standalone", 1, vec![cpu(2)]),
            vec![("low", InClusterQueue)],
        ),
        case(
            "preempt multiple",
            vec![
                wl("low", "standalone", -1, vec![cpu(2)]),
                wl("mid", "standalone", 0, vec![cpu(2)]),
                wl("high", "standalone", 1, vec![cpu(2)]),
            ],
            ("standalone", 1, vec![cpu(3)]),
            vec![("low", InClusterQueue), ("mid", InClusterQueue)],
        ),
        case(
            "no preemption for low priority",
            vec![
                wl("low", "standalone", -1, vec![cpu(3)]),
                wl("mid", "standalone", 0, vec![cpu(3)]),
            ],
            ("standalone", -1, vec![cpu(1)]),
            vec![],
        ),
        case(
            "not enough low priority workloads",
            vec![
                wl("low", "standalone", -1, vec![cpu(3)]),
                wl("mid", "standalone", 0, vec![cpu(3)]),
            ],
            ("standalone", 0, vec![cpu(4)]),
            vec![],
        ),
        case(
            "some free quota, preempt low priority",
            vec![
                wl("low", "standalone", -1, vec![cpu(1)]),
                wl("mid", "standalone", 0, vec![cpu(1)]),
                wl("high", "standalone", 1, vec![cpu(3)]),
            ],
            ("standalone", 1, vec![cpu(2)]),
            vec![("low", InClusterQueue)],
        ),
        case(
            "minimal set excludes low priority",
            vec![
                wl("low", "standalone", -1, vec![cpu(1)]),
                wl("mid", "standalone", 0, vec![cpu(2)]),
                wl("high", "standalone", 1, vec![cpu(3)]),
            ],
            ("standalone", 1, vec![cpu(2)]),
            vec![("mid", InClusterQueue)],
        ),
        case(
            "only preempt workloads using the chosen flavor",
            vec![
                wl("low", "standalone", -1, vec![mem("alpha", 2)]),
                wl("mid", "standalone", 0, vec![mem("beta", 1)]),
                wl("high", "standalone", 1, vec![mem("beta", 1)]),
            ],
            ("standalone", 1, vec![cpu(1), mem("beta", 2)]),
            vec![("mid", InClusterQueue)],
        ),
        case(
            "reclaim quota from borrower",
            vec![
                wl("c1-low", "c1", -1, vec![cpu(3)]),
                wl("c2-mid", "c2", 0, vec![cpu(3)]),
                wl("c2-high", "c2", 1, vec![cpu(6)]),
            ],
            ("c1", 1, vec![cpu(3)]),
            vec![("c2-mid", InCohortReclamation)],
        ),
        case(
            "reclaim quota if workload requests 0 resources for a resource at nominal quota",
            vec![
                wl("c1-low", "c1", -1, vec![cpu(3), mem("default", 3)]),
                wl("c2-mid", "c2", 0, vec![cpu(3)]),
                wl("c2-high", "c2", 1, vec![cpu(6)]),
            ],
            ("c1", 1, vec![cpu(3), mem("default", 0)]),
            vec![("c2-mid", InCohortReclamation)],
        ),
        case(
            "no workloads borrowing",
            vec![
                wl("c1-high", "c1", 1, vec![cpu(4)]),
                wl("c2-low-1", "c2", -1, vec![cpu(4)]),
            ],
            ("c1", 1, vec![cpu(4)]),
            vec![],
        ),
        case(
            "not enough workloads borrowing",
            vec![
                wl("c1-high", "c1", 1, vec![cpu(4)]),
                wl("c2-low-1", "c2", -1, vec![cpu(4)]),
                wl("c2-low-2", "c2", -1, vec![cpu(4)]),
            ],
            ("c1", 1, vec![cpu(4)]),
            vec![],
        ),
        case(
            "preempting locally and borrowing other resources in cohort, without cohort candidates",
            vec![
                wl("c1-low", "c1", -1, vec![cpu(4)]),
                wl("c2-low-1", "c2", -1, vec![cpu(4)]),
                wl("c2-high-2", "c2", 1, vec![cpu(4)]),
            ],
            ("c1", 1, vec![cpu(4), mem("default", 5)]),
            vec![("c1-low", InClusterQueue)],
        ),
        case(
            "preempting locally and borrowing same resource in cohort",
            vec![
                wl("c1-med", "c1", 0, vec![cpu(4)]),
                wl("c1-low", "c1", -1, vec![cpu(4)]),
                wl("c2-low-1", "c2", -1, vec![cpu(4)]),
            ],
            ("c1", 1, vec![cpu(4)]),
            vec![("c1-low", InClusterQueue)],
        ),
        case(
            "preempting locally and borrowing same resource in cohort; no borrowing limit in the cohort",
            vec![
                wl("d1-med", "d1", 0, vec![cpu(4)]),
                wl("d1-low", "d1", -1, vec![cpu(4)]),
                wl("d2-low-1", "d2", -1, vec![cpu(4)]),
            ],
            ("d1", 1, vec![cpu(4)]),
            vec![("d1-low", InClusterQueue)],
        ),
        case(
            "preempting locally and borrowing other resources in cohort, with cohort candidates",
            vec![
                wl("c1-med", "c1", 0, vec![cpu(4)]),
                wl("c2-low-1", "c2", -1, vec![cpu(5)]),
                wl("c2-low-2", "c2", -1, vec![cpu(1)]),
                wl("c2-low-3", "c2", -1, vec![cpu(1)]),
            ],
            ("c1", 1, vec![cpu(2), mem("default", 5)]),
            vec![("c1-med", InClusterQueue)],
        ),
        case(
            "preempting locally and not borrowing same resource in 1-queue cohort",
            vec![
                wl("l1-med", "l1", 0, vec![cpu(4)]),
                wl("l1-low", "l1", -1, vec![cpu(2)]),
            ],
            ("l1", 1, vec![cpu(4)]),
            vec![("l1-med", InClusterQueue)],
        ),
        case(
            "do not reclaim borrowed quota from same priority for withinCohort=ReclaimFromLowerPriority",
            vec![
                wl("c1", "c1", 0, vec![cpu(2)]),
                wl("c2-1", "c2", 0, vec![cpu(4)]),
                wl("c2-2", "c2", 0, vec![cpu(4)]),
            ],
            ("c1", 0, vec![cpu(4)]),
            vec![],
        ),
        case(
            "reclaim borrowed quota from same priority for withinCohort=ReclaimFromAny",
            vec![
                wl("c1-1", "c1", 0, vec![cpu(4)]),
                wl("c1-2", "c1", 1, vec![cpu(4)]),
                wl("c2", "c2", 0, vec![cpu(2)]),
            ],
            ("c2", 0, vec![cpu(4)]),
            vec![("c1-1", InCohortReclamation)],
        ),
        case(
            "preempt from all ClusterQueues in cohort",
            vec![
                wl("c1-low", "c1", -1, vec![cpu(3)]),
                wl("c1-mid", "c1", 0, vec![cpu(2)]),
                wl("c2-low", "c2", -1, vec![cpu(3)]),
                wl("c2-mid", "c2", 0, vec![cpu(4)]),
            ],
            ("c1", 0, vec![cpu(4)]),
            vec![("c1-low", InClusterQueue), ("c2-low", InCohortReclamation)],
        ),
        case(
            "can't preempt workloads in ClusterQueue for withinClusterQueue=Never",
            vec![wl("c2-low", "c2", -1, vec![cpu(3)])],
            ("c2", 1, vec![cpu(4)]),
            vec![],
        ),
        case(
            "each podset preempts a different flavor",
            vec![
                wl("low-alpha", "standalone", -1, vec![mem("alpha", 2)]),
                wl("low-beta", "standalone", -1, vec![mem("beta", 2)]),
            ],
            // A launcher of 2Gi on alpha, two workers of 1Gi on beta.
            ("standalone", 0, vec![mem("alpha", 2), mem("beta", 2)]),
            vec![("low-alpha", InClusterQueue), ("low-beta", InClusterQueue)],
        ),
        Case {
            created_at: NOW - 15,
            ..case(
                "preempt newer workloads with the same priority",
                vec![
                    wl("wl1", "preventStarvation", 2, vec![cpu(2)]),
                    Admitted {
                        created_at: NOW,
                        reserved_at: NOW + 1,
                        ..wl("wl2", "preventStarvation", 1, vec![cpu(2)])
                    },
                    Admitted {
                        created_at: NOW,
                        ..wl("wl3", "preventStarvation", 1, vec![cpu(2)])
                    },
                ],
                ("preventStarvation", 1, vec![cpu(2)]),
                vec![("wl2", InClusterQueue)],
            )
        },
        case(
            "use BorrowWithinCohort; allow preempting a lower-priority workload from another ClusterQueue while borrowing",
            vec![
                wl("a_best_effort_low", "a_best_effort", -1, vec![cpu(10)]),
                wl("b_best_effort_low", "b_best_effort", -1, vec![cpu(1)]),
            ],
            ("a_standard", 0, vec![cpu(10)]),
            vec![("a_best_effort_low", InCohortReclaimWhileBorrowing)],
        ),
        case(
            "use BorrowWithinCohort; don't allow preempting a lower-priority workload with priority above MaxPriorityThreshold, if borrowing is required even after the preemption",
            vec![wl("b_standard", "b_standard", 1, vec![cpu(10)])],
            ("a_standard", 2, vec![cpu(10)]),
            vec![],
        ),
        case(
            "use BorrowWithinCohort; allow preempting a lower-priority workload with priority above MaxPriorityThreshold, if borrowing is not required after the preemption",
            vec![wl("b_standard", "b_standard", 1, vec![cpu(13)])],
            ("a_standard", 2, vec![cpu(1)]),
            vec![("b_standard", InCohortReclamation)],
        ),
        case(
            "use BorrowWithinCohort; don't allow for preemption of lower-priority workload from the same ClusterQueue",
            vec![wl("a_standard", "a_standard", 1, vec![cpu(13)])],
            ("a_standard", 2, vec![cpu(1)]),
            vec![],
        ),
        case(
            "use BorrowWithinCohort; only preempt from CQ if no workloads below threshold and already above nominal",
            vec![
                wl("a_standard_1", "a_standard", 1, vec![cpu(10)]),
                wl("a_standard_2", "a_standard", 1, vec![cpu(1)]),
                wl("b_standard_1", "b_standard", 1, vec![cpu(1)]),
                wl("b_standard_2", "b_standard", 2, vec![cpu(1)]),
            ],
            ("b_standard", 3, vec![cpu(1)]),
            vec![("b_standard_1", InClusterQueue)],
        ),
        case(
            "use BorrowWithinCohort; preempt from CQ and from other CQs with workloads below threshold",
            vec![
                wl("b_standard_high", "b_standard", 2, vec![cpu(10)]),
                wl("b_standard_mid", "b_standard", 1, vec![cpu(1)]),
                wl("a_best_effort_low", "a_best_effort", -1, vec![cpu(1)]),
                wl("a_best_effort_lower", "a_best_effort", -2, vec![cpu(1)]),
            ],
            ("b_standard", 2, vec![cpu(2)]),
            vec![
                ("a_best_effort_lower", InCohortReclaimWhileBorrowing),
                ("b_standard_mid", InClusterQueue),
            ],
        ),
        case(
            "reclaim quota from lender",
            vec![
                wl("lend1-low", "lend1", -1, vec![cpu(3)]),
                wl("lend2-mid", "lend2", 0, vec![cpu(3)]),
                wl("lend2-high", "lend2", 1, vec![cpu(4)]),
            ],
            ("lend1", 1, vec![cpu(3)]),
            vec![("lend2-mid", InCohortReclamation)],
        ),
        case(
            "preempt from all ClusterQueues in cohort-lend",
            vec![
                wl("lend1-low", "lend1", -1, vec![cpu(3)]),
                wl("lend1-mid", "lend1", 0, vec![cpu(2)]),
                wl("lend2-low", "lend2", -1, vec![cpu(3)]),
                wl("lend2-mid", "lend2", 0, vec![cpu(4)]),
            ],
            ("lend1", 0, vec![cpu(4)]),
            vec![
                ("lend1-low", InClusterQueue),
                ("lend2-low", InCohortReclamation),
            ],
        ),
        case(
            "cannot preempt from other ClusterQueues if exceeds requestable quota including lending limit",
            vec![wl("lend2-low", "lend2", -1, vec![cpu(10)])],
            ("lend1", 0, vec![cpu(9)]),
            vec![],
        ),
    ]
}

/// The victims `tree` chooses for case `c`, sorted by name, with their reasons.
fn victims(mut tree: QuotaTree, c: &Case) -> Vec<(&'static str, PreemptionReason)> {
    let queue_of = |tree: &QuotaTree, name: &str| {
        tree.node(name)
            .unwrap_or_else(|| panic!("{}: queue {name}", c.name))
    };
    let queues: Vec<NodeId> = c
        .admitted
        .iter()
        .map(|a| queue_of(&tree, a.queue))
        .collect();
    let incoming_queue = queue_of(&tree, c.queue);
    for (a, q) in c.admitted.iter().zip(&queues) {
        for (fr, v) in &a.usage {
            tree.add_usage(*q, fr, *v);
        }
    }
    let admitted: Vec<Workload<'_>> = c
        .admitted
        .iter()
        .zip(&queues)
        .map(|(a, q)| Workload {
            queue: *q,
            priority: a.priority,
            queued_at: a.created_at,
            reserved_at: a.reserved_at,
            usage: &a.usage,
        })
        .collect();
    let incoming = Workload {
        queue: incoming_queue,
        priority: c.priority,
        queued_at: c.created_at,
        reserved_at: NOW,
        usage: &c.request,
    };
    let mut got: Vec<(&str, PreemptionReason)> = tree
        .preemption_targets(&tree.books(), &incoming, &admitted)
        .iter()
        .map(|t| (c.admitted[t.index].name, t.reason))
        .collect();
    got.sort_by_key(|(name, _)| *name);
    got
}

#[test]
fn kueue_preemption_scenarios_choose_kueues_victims() {
    let cases = cases();
    assert_eq!(cases.len(), 31);
    for c in &cases {
        let mut want = c.want.clone();
        want.sort_by_key(|(name, _)| *name);
        assert_eq!(victims(default_cluster_queues(), c), want, "{}", c.name);
    }
}

/// A cohort of `TestHierarchicalPreemptions`: name, parent, CPU quota (cores).
fn co(name: &str, parent: Option<&str>, cpu_cores: i64) -> NodeSpec {
    let quotas = if cpu_cores > 0 {
        vec![quota(cpu(cpu_cores), None, None)]
    } else {
        Vec::new()
    };
    NodeSpec {
        parent: parent.map(str::to_string),
        quotas,
        ..cohort(name)
    }
}

/// A ClusterQueue of `TestHierarchicalPreemptions`: within LowerPriority, reclaim `reclaim`,
/// borrowWithinCohort LowerPriority with threshold `borrow` where given.
fn hq(
    name: &str,
    cohort: &str,
    quotas: Vec<(FlavorResource, Quota)>,
    reclaim: PreemptionPolicy,
    borrow: Option<i32>,
) -> NodeSpec {
    queue(
        name,
        Some(cohort),
        quotas,
        policy(PreemptionPolicy::LowerPriority, reclaim, borrow),
    )
}

#[test]
fn kueue_hierarchical_preemption_scenarios_choose_kueues_victims() {
    use PreemptionPolicy::{Any, LowerPriority};
    use PreemptionReason::*;
    let cpu_q = |cores: i64| vec![quota(cpu(cores), None, None)];
    // R, with C(2) below it holding q, and q_borrowing beside C.
    let rc = |c_cpu: i64, r_cpu: i64| vec![co("r", None, r_cpu), co("c", Some("r"), c_cpu)];
    let q_any = || hq("q", "c", vec![], Any, None);
    let q_borrow_any = || hq("q", "c", vec![], Any, Some(0));
    let q_borrow_lower = || hq("q", "c", vec![], LowerPriority, Some(0));
    let borrowing = || hq("q_borrowing", "r", vec![], Any, None);
    let same_cohort = || hq("q_same_cohort", "c", vec![], Any, None);
    let nominal = || hq("q_nominal", "r", cpu_q(2), Any, None);
    let cases: Vec<(Vec<NodeSpec>, Case)> = vec![
        (
            [rc(2, 0), vec![q_any(), borrowing()]].concat(),
            case(
                "preempt with hierarchical advantage",
                vec![wl("admitted2", "q_borrowing", 0, vec![cpu(2)])],
                ("q", 0, vec![cpu(2)]),
                vec![("admitted2", InCohortReclamation)],
            ),
        ),
        (
            [rc(2, 0), vec![nominal(), q_any(), borrowing()]].concat(),
            case(
                "avoid queues within nominal quota",
                vec![
                    wl("admitted1", "q_nominal", -10, vec![cpu(2)]),
                    wl("admitted2", "q_borrowing", 0, vec![cpu(2)]),
                ],
                ("q", 0, vec![cpu(2)]),
                vec![("admitted2", InCohortReclamation)],
            ),
        ),
        (
            [rc(2, 0), vec![q_any(), borrowing()]].concat(),
            case(
                "preempt multiple with hierarchical advantage",
                vec![
                    wl("admitted1", "q_borrowing", 1, vec![cpu(1)]),
                    wl("admitted2", "q_borrowing", 2, vec![cpu(1)]),
                ],
                ("q", 0, vec![cpu(2)]),
                vec![
                    ("admitted1", InCohortReclamation),
                    ("admitted2", InCohortReclamation),
                ],
            ),
        ),
        (
            [rc(3, 0), vec![q_borrow_any(), same_cohort()]].concat(),
            case(
                "preempt in cohort and own CQ",
                vec![
                    wl("admitted_not_preemptible", "q_same_cohort", 1, vec![cpu(1)]),
                    wl("admitted_preemptible", "q_same_cohort", 0, vec![cpu(2)]),
                    wl("admitted_own_queue", "q", -1, vec![cpu(1)]),
                ],
                ("q", 1, vec![cpu(2)]),
                vec![
                    ("admitted_own_queue", InClusterQueue),
                    ("admitted_preemptible", InCohortReclaimWhileBorrowing),
                ],
            ),
        ),
        (
            [rc(2, 0), vec![q_any(), borrowing()]].concat(),
            case(
                "prefer to preempt hierarchical candidate",
                vec![
                    wl("admitted_borrowing", "q_borrowing", 1, vec![cpu(1)]),
                    wl("admitted_same_queue", "q", -2, vec![cpu(1)]),
                ],
                ("q", 0, vec![cpu(1)]),
                vec![("admitted_borrowing", InCohortReclamation)],
            ),
        ),
        (
            [rc(2, 0), vec![q_borrow_any(), nominal(), same_cohort()]].concat(),
            case(
                "forced to preempt priority candidate",
                vec![
                    wl("admitted_nominal", "q_nominal", -10, vec![cpu(2)]),
                    wl("admitted_same_cohort", "q_same_cohort", -1, vec![cpu(2)]),
                ],
                ("q", 0, vec![cpu(2)]),
                vec![("admitted_same_cohort", InCohortReclaimWhileBorrowing)],
            ),
        ),
        (
            [
                rc(2, 0),
                vec![
                    hq("q", "c", cpu_q(4), Any, None),
                    borrowing(),
                    same_cohort(),
                ],
            ]
            .concat(),
            case(
                "incoming workload fits in CQ nominal quota",
                vec![
                    wl("admitted_borrowing", "q_borrowing", 10, vec![cpu(3)]),
                    wl("admitted_same_cohort", "q_same_cohort", 10, vec![cpu(3)]),
                ],
                ("q", 0, vec![cpu(4)]),
                vec![
                    ("admitted_borrowing", InCohortReclamation),
                    ("admitted_same_cohort", InCohortReclamation),
                ],
            ),
        ),
        (
            [rc(4, 1), vec![q_borrow_lower(), borrowing(), same_cohort()]].concat(),
            case(
                "preempt hierarchical and priority candidates",
                vec![
                    wl("admitted_borrowing", "q_borrowing", -1, vec![cpu(2)]),
                    wl(
                        "admitted_same_cohort_preemptible",
                        "q_same_cohort",
                        -1,
                        vec![cpu(1)],
                    ),
                    wl(
                        "admitted_borrowing_not_preemptible",
                        "q_borrowing",
                        1,
                        vec![cpu(2)],
                    ),
                ],
                ("q", 0, vec![cpu(3)]),
                vec![
                    ("admitted_borrowing", InCohortReclamation),
                    (
                        "admitted_same_cohort_preemptible",
                        InCohortReclaimWhileBorrowing,
                    ),
                ],
            ),
        ),
        (
            [rc(4, 1), vec![q_borrow_lower(), borrowing(), same_cohort()]].concat(),
            case(
                "preempt hierarchical candidates and inside CQ",
                vec![
                    wl("admitted_borrowing", "q_borrowing", -1, vec![cpu(2)]),
                    wl("admitted_same_queue_preemptible", "q", -1, vec![cpu(1)]),
                    wl(
                        "admitted_borrowing_not_preemptible",
                        "q_borrowing",
                        1,
                        vec![cpu(2)],
                    ),
                ],
                ("q", 0, vec![cpu(3)]),
                vec![
                    ("admitted_borrowing", InCohortReclamation),
                    ("admitted_same_queue_preemptible", InClusterQueue),
                ],
            ),
        ),
        (
            [rc(3, 0), vec![q_any(), borrowing(), nominal()]].concat(),
            case(
                "reclaim nominal quota from lowest priority workload, excluding non-borrowing",
                vec![
                    wl("admitted_borrowing_prio_8", "q_borrowing", 8, vec![cpu(1)]),
                    wl("admitted_borrowing_prio_9", "q_borrowing", 9, vec![cpu(1)]),
                    wl("admitted_borrowing_prio_10", "q_borrowing", 9, vec![cpu(1)]),
                    wl("admitted_nominal", "q_nominal", -2, vec![cpu(2)]),
                ],
                ("q", 0, vec![cpu(1)]),
                vec![("admitted_borrowing_prio_8", InCohortReclamation)],
            ),
        ),
        (
            vec![
                co("r", None, 0),
                co("c", Some("r"), 2),
                co("c_other", Some("r"), 2),
                hq("q_other", "c_other", vec![], Any, None),
                q_any(),
                same_cohort(),
            ],
            case(
                "infeasible preemption all available workloads in pruned subtrees",
                vec![
                    wl("admitted_other_1", "q_other", -10, vec![cpu(1)]),
                    wl("admitted_other_2", "q_other", -10, vec![cpu(1)]),
                    wl("admitted_same_cohort", "q_same_cohort", 0, vec![cpu(2)]),
                ],
                ("q", 0, vec![cpu(2)]),
                vec![],
            ),
        ),
        (
            vec![
                co("r", None, 3),
                NodeSpec {
                    quotas: vec![
                        quota(cpu(4), None, None),
                        quota(mem("default", 4), None, None),
                    ],
                    ..co("c", Some("r"), 0)
                },
                q_any(),
                borrowing(),
                same_cohort(),
            ],
            case(
                "hiearchical preemption with multiple resources",
                vec![
                    wl(
                        "admitted_borrowing",
                        "q_borrowing",
                        0,
                        vec![cpu(3), mem("default", 1)],
                    ),
                    wl(
                        "admitted_same_cohort",
                        "q_same_cohort",
                        -2,
                        vec![cpu(1), mem("default", 3)],
                    ),
                ],
                ("q", -2, vec![cpu(2), mem("default", 1)]),
                vec![("admitted_borrowing", InCohortReclamation)],
            ),
        ),
        (
            [
                rc(2, 0),
                vec![
                    hq("q", "c", vec![quota(cpu(3), None, Some(2000))], Any, None),
                    borrowing(),
                ],
            ]
            .concat(),
            case(
                "respect lending limits",
                vec![wl("admitted_borrowing", "q_borrowing", 0, vec![cpu(4)])],
                ("q", -2, vec![cpu(5)]),
                vec![("admitted_borrowing", InCohortReclamation)],
            ),
        ),
    ];
    assert_eq!(cases.len(), 13);
    for (specs, c) in &cases {
        let tree = QuotaTree::new(specs.clone()).unwrap_or_else(|e| panic!("{}: {e}", c.name));
        let mut want = c.want.clone();
        want.sort_by_key(|(name, _)| *name);
        assert_eq!(victims(tree, c), want, "{}", c.name);
    }
}

#[test]
fn preemption_policies_never_choose_nothing() {
    // The same scenario as "preempt lowest priority", with Kueue's defaults (all Never).
    let mut tree = QuotaTree::new(vec![queue(
        "q",
        None,
        vec![quota(cpu(6), None, None)],
        Preemption::default(),
    )])
    .unwrap();
    let q = tree.node("q").unwrap();
    let usage = vec![cpu(6)];
    tree.add_usage(q, &usage[0].0, usage[0].1);
    let low = Workload {
        queue: q,
        priority: -1,
        queued_at: 0,
        reserved_at: 0,
        usage: &usage,
    };
    let request = vec![cpu(2)];
    let incoming = Workload {
        priority: 1,
        usage: &request,
        ..low
    };
    assert!(
        tree.preemption_targets(&tree.books(), &incoming, &[low])
            .is_empty()
    );
}
