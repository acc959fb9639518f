//! End to end: every placement of this module under `fifo` through the simulator, on a
//! synthetic trace with gangs and shares and on the openb excerpt, with the cluster's books
//! checked after every decision.

use crate::cluster::{ClusterSpec, load_cluster};
use crate::job::Trace;
use crate::policy::build_policy;
use crate::sim::{SimConfig, Simulator};
use crate::trace::read_trace;
use crate::trace::synthetic::synthetic_trace;
use std::sync::Arc;

/// The placements this module adds to the registry.
const PLACEMENTS: [&str; 7] = [
    "most-allocated",
    "dot-product",
    "gpu-packing",
    "gpu-clustering",
    "random-fit",
    "fgd",
    "topo",
];

/// Runs `fifo/PLACE` to the end, checking invariants after every decision; every job must
/// finish and no decision may be rejected.
fn run_checked(trace: &Trace, spec: &ClusterSpec, place: &str) {
    let name = format!("fifo/{place}");
    let cfg = SimConfig {
        seed: 3,
        ..SimConfig::default()
    };
    let mut policy = build_policy(&name, cfg.seed).unwrap();
    let mut sim = Simulator::new(trace, Arc::new(spec.clone()), &cfg).unwrap();
    while sim.advance() {
        let d = policy.decide(&sim.context()).unwrap();
        sim.apply(&d);
        sim.cluster()
            .check_invariants()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let s = sim.finish(&name, 0.0).summary;
    assert_eq!(s.finished, s.jobs, "{name}: not every job finished");
    assert_eq!(s.rejected_decisions, 0, "{name}: rejected decisions");
    assert!(s.gpu_alloc_rate > 0.0 && s.frag_gpu_rate >= 0.0, "{name}");
}

#[test]
fn every_placement_runs_a_synthetic_trace_to_the_end() {
    let spec = load_cluster("8x8:V100").unwrap();
    let trace = synthetic_trace(150, &spec, 0.9, 11);
    assert!(trace.jobs().iter().any(|j| j.tasks > 1), "no gang to place");
    for place in PLACEMENTS {
        run_checked(&trace, &spec, place);
    }
}

#[test]
fn every_placement_runs_the_openb_excerpt_to_the_end() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../traces/openb/openb_pod_excerpt.csv");
    let trace = read_trace(&path, None).unwrap().trace;
    let spec = load_cluster("openb").unwrap();
    for place in PLACEMENTS {
        run_checked(&trace, &spec, place);
    }
}
