//! Pipelines in the simulator (`engine/pipes.rs`): hand-computed runs of small dependency
//! graphs on one node of 4 V100s (speed 1), times in seconds.

use super::*;
use crate::cluster::tests::uniform;
use crate::deps::Dependency;
use crate::job::tests::job;
use crate::job::{JobDeps, TaskRequest, Trace};
use crate::metrics::JobRecord;
use crate::policy::build_policy;
use crate::units::{JobId, SimTime};
use std::sync::Arc;

/// (name, submit s, duration s, GPUs, dependency in Slurm's syntax, fails).
type Row = (&'static str, u64, u64, u32, &'static str, bool);

fn pipeline(rows: &[Row]) -> Trace {
    let mut jobs = Vec::new();
    let mut durations = Vec::new();
    let mut deps = Vec::new();
    for &(name, submit, secs, gpus, dep, fails) in rows {
        jobs.push(job(name, submit, TaskRequest::whole(gpus, 0, 0)));
        durations.push(SimTime::from_secs(secs));
        deps.push(JobDeps {
            depends_on: Dependency::parse_slurm(dep).unwrap(),
            fails,
        });
    }
    Trace::with_deps("pipe", jobs, durations, vec!["t".into()], deps).unwrap()
}

fn run(t: &Trace) -> SimResult {
    let cfg = SimConfig::default();
    let mut p = build_policy("fifo/first-fit", cfg.seed).unwrap();
    Simulator::new(t, Arc::new(uniform(1, 4, "V100", 1000, 1000)), &cfg)
        .unwrap()
        .run(p.as_mut(), &mut |_| {})
}

fn record<'r>(r: &'r SimResult, name: &str) -> &'r JobRecord {
    r.jobs.iter().find(|j| j.name == name).unwrap()
}

/// (first start, finish) of `name`, in seconds.
fn ran(r: &SimResult, name: &str) -> (Option<u64>, Option<u64>) {
    let j = record(r, name);
    (
        j.first_start.map(|t| t.ms() / 1000),
        j.finish.map(|t| t.ms() / 1000),
    )
}

#[test]
fn an_afterok_chain_runs_stage_by_stage_and_waits_from_readiness() {
    // All three submitted at 0, each fits alone: prep 0..10, train 10..110, eval 110..115.
    let t = pipeline(&[
        ("prep", 0, 10, 1, "", false),
        ("train", 0, 100, 4, "afterok:prep", false),
        ("eval", 0, 5, 1, "afterok:train", false),
    ]);
    let r = run(&t);
    assert_eq!(ran(&r, "prep"), (Some(0), Some(10)));
    assert_eq!(ran(&r, "train"), (Some(10), Some(110)));
    assert_eq!(ran(&r, "eval"), (Some(110), Some(115)));
    // Ready when its parent ended: no wait; its JCT still counts from submit.
    let eval = record(&r, "eval");
    assert_eq!(eval.ready, Some(SimTime::from_secs(110)));
    assert_eq!(eval.wait(), Some(SimTime::ZERO));
    assert_eq!(eval.jct(), Some(SimTime::from_secs(115)));
    let s = &r.summary;
    assert_eq!((s.finished, s.avg_wait_s), (3, 0.0));
    let p = s.pipelines.as_ref().unwrap();
    // One pipeline, 0..115; its critical path is 10 + 100 + 5 = 115: slowdown 1.
    assert_eq!((p.pipelines, p.completed), (1, 1));
    assert_eq!(p.avg_completion_s, 115.0);
    assert_eq!(p.avg_critical_path_slowdown, 1.0);
    assert_eq!(p.ready_wait_share, 0.0);
}

#[test]
fn a_ready_stage_that_queues_counts_its_wait_from_readiness() {
    // A blocker holds all 4 GPUs 0..50; b (afterok:a, ready at 10) waits 10..50.
    let t = pipeline(&[
        ("a", 0, 10, 1, "", false),
        ("blocker", 1, 50, 3, "", false),
        ("b", 0, 10, 2, "afterok:a", false),
    ]);
    let r = run(&t);
    assert_eq!(ran(&r, "b"), (Some(51), Some(61)));
    assert_eq!(record(&r, "b").wait(), Some(SimTime::from_secs(41)));
    let p = r.summary.pipelines.as_ref().unwrap();
    // a: 0 of 10 waited; b: 41 of 51. Pipeline 0..61 over its path 20.
    assert!((p.ready_wait_share - 41.0 / 61.0).abs() < 1e-12);
    assert!((p.avg_critical_path_slowdown - 61.0 / 20.0).abs() < 1e-12);
}

