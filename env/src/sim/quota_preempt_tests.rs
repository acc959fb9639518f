//! Kueue's preemption in the simulator (`[queue.preemption]`): reclaim gives a lending queue
//! its guarantee back at the decision its job arrives, victims keep their checkpoint and
//! are counted, nothing loops, and the quota metrics say so.

use super::quota_tests::{StartEverything, trace};
use super::*;
use crate::cluster::tests::uniform;
use crate::job::Trace;
use crate::policy::{Policy, StarvationBound, build_policy};
use crate::units::SimTime;
use proptest::prelude::*;
use std::sync::Arc;

/// Queues `a` and `b` in one cohort, 4 V100 GPUs nominal each (the whole 2x4 cluster), no
/// limits; each with the `[queue.preemption]` table `preemption` (empty: all Never).
fn quota_file(name: &str, preemption: &str) -> String {
    let queue = |q: &str| {
        format!(
            "[[queue]]\nname = \"{q}\"\ncohort = \"org\"\n\
             [[queue.quota]]\nflavor = \"V100\"\nresource = \"gpu\"\nnominal = 4\n\
             [queue.preemption]\n{preemption}\n"
        )
    };
    let text = format!("[[cohort]]\nname = \"org\"\n{}{}", queue("a"), queue("b"));
    let path = std::env::temp_dir().join(format!(
        "lachesis-quota-preempt-{}-{name}.toml",
        std::process::id()
    ));
    std::fs::write(&path, text).expect("the temp dir is writable");
    path.to_str().expect("temp paths are UTF-8").to_string()
}

fn run(t: &Trace, file: &str, policy: &mut dyn Policy) -> SimResult {
    let cfg = SimConfig {
        quotas: Some(file.to_string()),
        starvation_bound: StarvationBound::Off,
        ..SimConfig::default()
    };
    let spec = Arc::new(uniform(2, 4, "V100", 1000, 1000));
    Simulator::new(t, spec, &cfg)
        .expect("valid run")
        .run(policy, &mut |_| {})
}

/// `b` takes the whole cluster at 0 (two 4-GPU jobs of 10 h, one on `a`'s quota); `a`'s
/// 4-GPU job comes at 100 s.
fn borrower_then_owner() -> Trace {
    trace(&[(1, 0, 4, 36_000), (1, 0, 4, 36_000), (0, 100, 4, 600)])
}

#[test]
fn reclaim_gives_the_lender_its_quota_back_at_once() {
    let t = borrower_then_owner();
    let mut fifo = build_policy("fifo/best-fit", 0).expect("a library policy");
    // Kueue's default (Never): a waits 10 h for b's job to end, its guarantee broken all along.
    let never = run(&t, &quota_file("never", ""), fifo.as_mut());
    let m = never
        .summary
        .quota_metrics
        .clone()
        .expect("metrics with quotas");
    assert_eq!(never.jobs[2].first_start, Some(SimTime::from_secs(36_000)));
    assert_eq!(m.quota_preemptions, 0);
    // 100 s .. 10 h: a (below nominal, its job fits it) waits while b borrows 4 GPUs.
    assert!(
        (m.guarantee_violation_h - (36_000.0 - 100.0) / 3600.0).abs() < 1e-9,
        "{m:?}"
    );
    assert!(
        (m.borrowed_gpu_h - 4.0 * (36_000.0 - 0.0) / 3600.0).abs() < 1e-6,
        "{m:?}"
    );
    // reclaimWithinCohort = Any (both queues): one of b's jobs is preempted at 100 s (same
    // priority, same start: the first in job order, as Kueue breaks such ties by UID) and
    // a's starts there; b's victim, though its queue may reclaim too, does not take a's room
    // back (a is within its nominal quota): it restarts after a's job ends.
    let any = run(
        &t,
        &quota_file("any", "reclaim_within_cohort = \"Any\""),
        fifo.as_mut(),
    );
    let m = any
        .summary
        .quota_metrics
        .clone()
        .expect("metrics with quotas");
    assert_eq!(any.jobs[2].first_start, Some(SimTime::from_secs(100)));
    assert_eq!((any.jobs[0].preemptions, any.jobs[1].preemptions), (1, 0));
    assert_eq!(m.quota_preemptions, 1);
    assert_eq!(m.queues[1].quota_preemptions, 1, "the victim is b's");
    assert_eq!(m.guarantee_violation_h, 0.0);
    assert_eq!(any.summary.preemptions, 1);
    assert_eq!(any.summary.finished, 3);
    // Three runs started for a's and b's first jobs, a's, and b's victim again.
    assert_eq!(m.admissions, 4);
    assert!((m.preemptions_per_admission - 0.25).abs() < 1e-12);
}

