//! Is the model keeping its promise? The model arm's policy against the heuristic arm's on the
//! recent traffic of the decision log: the most recent finished jobs (the last `recent_jobs`,
//! submitted within the last `recent_hours` of the log) are cut into consecutive windows of
//! `window_jobs` jobs, both policies run on every window in the comparison harness (same
//! trace, same cluster, same seeds), and the paired difference of average JCT (model minus
//! heuristic) over the windows, with its bootstrap 95% interval
//! (`lachesis_env::metrics::paired`), is the verdict: **losing** when the whole interval lies
//! above zero, **winning** when below, **inconclusive** when it holds zero; **too little
//! traffic** when fewer than `min_jobs` recent jobs finished.
//!
//! Consecutive windows, not `compare`'s random ones: random windows of a short stretch of
//! traffic overlap, share jobs, and would make the interval narrower than the traffic
//! supports. For the same reason seeds are averaged within a window, never counted as units.
//!
//! `lachesis replay` prints it; the service's guard (`crate::guard`) acts on it. Prints
//! nothing. Knows nothing of the service.

use crate::replay::{ReplayError, Replayed};
use lachesis_agent::harness::{self, BuildPolicy, CompareSpec, HarnessError, METRICS, fmt_num};
use lachesis_env::cluster::{ClusterLoadError, parse_cluster_toml};
use lachesis_env::job::Trace;
use lachesis_env::metrics::mean;
use lachesis_env::metrics::paired::{Better, Paired, paired};
use lachesis_env::policy::PolicyConfig;
use lachesis_env::units::SimTime;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

/// Which traffic the verdict looks at, and how it is cut and measured.
#[derive(Debug, Clone, PartialEq)]
pub struct VerdictSpec {
    /// The most recent finished jobs judged, at most.
    pub recent_jobs: usize,
    /// Only jobs submitted within this many hours before the log's last snapshot (0: no
    /// limit).
    pub recent_hours: f64,
    /// Jobs per window; each window is one unit of the paired comparison.
    pub window_jobs: usize,
    /// Fewer recent finished jobs than this: too little traffic to judge.
    pub min_jobs: usize,
    /// Seeds per window (averaged within it); they change only randomised policies' runs.
    pub seeds: u64,
    /// Bootstrap resamples of the interval.
    pub resamples: usize,
    /// Simulation threads (default: all cores).
    pub threads: Option<usize>,
}

impl Default for VerdictSpec {
    fn default() -> Self {
        VerdictSpec {
            recent_jobs: 500,
            recent_hours: 0.0,
            window_jobs: 25,
            min_jobs: 200,
            seeds: 1,
            resamples: 2000,
            threads: None,
        }
    }
}

/// A field of `VerdictSpec`, as `serve.toml`'s `[guard]` and `lachesis replay` spell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecField {
    RecentJobs,
    RecentHours,
    WindowJobs,
    MinJobs,
    Seeds,
    Resamples,
}

impl SpecField {
    /// The key in `serve.toml`.
    pub fn config_key(self) -> &'static str {
        match self {
            SpecField::RecentJobs => "guard.recent_jobs",
            SpecField::RecentHours => "guard.recent_hours",
            SpecField::WindowJobs => "guard.window_jobs",
            SpecField::MinJobs => "guard.min_jobs",
            SpecField::Seeds => "guard.seeds",
            SpecField::Resamples => "guard.resamples",
        }
    }

    /// The flag of `lachesis replay`.
    pub fn flag(self) -> &'static str {
        match self {
            SpecField::RecentJobs => "--recent-jobs",
            SpecField::RecentHours => "--recent-hours",
            SpecField::WindowJobs => "--window-jobs",
            SpecField::MinJobs => "--min-jobs",
            SpecField::Seeds => "--seeds",
            SpecField::Resamples => "--resamples",
        }
    }
}

/// A `VerdictSpec` that cannot work, and which field is at fault.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}: {message}", field.config_key())]
pub struct SpecError {
    pub field: SpecField,
    pub message: String,
}

