//! End to end: Gavel's round-based policies in the simulator with Gavel's table and cluster.

use super::gavel::{GavelConfig, GavelObjective, GavelRounds};
use crate::cluster::load_cluster;
use crate::job::tests::job;
use crate::job::{JobSpec, TaskRequest, Trace, WorkloadType};
use crate::policy::{Policy, build_policy};
use crate::sim::{SimConfig, Simulator};
use crate::throughput::{WorkloadRule, assign_workloads};
use crate::units::{JobId, SimTime};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Gavel's setting: rounds of 6 minutes, and a job preempted at a round's end keeps its
/// work (Gavel's leases end with a checkpoint; here: one every second).
fn gavel_cfg() -> SimConfig {
    SimConfig {
        throughputs: Some("gavel".into()),
        tick_s: 360.0,
        checkpoint_interval_s: 1.0,
        ..SimConfig::default()
    }
}

/// 80 jobs of Gavel's shapes (1, 2, 4, 8 GPUs) every 60 s, 10 min to 3 h, typed by Gavel's
/// rule.
fn typed_trace() -> Trace {
    let sizes = [1, 1, 2, 1, 4, 1, 8, 2];
    let (jobs, durations): (Vec<JobSpec>, Vec<SimTime>) = (0..80u64)
        .map(|i| {
            let j = job(
                &format!("j{i}"),
                i * 60,
                TaskRequest::whole(sizes[i as usize % sizes.len()], 0, 0),
            );
            (j, SimTime::from_secs(600 + (i * 7919) % 10_200))
        })
        .unzip();
    let base = Trace::new("sizes", jobs, durations, vec!["default".into()]).expect("valid");
    assign_workloads(&base, WorkloadRule::Gavel, 5).0
}

#[test]
fn round_policies_finish_a_typed_trace_on_gavels_cluster() {
    let t = typed_trace();
    let spec = Arc::new(load_cluster("gavel").expect("preset"));
    let mut jct = Vec::new();
    for name in ["gavel-maxmin", "gavel-maxmin-agnostic", "gavel-maxsum"] {
        let mut p = build_policy(name, 0).expect("registered");
        let s = Simulator::new(&t, Arc::clone(&spec), &gavel_cfg())
            .expect("valid run")
            .run(p.as_mut(), &mut |_| {})
            .summary;
        assert_eq!(s.finished, s.jobs, "{name}");
        assert_eq!(s.rejected_decisions, 0, "{name}");
        assert_eq!(s.policy_errors, 0, "{name}");
        assert!(s.avg_jct_s >= s.min_avg_jct_s, "{name}");
        jct.push(s.avg_jct_s);
    }
    // Knowing the rates does not hurt here: aware max-min at most as slow as agnostic.
    assert!(jct[0] <= jct[1], "aware {} vs agnostic {}", jct[0], jct[1]);
}

#[test]
fn untyped_jobs_and_cpu_jobs_finish_too() {
    // No table: every job untyped, rated by catalog speed; plus a CPU-only job.
    // 16 GPUs per model: a 32-GPU job fits no single model and runs outside the rounds.
    let shape = "2x8:V100+2x8:K80";
    let spec = load_cluster(shape).expect("shape");
    let mut t = crate::trace::synthetic::synthetic_trace(60, &spec, 1.2, 3);
    let mut jobs = t.jobs().to_vec();
    let mut durations = t.true_durations().to_vec();
    jobs.push(job("cpu", 10, TaskRequest::whole(0, 1000, 1024)));
    durations.push(SimTime::from_secs(100));
    t = Trace::new("mixed", jobs, durations, vec!["default".into()]).expect("valid");
    let cfg = SimConfig {
        throughputs: None,
        ..gavel_cfg()
    };
    let mut p = build_policy("gavel-maxmin", 0).expect("registered");
    let s = Simulator::new(&t, Arc::new(spec), &cfg)
        .expect("valid run")
        .run(p.as_mut(), &mut |_| {})
        .summary;
    assert_eq!(s.finished, s.jobs);
    assert_eq!(s.rejected_decisions, 0);
}

