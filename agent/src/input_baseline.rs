//! The input-dependent baseline (Mao et al., "Variance Reduction for Reinforcement Learning
//! in Input-Driven Environments", ICLR'19; used by Decima, SIGCOMM'19), as a pure function.
//!
//! A scheduler's return depends as much on its input (the jobs that arrive, and when) as on
//! its actions: a burst of arrivals makes any policy's return worse. A state-value baseline
//! cannot see the future input, so its advantages carry the input's noise. Running several
//! rollouts over the same input and using, for a step taken at sim time `t`, the mean over
//! those rollouts of the return still to come from `t` removes it: what is left is what the
//! actions changed.
//!
//! The rewards are time integrals (a step's reward covers the sim time from its start to the
//! next step's), so "the return still to come from `t`" in a rollout is the sum of the
//! rewards of its steps that start at `t` or later, as Decima computes it.

/// Why rollouts cannot be compared.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BaselineError {
    #[error("rollout {rollout}, step {step}: time {time} is not finite or goes backwards")]
    Time {
        rollout: usize,
        step: usize,
        time: f64,
    },
    #[error("no rollouts")]
    Empty,
}

/// Returns and advantages of rollouts of one input.
#[derive(Debug, Clone, PartialEq)]
pub struct InputAdvantages {
    /// Per rollout, per step: the undiscounted return from that step to the episode's end.
    pub returns: Vec<Vec<f32>>,
    /// Per rollout, per step: the return minus the baseline at the step's time.
    pub advantages: Vec<Vec<f32>>,
    /// Per rollout, per step: the baseline (the mean over every rollout, this one included,
    /// of the return to come from the step's time).
    pub baselines: Vec<Vec<f32>>,
}

/// `rollouts[k]` lists rollout `k`'s steps as (sim time the step started at, reward), in
/// order; times never decrease within a rollout.
pub fn input_advantages(rollouts: &[Vec<(f64, f32)>]) -> Result<InputAdvantages, BaselineError> {
    if rollouts.is_empty() {
        return Err(BaselineError::Empty);
    }
    for (k, r) in rollouts.iter().enumerate() {
        let mut last = f64::NEG_INFINITY;
        for (i, (t, _)) in r.iter().enumerate() {
            if !t.is_finite() || *t < last {
                return Err(BaselineError::Time {
                    rollout: k,
                    step: i,
                    time: *t,
                });
            }
            last = *t;
        }
    }
    // suffix[k][i]: the sum of rollout k's rewards from step i on (suffix[k][len] = 0).
    let suffix: Vec<Vec<f64>> = rollouts
        .iter()
        .map(|r| {
            let mut s = vec![0.0f64; r.len() + 1];
            for i in (0..r.len()).rev() {
                s[i] = s[i + 1] + f64::from(r[i].1);
            }
            s
        })
        .collect();
    let to_come = |k: usize, t: f64| -> f64 {
        let first = rollouts[k].partition_point(|(s, _)| *s < t);
        suffix[k][first]
    };
    let n = rollouts.len() as f64;
    let mut out = InputAdvantages {
        returns: Vec::with_capacity(rollouts.len()),
        advantages: Vec::with_capacity(rollouts.len()),
        baselines: Vec::with_capacity(rollouts.len()),
    };
    for (k, r) in rollouts.iter().enumerate() {
        let mut ret = Vec::with_capacity(r.len());
        let mut adv = Vec::with_capacity(r.len());
        let mut base = Vec::with_capacity(r.len());
        for (i, (t, _)) in r.iter().enumerate() {
            let b = (0..rollouts.len()).map(|j| to_come(j, *t)).sum::<f64>() / n;
            ret.push(suffix[k][i] as f32);
            adv.push((suffix[k][i] - b) as f32);
            base.push(b as f32);
        }
        out.returns.push(ret);
        out.advantages.push(adv);
        out.baselines.push(base);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The definition, computed the slow way: every step against every step of every rollout.
    fn naive(rollouts: &[Vec<(f64, f32)>]) -> (Vec<Vec<f64>>, Vec<Vec<f64>>) {
        let mut rets = Vec::new();
        let mut advs = Vec::new();
        for r in rollouts {
            let mut ret = Vec::new();
            let mut adv = Vec::new();
            for (i, (t, _)) in r.iter().enumerate() {
                let g: f64 = r[i..].iter().map(|s| f64::from(s.1)).sum();
                let mut b = 0.0;
                for other in rollouts {
                    b += other
                        .iter()
                        .filter(|(s, _)| s >= t)
                        .map(|s| f64::from(s.1))
                        .sum::<f64>();
                }
                b /= rollouts.len() as f64;
                ret.push(g);
                adv.push(g - b);
            }
            rets.push(ret);
            advs.push(adv);
        }
        (rets, advs)
    }

    fn rollout() -> impl Strategy<Value = Vec<(f64, f32)>> {
        prop::collection::vec((0u32..50, -10.0f32..0.0), 0..40).prop_map(|mut steps| {
            // Cumulative times, with repeats (placements take no time).
            let mut t = 0.0;
            steps
                .iter_mut()
                .map(|(dt, r)| {
                    t += f64::from(*dt % 5) * 10.0;
                    (t, *r)
                })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn matches_the_naive_computation(rollouts in prop::collection::vec(rollout(), 1..6)) {
            let fast = input_advantages(&rollouts).unwrap();
            let (rets, advs) = naive(&rollouts);
            for k in 0..rollouts.len() {
                prop_assert_eq!(fast.returns[k].len(), rollouts[k].len());
                for i in 0..rollouts[k].len() {
                    prop_assert!((f64::from(fast.returns[k][i]) - rets[k][i]).abs() < 1e-3);
                    prop_assert!((f64::from(fast.advantages[k][i]) - advs[k][i]).abs() < 1e-3);
                }
            }
        }
    }

    #[test]
    fn identical_rollouts_have_zero_advantage_and_a_better_one_positive() {
        let a = vec![(0.0, -1.0), (10.0, -2.0), (20.0, -3.0)];
        let out = input_advantages(&[a.clone(), a.clone()]).unwrap();
        assert!(out.advantages.iter().flatten().all(|x| x.abs() < 1e-6));
        assert_eq!(out.returns[0], vec![-6.0, -5.0, -3.0]);
        // The second rollout pays less from t = 10 on: its steps there gain, the first's lose.
        let b = vec![(0.0, -1.0), (10.0, -1.0), (20.0, -1.0)];
        let out = input_advantages(&[a, b]).unwrap();
        assert!((out.advantages[1][1] - 1.5).abs() < 1e-6);
        assert!((out.advantages[0][1] + 1.5).abs() < 1e-6);
        // At t = 0 both rollouts' futures are averaged: (-6 + -3) / 2.
        assert!((out.baselines[0][0] + 4.5).abs() < 1e-6);
    }

    #[test]
    fn times_going_backwards_are_refused_by_rollout_and_step() {
        let e = input_advantages(&[vec![(0.0, -1.0)], vec![(5.0, -1.0), (4.0, -1.0)]]);
        assert_eq!(
            e.unwrap_err(),
            BaselineError::Time {
                rollout: 1,
                step: 1,
                time: 4.0
            }
        );
        assert_eq!(input_advantages(&[]).unwrap_err(), BaselineError::Empty);
    }
}
