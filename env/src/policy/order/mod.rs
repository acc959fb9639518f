//! The baseline orderings (issue 4): which pending job to try next. Each is a small struct
//! around a pure scoring function, registered by name in `registry.rs`.
//!
//! | name | scorer | on a job that does not fit |
//! |---|---|---|
//! | `priority` | QoS class, then priority, then submit | skip |
//! | `sjf`, `srtf` | estimate or learned prediction (remaining for SRTF) | skip |
//! | `sjf-oracle`, `srtf-oracle` | true durations: upper bounds, not schedulers | skip |
//! | `wfp3`, `unicep`, `f1` | the HPC priority functions RL schedulers compare with | block |
//! | `tiresias` | discretized 2D-LAS on attained GPU service | skip |
//! | `het-las` | `tiresias` on throughput-normalised GPU service (work at the job's best speed) | skip |
//! | `drf` | tenants' dominant resource share | skip |
//! | `gittins` | Gittins index of attained service over learned run times, per GPU | skip |
//!
//! Blocking: the HPC functions come from batch schedulers where the chosen job waits for its
//! resources and only backfilling (the `easy` modifier) starts others; RLScheduler (Zhang et
//! al., SC'20) evaluates them that way, so they block. The GPU-cluster orderings (priority
//! queues as in Kubernetes, SJF/SRTF and Tiresias as their papers simulate them, DRF's
//! progressive filling) are greedy list schedulers: a job that does not fit is skipped and the
//! next one is tried.
//!
//! No ordering here reads a job's true duration except the `-oracle` ones, which are built only
//! from `PolicyOptions::oracle_durations`.

mod drf;
mod gittins;
mod het_las;
mod hpc;
mod predictor;
mod priority;
mod shortest;
mod tiresias;

pub use drf::{Drf, dominant_share};
pub use gittins::{Atoms, GPU_CLASSES, Gittins, GittinsConfig, GittinsEstimator, gpu_class};
pub use het_las::{HetLas, normalised_service};
pub use hpc::{HpcFunction, HpcPriority, f1_score, unicep_score, wfp3_score};
pub use predictor::{DurationPredictor, Durations, PRIOR_DURATION};
pub use priority::{PriorityOrder, priority_key};
pub use shortest::{Shortest, srtf_remaining};
pub use tiresias::{
    Tiresias, TiresiasConfig, attained_gpu_service, snapshot_queue, starved, tiresias_queue,
};

use super::context::DecisionContext;
use crate::job::JobSpec;
use crate::units::JobId;

/// A float score with a total order (`f64::total_cmp`), for sorting by scorers' outputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score(pub f64);

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Pending jobs sorted by `key`, smallest first; ties keep submit order (the sort is stable and
/// the context lists pending jobs in submit order).
fn sorted_by<'c, K: Ord>(
    ctx: &DecisionContext<'_>,
    mut key: impl FnMut(&super::PendingJob<'_>) -> K,
) -> Box<dyn Iterator<Item = JobId> + 'c> {
    let mut keyed: Vec<(K, JobId)> = ctx.pending().map(|p| (key(&p), p.spec.id)).collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    let ids: Vec<JobId> = keyed.into_iter().map(|(_, id)| id).collect();
    Box::new(ids.into_iter())
}

