//! `check_env`: a conformance checker in the spirit of Gymnasium's `env_checker`, run in tests
//! on every configuration.
//!
//! For each seed it plays two fresh environments with the same seed and the same seeded random
//! legal actions and checks: identical observations, rewards and flags (determinism); the mask
//! is never empty and always allows wait; a masked or out-of-range action is an error and
//! changes nothing; observations have the schema's shape, are finite and within
//! `FEATURE_BOUND`; rewards are finite; `terminated` and `truncated` never both; stepping
//! before `reset` and after the end is `EnvError::EpisodeOver`; a second `reset` with the seed
//! gives the first observation again.

use super::env::{EnvError, SchedEnv};
use super::features::{
    CANDIDATE_WIDTH, FEATURE_BOUND, GLOBAL_WIDTH, MAX_CANDIDATES, Observation, WAIT_ACTION,
};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// Steps after which an episode is taken to never end.
const MAX_CHECK_STEPS: u64 = 200_000;

/// A broken part of the contract, with where it broke.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CheckError {
    #[error("check_env, seed {seed}, step {step}: {what}")]
    Failed { seed: u64, step: u64, what: String },
    #[error("check_env: could not build or reset the environment: {0}")]
    Env(#[from] EnvError),
}

/// What the checker played.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckReport {
    pub episodes: u64,
    pub steps: u64,
    pub terminated: u64,
    pub truncated: u64,
}

fn check_obs(obs: &Observation) -> Result<(), String> {
    if obs.candidates.len() != MAX_CANDIDATES * CANDIDATE_WIDTH
        || obs.global.len() != GLOBAL_WIDTH
        || obs.mask.len() != MAX_CANDIDATES
    {
        return Err("observation shape differs from the schema".into());
    }
    if !obs.mask[WAIT_ACTION] && !obs.mask[..WAIT_ACTION].iter().any(|m| *m) {
        return Err("no action is legal (wait is masked with no candidate)".into());
    }
    let bad = obs
        .candidates
        .iter()
        .chain(&obs.global)
        .find(|x| !x.is_finite() || x.abs() > FEATURE_BOUND);
    if let Some(x) = bad {
        return Err(format!("feature {x} is not finite or outside the bound"));
    }
    for (a, legal) in obs.mask.iter().enumerate() {
        if !legal && obs.row(a).iter().any(|x| *x != 0.0) {
            return Err(format!("masked row {a} is not zero padding"));
        }
    }
    Ok(())
}

/// Plays one episode per seed on two environments from `make_env` in lockstep.
pub fn check_env<'t>(
    make_env: impl Fn() -> Result<SchedEnv<'t>, EnvError>,
    seeds: &[u64],
) -> Result<CheckReport, CheckError> {
    let mut report = CheckReport::default();
    for &seed in seeds {
        let fail = |step: u64, what: String| CheckError::Failed { seed, step, what };
        let (mut a, mut b) = (make_env()?, make_env()?);
        if a.step(WAIT_ACTION) != Err(EnvError::EpisodeOver) {
            return Err(fail(0, "step before reset is not EpisodeOver".into()));
        }
        let (obs_a, _) = a.reset(seed)?;
        let (obs_b, _) = b.reset(seed)?;
        if obs_a != obs_b {
            return Err(fail(0, "reset with one seed gave two observations".into()));
        }
        check_obs(&obs_a).map_err(|w| fail(0, w))?;
        let first = obs_a.clone();
        let mut obs = obs_a;
        let mut rng = StdRng::seed_from_u64(seed);
        let mut step = 0;
        loop {
            step += 1;
            if step > MAX_CHECK_STEPS {
                return Err(fail(step, "the episode does not end".into()));
            }
            // A masked action (and one out of range) is refused and changes nothing.
            for bad in [obs.mask.iter().position(|m| !m), Some(MAX_CANDIDATES)]
                .into_iter()
                .flatten()
            {
                if !matches!(a.step(bad), Err(EnvError::IllegalAction { .. })) {
                    return Err(fail(step, format!("illegal action {bad} was not refused")));
                }
            }
            if a.observation().as_ref() != Some(&obs) {
                return Err(fail(
                    step,
                    "a refused action changed the observation".into(),
                ));
            }
            let legal: Vec<usize> = obs.legal_actions().collect();
            let action = legal[rng.random_range(0..legal.len())];
            let sa = a.step(action).map_err(|e| fail(step, e.to_string()))?;
            let sb = b.step(action).map_err(|e| fail(step, e.to_string()))?;
            if sa != sb {
                return Err(fail(
                    step,
                    "same seed, same actions, different steps".into(),
                ));
            }
            if !sa.reward.is_finite() {
                return Err(fail(step, format!("reward {} is not finite", sa.reward)));
            }
            if sa.terminated && sa.truncated {
                return Err(fail(step, "terminated and truncated together".into()));
            }
            check_obs(&sa.obs).map_err(|w| fail(step, w))?;
            if sa.terminated || sa.truncated {
                if a.step(WAIT_ACTION) != Err(EnvError::EpisodeOver) {
                    return Err(fail(step, "step after the end is not EpisodeOver".into()));
                }
                report.terminated += u64::from(sa.terminated);
                report.truncated += u64::from(sa.truncated);
                break;
            }
            obs = sa.obs;
        }
        // Reset replays: the same seed on a used environment gives the first observation again.
        if a.reset(seed)?.0 != first {
            return Err(fail(
                step,
                "a second reset with the seed differs from the first".into(),
            ));
        }
        report.episodes += 1;
        report.steps += step;
    }
    Ok(report)
}
