//! The gym-style environment: a scheduling episode over a trace window as Gymnasium's
//! `reset` / `step` contract, with candidate actions, a fixed feature schema, configurable
//! rewards, a vectorised wrapper and a conformance checker. Built on the simulator and the
//! policy interface; must not depend on any learning framework.
//!
//! - `SchedEnv` (env.rs): one episode; actions index candidates, `WAIT_ACTION` lets time pass.
//! - candidates.rs: (pending job, placement) pairs from heuristic proposers, and for a job
//!   none can place, at most one preemption candidate (minimal victim set, then placement).
//! - features.rs: `Featurizer`, `Observation`, `FEATURE_SCHEMA_VERSION` and feature names.
//! - reward.rs: `RewardConfig` and the per-step terms.
//! - vector.rs: `VecEnv` over random windows of a training trace, auto-resetting.
//! - check.rs: `check_env`, run in tests on every configuration.
//! - rollout.rs: cheap deterministic roll-outs (`play`) for speed measurements.
//! - lookahead.rs, predicted.rs, env/fork.rs: policy-improvement labels by simulating ahead
//!   in forks of the episode whose unfinished jobs last as predicted, never as they truly do.
//!
//! ```text
//! cargo test -p lachesis-env gym
//! ```

mod candidates;
mod check;
mod env;
mod features;
mod lookahead;
mod predicted;
mod reward;
pub mod rollout;
mod vector;

#[cfg(test)]
mod tests;

pub use candidates::{
    Candidate, CandidateKind, DecisionPoint, Enumerator, Proposer, RESIZE_ROUND, Taken, idle_due,
};
pub use check::{CheckError, CheckReport, check_env};
pub use env::{EndReason, EnvConfig, EnvError, Info, SchedEnv, Step};
pub use features::{
    CANDIDATE_FEATURES, CANDIDATE_WIDTH, CandidateStats, FEATURE_BOUND, FEATURE_SCHEMA_VERSION,
    Featurizer, GLOBAL_FEATURES, GLOBAL_WIDTH, GlobalStats, MAX_CANDIDATES, Observation,
    WAIT_ACTION,
};
pub use lookahead::{Label, LookaheadConfig, Rollout, RolloutFactory, TeacherRollout, lookahead};
pub use predicted::{DurationModel, PredictedDurations};
pub use reward::{Objective, RewardConfig, RewardTerms};
pub use vector::{StepPool, VecEnv, VecStep, window_pool};