#[test]
fn an_afternotok_branch_of_a_successful_job_never_runs_and_is_reported() {
    let t = pipeline(&[
        ("train", 0, 10, 1, "", false),
        ("on-failure", 0, 5, 1, "afternotok:train", false),
        ("export", 0, 5, 1, "afterok:train", false),
        // Settles after its parent was found never satisfiable (cancelled, as Slurm's
        // kill_invalid_depend does): afterany runs, afterok cascades.
        ("cleanup", 0, 5, 1, "afterany:on-failure", false),
        ("report", 0, 5, 1, "afterok:on-failure", false),
    ]);
    let r = run(&t);
    assert_eq!(ran(&r, "on-failure"), (None, None));
    assert_eq!(ran(&r, "export"), (Some(10), Some(15)));
    assert_eq!(ran(&r, "cleanup"), (Some(10), Some(15)));
    assert_eq!(ran(&r, "report"), (None, None));
    assert!(record(&r, "on-failure").never_satisfied);
    assert_eq!(r.summary.dependency_never_satisfied, 2);
    let names: Vec<&str> = r.never_satisfied.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["on-failure", "report"]);
    assert_eq!(r.never_satisfied[0].1, "afternotok:train");
    // The run ends normally; the two never ran, the pipeline still completes.
    assert_eq!((r.summary.jobs, r.summary.finished), (5, 3));
    assert_eq!(r.summary.pipelines.as_ref().unwrap().completed, 1);
}

#[test]
fn a_failed_parent_takes_the_afternotok_branch_and_an_or_list_takes_either() {
    let t = pipeline(&[
        ("train", 0, 10, 1, "", true),
        ("retry", 0, 10, 1, "afternotok:train", false),
        ("export", 0, 5, 1, "afterok:train", false),
        // Either train succeeded or the retry did.
        ("eval", 0, 5, 1, "afterok:train?afterok:retry", false),
    ]);
    let r = run(&t);
    assert_eq!(ran(&r, "retry"), (Some(10), Some(20)));
    assert_eq!(ran(&r, "export"), (None, None));
    assert_eq!(ran(&r, "eval"), (Some(20), Some(25)));
    assert_eq!(r.summary.dependency_never_satisfied, 1);
}

#[test]
fn singleton_runs_one_job_of_a_name_and_tenant_at_a_time() {
    // Three "sweep" jobs of 1 GPU each at 0, 1, 2: room for all, but each singleton waits
    // for the earlier ones of its name (the first has none).
    let t = pipeline(&[
        ("sweep", 0, 10, 1, "singleton", false),
        ("sweep", 1, 10, 1, "singleton", false),
        ("other", 1, 10, 1, "", false),
        ("sweep", 2, 10, 1, "singleton", false),
    ]);
    let r = run(&t);
    let sweeps: Vec<(Option<SimTime>, Option<SimTime>)> = r
        .jobs
        .iter()
        .filter(|j| j.name == "sweep")
        .map(|j| (j.first_start, j.finish))
        .collect();
    let s = SimTime::from_secs;
    assert_eq!(
        sweeps,
        [
            (Some(s(0)), Some(s(10))),
            (Some(s(10)), Some(s(20))),
            (Some(s(20)), Some(s(30)))
        ]
    );
    assert_eq!(ran(&r, "other"), (Some(1), Some(11)));
}

#[test]
fn after_with_a_delay_wakes_when_the_delay_runs_out() {
    // server starts at 0 and runs an hour; client may start 2 minutes after it started, and
    // probe as soon as it started.
    let t = pipeline(&[
        ("server", 0, 3600, 1, "", false),
        ("client", 0, 60, 1, "after:server+2", false),
        ("probe", 0, 60, 1, "after:server", false),
    ]);
    let r = run(&t);
    assert_eq!(ran(&r, "probe"), (Some(0), Some(60)));
    assert_eq!(ran(&r, "client"), (Some(120), Some(180)));
    assert_eq!(record(&r, "client").wait(), Some(SimTime::ZERO));
}

