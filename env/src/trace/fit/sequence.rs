//! How a job resembles the one submitted before it: its shape class and the rank of its
//! duration. Works on class indices, durations and batch starts; knows no job fields.
//!
//! Real traces are not a shuffle of their jobs. In ITP cluster04, 97% of the jobs that
//! continue a batch have the previous job's GPU count, and so do 79% of the batches that
//! follow a batch (60% would by chance); the log durations of neighbours in a batch
//! correlate at 0.67, of neighbouring batches at 0.38. A scheduler feels this: FIFO on that
//! trace's days 30..37 (at load 0.7 on 16 8-GPU nodes) waits 7 to 12 times as long when the
//! jobs are shuffled among their own submit times. Two mechanisms keep it, each with one
//! parameter inside a batch and one across:
//!
//! - **Class repeats.** A job copies the previous job's class with probability `repeat`,
//!   else draws one from the class shares. Fitted so that the share of same-class neighbours
//!   matches the trace, `same = repeat + (1 - repeat) x sum(share^2)`; copying keeps the
//!   class shares.
//! - **Duration ranks.** A job's duration is its class's quantile function at `u = Phi(z)`,
//!   where `z` follows a Gaussian AR(1), `z = rho z_prev + sqrt(1 - rho^2) e`: each `u` is
//!   uniform, so every class keeps its distribution, while neighbours get alike ranks in
//!   theirs. `rho` is the correlation of neighbours' normal scores `Phi^-1((rank - 1/2) / n)`,
//!   the rank taken within the job's class.

use super::dist::{Categorical, normal_cdf, normal_quantile};
use rand::{Rng, RngExt};
use serde::{Deserialize, Serialize};

/// One parameter for neighbours inside a batch, one for a batch and the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Neighbours {
    pub in_batch: f64,
    pub across_batches: f64,
}

impl Neighbours {
    fn get(&self, starts_batch: bool) -> f64 {
        if starts_batch {
            self.across_batches
        } else {
            self.in_batch
        }
    }
}

/// See the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Persistence {
    /// Probability that a job copies the previous job's class.
    pub class_repeat: Neighbours,
    /// Correlation of neighbours' duration normal scores.
    pub duration_rank_corr: Neighbours,
}

impl Persistence {
    /// Fits to jobs in submit order: their classes, class weights, durations and batch starts.
    pub(super) fn fit(
        class_of: &[usize],
        class_jobs: &[u64],
        durations: &[f64],
        batch_start: &[bool],
    ) -> Persistence {
        let total: u64 = class_jobs.iter().sum();
        let chance: f64 = class_jobs
            .iter()
            .map(|&c| (c as f64 / total as f64).powi(2))
            .sum();
        let scores = normal_scores(class_of, durations);
        let fit = |starts: bool| {
            let pairs = (1..class_of.len()).filter(|&i| batch_start[i] == starts);
            let same: Vec<f64> = pairs
                .clone()
                .map(|i| f64::from(u8::from(class_of[i] == class_of[i - 1])))
                .collect();
            let pairs: Vec<(f64, f64)> = pairs.map(|i| (scores[i - 1], scores[i])).collect();
            (repeat_probability(&same, chance), correlation(&pairs))
        };
        let ((repeat_in, corr_in), (repeat_across, corr_across)) = (fit(false), fit(true));
        Persistence {
            class_repeat: Neighbours {
                in_batch: repeat_in,
                across_batches: repeat_across,
            },
            duration_rank_corr: Neighbours {
                in_batch: corr_in,
                across_batches: corr_across,
            },
        }
    }

    /// Checks a loaded value; the message names the field.
    pub(super) fn validate(&self) -> Result<(), String> {
        let p = self.class_repeat;
        for (field, v) in [
            ("in_batch", p.in_batch),
            ("across_batches", p.across_batches),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("persistence.class_repeat.{field} must be in 0..=1"));
            }
        }
        let r = self.duration_rank_corr;
        for (field, v) in [
            ("in_batch", r.in_batch),
            ("across_batches", r.across_batches),
        ] {
            if !(-1.0 < v && v < 1.0) {
                return Err(format!(
                    "persistence.duration_rank_corr.{field} must be in (-1, 1)"
                ));
            }
        }
        Ok(())
    }
}

/// `repeat` such that `repeat + (1 - repeat) x chance` is the observed same-class share.
fn repeat_probability(same: &[f64], chance: f64) -> f64 {
    if same.is_empty() || chance >= 1.0 {
        return 0.0;
    }
    let observed = same.iter().sum::<f64>() / same.len() as f64;
    ((observed - chance) / (1.0 - chance)).clamp(0.0, 1.0)
}

/// Pearson correlation of the pairs, within (-0.99, 0.99); 0 without spread.
fn correlation(pairs: &[(f64, f64)]) -> f64 {
    let n = pairs.len() as f64;
    if pairs.len() < 2 {
        return 0.0;
    }
    let (ma, mb) = pairs
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x / n, b + y / n));
    let (mut cov, mut va, mut vb) = (0.0, 0.0, 0.0);
    for (x, y) in pairs {
        cov += (x - ma) * (y - mb);
        va += (x - ma).powi(2);
        vb += (y - mb).powi(2);
    }
    if va <= 0.0 || vb <= 0.0 {
        return 0.0;
    }
    (cov / (va * vb).sqrt()).clamp(-0.99, 0.99)
}

