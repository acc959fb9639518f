//! `select`: a meta-policy that follows, epoch by epoch, whichever of its candidate policies
//! does best when each is rolled forward from the present over the same sampled futures
//! (Chang, Givan and Chong's parallel rollout, at the level of whole policies: in
//! expectation no worse than the best candidate when the futures are right).
//!
//! Every `epoch_s` (at the first decision at or after it), where the world can be rolled
//! forward (`DecisionContext::lookahead`: the simulator; a snapshot cannot) and at least
//! `min_history` jobs have arrived, it draws `futures` futures of `horizon_s` and rolls each
//! candidate, built afresh, over every one of them (common random numbers). A candidate's
//! score is its mean job-time in the system over the horizon (jobs x seconds: over a whole
//! run, the sum of JCTs). It switches from the policy it follows only to one whose mean is
//! lower by more than `hysteresis` of the followed one's and by more than the paired
//! differences' standard error (noise does not make it switch). Between epochs it follows.
//! Where every candidate does exactly the same on the first future (nobody waits whom they
//! would treat differently), the other futures are not rolled; while the followed policy
//! stays within the hysteresis of the best, choices come less often (up to `MAX_BACKOFF`
//! epochs apart).
//!
//! The futures never read the truth: a waiting or running job's total run time is drawn from
//! the censored (Kaplan-Meier) estimate of finished jobs' run times given the service it has
//! attained (`PredictedDurations::censored`; before any job finished, the user's estimate or a
//! prior); arrivals are a Poisson process at the rate of the last `history_jobs` arrivals
//! (counted over at least the horizon, so that a burst is not taken for a rate), each a copy
//! of one of those jobs, its duration drawn as a fresh job's. Jobs that have not
//! arrived are never looked at.

use super::lookahead::{Arrival, Future, Lookahead};
use super::{Decision, DecisionContext, Policy, PolicyError};
use crate::gym::{DurationModel, PredictedDurations};
use crate::policy::JobState;
use crate::units::{JobId, SimTime};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;

/// How many of the latest arrived jobs sampled arrivals are fitted to, by default.
pub const ARRIVAL_HISTORY_JOBS: usize = 500;

/// The selector's knobs (`[select]` in a policy config file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SelectConfig {
    /// Candidate policies, by name (`rl:PATH` where learned policies can be built). Empty:
    /// the library's families for the cluster (`Select::DEFAULT_UNTYPED` or
    /// `Select::DEFAULT_TYPED` where a throughput table is in use). A name
    /// `select:A+B+...` gives them instead.
    pub candidates: Vec<String>,
    /// How often it re-chooses, sim seconds.
    pub epoch_s: f64,
    /// Futures drawn per epoch, shared by every candidate.
    pub futures: usize,
    /// How far each rollout runs, sim seconds.
    pub horizon_s: f64,
    /// The share of the followed policy's score another must beat it by to be followed.
    pub hysteresis: f64,
    /// Arrivals are fitted to this many of the latest arrived jobs.
    pub history_jobs: usize,
    /// No choosing before this many jobs have arrived (the first candidate is followed).
    pub min_history: usize,
    /// Mean run time before any job finished, seconds (the futures' prior).
    pub prior_mean_s: f64,
}

impl Default for SelectConfig {
    fn default() -> Self {
        SelectConfig {
            candidates: Vec::new(),
            epoch_s: 6.0 * 3600.0,
            futures: 3,
            horizon_s: 6.0 * 3600.0,
            hysteresis: 0.02,
            history_jobs: ARRIVAL_HISTORY_JOBS,
            min_history: 20,
            prior_mean_s: PredictedDurations::DEFAULT_PRIOR_MEAN_S,
        }
    }
}

impl SelectConfig {
    /// Checks every field; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        let secs = |name: &str, v: f64| -> Result<(), String> {
            match SimTime::from_secs_f64(v) {
                Some(t) if t > SimTime::ZERO => Ok(()),
                _ => Err(format!(
                    "select.{name} must be a finite number of seconds > 0, got {v}"
                )),
            }
        };
        secs("epoch_s", self.epoch_s)?;
        secs("horizon_s", self.horizon_s)?;
        secs("prior_mean_s", self.prior_mean_s)?;
        if self.futures == 0 {
            return Err("select.futures must be at least 1".into());
        }
        if !(0.0..1.0).contains(&self.hysteresis) {
            return Err(format!(
                "select.hysteresis must be in [0, 1), got {}",
                self.hysteresis
            ));
        }
        if self.history_jobs < 2 {
            return Err("select.history_jobs must be at least 2".into());
        }
        Ok(())
    }
}

