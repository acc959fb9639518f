//! The decision interface shared by the simulator, the environment and the service: the
//! `Policy` trait, what a policy may know (`DecisionContext`) and what it answers (`Decision`),
//! plus the composable heuristics and the registry that builds them by name.
//!
//! A policy never sees a job's true duration: the context carries job specs (with the user's
//! estimate where the trace has one), queue and running state, and attained service.

mod context;
mod heuristic;
mod modifier;
pub mod order;
pub mod place;
mod planner;
mod registry;
mod view;

#[cfg(test)]
mod het_tests;

pub(crate) use context::seen_below;
pub use context::{DecisionContext, JobRuntime, JobState, PendingJob};
pub use heuristic::{Composite, Fifo, Modifier, Ordering, Placer, StrategyPlacer};
pub use modifier::{ClassPreempt, Easy, GittinsPreempt, LasPreempt, VictimPools, minimal_victims};
pub use planner::{PlanMark, Planner};
pub use registry::{
    PolicyConfig, PolicyInfo, PolicyOptions, build_policy, build_policy_with, policy_catalog,
};
pub use view::ThroughputView;

use crate::cluster::TaskPlacement;
use crate::units::JobId;
use serde::Serialize;

/// One job placed: where each of its tasks goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Placement {
    pub job: JobId,
    pub tasks: Vec<TaskPlacement>,
}

/// A policy's answer: jobs to preempt (applied first), then jobs to start.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub preemptions: Vec<JobId>,
    pub placements: Vec<Placement>,
}

impl Decision {
    pub fn is_empty(&self) -> bool {
        self.preemptions.is_empty() && self.placements.is_empty()
    }
}

/// A policy that could not decide (a fault, unlike "nothing fits", which is an empty decision).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyError {
    #[error("unknown policy `{name}`: {hint}")]
    UnknownName { name: String, hint: String },
    #[error("policy {policy} failed: {message}")]
    Failed { policy: String, message: String },
    /// The policy's own output is unusable (e.g. a model produced NaN scores): a fault of the
    /// policy, which a service answers by falling back.
    #[error("policy {policy} produced invalid output: {message}")]
    InvalidOutput { policy: String, message: String },
}

/// Anything that decides: heuristics, learned policies, remote services.
pub trait Policy: Send {
    /// The registry name it was built from, e.g. `fifo/best-fit`.
    fn name(&self) -> &str;
    /// What to preempt and what to start now. Called after every batch of same-time events
    /// (and on the periodic tick) while jobs are pending.
    fn decide(&mut self, ctx: &DecisionContext<'_>) -> Result<Decision, PolicyError>;
}
