//! Kueue's own scenarios (`TestAvailable`, `pkg/cache/scheduler/resource_test.go` at
//! kubernetes-sigs/kueue `ff69552e79ad21652c36caa97038382e55625cf7`), ported as tables; the
//! quota file's errors; and properties of the books on random trees.

use super::*;
use proptest::prelude::*;
use std::cmp::Ordering;

/// `Resource("cpu", nominal, borrowing, lending)` of Kueue's test wrappers, in cores ("" =
/// unset).
fn cpu(flavor: &str, nominal: i64, borrowing: &str, lending: &str) -> (FlavorResource, Quota) {
    let opt = |s: &str| (!s.is_empty()).then(|| s.parse::<i64>().unwrap() * 1000);
    (
        FlavorResource::new(flavor, Resource::Cpu),
        Quota {
            nominal: nominal * 1000,
            borrowing_limit: opt(borrowing),
            lending_limit: opt(lending),
        },
    )
}

fn node(
    name: &str,
    kind: NodeKind,
    parent: Option<&str>,
    quotas: Vec<(FlavorResource, Quota)>,
) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        kind,
        parent: parent.map(str::to_string),
        quotas,
        strategy: QueueingStrategy::BestEffortFifo,
        weight: 1.0,
        preemption: Default::default(),
    }
}

fn cq(name: &str, cohort: Option<&str>, quotas: Vec<(FlavorResource, Quota)>) -> NodeSpec {
    node(name, NodeKind::Queue, cohort, quotas)
}

fn cohort(name: &str, parent: Option<&str>, quotas: Vec<(FlavorResource, Quota)>) -> NodeSpec {
    node(name, NodeKind::Cohort, parent, quotas)
}

/// (queue, flavor, amount in milli-CPU)
type Amounts = &'static [(&'static str, &'static str, i64)];

struct Case {
    name: &'static str,
    nodes: Vec<NodeSpec>,
    usage: Amounts,
    available: Amounts,
    potential: Amounts,
}

fn check(tree: &QuotaTree, want: Amounts, what: &str, case: &str, potential: bool) {
    for (q, flavor, amount) in want {
        let n = tree.node(q).unwrap();
        let fr = FlavorResource::new(flavor, Resource::Cpu);
        let got = if potential {
            tree.potential_available(n, &fr)
        } else {
            tree.available(n, &fr)
        };
        assert_eq!(got, *amount, "{case}: {what} of {q} {fr}");
    }
}

