//! The starvation bound in the simulator: whatever a policy decides, a job waiting past the
//! bound gets a reservation, starts, and is not preempted once started.

use super::*;
use crate::cluster::tests::uniform;
use crate::job::tests::job;
use crate::job::{JobSpec, TaskRequest, Trace};
use crate::policy::{Decision, DecisionContext, Policy, PolicyError, StarvationBound};
use crate::units::{JobId, SimTime};
use std::sync::Arc;

/// Starts every waiting job it can, first fit, except `victim`, which it never starts and
/// always tries to preempt; it also preempts whatever the guard started, and places other
/// jobs wherever they fit (on reserved nodes too). It notes the longest the victim had been
/// waiting at any decision.
struct Adversary {
    victim: JobId,
    longest: SimTime,
}

impl Adversary {
    fn new(victim: JobId) -> Self {
        Adversary {
            victim,
            longest: SimTime::ZERO,
        }
    }
}

impl Policy for Adversary {
    fn name(&self) -> &str {
        "adversary"
    }
    fn decide(&mut self, ctx: &DecisionContext<'_>) -> Result<Decision, PolicyError> {
        let mut d = Decision::default();
        let rt = ctx.runtime(self.victim);
        if rt.state == crate::policy::JobState::Pending {
            let since = rt.last_stop.unwrap_or(ctx.job(self.victim).submit);
            self.longest = self.longest.max(ctx.now().saturating_sub(since));
        }
        if ctx.cluster().is_running(self.victim) {
            d.preemptions.push(self.victim);
        }
        d.placements = super::tests::place_first_fit(ctx, |j| j.id != self.victim);
        Ok(d)
    }
}

