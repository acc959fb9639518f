//! Paired comparisons of policies: per-unit differences against a baseline, a percentile
//! bootstrap confidence interval of their mean, and wins and losses.
//!
//! A unit is one (window, load, seed) on which every policy ran; pairing by unit removes the
//! variation between windows from the difference, as the policies saw identical inputs.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

/// Which way a metric improves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Better {
    Lower,
    Higher,
    /// A count reported for what it says (e.g. resizes): no wins or losses.
    Neither,
}

/// A policy against the baseline on one metric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Paired {
    /// Mean over units of (policy - baseline).
    pub mean_diff: f64,
    /// 95% percentile-bootstrap interval of `mean_diff`.
    pub ci_low: f64,
    pub ci_high: f64,
    /// Units where the policy did better / worse than the baseline (ties are neither).
    pub wins: u32,
    pub losses: u32,
    pub units: u32,
}

impl Paired {
    /// Whether the interval excludes 0: the difference is unlikely to be chance.
    pub fn significant(&self) -> bool {
        self.ci_low > 0.0 || self.ci_high < 0.0
    }
}

/// Compares `policy` with `baseline` unit by unit (same length and order), with `resamples`
/// bootstrap draws from `seed`. Differences within `1e-9` relative count as ties.
pub fn paired(
    baseline: &[f64],
    policy: &[f64],
    better: Better,
    resamples: usize,
    seed: u64,
) -> Paired {
    assert_eq!(
        baseline.len(),
        policy.len(),
        "paired samples have one value per unit each"
    );
    let diffs: Vec<f64> = policy.iter().zip(baseline).map(|(p, b)| p - b).collect();
    let n = diffs.len();
    let mean = |xs: &mut dyn Iterator<Item = f64>| {
        let (sum, count) = xs.fold((0.0, 0usize), |(s, c), x| (s + x, c + 1));
        if count == 0 { 0.0 } else { sum / count as f64 }
    };
    let mean_diff = mean(&mut diffs.iter().copied());
    let (ci_low, ci_high) = if n < 2 {
        (mean_diff, mean_diff)
    } else {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut means: Vec<f64> = (0..resamples.max(1))
            .map(|_| mean(&mut (0..n).map(|_| diffs[rng.random_range(0..n)])))
            .collect();
        means.sort_by(f64::total_cmp);
        (
            super::quantile_sorted(&means, 0.025),
            super::quantile_sorted(&means, 0.975),
        )
    };
    let tie = |p: f64, b: f64| (p - b).abs() <= 1e-9 * p.abs().max(b.abs()).max(1e-12);
    let (mut wins, mut losses) = (0, 0);
    for (p, b) in policy.iter().zip(baseline) {
        if tie(*p, *b) {
            continue;
        }
        let better_now = match better {
            Better::Lower => p < b,
            Better::Higher => p > b,
            Better::Neither => continue,
        };
        if better_now { wins += 1 } else { losses += 1 }
    }
    Paired {
        mean_diff,
        ci_low,
        ci_high,
        wins,
        losses,
        units: n as u32,
    }
}

/// The share of the distance from a heuristic to a bound that a policy closes, over the same
/// units: `(sum h - sum m) / (sum h - sum b)` (1: the policy reached the bound; 0: no better
/// than the heuristic; below 0: worse), with a 95% percentile-bootstrap interval drawing units
/// (all three series together). `None` when the heuristic is already at the bound on average
/// (nothing to capture) or the series are empty.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CapturedShare {
    pub share: f64,
    pub ci_low: f64,
    pub ci_high: f64,
}

pub fn captured_share(
    heuristic: &[f64],
    model: &[f64],
    bound: &[f64],
    resamples: usize,
    seed: u64,
) -> Option<CapturedShare> {
    assert!(
        heuristic.len() == model.len() && model.len() == bound.len(),
        "paired samples have one value per unit each"
    );
    let n = heuristic.len();
    let share_of = |units: &mut dyn Iterator<Item = usize>| {
        let (mut gained, mut room) = (0.0, 0.0);
        for u in units {
            gained += heuristic[u] - model[u];
            room += heuristic[u] - bound[u];
        }
        (room > 0.0).then(|| gained / room)
    };
    let share = share_of(&mut (0..n))?;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut draws: Vec<f64> = (0..resamples.max(1))
        .filter_map(|_| share_of(&mut (0..n).map(|_| rng.random_range(0..n))))
        .collect();
    draws.sort_by(f64::total_cmp);
    let (ci_low, ci_high) = if n < 2 || draws.is_empty() {
        (share, share)
    } else {
        (
            super::quantile_sorted(&draws, 0.025),
            super::quantile_sorted(&draws, 0.975),
        )
    };
    Some(CapturedShare {
        share,
        ci_low,
        ci_high,
    })
}

