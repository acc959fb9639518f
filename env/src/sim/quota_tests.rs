//! Quotas in the simulator (`SimConfig::quotas`): whatever a policy decides, a queue never
//! holds more than its nominal quota plus what it may borrow, the books follow the cluster
//! exactly, and the starvation guard starts nothing its queue cannot admit.

use super::*;
use crate::cluster::tests::uniform;
use crate::job::tests::job;
use crate::job::{JobSpec, TaskRequest, Trace};
use crate::policy::{
    Decision, DecisionContext, Policy, PolicyError, StarvationBound, build_policy,
};
use crate::quota::{FlavorResource, Resource};
use crate::units::{JobId, SimTime, TenantId};
use proptest::prelude::*;
use std::sync::Arc;

/// Starts every pending job wherever it fits, first fit, quotas or not: the simulator's
/// admission alone must hold the line.
pub(super) struct StartEverything;

impl Policy for StartEverything {
    fn name(&self) -> &str {
        "start-everything"
    }
    fn decide(&mut self, ctx: &DecisionContext<'_>) -> Result<Decision, PolicyError> {
        Ok(Decision {
            placements: super::tests::place_first_fit(ctx, |_| true),
            ..Decision::default()
        })
    }
}

/// Starts the jobs of tenant `b` only: those of `a` start only by the starvation guard.
struct OnlyB;

impl Policy for OnlyB {
    fn name(&self) -> &str {
        "only-b"
    }
    fn decide(&mut self, ctx: &DecisionContext<'_>) -> Result<Decision, PolicyError> {
        Ok(Decision {
            placements: super::tests::place_first_fit(ctx, |j| j.tenant == TenantId(1)),
            ..Decision::default()
        })
    }
}

/// Two queues in one cohort on V100 GPUs: `a` with `a_gpus` nominal (borrowing limit
/// `a_borrow` GPUs, none = unlimited), `b` with 6.
fn quota_file(name: &str, a_gpus: u32, a_borrow: Option<u32>) -> String {
    let borrow = a_borrow.map_or(String::new(), |b| format!("borrowing_limit = {b}\n"));
    let text = format!(
        "[[cohort]]\nname = \"org\"\n\n\
         [[queue]]\nname = \"a\"\ncohort = \"org\"\n\
         [[queue.quota]]\nflavor = \"V100\"\nresource = \"gpu\"\nnominal = {a_gpus}\n{borrow}\n\
         [[queue]]\nname = \"b\"\ncohort = \"org\"\n\
         [[queue.quota]]\nflavor = \"V100\"\nresource = \"gpu\"\nnominal = 6\n"
    );
    let path =
        std::env::temp_dir().join(format!("lachesis-quota-{}-{name}.toml", std::process::id()));
    std::fs::write(&path, text).expect("the temp dir is writable");
    path.to_str().expect("temp paths are UTF-8").to_string()
}

/// `(tenant 0 = a / 1 = b, submit s, GPUs, duration s)` as a trace.
pub(super) fn trace(jobs: &[(u32, u64, u32, u64)]) -> Trace {
    let (specs, durs): (Vec<JobSpec>, Vec<SimTime>) = jobs
        .iter()
        .enumerate()
        .map(|(i, &(tenant, submit, gpus, dur))| {
            let mut j = job(&format!("j{i}"), submit, TaskRequest::whole(gpus, 0, 0));
            j.tenant = TenantId(tenant);
            (j, SimTime::from_secs(dur))
        })
        .unzip();
    let mut sorted: Vec<(JobSpec, SimTime)> = specs.into_iter().zip(durs).collect();
    sorted.sort_by_key(|(j, _)| j.submit);
    let (specs, durs) = sorted.into_iter().unzip();
    Trace::new("quota", specs, durs, vec!["a".into(), "b".into()]).expect("valid trace")
}

fn v100_gpu() -> FlavorResource {
    FlavorResource::new("V100", Resource::Gpu)
}

