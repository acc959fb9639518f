//! The distributions the workload model is made of, with no knowledge of what they describe:
//! [`Categorical`] (counted outcomes), [`QuantileFn`] (a non-negative number stored as its
//! quantile function at a fixed number of knots, sampled by inverse transform), and the
//! standard normal's [`normal_cdf`] and [`normal_quantile`] (for correlated draws).
//!
//! - Knot `k` (0..KNOTS) sits at probability `p_k = (1 - cos(pi k / (KNOTS - 1))) / 2`:
//!   Chebyshev spacing, dense in both tails (spacing about 0.0006 at the ends, 0.025 in the
//!   middle), so a p99 is read between knots 0.008 apart while the median costs nothing.
//!   Knot 0 is the sample's minimum, the last knot its maximum.
//! - Fitting reads each knot off the sample's quantile function through its order statistics
//!   at the Hazen positions `(i - 0.5) / n`, flat below the first and above the last. With
//!   linear interpolation that function's mean is exactly the sample mean (the usual type-7
//!   positions give the extremes half weight: on the 152 gaps between batches of ITP
//!   cluster10 that lost 8% of the mean gap, and so added 8% to the arrival rate).
//! - Values are interpolated in `ln(1 + x)` space, between order statistics and between
//!   knots: log-like for durations and gaps, which span decades, and still defined at 0
//!   (simultaneous arrivals, zero-length jobs). This costs a little of the mean where a
//!   sample is sparse and heavy-tailed (about 2% on those 152 gaps, under 1% on the
//!   durations of classes of a few hundred jobs).

use rand::{Rng, RngExt};
use serde::{Deserialize, Serialize};
use std::f64::consts::PI;

/// Draws an index with probability proportional to its count.
#[derive(Debug, Clone)]
pub struct Categorical {
    /// Running totals of the counts; the last is the total.
    cumulative: Vec<u64>,
}

impl Categorical {
    /// `None` when every count is 0 (nothing to draw).
    pub fn new(counts: impl IntoIterator<Item = u64>) -> Option<Categorical> {
        let cumulative: Vec<u64> = counts
            .into_iter()
            .scan(0u64, |total, c| {
                // Saturating: absurd counts in a hand-edited model skew draws, never panic.
                *total = total.saturating_add(c);
                Some(*total)
            })
            .collect();
        (cumulative.last().copied().unwrap_or(0) > 0).then_some(Categorical { cumulative })
    }

    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> usize {
        let total = *self.cumulative.last().expect("built with a positive total");
        let x = rng.random_range(0..total);
        // The first index whose running total passes x; zero counts are never drawn.
        self.cumulative.partition_point(|&c| c <= x)
    }
}

/// The standard normal distribution function, by the complementary error function of
/// Numerical Recipes (`erfcc`, relative error below 1.2e-7).
pub fn normal_cdf(z: f64) -> f64 {
    let x = z.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.5 * x);
    let poly = -x * x - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * poly.exp();
    if z >= 0.0 {
        1.0 - erfc / 2.0
    } else {
        erfc / 2.0
    }
}