/// Jain's fairness index of `xs`: (sum x)^2 / (n sum x^2), 1 when all are equal, 1/n when one
/// takes everything; 1 for an empty or all-zero input.
pub fn jain(xs: &[f64]) -> f64 {
    let sum: f64 = xs.iter().sum();
    let squares: f64 = xs.iter().map(|x| x * x).sum();
    if xs.is_empty() || squares == 0.0 {
        1.0
    } else {
        sum * sum / (xs.len() as f64 * squares)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    #[test]
    fn the_captured_share_is_the_ratio_of_summed_gains_to_summed_room() {
        // Units: heuristic 10, 20; model 8, 14; bound 6, 10. Gains 2 + 6 = 8 of room 4 + 10 = 14.
        let s = captured_share(&[10.0, 20.0], &[8.0, 14.0], &[6.0, 10.0], 500, 1).unwrap();
        assert!((s.share - 8.0 / 14.0).abs() < 1e-12);
        // Every resample is a mix of the two units: its share lies between theirs (2/4, 6/10).
        assert!(s.ci_low >= 0.5 - 1e-12 && s.ci_high <= 0.6 + 1e-12, "{s:?}");
        // A model worse than the heuristic captures a negative share; constant units give a
        // point interval.
        let worse = captured_share(&[10.0; 3], &[11.0; 3], &[6.0; 3], 500, 1).unwrap();
        assert_eq!(
            (worse.share, worse.ci_low, worse.ci_high),
            (-0.25, -0.25, -0.25)
        );
        // No room: nothing to capture.
        assert!(captured_share(&[6.0, 6.0], &[6.0, 6.0], &[6.0, 6.0], 500, 1).is_none());
    }

    #[test]
    fn constant_differences_have_a_point_interval() {
        // Every unit is 2 lower: mean -2, interval [-2, -2], all wins for a lower-better metric.
        let p = paired(
            &[10.0, 20.0, 30.0],
            &[8.0, 18.0, 28.0],
            Better::Lower,
            500,
            1,
        );
        assert_eq!((p.mean_diff, p.ci_low, p.ci_high), (-2.0, -2.0, -2.0));
        assert_eq!((p.wins, p.losses, p.units), (3, 0, 3));
        assert!(p.significant());
    }

    #[test]
    fn the_interval_covers_the_true_difference() {
        // Policy = baseline + 1 + noise (sd 1): over 200 experiments of 30 units, a 95% interval
        // should hold the true mean difference 1 in roughly 95% of them; demand at least 85%.
        let mut rng = StdRng::seed_from_u64(42);
        let mut covered = 0;
        for e in 0..200 {
            let base: Vec<f64> = (0..30).map(|_| rng.random_range(0.0..100.0)).collect();
            let pol: Vec<f64> = base
                .iter()
                .map(|b| {
                    // Box-Muller normal noise.
                    let (u1, u2): (f64, f64) = (rng.random(), rng.random());
                    b + 1.0 + (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
                })
                .collect();
            let p = paired(&base, &pol, Better::Lower, 1000, e);
            covered += u32::from(p.ci_low <= 1.0 && 1.0 <= p.ci_high);
        }
        assert!(covered >= 170, "covered {covered} of 200");
    }

    #[test]
    fn higher_is_better_counts_wins_the_other_way_and_ties_are_neither() {
        let p = paired(&[0.5, 0.5, 0.5], &[0.6, 0.5, 0.4], Better::Higher, 100, 0);
        assert_eq!((p.wins, p.losses), (1, 1));
    }

    #[test]
    fn jain_index_bounds() {
        assert_eq!(jain(&[1.0, 1.0, 1.0]), 1.0);
        assert!((jain(&[1.0, 0.0, 0.0, 0.0]) - 0.25).abs() < 1e-12);
        assert_eq!(jain(&[]), 1.0);
    }
}
