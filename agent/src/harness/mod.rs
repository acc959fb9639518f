//! The comparison harness every claim rests on, as a library: reading the inputs (a trace, a
//! cluster, policy names), running every policy on identical units (windows x loads x
//! seeds), the paired statistics against a baseline and the one-line verdict (`compare`),
//! and the report with its plots (`report`). The `lachesis` binary, the trainer's model card,
//! `replay` and the Python package all call it; it prints nothing.
//!
//! - registry.rs: policy names to policies (`rl:PATH` and the heuristic registry).
//! - compare.rs: `compare`, `CompareSpec`, `Comparison`, the metrics and the verdict.
//! - report.rs: `report.md`, `report.html`, `runs.csv`, `comparison.json`, the SVG plots.

pub mod compare;
pub mod registry;
pub mod report;

pub use compare::{
    BuildPolicy, CompareSpec, Comparison, METRICS, Metric, MetricReport, PIPELINE_METRICS,
    QUEUE_COLUMNS, QUOTA_METRICS, Run, Setup, Shard, ShardRuns, TYPED_METRICS, Unit, compare,
    compare_shard, fmt_num, fmt_paired, merge, metrics_of, queue_table, reducible_jct_pct,
};
pub use registry::{build, policy_options, read_policy_config, wants_tick_s};

use lachesis_env::cluster::{ClusterSpec, load_cluster};
use lachesis_env::job::Trace;
use lachesis_env::sim::SizingRule;
use lachesis_env::trace::{ReadReport, TraceFormat, read_trace};
use std::path::{Path, PathBuf};

/// Why a comparison (or one of its inputs) failed; each message names the input at fault.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: invalid {what}: {message}", path.display())]
    Config {
        path: PathBuf,
        what: &'static str,
        message: String,
    },
    #[error(transparent)]
    Trace(#[from] lachesis_env::trace::TraceReadError),
    #[error("unknown trace format `{0}` (known: {known})", known = known_formats())]
    Format(String),
    #[error(
        "{path}: a static workload ({format} format): its jobs have no arrival or duration \
         times, so it cannot be replayed; place it as the FGD experiment does with \
         `lachesis bench fgd --trace {path}`, or summarise it with `lachesis trace stats {path}`"
    )]
    Static { path: String, format: TraceFormat },
    #[error(transparent)]
    Cluster(#[from] lachesis_env::cluster::ClusterLoadError),
    #[error(transparent)]
    Workload(#[from] lachesis_env::sim::WorkloadError),
    #[error(transparent)]
    Split(#[from] lachesis_env::trace::split::SplitError),
    #[error(transparent)]
    Sim(#[from] lachesis_env::sim::SimError),
    #[error(transparent)]
    Policy(#[from] lachesis_env::policy::PolicyError),
    /// A setting of the comparison that cannot work (the message names it).
    #[error("{0}")]
    Invalid(String),
    #[error("{context}: {source}")]
    Context {
        context: String,
        #[source]
        source: Box<HarnessError>,
    },
    #[error("plot: {0}")]
    Plot(String),
    #[error("writing comparison.json: {0}")]
    Json(#[from] serde_json::Error),
}

impl HarnessError {
    /// This error as the cause of `context` (e.g. "window 3 at load 1.2").
    pub fn context(self, context: impl Into<String>) -> HarnessError {
        HarnessError::Context {
            context: context.into(),
            source: Box::new(self),
        }
    }
}

fn known_formats() -> String {
    let known: Vec<&str> = TraceFormat::ALL.iter().map(|f| f.as_str()).collect();
    known.join(", ")
}

/// A trace format by name (`TraceFormat::as_str`'s spelling, case-insensitive).
pub fn parse_format(name: &str) -> Result<TraceFormat, HarnessError> {
    TraceFormat::parse(name).ok_or_else(|| HarnessError::Format(name.to_string()))
}

/// Reads a trace to replay, forcing `format` if given; errors name the file (and the line and
/// field at fault). A static workload is refused (see [`ensure_timed`]).
pub fn load_trace(path: &Path, format: Option<&str>) -> Result<Trace, HarnessError> {
    let format = format.map(parse_format).transpose()?;
    let read = read_trace(path, format)?;
    ensure_timed(path, &read.report)?;
    Ok(read.trace)
}

/// Refuses a trace read from a format without arrival and duration times (a static workload)
/// where its jobs would be replayed or written out with times, and says what to run instead.
pub fn ensure_timed(path: &Path, report: &ReadReport) -> Result<(), HarnessError> {
    if report.format.has_times() {
        return Ok(());
    }
    Err(HarnessError::Static {
        path: path.display().to_string(),
        format: report.format,
    })
}

/// A cluster by preset, shape or file, or sized from `trace` for `auto[...]`.
pub fn resolve_cluster(arg: &str, trace: &Trace) -> Result<ClusterSpec, HarnessError> {
    match SizingRule::parse(arg) {
        Some(rule) => Ok(rule?.size(trace)?),
        None => Ok(load_cluster(arg)?),
    }
}
