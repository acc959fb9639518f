//! End to end: the heterogeneity-aware parts (`fastest`, `het-las`) in the simulator with
//! Gavel's throughput table, and the heterogeneity metrics they move.

use crate::cluster::load_cluster;
use crate::job::tests::job;
use crate::job::{JobSpec, TaskRequest, Trace, WorkloadType};
use crate::policy::build_policy;
use crate::sim::{SimConfig, SimResult, Simulator};
use crate::throughput::{WorkloadRule, assign_workloads};
use crate::units::SimTime;
use std::sync::Arc;

const RESNET18: &str = "ResNet-18 (batch size 16)";
const RECOMMENDATION: &str = "Recommendation (batch size 512)";

fn typed(name: &str, gpus: u32, workload: &str) -> JobSpec {
    let mut j = job(name, 0, TaskRequest::whole(gpus, 0, 0));
    j.workload = WorkloadType::new(workload);
    j
}

fn run(t: &Trace, cluster: &str, policy: &str, cfg: &SimConfig) -> SimResult {
    let mut p = build_policy(policy, cfg.seed).expect("registered");
    Simulator::new(t, Arc::new(load_cluster(cluster).expect("cluster")), cfg)
        .expect("valid run")
        .run(p.as_mut(), &mut |_| {})
}

fn gavel() -> SimConfig {
    SimConfig {
        throughputs: Some("gavel".into()),
        ..SimConfig::default()
    }
}

#[test]
fn fastest_swaps_two_jobs_onto_their_best_models() {
    // One K80 node and one V100 node of 1 GPU. ResNet-18 bs16 runs 6.75x faster on the V100;
    // Recommendation bs512 1.41x faster on the K80 (32.859 / 23.318 steps/s). Best fit puts
    // the first job (ResNet) on the first node, the K80, and Recommendation on the V100;
    // `fastest` swaps them: every GPU-second on the job's fastest model.
    let t = Trace::new(
        "two",
        vec![
            typed("resnet", 1, RESNET18),
            typed("rec", 1, RECOMMENDATION),
        ],
        vec![SimTime::from_secs(1000), SimTime::from_secs(1000)],
        vec!["default".into()],
    )
    .expect("valid trace");
    let cluster = "1x1:K80+1x1:V100";
    let fit = run(&t, cluster, "fifo/best-fit", &gavel()).summary;
    let fast = run(&t, cluster, "fifo/fastest", &gavel()).summary;
    assert_eq!(fit.fastest_gpu_share, Some(0.0));
    assert_eq!(fast.fastest_gpu_share, Some(1.0));
    // Work: 2 x 1000 reference GPU-s. Fastest: ResNet 1000 s on the V100, Recommendation
    // 1000 / 1.40919 = 709.6 s on the K80: 2000 / 1709.6 = 1.17 per allocated GPU-s.
    let effective = fast.effective_throughput.expect("typed run");
    let rec_s = (1e6_f64 / (32.859303327562166 / 23.317634950657975)).ceil() / 1000.0;
    assert!(
        (effective - 2000.0 / (1000.0 + rec_s)).abs() < 1e-3,
        "{effective}"
    );
    assert!(fit.effective_throughput.expect("typed run") < 0.5);
    // The bound is the same for both and reached by `fastest` (nobody waits).
    assert_eq!(fit.min_avg_jct_s, fast.min_avg_jct_s);
    assert_eq!(fast.avg_jct_s, fast.min_avg_jct_s);
    assert!(fit.avg_jct_s > 3.0 * fast.avg_jct_s);
    // Untyped summaries carry neither metric, in the struct or in JSON.
    let untyped = run(&t, cluster, "fifo/best-fit", &SimConfig::default()).summary;
    assert_eq!(untyped.effective_throughput, None);
    let json = serde_json::to_string(&untyped).expect("serializable");
    assert!(!json.contains("effective_throughput") && !json.contains("fastest_gpu_share"));
}

