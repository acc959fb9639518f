//! The starvation bound in the simulator: whatever a policy decides, a job waiting past the
//! bound gets a reservation, starts, and is not preempted once started.

use super::*;
use crate::cluster::tests::uniform;
use crate::job::tests::job;
use crate::job::{JobSpec, TaskRequest, Trace};
use crate::policy::{Decision, DecisionContext, Placement, Policy, PolicyError, StarvationBound};
use crate::units::{JobId, SimTime};
use std::sync::Arc;

/// Starts every waiting job it can, first fit, except `victim`, which it never starts and
/// always tries to preempt; it also preempts whatever the guard started, and places other
/// jobs wherever they fit (on reserved nodes too).
struct Adversary {
    victim: JobId,
}

impl Policy for Adversary {
    fn name(&self) -> &str {
        "adversary"
    }
    fn decide(&mut self, ctx: &DecisionContext<'_>) -> Result<Decision, PolicyError> {
        let mut d = Decision::default();
        if ctx.cluster().is_running(self.victim) {
            d.preemptions.push(self.victim);
        }
        let mut planner = ctx.planner();
        for p in ctx.pending() {
            if p.spec.id == self.victim {
                continue;
            }
            if let Some(tasks) = planner.place(p.spec, crate::cluster::FitStrategy::FirstFit) {
                d.placements.push(Placement {
                    job: p.spec.id,
                    tasks,
                });
            }
        }
        Ok(d)
    }
}

/// One node of 4 GPUs. The victim (4 GPUs) arrives at 100 s; before and after it, a stream
/// of 1-GPU jobs of 1 h, one every 15 min, from 0 to 40 h: the node is never empty.
fn world() -> (Trace, JobId) {
    let mut jobs: Vec<(JobSpec, u64)> = Vec::new();
    for i in 0..160u64 {
        jobs.push((
            job(&format!("s{i}"), i * 900 + 1, TaskRequest::whole(1, 0, 0)),
            3600,
        ));
    }
    jobs.push((job("victim", 100, TaskRequest::whole(4, 0, 0)), 7200));
    jobs.sort_by_key(|(j, _)| j.submit);
    let (specs, durs): (Vec<_>, Vec<_>) = jobs
        .into_iter()
        .map(|(j, d)| (j, SimTime::from_secs(d)))
        .unzip();
    let t = Trace::new("starve", specs, durs, vec!["default".into()]).unwrap();
    let victim = t.jobs().iter().find(|j| j.name == "victim").unwrap().id;
    (t, victim)
}

fn run(bound: StarvationBound) -> (SimResult, JobId) {
    let (t, victim) = world();
    let cfg = SimConfig {
        starvation_bound: bound,
        ..SimConfig::default()
    };
    let r = Simulator::new(&t, Arc::new(uniform(1, 4, "V100", 1000, 1000)), &cfg)
        .unwrap()
        .run(&mut Adversary { victim }, &mut |_| {});
    (r, victim)
}

#[test]
fn no_job_waits_past_the_bound_under_a_policy_that_never_schedules_it() {
    // Without the bound the victim never starts.
    let (r, victim) = run(StarvationBound::Off);
    assert_eq!(r.jobs[victim.index()].first_start, None);
    assert_eq!(r.summary.finished, r.summary.jobs - 1);
    // With a bound of 2 h: at 2 h after its submit the node is reserved (drained); the
    // 1-GPU jobs running then end within their hour, so it starts by 3 h + 100 s, and
    // the adversary's preemptions of it are refused.
    let bound_s = 7200;
    let (r, victim) = run(StarvationBound::Secs(bound_s as f64));
    let rec = &r.jobs[victim.index()];
    let start = rec.first_start.expect("the victim started");
    let wait = start.saturating_sub(SimTime::from_secs(100));
    assert!(
        wait >= SimTime::from_secs(bound_s) && wait <= SimTime::from_secs(bound_s + 3600),
        "waited {wait:?}"
    );
    assert_eq!(r.summary.finished, r.summary.jobs, "every job finished");
    assert_eq!(rec.preemptions, 0, "never preempted once started");
    assert!(r.summary.bound_vetoes > 0 && r.summary.bound_starts == 1);
    assert_eq!(r.summary.rejected_decisions, 0);
}

#[test]
fn a_policy_that_starts_the_starving_job_itself_is_not_overruled() {
    // FIFO with EASY never starves anyone here: with a generous bound the guard does nothing
    // and the run is the same as without it.
    let (t, _) = world();
    let spec = Arc::new(uniform(1, 4, "V100", 1000, 1000));
    let run = |bound| {
        let cfg = SimConfig {
            starvation_bound: bound,
            ..SimConfig::default()
        };
        let mut p = crate::policy::build_policy("fifo/first-fit", 0).unwrap();
        Simulator::new(&t, Arc::clone(&spec), &cfg)
            .unwrap()
            .run(p.as_mut(), &mut |_| {})
            .summary
    };
    let off = run(StarvationBound::Off);
    let on = run(StarvationBound::Secs(30.0 * 86400.0));
    assert_eq!(
        (on.avg_jct_s, on.bound_vetoes, on.bound_starts),
        (off.avg_jct_s, 0, 0)
    );
}

#[test]
fn bounds_parse_and_bad_ones_are_named() {
    assert_eq!(StarvationBound::parse("auto"), Ok(StarvationBound::Auto));
    assert_eq!(StarvationBound::parse("off"), Ok(StarvationBound::Off));
    assert_eq!(
        StarvationBound::parse("3600"),
        Ok(StarvationBound::Secs(3600.0))
    );
    for bad in ["-1", "0", "soon", "NaN"] {
        let err = StarvationBound::parse(bad).unwrap_err();
        assert!(err.contains(bad), "{err}");
    }
    let cfg: SimConfig = toml::from_str("starvation_bound = 7200").unwrap();
    assert_eq!(cfg.starvation_bound, StarvationBound::Secs(7200.0));
    let cfg: SimConfig = toml::from_str("starvation_bound = \"off\"").unwrap();
    assert_eq!(cfg.starvation_bound, StarvationBound::Off);
    assert!(toml::from_str::<SimConfig>("starvation_bound = \"never\"").is_err());
}
