//! The Slurm bridge: Lachesis behind a real `slurmctld`. Jobs are held on arrival (the submit
//! plugin in `deploy/slurm/job_submit.lua` sets priority 0 and stamps `AdminComment`); each
//! cycle the bridge reads nodes and jobs through `scontrol`, asks the decision service, and
//! applies the answer: `scontrol update JobId=N NodeList=...` then `scontrol release` for
//! placements, `scontrol requeuehold` for preemptions. See `docs/slurm.md`.

pub mod bridge;
pub mod config;
pub mod ctl;
pub mod metrics;
pub mod model;
pub mod parse;
pub mod testbed;
pub mod translate;

pub use bridge::{Bridge, BridgeState, CycleReport};
pub use config::BridgeConfig;
pub use ctl::{CommandCtl, SlurmCtl};
