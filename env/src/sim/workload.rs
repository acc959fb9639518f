//! Shaping the workload before a run: trace windows and load scaling.

use crate::cluster::ClusterSpec;
use crate::job::{JobSpec, Trace};
use crate::units::{SimTime, parse_duration};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WorkloadError {
    #[error("window `{text}`: {message}")]
    BadWindow { text: String, message: String },
    #[error("load {0}: expected a target offered load > 0")]
    BadLoad(f64),
    #[error("cluster sizing `{text}`: {message}")]
    BadSizing { text: String, message: String },
    #[error(
        "cannot scale to a load: the trace offers no load on this cluster (one job, or all at one instant)"
    )]
    NoLoad,
    #[error("duration spread {0}: expected a finite exponent >= 0")]
    BadSpread(f64),
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

/// The same jobs with their run times pulled towards (or pushed from) the window's median on
/// a log scale: `d' = m (d / m)^spread`, `m` the median run time. `spread` 1 keeps the trace;
/// below 1 the run times grow alike (at 0 every job runs `m`: the regime where FIFO and SJF
/// beat least-attained-service), above 1 their tail grows heavier. The order of run times is
/// kept, and user estimates are mapped the same way. For training that covers regimes no
/// single trace shows (domain randomisation); scale the load afterwards.
pub fn respread_durations(trace: &Trace, spread: f64) -> Result<Trace, WorkloadError> {
    if !(spread.is_finite() && spread >= 0.0) {
        return Err(WorkloadError::BadSpread(spread));
    }
    let mut sorted: Vec<u64> = trace.true_durations().iter().map(|d| d.ms()).collect();
    sorted.sort_unstable();
    let Some(&median) = sorted.get(sorted.len() / 2) else {
        return Ok(trace.clone());
    };
    let m = median.max(1) as f64;
    let map = |d: SimTime| -> SimTime {
        let ms = d.ms().max(1) as f64;
        SimTime((m * (ms / m).powf(spread)).round().clamp(1.0, 1e15) as u64)
    };
    let jobs = trace
        .jobs()
        .iter()
        .map(|j| JobSpec {
            estimate: j.estimate.map(map),
            ..j.clone()
        })
        .collect();
    let durations = trace.true_durations().iter().map(|d| map(*d)).collect();
    Ok(trace
        .rebuilt(jobs, durations)
        .expect("the same jobs with other run times are as valid"))
}

/// How to size a cluster for a trace that names none (ITP, Helios/Philly-like logs).
#[derive(Debug, Clone, PartialEq)]
pub struct SizingRule {
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// GPU model of every node (a catalog name).
    pub model: String,
    /// Offered load the cluster should see at most.
    pub target_load: f64,
}

impl Default for SizingRule {
    /// 8 x V100 nodes at offered load 0.8.
    fn default() -> Self {
        SizingRule {
            gpus_per_node: 8,
            model: "V100".into(),
            target_load: 0.8,
        }
    }
}

impl SizingRule {
    /// Parses `auto` (the default) or `auto:G:MODEL@LOAD`, e.g. `auto:8:A100@0.7`; parts may be
    /// left out from the right (`auto:4:T4`, `auto:8`).
    pub fn parse(text: &str) -> Option<Result<SizingRule, WorkloadError>> {
        let rest = text.trim().strip_prefix("auto")?;
        let mut rule = SizingRule::default();
        let bad = |m: &str| {
            Some(Err(WorkloadError::BadSizing {
                text: text.to_string(),
                message: m.to_string(),
            }))
        };
        if rest.is_empty() {
            return Some(Ok(rule));
        }
        let Some(rest) = rest.strip_prefix(':') else {
            return bad("expected auto or auto:G:MODEL@LOAD");
        };
        let (shape, load) = match rest.split_once('@') {
            Some((s, l)) => (s, Some(l)),
            None => (rest, None),
        };
        let (gpus, model) = match shape.split_once(':') {
            Some((g, m)) => (g, Some(m)),
            None => (shape, None),
        };
        match gpus.trim().parse::<u32>() {
            Ok(g) if (1..=crate::cluster::MAX_GPUS_PER_NODE).contains(&g) => rule.gpus_per_node = g,
            _ => return bad("GPUs per node must be an integer 1..=64"),
        }
        if let Some(m) = model {
            rule.model = m.trim().to_string();
        }
        if let Some(l) = load {
            match l.trim().parse::<f64>() {
                Ok(x) if x.is_finite() && x > 0.0 => rule.target_load = x,
                _ => return bad("LOAD must be a number > 0"),
            }
        }
        Some(Ok(rule))
    }