/// Four long 1-GPU jobs on one V100 and one K80, round after round: the time each job
/// spends on each model, over the run, against the allocation.
fn measured_shares(objective: GavelObjective) -> (Vec<Vec<f64>>, Vec<Vec<f64>>) {
    let workloads = [
        "ResNet-18 (batch size 16)",       // 6.75x faster on V100
        "Recommendation (batch size 512)", // 1.41x faster on K80
        "Transformer (batch size 32)",
        "LM (batch size 5)",
    ];
    let jobs: Vec<JobSpec> = workloads
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let mut j = job(&format!("j{i}"), 0, TaskRequest::whole(1, 0, 0));
            j.workload = WorkloadType::new(w);
            j
        })
        .collect();
    let t = Trace::new(
        "long",
        jobs,
        vec![SimTime::from_secs(10_000_000); 4],
        vec!["default".into()],
    )
    .expect("valid");
    let spec = Arc::new(load_cluster("1x1:V100+1x1:K80").expect("shape"));
    let (v100, k80) = (
        spec.model_id("V100").expect("model").index(),
        spec.model_id("K80").expect("model").index(),
    );
    let cfg = SimConfig {
        restart_overhead_s: 0.0,
        checkpoint_interval_s: 1.0,
        ..gavel_cfg()
    };
    let mut policy = GavelRounds::new("gavel", objective, &GavelConfig::default()).expect("ok");
    let mut sim = Simulator::new(&t, Arc::clone(&spec), &cfg).expect("valid run");
    let mut on = vec![vec![0.0; 2]; 4];
    let mut last: Option<(SimTime, Vec<(usize, usize)>)> = None;
    let rounds = 400;
    for _ in 0..rounds {
        assert!(sim.advance(), "jobs keep waiting");
        let now = sim.now();
        if let Some((then, running)) = last.take() {
            for (job, col) in running {
                on[job][col] += now.saturating_sub(then).ms() as f64;
            }
        }
        let decision = policy.decide(&sim.context()).expect("decides");
        sim.apply(&decision);
        let cluster = sim.cluster();
        let running = cluster
            .running()
            .map(|a| {
                let model = spec.nodes[a.tasks[0].node.index()]
                    .gpu_model
                    .expect("GPU node");
                (a.job.index(), if model.index() == v100 { 0 } else { 1 })
            })
            .collect();
        drop(cluster);
        last = Some((now, running));
    }
    let total: f64 = on.iter().flatten().sum::<f64>() / 2.0;
    let measured = on
        .iter()
        .map(|row| row.iter().map(|ms| ms / total).collect())
        .collect();
    let allocated = (0..4)
        .map(|i| {
            let x = policy.allocation(JobId(i)).expect("allocated");
            vec![x[v100], x[k80]]
        })
        .collect();
    (measured, allocated)
}

#[test]
fn rounds_honour_the_allocation_over_many_rounds() {
    for objective in [
        GavelObjective::MaxMin,
        GavelObjective::MaxMinAgnostic,
        GavelObjective::MaxSum,
    ] {
        let (measured, allocated) = measured_shares(objective);
        for (m, (got, want)) in measured.iter().zip(&allocated).enumerate() {
            for j in 0..2 {
                assert!(
                    (got[j] - want[j]).abs() < 0.05,
                    "{objective:?} job {m} type {j}: measured {got:?}, allocated {want:?}"
                );
            }
        }
    }
    // The aware allocation sends ResNet-18 (job 0) mostly to the V100 and Recommendation
    // (job 1) mostly to the K80; the agnostic one does not look.
    let (_, aware) = measured_shares(GavelObjective::MaxMin);
    assert!(aware[0][0] > aware[0][1], "{aware:?}");
    assert!(aware[1][1] > aware[1][0], "{aware:?}");
}

