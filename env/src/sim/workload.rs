//! Shaping the workload before a run: trace windows and load scaling.

use crate::cluster::ClusterSpec;
use crate::job::Trace;
use crate::units::{SimTime, parse_duration};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WorkloadError {
    #[error("window `{text}`: {message}")]
    BadWindow { text: String, message: String },
    #[error("load {0}: expected a target offered load > 0")]
    BadLoad(f64),
    #[error(
        "cannot scale to a load: the trace offers no load on this cluster (one job, or all at one instant)"
    )]
    NoLoad,
}

/// Parses `FROM..TO` (durations since the trace's time origin, e.g. `10d..12d`, `0..3600`;
/// either side may be empty for open) into `[from, to)`.
pub fn parse_window(text: &str) -> Result<(SimTime, SimTime), WorkloadError> {
    let bad = |message: String| WorkloadError::BadWindow {
        text: text.to_string(),
        message,
    };
    let (from, to) = text
        .split_once("..")
        .ok_or_else(|| bad("expected FROM..TO".into()))?;
    let from = if from.trim().is_empty() {
        SimTime::ZERO
    } else {
        parse_duration(from).map_err(bad)?
    };
    let to = if to.trim().is_empty() {
        SimTime::MAX
    } else {
        parse_duration(to).map_err(bad)?
    };
    if to <= from {
        return Err(bad("TO must be after FROM".into()));
    }
    Ok((from, to))
}

/// Compresses (or stretches) inter-arrival times, keeping the first submit, so that the
/// trace's offered load on `cluster` becomes `target` (see `Trace::offered_load`).
pub fn scale_to_load(
    trace: &Trace,
    cluster: &ClusterSpec,
    target: f64,
) -> Result<Trace, WorkloadError> {
    if !(target.is_finite() && target > 0.0) {
        return Err(WorkloadError::BadLoad(target));
    }
    let current = trace.offered_load(cluster);
    if current <= 0.0 {
        return Err(WorkloadError::NoLoad);
    }
    let (first, _) = trace.submit_range().ok_or(WorkloadError::NoLoad)?;
    let factor = current / target;
    Ok(trace.map_submit(|t| {
        let offset = t.saturating_sub(first).ms() as f64 * factor;
        first.saturating_add(SimTime((offset.round()) as u64))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_parse() {
        assert_eq!(
            parse_window("1d..2d").unwrap(),
            (SimTime::from_secs(86_400), SimTime::from_secs(172_800))
        );
        assert_eq!(
            parse_window("..60").unwrap(),
            (SimTime::ZERO, SimTime::from_secs(60))
        );
        assert_eq!(parse_window("60..").unwrap().1, SimTime::MAX);
        assert!(parse_window("5..5").is_err());
        assert!(parse_window("5").is_err());
        assert!(
            parse_window("x..5")
                .unwrap_err()
                .to_string()
                .contains("not a duration")
        );
    }
}