/// Builds a candidate by name (the registry, or the harness's, which knows `rl:`).
pub type PolicyBuilder =
    Arc<dyn Fn(&str) -> Result<Box<dyn Policy>, PolicyError> + Send + Sync + 'static>;

/// One epoch's choice.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Choice {
    pub at_s: f64,
    /// The candidate followed from here.
    pub follows: String,
    pub switched: bool,
    /// Each candidate's mean job-time in the system over the futures (jobs x s; `None`: its
    /// rollout failed).
    pub scores: Vec<(String, Option<f64>)>,
    /// Why it follows what it follows, in words.
    pub why: String,
}

/// What a selector did over a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SelectionLog {
    pub candidates: Vec<String>,
    pub choices: Vec<Choice>,
    /// Decisions taken, per candidate followed (in `candidates` order).
    pub decisions: Vec<u64>,
    pub rollouts: u64,
    /// Simulator events the rollouts processed.
    pub rollout_events: u64,
    /// Choices cut short because every candidate did exactly the same on the first future.
    pub tied_epochs: u64,
    /// Wall seconds spent choosing (sampling and rollouts): reported, never decided on.
    pub wall_s: f64,
}

impl SelectionLog {
    /// One line for a run's report, e.g. "followed sjf/best-fit 80% of decisions, ... ;
    /// 3 switches over 40 epochs; 480 rollouts, 2.1 s".
    pub fn line(&self) -> String {
        let total: u64 = self.decisions.iter().sum::<u64>().max(1);
        let mut parts: Vec<(u64, &str)> = self
            .decisions
            .iter()
            .zip(&self.candidates)
            .filter(|(d, _)| **d > 0)
            .map(|(d, c)| (*d, c.as_str()))
            .collect();
        parts.sort_by_key(|p| std::cmp::Reverse(p.0));
        let followed: Vec<String> = parts
            .iter()
            .map(|(d, c)| format!("{c} {:.0}%", 100.0 * *d as f64 / total as f64))
            .collect();
        let switches = self.choices.iter().filter(|c| c.switched).count();
        format!(
            "followed {} of decisions; {switches} switch(es) over {} epoch(s); {} rollouts, \
             {:.2} s",
            followed.join(", "),
            self.choices.len(),
            self.rollouts,
            self.wall_s
        )
    }
}

/// Total run times for a sampled future of the `arrived` jobs (ids `0..arrived`) at `ctx`: a
/// finished job's observed run time, a draw of `model` given its attained service for a
/// waiting or running one (more than that), 0 for a skipped one.
pub fn sample_durations(
    ctx: &DecisionContext<'_>,
    arrived: usize,
    model: &dyn DurationModel,
    rng: &mut StdRng,
) -> Vec<SimTime> {
    (0..arrived)
        .map(|i| {
            let id = JobId(i as u32);
            let rt = ctx.runtime(id);
            match rt.state {
                JobState::Finished => SimTime(rt.attained_ms),
                JobState::Rejected | JobState::NotArrived => SimTime::ZERO,
                JobState::Pending | JobState::Running => {
                    let attained = ctx.attained_ms(id);
                    model
                        .total(ctx.job(id), attained, rng)
                        .max(SimTime(attained.saturating_add(1)))
                }
            }
        })
        .collect()
}

