//! Policy-improvement labels by lookahead (DAgger-style improvement rounds, issue #24).
//!
//! At a decision point, each action considered is scored by simulating ahead: the same
//! `futures` sampled futures for every action (common random numbers), each a fork of the
//! episode (`SchedEnv::fork_future`) on a trace whose unfinished jobs last as a
//! `DurationModel` draws them (`PredictedDurations`: from jobs seen to finish, never the true
//! durations) and whose jobs yet to arrive are sampled (`SchedEnv::predicted_future`: the
//! recent arrival rate, copies of recent jobs; never the episode's own future arrivals); the action is taken in the fork, then a rollout policy (the teacher, or the
//! learner) acts until `horizon_s` of sim time has passed. An action's score is its mean
//! return over the futures in Decima's `jobs` term (minus jobs in the system x time, in the
//! reward's time unit: over a whole episode, minus the sum of JCTs), whatever the
//! environment's reward weights; the label is the best-scoring action (ties: the first
//! considered), with its margin over the next best.
//!
//! Cost: `actions x futures` rollouts of `horizon_s` each, spread over `threads`.

use super::SchedEnv;
use super::env::EnvError;
use super::predicted::DurationModel;
use crate::job::Trace;
use crate::policy::Policy;
use crate::units::{JobId, SimTime};
use rand::SeedableRng;
use rand::rngs::StdRng;
use std::sync::Mutex;

/// How a state is labelled.
#[derive(Debug, Clone, PartialEq)]
pub struct LookaheadConfig {
    /// Futures sampled per state, shared by every action.
    pub futures: usize,
    /// Sim seconds each future runs past the state (> 0).
    pub horizon_s: f64,
    /// Seeds the futures' durations (same seed, same futures).
    pub seed: u64,
    /// Worker threads for the rollouts (0 or 1: the caller's thread).
    pub threads: usize,
}

impl LookaheadConfig {
    /// Checks every field; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.futures == 0 {
            return Err("futures must be at least 1".into());
        }
        match SimTime::from_secs_f64(self.horizon_s) {
            Some(h) if h > SimTime::ZERO => Ok(()),
            _ => Err(format!(
                "horizon_s must be a finite number of seconds > 0, got {}",
                self.horizon_s
            )),
        }
    }
}

/// A state's lookahead label.
#[derive(Debug, Clone, PartialEq)]
pub struct Label {
    /// The best-scoring action.
    pub action: usize,
    /// Each action considered with its mean return, in the order given.
    pub scores: Vec<(usize, f64)>,
    /// How much better the label scored than the next best (0 with one action or a tie).
    pub margin: f64,
}

/// Who acts in a future after the action being scored.
pub trait Rollout: Send {
    /// Sees the fork once, at the state being labelled, before the action is taken.
    fn start(&mut self, fork: &SchedEnv<'_>) -> Result<(), EnvError> {
        let _ = fork;
        Ok(())
    }
    /// The action to take now in `fork`.
    fn act(&mut self, fork: &SchedEnv<'_>) -> Result<usize, EnvError>;
}

/// Builds a fresh rollout policy for each future.
pub type RolloutFactory<'a> = dyn Fn() -> Result<Box<dyn Rollout>, EnvError> + Sync + 'a;

/// A heuristic teacher as the rollout policy: it acts as `SchedEnv::imitate` says. Built
/// afresh for each future, it learns at the state being labelled from every job finished so
/// far (a fork shows them all as just finished), which is what the episode's own teacher
/// learned from them; a teacher that also learns from other things (FGD's task mix of the
/// jobs it has seen waiting) starts from what it sees there.
pub struct TeacherRollout {
    teacher: Box<dyn Policy>,
}

impl std::fmt::Debug for TeacherRollout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("TeacherRollout")
            .field(&self.teacher.name())
            .finish()
    }
}

impl TeacherRollout {
    pub fn new(teacher: Box<dyn Policy>) -> Self {
        TeacherRollout { teacher }
    }
}

impl Rollout for TeacherRollout {
    fn start(&mut self, fork: &SchedEnv<'_>) -> Result<(), EnvError> {
        fork.imitate(self.teacher.as_mut()).map(|_| ())
    }
    fn act(&mut self, fork: &SchedEnv<'_>) -> Result<usize, EnvError> {
        fork.imitate(self.teacher.as_mut()).map(|(a, _)| a)
    }
}

