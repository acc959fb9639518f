//! The discrete-event simulator: replays a trace on a cluster under a policy.
//!
//! Semantics (DESIGN.md):
//! - Events (arrival, completion, periodic tick) are taken in (time, sequence) order, so a
//!   run is a pure function of its inputs and seed. At one instant, completions and ticks come
//!   first (in the order they were scheduled), then arrivals (in trace order).
//! - After each batch of same-time events, while jobs are pending, the policy decides; every
//!   preemption and placement is checked before it is applied, and an infeasible or invalid one
//!   is counted and rejected, never applied. Preemptions are applied before placements.
//! - A job runs for its trace duration divided by the speed of the slowest GPU model it got,
//!   times `cross_node_penalty` when its gang spans more nodes than it needs, and
//!   `cross_rack_penalty` when it also spans more racks than it needs.
//! - With a throughput table (`SimConfig::throughputs`), a job with a workload type instead
//!   progresses at the table's speed for its GPU model, GPU count and consolidated or spread
//!   placement (`rates.rs`; no node penalty on top, the rack penalty still applies), and is
//!   not started where that speed is 0. Untyped jobs are unaffected.
//! - A preempted job returns to the queue with the progress of its last checkpoint; each
//!   restart costs `restart_overhead_s` before progress resumes.
//! - Under a table, two typed 1-GPU jobs may share one GPU (`Decision::shares`) where the
//!   table has a non-zero pair entry: both progress at its pair rates, and the one left
//!   returns to its rate alone when the other ends or is preempted. An elastic job
//!   (`JobSpec::elastic`) may be resized while it runs (`Decision::resizes`): it keeps its work
//!   and pays the restart overhead. Whenever a job's rate changes its completion is
//!   recomputed from the work done so far (`Hidden::work_until`), under a new epoch.
//! - The run ends when nothing is running and nothing is left to arrive; a job the policy
//!   left pending then is reported unfinished (`finished < jobs`).
//! - Jobs that can never fit the cluster, and typed jobs the throughput table rates at their
//!   size on no GPU model they may use, stop the run with a report, or are skipped and counted
//!   with `skip_unplaceable`.

mod config;
mod engine;
mod hetero;
mod rates;
mod workload;

pub use config::SimConfig;
pub use engine::{Progress, SimError, SimResult, Simulator};
pub use workload::{SizingRule, WorkloadError, parse_window, respread_durations, scale_to_load};

#[cfg(test)]
mod constraint_tests;
#[cfg(test)]
mod pipe_tests;
#[cfg(test)]
mod quota_preempt_tests;
#[cfg(test)]
mod quota_tests;
#[cfg(test)]
mod rate_tests;
#[cfg(test)]
mod select_tests;
#[cfg(test)]
mod share_tests;
#[cfg(test)]
mod starvation_tests;
#[cfg(test)]
mod tests;
