//! The service's selector (`[guard] candidates`): the guard generalised from two arms to
//! many. Every arm (the baseline, the candidates, and the model when it answers) runs on the
//! same windows of the recent traffic of the decision log, in the comparison harness (same
//! trace, same cluster, same seeds), and the service follows the arm with the lowest mean
//! average JCT, switching away from the arm it follows only when the other is better past the
//! hysteresis (a share of the followed arm's average JCT) *and* the paired 95% interval of the
//! difference lies below zero: it does not switch on noise.
//!
//! It is the simulator's `select` with the recent traffic, replayed, for its futures: the
//! service has snapshots, not a simulator of the live cluster to roll forward, and the jobs
//! of the last hours are its sample of the hours ahead. Like the verdict, it reads only
//! finished jobs' logged run times, never a running job's. Prints nothing.

use crate::replay::{ReplayError, Replayed};
use crate::verdict::{self, VerdictError, VerdictSpec};
use lachesis_agent::harness::{self, BuildPolicy, HarnessError, fmt_num};
use lachesis_env::metrics::mean;
use lachesis_env::metrics::paired::{Better, Paired, paired};
use lachesis_env::policy::PolicyConfig;
use std::fmt;
use std::path::PathBuf;

/// Where the selector stands after a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectOutcome {
    /// Another arm was clearly better: the selector follows it now.
    Switched,
    /// The followed arm is the best, or no other is clearly better.
    Stayed,
    /// Fewer than `min_jobs` recent finished jobs: nothing judged, nothing changed.
    TooLittleTraffic,
}

impl SelectOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            SelectOutcome::Switched => "switched",
            SelectOutcome::Stayed => "stayed",
            SelectOutcome::TooLittleTraffic => "too-little-traffic",
        }
    }
}

/// One run of the selector: the arms' figures and which it follows, and why.
#[derive(Debug, Clone)]
pub struct Selection {
    pub outcome: SelectOutcome,
    /// The arms, as policy names.
    pub arms: Vec<String>,
    /// Mean over windows of each arm's average JCT, seconds (empty when not judged).
    pub avg_jct_s: Vec<f64>,
    /// The arm followed before this run, and the one followed after it.
    pub before: usize,
    pub following: usize,
    /// The best arm by mean and its difference from the arm followed before (best minus
    /// followed, paired over windows); `None` when not judged or the followed arm is best.
    pub challenger: Option<(usize, Paired)>,
    /// The hysteresis: a share of the followed arm's average JCT.
    pub hysteresis: f64,
    /// Recent finished jobs judged (too little traffic: those found) and `min_jobs`.
    pub jobs: usize,
    pub min_jobs: usize,
    pub windows: usize,
    pub window_jobs: usize,
    /// Runs that left jobs unfinished (their JCT covers finished jobs only).
    pub warnings: Vec<String>,
}

impl Selection {
    fn too_little(
        arms: &[String],
        before: usize,
        hysteresis: f64,
        spec: &VerdictSpec,
        jobs: usize,
    ) -> Selection {
        Selection {
            outcome: SelectOutcome::TooLittleTraffic,
            arms: arms.to_vec(),
            avg_jct_s: Vec::new(),
            before,
            following: before,
            challenger: None,
            hysteresis,
            jobs,
            min_jobs: spec.min_jobs,
            windows: 0,
            window_jobs: spec.window_jobs,
            warnings: Vec::new(),
        }
    }

    /// The arm followed after this run.
    pub fn followed(&self) -> &str {
        &self.arms[self.following]
    }

    /// (best - followed) / followed average JCT and its interval, as the metrics export it;
    /// `None` when not judged or the followed arm was the best.
    pub fn ratio(&self) -> Option<(f64, f64, f64)> {
        let (_, d) = self.challenger.as_ref()?;
        let base = *self.avg_jct_s.get(self.before)?;
        (base > 0.0).then(|| (d.mean_diff / base, d.ci_low / base, d.ci_high / base))
    }
}

fn signed(x: f64) -> String {
    let n = fmt_num(x);
    if x > 0.0 { format!("+{n}") } else { n }
}

impl fmt::Display for Selection {
    /// One line: `select: following ARM ...: why; every arm's average JCT`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let following = self.followed();
        if self.outcome == SelectOutcome::TooLittleTraffic {
            return write!(
                f,
                "select: following {following}: too-little-traffic: {} recent finished jobs, {} \
                 needed to judge {} arms",
                self.jobs,
                self.min_jobs,
                self.arms.len()
            );
        }
        let before = &self.arms[self.before];
        let why = match (&self.challenger, self.outcome) {
            (None, _) => format!("{following} did best"),
            (Some((best, d)), outcome) => {
                let best = &self.arms[*best];
                let diff = format!(
                    "{best} - {before}: {} s [95% CI {}, {}], better on {} and worse on {} of {} \
                     windows",
                    signed(d.mean_diff),
                    signed(d.ci_low),
                    signed(d.ci_high),
                    d.wins,
                    d.losses,
                    d.units
                );
                if outcome == SelectOutcome::Switched {
                    format!("switched from {before}: {diff}")
                } else {
                    format!(
                        "{best} not clearly better ({diff}; a switch needs more than {:.1}% and \
                         an interval below 0)",
                        100.0 * self.hysteresis
                    )
                }
            }
        };
        let figures: Vec<String> = (self.arms.iter().zip(&self.avg_jct_s))
            .map(|(arm, jct)| format!("{arm} {} s", fmt_num(*jct)))
            .collect();
        write!(
            f,
            "select: following {following}: {why}; avg JCT on the last {} finished jobs ({} \
             windows of {}): {}",
            self.jobs,
            self.windows,
            self.window_jobs,
            figures.join(", ")
        )
    }
}

