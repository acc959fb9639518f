//! Placement constraints hold under every registry policy: on random labelled clusters and
//! constrained traces, no running job ever sits on a node whose labels its constraints refuse,
//! no distinct-nodes gang shares a node, and no policy proposes a placement the simulator's
//! feasibility check must reject. Checked from the labels themselves, not through feasibility.

use super::*;
use crate::cluster::{ClusterSpec, ClusterState, FitStrategy};
use crate::constraint::Constraints;
use crate::job::{TaskRequest, Trace};
use crate::policy::{Policy, build_policy, policy_catalog};
use crate::units::SimTime;
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::sync::Arc;

/// Every registry name built from the catalog: each placement under FIFO, each ordering with
/// best fit, each modifier on FIFO/best-fit. Names a plain seed cannot build (oracles) are
/// left out.
fn registry_policies() -> Vec<String> {
    let mut names = Vec::new();
    for p in policy_catalog() {
        names.push(match p.part {
            "placement" => format!("fifo/{}", p.name),
            "ordering" => format!("{}/best-fit", p.name),
            "policy" => p.name.to_string(),
            _ => format!("fifo/best-fit/{}", p.name),
        });
    }
    names.retain(|n| build_policy(n, 0).is_ok());
    names
}

/// Nodes of 4 V100s or T4s, each labelled with a zone (`a`/`b`) and maybe the feature `ib`.
fn cluster_strategy() -> impl Strategy<Value = ClusterSpec> {
    prop::collection::vec((prop::bool::ANY, 0u8..2, prop::bool::ANY), 2..7).prop_map(|nodes| {
        let shape: Vec<_> = nodes
            .iter()
            .map(|(t4, _, _)| (Some(u32::from(*t4)), 4, 32_000, 65_536))
            .collect();
        let mut spec = crate::cluster::tests::v100_t4(&shape, 2);
        let mut specs = spec.nodes.clone();
        for (n, (_, zone, ib)) in specs.iter_mut().zip(&nodes) {
            n.labels
                .insert("zone".into(), ["a", "b"][*zone as usize].into());
            if *ib {
                n.labels.insert("ib".into(), String::new());
            }
        }
        spec = ClusterSpec::new(
            "labelled",
            spec.models.clone(),
            specs,
            spec.racks.clone(),
            spec.nvlink_domains.clone(),
        )
        .expect("relabelled test cluster");
        spec
    })
}

const EXPRESSIONS: [&str; 6] = ["", "zone=a", "ib", "zone!=a&ib", "!ib|zone=b", "nvlink"];

fn trace_strategy() -> impl Strategy<Value = Trace> {
    let job = (
        0u64..100,
        1u64..80,
        1u32..=3,
        0u32..=4,
        0usize..EXPRESSIONS.len(),
        prop::bool::ANY,
    );
    prop::collection::vec(job, 1..25).prop_map(|jobs| {
        let (specs, durs): (Vec<_>, Vec<_>) = jobs
            .into_iter()
            .enumerate()
            .map(|(i, (submit, dur, tasks, gpus, expr, distinct))| {
                let task = TaskRequest::whole(gpus, 2000, 1024);
                let mut j = crate::job::tests::job(&format!("j{i}"), submit, task);
                j.tasks = tasks;
                j.constraints = Constraints::parse(EXPRESSIONS[expr]).expect("test expression");
                j.constraints.distinct_nodes = distinct;
                (j, SimTime::from_secs(dur))
            })
            .unzip();
        Trace::new("constrained", specs, durs, vec!["default".into()]).unwrap()
    })
}

/// Runs `policy` step by step; after every decision, every running job meets its
/// constraints. Returns the summary's rejected decisions and finished/skipped counts.
fn constrained_run(t: &Trace, spec: &ClusterSpec, policy: &str) -> Result<(), TestCaseError> {
    let cfg = SimConfig {
        skip_unplaceable: true,
        tick_s: 11.0,
        ..SimConfig::default()
    };
    let mut sim = match Simulator::new(t, Arc::new(spec.clone()), &cfg) {
        Err(SimError::EmptyTrace) => return Ok(()),
        other => other.unwrap(),
    };
    let mut p: Box<dyn Policy> = build_policy(policy, 7).unwrap();
    while sim.advance() {
        let d = p.decide(&sim.context()).unwrap();
        sim.apply(&d);
        let cluster = sim.cluster();
        for a in cluster.running() {
            let job = t.job(a.job);
            for task in a.tasks.iter() {
                let labels = &spec.node(task.node).labels;
                prop_assert!(
                    job.constraints.admits(labels),
                    "{policy}: job {} ({}) on node {} labelled {labels:?}",
                    job.name,
                    job.constraints.label_text(),
                    task.node
                );
            }
            if job.constraints.distinct_nodes {
                let nodes: BTreeSet<_> = a.tasks.iter().map(|t| t.node).collect();
                prop_assert_eq!(
                    nodes.len(),
                    a.tasks.len(),
                    "{}: gang {} co-located",
                    policy,
                    job.name
                );
            }
        }
    }
    let r = sim.finish(p.name(), 0.0);
    prop_assert_eq!(
        r.summary.rejected_decisions,
        0,
        "{} proposed infeasible placements",
        policy
    );
    prop_assert_eq!(
        r.summary.finished + r.summary.skipped_unplaceable,
        t.len() as u64
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24),
        ..ProptestConfig::default()
    })]

    #[test]
    fn no_registry_policy_violates_constraints(spec in cluster_strategy(), t in trace_strategy()) {
        for policy in registry_policies() {
            constrained_run(&t, &spec, &policy)?;
        }
    }
}