/// Each job's normal score in its class: `Phi^-1((rank - 1/2) / n)`, ties at their mean rank.
fn normal_scores(class_of: &[usize], durations: &[f64]) -> Vec<f64> {
    let classes = class_of.iter().max().map_or(0, |m| m + 1);
    let mut members = vec![Vec::new(); classes];
    for (i, &c) in class_of.iter().enumerate() {
        members[c].push(i);
    }
    let mut scores = vec![0.0; class_of.len()];
    for mut jobs in members {
        jobs.sort_by(|&a, &b| durations[a].total_cmp(&durations[b]));
        let n = jobs.len() as f64;
        let mut start = 0;
        while start < jobs.len() {
            let end = (start..jobs.len())
                .find(|&k| durations[jobs[k]] != durations[jobs[start]])
                .unwrap_or(jobs.len());
            // Ranks start + 1 ..= end share their mean, (start + end + 1) / 2.
            let u = ((start + end + 1) as f64 / 2.0 - 0.5) / n;
            for &j in &jobs[start..end] {
                scores[j] = normal_quantile(u);
            }
            start = end;
        }
    }
    scores
}

/// The previous job, as the next one needs it.
#[derive(Debug, Clone, Default)]
pub(super) struct Previous {
    class: Option<usize>,
    score: f64,
}

impl Previous {
    /// The next job's class and the probability at which to read its duration.
    pub(super) fn next<R: Rng + ?Sized>(
        &mut self,
        rng: &mut R,
        persistence: &Persistence,
        shares: &Categorical,
        starts_batch: bool,
    ) -> (usize, f64) {
        let class = match self.class {
            Some(c) if rng.random::<f64>() < persistence.class_repeat.get(starts_batch) => c,
            _ => shares.sample(rng),
        };
        let rho = match self.class {
            Some(_) => persistence.duration_rank_corr.get(starts_batch),
            None => 0.0,
        };
        let noise = normal_quantile(rng.random::<f64>());
        self.score = rho * self.score + (1.0 - rho * rho).sqrt() * noise;
        self.class = Some(class);
        (class, normal_cdf(self.score))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn repeat_matches_the_share_of_same_class_neighbours() {
        // Two classes of equal weight: a same-class neighbour happens by chance half the time.
        // In batches, 4 of 6 neighbours are alike: repeat = (2/3 - 1/2) / (1 - 1/2) = 1/3.
        let same = [1.0, 1.0, 1.0, 1.0, 0.0, 0.0];
        assert!((repeat_probability(&same, 0.5) - 1.0 / 3.0).abs() < 1e-12);
        // 3 of 6 is no more than chance: no repeats.
        assert_eq!(
            repeat_probability(&[1.0, 1.0, 1.0, 0.0, 0.0, 0.0], 0.5),
            0.0
        );
        assert_eq!(repeat_probability(&[], 0.5), 0.0);
    }

    #[test]
    fn scores_rank_within_each_class() {
        // Class 0 holds 10, 30, 20 (ranks 1, 3, 2 of 3); class 1 holds 5, 5 (tied: 1.5 of 2).
        let scores = normal_scores(&[0, 0, 1, 0, 1], &[10.0, 30.0, 5.0, 20.0, 5.0]);
        let expect = [
            normal_quantile(0.5 / 3.0),
            normal_quantile(2.5 / 3.0),
            0.0,
            0.0,
            0.0,
        ];
        for (s, e) in scores.iter().zip(expect) {
            assert!((s - e).abs() < 1e-9, "{scores:?}");
        }
    }

    #[test]
    fn fitted_persistence_comes_back_from_draws() {
        // Draw 20,000 jobs with known persistence, one batch start every 4 jobs, and fit.
        let truth = Persistence {
            class_repeat: Neighbours {
                in_batch: 0.9,
                across_batches: 0.3,
            },
            duration_rank_corr: Neighbours {
                in_batch: 0.7,
                across_batches: 0.4,
            },
        };
        let shares = Categorical::new([3, 1]).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let mut previous = Previous::default();
        let (mut class_of, mut durations, mut starts) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..20_000 {
            let (class, u) = previous.next(&mut rng, &truth, &shares, i % 4 == 0);
            class_of.push(class);
            durations.push(u);
            starts.push(i % 4 == 0);
        }
        let fitted = Persistence::fit(&class_of, &[15_000, 5_000], &durations, &starts);
        // 15,000 pairs in batches and 5,000 across: standard errors about 0.01 and 0.02.
        let close = |a: f64, b: f64| (a - b).abs() < 0.06;
        assert!(close(fitted.class_repeat.in_batch, 0.9), "{fitted:?}");
        assert!(close(fitted.class_repeat.across_batches, 0.3), "{fitted:?}");
        assert!(close(fitted.duration_rank_corr.in_batch, 0.7), "{fitted:?}");
        assert!(
            close(fitted.duration_rank_corr.across_batches, 0.4),
            "{fitted:?}"
        );
    }
}