#[test]
fn kueues_available_scenarios() {
    let cases = vec![
        Case {
            name: "base cqs",
            nodes: vec![
                cq("cq1", None, vec![cpu("red", 0, "", "")]),
                cq(
                    "cq2",
                    None,
                    vec![cpu("red", 5, "", ""), cpu("blue", 10, "", "")],
                ),
            ],
            usage: &[
                ("cq1", "red", 1000),
                ("cq2", "red", 2500),
                ("cq2", "blue", 1000),
            ],
            available: &[
                ("cq1", "red", 0),
                ("cq2", "red", 2500),
                ("cq2", "blue", 9000),
            ],
            potential: &[
                ("cq1", "red", 0),
                ("cq2", "red", 5000),
                ("cq2", "blue", 10_000),
            ],
        },
        Case {
            name: "cqs with cohort",
            nodes: vec![
                cq("cq1", Some("cohort"), vec![cpu("red", 10, "", "")]),
                cq("cq2", Some("cohort"), vec![cpu("red", 10, "", "9")]),
                cohort("cohort", None, vec![cpu("red", 10, "", "")]),
            ],
            usage: &[("cq1", "red", 1000), ("cq2", "red", 500)],
            available: &[("cq1", "red", 28_000), ("cq2", "red", 28_500)],
            potential: &[("cq1", "red", 29_000), ("cq2", "red", 30_000)],
        },
        Case {
            name: "cq borrows from cohort",
            nodes: vec![
                cq("cq1", Some("cohort"), vec![cpu("red", 10, "", "")]),
                cohort("cohort", None, vec![cpu("red", 10, "", "")]),
            ],
            usage: &[("cq1", "red", 11_000)],
            available: &[("cq1", "red", 9000)],
            potential: &[("cq1", "red", 20_000)],
        },
        Case {
            name: "cq oversubscription spills into cohort",
            nodes: vec![
                cq("cq1", Some("cohort"), vec![cpu("red", 10, "", "")]),
                cq("cq2", Some("cohort"), vec![cpu("red", 10, "0", "0")]),
                cohort("cohort", None, vec![cpu("red", 10, "", "")]),
            ],
            usage: &[("cq1", "red", 31_000)],
            available: &[("cq1", "red", 0), ("cq2", "red", 0)],
            potential: &[("cq1", "red", 20_000), ("cq2", "red", 10_000)],
        },
        Case {
            name: "lending and borrowing limits respected",
            nodes: vec![
                cq("cq1", Some("cohort"), vec![cpu("red", 10, "", "")]),
                cq("cq2", Some("cohort"), vec![cpu("red", 10, "2", "")]),
                cq("cq3", Some("cohort"), vec![cpu("red", 10, "", "5")]),
                cohort("cohort", None, vec![cpu("red", 10, "", "")]),
            ],
            usage: &[
                ("cq1", "red", 20_000),
                ("cq2", "red", 10_000),
                ("cq3", "red", 6000),
            ],
            available: &[
                ("cq1", "red", 4000),
                ("cq2", "red", 2000),
                ("cq3", "red", 4000),
            ],
            potential: &[
                ("cq1", "red", 35_000),
                ("cq2", "red", 12_000),
                ("cq3", "red", 40_000),
            ],
        },
        Case {
            name: "hierarchical cohort",
            nodes: vec![
                cq("cq1", Some("left"), vec![cpu("red", 10, "", "")]),
                cq("cq2", Some("right"), vec![cpu("red", 10, "", "0")]),
                cohort("root", None, vec![]),
                cohort("left", Some("root"), vec![cpu("red", 10, "", "")]),
                cohort("right", Some("root"), vec![cpu("red", 10, "", "")]),
            ],
            usage: &[("cq1", "red", 10_000), ("cq2", "red", 5000)],
            available: &[("cq1", "red", 20_000), ("cq2", "red", 25_000)],
            potential: &[("cq1", "red", 30_000), ("cq2", "red", 40_000)],
        },
        Case {
            name: "hierarchical cohort respects borrowing limit",
            nodes: vec![
                cq("left-cq1", Some("left"), vec![cpu("red", 10, "", "")]),
                cq("left-cq2", Some("left"), vec![cpu("red", 10, "5", "")]),
                cq("right-cq", Some("right"), vec![cpu("red", 10, "", "")]),
                cohort("root", None, vec![]),
                cohort("left", Some("root"), vec![cpu("red", 10, "5", "")]),
                cohort("right", Some("root"), vec![cpu("red", 10, "", "")]),
            ],
            usage: &[],
            available: &[
                ("left-cq1", "red", 35_000),
                ("left-cq2", "red", 15_000),
                ("right-cq", "red", 50_000),
            ],
            potential: &[
                ("left-cq1", "red", 35_000),
                ("left-cq2", "red", 15_000),
                ("right-cq", "red", 50_000),
            ],
        },
        Case {
            name: "hierarchical cohort respects lending limit",
            nodes: vec![
                cq("left-cq1", Some("left"), vec![cpu("red", 10, "", "5")]),
                cq("left-cq2", Some("left"), vec![cpu("red", 10, "", "")]),
                cq("right-cq", Some("right"), vec![cpu("red", 0, "", "")]),
                cq("root-cq", Some("root"), vec![cpu("red", 0, "", "")]),
                cohort("root", None, vec![]),
                cohort("left", Some("root"), vec![cpu("red", 0, "", "5")]),
                cohort("right", Some("root"), vec![cpu("red", 0, "", "")]),
            ],
            usage: &[],
            available: &[
                ("left-cq1", "red", 20_000),
                ("left-cq2", "red", 15_000),
                ("right-cq", "red", 5000),
                ("root-cq", "red", 5000),
            ],
            potential: &[
                ("left-cq1", "red", 20_000),
                ("left-cq2", "red", 15_000),
                ("right-cq", "red", 5000),
                ("root-cq", "red", 5000),
            ],
        },
    ];
    for c in cases {
        let mut tree = QuotaTree::new(c.nodes).unwrap();
        // Before usage, available is the potential.
        check(&tree, c.potential, "available before usage", c.name, false);
        check(&tree, c.potential, "potential", c.name, true);
        for (q, flavor, v) in c.usage {
            let n = tree.node(q).unwrap();
            tree.add_usage(n, &FlavorResource::new(flavor, Resource::Cpu), *v);
        }
        check(&tree, c.available, "available", c.name, false);
        check(&tree, c.potential, "potential with usage", c.name, true);
        for (q, flavor, v) in c.usage {
            let n = tree.node(q).unwrap();
            tree.remove_usage(n, &FlavorResource::new(flavor, Resource::Cpu), *v);
        }
        check(&tree, c.potential, "available after removal", c.name, false);
        assert!(
            tree.usage.0.iter().all(|u| *u == 0),
            "{}: usage left: {:?}",
            c.name,
            tree.usage
        );
    }
}

