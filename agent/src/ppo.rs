//! The clipped PPO objective on a minibatch (CleanRL `ppo.py`'s loss), as a burn computation.
//!
//! `loss = policy_loss - ent_coef * entropy + vf_coef * value_loss`, with the policy loss the
//! clipped surrogate on `ratio = exp(new_log_prob - old_log_prob)`. Minimizing it with one
//! optimizer step is the learner's update; this module holds no optimizer state.

use crate::model::{ObsBatch, Scorer};
use burn::config::Config;
use burn::tensor::activation::log_softmax;
use burn::tensor::{Int, Tensor};

/// Coefficients of the PPO loss (CleanRL's names and defaults).
#[derive(Config, Debug)]
pub struct PpoLossConfig {
    /// The surrogate clipping coefficient: the ratio is clipped to `[1 - c, 1 + c]`.
    #[config(default = 0.2)]
    pub clip_coef: f32,
    /// Clip the value loss around the rollout's values with `clip_coef` too.
    #[config(default = true)]
    pub clip_vloss: bool,
    /// Weight of the entropy bonus.
    #[config(default = 0.01)]
    pub ent_coef: f32,
    /// Weight of the value loss.
    #[config(default = 0.5)]
    pub vf_coef: f32,
    /// Normalize advantages within the minibatch (needs more than one sample to mean much).
    #[config(default = true)]
    pub norm_adv: bool,
}

/// A minibatch of rollout samples, all `[B]` except the observations.
#[derive(Debug, Clone)]
pub struct Minibatch {
    pub obs: ObsBatch,
    pub actions: Tensor<1, Int>,
    /// `log p(action)` under the policy that acted.
    pub old_log_probs: Tensor<1>,
    /// The values the rollout's model gave the observations.
    pub old_values: Tensor<1>,
    pub advantages: Tensor<1>,
    pub returns: Tensor<1>,
}

/// The loss (to call `backward` on) and its parts, for logging.
#[derive(Debug, Clone)]
pub struct PpoLoss {
    /// `[1]`: the objective to minimize.
    pub loss: Tensor<1>,
    pub policy_loss: Tensor<1>,
    pub value_loss: Tensor<1>,
    pub entropy: Tensor<1>,
    /// `[B]`: `exp(new_log_prob - old_log_prob)`.
    pub ratio: Tensor<1>,
    /// `[1]`: CleanRL's `approx_kl`, `mean((ratio - 1) - log ratio)`.
    pub approx_kl: Tensor<1>,
    /// `[1]`: the fraction of samples whose ratio left the clip range.
    pub clip_fraction: Tensor<1>,
}

