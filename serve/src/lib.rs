//! lachesis-serve: the decision service. A cluster snapshot comes in over gRPC; the model
//! (or, when it is missing, slow, wrong or cold, a chain of proven heuristics) decides; a
//! shield re-checks every placement; the answer says who decided, why it fell back and why
//! each job left pending waits. Metrics, a decision log for offline replay, A/B and shadow
//! routing, a guard that switches to the baseline when the replayed log says the model is
//! losing, hot model reload, TLS and token auth; and the node probe that reads a GPU node
//! through NVML and reports it (`probe`).
//!
//! Depends on `lachesis-env` (world model, feasibility, heuristics) and `lachesis-agent`
//! (learned policies). Proto types stay in this crate: the CLI talks to it through functions.

pub mod bound;
pub mod client;
pub mod config;
pub mod dashboard;
pub mod decision_log;
pub mod engine;
pub mod gpu_model;
pub mod guard;
pub mod http;
pub mod inventory;
pub mod k8s;
pub mod metrics;
pub mod model;
pub mod probe;
pub mod reasons;
pub mod replay;
pub mod score;
pub mod selection;
pub mod server;
pub mod session;
pub mod shield;
pub mod slurm;
pub mod synthetic;
pub mod ui;
pub mod verdict;
pub mod world;

pub mod proto {
    //! The generated `lachesis.v1` types and service (and serde for JSON snapshots and logs).
    #![allow(missing_debug_implementations, clippy::all)]
    tonic::include_proto!("lachesis.v1");
    /// The file descriptor set gRPC reflection serves.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("lachesis_v1_descriptor");
}

pub use config::ServeConfig;
pub use engine::Engine;
pub use metrics::Metrics;
pub use server::{Running, ServeError, run, start, start_with};