#[test]
fn a_bad_tree_is_refused_naming_the_node() {
    let e = QuotaTree::new(vec![cq("a", Some("x"), vec![])]).unwrap_err();
    assert_eq!(e.to_string(), "`a`: its cohort `x` is not defined");
    let e = QuotaTree::new(vec![cq("a", None, vec![]), cq("b", Some("a"), vec![])]).unwrap_err();
    assert!(e.to_string().contains("is a queue"), "{e}");
    let e = QuotaTree::new(vec![
        cohort("x", Some("y"), vec![]),
        cohort("y", Some("x"), vec![]),
    ])
    .unwrap_err();
    assert!(e.to_string().contains("x -> y -> x"), "{e}");
    let e = QuotaTree::new(vec![cq("a", None, vec![cpu("red", 1, "2", "")])]).unwrap_err();
    assert!(
        e.to_string().contains("borrowing limit needs a cohort"),
        "{e}"
    );
    let e = QuotaTree::new(vec![cq("a", None, vec![]), cq("a", None, vec![])]).unwrap_err();
    assert_eq!(e.to_string(), "`a` is defined twice");
}

#[test]
fn the_quota_file_is_read_and_its_errors_name_line_and_field() {
    let text = r#"
[[cohort]]
name = "org"

[[queue]]
name = "vision"
cohort = "org"
strategy = "StrictFIFO"
weight = 2.0
[[queue.quota]]
flavor = "V100"
resource = "gpu"
nominal = 16
borrowing_limit = 8
lending_limit = 4

[[queue]]
name = "nlp"
cohort = "org"
[[queue.quota]]
flavor = "V100"
resource = "gpu"
nominal = 8
[[queue.quota]]
flavor = "default"
resource = "memory"
nominal = 1024
"#;
    let tree = parse_quota_toml(text, "quotas.toml").unwrap();
    let v100 = FlavorResource::new("V100", Resource::Gpu);
    let (vision, nlp) = (tree.node("vision").unwrap(), tree.node("nlp").unwrap());
    assert_eq!(tree.spec(vision).strategy, QueueingStrategy::StrictFifo);
    assert_eq!(tree.spec(vision).weight, 2.0);
    // vision keeps 12 of its 16 GPUs from the cohort, lends 4: nlp sees 8 + 4.
    assert_eq!(tree.available(nlp, &v100), 12_000);
    // vision: its 16 and nlp's 8, but no more than 8 beyond its own.
    assert_eq!(tree.available(vision, &v100), 24_000);
    assert_eq!(tree.queues().count(), 2);
    let cases = [
        (
            "[[queue]]\nname = \"a\"\ncohort = \"nope\"\n",
            "q.toml:3:10: queue[0].cohort: `a`: its cohort `nope` is not defined",
        ),
        (
            "[[queue]]\nname = \"a\"\n[[queue.quota]]\nflavor = \"V100\"\nresource = \"tpu\"\nnominal = 1\n",
            "q.toml:5:12: queue[0].quota[0].resource: `tpu`: expected gpu, cpu or memory",
        ),
        (
            "[[queue]]\nname = \"a\"\n[[queue.quota]]\nflavor = \"V100\"\nresource = \"gpu\"\nnominal = -1\n",
            "q.toml:6:11: queue[0].quota[0].nominal: -1 is not an amount >= 0",
        ),
        (
            "[[queue]]\nname = \"a\"\n[[queue.quota]]\nflavor = \"V100\"\nresource = \"gpu\"\nnominal = 1\nborrowing_limit = 1\n",
            "q.toml:7:19: queue[0].quota[0].borrowing_limit: needs a cohort (`cohort`) to apply to",
        ),
        (
            "[[queue]]\nname = \"a\"\nstrategy = \"lifo\"\n",
            "q.toml:3:12: queue[0].strategy: `lifo`: expected BestEffortFIFO or StrictFIFO",
        ),
        (
            "[[queue]]\nname = \"a\"\n[[queue]]\nname = \"a\"\n",
            "q.toml:4:8: queue[1].name: `a` is defined twice",
        ),
        (
            "[[cohort]]\nname = \"x\"\nparent = \"y\"\n[[cohort]]\nname = \"y\"\nparent = \"x\"\n",
            "q.toml:3:10: cohort[0].parent: cohorts x -> y -> x: their parents form a cycle",
        ),
        (
            "[[queue]]\nname = \"a\"\nnominal = 3\n",
            "q.toml:3:1: queue[0].nominal: unknown field `nominal`",
        ),
    ];
    for (text, want) in cases {
        let e = parse_quota_toml(text, "q.toml").unwrap_err().to_string();
        assert!(e.starts_with(want), "{text}\n got: {e}\nwant: {want}");
    }
}

