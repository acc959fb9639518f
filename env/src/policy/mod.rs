//! The decision interface shared by the simulator, the environment and the service: the
//! `Policy` trait, what a policy may know (`DecisionContext`) and what it answers (`Decision`),
//! plus the composable heuristics and the registry that builds them by name.
//!
//! A policy never sees a job's true duration: the context carries job specs (with the user's
//! estimate where the trace has one), queue and running state, and attained service.

mod context;
mod gavel;
mod heuristic;
pub mod lookahead;
mod modifier;
pub mod order;
pub mod place;
mod planner;
mod registry;
mod select;
mod starvation;
mod view;

#[cfg(test)]
mod gavel_tests;
#[cfg(test)]
mod het_tests;

pub(crate) use context::seen_below;
pub use context::{DecisionContext, JobRuntime, JobState, PendingJob, RestartCost};
pub use gavel::{GAVEL_RESET_S, GavelConfig, GavelObjective, GavelRounds};
pub use heuristic::{Composite, Fifo, Modifier, Ordering, Placer, Rated, StrategyPlacer};
pub use modifier::{
    ClassPreempt, Colocate, ColocateConfig, DEFAULT_ROUND_S, Easy, ElasticAlloc, ElasticConfig,
    GAVEL_ROUND_S, GittinsPreempt, LasPreempt, VictimPools, best_above, marginal_efficiency,
    minimal_victims, summed_normalised_rate,
};
pub use planner::{PlanMark, Planner};
pub use registry::{
    PolicyConfig, PolicyInfo, PolicyOptions, build_policy, build_policy_with, build_select,
    policy_catalog, reads_throughputs,
};
pub use select::{
    ARRIVAL_HISTORY_JOBS, Choice, PolicyBuilder, Select, SelectConfig, SelectionLog,
    sample_arrivals, sample_durations,
};
pub use starvation::{Reservations, StarvationBound, StarvationGuard, Victim, protection};
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

/// A policy's answer, applied in this order: jobs to preempt, running elastic jobs to
/// resize, jobs to start, then jobs to start on a GPU another job already uses.
///
/// `shares` and `resizes` are the simulator's (issue #25: GPU sharing, elastic jobs); the
/// service and the environment's candidates do not produce them yet. Both are left out of the
/// serialized form when empty, so decisions without them serialize as before.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub preemptions: Vec<JobId>,
    pub placements: Vec<Placement>,
    /// Running elastic jobs given a new set of tasks (`JobSpec::elastic`): grown or shrunk,
    /// each to `tasks.len()` tasks within its `min_gpus..=max_gpus`. A resize restarts the job
    /// from its last checkpoint on the new tasks, paying the restart overhead, as a
    /// preemption followed by a start would (without returning it to the queue). Refused for
    /// rigid jobs and jobs sharing a GPU.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resizes: Vec<Placement>,
    /// Pending jobs started on one GPU that exactly one running job already uses: GPU
    /// sharing, both jobs then progressing at the throughput table's pair rates. Only 1-task,
    /// 1-GPU (whole GPU) typed jobs share, two to a GPU, and only where the table has a
    /// non-zero pair entry for their workloads on that GPU model
    /// (`ClusterState::allocate_shared`, docs/heterogeneity.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<Placement>,
}

impl Decision {
    pub fn is_empty(&self) -> bool {
        self.preemptions.is_empty()
            && self.placements.is_empty()
            && self.resizes.is_empty()
            && self.shares.is_empty()
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
    /// Whether it acts on running jobs when nobody waits (it resizes elastic jobs): the
    /// simulator then also asks it, while elastic jobs run, after batches that leave the queue
    /// empty. Default: `false`, asked only while jobs are pending.
    fn acts_without_queue(&self) -> bool {
        false
    }
    /// What a meta-policy (`select`) followed over the run, and why; `None` for the rest.
    fn selection(&self) -> Option<&SelectionLog> {
        None
    }
    /// Whether it holds rounds while jobs run even when nobody waits, whatever the trace
    /// (Gavel's rounds may move running jobs): the simulator then asks it after every batch,
    /// ticks included, while jobs run. Default: `false`.
    fn acts_every_round(&self) -> bool {
        false
    }
}
