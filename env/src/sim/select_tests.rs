//! Rolling a run forward over sampled futures (`engine/future.rs`) and the `select`
//! meta-policy on top of it: a future equal to the truth continues the run exactly; futures
//! never read true durations or jobs yet to arrive (poisoned-truth tests); the selector
//! switches to the better of two policies, and not on noise.

use super::*;
use crate::cluster::tests::uniform;
use crate::job::tests::job;
use crate::job::{JobSpec, TaskRequest, Trace};
use crate::policy::lookahead::{Arrival, Future, Lookahead};
use crate::policy::{
    Decision, DecisionContext, Policy, PolicyBuilder, PolicyError, Select, SelectConfig,
    build_policy,
};
use crate::units::{JobId, SimTime};
use std::sync::Arc;

/// 1-GPU jobs, one every 10 min for 40 h, run times cycling through 20 min .. 5 h: enough
/// contention on 4 GPUs that order matters.
fn trace(n: u64) -> Trace {
    let runs = [1200u64, 18000, 2400, 600, 9000, 3600, 1800, 12000];
    let (jobs, durs): (Vec<JobSpec>, Vec<SimTime>) = (0..n)
        .map(|i| {
            (
                job(&format!("j{i}"), 600 * i + 1, TaskRequest::whole(1, 0, 0)),
                SimTime::from_secs(runs[i as usize % runs.len()]),
            )
        })
        .unzip();
    Trace::new("select", jobs, durs, vec!["default".into()]).unwrap()
}

fn cluster() -> Arc<crate::cluster::ClusterSpec> {
    Arc::new(uniform(1, 4, "V100", 1000, 1000))
}

/// Drives `sim` with `policy` until the first decision point at or after `until`.
fn run_until(sim: &mut Simulator<'_>, policy: &mut dyn Policy, until: SimTime) {
    while sim.advance() {
        if sim.now() >= until {
            return;
        }
        let d = policy.decide(&sim.context()).unwrap();
        sim.apply(&d);
    }
    panic!("the run ended before {until:?}");
}

#[test]
fn a_future_that_is_the_truth_continues_the_run_exactly() {
    let t = trace(240);
    let cfg = SimConfig::default();
    let fifo = || build_policy("fifo/best-fit", 0).unwrap();
    let at = SimTime::from_secs(20 * 3600);
    let horizon = SimTime::from_secs(8 * 3600);
    let mut sim = Simulator::new(&t, cluster(), &cfg).unwrap();
    run_until(&mut sim, fifo().as_mut(), at);
    let now = sim.now();
    // The truth as a future: true durations, the next jobs as arrivals (all alike, so a copy
    // of job 0's spec is each of them).
    let k = sim.arrived();
    let future = Future {
        durations: (0..k).map(|i| t.true_duration(JobId(i as u32))).collect(),
        arrivals: t.jobs()[k..]
            .iter()
            .filter(|j| j.submit <= now.saturating_add(horizon))
            .map(|j| Arrival {
                source: JobId(0),
                submit: j.submit,
                duration: t.true_duration(j.id),
            })
            .collect(),
    };
    let mut policies = vec![fifo()];
    let score = sim.rollouts(&future, &mut policies, horizon).unwrap()[0]
        .clone()
        .unwrap();
    // The real continuation's job-time over [now, now + horizon].
    let mut rest = sim;
    let mut p = fifo();
    while rest.advance() {
        let d = p.decide(&rest.context()).unwrap();
        rest.apply(&d);
    }
    let end = now.saturating_add(horizon);
    let real: f64 = rest
        .finish("fifo/best-fit", 0.0)
        .jobs
        .iter()
        .map(|r| {
            let from = r.submit.max(now);
            let to = r.finish.unwrap().min(end);
            to.saturating_sub(from).secs_f64()
        })
        .sum();
    assert!(score.job_s > 0.0 && score.finished > 0);
    assert!(
        (score.job_s - real).abs() < 1e-6 * real,
        "rollout {} against the run's own {real}",
        score.job_s
    );
}

