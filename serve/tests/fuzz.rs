//! Fuzzing the request validation: snapshots mutated at random (extreme numbers, empty and
//! duplicate names, indices out of range, inconsistent free capacity) and arbitrary bytes
//! decoded as a snapshot never panic; whatever validates can be decided on by the baseline,
//! passes the shield, applies, and gets a reason for every job left pending. Session deltas
//! likewise: a mutated delta either applies, leaving a consistent world that can be decided
//! on, or is refused naming a `delta.` field and leaves the world exactly as it was.

#![allow(clippy::unwrap_used)]

use lachesis_env::policy::build_policy;
use lachesis_serve::world::{DeltaError, World};
use lachesis_serve::{proto, reasons, shield, synthetic};
use proptest::prelude::*;

const EXTREMES: [u64; 6] = [0, 1, 999, 1000, u32::MAX as u64, u64::MAX];

fn mutate(s: &mut proto::Snapshot, op: u8, i: usize, v: u64) {
    let n = s.nodes.len().max(1);
    let r = s.running.len().max(1);
    let p = s.pending.len().max(1);
    let v32 = v.min(u64::from(u32::MAX)) as u32;
    match op % 16 {
        0 => s.nodes[i % n].gpus = v32,
        1 => s.nodes[i % n].gpu_free_milli = vec![v32; i % 10],
        2 => s.nodes[i % n].cpu_free_milli = Some(v),
        3 => s.nodes[i % n].mem_mib = v,
        4 => {
            s.nodes[i % n].name = if v.is_multiple_of(2) {
                String::new()
            } else {
                s.nodes[0].name.clone()
            }
        }
        5 => s.nodes[i % n].gpu_model = "x".repeat((v % 300) as usize),
        6 => {
            if let Some(t) = s.running.get_mut(i % r).and_then(|j| j.tasks.first_mut()) {
                t.gpus.push(v32);
            }
        }
        7 => {
            if let Some(t) = s.running.get_mut(i % r).and_then(|j| j.tasks.first_mut()) {
                t.node = format!("node-{:05}", v % 40);
            }
        }
        8 => {
            if let Some(j) = s.running.get_mut(i % r) {
                j.run_ms = v;
            }
        }
        9 => {
            if let Some(j) = s.pending.get_mut(i % p) {
                j.tasks = v32;
            }
        }
        10 => {
            if let Some(j) = s.pending.get_mut(i % p) {
                j.gpus_per_task = v32;
            }
        }
        11 => {
            if let Some(j) = s.pending.get_mut(i % p) {
                j.gpu_milli = v32;
            }
        }
        12 => {
            if let Some(j) = s.pending.get_mut(i % p) {
                j.wait_ms = v;
                j.estimate_ms = Some(v);
            }
        }
        13 => {
            if let Some(j) = s.pending.get_mut(i % p) {
                j.cpu_milli = v;
                j.mem_mib = v;
            }
        }
        14 => {
            if let Some(j) = s.pending.get_mut(i % p) {
                j.qos = ["", "be", "guaranteed", "??"][(v % 4) as usize].into();
                j.kind = ["", "batch", "nope"][(v % 3) as usize].into();
            }
        }
        _ => s.now_ms = v,
    }
}

/// What the service does with a snapshot that validated, minus the network.
fn decide_all_the_way(world: &mut World) {
    let mut policy = build_policy("tiresias/best-fit/las-preempt", 0).unwrap();
    let decision = policy.decide(&world.context()).unwrap();
    shield::check(world, &decision).unwrap();
    world.apply(&decision).unwrap();
    let reasons = reasons::pending_reasons(world, &decision);
    let left = world.pending().filter(|j| world.is_real(*j)).count();
    assert_eq!(reasons.len(), left);
}