impl VerdictSpec {
    /// Checks the spec once, before any traffic is read.
    pub fn validate(&self) -> Result<(), SpecError> {
        let bad = |field, message: String| Err(SpecError { field, message });
        if self.window_jobs == 0 {
            return bad(SpecField::WindowJobs, "must be at least 1".into());
        }
        if self.min_jobs < 2 * self.window_jobs {
            return bad(
                SpecField::MinJobs,
                format!(
                    "{} jobs make fewer than two windows of {} (window_jobs): an interval needs \
                     at least two",
                    self.min_jobs, self.window_jobs
                ),
            );
        }
        if self.recent_jobs < self.min_jobs {
            return bad(
                SpecField::RecentJobs,
                format!(
                    "{} is below min_jobs ({}): there would never be traffic enough to judge",
                    self.recent_jobs, self.min_jobs
                ),
            );
        }
        if !(self.recent_hours.is_finite() && self.recent_hours >= 0.0) {
            return bad(
                SpecField::RecentHours,
                format!("{} is not a number of hours >= 0", self.recent_hours),
            );
        }
        if self.seeds == 0 {
            return bad(SpecField::Seeds, "must be at least 1".into());
        }
        if self.resamples < 100 {
            return bad(
                SpecField::Resamples,
                format!(
                    "{} draws give a ragged interval; use at least 100",
                    self.resamples
                ),
            );
        }
        Ok(())
    }
}

/// The two arms, as policy names the builder takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arms {
    pub model: String,
    pub heuristic: String,
}

/// What the verdict says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The interval of (model - heuristic) average JCT lies above zero: the model is worse.
    Losing,
    /// It lies below zero: the model is better.
    Winning,
    /// It holds zero.
    Inconclusive,
    /// Fewer than `min_jobs` recent finished jobs: nothing judged.
    TooLittleTraffic,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Losing => "losing",
            Outcome::Winning => "winning",
            Outcome::Inconclusive => "inconclusive",
            Outcome::TooLittleTraffic => "too-little-traffic",
        }
    }
}

/// The verdict and the figures behind it.
#[derive(Debug, Clone)]
pub struct Verdict {
    pub outcome: Outcome,
    pub arms: Arms,
    /// Recent finished jobs judged (too little traffic: those found).
    pub jobs: usize,
    /// `min_jobs` of the spec.
    pub min_jobs: usize,
    /// Windows (units of the paired comparison), jobs in each, seeds per window.
    pub windows: usize,
    pub window_jobs: usize,
    pub seeds: u64,
    /// Mean over windows of each arm's average JCT, seconds (0 when not judged).
    pub model_avg_jct_s: f64,
    pub heuristic_avg_jct_s: f64,
    /// Model minus heuristic average JCT, seconds, paired over windows; `None` when not
    /// judged. `wins` are windows where the model did better.
    pub difference: Option<Paired>,
    /// Runs that left jobs unfinished (their JCT covers finished jobs only).
    pub warnings: Vec<String>,
}

impl Verdict {
    fn too_little(arms: &Arms, jobs: usize, spec: &VerdictSpec) -> Verdict {
        Verdict {
            outcome: Outcome::TooLittleTraffic,
            arms: arms.clone(),
            jobs,
            min_jobs: spec.min_jobs,
            windows: 0,
            window_jobs: spec.window_jobs,
            seeds: spec.seeds,
            model_avg_jct_s: 0.0,
            heuristic_avg_jct_s: 0.0,
            difference: None,
            warnings: Vec::new(),
        }
    }

    /// The difference relative to the heuristic arm's mean average JCT: (mean, interval low,
    /// interval high); `None` when not judged or the heuristic's JCT is 0.
    pub fn ratio(&self) -> Option<(f64, f64, f64)> {
        let d = self.difference.as_ref()?;
        let base = self.heuristic_avg_jct_s;
        (base > 0.0).then(|| (d.mean_diff / base, d.ci_low / base, d.ci_high / base))
    }