#[test]
fn pop_rounds_finish_the_trace_close_to_the_exact_ones() {
    // POP with 4 sub-problems (a new split at every recomputation) on the typed trace: every
    // job finishes, nothing rejected, and the JCT stays near the exact LP's.
    let t = typed_trace();
    let spec = Arc::new(load_cluster("gavel").expect("preset"));
    let run = |pop_k: usize| {
        let config = GavelConfig {
            pop_k,
            ..GavelConfig::default()
        };
        let mut p =
            GavelRounds::new("gavel-maxmin", GavelObjective::MaxMin, &config).expect("valid knobs");
        Simulator::new(&t, Arc::clone(&spec), &gavel_cfg())
            .expect("valid run")
            .run(&mut p, &mut |_| {})
            .summary
    };
    let (exact, pop) = (run(1), run(4));
    assert_eq!(pop.finished, pop.jobs);
    assert_eq!(pop.rejected_decisions, 0);
    assert_eq!(pop.policy_errors, 0);
    let ratio = pop.avg_jct_s / exact.avg_jct_s;
    assert!(
        (0.8..1.25).contains(&ratio),
        "POP {pop:?} vs exact {exact:?}"
    );
    let zero = GavelConfig {
        pop_k: 0,
        ..GavelConfig::default()
    };
    let err = GavelRounds::new("g", GavelObjective::MaxMin, &zero).unwrap_err();
    assert!(err.contains("pop_k"), "{err}");
}

/// The share of its run time one long ResNet-18 job, alone on one V100 and one K80, spends
/// on the K80 under `gavel-maxmin-agnostic` with `config`.
fn lone_agnostic_k80_share(config: &GavelConfig) -> f64 {
    let mut j = job("j0", 0, TaskRequest::whole(1, 0, 0));
    j.workload = WorkloadType::new("ResNet-18 (batch size 16)");
    let t = Trace::new(
        "lone",
        vec![j],
        vec![SimTime::from_secs(2_000_000)],
        vec!["default".into()],
    )
    .expect("valid");
    let spec = Arc::new(load_cluster("1x1:V100+1x1:K80").expect("shape"));
    let k80 = spec.model_id("K80").expect("model").index();
    let cfg = SimConfig {
        restart_overhead_s: 0.0,
        ..gavel_cfg()
    };
    let mut policy =
        GavelRounds::new("agnostic", GavelObjective::MaxMinAgnostic, config).expect("ok");
    let mut sim = Simulator::new(&t, Arc::clone(&spec), &cfg).expect("valid run");
    if policy.acts_every_round() {
        sim.ask_every_round();
    }
    let (mut on_k80, mut rounds) = (0, 0);
    for _ in 0..300 {
        assert!(sim.advance(), "the job runs on");
        let decision = policy.decide(&sim.context()).expect("decides");
        sim.apply(&decision);
        let cluster = sim.cluster();
        for a in cluster.running() {
            let model = spec.nodes[a.tasks[0].node.index()].gpu_model;
            rounds += 1;
            on_k80 += usize::from(model.is_some_and(|m| m.index() == k80));
        }
    }
    on_k80 as f64 / rounds as f64
}

#[test]
fn the_agnostic_policy_sees_no_speed_when_models_are_shuffled() {
    // Agnostic, the allocation splits the lone job's time between the models. Rounds held
    // while nobody waits (as Gavel's simulator): served fastest first, the job is always
    // picked on the V100 (the order leaks speed); shuffled each round as in Gavel, it runs
    // where the draw puts it, about half the rounds on the K80.
    let every_round = GavelConfig {
        rounds_without_queue: true,
        shuffle_agnostic: false,
        ..GavelConfig::default()
    };
    let fastest = lone_agnostic_k80_share(&every_round);
    assert_eq!(fastest, 0.0);
    let shuffled = lone_agnostic_k80_share(&GavelConfig {
        shuffle_agnostic: true,
        ..every_round
    });
    assert!((0.3..0.7).contains(&shuffled), "{shuffled}");
}

#[test]
fn filling_unallocated_gpus_finishes_the_trace_and_uses_no_fewer_gpus() {
    let t = typed_trace();
    let spec = Arc::new(load_cluster("gavel").expect("preset"));
    let run = |fill_unallocated: bool| {
        let config = GavelConfig {
            fill_unallocated,
            shuffle_agnostic: true,
            ..GavelConfig::default()
        };
        let mut p = GavelRounds::new("g", GavelObjective::MaxMinAgnostic, &config).expect("ok");
        Simulator::new(&t, Arc::clone(&spec), &gavel_cfg())
            .expect("valid run")
            .run(&mut p, &mut |_| {})
            .summary
    };
    let (off, on) = (run(false), run(true));
    assert_eq!(on.finished, on.jobs);
    assert_eq!(on.rejected_decisions, 0);
    assert!(
        on.gpu_alloc_rate >= off.gpu_alloc_rate * 0.99,
        "{} < {}",
        on.gpu_alloc_rate,
        off.gpu_alloc_rate
    );
}