#[test]
fn preemption_policies_are_read_and_bad_ones_refused_naming_line_and_field() {
    let text = "[[cohort]]\nname = \"org\"\n[[queue]]\nname = \"a\"\ncohort = \"org\"\n\
                [queue.preemption]\nwithin_cluster_queue = \"LowerOrNewerEqualPriority\"\n\
                reclaim_within_cohort = \"any\"\nborrow_within_cohort = \"LowerPriority\"\n\
                max_priority_threshold = 100\n";
    let tree = parse_quota_toml(text, "q.toml").unwrap();
    let p = tree.spec(tree.node("a").unwrap()).preemption;
    assert_eq!(
        p,
        Preemption {
            within_cluster_queue: PreemptionPolicy::LowerOrNewerEqualPriority,
            reclaim_within_cohort: PreemptionPolicy::Any,
            borrow_within_cohort: BorrowWithinCohort {
                lower_priority: true,
                max_priority_threshold: Some(100),
            },
        }
    );
    let head = "[[cohort]]\nname = \"org\"\n[[queue]]\nname = \"a\"\ncohort = \"org\"\n\
                [queue.preemption]\n";
    let cases = [
        (
            "within_cluster_queue = \"Any\"\n",
            "q.toml:7:24: queue[0].preemption.within_cluster_queue: `Any`: expected Never, \
             LowerPriority, LowerOrNewerEqualPriority",
        ),
        (
            "reclaim_within_cohort = \"LowerOrNewerEqualPriority\"\n",
            "q.toml:7:25: queue[0].preemption.reclaim_within_cohort: \
             `LowerOrNewerEqualPriority`: expected Never, LowerPriority, Any",
        ),
        (
            "borrow_within_cohort = \"LowerPriority\"\n",
            "q.toml:7:24: queue[0].preemption.borrow_within_cohort: needs \
             reclaim_within_cohort other than Never",
        ),
        (
            "reclaim_within_cohort = \"Any\"\nmax_priority_threshold = 3\n",
            "q.toml:8:26: queue[0].preemption.max_priority_threshold: needs \
             borrow_within_cohort = \"LowerPriority\"",
        ),
        (
            "within = \"Never\"\n",
            "q.toml:7:1: queue[0].preemption.within: unknown field `within`",
        ),
    ];
    for (body, want) in cases {
        let text = format!("{head}{body}");
        let e = parse_quota_toml(&text, "q.toml").unwrap_err().to_string();
        assert!(e.starts_with(want), "{text}\n got: {e}\nwant: {want}");
    }
    let cohort = "[[cohort]]\nname = \"org\"\n[cohort.preemption]\n";
    let e = parse_quota_toml(cohort, "q.toml").unwrap_err().to_string();
    assert!(
        e.starts_with("q.toml:3:1: cohort[0].preemption: only queues have preemption policies"),
        "{e}"
    );
}