/// Runs `policy` step by step; after every decision applied, checks that the books equal the
/// milli-GPUs each tenant's running jobs hold, and returns the run with the most queue `a`
/// ever held.
fn stepped(t: &Trace, cfg: &SimConfig, policy: &mut dyn Policy) -> (SimResult, i64) {
    let spec = Arc::new(uniform(2, 4, "V100", 1000, 1000));
    let mut sim = Simulator::new(t, spec, cfg).expect("valid run");
    let mut most_a = 0;
    while sim.advance() {
        let d = policy.decide(&sim.context()).expect("decides");
        sim.apply(&d);
        let adm = sim.admission().expect("a run with quotas");
        let tree = adm.tree();
        let mut held = [0i64; 2];
        for alloc in sim.cluster().running() {
            let j = t.job(alloc.job);
            held[j.tenant.index()] += (alloc.tasks.len() as u64 * j.task.gpu_milli_total()) as i64;
        }
        for (i, q) in ["a", "b"].iter().enumerate() {
            let n = tree.node(q).expect("queue");
            assert_eq!(tree.usage(n, &v100_gpu()), held[i], "books of {q}");
        }
        most_a = most_a.max(held[0]);
    }
    // Every job that ran has given its quota back.
    if sim.cluster().running().len() == 0 {
        let tree = sim.admission().expect("a run with quotas").tree();
        for q in ["a", "b"] {
            let n = tree.node(q).expect("queue");
            assert_eq!(tree.usage(n, &v100_gpu()), 0, "books of {q} at the end");
        }
    }
    let r = sim.finish(policy.name(), 0.0);
    (r, most_a)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// With borrowing off, queue `a` never holds more than its nominal 2 GPUs, under FIFO,
    /// SJF, Tiresias' LAS preemption (10 min ticks) and a policy that tries to start
    /// everything; every job still finishes, and the composed heuristics that do not preempt
    /// waste no decision on a job its queue cannot admit.
    #[test]
    fn a_queue_never_exceeds_its_nominal_without_borrowing(
        jobs in prop::collection::vec((0u32..2, 0u64..7200, 1u32..3, 60u64..5400), 1..30),
    ) {
        let t = trace(&jobs);
        let cfg = SimConfig {
            quotas: Some(quota_file("prop", 2, Some(0))),
            starvation_bound: StarvationBound::Off,
            tick_s: 600.0,
            ..SimConfig::default()
        };
        for name in [
            "fifo/best-fit",
            "sjf/best-fit",
            "tiresias/best-fit/las-preempt",
            "start-everything",
        ] {
            let mut policy: Box<dyn Policy> = match name {
                "start-everything" => Box::new(StartEverything),
                _ => build_policy(name, 0).expect("a library policy"),
            };
            let (r, most_a) = stepped(&t, &cfg, policy.as_mut());
            prop_assert!(most_a <= 2000, "{name}: a held {most_a} milli-GPU");
            prop_assert_eq!(r.summary.finished, t.len() as u64, "{}", name);
            prop_assert_eq!(r.summary.rejected_decisions, 0);
            if !["start-everything", "tiresias/best-fit/las-preempt"].contains(&name) {
                prop_assert_eq!(r.summary.quota_vetoes, 0, "{}", name);
            }
            prop_assert!(r.quota_blocked.is_empty());
        }
    }
}

/// Six 1-GPU jobs of `a` at 0, one 4-GPU job of `b` at 1 h.
fn burst() -> Trace {
    let mut jobs: Vec<(u32, u64, u32, u64)> = (0..6).map(|_| (0, 0, 1, 7200)).collect();
    jobs.push((1, 3600, 4, 600));
    trace(&jobs)
}

#[test]
fn with_borrowing_a_queue_uses_idle_capacity_and_without_it_waits() {
    let run = |file: &str, policy: &mut dyn Policy| {
        let cfg = SimConfig {
            quotas: Some(file.to_string()),
            ..SimConfig::default()
        };
        stepped(&burst(), &cfg, policy)
    };
    // Borrowing unlimited: a takes the six GPUs it asks while b is idle (4 of them b's
    // nominal). b's 4-GPU job at 1 h then waits for them to end (reclaiming them by
    // preemption is Kueue's, not done yet).
    let borrow = quota_file("borrow", 2, None);
    let (r, most_a) = run(&borrow, build_policy("fifo/best-fit", 0).unwrap().as_mut());
    assert_eq!(most_a, 6000, "a borrowed 4 idle GPUs");
    assert_eq!(r.summary.quota_vetoes, 0);
    assert_eq!(r.summary.quotas.as_deref(), Some(borrow.as_str()));
    // Borrowing limit 1: a holds at most 3.
    let limited = quota_file("limited", 2, Some(1));
    let (_, most_a) = run(&limited, build_policy("fifo/best-fit", 0).unwrap().as_mut());
    assert_eq!(most_a, 3000);
    // No borrowing: 2 at a time; the policy that starts everything is refused the rest, and
    // counted.
    let none = quota_file("none", 2, Some(0));
    let (r, most_a) = run(&none, &mut StartEverything);
    assert_eq!(most_a, 2000);
    assert!(r.summary.quota_vetoes > 0);
    assert_eq!(r.summary.finished, 7);
    let json = serde_json::to_value(&r.summary).unwrap();
    assert!(json.get("quota_vetoes").is_some());
}