#[test]
fn lower_priority_does_not_reclaim_from_equal_priority() {
    let t = borrower_then_owner();
    let mut fifo = build_policy("fifo/best-fit", 0).expect("a library policy");
    let r = run(
        &t,
        &quota_file("lower", "reclaim_within_cohort = \"LowerPriority\""),
        fifo.as_mut(),
    );
    let m = r.summary.quota_metrics.expect("metrics with quotas");
    assert_eq!((m.quota_preemptions, r.summary.preemptions), (0, 0));
    assert!(m.guarantee_violation_h > 9.0);
}

#[test]
fn within_queue_preempts_lower_priority_and_counts_no_inversion() {
    // a fills its 4 GPUs with a low-priority job, then a high-priority one comes.
    let mut t = trace(&[(0, 0, 4, 7200), (0, 60, 4, 600)]);
    let mut jobs = t.jobs().to_vec();
    jobs[0].priority = -1;
    jobs[1].priority = 5;
    t = Trace::new(
        "prio",
        jobs,
        t.true_durations().to_vec(),
        t.tenants().to_vec(),
    )
    .expect("valid trace");
    let file = quota_file(
        "within",
        "within_cluster_queue = \"LowerPriority\"\nreclaim_within_cohort = \"Never\"",
    );
    let mut fifo = build_policy("fifo/best-fit", 0).expect("a library policy");
    // a may borrow b's idle 4 GPUs: nothing to preempt, the high one starts at once.
    let r = run(&t, &file, fifo.as_mut());
    assert_eq!(r.jobs[1].first_start, Some(SimTime::from_secs(60)));
    assert_eq!(r.summary.preemptions, 0);
    let m = r.summary.quota_metrics.expect("metrics with quotas");
    assert_eq!(m.priority_inversions, 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// With reclaim on in both queues, a queue's guarantee is given back at the decision that
    /// finds it broken: no guarantee-violation time accrues, under FIFO, SJF and a policy
    /// that starts everything it can; every job still finishes, and no job is preempted
    /// more often than there were starts (no preemption loop).
    #[test]
    fn reclaim_keeps_every_guarantee(
        jobs in prop::collection::vec((0u32..2, 0u64..7200, 1u32..5, 60u64..5400), 1..16),
    ) {
        let t = trace(&jobs);
        let file = quota_file("prop", "reclaim_within_cohort = \"Any\"");
        for name in ["fifo/best-fit", "sjf/first-fit", "start-everything"] {
            let mut policy: Box<dyn Policy> = match name {
                "start-everything" => Box::new(StartEverything),
                _ => build_policy(name, 0).expect("a library policy"),
            };
            let r = run(&t, &file, policy.as_mut());
            let m = r.summary.quota_metrics.expect("metrics with quotas");
            prop_assert_eq!(m.guarantee_violation_h, 0.0, "{}: {:?}", name, m);
            prop_assert_eq!(r.summary.finished, t.len() as u64, "{}", name);
            prop_assert!(m.quota_preemptions <= m.admissions, "{}: {:?}", name, m);
        }
    }
}