/// Arrivals for a sampled future from `ctx` on, over `horizon_s`: a Poisson process at the
/// rate of the latest `history_jobs` of the `arrived` jobs (skipped ones aside), counted over
/// at least the horizon (a burst just seen is not a rate to hold for hours: a future holds
/// no more arrivals than that history, in expectation), each a copy of one of those jobs,
/// drawn uniformly, lasting a draw of `durations` for a fresh job. Reads nothing of jobs that
/// have not arrived.
pub fn sample_arrivals(
    ctx: &DecisionContext<'_>,
    arrived: usize,
    history_jobs: usize,
    horizon_s: f64,
    durations: &dyn DurationModel,
    rng: &mut StdRng,
) -> Vec<Arrival> {
    let mut window: Vec<JobId> = Vec::new();
    for i in (0..arrived).rev() {
        let id = JobId(i as u32);
        if ctx.runtime(id).state != JobState::Rejected {
            window.push(id);
            if window.len() >= history_jobs {
                break;
            }
        }
    }
    let now = ctx.now();
    let mut arrivals: Vec<Arrival> = Vec::new();
    let Some(first) = window.last() else {
        return arrivals;
    };
    let span_ms = (now.saturating_sub(ctx.job(*first).submit).ms() as f64).max(horizon_s * 1000.0);
    let rate_per_ms = window.len() as f64 / span_ms;
    let end = now.ms() as f64 + horizon_s * 1000.0;
    let mut t = now.ms() as f64;
    loop {
        let u: f64 = rng.random();
        t += -(1.0 - u).ln() / rate_per_ms;
        if t > end {
            return arrivals;
        }
        let source = window[rng.random_range(0..window.len())];
        let duration = durations.total(ctx.job(source), 0, rng);
        let submit = SimTime((t.ceil() as u64).max(now.ms() + 1));
        let submit = arrivals.last().map_or(submit, |a| submit.max(a.submit));
        arrivals.push(Arrival {
            source,
            submit,
            duration,
        });
    }
}

/// The meta-policy (see the module docs).
pub struct Select {
    name: String,
    cfg: SelectConfig,
    candidates: Vec<String>,
    build: PolicyBuilder,
    acts_without_queue: bool,
    acts_every_round: bool,
    current: usize,
    active: Option<Box<dyn Policy>>,
    /// Show the followed policy every finished job at its next decision (it was just built).
    replay: bool,
    next_epoch: Option<SimTime>,
    /// Epochs until the next choice (doubles while choices are quiet).
    backoff: u32,
    durations: PredictedDurations,
    finished: Vec<JobId>,
    rng: StdRng,
    log: SelectionLog,
}

impl std::fmt::Debug for Select {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Select")
            .field("name", &self.name)
            .field("candidates", &self.candidates)
            .field("current", &self.current)
            .finish()
    }
}

impl Select {
    /// The library's families on a cluster without a throughput table.
    pub const DEFAULT_UNTYPED: [&'static str; 4] = [
        "sjf/best-fit",
        "fifo/best-fit",
        "tiresias/best-fit/las-preempt",
        "gittins/best-fit",
    ];
    /// The same families placing typed jobs where they run fastest.
    pub const DEFAULT_TYPED: [&'static str; 4] = [
        "sjf/fastest",
        "fifo/fastest",
        "tiresias/fastest/las-preempt",
        "gittins/fastest",
    ];

    /// The most epochs between two choices while the followed policy keeps scoring within
    /// the hysteresis of the best.
    pub const MAX_BACKOFF: u32 = 4;

    /// The candidates a name gives: `select` (none: the config's, else the defaults) or
    /// `select:A+B+...`; `None` for a name that is not a selector's.
    pub fn parse_name(name: &str) -> Option<Vec<String>> {
        let name = name.trim();
        if name == "select" {
            return Some(Vec::new());
        }
        let list = name.strip_prefix("select:")?;
        Some(
            list.split('+')
                .map(|c| c.trim().to_string())
                .filter(|c| !c.is_empty())
                .collect(),
        )
    }

    /// A selector named `name` over `candidates` (empty: `cfg.candidates`, else the library's
    /// defaults, chosen at the first decision), each built by `build`. Every named candidate
    /// is built once here, so a bad name fails now; a selector or an oracle as a candidate is
    /// refused.
    pub fn new(
        name: &str,
        candidates: Vec<String>,
        cfg: SelectConfig,
        seed: u64,
        build: PolicyBuilder,
    ) -> Result<Select, PolicyError> {
        let refuse = |message: String| PolicyError::UnknownName {
            name: name.to_string(),
            hint: message,
        };
        cfg.validate().map_err(&refuse)?;
        let candidates = if candidates.is_empty() {
            cfg.candidates.clone()
        } else {
            candidates
        };
        let (mut acts_without_queue, mut acts_every_round) = (false, false);
        for c in &candidates {
            if Select::parse_name(c).is_some() {
                return Err(refuse(format!("a selector cannot select a selector ({c})")));
            }
            if c.split('/').any(|part| part.ends_with("-oracle")) {
                return Err(refuse(format!(
                    "{c} reads true durations: an oracle is an upper bound, not a candidate"
                )));
            }
            let p = build(c).map_err(|e| refuse(format!("candidate {c}: {e}")))?;
            acts_without_queue |= p.acts_without_queue();
            acts_every_round |= p.acts_every_round();
        }
        Ok(Select {
            name: name.trim().to_string(),
            durations: PredictedDurations::censored(cfg.prior_mean_s),
            cfg,
            log: SelectionLog {
                decisions: vec![0; candidates.len()],
                candidates: candidates.clone(),
                ..SelectionLog::default()
            },
            candidates,
            build,
            acts_without_queue,
            acts_every_round,
            current: 0,
            active: None,
            replay: false,
            next_epoch: None,
            backoff: 1,
            finished: Vec::new(),
            rng: StdRng::seed_from_u64(seed ^ 0x5e1e_c7ed),
        })
    }