#[test]
fn the_starvation_guard_starts_nothing_its_queue_cannot_admit() {
    // a may hold 1 GPU; two 1-GPU jobs of a wait under a policy that starts only b's (a
    // 6 h job keeps the run going). Past the bound (1 h) the guard starts the first; the
    // second only once the first has ended.
    let t = trace(&[(0, 0, 1, 7200), (0, 0, 1, 600), (1, 0, 1, 6 * 3600)]);
    let cfg = SimConfig {
        quotas: Some(quota_file("guard", 1, Some(0))),
        starvation_bound: StarvationBound::Secs(3600.0),
        tick_s: 600.0,
        ..SimConfig::default()
    };
    let (r, most_a) = stepped(&t, &cfg, &mut OnlyB);
    assert_eq!(most_a, 1000);
    assert_eq!(r.summary.finished, 3);
    assert_eq!(r.summary.bound_starts, 2);
    let first_end = r.jobs[0].finish.expect("finished");
    assert!(r.jobs[1].first_start.expect("started") >= first_end);
}

#[test]
fn a_job_its_queue_can_never_admit_is_reported_with_the_quota() {
    // a's nominal is 2 GPUs, no borrowing: a 4-GPU job of a never starts.
    let t = trace(&[(0, 0, 4, 600), (1, 0, 1, 600)]);
    let cfg = SimConfig {
        quotas: Some(quota_file("never", 2, Some(0))),
        ..SimConfig::default()
    };
    let (r, _) = stepped(&t, &cfg, build_policy("fifo/best-fit", 0).unwrap().as_mut());
    assert_eq!(r.summary.finished, 1);
    let (name, why) = &r.quota_blocked[0];
    assert_eq!(name, "j0");
    assert_eq!(why.queue, "a");
    assert_eq!(
        why.to_string(),
        "quota of queue a on V100/gpu: asks 4, 2 available (nominal 2, in use 0)"
    );
}