/// The job's size as the HPC functions count it (`n`, processors): GPUs requested (a fractional
/// GPU counts as one), or whole CPU cores, rounded up, for a CPU-only job; at least 1.
pub fn processors(job: &JobSpec) -> u64 {
    let gpus = job.gpus_total();
    if gpus > 0 {
        gpus
    } else {
        (job.tasks as u64 * job.task.cpu_milli)
            .div_ceil(1000)
            .max(1)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cluster::{ClusterSpec, ClusterState, FitStrategy};
    use crate::job::tests::job;
    use crate::job::{Qos, TaskRequest, Trace};
    use crate::policy::{DecisionContext, JobRuntime, JobState, PolicyOptions, build_policy_with};
    use crate::sim::{SimConfig, Simulator};
    use crate::units::{SimTime, TenantId};
    use std::cell::RefCell;
    use std::collections::BTreeSet;
    use std::sync::Arc;

    /// A hand-built world to ask orderings about: jobs (ids = positions), their runtime state,
    /// and a cluster.
    pub struct World {
        pub jobs: Vec<JobSpec>,
        pub runtime: Vec<JobRuntime>,
        pub pending: BTreeSet<JobId>,
        pub cluster: RefCell<ClusterState>,
        pub finished: Vec<JobId>,
    }

    impl World {
        /// Every job pending, on `spec`.
        pub fn new(mut jobs: Vec<JobSpec>, spec: ClusterSpec) -> World {
            for (i, j) in jobs.iter_mut().enumerate() {
                j.id = JobId(i as u32);
            }
            let runtime = vec![
                JobRuntime {
                    state: JobState::Pending,
                    ..JobRuntime::default()
                };
                jobs.len()
            ];
            let pending = jobs.iter().map(|j| j.id).collect();
            World {
                jobs,
                runtime,
                pending,
                cluster: RefCell::new(ClusterState::new(Arc::new(spec))),
                finished: Vec::new(),
            }
        }
        pub fn ctx(&self, now_s: u64) -> DecisionContext<'_> {
            DecisionContext::new(
                SimTime::from_secs(now_s),
                &self.jobs,
                &self.runtime,
                &self.pending,
                &self.cluster,
            )
            .with_recently_finished(&self.finished)
        }
        /// Marks job `i` finished after running `ran_s` seconds (what the scheduler observes).
        pub fn finish(&mut self, i: u32, ran_s: u64) {
            let id = JobId(i);
            self.pending.remove(&id);
            let rt = &mut self.runtime[id.index()];
            rt.state = JobState::Finished;
            rt.attained_ms = ran_s * 1000;
            self.finished.push(id);
        }
        /// Starts job `i` for real on the cluster (best-fit), taking it out of the queue.
        pub fn start(&mut self, i: u32, now_s: u64) {
            let id = JobId(i);
            let job = &self.jobs[id.index()];
            let mut c = self.cluster.borrow_mut();
            let tasks = c
                .find_job_placement(job, FitStrategy::BestFit)
                .expect("test job fits");
            c.allocate(job, tasks).expect("placement just found");
            self.pending.remove(&id);
            let rt = &mut self.runtime[id.index()];
            rt.state = JobState::Running;
            rt.run_start = Some(SimTime::from_secs(now_s));
        }
    }

    /// A single-task job of `gpus` whole GPUs submitted at `submit_s`.
    pub fn gpu_job(submit_s: u64, gpus: u32) -> JobSpec {
        job("j", submit_s, TaskRequest::whole(gpus, 1000, 1024))
    }

    pub fn order_of(o: &mut dyn crate::policy::Ordering, w: &World, now_s: u64) -> Vec<u32> {
        let ctx = w.ctx(now_s);
        o.order(&ctx).map(|id| id.0).collect()
    }

    #[test]
    fn score_orders_floats_totally() {
        let mut v = [
            Score(2.0),
            Score(-1.0),
            Score(f64::NEG_INFINITY),
            Score(0.5),
        ];
        v.sort();
        assert_eq!(v.map(|s| s.0), [f64::NEG_INFINITY, -1.0, 0.5, 2.0]);
    }

    #[test]
    fn processors_count_gpus_else_cores() {
        // 2 tasks x 4 GPUs = 8; a fractional GPU counts as 1; CPU-only 3 x 1.5 cores = 4.5 -> 5.
        let mut j = gpu_job(0, 4);
        j.tasks = 2;
        assert_eq!(processors(&j), 8);
        let frac = job(
            "f",
            0,
            TaskRequest {
                gpus: 1,
                gpu_milli: 250,
                cpu_milli: 0,
                mem_mib: 0,
            },
        );
        assert_eq!(processors(&frac), 1);
        let mut cpu = job("c", 0, TaskRequest::whole(0, 1500, 0));
        cpu.tasks = 3;
        assert_eq!(processors(&cpu), 5);
    }

    const NEW_ORDERINGS: [&str; 10] = [
        "priority",
        "sjf",
        "srtf",
        "sjf-oracle",
        "srtf-oracle",
        "wfp3",
        "unicep",
        "f1",
        "tiresias",
        "drf",
    ];

    /// A synthetic trace with three tenants, mixed QoS and priorities, and user estimates
    /// (twice the true duration) on every third job, so every scorer's inputs vary.
    fn varied_trace(cluster: &ClusterSpec) -> Trace {
        let base = crate::trace::synthetic::synthetic_trace(60, cluster, 0.9, 7);
        let qos = [
            Qos::Guaranteed,
            Qos::LatencySensitive,
            Qos::Burstable,
            Qos::BestEffort,
        ];
        let (jobs, durations): (Vec<_>, Vec<_>) = base
            .jobs()
            .iter()
            .map(|j| {
                let i = j.id.index();
                let d = base.true_duration(j.id);
                let mut j = j.clone();
                j.tenant = TenantId((i % 3) as u32);
                j.qos = qos[i % 4];
                j.priority = (i % 5) as i32;
                j.estimate = (i % 3 == 0).then(|| SimTime(d.ms() * 2));
                (j, d)
            })
            .unzip();
        let tenants = vec!["a".into(), "b".into(), "c".into()];
        Trace::new("varied", jobs, durations, tenants).expect("a relabelled valid trace")
    }

    #[test]
    fn every_new_ordering_finishes_a_synthetic_trace_with_best_fit() {
        let spec = crate::cluster::load_cluster("8x8:V100").expect("preset");
        let t = varied_trace(&spec);
        let truth: Arc<[SimTime]> = t.jobs().iter().map(|j| t.true_duration(j.id)).collect();
        let options = PolicyOptions {
            seed: 3,
            oracle_durations: Some(truth),
            ..PolicyOptions::default()
        };
        let spec = Arc::new(spec);
        for name in NEW_ORDERINGS {
            let policy_name = format!("{name}/best-fit");
            let mut p = build_policy_with(&policy_name, &options).expect("registered");
            assert_eq!(p.name(), policy_name);
            let cfg = SimConfig {
                tick_s: 600.0,
                ..SimConfig::default()
            };
            let mut sim = Simulator::new(&t, spec.clone(), &cfg).expect("valid run");
            while sim.advance() {
                let d = p.decide(&sim.context()).expect("heuristics decide");
                sim.apply(&d);
                sim.cluster().check_invariants().expect("capacity holds");
            }
            let r = sim.finish(p.name(), 0.0);
            assert_eq!(r.summary.finished, r.summary.jobs, "{policy_name}");
            assert_eq!(r.summary.jobs, 60, "{policy_name}");
            assert_eq!(r.summary.rejected_decisions, 0, "{policy_name}");
        }
    }

    #[test]
    fn oracle_orderings_refuse_to_build_without_durations() {
        for name in ["sjf-oracle/best-fit", "srtf-oracle/best-fit"] {
            let err = build_policy_with(name, &PolicyOptions::default())
                .err()
                .expect("no durations, no oracle")
                .to_string();
            assert!(err.contains("needs true durations"), "{err}");
        }
    }
}