#[test]
fn oracle_rounds_need_durations_and_finish_the_trace() {
    use crate::policy::{PolicyOptions, build_policy_with};
    let t = typed_trace();
    let spec = Arc::new(load_cluster("gavel").expect("preset"));
    // Without true durations the oracles are refused, naming why.
    for name in ["gavel-ftf-oracle", "gavel-makespan-oracle"] {
        let err = build_policy(name, 0).map(|_| ()).unwrap_err();
        assert!(err.to_string().contains("true durations"), "{name}: {err}");
    }
    let options = PolicyOptions {
        oracle_durations: Some(t.true_durations().into()),
        ..PolicyOptions::default()
    };
    let run = |name: &str| {
        let mut p = build_policy_with(name, &options).expect("registered");
        assert_eq!(p.name(), name);
        Simulator::new(&t, Arc::clone(&spec), &gavel_cfg())
            .expect("valid run")
            .run(p.as_mut(), &mut |_| {})
            .summary
    };
    let maxmin = run("gavel-maxmin");
    for name in ["gavel-ftf-oracle", "gavel-makespan-oracle"] {
        let s = run(name);
        assert_eq!(s.finished, s.jobs, "{name}");
        assert_eq!(s.rejected_decisions, 0, "{name}");
        assert_eq!(s.policy_errors, 0, "{name}");
        if name == "gavel-makespan-oracle" {
            // Knowing the work left, it finishes the trace no later than max-min fairness.
            assert!(
                s.makespan_s <= maxmin.makespan_s * 1.01,
                "{} vs {}",
                s.makespan_s,
                maxmin.makespan_s
            );
        }
    }
}

/// Policy options with Gavel's table, for the `-ss` names.
fn options_with_table() -> crate::policy::PolicyOptions {
    crate::policy::PolicyOptions {
        throughputs: Some(Arc::new(
            crate::throughput::load_table("gavel").expect("preset"),
        )),
        ..crate::policy::PolicyOptions::default()
    }
}

#[test]
fn space_sharing_rounds_finish_a_typed_trace_and_share_gpus() {
    use crate::policy::build_policy_with;
    let t = typed_trace();
    let spec = Arc::new(load_cluster("gavel").expect("preset"));
    // Without a table the pair rates are unknown: refused, naming what is missing.
    let err = build_policy("gavel-maxmin-ss", 0).map(|_| ()).unwrap_err();
    assert!(err.to_string().contains("--throughputs"), "{err}");
    let options = options_with_table();
    for name in [
        "gavel-maxmin-ss",
        "gavel-maxmin-agnostic-ss",
        "gavel-maxsum-ss",
    ] {
        let mut p = build_policy_with(name, &options).expect("registered");
        let s = Simulator::new(&t, Arc::clone(&spec), &gavel_cfg())
            .expect("valid run")
            .run(p.as_mut(), &mut |_| {})
            .summary;
        assert_eq!(s.finished, s.jobs, "{name}");
        assert_eq!(s.rejected_decisions, 0, "{name}");
        assert_eq!(s.policy_errors, 0, "{name}");
        assert!(s.shares > 0, "{name}: no job shared a GPU");
    }
}

/// A job alone `(index, None)`, or a pair `(lower, Some(higher))`.
type Combo = (usize, Option<usize>);

/// Time of each combination per model (V100, K80), ms or a share.
type ComboTime = std::collections::BTreeMap<Combo, [f64; 2]>;

/// A combination running, and its model's column.
type Running = (Combo, usize);