    /// The smallest cluster of identical nodes that holds the trace's largest job and sees an
    /// offered load of at most `target_load`.
    pub fn size(&self, trace: &Trace) -> Result<ClusterSpec, WorkloadError> {
        let shape = |n: u64| format!("{n}x{}:{}", self.gpus_per_node, self.model);
        let one =
            crate::cluster::load_cluster(&shape(1)).map_err(|e| WorkloadError::BadSizing {
                text: shape(1),
                message: e.to_string(),
            })?;
        let by_load = (trace.offered_load(&one) / self.target_load).ceil();
        let largest = trace
            .jobs()
            .iter()
            .map(|j| j.gpus_total())
            .max()
            .unwrap_or(0);
        let nodes = (by_load as u64)
            .max(largest.div_ceil(u64::from(self.gpus_per_node)))
            .max(1);
        let mut spec =
            crate::cluster::load_cluster(&shape(nodes)).map_err(|e| WorkloadError::BadSizing {
                text: shape(nodes),
                message: e.to_string(),
            })?;
        spec.name = format!("auto:{}", shape(nodes));
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn respreading_pulls_run_times_to_the_median_and_keeps_their_order() {
        use crate::job::TaskRequest;
        use crate::job::tests::job;
        // Run times 100 s, 400 s, 1600 s (median 400 s), the first with a 200 s estimate.
        let mut jobs: Vec<_> = (0..3)
            .map(|i| job(&format!("j{i}"), i, TaskRequest::whole(1, 1000, 1024)))
            .collect();
        jobs[0].estimate = Some(SimTime::from_secs(200));
        let durations = [100, 400, 1600].map(SimTime::from_secs).to_vec();
        let t = Trace::new("t", jobs, durations, vec!["a".into()]).unwrap();
        let secs =
            |t: &Trace| -> Vec<u64> { t.true_durations().iter().map(|d| d.ms() / 1000).collect() };
        // spread 1/2: 400 x (1/4)^(1/2) = 200, 400, 400 x 4^(1/2) = 800.
        let half = respread_durations(&t, 0.5).unwrap();
        assert_eq!(secs(&half), [200, 400, 800]);
        // The estimate maps the same way: 400 x (1/2)^(1/2) = 282.8 s.
        assert_eq!(half.jobs()[0].estimate, Some(SimTime(282_843)));
        // 0: every job runs the median; 2: the tail squared.
        assert_eq!(secs(&respread_durations(&t, 0.0).unwrap()), [400, 400, 400]);
        assert_eq!(secs(&respread_durations(&t, 2.0).unwrap()), [25, 400, 6400]);
        assert_eq!(
            secs(&respread_durations(&t, 1.0).unwrap()),
            [100, 400, 1600]
        );
        assert!(respread_durations(&t, -1.0).is_err());
        assert!(respread_durations(&t, f64::NAN).is_err());
    }

    #[test]
    fn sizing_holds_the_largest_job_and_meets_the_load() {
        use crate::job::TaskRequest;
        use crate::job::tests::job;
        // 10 jobs of 8 GPUs x 1000 s over 9000 s: 80 GPU-ks of work. On one 8-GPU node the load
        // is 80000 / (8 x 9000) = 1.11; at target 0.5 that is ceil(2.22) = 3 nodes. A 32-GPU
        // gang would need 4 nodes, so the largest job decides when present.
        let jobs: Vec<_> = (0..10)
            .map(|i| job(&format!("j{i}"), i * 1000, TaskRequest::whole(8, 0, 0)))
            .collect();
        let t = Trace::new(
            "t",
            jobs,
            vec![SimTime::from_secs(1000); 10],
            vec!["d".into()],
        )
        .unwrap();
        let rule = SizingRule::parse("auto:8:V100@0.5").unwrap().unwrap();
        assert_eq!(rule.size(&t).unwrap().nodes.len(), 3);
        let mut big = t.jobs().to_vec();
        big[0].tasks = 4;
        let t = Trace::new(
            "t",
            big,
            vec![SimTime::from_secs(1000); 10],
            vec!["d".into()],
        )
        .unwrap();
        assert_eq!(rule.size(&t).unwrap().nodes.len(), 4);
        assert_eq!(
            SizingRule::parse("auto").unwrap().unwrap(),
            SizingRule::default()
        );
        assert!(SizingRule::parse("auto:0").unwrap().is_err());
        assert!(SizingRule::parse("auto:8:V100@-1").unwrap().is_err());
        assert!(SizingRule::parse("64x8:A100").is_none());
    }

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