    pub fn losing(&self) -> bool {
        self.outcome == Outcome::Losing
    }
}

/// `+12.5` or `-3.1`: a signed number in `fmt_num`'s form.
fn signed(x: f64) -> String {
    let n = fmt_num(x);
    if x > 0.0 { format!("+{n}") } else { n }
}

impl fmt::Display for Verdict {
    /// One line: `arm verdict: OUTCOME: ...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (model, heuristic) = (&self.arms.model, &self.arms.heuristic);
        let (Some(d), Outcome::Losing | Outcome::Winning | Outcome::Inconclusive) =
            (&self.difference, self.outcome)
        else {
            return write!(
                f,
                "arm verdict: too-little-traffic: {} recent finished jobs, {} needed to judge the \
                 model arm ({model}) against the heuristic arm ({heuristic})",
                self.jobs, self.min_jobs
            );
        };
        let how = match self.outcome {
            Outcome::Losing => "losing to",
            Outcome::Winning => "beating",
            _ => "not clearly different from",
        };
        let pct = |x: f64| format!("{}{:.1}%", if x > 0.0 { "+" } else { "" }, 100.0 * x);
        let relative = self.ratio().map_or_else(String::new, |(m, lo, hi)| {
            format!(" ({}; 95% CI {}, {})", pct(m), pct(lo), pct(hi))
        });
        write!(
            f,
            "arm verdict: {}: the model arm ({model}) is {how} the heuristic arm ({heuristic}) on \
             the last {} finished jobs ({} windows of {} jobs, {} seed(s) each): avg JCT {} s vs {} s, \
             difference {} s [95% CI {}, {}]{relative}, worse on {} and better on {} of {} \
             windows",
            self.outcome.as_str(),
            self.jobs,
            self.windows,
            self.window_jobs,
            self.seeds,
            fmt_num(self.model_avg_jct_s),
            fmt_num(self.heuristic_avg_jct_s),
            signed(d.mean_diff),
            signed(d.ci_low),
            signed(d.ci_high),
            d.losses,
            d.wins,
            d.units,
        )
    }
}