/// Mutates one field of a delta (the ids it names, the clock, a submitted job).
fn mutate_delta(d: &mut proto::SnapshotDelta, names: &[String], op: u8, i: usize, v: u64) {
    let v32 = v.min(u64::from(u32::MAX)) as u32;
    let name = || {
        if names.is_empty() || v.is_multiple_of(5) {
            format!("ghost-{v}")
        } else {
            names[i % names.len()].clone()
        }
    };
    let s = d.submitted.len().max(1);
    match op % 10 {
        0 => d.now_ms = v,
        1 => d.finished.push(name()),
        2 => d.requeued.push(name()),
        3 => {
            let n = name();
            d.finished.push(n.clone());
            d.requeued.push(n);
        }
        4 => {
            if let Some(j) = d.submitted.get_mut(i % s) {
                j.wait_ms = v;
                j.idle_ms = Some(v / 2 + (i as u64));
            }
        }
        5 => {
            if let Some(j) = d.submitted.get_mut(i % s) {
                j.gpus_per_task = v32;
                j.tasks = (v % 7) as u32;
            }
        }
        6 => {
            if let Some(j) = d.submitted.get_mut(i % s) {
                j.gpu_milli = v32;
                j.gpu_types = vec!["A100".into(), "x".repeat((v % 300) as usize)];
            }
        }
        7 => {
            if let Some(j) = d.submitted.get_mut(i % s) {
                j.id = name();
            }
        }
        8 => {
            if let Some(j) = d.submitted.first().cloned() {
                d.submitted.push(j);
            }
        }
        _ => d.revision = v,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn mutated_snapshots_never_panic(
        seed in 0u64..1000,
        ops in prop::collection::vec((any::<u8>(), 0usize..64, 0usize..EXTREMES.len(), any::<u64>()), 1..6),
    ) {
        let mut s = synthetic::snapshot(12, 6, 0.6, seed);
        for (op, i, e, raw) in ops {
            let v = if raw.is_multiple_of(3) { raw } else { EXTREMES[e] };
            mutate(&mut s, op, i, v);
        }
        match World::build(&s) {
            Ok(mut world) => decide_all_the_way(&mut world),
            Err(e) => {
                prop_assert!(e.path.starts_with("snapshot."), "{e}");
                prop_assert!(!e.message.is_empty());
            }
        }
    }

    #[test]
    fn mutated_deltas_apply_whole_or_not_at_all(
        seed in 0u64..1000,
        rounds in 1usize..4,
        ops in prop::collection::vec((any::<u8>(), 0usize..64, 0usize..EXTREMES.len(), any::<u64>()), 0..6),
    ) {
        let s = synthetic::snapshot(12, 6, 0.6, seed);
        let mut world = World::build(&s).unwrap();
        let mut driver = synthetic::SessionDriver::new(&s, 6, 10_000, seed);
        let names: Vec<String> = s
            .running
            .iter()
            .filter_map(|r| r.job.as_ref().map(|j| j.id.clone()))
            .chain(s.pending.iter().map(|j| j.id.clone()))
            .collect();
        for round in 0..rounds {
            let mut policy = build_policy("tiresias/best-fit/las-preempt", 0).unwrap();
            let decision = policy.decide(&world.context()).unwrap();
            shield::check(&world, &decision).unwrap();
            let answer = proto::DecideResponse {
                placements: decision
                    .placements
                    .iter()
                    .map(|p| world.placement_to_proto(p))
                    .collect(),
                preemptions: decision
                    .preemptions
                    .iter()
                    .map(|v| world.job(*v).name.clone())
                    .collect(),
                ..Default::default()
            };
            world.apply(&decision).unwrap();
            driver.answered(&answer);
            let mut delta = driver.delta();
            if round + 1 == rounds {
                for (op, i, e, raw) in &ops {
                    let v = if raw.is_multiple_of(3) { *raw } else { EXTREMES[*e] };
                    mutate_delta(&mut delta, &names, *op, *i, v);
                }
            }
            let before = world.export(&s.nodes, String::new());
            match world.apply_delta(&delta) {
                Ok(()) => {
                    world.cluster().check_invariants().map_err(TestCaseError::fail)?;
                    decide_all_the_way(&mut world);
                }
                Err(DeltaError::Invalid(e)) => {
                    prop_assert!(e.path.starts_with("delta."), "{e}");
                    prop_assert!(!e.message.is_empty());
                    prop_assert_eq!(world.export(&s.nodes, String::new()), before);
                    break;
                }
                Err(e) => prop_assert!(false, "a checked delta broke the world: {e}"),
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(s) = <proto::Snapshot as prost::Message>::decode(bytes.as_slice())
            && let Ok(mut world) = World::build(&s)
        {
            decide_all_the_way(&mut world);
        }
    }
}

#[test]
fn unmutated_synthetic_snapshots_validate() {
    for seed in 0..20 {
        let s = synthetic::snapshot(12, 6, 0.6, seed);
        let mut world = World::build(&s).unwrap();
        decide_all_the_way(&mut world);
    }
}