/// The PPO loss of `model` on `mb`.
pub fn ppo_loss(model: &Scorer, mb: &Minibatch, config: &PpoLossConfig) -> PpoLoss {
    let out = model.forward_batch(&mb.obs);
    let log_probs = log_softmax(out.logits, 1); // [B, N]; masked rows -> exp = 0
    let new_log_probs = log_probs
        .clone()
        .gather(1, mb.actions.clone().unsqueeze_dim::<2>(1))
        .squeeze_dim::<1>(1);
    // p * log p with p = 0 and a finite log p (MASKED_LOGIT) is 0, never NaN.
    let entropy = log_probs
        .clone()
        .exp()
        .mul(log_probs)
        .sum_dim(1)
        .neg()
        .mean();

    let log_ratio = new_log_probs - mb.old_log_probs.clone();
    let ratio = log_ratio.clone().exp();
    let approx_kl = (ratio.clone() - 1.0 - log_ratio).detach().mean();
    let clip_fraction = (ratio.clone() - 1.0)
        .abs()
        .greater_elem(config.clip_coef)
        .float()
        .mean();

    let advantages = if config.norm_adv {
        let a = mb.advantages.clone();
        let mean = a.clone().mean();
        let std = (a.clone() - mean.clone()).square().mean().sqrt();
        (a - mean).div(std + 1e-8)
    } else {
        mb.advantages.clone()
    };
    let unclipped = advantages.clone().neg() * ratio.clone();
    let clipped = advantages.neg()
        * ratio
            .clone()
            .clamp(1.0 - config.clip_coef, 1.0 + config.clip_coef);
    let policy_loss = unclipped.max_pair(clipped).mean();

    let value_error = (out.values.clone() - mb.returns.clone()).square();
    let value_loss = if config.clip_vloss {
        let clipped_values = mb.old_values.clone()
            + (out.values - mb.old_values.clone()).clamp(-config.clip_coef, config.clip_coef);
        let clipped_error = (clipped_values - mb.returns.clone()).square();
        value_error.max_pair(clipped_error).mean() * 0.5
    } else {
        value_error.mean() * 0.5
    };

    let loss = policy_loss.clone() - entropy.clone() * config.ent_coef
        + value_loss.clone() * config.vf_coef;
    PpoLoss {
        loss,
        policy_loss,
        value_loss,
        entropy,
        ratio,
        approx_kl,
        clip_fraction,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::masked::MaskedCategorical;
    use crate::model::{ScorerConfig, test_observation, to_vec};
    use burn::module::Module;
    use burn::optim::{AdamConfig, GradientsParams};
    use burn::tensor::{Device, TensorData};
    use lachesis_env::gym::{MAX_CANDIDATES, Observation};

    fn floats(v: Vec<f32>, device: &Device) -> Tensor<1> {
        let n = v.len();
        Tensor::from_data(TensorData::new(v, [n]), device)
    }

    /// A minibatch of `obs` acting `actions`, with old log-probs and values read from
    /// `model` (as the rollout would) on a plain device, then put on `device`.
    fn minibatch(
        model: &Scorer,
        obs: &[Observation],
        actions: &[usize],
        advantages: Vec<f32>,
        device: &Device,
    ) -> Minibatch {
        let rollout = model.valid();
        let plain = Device::flex();
        let out = rollout.forward_batch(&ObsBatch::from_observations(obs, &plain));
        let log_probs = to_vec(log_softmax(out.logits, 1));
        let old_log_probs: Vec<f32> = actions
            .iter()
            .enumerate()
            .map(|(b, a)| log_probs[b * MAX_CANDIDATES + a])
            .collect();
        let old_values = to_vec(out.values);
        let action_ids: Vec<i64> = actions.iter().map(|a| *a as i64).collect();
        Minibatch {
            obs: ObsBatch::from_observations(obs, device),
            actions: Tensor::from_data(TensorData::new(action_ids, [actions.len()]), device),
            old_log_probs: floats(old_log_probs, device),
            // Returns equal to the values: the value loss has no gradient.
            returns: floats(old_values.clone(), device),
            old_values: floats(old_values, device),
            advantages: floats(advantages, device),
        }
    }

    fn scalar(t: Tensor<1>) -> f32 {
        to_vec(t)[0]
    }

    #[test]
    fn ratio_is_exactly_one_before_any_update() {
        let device = Device::flex().autodiff();
        let model = ScorerConfig::new().init(&device);
        let obs: Vec<Observation> = (0..6)
            .map(|s| test_observation(s, 1 + s as usize))
            .collect();
        // Sample the actions from the pure masked categorical, as a rollout would.
        let logits = to_vec(
            model
                .valid()
                .forward_batch(&ObsBatch::from_observations(&obs, &Device::flex()))
                .logits,
        );
        let actions: Vec<usize> = obs
            .iter()
            .enumerate()
            .map(|(b, o)| {
                let row = &logits[b * MAX_CANDIDATES..(b + 1) * MAX_CANDIDATES];
                let d = MaskedCategorical::new(row, &o.mask).expect("wait is legal");
                d.sample((b as f32 + 0.5) / 6.0)
            })
            .collect();
        let mb = minibatch(
            &model,
            &obs,
            &actions,
            vec![1.0, -0.5, 0.3, 2.0, -1.0, 0.1],
            &device,
        );
        // The pure log-probs agree with the burn ones.
        let old = to_vec(mb.old_log_probs.clone());
        for (b, o) in obs.iter().enumerate() {
            let row = &logits[b * MAX_CANDIDATES..(b + 1) * MAX_CANDIDATES];
            let d = MaskedCategorical::new(row, &o.mask).expect("wait is legal");
            assert!((d.log_prob(actions[b]) - old[b]).abs() < 1e-5);
        }
        let loss = ppo_loss(&model, &mb, &PpoLossConfig::new());
        assert!(to_vec(loss.ratio.clone()).iter().all(|r| *r == 1.0));
        assert_eq!(scalar(loss.approx_kl), 0.0);
        assert_eq!(scalar(loss.clip_fraction), 0.0);
        assert_eq!(scalar(loss.value_loss), 0.0);
        assert!(scalar(loss.entropy) > 0.0);
        assert!(scalar(loss.loss).is_finite());
    }

    #[test]
    fn one_adam_step_raises_the_probability_of_an_advantaged_action() {
        let device = Device::flex().autodiff();
        let model = ScorerConfig::new().init(&device);
        let obs = vec![test_observation(7, 5)];
        let action = 2;
        let prob = |m: &Scorer| {
            let out = m
                .valid()
                .forward_batch(&ObsBatch::from_observations(&obs, &Device::flex()));
            to_vec(log_softmax(out.logits, 1))[action].exp()
        };
        let before = prob(&model);
        let mb = minibatch(&model, &obs, &[action], vec![5.0], &device);
        let config = PpoLossConfig::new().with_norm_adv(false);
        let loss = ppo_loss(&model, &mb, &config);
        let grads = GradientsParams::from_grads(loss.loss.backward(), &model);
        let mut optim = AdamConfig::new().with_epsilon(1e-5).init();
        let model = optim.step(1e-3, model, grads);
        let after = prob(&model);
        assert!(after > before, "p(action) {before} -> {after}");
    }
}