#[test]
fn a_window_that_cuts_a_chain_settles_the_parents_before_it() {
    let t = pipeline(&[
        ("prep", 0, 10, 1, "", false),
        ("bad", 5, 10, 1, "", true),
        ("train", 100, 10, 1, "afterok:prep", false),
        ("fix", 100, 10, 1, "afternotok:bad", false),
        ("skip", 100, 10, 1, "afterok:bad", false),
        ("eval", 200, 10, 1, "afterok:train,afterany:bad", false),
    ]);
    // From 50 s: prep and bad ended before the window, with their outcomes.
    let w = t.window(SimTime::from_secs(50), SimTime::MAX);
    assert_eq!(w.len(), 4);
    let text = |name: &str| {
        let j = w.jobs().iter().find(|j| j.name == name).unwrap();
        w.dependency_text(j.id)
    };
    assert_eq!(text("train"), None);
    assert_eq!(text("fix"), None);
    assert_eq!(text("skip"), Some(String::new()));
    assert_eq!(text("eval").as_deref(), Some("afterok:train"));
    let r = run(&w);
    assert_eq!(ran(&r, "train"), (Some(100), Some(110)));
    assert_eq!(ran(&r, "fix"), (Some(100), Some(110)));
    assert_eq!(ran(&r, "skip"), (None, None));
    assert_eq!(ran(&r, "eval"), (Some(200), Some(210)));
    assert_eq!(r.summary.dependency_never_satisfied, 1);
    // Filters and load scaling keep the dependencies alike.
    let f = t.filter(|j| j.name != "prep");
    assert_eq!(f.len(), 5);
    let squeezed = t.map_submit(|s| SimTime(s.ms() / 2));
    assert_eq!(
        squeezed.dependency_text(JobId(5)),
        t.dependency_text(JobId(5))
    );
}

#[test]
fn traces_without_dependencies_report_no_pipelines() {
    let t = pipeline(&[("a", 0, 10, 1, "", false), ("b", 0, 10, 1, "", false)]);
    assert!(!t.has_dependencies());
    let r = run(&t);
    assert!(r.summary.pipelines.is_none());
    assert_eq!(r.summary.dependency_never_satisfied, 0);
    let json = serde_json::to_string(&r.summary).unwrap();
    assert!(
        !json.contains("pipelines") && !json.contains("never_satisfied"),
        "{json}"
    );
}