    /// What it did so far.
    pub fn log(&self) -> &SelectionLog {
        &self.log
    }

    /// The candidate it follows now.
    pub fn follows(&self) -> Option<&str> {
        self.candidates.get(self.current).map(String::as_str)
    }

    /// The defaults, once the first decision shows whether a throughput table is in use.
    fn resolve_candidates(&mut self, ctx: &DecisionContext<'_>) {
        if !self.candidates.is_empty() {
            return;
        }
        let names = if ctx.throughputs().is_some() {
            Select::DEFAULT_TYPED
        } else {
            Select::DEFAULT_UNTYPED
        };
        self.candidates = names.iter().map(|s| s.to_string()).collect();
        self.log.candidates = self.candidates.clone();
        self.log.decisions = vec![0; self.candidates.len()];
    }

    /// A future drawn from what a scheduler knows at `ctx` (see the module docs).
    fn sample_future(&mut self, ctx: &DecisionContext<'_>, arrived: usize) -> Future {
        let rng = &mut self.rng;
        let durations = sample_durations(ctx, arrived, &self.durations, rng);
        let arrivals = sample_arrivals(
            ctx,
            arrived,
            self.cfg.history_jobs,
            self.cfg.horizon_s,
            &self.durations,
            rng,
        );
        Future {
            durations,
            arrivals,
        }
    }