/// A random tree: a root cohort, up to three child cohorts, up to six queues, one
/// flavor-resource, quotas and limits in whole units.
fn tree_strategy() -> impl Strategy<Value = Vec<NodeSpec>> {
    let quota = (
        0i64..10,
        prop::option::of(0i64..6),
        prop::option::of(0i64..6),
    );
    (
        prop::collection::vec((0usize..4, quota.clone()), 0..3),
        prop::collection::vec((0usize..4, quota), 1..6),
    )
        .prop_map(|(cohorts, queues)| {
            let q = |(n, b, l): (i64, Option<i64>, Option<i64>)| {
                vec![(
                    FlavorResource::new("red", Resource::Gpu),
                    Quota {
                        nominal: n * 1000,
                        borrowing_limit: b.map(|b| b * 1000),
                        lending_limit: l.map(|l| l * 1000),
                    },
                )]
            };
            let mut nodes = vec![cohort("root", None, vec![])];
            for (i, (_, quota)) in cohorts.iter().enumerate() {
                nodes.push(cohort(&format!("c{i}"), Some("root"), q(*quota)));
            }
            for (i, (parent, quota)) in queues.iter().enumerate() {
                let parent = if *parent < cohorts.len() {
                    format!("c{parent}")
                } else {
                    "root".to_string()
                };
                nodes.push(cq(&format!("q{i}"), Some(&parent), q(*quota)));
            }
            nodes
        })
}

proptest! {
    /// Admitting only what fits never over-admits the tree, never takes a queue past its
    /// subtree quota plus its borrowing limit, never reaches into what a lending limit keeps,
    /// and removing it all balances the books.
    #[test]
    fn admitting_what_fits_keeps_every_limit(
        nodes in tree_strategy(),
        asks in prop::collection::vec((0usize..6, 1i64..5), 1..40),
    ) {
        let mut tree = QuotaTree::new(nodes).unwrap();
        let fr = FlavorResource::new("red", Resource::Gpu);
        let queues: Vec<NodeId> = tree.queues().collect();
        let mut admitted = Vec::new();
        for (q, v) in asks {
            let q = queues[q % queues.len()];
            let v = v * 1000;
            if tree.fits(q, &[(fr.clone(), v)]) {
                tree.add_usage(q, &fr, v);
                admitted.push((q, v));
            }
            let root = tree.node("root").unwrap();
            prop_assert!(tree.usage(root, &fr) <= tree.subtree_quota(root, &fr));
            for &n in &queues {
                let i = tree.fr(&fr).unwrap();
                let node = &tree.nodes[n.0];
                if let Some(b) = node.quota[i].borrowing_limit {
                    let used = tree.used(&tree.usage, n.0, i);
                    prop_assert!(used <= node.subtree[i] + b,
                        "{} uses {} > {} + {}", node.spec.name, used, node.subtree[i], b);
                }
                // What a lending limit keeps is never taken by others: the queue can always
                // still use its local quota's unused part.
                prop_assert!(tree.available(n, &fr) >= tree.local_available(&tree.usage, n, i));
            }
        }
        for (q, v) in admitted.into_iter().rev() {
            tree.remove_usage(q, &fr, v);
        }
        prop_assert!(tree.usage.0.iter().all(|u| *u == 0), "usage kept: {:?}", tree.usage);
    }
}