#[test]
fn tenants_without_a_queue_go_to_default_or_are_named() {
    let t = trace(&[(0, 0, 1, 600), (1, 0, 1, 600)]);
    let spec = Arc::new(uniform(2, 4, "V100", 1000, 1000));
    let dir = std::env::temp_dir();
    let write = |name: &str, text: &str| {
        let p = dir.join(format!("lachesis-quota-{}-{name}.toml", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let only_a = write(
        "only-a",
        "[[queue]]\nname = \"a\"\n[[queue.quota]]\nflavor = \"V100\"\nresource = \"gpu\"\nnominal = 4\n",
    );
    let cfg = |q: &str| SimConfig {
        quotas: Some(q.to_string()),
        ..SimConfig::default()
    };
    let err = Simulator::new(&t, Arc::clone(&spec), &cfg(&only_a)).unwrap_err();
    assert!(
        err.to_string()
            .contains("tenant `b` (job j1) has no queue: add a queue named `b`"),
        "{err}"
    );
    let with_default = write(
        "with-default",
        "[[queue]]\nname = \"a\"\n[[queue.quota]]\nflavor = \"V100\"\nresource = \"gpu\"\nnominal = 4\n\
         [[queue]]\nname = \"default\"\n[[queue.quota]]\nflavor = \"default\"\nresource = \"gpu\"\nnominal = 4\n",
    );
    // b's job goes to `default`, whose quota is on flavor `default`: V100 nodes are charged
    // to V100 (the file names it), where `default` has nothing, so b never starts.
    let sim = Simulator::new(&t, Arc::clone(&spec), &cfg(&with_default)).unwrap();
    let adm = sim.admission().unwrap();
    let q = adm.queue(t.job(JobId(1))).unwrap();
    assert_eq!(adm.tree().spec(q).name, "default");
    let mut p = build_policy("fifo/best-fit", 0).unwrap();
    let r = sim.run(p.as_mut(), &mut |_| {});
    assert_eq!(r.summary.finished, 1);
    assert_eq!(r.quota_blocked[0].1.fr.to_string(), "V100/gpu");
    let bad = write("bad", "[[queue]]\nname = \"a\"\nnominal = 3\n");
    let err = Simulator::new(&t, spec, &cfg(&bad))
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("quotas: "), "{err}");
    assert!(
        err.contains(&format!("{bad}:3:1: queue[0].nominal")),
        "{err}"
    );
}

#[test]
fn equal_shares_refuse_nothing_that_fits_and_change_nothing() {
    // Under `equal`, the queues' quotas sum to the cluster: with no sharing, nothing that
    // fits is refused, and the run is the run without quotas.
    let jobs: Vec<(u32, u64, u32, u64)> = (0..40)
        .map(|i| (i % 2, i as u64 * 300, 1 + (i % 4), 600 + 97 * i as u64))
        .collect();
    let t = trace(&jobs);
    let spec = Arc::new(uniform(2, 4, "V100", 1000, 1000));
    for name in ["fifo/best-fit", "sjf/best-fit", "fifo/first-fit/easy"] {
        let run = |quotas: Option<&str>| {
            let cfg = SimConfig {
                quotas: quotas.map(str::to_string),
                ..SimConfig::default()
            };
            let mut p = build_policy(name, 0).unwrap();
            Simulator::new(&t, Arc::clone(&spec), &cfg)
                .unwrap()
                .run(p.as_mut(), &mut |_| {})
        };
        let (off, on) = (run(None), run(Some("equal")));
        assert_eq!(on.summary.quotas.as_deref(), Some("equal"));
        assert_eq!(on.summary.quota_vetoes, 0, "{name}");
        assert_eq!(off.summary.avg_jct_s, on.summary.avg_jct_s, "{name}");
        assert_eq!(off.jobs, on.jobs, "{name}");
    }
    let sim = Simulator::new(
        &t,
        Arc::clone(&spec),
        &SimConfig {
            quotas: Some("equal".into()),
            ..SimConfig::default()
        },
    )
    .unwrap();
    let tree = sim.admission().unwrap().tree();
    for q in ["a", "b"] {
        let n = tree.node(q).unwrap();
        assert_eq!(tree.nominal(n, &v100_gpu()), 4000, "{q}: half of 8 GPUs");
    }
}

#[test]
fn a_job_goes_to_the_first_flavor_of_its_queue_that_admits_it() {
    // a's queue lists T4 (4 GPUs) and V100 (none); b holds V100s. b's 2-GPU job takes half
    // the V100 node at 0, so best fit puts a's 1-GPU jobs there: refused by a's quota, they
    // are placed again on T4, the first flavor of a's queue with room (Kueue's order).
    let dir = std::env::temp_dir();
    let path = dir.join(format!(
        "lachesis-quota-{}-flavors.toml",
        std::process::id()
    ));
    std::fs::write(
        &path,
        "[[queue]]\nname = \"a\"\n\
         [[queue.quota]]\nflavor = \"T4\"\nresource = \"gpu\"\nnominal = 4\n\
         [[queue.quota]]\nflavor = \"V100\"\nresource = \"gpu\"\nnominal = 0\n\
         [[queue]]\nname = \"b\"\n\
         [[queue.quota]]\nflavor = \"V100\"\nresource = \"gpu\"\nnominal = 4\n",
    )
    .unwrap();
    let t = trace(&[
        (1, 0, 2, 7200),
        (0, 10, 1, 600),
        (0, 10, 1, 600),
        (0, 10, 1, 600),
    ]);
    let spec = Arc::new(crate::cluster::load_cluster("1x4:V100+1x4:T4").unwrap());
    for name in ["fifo/best-fit", "sjf/best-fit"] {
        let cfg = SimConfig {
            quotas: Some(path.to_str().unwrap().to_string()),
            ..SimConfig::default()
        };
        let mut p = build_policy(name, 0).unwrap();
        let r = Simulator::new(&t, Arc::clone(&spec), &cfg)
            .unwrap()
            .run(p.as_mut(), &mut |_| {});
        assert_eq!(r.summary.finished, 4, "{name}");
        assert_eq!(r.summary.quota_vetoes, 0, "{name}");
        for rec in &r.jobs[1..] {
            assert_eq!(rec.first_start, Some(SimTime::from_secs(10)), "{name}");
            assert!(
                rec.nodes.starts_with("t4"),
                "{name}: {} on {}",
                rec.name,
                rec.nodes
            );
        }
    }
}