#[test]
fn heterogeneity_aware_policies_finish_a_typed_trace_on_gavels_cluster() {
    // 80 jobs of 1, 2, 4 and 8 GPUs (Gavel's shapes) arriving every 60 s, 10 min to 3 h,
    // typed by Gavel's rule, on the `gavel` preset with preemption: every job finishes and
    // no placement is refused for a zero rate.
    let sizes = [1, 1, 2, 1, 4, 1, 8, 2];
    let (jobs, durations): (Vec<JobSpec>, Vec<SimTime>) = (0..80u64)
        .map(|i| {
            let mut j = job(
                &format!("j{i}"),
                i * 60,
                TaskRequest::whole(sizes[i as usize % sizes.len()], 0, 0),
            );
            j.id = crate::units::JobId(i as u32);
            (j, SimTime::from_secs(600 + (i * 7919) % 10_200))
        })
        .unzip();
    let base = Trace::new("sizes", jobs, durations, vec!["default".into()]).expect("valid");
    let (t, _) = assign_workloads(&base, WorkloadRule::Gavel, 5);
    let cfg = SimConfig {
        tick_s: 300.0,
        ..gavel()
    };
    for policy in [
        "het-las/fastest",
        "het-las/fastest/las-preempt",
        "tiresias/fastest/las-preempt",
        "fifo/fastest",
    ] {
        let s = run(&t, "gavel", policy, &cfg).summary;
        assert_eq!(s.finished, s.jobs, "{policy}");
        assert_eq!(s.rejected_decisions, 0, "{policy}");
        let share = s.fastest_gpu_share.expect("typed run");
        assert!((0.0..=1.0).contains(&share), "{policy}: {share}");
        assert!(s.avg_jct_s >= s.min_avg_jct_s, "{policy}");
    }
}

#[test]
fn untyped_runs_of_the_new_parts_are_the_old_ones_exactly() {
    // Without workload types (with or without a table), `fastest` is best fit and `het-las`
    // is tiresias: the same summaries but for the policy's name and wall time.
    let shape = "4x8:V100+2x8:K80";
    let spec = load_cluster(shape).expect("shape");
    let t = crate::trace::synthetic::synthetic_trace(150, &spec, 1.1, 9);
    let plain = SimConfig {
        tick_s: 600.0,
        ..SimConfig::default()
    };
    let with_table = SimConfig {
        throughputs: Some("gavel".into()),
        ..plain.clone()
    };
    for (new, old) in [
        ("fifo/fastest", "fifo/best-fit"),
        ("het-las/best-fit", "tiresias/best-fit"),
        (
            "het-las/fastest/las-preempt",
            "tiresias/best-fit/las-preempt",
        ),
    ] {
        for cfg in [&plain, &with_table] {
            let mut a = run(&t, shape, new, cfg).summary;
            let b = run(&t, shape, old, cfg).summary;
            a.policy = b.policy.clone();
            a.wall_s = b.wall_s;
            assert_eq!(a, b, "{new} vs {old}");
            assert_eq!(a.effective_throughput, None);
        }
    }
}

#[test]
fn heuristics_start_a_typed_gang_on_one_node_where_the_table_rates_it_only_there() {
    // Two 4-GPU K80 nodes. An untyped 2-GPU job holds half of node 0 (best fit fills the
    // first node); then a ResNet-50 job of four 1-GPU tasks arrives. Task by task, best and
    // first fit put two tasks beside it and two on node 1: a spread placement Gavel's table
    // does not rate, which the simulator refuses. The placer tries the job again as one gang
    // and starts it on node 1 at once; without that it would wait, refused at every
    // decision, until the first job ends.
    let t = crate::job::tests::gang_beside_a_blocker();
    for policy in [
        "fifo/best-fit",
        "fifo/first-fit",
        "gittins/best-fit/gittins-preempt",
        "fifo/fastest",
    ] {
        let r = run(&t, "2x4:K80", policy, &gavel());
        assert_eq!(r.summary.rejected_decisions, 0, "{policy}");
        assert_eq!(
            r.jobs[1].first_start,
            Some(SimTime::from_secs(1)),
            "{policy}: the gang starts on node 1 as it arrives"
        );
        assert_eq!(r.summary.finished, 2, "{policy}");
    }
}