/// Kueue's `TestDominantResourceShare` (`fair_sharing_test.go` at `ff69552e`): a queue `cq`
/// and a `lending-cq` in `test-cohort`, each with nominal (cpu cores, gpus), `cq` using
/// `usage` and asking `request`; its rounded share and dominant resource.
#[test]
fn kueues_dominant_resource_share_scenarios() {
    struct Case {
        name: &'static str,
        cohort: bool,
        /// (cpu cores, gpus, gpu lending limit, weight)
        cq: (i64, i64, Option<i64>, f64),
        lending: (i64, i64, Option<i64>, f64),
        /// (milli-cpu, gpus)
        usage: (i64, i64),
        request: (i64, i64),
        want: (i64, Option<Resource>, bool),
    }
    let cases = [
        Case {
            name: "no cohort",
            cohort: false,
            cq: (2000, 5, None, 1.0),
            lending: (0, 0, None, 1.0),
            usage: (1000, 2),
            request: (0, 0),
            want: (0, None, false),
        },
        Case {
            name: "usage below nominal",
            cohort: true,
            cq: (2, 5, None, 1.0),
            lending: (8, 5, None, 1.0),
            usage: (1000, 2),
            request: (0, 0),
            want: (0, None, false),
        },
        Case {
            name: "usage above nominal",
            cohort: true,
            cq: (2, 5, None, 1.0),
            lending: (8, 5, None, 1.0),
            usage: (3000, 7),
            request: (0, 0),
            want: (200, Some(Resource::Gpu), true),
        },
        Case {
            name: "usage slightly above nominal in a cohort with large quotas",
            cohort: true,
            cq: (0, 500, None, 1.0),
            lending: (0, 1000, None, 300.0),
            usage: (0, 501),
            request: (0, 0),
            want: (1, Some(Resource::Gpu), true),
        },
        Case {
            name: "usage way above nominal in a cohort with large quotas and weights",
            cohort: true,
            cq: (0, 500, None, 300.0),
            lending: (0, 1000, None, 300.0),
            usage: (0, 800),
            request: (0, 0),
            want: (1, Some(Resource::Gpu), true),
        },
        Case {
            name: "one resource above nominal",
            cohort: true,
            cq: (2, 5, None, 1.0),
            lending: (8, 5, None, 1.0),
            usage: (3000, 3),
            request: (0, 0),
            want: (100, Some(Resource::Cpu), true),
        },
        Case {
            name: "usage with workload above nominal",
            cohort: true,
            cq: (2, 5, None, 1.0),
            lending: (8, 5, None, 1.0),
            usage: (1000, 2),
            request: (4000, 4),
            want: (300, Some(Resource::Cpu), true),
        },
        Case {
            name: "A resource with zero lendable",
            cohort: true,
            cq: (2, 2, Some(0), 1.0),
            lending: (8, 64, Some(0), 1.0),
            usage: (1000, 1),
            request: (4000, 4),
            want: (300, Some(Resource::Cpu), true),
        },
    ];
    let gpu = FlavorResource::new("default", Resource::Gpu);
    let cpu_fr = FlavorResource::new("default", Resource::Cpu);
    for c in cases {
        let quotas = |(cores, gpus, lend, _): (i64, i64, Option<i64>, f64)| {
            vec![
                (
                    cpu_fr.clone(),
                    Quota {
                        nominal: cores * 1000,
                        ..Quota::default()
                    },
                ),
                (
                    gpu.clone(),
                    Quota {
                        nominal: gpus * 1000,
                        lending_limit: lend.map(|l| l * 1000),
                        ..Quota::default()
                    },
                ),
            ]
        };
        let parent = c.cohort.then_some("test-cohort");
        let mut nodes = vec![NodeSpec {
            weight: c.cq.3,
            ..cq("cq", parent, quotas(c.cq))
        }];
        if c.cohort {
            nodes.push(NodeSpec {
                weight: c.lending.3,
                ..cq("lending-cq", parent, quotas(c.lending))
            });
            nodes.push(cohort("test-cohort", None, vec![]));
        }
        let mut tree = QuotaTree::new(nodes).unwrap();
        let q = tree.node("cq").unwrap();
        tree.add_usage(q, &cpu_fr, c.usage.0);
        tree.add_usage(q, &gpu, c.usage.1 * 1000);
        let request = [
            (cpu_fr.clone(), c.request.0),
            (gpu.clone(), c.request.1 * 1000),
        ];
        let drs = tree.dominant_resource_share(q, &request);
        assert_eq!(
            (drs.rounded_weighted_share(), drs.dominant, drs.borrowing),
            c.want,
            "{}: {drs:?}",
            c.name
        );
        if c.cohort {
            for other in ["lending-cq", "test-cohort"] {
                let d = tree.dominant_resource_share(tree.node(other).unwrap(), &[]);
                assert_eq!(
                    (d.rounded_weighted_share(), d.borrowing),
                    (0, false),
                    "{}",
                    c.name
                );
            }
        }
    }
    // A zero weight that borrows sorts after any other share.
    let share = |w: f64, r: f64| Drs {
        weight: w,
        unweighted_ratio: r,
        dominant: Some(Resource::Gpu),
        borrowing: r > 0.0,
        borrowed: Vec::new(),
    };
    assert_eq!(
        share(0.0, 1.0).compare(&share(1.0, 900.0)),
        Ordering::Greater
    );
    assert_eq!(share(0.0, 0.0).compare(&share(1.0, 900.0)), Ordering::Less);
    assert_eq!(
        share(2.0, 400.0).compare(&share(1.0, 300.0)),
        Ordering::Less
    );
    assert_eq!(share(0.0, 1.0).rounded_weighted_share(), i64::MAX);
}