#[test]
fn missing_parents_ambiguous_names_and_cycles_are_refused_naming_the_job() {
    let refuse = |rows: &[(&str, &str)]| {
        let jobs = rows
            .iter()
            .map(|(n, _)| job(n, 0, TaskRequest::whole(1, 0, 0)))
            .collect();
        let deps = rows
            .iter()
            .map(|(_, d)| JobDeps {
                depends_on: Dependency::parse_slurm(d).unwrap(),
                fails: false,
            })
            .collect();
        let durations = vec![SimTime(1); rows.len()];
        Trace::with_deps("t", jobs, durations, vec!["t".into()], deps)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        refuse(&[("a", ""), ("b", "afterok:z")]),
        "job b: depends on z, which is not in the trace"
    );
    assert_eq!(
        refuse(&[("a", ""), ("a", ""), ("b", "afterok:a")]),
        "job b: depends on a, a name several jobs share"
    );
    let e = refuse(&[("a", "afterok:b"), ("b", "afterany:a")]);
    assert!(e.contains("form a cycle") && e.contains("a -> b"), "{e}");
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    /// (submit s, duration s, GPUs, (parent, kind) pairs, fails).
    type RandomJob = (u64, u64, u32, Vec<(usize, u8)>, bool);

    /// A random pipeline trace: job `i` lists up to two of the jobs before it in input order
    /// (so no cycle) with a random kind, random submits (so the trace reorders), random
    /// failures, 1-4 GPUs each (every job fits the 4-GPU node alone).
    fn pipelines() -> impl Strategy<Value = Vec<RandomJob>> {
        prop::collection::vec(
            (
                0u64..300,
                1u64..200,
                1u32..=4,
                prop::collection::vec((0usize..64, 0u8..5), 0..3),
                prop::bool::weighted(0.3),
            ),
            1..14,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(96),
            ..ProptestConfig::default()
        })]

        /// Every job runs once or is reported never satisfied, none starts before its
        /// dependency holds, and waits count from readiness.
        #[test]
        fn no_job_starts_before_its_dependency_and_none_is_dropped(rows in pipelines()) {
            let kinds = ["afterok", "afterany", "afternotok", "after", "after+1"];
            let mut listed: Vec<Vec<(usize, &str)>> = Vec::new();
            let mut jobs = Vec::new();
            let mut durations = Vec::new();
            let mut deps = Vec::new();
            for (i, (submit, secs, gpus, parents, fails)) in rows.iter().enumerate() {
                let mut terms: Vec<(usize, &str)> = Vec::new();
                if i > 0 {
                    for (p, k) in parents {
                        let p = p % i;
                        if !terms.iter().any(|(q, _)| *q == p) {
                            terms.push((p, kinds[*k as usize]));
                        }
                    }
                }
                let text: Vec<String> = terms
                    .iter()
                    .map(|(p, k)| match k.split_once('+') {
                        Some((k, min)) => format!("{k}:j{p}+{min}"),
                        None => format!("{k}:j{p}"),
                    })
                    .collect();
                jobs.push(job(&format!("j{i}"), *submit, TaskRequest::whole(*gpus, 0, 0)));
                durations.push(SimTime::from_secs(*secs));
                deps.push(JobDeps {
                    depends_on: Dependency::parse_slurm(&text.join(",")).unwrap(),
                    fails: *fails,
                });
                listed.push(terms);
            }
            let t = Trace::with_deps("p", jobs, durations, vec!["t".into()], deps).unwrap();
            let r = run(&t);
            let rec = |i: usize| record(&r, &format!("j{i}"));
            prop_assert_eq!(r.jobs.len(), rows.len());
            for (i, terms) in listed.iter().enumerate() {
                let me = rec(i);
                // Ran (exactly once: a finish) or reported, never both, never neither.
                prop_assert!(me.finish.is_some() != me.never_satisfied, "j{}: {:?}", i, me);
                let Some(start) = me.first_start else { continue };
                let ready = me.ready.unwrap_or(me.submit);
                prop_assert!(me.submit <= ready && ready <= start);
                for (p, kind) in terms {
                    let parent = rec(*p);
                    let ok = !rows[*p].4;
                    match *kind {
                        "after" => prop_assert!(
                            parent.never_satisfied || parent.first_start.is_some_and(|s| s <= start)
                        ),
                        "after+1" => prop_assert!(
                            parent.never_satisfied
                                || parent
                                    .first_start
                                    .is_some_and(|s| s.saturating_add(SimTime::from_secs(60)) <= start)
                        ),
                        _ => {
                            let ended = parent.finish.is_some_and(|f| f <= start);
                            prop_assert!(ended || parent.never_satisfied, "j{} {} j{}", i, kind, p);
                            match *kind {
                                "afterok" => prop_assert!(ended && ok),
                                "afternotok" => prop_assert!(parent.never_satisfied || !ok),
                                _ => {}
                            }
                        }
                    }
                }
            }
            prop_assert_eq!(
                r.summary.dependency_never_satisfied as usize,
                r.jobs.iter().filter(|j| j.never_satisfied).count()
            );
        }
    }
}

/// Records what the policy sees of each pending job at each decision, then decides as FIFO.
struct Watch {
    fifo: Box<dyn crate::policy::Policy>,
    /// (job, now, waited), seconds.
    seen: Vec<(String, u64, u64)>,
}

impl crate::policy::Policy for Watch {
    fn name(&self) -> &str {
        "watch"
    }
    fn decide(
        &mut self,
        ctx: &crate::policy::DecisionContext<'_>,
    ) -> Result<crate::policy::Decision, crate::policy::PolicyError> {
        for p in ctx.pending() {
            let secs = |t: SimTime| t.ms() / 1000;
            self.seen
                .push((p.spec.name.clone(), secs(ctx.now()), secs(p.waited)));
        }
        self.fifo.decide(ctx)
    }
}

#[test]
fn policies_never_see_a_held_job_and_see_its_wait_from_readiness() {
    // As `a_ready_stage_that_queues...`: b is held 0..10, then pending 10..51.
    let t = pipeline(&[
        ("a", 0, 10, 1, "", false),
        ("blocker", 1, 50, 3, "", false),
        ("b", 0, 10, 2, "afterok:a", false),
    ]);
    let cfg = SimConfig::default();
    let mut watch = Watch {
        fifo: build_policy("fifo/first-fit", cfg.seed).unwrap(),
        seen: Vec::new(),
    };
    Simulator::new(&t, Arc::new(uniform(1, 4, "V100", 1000, 1000)), &cfg)
        .unwrap()
        .run(&mut watch, &mut |_| {});
    let b: Vec<(u64, u64)> = watch
        .seen
        .iter()
        .filter(|(name, ..)| name == "b")
        .map(|(_, now, waited)| (*now, *waited))
        .collect();
    assert_eq!(b, [(10, 0), (51, 41)]);
}