/// The standard normal quantile at `p` (clamped to 1e-12..=1 - 1e-12), by Acklam's rational
/// approximation (relative error below 1.2e-9).
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    const LOW: f64 = 0.024_25;
    let p = p.clamp(1e-12, 1.0 - 1e-12);
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < LOW {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - LOW {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// Knots of every quantile function.
pub const KNOTS: usize = 64;

/// Values of a distribution at the `KNOTS` Chebyshev-spaced probabilities (module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct QuantileFn(Vec<f64>);

/// Probability of knot `k`.
fn knot_p(k: usize) -> f64 {
    (1.0 - (PI * k as f64 / (KNOTS - 1) as f64).cos()) / 2.0
}

fn to_log(x: f64) -> f64 {
    x.ln_1p()
}

fn from_log(y: f64) -> f64 {
    y.exp_m1().max(0.0)
}

impl QuantileFn {
    /// The quantile function of `sample` (non-negative, finite); `None` when it is empty.
    pub fn from_sample(mut sample: Vec<f64>) -> Option<QuantileFn> {
        if sample.is_empty() {
            return None;
        }
        sample.sort_by(f64::total_cmp);
        let logs: Vec<f64> = sample.into_iter().map(|x| to_log(x.max(0.0))).collect();
        let n = logs.len();
        let values = (0..KNOTS)
            .map(|k| {
                // Order statistic i (0-based) sits at probability (i + 0.5) / n.
                let pos = (knot_p(k) * n as f64 - 0.5).clamp(0.0, (n - 1) as f64);
                let lo = pos.floor() as usize;
                let hi = (lo + 1).min(n - 1);
                from_log(logs[lo] + (logs[hi] - logs[lo]) * (pos - lo as f64))
            })
            .collect();
        Some(QuantileFn(values))
    }

    /// The value at probability `u` (clamped to 0..=1).
    pub fn at(&self, u: f64) -> f64 {
        let u = u.clamp(0.0, 1.0);
        // Invert p_k: k = acos(1 - 2u) (KNOTS - 1) / pi, then interpolate within its interval.
        let x = (1.0 - 2.0 * u).clamp(-1.0, 1.0).acos() * (KNOTS - 1) as f64 / PI;
        let lo = (x.floor() as usize).min(KNOTS - 2);
        let (p_lo, p_hi) = (knot_p(lo), knot_p(lo + 1));
        let w = ((u - p_lo) / (p_hi - p_lo)).clamp(0.0, 1.0);
        let (a, b) = (to_log(self.0[lo]), to_log(self.0[lo + 1]));
        from_log(a + (b - a) * w)
    }

    /// One draw by inverse transform.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        self.at(rng.random::<f64>())
    }

    /// The mean of the distribution drawn by [`QuantileFn::sample`]: on each interval between
    /// knots, `ln(1 + x)` runs linearly from `a` to `b`, so `x` averages
    /// `(e^b - e^a) / (b - a) - 1`.
    pub fn mean(&self) -> f64 {
        (0..KNOTS - 1)
            .map(|k| {
                let (a, b) = (to_log(self.0[k]), to_log(self.0[k + 1]));
                let segment = if b - a > 1e-12 {
                    (b.exp() - a.exp()) / (b - a) - 1.0
                } else {
                    self.0[k]
                };
                segment * (knot_p(k + 1) - knot_p(k))
            })
            .sum()
    }

    /// The knot values, smallest first.
    pub fn knots(&self) -> &[f64] {
        &self.0
    }

    /// Checks a loaded function: `KNOTS` finite, non-negative, non-decreasing values.
    pub fn validate(&self) -> Result<(), String> {
        if self.0.len() != KNOTS {
            return Err(format!("{} knots, expected {KNOTS}", self.0.len()));
        }
        if self.0.iter().any(|v| !v.is_finite() || *v < 0.0) {
            return Err("a knot is negative or not finite".into());
        }
        if self.0.windows(2).any(|w| w[1] < w[0]) {
            return Err("knots are not in increasing order".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categorical_draws_in_proportion_and_skips_zeros() {
        use rand::SeedableRng;
        let c = Categorical::new([1, 0, 3]).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut seen = [0u32; 3];
        for _ in 0..4000 {
            seen[c.sample(&mut rng)] += 1;
        }
        // Expected 1000 / 0 / 3000; sd of the first is sqrt(4000 x 0.25 x 0.75) = 27.
        assert_eq!(seen[1], 0);
        assert!((880..1120).contains(&seen[0]), "{seen:?}");
        assert!(Categorical::new([0, 0]).is_none());
    }

    #[test]
    fn normal_functions_invert_each_other() {
        // Phi(1.959964) = 0.975 and Phi(0) = 0.5, from the tables.
        assert!((normal_cdf(1.959_964) - 0.975).abs() < 1e-6);
        assert!((normal_cdf(-1.959_964) - 0.025).abs() < 1e-6);
        assert!((normal_cdf(0.0) - 0.5).abs() < 1e-7);
        for p in [1e-6, 0.01, 0.02, 0.3, 0.5, 0.9, 0.99, 1.0 - 1e-6] {
            let back = normal_cdf(normal_quantile(p));
            assert!((back / p - 1.0).abs() < 1e-5, "{p} -> {back}");
        }
    }

    #[test]
    fn knots_span_the_sample_and_tails_are_dense() {
        assert_eq!(knot_p(0), 0.0);
        assert!((knot_p(KNOTS - 1) - 1.0).abs() < 1e-15);
        // End spacing (1 - cos(pi / 63)) / 2 = 0.00062; middle spacing about pi / 126 = 0.025.
        assert!((knot_p(1) - 0.000_621).abs() < 1e-5, "{}", knot_p(1));
        let q = QuantileFn::from_sample(vec![5.0, 1.0, 3.0]).unwrap();
        assert_eq!(q.knots().len(), KNOTS);
        assert_eq!((q.at(0.0), q.at(1.0)), (1.0, 5.0));
        // The median of 1, 3, 5 is the middle order statistic. No knot sits at p = 0.5 (knots
        // 31 and 32 are at 0.4875 and 0.5125), so it is read between two knots that are
        // themselves between order statistics: within 1%.
        assert!((q.at(0.5) - 3.0).abs() < 0.03, "{}", q.at(0.5));
        assert!(QuantileFn::from_sample(Vec::new()).is_none());
    }

    #[test]
    fn interpolation_is_log_linear_and_handles_zero() {
        // Two points 0 and e^2 - 1 at probabilities 0.25 and 0.75: ln(1 + x) runs 0..2
        // between them, so the median is e - 1, and the function is flat outside them.
        let q = QuantileFn::from_sample(vec![0.0, 2f64.exp() - 1.0]).unwrap();
        assert!(
            (q.at(0.5) - (1f64.exp() - 1.0)).abs() < 0.01,
            "{}",
            q.at(0.5)
        );
        assert_eq!(q.at(0.2), 0.0);
        assert!((q.at(0.8) - (2f64.exp() - 1.0)).abs() < 1e-9);
        assert_eq!(q.at(0.0), 0.0);
        let constant = QuantileFn::from_sample(vec![7.0; 10]).unwrap();
        assert!((0..=10).all(|i| (constant.at(i as f64 / 10.0) - 7.0).abs() < 1e-9));
    }

    #[test]
    fn quantiles_of_a_large_sample_come_back() {
        // 1..=10000: the p-quantile is 10000 p + 0.5 at the Hazen positions; read between
        // knots in log space, p10/p50/p90/p99 come back within 1%.
        let q = QuantileFn::from_sample((1..=10_000).map(f64::from).collect()).unwrap();
        for p in [0.1, 0.5, 0.9, 0.99] {
            let want = 10_000.0 * p + 0.5;
            assert!((q.at(p) / want - 1.0).abs() < 0.01, "p{p}: {}", q.at(p));
        }
        // The mean, 5000.5, is kept: Hazen positions weigh every value alike, and log
        // interpolation between dense knots is nearly linear.
        assert!((q.mean() / 5000.5 - 1.0).abs() < 0.002, "{}", q.mean());
        assert!(q.validate().is_ok());
        assert!(QuantileFn(vec![1.0; 3]).validate().is_err());
        let mut bad = q.clone();
        bad.0[5] = -1.0;
        assert!(bad.validate().is_err());
    }
}