/// The run as `SimResult`, from the policy `name` with seed 7 and skipping unplaceable jobs.
fn plain_run(t: &Trace, spec: &ClusterSpec, name: &str) -> Option<SimResult> {
    let cfg = SimConfig {
        skip_unplaceable: true,
        tick_s: 11.0,
        ..SimConfig::default()
    };
    let mut sim = match Simulator::new(t, Arc::new(spec.clone()), &cfg) {
        Err(SimError::EmptyTrace) => return None,
        other => other.unwrap(),
    };
    let mut p = build_policy(name, 7).unwrap();
    while sim.advance() {
        let d = p.decide(&sim.context()).unwrap();
        sim.apply(&d);
    }
    Some(sim.finish(p.name(), 0.0))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(12),
        ..ProptestConfig::default()
    })]

    /// Labels on the nodes change nothing for jobs without constraints: the same run, job by
    /// job, as on the unlabelled cluster.
    #[test]
    fn labels_alone_change_no_run(spec in cluster_strategy(), t in trace_strategy()) {
        let jobs: Vec<_> = t
            .jobs()
            .iter()
            .map(|j| (crate::job::JobSpec { constraints: Constraints::default(), ..j.clone() }, t.true_duration(j.id)))
            .collect();
        let (specs, durs): (Vec<_>, Vec<_>) = jobs.into_iter().unzip();
        let t = Trace::new("plain", specs, durs, t.tenants().to_vec()).unwrap();
        let mut nodes = spec.nodes.clone();
        for n in &mut nodes {
            n.labels.clear();
        }
        let bare = ClusterSpec::new("bare", spec.models.clone(), nodes, spec.racks.clone(), spec.nvlink_domains.clone()).unwrap();
        for name in registry_policies() {
            let (Some(a), Some(b)) = (plain_run(&t, &spec, &name), plain_run(&t, &bare, &name)) else {
                continue;
            };
            prop_assert_eq!(&a.jobs, &b.jobs, "{}", name);
            prop_assert_eq!(&a.summary.avg_jct_s, &b.summary.avg_jct_s, "{}", name);
        }
    }
}

#[test]
fn the_registry_list_covers_every_placement() {
    let names = registry_policies();
    for p in policy_catalog().iter().filter(|p| p.part == "placement") {
        assert!(names.contains(&format!("fifo/{}", p.name)), "{}", p.name);
    }
    assert!(names.len() >= 15, "{names:?}");
}

/// A gang of 2 x 2 GPUs that needs distinct nodes, on a cluster of two empty 4-GPU nodes: every
/// placement puts one task on each node, where without the flag best fit consolidates.
#[test]
fn a_distinct_gang_is_never_co_located() {
    let spec = Arc::new(crate::cluster::tests::uniform(2, 4, "V100", 32_000, 65_536));
    let mut j = crate::job::tests::job("g", 0, TaskRequest::whole(2, 1000, 1024));
    j.tasks = 2;
    let mut state = ClusterState::new(Arc::clone(&spec));
    let together = state.find_job_placement(&j, FitStrategy::BestFit).unwrap();
    assert_eq!(together[0].node, together[1].node);
    j.constraints.distinct_nodes = true;
    for s in [
        FitStrategy::FirstFit,
        FitStrategy::BestFit,
        FitStrategy::WorstFit,
    ] {
        let apart = state.find_job_placement(&j, s).unwrap();
        assert_ne!(apart[0].node, apart[1].node, "{s:?}");
    }
    // Given co-located by hand, the placement is refused and nothing is taken.
    let err = state.allocate(&j, together).unwrap_err();
    assert!(err.to_string().contains("distinct nodes"), "{err}");
    assert_eq!(state.allocated_gpu_milli(), 0);
}