/// Labels `env`'s decision point now: scores each of `actions` (legal, the preferred first:
/// it wins ties) over `cfg.futures` futures drawn from `durations`, each action followed by
/// `rollout`'s policy (see the module docs).
pub fn lookahead(
    env: &SchedEnv<'_>,
    actions: &[usize],
    durations: &dyn DurationModel,
    rollout: &RolloutFactory<'_>,
    cfg: &LookaheadConfig,
) -> Result<Label, EnvError> {
    cfg.validate().map_err(EnvError::Config)?;
    let obs = env.observation().ok_or(EnvError::EpisodeOver)?;
    if let Some(&action) = actions
        .iter()
        .find(|a| !obs.mask.get(**a).copied().unwrap_or(false))
    {
        return Err(EnvError::IllegalAction { action });
    }
    if actions.is_empty() {
        return Err(EnvError::Config(
            "lookahead needs an action to score".into(),
        ));
    }
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let futures: Vec<(Trace, Vec<JobId>)> = (0..cfg.futures)
        .map(|_| env.predicted_future(durations, cfg.horizon_s, &mut rng))
        .collect::<Result<_, _>>()?;
    let horizon = SimTime::from_secs_f64(cfg.horizon_s);
    let mut work = Vec::with_capacity(actions.len() * futures.len());
    for &action in actions {
        for (future, sources) in &futures {
            work.push((action, env.fork_future(future, sources, horizon)?));
        }
    }
    // In the order of `work`: action by action, future by future.
    let returns = run_all(work, rollout, cfg.threads)?;
    let sums: Vec<f64> = returns
        .chunks(futures.len())
        .map(|r| r.iter().sum())
        .collect();
    let scores: Vec<(usize, f64)> = actions
        .iter()
        .zip(&sums)
        .map(|(a, s)| (*a, s / futures.len() as f64))
        .collect();
    Ok(best(scores))
}

/// The first action with the highest score (a later one must beat it by more than rounding),
/// and its margin over the rest.
fn best(scores: Vec<(usize, f64)>) -> Label {
    let mut k = 0;
    for (i, (_, s)) in scores.iter().enumerate() {
        let top = scores[k].1;
        if *s > top + 1e-9 * top.abs().max(1.0) {
            k = i;
        }
    }
    let margin = scores
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != k)
        .map(|(_, (_, s))| scores[k].1 - s)
        .reduce(f64::min)
        .unwrap_or(0.0)
        .max(0.0);
    Label {
        action: scores[k].0,
        scores,
        margin,
    }
}

/// The return of each fork after taking its action and following `rollout`, in the order of
/// `work`, over `threads` workers.
fn run_all(
    work: Vec<(usize, SchedEnv<'_>)>,
    rollout: &RolloutFactory<'_>,
    threads: usize,
) -> Result<Vec<f64>, EnvError> {
    let n = work.len();
    let queue = Mutex::new(work.into_iter().enumerate());
    let out = Mutex::new(vec![0.0; n]);
    let worker = || -> Result<(), EnvError> {
        loop {
            let next = queue.lock().expect("no worker panics holding it").next();
            let Some((j, (action, fork))) = next else {
                return Ok(());
            };
            let r = play(fork, action, rollout)?;
            out.lock().expect("no worker panics holding it")[j] = r;
        }
    };
    let workers = threads.clamp(1, n.max(1));
    if workers == 1 {
        worker()?;
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..workers).map(|_| s.spawn(worker)).collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect::<Result<Vec<()>, EnvError>>()
        })?;
    }
    Ok(out.into_inner().expect("the workers are done"))
}

/// Takes `action` in `fork`, then follows a fresh rollout policy to the fork's end: the sum
/// of the `jobs` reward term.
fn play(
    mut fork: SchedEnv<'_>,
    action: usize,
    rollout: &RolloutFactory<'_>,
) -> Result<f64, EnvError> {
    let mut policy = rollout()?;
    policy.start(&fork)?;
    let mut step = fork.step(action)?;
    let mut total = step.info.terms.jobs;
    while !(step.terminated || step.truncated) {
        let a = policy.act(&fork)?;
        step = fork.step(a)?;
        total += step.info.terms.jobs;
    }
    Ok(total)
}

#[cfg(test)]
mod tests;
