//! lachesis-env: the cluster world. Cluster model and feasibility, the event simulator, trace
//! readers, throughput tables, heuristic policies and metrics.
//!
//! No burn, no tokio: everything here is plain, deterministic, single-threaded Rust that the
//! learning agent and the decision service build on.

pub mod cluster;
pub mod constraint;
pub mod deps;
pub mod gpu;
pub mod gym;
pub mod job;
pub mod metrics;
pub mod optim;
pub mod policy;
pub mod quota;
pub mod sim;
pub mod throughput;
pub mod trace;
pub mod units;