/// Why no verdict could be given (too little traffic is a verdict, not an error).
#[derive(Debug, thiserror::Error)]
pub enum VerdictError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("reading the decision log: {0}")]
    Replay(#[from] ReplayError),
    #[error("the decision log's cluster: {0}")]
    Cluster(#[from] ClusterLoadError),
    #[error(transparent)]
    Harness(#[from] HarnessError),
}

/// The recent traffic of `trace` (finished jobs in submit order) as `spec` bounds it: jobs
/// submitted within `recent_hours` before `end` (when set), the last `recent_jobs` of them.
pub fn recent(trace: &Trace, end: SimTime, spec: &VerdictSpec) -> Trace {
    let since = match SimTime::from_secs_f64(spec.recent_hours * 3600.0) {
        Some(span) if spec.recent_hours > 0.0 => end.saturating_sub(span),
        _ => SimTime::ZERO,
    };
    let first_recent = trace.jobs().partition_point(|j| j.submit < since);
    let from = first_recent.max(trace.len().saturating_sub(spec.recent_jobs));
    slice(trace, from, trace.len())
}

/// Jobs `from..to` of `trace` (submit order), renumbered.
fn slice(trace: &Trace, from: usize, to: usize) -> Trace {
    Trace::new(
        trace.name.clone(),
        trace.jobs()[from..to].to_vec(),
        trace.true_durations()[from..to].to_vec(),
        trace.tenants().to_vec(),
    )
    .expect("a stretch of a valid trace is a valid trace")
}

/// Every policy's average JCT on each window of the recent traffic.
pub(crate) struct WindowRuns {
    /// `avg_jct[p][w]`: policy `p` on window `w` (seeds averaged).
    pub avg_jct: Vec<Vec<f64>>,
    pub windows: usize,
    pub warnings: Vec<String>,
}

/// Runs `policies` on whole windows of `recent` ending at its most recent job (the oldest few
/// jobs left over are dropped), in the comparison harness: same windows, same seeds.
pub(crate) fn run_windows(
    replayed: &Replayed,
    recent: &Trace,
    policies: &[String],
    spec: &VerdictSpec,
    build: &BuildPolicy<'_>,
) -> Result<WindowRuns, VerdictError> {
    let cluster = Arc::new(parse_cluster_toml(
        &replayed.cluster_toml,
        "the last logged snapshot",
    )?);
    let windows = recent.len() / spec.window_jobs;
    let skip = recent.len() - windows * spec.window_jobs;
    let compare = CompareSpec {
        policies: policies.to_vec(),
        baseline: policies.first().cloned(),
        seeds: spec.seeds,
        windows: 0,
        window_jobs: spec.window_jobs,
        loads: vec![None],
        tick_s: None,
        policy_config: PolicyConfig::default(),
        threads: spec.threads,
        // The harness's own intervals are not used: one draw is enough.
        resamples: 1,
        throughputs: None,
        starvation_bound: lachesis_env::policy::StarvationBound::Auto,
        quotas: None,
        checkpoint_s: None,
        command: String::new(),
    };
    let jct = &METRICS[0];
    debug_assert_eq!(jct.key, "avg_jct_s");
    let mut avg_jct = vec![Vec::with_capacity(windows); policies.len()];
    let mut warnings = Vec::new();
    for w in 0..windows {
        let from = skip + w * spec.window_jobs;
        let window = slice(recent, from, from + spec.window_jobs);
        let c = harness::compare(&window, Arc::clone(&cluster), &compare, build)
            .map_err(|e| e.context(format!("window {w} of the recent traffic")))?;
        for (p, runs) in avg_jct.iter_mut().enumerate() {
            runs.push(mean(&c.unit_values(jct, p)));
        }
        warnings.extend(
            c.warnings()
                .into_iter()
                .map(|line| format!("window {w}: {line}")),
        );
    }
    Ok(WindowRuns {
        avg_jct,
        windows,
        warnings,
    })
}

/// Judges `arms` on the recent traffic of a replayed log (policies built by `build`).
pub fn judge(
    replayed: &Replayed,
    arms: &Arms,
    spec: &VerdictSpec,
    build: &BuildPolicy<'_>,
) -> Result<Verdict, VerdictError> {
    spec.validate()?;
    let recent = recent(&replayed.trace, replayed.end, spec);
    // The names are checked even when there is too little traffic to run them.
    let options = harness::policy_options(&recent, 0, &PolicyConfig::default());
    for name in [&arms.heuristic, &arms.model] {
        build(name, &options).map_err(HarnessError::from)?;
    }
    if recent.len() < spec.min_jobs {
        return Ok(Verdict::too_little(arms, recent.len(), spec));
    }
    let policies = [arms.heuristic.clone(), arms.model.clone()];
    let runs = run_windows(replayed, &recent, &policies, spec, build)?;
    let (heuristic, model) = (&runs.avg_jct[0], &runs.avg_jct[1]);
    let (windows, warnings) = (runs.windows, runs.warnings);
    let d = paired(heuristic, model, Better::Lower, spec.resamples, 7);
    let outcome = if d.ci_low > 0.0 {
        Outcome::Losing
    } else if d.ci_high < 0.0 {
        Outcome::Winning
    } else {
        Outcome::Inconclusive
    };
    Ok(Verdict {
        outcome,
        arms: arms.clone(),
        jobs: windows * spec.window_jobs,
        min_jobs: spec.min_jobs,
        windows,
        window_jobs: spec.window_jobs,
        seeds: spec.seeds,
        model_avg_jct_s: mean(model),
        heuristic_avg_jct_s: mean(heuristic),
        difference: Some(d),
        warnings,
    })
}

/// `judge` on the log files `files` (oldest first); a log with no decision or no finished
/// job is too little traffic.
pub fn judge_log(
    files: &[PathBuf],
    arms: &Arms,
    spec: &VerdictSpec,
    build: &BuildPolicy<'_>,
) -> Result<Verdict, VerdictError> {
    spec.validate()?;
    match crate::replay::replay(files) {
        Ok(replayed) => judge(&replayed, arms, spec, build),
        Err(ReplayError::Empty | ReplayError::NoFinishedJobs) => {
            Ok(Verdict::too_little(arms, 0, spec))
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lachesis_env::job::{JobKind, JobSpec, Qos, TaskRequest};
    use lachesis_env::units::{JobId, TenantId};

    fn trace(submits_s: &[u64]) -> Trace {
        let jobs = submits_s
            .iter()
            .enumerate()
            .map(|(i, s)| JobSpec {
                id: JobId(0),
                name: format!("j{i}"),
                submit: SimTime(s * 1000),
                tasks: 1,
                task: TaskRequest {
                    gpus: 1,
                    gpu_milli: 1000,
                    cpu_milli: 1000,
                    mem_mib: 1024,
                },
                gpu_types: Vec::new(),
                tenant: TenantId(0),
                priority: 0,
                qos: Qos::Guaranteed,
                preemptible: false,
                kind: JobKind::Training,
                estimate: None,
                workload: None,
                constraints: Default::default(),
                elastic: None,
            })
            .collect();
        let durations = vec![SimTime(60_000); submits_s.len()];
        Trace::new("t", jobs, durations, vec!["t".into()]).unwrap()
    }

    fn names(t: &Trace) -> Vec<&str> {
        t.jobs().iter().map(|j| j.name.as_str()).collect()
    }

    #[test]
    fn recent_takes_the_last_jobs_within_the_hours() {
        // Submits at 0, 1 h, 2 h, 3 h, 4 h; the log ends at 4.5 h.
        let t = trace(&[0, 3600, 7200, 10800, 14400]);
        let end = SimTime(16_200_000);
        let spec = |jobs, hours| VerdictSpec {
            recent_jobs: jobs,
            recent_hours: hours,
            ..VerdictSpec::default()
        };
        assert_eq!(names(&recent(&t, end, &spec(3, 0.0))), ["j2", "j3", "j4"]);
        // 2 h before 4.5 h is 2.5 h: j3 and j4 only, fewer than the 3 asked.
        assert_eq!(names(&recent(&t, end, &spec(3, 2.0))), ["j3", "j4"]);
        assert_eq!(names(&recent(&t, end, &spec(10, 0.0))).len(), 5);
        // 1.5 h before 4.5 h is 3 h: a job submitted exactly at the limit is in.
        assert_eq!(names(&recent(&t, end, &spec(10, 1.5))), ["j3", "j4"]);
    }

    #[test]
    fn a_bad_spec_names_its_field() {
        let cases = [
            (
                VerdictSpec {
                    window_jobs: 0,
                    ..VerdictSpec::default()
                },
                "guard.window_jobs",
            ),
            (
                VerdictSpec {
                    min_jobs: 49,
                    window_jobs: 25,
                    ..VerdictSpec::default()
                },
                "guard.min_jobs",
            ),
            (
                VerdictSpec {
                    recent_jobs: 100,
                    ..VerdictSpec::default()
                },
                "guard.recent_jobs",
            ),
            (
                VerdictSpec {
                    recent_hours: f64::NAN,
                    ..VerdictSpec::default()
                },
                "guard.recent_hours",
            ),
            (
                VerdictSpec {
                    seeds: 0,
                    ..VerdictSpec::default()
                },
                "guard.seeds",
            ),
            (
                VerdictSpec {
                    resamples: 10,
                    ..VerdictSpec::default()
                },
                "guard.resamples",
            ),
        ];
        for (spec, field) in cases {
            let e = spec.validate().unwrap_err();
            assert!(e.to_string().starts_with(&format!("{field}: ")), "{e}");
        }
        assert!(VerdictSpec::default().validate().is_ok());
    }
}