#[test]
fn equal_shares_split_the_capacity_and_let_idle_shares_be_borrowed() {
    let tenants: Vec<String> = ["a", "b", "c"].iter().map(|t| t.to_string()).collect();
    let v100 = FlavorResource::new("V100", Resource::Gpu);
    let mut tree = QuotaTree::new(equal_shares(&tenants, &[(v100.clone(), 16_000)])).unwrap();
    let nominal: Vec<i64> = ["a", "b", "c"]
        .iter()
        .map(|t| tree.nominal(tree.node(t).unwrap(), &v100))
        .collect();
    assert_eq!(nominal, [5334, 5333, 5333]);
    let a = tree.node("a").unwrap();
    // Alone, a tenant may use the whole cluster.
    assert_eq!(tree.available(a, &v100), 16_000);
    tree.add_usage(a, &v100, 12_000);
    assert!(tree.borrowing(a, &v100));
    let b = tree.node("b").unwrap();
    assert_eq!(tree.available(b, &v100), 4000);
}

#[test]
fn a_blocked_admission_names_the_quota() {
    let tenants: Vec<String> = ["a", "b"].iter().map(|t| t.to_string()).collect();
    let v100 = FlavorResource::new("V100", Resource::Gpu);
    let mut tree = QuotaTree::new(equal_shares(&tenants, &[(v100.clone(), 8000)])).unwrap();
    let (a, b) = (tree.node("a").unwrap(), tree.node("b").unwrap());
    tree.add_usage(a, &v100, 6000);
    assert!(tree.admit_check(b, &[(v100.clone(), 2000)]).is_ok());
    let e = tree.admit_check(b, &[(v100.clone(), 4000)]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "quota of queue b on V100/gpu: asks 4, 2 available (nominal 4, in use 0)"
    );
}