#[test]
fn a_future_is_refused_where_it_does_not_fit_the_run() {
    let t = trace(60);
    let mut sim = Simulator::new(&t, cluster(), &SimConfig::default()).unwrap();
    run_until(
        &mut sim,
        build_policy("fifo/best-fit", 0).unwrap().as_mut(),
        SimTime::from_secs(3 * 3600),
    );
    let k = sim.arrived();
    let ok = Future {
        durations: vec![SimTime::from_secs(60); k],
        arrivals: vec![],
    };
    assert!(sim.future_trace(&ok).is_ok());
    let short = Future {
        durations: vec![SimTime::from_secs(60); k - 1],
        arrivals: vec![],
    };
    assert!(sim.future_trace(&short).is_err());
    let past = Future {
        arrivals: vec![Arrival {
            source: JobId(0),
            submit: sim.now(),
            duration: SimTime::from_secs(60),
        }],
        ..ok.clone()
    };
    let err = sim.future_trace(&past).unwrap_err().to_string();
    assert!(err.contains("after now"), "{err}");
    let unknown = Future {
        arrivals: vec![Arrival {
            source: JobId(k as u32),
            submit: sim.now().saturating_add(SimTime::from_secs(1)),
            duration: SimTime::from_secs(60),
        }],
        ..ok
    };
    let err = sim.future_trace(&unknown).unwrap_err().to_string();
    assert!(err.contains("has not arrived"), "{err}");
}

fn library_builder() -> PolicyBuilder {
    Arc::new(|n: &str| build_policy(n, 0))
}

fn select_cfg() -> SelectConfig {
    SelectConfig {
        epoch_s: 2.0 * 3600.0,
        horizon_s: 4.0 * 3600.0,
        futures: 3,
        min_history: 10,
        ..SelectConfig::default()
    }
}

/// `select` over three of the library's families, as the poisoned-truth test runs it.
fn library_select() -> Select {
    Select::new(
        "select",
        vec![
            "fifo/best-fit".into(),
            "sjf/best-fit".into(),
            "tiresias/best-fit/las-preempt".into(),
        ],
        select_cfg(),
        7,
        library_builder(),
    )
    .unwrap()
}

/// Runs `library_select` on `t` until `until`: its log, and which jobs had finished by then.
fn select_until(t: &Trace, until: SimTime) -> (crate::policy::SelectionLog, Vec<bool>) {
    let mut sel = library_select();
    let cfg = SimConfig {
        tick_s: 600.0,
        ..SimConfig::default()
    };
    let mut sim = Simulator::new(t, cluster(), &cfg).unwrap();
    run_until(&mut sim, &mut sel, until);
    sel.decide(&sim.context()).unwrap();
    let ctx = sim.context();
    let done = t
        .jobs()
        .iter()
        .map(|j| ctx.runtime(j.id).state == crate::policy::JobState::Finished)
        .collect();
    (sel.log().clone(), done)
}

#[test]
fn futures_never_read_true_durations_or_jobs_yet_to_arrive() {
    let t = trace(240);
    let at = SimTime::from_secs(24 * 3600);
    // Which jobs are done by `at` in the run the selector drives.
    let (honest, done) = select_until(&t, at);
    // The poisoned world: every job not finished by then lasts 3x as long (so none of them
    // finishes sooner), and the jobs submitted later are other jobs, arriving at other times.
    let mut jobs = Vec::new();
    let mut durs = Vec::new();
    for j in t.jobs() {
        if j.submit < at {
            jobs.push(j.clone());
            let d = t.true_duration(j.id);
            durs.push(if done[j.id.index()] {
                d
            } else {
                SimTime(d.ms() * 3)
            });
        }
    }
    for i in 0..100u64 {
        let mut j = job(
            &format!("other{i}"),
            at.secs_f64() as u64 + 97 * (i + 1),
            TaskRequest::whole(2, 0, 0),
        );
        j.id = JobId(jobs.len() as u32);
        jobs.push(j);
        durs.push(SimTime::from_secs(40_000));
    }
    let poisoned = Trace::new("select", jobs, durs, vec!["default".into()]).unwrap();
    let (other, _) = select_until(&poisoned, at);
    // The selector chose something, on scores that differ between candidates.
    assert!(honest.choices.len() >= 3, "{honest:?}");
    assert!(honest.choices.iter().any(|c| {
        let s: Vec<f64> = c.scores.iter().filter_map(|s| s.1).collect();
        s.iter().any(|x| (x - s[0]).abs() > 1.0)
    }));
    // What it saw and chose is the same in both worlds, to the last digit.
    assert_eq!(honest.choices, other.choices);
    assert_eq!(honest.rollout_events, other.rollout_events);
}

/// Never starts anything while another job runs: one job at a time.
struct OneAtATime;

