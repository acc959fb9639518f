//! Cheap, deterministic episode roll-outs of `SchedEnv`, so that a measurement is the
//! environment's and not the agent's: `lachesis bench env` and the Python package's speed
//! bench time them side by side with their own.

use super::env::{EnvConfig, EnvError, SchedEnv};
use super::features::{Observation, WAIT_ACTION};
use crate::cluster::ClusterSpec;
use crate::job::Trace;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::sync::Arc;

/// A cheap deterministic way to pick an action, so that the figure is the environment's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// The first legal candidate; wait when there is none.
    FirstLegal,
    /// Uniform over the legal actions, wait included (seeded).
    Random,
}

impl Rule {
    pub fn name(self) -> &'static str {
        match self {
            Rule::FirstLegal => "first-legal",
            Rule::Random => "random-legal",
        }
    }

    pub fn act(self, obs: &Observation, rng: &mut StdRng) -> usize {
        match self {
            Rule::FirstLegal => obs
                .legal_actions()
                .find(|a| *a != WAIT_ACTION)
                .unwrap_or(WAIT_ACTION),
            Rule::Random => {
                let legal = obs.mask.iter().filter(|m| **m).count();
                let k = rng.random_range(0..legal);
                obs.legal_actions().nth(k).expect("k counts legal actions")
            }
        }
    }
}

/// What a set of episodes did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub steps: u64,
    pub episodes: u64,
    /// Legal non-wait actions summed over the observations acted on.
    pub candidates: u64,
    /// FNV-1a (by 32-bit words) over every observation and reward: equal across builds when
    /// behaviour is.
    pub checksum: u64,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a's step, a 32-bit word at a time.
fn fnv(h: u64, word: u32) -> u64 {
    (h ^ u64::from(word)).wrapping_mul(0x0100_0000_01b3)
}

fn hash_obs(mut h: u64, obs: &Observation) -> u64 {
    for x in obs.candidates.iter().chain(&obs.global) {
        h = fnv(h, x.to_bits());
    }
    obs.mask.iter().fold(h, |h, m| fnv(h, u32::from(*m)))
}

/// Plays one episode per window with `rule`; hashes what it sees when `hash` is set (the
/// untimed warm-up pass), so the timed passes measure the environment alone.
pub fn play(
    pool: &[Trace],
    spec: &Arc<ClusterSpec>,
    cfg: &EnvConfig,
    rule: Rule,
    seed: u64,
    hash: bool,
) -> Result<Tally, EnvError> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut t = Tally {
        checksum: FNV_OFFSET,
        ..Tally::default()
    };
    for (i, window) in pool.iter().enumerate() {
        let mut env = SchedEnv::new(window, Arc::clone(spec), cfg.clone())?;
        let (mut obs, _) = env.reset(seed.wrapping_add(i as u64))?;
        loop {
            t.candidates += obs.legal_actions().count() as u64 - 1;
            if hash {
                t.checksum = hash_obs(t.checksum, &obs);
            }
            let step = env.step(rule.act(&obs, &mut rng))?;
            t.steps += 1;
            if hash {
                t.checksum = fnv(t.checksum, step.reward.to_bits());
            }
            if step.terminated || step.truncated {
                break;
            }
            obs = step.obs;
        }
        t.episodes += 1;
    }
    Ok(t)
}