/// One node of 4 GPUs. The victim (4 GPUs, 2 h) arrives at 100 s; before and after it, a
/// stream of 1-GPU jobs of 1 h, one every `gap_s` (at most 20 min), from 0 to 40 h
/// (`preemptible` or not): the node is never empty.
fn world_of(preemptible: bool, gap_s: u64) -> (Trace, JobId) {
    let mut jobs: Vec<(JobSpec, u64)> = Vec::new();
    for i in 0..40 * 3600 / gap_s {
        let mut s = job(&format!("s{i}"), i * gap_s + 1, TaskRequest::whole(1, 0, 0));
        s.preemptible = preemptible;
        jobs.push((s, 3600));
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

/// A stream every 15 min: the node runs 4 jobs at once, all it holds.
fn world() -> (Trace, JobId) {
    world_of(true, 900)
}

/// The adversary's run under `bound` (and `cfg`'s other settings): the result, the victim,
/// and the longest the victim had waited at a decision.
fn run_with(
    bound: StarvationBound,
    preemptible: bool,
    cfg: SimConfig,
) -> (SimResult, JobId, SimTime) {
    // Every 20 min: 3 jobs at once, so that the stream alone never waits past the bound (at
    // 15 min it fills the node, and once the victim took it back, stream jobs waited past the
    // bound in turn, each started ahead of the victim's next rescue).
    let (t, victim) = world_of(preemptible, 1200);
    let cfg = SimConfig {
        starvation_bound: bound,
        ..cfg
    };
    let mut adversary = Adversary::new(victim);
    let r = Simulator::new(&t, Arc::new(uniform(1, 4, "V100", 1000, 1000)), &cfg)
        .unwrap()
        .run(&mut adversary, &mut |_| {});
    (r, victim, adversary.longest)
}

fn run(bound: StarvationBound) -> (SimResult, JobId, SimTime) {
    run_with(bound, true, SimConfig::default())
}

#[test]
fn no_job_waits_past_the_bound_under_a_policy_that_never_schedules_it() {
    // Without the bound the victim never starts.
    let (r, victim, _) = run(StarvationBound::Off);
    assert_eq!(r.jobs[victim.index()].first_start, None);
    assert_eq!(r.summary.finished, r.summary.jobs - 1);
    // With a bound of 2 h: at the first decision past it (one every 20 min at most) the
    // guard preempts the 1-GPU jobs in its way and starts it. The adversary preempts it
    // again once its protection ends (restart and first checkpoint, 31 min), and each time
    // it waits past the bound the guard starts it again: it finishes, having never waited
    // at a decision more than the bound and 20 min.
    let bound_s = 7200;
    let (r, victim, longest) = run(StarvationBound::Secs(bound_s as f64));
    let rec = &r.jobs[victim.index()];
    let start = rec.first_start.expect("the victim started");
    let wait = start.saturating_sub(SimTime::from_secs(100));
    let most = SimTime::from_secs(bound_s + 1200);
    assert!(
        wait >= SimTime::from_secs(bound_s) && wait <= most,
        "waited {wait:?}"
    );
    assert!(longest <= most, "waited {longest:?} at a decision");
    assert!(rec.finish.is_some(), "the victim finished");
    assert_eq!(r.summary.finished, r.summary.jobs, "every job finished");
    assert!(rec.preemptions > 0, "preempted once its protection ended");
    assert!(r.summary.bound_vetoes > 0 && r.summary.bound_starts >= 2);
    assert_eq!(r.summary.rejected_decisions, 0);
}

fn no_checkpoints() -> SimConfig {
    SimConfig {
        checkpoint_interval_s: 0.0,
        ..SimConfig::default()
    }
}

#[test]
fn without_checkpoints_a_rescued_job_is_protected_to_its_end() {
    // A preemption would lose all it did: the guard's start is its only run.
    let cfg = no_checkpoints();
    let (r, victim, _) = run_with(StarvationBound::Secs(7200.0), true, cfg);
    let rec = &r.jobs[victim.index()];
    assert!(rec.finish.is_some());
    assert_eq!(rec.preemptions, 0, "never preempted once started");
    assert_eq!(r.summary.bound_starts, 1);
}

#[test]
fn where_nothing_may_be_preempted_the_node_drains_for_the_starving_job() {
    // The stream is not preemptible: at the bound the node is reserved (drained); the 1-GPU
    // jobs running then end within their hour, so it starts by the bound + 1 h 20 min
    // (without checkpoints, so that the victim, protected to its end, is never preempted).
    let cfg = no_checkpoints();
    let bound_s = 7200;
    let (r, victim, _) = run_with(StarvationBound::Secs(bound_s as f64), false, cfg);
    let rec = &r.jobs[victim.index()];
    let start = rec.first_start.expect("the victim started");
    let wait = start.saturating_sub(SimTime::from_secs(100));
    assert!(
        wait >= SimTime::from_secs(bound_s) && wait <= SimTime::from_secs(bound_s + 4800),
        "waited {wait:?}"
    );
    assert_eq!(r.summary.preemptions, 0);
    assert_eq!(r.summary.finished, r.summary.jobs);
}

/// One node of 4 GPUs: 20 1-GPU jobs of 1 h from 0 s (history for `auto`: a mean run of
/// 1 h), a burst of 40 at 6 h, the 4-GPU victim at 6 h + 100 s behind them, then a 1-GPU job
/// every 15 min from 6 h + 200 s to 60 h, so the node is never empty.
fn backlog_world() -> (Trace, JobId) {
    let mut jobs: Vec<(JobSpec, u64)> = Vec::new();
    let h = 3600;
    for i in 0..20u64 {
        jobs.push((job(&format!("h{i}"), i, TaskRequest::whole(1, 0, 0)), h));
    }
    for i in 0..40u64 {
        jobs.push((
            job(&format!("b{i}"), 6 * h + 1 + i, TaskRequest::whole(1, 0, 0)),
            h,
        ));
    }
    jobs.push((job("victim", 6 * h + 100, TaskRequest::whole(4, 0, 0)), h));
    for i in 0..216u64 {
        let at = 6 * h + 200 + i * 900;
        jobs.push((job(&format!("t{i}"), at, TaskRequest::whole(1, 0, 0)), h));
    }
    jobs.sort_by_key(|(j, _)| j.submit);
    let (specs, durs): (Vec<_>, Vec<_>) = jobs
        .into_iter()
        .map(|(j, d)| (j, SimTime::from_secs(d)))
        .unzip();
    let t = Trace::new("backlog", specs, durs, vec!["default".into()]).unwrap();
    let victim = t.jobs().iter().find(|j| j.name == "victim").unwrap().id;
    (t, victim)
}

#[test]
fn auto_allows_twice_the_submit_order_wait_and_still_bounds_it() {
    let (t, victim) = backlog_world();
    let wait = |bound| {
        let cfg = SimConfig {
            starvation_bound: bound,
            ..SimConfig::default()
        };
        let r = Simulator::new(&t, Arc::new(uniform(1, 4, "V100", 1000, 1000)), &cfg)
            .unwrap()
            .run(&mut Adversary::new(victim), &mut |_| {});
        let rec = &r.jobs[victim.index()];
        let start = rec.first_start.expect("the victim started");
        start.saturating_sub(t.job(victim).submit).secs_f64() / 3600.0
    };
    // The `auto` base: four times the 90th percentile of 1 h runs, at its histogram
    // bucket's upper edge (4.09 h). Behind it when it arrived: 4 GPUs running and 40 asked
    // for with its own, 40 beyond the cluster's 4, freed 4 per hour: a 10 h submit-order
    // wait, allowed twice. So it starts at the first decision (one every 15 min) once 24.09 h
    // have passed, the guard preempting what is in its way.
    let base_h = 4.0 * ((349.0f64 / 16.0).exp2() / 3_600_000.0);
    let auto = wait(StarvationBound::Auto);
    assert!(
        auto >= base_h + 20.0 && auto <= base_h + 20.0 + 0.25,
        "waited {auto} h"
    );
    // A fixed bound of the same base allows nothing for the backlog: past it, the burst
    // jobs ahead of the victim and the victim are started longest overdue first, the victim
    // at about the time the 40 jobs ahead of it would have run (10 h).
    let fixed = wait(StarvationBound::Secs(base_h * 3600.0));
    assert!((base_h..=11.25).contains(&fixed), "waited {fixed} h");
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