impl Policy for OneAtATime {
    fn name(&self) -> &str {
        "one-at-a-time"
    }
    fn decide(&mut self, ctx: &DecisionContext<'_>) -> Result<Decision, PolicyError> {
        let mut d = Decision::default();
        if ctx.cluster().running().next().is_some() {
            return Ok(d);
        }
        if let Some(p) = ctx.pending().next() {
            let mut planner = ctx.planner();
            if let Some(tasks) = planner.place(p.spec, crate::cluster::FitStrategy::BestFit) {
                d.placements.push(crate::policy::Placement {
                    job: p.spec.id,
                    tasks,
                });
            }
        }
        Ok(d)
    }
}

fn constructed(n: &str) -> Result<Box<dyn Policy>, PolicyError> {
    match n {
        "slow" => Ok(Box::new(OneAtATime)),
        "fifo-a" | "fifo-b" => build_policy("fifo/best-fit", 0),
        other => build_policy(other, 0),
    }
}

fn run_select(candidates: &[&str], cfg: SelectConfig) -> (SimResult, crate::policy::SelectionLog) {
    let t = trace(240);
    let mut sel = Select::new(
        "select",
        candidates.iter().map(|c| c.to_string()).collect(),
        cfg,
        3,
        Arc::new(constructed),
    )
    .unwrap();
    let r = Simulator::new(&t, cluster(), &SimConfig::default())
        .unwrap()
        .run(&mut sel, &mut |_| {});
    let log = sel.log().clone();
    (r, log)
}

#[test]
fn the_selector_switches_to_the_better_policy() {
    let (r, log) = run_select(&["slow", "fifo-a"], select_cfg());
    let first = log.choices.first().expect("it chose");
    assert!(first.switched, "{first:?}");
    assert_eq!(first.follows, "fifo-a");
    assert!(first.why.contains("less job-time"), "{}", first.why);
    // It stays there, and most decisions were the better policy's.
    assert!(log.choices.iter().skip(1).all(|c| !c.switched), "{log:?}");
    assert!(log.decisions[1] > 4 * log.decisions[0], "{log:?}");
    let (slow, _) = {
        let t = trace(240);
        let r = Simulator::new(&t, cluster(), &SimConfig::default())
            .unwrap()
            .run(&mut OneAtATime, &mut |_| {});
        (r, ())
    };
    assert!(
        r.summary.avg_jct_s < 0.9 * slow.summary.avg_jct_s,
        "{} against {}",
        r.summary.avg_jct_s,
        slow.summary.avg_jct_s
    );
}

#[test]
fn the_selector_does_not_switch_on_noise() {
    // Two names for one policy: every rollout ties, it never switches.
    let (_, log) = run_select(&["fifo-a", "fifo-b"], select_cfg());
    assert!(!log.choices.is_empty());
    assert!(
        log.choices
            .iter()
            .all(|c| !c.switched && c.follows == "fifo-a")
    );
    // Quiet choices come less often: from 2 h apart to at most 4 epochs.
    let gaps: Vec<f64> = log
        .choices
        .windows(2)
        .map(|w| w[1].at_s - w[0].at_s)
        .collect();
    assert!(gaps.iter().any(|g| *g >= 4.0 * 2.0 * 3600.0), "{gaps:?}");
    // A margin the better policy cannot clear keeps it on the worse one.
    let stubborn = SelectConfig {
        hysteresis: 0.99,
        ..select_cfg()
    };
    let (_, log) = run_select(&["slow", "fifo-a"], stubborn);
    assert!(log.choices.iter().all(|c| !c.switched), "{log:?}");
    assert!(log.choices[0].why.contains("within the hysteresis"));
}

#[test]
fn a_selector_refuses_oracles_and_selectors_as_candidates() {
    let b = library_builder();
    let err = Select::new(
        "select",
        vec!["sjf-oracle/best-fit".into()],
        select_cfg(),
        0,
        Arc::clone(&b),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("upper bound"), "{err}");
    let err = Select::new(
        "select",
        vec!["select".into()],
        select_cfg(),
        0,
        Arc::clone(&b),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("cannot select a selector"), "{err}");
    let err = Select::new("select", vec!["nope/best-fit".into()], select_cfg(), 0, b)
        .unwrap_err()
        .to_string();
    assert!(err.contains("candidate nope/best-fit"), "{err}");
    let bad = SelectConfig {
        futures: 0,
        ..select_cfg()
    };
    let err = Select::new("select", vec![], bad, 0, library_builder())
        .unwrap_err()
        .to_string();
    assert!(err.contains("select.futures"), "{err}");
}
