//! A simple synthetic workload for benchmarks and tests: seeded, with ITP-like gang sizes and
//! heavy-tailed durations, arriving as a Poisson process at a target offered load.
//!
//! Not a fitted model of any trace (that is `trace fit`'s job): sizes 1/2/4/8/16/32 GPUs with
//! probabilities 0.70/0.10/0.09/0.07/0.03/0.01 (above 8, gangs of 8-GPU tasks); a tenth of the
//! 1-GPU jobs share a GPU (250 or 500 milli); durations log-uniform in 1 minute .. 2 days;
//! 4 cores and 16 GiB per GPU.

use crate::cluster::ClusterSpec;
use crate::job::{JobKind, JobSpec, Qos, TaskRequest, Trace};
use crate::units::{JobId, SimTime, TenantId};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

const SIZES: &[(u32, f64)] = &[
    (1, 0.70),
    (2, 0.10),
    (4, 0.09),
    (8, 0.07),
    (16, 0.03),
    (32, 0.01),
];
const MIN_DURATION_S: f64 = 60.0;
const MAX_DURATION_S: f64 = 2.0 * 86_400.0;

/// `jobs` synthetic jobs whose offered load on `cluster` is `load` (GPU clusters only).
pub fn synthetic_trace(jobs: usize, cluster: &ClusterSpec, load: f64, seed: u64) -> Trace {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut specs = Vec::with_capacity(jobs);
    let mut durations = Vec::with_capacity(jobs);
    let mut work = 0.0;
    for i in 0..jobs {
        let mut u: f64 = rng.random();
        let gpus = SIZES
            .iter()
            .find(|(_, p)| {
                u -= p;
                u < 0.0
            })
            .map_or(1, |(g, _)| *g);
        let (tasks, per_task) = if gpus > 8 { (gpus / 8, 8) } else { (1, gpus) };
        let milli = if gpus == 1 && rng.random_range(0..10) == 0 {
            [250, 500][rng.random_range(0..2)]
        } else {
            1000
        };
        let task = TaskRequest {
            gpus: per_task,
            gpu_milli: milli,
            cpu_milli: 4000 * u64::from(per_task),
            mem_mib: 16_384 * u64::from(per_task),
        };
        let secs = (MIN_DURATION_S.ln()
            + rng.random::<f64>() * (MAX_DURATION_S / MIN_DURATION_S).ln())
        .exp();
        let duration = SimTime::from_secs_f64(secs).expect("durations are finite and positive");
        work += f64::from(tasks) * task.gpu_milli_total() as f64 * duration.ms() as f64;
        durations.push(duration);
        specs.push(JobSpec {
            id: JobId(i as u32),
            name: format!("syn-{i:07}"),
            submit: SimTime::ZERO,
            tasks,
            task,
            gpu_types: Vec::new(),
            tenant: TenantId(0),
            priority: 0,
            qos: Qos::LatencySensitive,
            preemptible: true,
            kind: JobKind::Training,
            estimate: None,
            workload: None,
            constraints: Default::default(),
            elastic: None,
        });
    }
    // Poisson arrivals whose span makes work / (capacity x span) = load.
    let capacity = cluster.total_gpu_milli().max(1) as f64;
    let mean_gap_ms = work / (capacity * load.max(1e-9)) / jobs.max(1) as f64;
    let mut t = 0.0;
    for s in &mut specs {
        s.submit = SimTime(t as u64);
        t += -mean_gap_ms * (1.0 - rng.random::<f64>()).ln();
    }
    Trace::new(
        format!("synthetic-{jobs}-seed{seed}"),
        specs,
        durations,
        vec!["default".into()],
    )
    .expect("synthetic jobs are valid")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::load_cluster;

    #[test]
    fn hits_the_target_load_and_repeats_by_seed() {
        let cluster = load_cluster("16x8:V100").unwrap();
        let t = synthetic_trace(5000, &cluster, 0.8, 7);
        let load = t.offered_load(&cluster);
        assert!((load - 0.8).abs() < 0.05, "offered load {load}");
        assert_eq!(t, synthetic_trace(5000, &cluster, 0.8, 7));
        assert_ne!(t, synthetic_trace(5000, &cluster, 0.8, 8));
    }
}