/// Four long 1-GPU jobs that pack well on one V100 and one K80 under `objective` with space
/// sharing, round after round: each combination's share of the run's time on each model,
/// measured and allocated.
fn measured_combo_shares(objective: GavelObjective) -> (ComboTime, ComboTime) {
    let workloads = [
        "ResNet-18 (batch size 16)",
        "Recommendation (batch size 512)",
        "A3C",
        "LM (batch size 5)",
    ];
    let jobs: Vec<JobSpec> = workloads
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let mut j = job(&format!("j{i}"), 0, TaskRequest::whole(1, 0, 0));
            j.workload = WorkloadType::new(w);
            j
        })
        .collect();
    let t = Trace::new(
        "long",
        jobs,
        vec![SimTime::from_secs(10_000_000); 4],
        vec!["default".into()],
    )
    .expect("valid");
    let spec = Arc::new(load_cluster("1x1:V100+1x1:K80").expect("shape"));
    let v100 = spec.model_id("V100").expect("model").index();
    let col = |node: crate::units::NodeId| {
        let model = spec.nodes[node.index()].gpu_model.expect("GPU node");
        usize::from(model.index() != v100)
    };
    let cfg = SimConfig {
        restart_overhead_s: 0.0,
        ..gavel_cfg()
    };
    let mut policy = GavelRounds::new("gavel-ss", objective, &GavelConfig::default())
        .expect("ok")
        .with_space_sharing();
    let mut sim = Simulator::new(&t, Arc::clone(&spec), &cfg).expect("valid run");
    if policy.acts_every_round() {
        sim.ask_every_round();
    }
    let mut measured = ComboTime::new();
    // Since when, and each combination running with its model's column.
    let mut last: Option<(SimTime, Vec<Running>)> = None;
    let mut wall = 0.0;
    for _ in 0..400 {
        assert!(sim.advance(), "jobs keep running");
        let now = sim.now();
        if let Some((then, running)) = last.take() {
            let dt = now.saturating_sub(then).ms() as f64;
            wall += dt;
            for (combo, c) in running {
                measured.entry(combo).or_default()[c] += dt;
            }
        }
        let decision = policy.decide(&sim.context()).expect("decides");
        sim.apply(&decision);
        let cluster = sim.cluster();
        let shared: Vec<(crate::units::NodeId, [JobId; 2])> =
            cluster.shared_gpus().map(|(n, _, p)| (n, p)).collect();
        let mut running: Vec<Running> = shared
            .iter()
            .map(|(n, [a, b])| {
                (
                    (a.index().min(b.index()), Some(a.index().max(b.index()))),
                    col(*n),
                )
            })
            .collect();
        for a in cluster.running() {
            if !shared.iter().any(|(_, p)| p.contains(&a.job)) {
                running.push(((a.job.index(), None), col(a.tasks[0].node)));
            }
        }
        drop(cluster);
        last = Some((now, running));
    }
    measured
        .values_mut()
        .for_each(|row| row.iter_mut().for_each(|ms| *ms /= wall));
    let ids = (0..4).map(JobId);
    let mut allocated = ComboTime::new();
    let both = |x: &[f64]| [x[v100], x[1 - v100]];
    for a in ids.clone() {
        allocated.insert(
            (a.index(), None),
            both(policy.allocation(a).expect("allocated")),
        );
        for b in ids.clone().filter(|b| *b > a) {
            if let Some(y) = policy.pair_allocation(a, b) {
                allocated.insert((a.index(), Some(b.index())), both(y));
            }
        }
    }
    (measured, allocated)
}

#[test]
fn space_sharing_rounds_honour_the_pair_allocation_over_many_rounds() {
    for objective in [
        GavelObjective::MaxMin,
        GavelObjective::MaxMinAgnostic,
        GavelObjective::MaxSum,
    ] {
        let (measured, allocated) = measured_combo_shares(objective);
        // The LP packs some pair, and the rounds run it.
        assert!(
            allocated
                .iter()
                .any(|(c, y)| c.1.is_some() && y[0] + y[1] > 0.1),
            "{objective:?}: no pair packed: {allocated:?}"
        );
        let keys: BTreeSet<_> = measured.keys().chain(allocated.keys()).copied().collect();
        for c in keys {
            let got = measured.get(&c).copied().unwrap_or_default();
            let want = allocated.get(&c).copied().unwrap_or_default();
            for j in 0..2 {
                assert!(
                    (got[j] - want[j]).abs() < 0.05,
                    "{objective:?} {c:?} model {j}: measured {got:?}, allocated {want:?}\n\
                     measured {measured:?}\nallocated {allocated:?}"
                );
            }
        }
    }
}
