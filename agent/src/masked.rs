//! A categorical distribution over candidate logits restricted to the legal actions, as pure
//! `f32` arithmetic on slices: the reference the burn loss is tested against, and what a
//! rollout samples from.

/// The logit the model gives a masked action: low enough that its probability is exactly 0
/// in `f32`, yet finite, so `p * log p` is `0 * finite = 0` rather than `0 * -inf = NaN`.
pub const MASKED_LOGIT: f32 = -1.0e9;

/// Log-probabilities over actions; masked actions have probability 0.
#[derive(Debug, Clone, PartialEq)]
pub struct MaskedCategorical {
    /// `log p(a)`, `f32::NEG_INFINITY` where masked.
    log_probs: Vec<f32>,
}

impl MaskedCategorical {
    /// The masked softmax of `logits`. `None` when no action is legal, the lengths differ, or
    /// a legal logit is not finite.
    pub fn new(logits: &[f32], mask: &[bool]) -> Option<Self> {
        if logits.len() != mask.len() {
            return None;
        }
        let legal = || {
            logits
                .iter()
                .zip(mask)
                .filter(|(_, m)| **m)
                .map(|(l, _)| *l)
        };
        if legal().any(|l| !l.is_finite()) {
            return None;
        }
        let max = legal().reduce(f32::max)?;
        // Shifted by the max, so the largest term is exp(0) = 1 and the sum is >= 1.
        let log_sum = legal().map(|l| (l - max).exp()).sum::<f32>().ln() + max;
        let log_probs = logits
            .iter()
            .zip(mask)
            .map(|(l, m)| if *m { l - log_sum } else { f32::NEG_INFINITY })
            .collect();
        Some(MaskedCategorical { log_probs })
    }

    /// `log p(action)`; `-inf` for a masked action.
    pub fn log_prob(&self, action: usize) -> f32 {
        self.log_probs[action]
    }

    /// `p(a)` for every action.
    pub fn probs(&self) -> Vec<f32> {
        self.log_probs.iter().map(|l| l.exp()).collect()
    }

    /// `-sum_a p(a) log p(a)` over the legal actions (masked ones contribute 0).
    pub fn entropy(&self) -> f32 {
        -self
            .log_probs
            .iter()
            .filter(|l| l.is_finite())
            .map(|l| l.exp() * l)
            .sum::<f32>()
    }

    /// The action whose cumulative probability first exceeds `u` (uniform in `[0, 1)`),
    /// among legal actions only; rounding past the total falls on the last legal action.
    pub fn sample(&self, u: f32) -> usize {
        let mut cumulative = 0.0;
        let mut last_legal = 0;
        for (a, l) in self.log_probs.iter().enumerate() {
            if !l.is_finite() {
                continue;
            }
            last_legal = a;
            cumulative += l.exp();
            if u < cumulative {
                return a;
            }
        }
        last_legal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_softmax_over_legal_actions() {
        let d = MaskedCategorical::new(&[1.0, 5.0, 2.0, 0.0], &[true, false, true, true])
            .expect("legal actions");
        let z = 1f32.exp() + 2f32.exp() + 1.0;
        let p = d.probs();
        assert!((p[0] - 1f32.exp() / z).abs() < 1e-6);
        assert_eq!(p[1], 0.0);
        assert!((p[2] - 2f32.exp() / z).abs() < 1e-6);
        assert!((p.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!((d.log_prob(2) - (2.0 - z.ln())).abs() < 1e-6);
        assert_eq!(d.log_prob(1), f32::NEG_INFINITY);
        let h: f32 = -p
            .iter()
            .filter(|p| **p > 0.0)
            .map(|p| p * p.ln())
            .sum::<f32>();
        assert!((d.entropy() - h).abs() < 1e-6);
    }

    #[test]
    fn never_samples_a_masked_action() {
        // The masked action carries by far the largest logit.
        let logits = [0.0, 100.0, 0.5, -3.0, 100.0];
        let mask = [true, false, true, true, false];
        let d = MaskedCategorical::new(&logits, &mask).expect("legal actions");
        for i in 0..=1000 {
            let u = i as f32 / 1000.0; // includes 0 and 1 (past the range)
            assert!(mask[d.sample(u)], "u = {u} sampled a masked action");
        }
        assert_eq!(d.sample(1.0), 3);
        assert_eq!(d.sample(0.0), 0);
    }

    #[test]
    fn one_legal_action_is_certain_without_nan() {
        let d = MaskedCategorical::new(&[3.0, -1.0e30, 7.0], &[false, true, false])
            .expect("one legal action");
        assert_eq!(d.log_prob(1), 0.0);
        assert_eq!(d.probs(), vec![0.0, 1.0, 0.0]);
        assert_eq!(d.entropy(), 0.0);
        assert!(d.probs().iter().all(|p| !p.is_nan()));
        assert_eq!(d.sample(0.0), 1);
        assert_eq!(d.sample(0.999), 1);
    }

    #[test]
    fn model_masked_logits_give_the_same_distribution() {
        // What the model emits (MASKED_LOGIT in masked rows) through a plain softmax.
        let logits = [0.3, MASKED_LOGIT, -1.2];
        let d = MaskedCategorical::new(&logits, &[true, false, true]).expect("legal");
        let plain = MaskedCategorical::new(&logits, &[true; 3]).expect("all legal");
        assert_eq!(plain.probs()[1], 0.0);
        for a in [0, 2] {
            assert!((d.log_prob(a) - plain.log_prob(a)).abs() < 1e-6);
        }
        assert!((d.entropy() - plain.entropy()).abs() < 1e-6);
    }

    #[test]
    fn no_legal_action_or_bad_logits_is_none() {
        assert!(MaskedCategorical::new(&[1.0, 2.0], &[false, false]).is_none());
        assert!(MaskedCategorical::new(&[1.0], &[true, true]).is_none());
        assert!(MaskedCategorical::new(&[f32::NAN, 2.0], &[true, true]).is_none());
        assert!(MaskedCategorical::new(&[f32::NAN, 2.0], &[false, true]).is_some());
    }
}