    /// Rolls every candidate over the same futures; follows the best by the switching rule.
    fn choose(&mut self, ctx: &DecisionContext<'_>, world: &dyn Lookahead) {
        let wall = Instant::now();
        let horizon = SimTime::from_secs_f64(self.cfg.horizon_s).unwrap_or(SimTime(1));
        let arrived = world.arrived();
        let futures: Vec<Future> = (0..self.cfg.futures)
            .map(|_| self.sample_future(ctx, arrived))
            .collect();
        // scores[candidate][future]; `None`: a rollout of it failed.
        let mut scores: Vec<Option<Vec<f64>>> =
            vec![Some(Vec::with_capacity(futures.len())); self.candidates.len()];
        for future in &futures {
            let built: Vec<Result<Box<dyn Policy>, PolicyError>> =
                self.candidates.iter().map(|n| (self.build)(n)).collect();
            let ok: Vec<usize> = (0..built.len()).filter(|i| built[*i].is_ok()).collect();
            let mut policies: Vec<Box<dyn Policy>> = built.into_iter().flatten().collect();
            let runs = world.rollouts(future, &mut policies, horizon);
            self.log.rollouts += policies.len() as u64;
            let mut got: Vec<Option<f64>> = vec![None; self.candidates.len()];
            if let Ok(runs) = runs {
                for (i, run) in ok.iter().zip(runs) {
                    if let Ok(r) = run {
                        self.log.rollout_events += r.events;
                        got[*i] = Some(r.cost());
                    }
                }
            }
            // Every candidate did exactly the same on this future: from this state they act
            // alike (nothing waits that one would order or place otherwise), and the other
            // futures would most likely say so again; they are not rolled.
            let tie = got.iter().all(|g| g.is_some() && *g == got[0]);
            for (s, g) in scores.iter_mut().zip(got) {
                match (s.as_mut(), g) {
                    (Some(v), Some(g)) => v.push(g),
                    _ => *s = None,
                }
            }
            if tie {
                self.log.tied_epochs += 1;
                break;
            }
        }
        let mean = |v: &Vec<f64>| v.iter().sum::<f64>() / v.len().max(1) as f64;
        let means: Vec<Option<f64>> = scores.iter().map(|s| s.as_ref().map(mean)).collect();
        let mut best = self.current;
        for (i, m) in means.iter().enumerate() {
            if let Some(m) = m
                && means[best].is_none_or(|b| *m < b)
            {
                best = i;
            }
        }
        let (switched, why) = match (&scores[self.current], &scores[best]) {
            _ if best == self.current => (false, "it scores best".to_string()),
            (None, Some(_)) => (
                true,
                format!("{}'s rollouts failed", self.candidates[self.current]),
            ),
            (Some(cur), Some(b)) => {
                let d: Vec<f64> = cur.iter().zip(b).map(|(c, b)| c - b).collect();
                let n = d.len() as f64;
                let md = mean(&d);
                let se = if d.len() > 1 {
                    (d.iter().map(|x| (x - md).powi(2)).sum::<f64>() / (n - 1.0) / n).sqrt()
                } else {
                    0.0
                };
                let margin = self.cfg.hysteresis * mean(cur);
                if md > margin && md > se {
                    (
                        true,
                        format!(
                            "{} scores {:.1}% less job-time (paired difference {:.0} s, \
                             standard error {:.0} s)",
                            self.candidates[best],
                            100.0 * md / mean(cur).max(f64::MIN_POSITIVE),
                            md,
                            se
                        ),
                    )
                } else {
                    (
                        false,
                        format!(
                            "{} scores better by {:.0} s, within the hysteresis ({:.0} s) or \
                             the noise (standard error {:.0} s)",
                            self.candidates[best], md, margin, se
                        ),
                    )
                }
            }
            (_, None) => (false, "no candidate's rollouts succeeded".to_string()),
        };
        // Quiet: no candidate beats the followed one by the hysteresis margin (the regime
        // holds): the next choice comes later, up to `MAX_BACKOFF` epochs; any other
        // outcome brings it back to one.
        let followed = means[self.current];
        let quiet = !switched
            && followed.is_some_and(|f| {
                means
                    .iter()
                    .flatten()
                    .all(|m| f - m <= self.cfg.hysteresis * f)
            });
        self.backoff = if quiet {
            (self.backoff * 2).min(Select::MAX_BACKOFF)
        } else {
            1
        };
        if switched {
            self.current = best;
            self.active = None;
        }
        self.log.choices.push(Choice {
            at_s: ctx.now().secs_f64(),
            follows: self.candidates[self.current].clone(),
            switched,
            scores: self.candidates.iter().cloned().zip(means).collect(),
            why,
        });
        self.log.wall_s += wall.elapsed().as_secs_f64();
    }
}

impl Policy for Select {
    fn name(&self) -> &str {
        &self.name
    }

    fn acts_without_queue(&self) -> bool {
        self.acts_without_queue
    }

    fn acts_every_round(&self) -> bool {
        self.acts_every_round
    }

    fn selection(&self) -> Option<&SelectionLog> {
        Some(&self.log)
    }

    fn decide(&mut self, ctx: &DecisionContext<'_>) -> Result<Decision, PolicyError> {
        self.resolve_candidates(ctx);
        self.finished.extend_from_slice(ctx.recently_finished());
        {
            let cluster = ctx.cluster();
            self.durations
                .observe(ctx, cluster.running().map(|a| a.job));
        }
        if let Some(world) = ctx.lookahead()
            && self.next_epoch.is_none_or(|e| ctx.now() >= e)
            && world.arrived() >= self.cfg.min_history
        {
            self.choose(ctx, world);
            let epoch = SimTime::from_secs_f64(self.cfg.epoch_s * self.backoff as f64)
                .unwrap_or(SimTime(1));
            self.next_epoch = Some(ctx.now().saturating_add(epoch));
        }
        if self.active.is_none() {
            self.active = Some((self.build)(&self.candidates[self.current])?);
            // A policy built mid-run learns what the followed one learned: every finished job.
            self.replay = !self.finished.is_empty();
        }
        self.log.decisions[self.current] += 1;
        let active = self.active.as_mut().expect("built above");
        if std::mem::take(&mut self.replay) {
            let replayed = ctx.clone().with_recently_finished(&self.finished);
            active.decide(&replayed)
        } else {
            active.decide(ctx)
        }
    }
}