/// Which arm to follow given each arm's average JCT per window (`runs[arm][window]`): the
/// best by mean when it beats the followed arm `before` by more than `hysteresis` of its mean
/// and the paired interval of the difference lies below zero; `before` otherwise. Returns the
/// arm and the best arm's difference from `before` (`None` when `before` is the best).
pub fn choose(
    runs: &[Vec<f64>],
    before: usize,
    hysteresis: f64,
    resamples: usize,
) -> (usize, Option<(usize, Paired)>) {
    let means: Vec<f64> = runs.iter().map(|r| mean(r)).collect();
    // The lowest mean; the followed arm wins ties, then the earlier arm.
    let best = (0..means.len()).fold(
        before,
        |best, a| {
            if means[a] < means[best] { a } else { best }
        },
    );
    if best == before {
        return (before, None);
    }
    let d = paired(&runs[before], &runs[best], Better::Lower, resamples, 7);
    let clearly = d.ci_high < 0.0 && -d.mean_diff > hysteresis * means[before];
    (if clearly { best } else { before }, Some((best, d)))
}

/// Runs the selector on the log files `files` (oldest first): `arms` (unique policy names,
/// built by `build`), `before` the arm followed now.
pub fn select_log(
    files: &[PathBuf],
    arms: &[String],
    before: usize,
    hysteresis: f64,
    spec: &VerdictSpec,
    build: &BuildPolicy<'_>,
) -> Result<Selection, VerdictError> {
    match crate::replay::replay(files) {
        Ok(replayed) => select(&replayed, arms, before, hysteresis, spec, build),
        Err(ReplayError::Empty | ReplayError::NoFinishedJobs) => {
            spec.validate()?;
            Ok(Selection::too_little(arms, before, hysteresis, spec, 0))
        }
        Err(e) => Err(e.into()),
    }
}

/// The selector on a replayed log (`select_log` reads and replays the files first).
pub fn select(
    replayed: &Replayed,
    arms: &[String],
    before: usize,
    hysteresis: f64,
    spec: &VerdictSpec,
    build: &BuildPolicy<'_>,
) -> Result<Selection, VerdictError> {
    spec.validate()?;
    let too_little = |jobs| Selection::too_little(arms, before, hysteresis, spec, jobs);
    let recent = verdict::recent(&replayed.trace, replayed.end, spec);
    let options = harness::policy_options(&recent, 0, &PolicyConfig::default());
    for name in arms {
        build(name, &options).map_err(HarnessError::from)?;
    }
    if recent.len() < spec.min_jobs {
        return Ok(too_little(recent.len()));
    }
    let runs = verdict::run_windows(replayed, &recent, arms, spec, build)?;
    let (following, challenger) = choose(&runs.avg_jct, before, hysteresis, spec.resamples);
    Ok(Selection {
        outcome: if following == before {
            SelectOutcome::Stayed
        } else {
            SelectOutcome::Switched
        },
        arms: arms.to_vec(),
        avg_jct_s: runs.avg_jct.iter().map(|r| mean(r)).collect(),
        before,
        following,
        challenger,
        hysteresis,
        jobs: runs.windows * spec.window_jobs,
        min_jobs: spec.min_jobs,
        windows: runs.windows,
        window_jobs: spec.window_jobs,
        warnings: runs.warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_switches_to_a_clearly_better_arm_and_not_on_noise() {
        // Arm 1 is 20% better on every window: a switch.
        let runs = vec![
            vec![100.0, 110.0, 90.0, 105.0],
            vec![80.0, 88.0, 72.0, 84.0],
        ];
        let (to, challenger) = choose(&runs, 0, 0.02, 1000);
        assert_eq!(to, 1);
        let (best, d) = challenger.unwrap();
        assert_eq!((best, d.wins, d.losses), (1, 4, 0));
        assert!(d.ci_high < 0.0);
        // The followed arm wins ties and keeps its place.
        let tie = vec![vec![100.0; 4], vec![100.0; 4]];
        assert_eq!(choose(&tie, 1, 0.02, 1000), (1, None));
        // Better by 1% on every window: under the 2% hysteresis, no switch.
        let slight = vec![
            vec![100.0, 110.0, 90.0, 105.0],
            vec![99.0, 108.9, 89.1, 103.95],
        ];
        let (to, challenger) = choose(&slight, 0, 0.02, 1000);
        assert_eq!(to, 0);
        assert!(challenger.unwrap().1.ci_high < 0.0, "significant but small");
        // Better by 10% on average, but by noise: worse on two of four windows.
        let noisy = vec![
            vec![100.0, 100.0, 100.0, 100.0],
            vec![40.0, 130.0, 40.0, 150.0],
        ];
        let (to, challenger) = choose(&noisy, 0, 0.02, 1000);
        assert_eq!(to, 0);
        let (_, d) = challenger.unwrap();
        assert!(d.mean_diff < 0.0 && d.ci_high > 0.0, "{d:?}");
        // It switches back as readily when the followed arm falls behind.
        assert_eq!(choose(&runs, 1, 0.02, 1000), (1, None));
        let reversed = vec![runs[1].clone(), runs[0].clone()];
        assert_eq!(choose(&reversed, 1, 0.02, 1000).0, 0);
    }
}
