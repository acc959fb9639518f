//! `Scorer`: the policy and value network over a decision point's candidates.
//!
//! A shared MLP embeds each candidate row concatenated with the global row; a linear head
//! turns each embedding into one logit, so the same weights score any number of candidates
//! (any queue length or cluster size). Masked rows get `MASKED_LOGIT`. The value head reads
//! the mean of the legal candidates' embeddings beside the global row.
//!
//! Init follows CleanRL's `layer_init`: orthogonal weights (burn's `Initializer::Orthogonal`,
//! after Saxe et al.) with gain sqrt(2) in hidden layers, 0.01 on the policy head and 1 on
//! the value head; biases 0.

use crate::masked::MASKED_LOGIT;
use burn::config::Config;
use burn::module::{Module, Param};
use burn::nn::{Initializer, Linear, LinearConfig};
use burn::tensor::activation::sigmoid;
use burn::tensor::{Bool, Device, Tensor, TensorData};
use lachesis_env::gym::{CANDIDATE_WIDTH, GLOBAL_WIDTH, MAX_CANDIDATES, Observation};

/// tanh(x) as 2 sigmoid(2x) - 1, the same function to within 1e-6. burn's `flex` backend
/// evaluates `sigmoid` with one `expf` per element, but `tanh` with libm's `tanhf` (an `expm1f`
/// inside): under callgrind that was two thirds of a 256-candidate decision's instructions
/// (`lachesis bench infer`). Training and inference both use this one.
fn tanh<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    sigmoid(x * 2.0) * 2.0 - 1.0
}

/// Sizes of the `Scorer`.
#[derive(Config, Debug)]
pub struct ScorerConfig {
    /// Features per candidate row.
    #[config(default = "CANDIDATE_WIDTH")]
    pub candidate_width: usize,
    /// Global features of a decision point.
    #[config(default = "GLOBAL_WIDTH")]
    pub global_width: usize,
    /// Width of the hidden layers (candidate embedding and value MLP).
    #[config(default = 64)]
    pub hidden: usize,
}

/// Scores candidates (policy logits) and values a decision point.
#[derive(Module, Debug)]
pub struct Scorer {
    embed_in: Linear,
    embed_out: Linear,
    policy_head: Linear,
    value_in: Linear,
    value_head: Linear,
}

/// A linear layer with orthogonal weights of the given gain and zero bias.
fn layer(d_input: usize, d_output: usize, gain: f64, device: &Device) -> Linear {
    let mut linear = LinearConfig::new(d_input, d_output)
        .with_bias(false)
        .with_initializer(Initializer::Orthogonal { gain })
        .init(device);
    linear.bias = Some(Param::from_tensor(Tensor::zeros([d_output], device)));
    linear
}

impl ScorerConfig {
    /// A freshly initialized `Scorer` on `device`.
    pub fn init(&self, device: &Device) -> Scorer {
        let hidden_gain = std::f64::consts::SQRT_2;
        Scorer {
            embed_in: layer(
                self.candidate_width + self.global_width,
                self.hidden,
                hidden_gain,
                device,
            ),
            embed_out: layer(self.hidden, self.hidden, hidden_gain, device),
            policy_head: layer(self.hidden, 1, 0.01, device),
            value_in: layer(
                self.hidden + self.global_width,
                self.hidden,
                hidden_gain,
                device,
            ),
            value_head: layer(self.hidden, 1, 1.0, device),
        }
    }
}

/// A batch of observations as tensors.
#[derive(Debug, Clone)]
pub struct ObsBatch {
    /// `[B, MAX_CANDIDATES, CANDIDATE_WIDTH]`.
    pub candidates: Tensor<3>,
    /// `[B, GLOBAL_WIDTH]`.
    pub global: Tensor<2>,
    /// `[B, MAX_CANDIDATES]`, true where the action is legal.
    pub mask: Tensor<2, Bool>,
}

impl ObsBatch {
    /// Stacks `observations` (at least one, all of the env's schema) on `device`.
    pub fn from_observations(observations: &[Observation], device: &Device) -> Self {
        let b = observations.len();
        assert!(b > 0, "ObsBatch: no observations");
        let candidates: Vec<f32> = observations
            .iter()
            .flat_map(|o| o.candidates.iter().copied())
            .collect();
        let global: Vec<f32> = observations
            .iter()
            .flat_map(|o| o.global.iter().copied())
            .collect();
        let mask: Vec<bool> = observations
            .iter()
            .flat_map(|o| o.mask.iter().copied())
            .collect();
        ObsBatch {
            candidates: Tensor::from_data(
                TensorData::new(candidates, [b, MAX_CANDIDATES, CANDIDATE_WIDTH]),
                device,
            ),
            global: Tensor::from_data(TensorData::new(global, [b, GLOBAL_WIDTH]), device),
            mask: Tensor::from_data(TensorData::new(mask, [b, MAX_CANDIDATES]), device),
        }
    }
}

/// What the `Scorer` says about a batch.
#[derive(Debug, Clone)]
pub struct ScorerOutput {
    /// `[B, N]`: a logit per candidate, `MASKED_LOGIT` where masked.
    pub logits: Tensor<2>,
    /// `[B]`: the value of each observation.
    pub values: Tensor<1>,
}

impl Scorer {
    /// Scores `candidates` `[B, N, Wc]` given `global` `[B, Wg]` and `mask` `[B, N]`; `N` is
    /// free. Every row of `mask` must allow some action.
    pub fn forward(
        &self,
        candidates: Tensor<3>,
        global: Tensor<2>,
        mask: Tensor<2, Bool>,
    ) -> ScorerOutput {
        let [b, n, _] = candidates.dims();
        let [_, wg] = global.dims();
        let global_per_row = global.clone().unsqueeze_dim::<3>(1).expand([b, n, wg]);
        let rows = Tensor::cat(vec![candidates, global_per_row], 2);
        let embedding = tanh(self.embed_out.forward(tanh(self.embed_in.forward(rows))));
        let logits = self
            .policy_head
            .forward(embedding.clone())
            .squeeze_dim::<2>(2)
            .mask_fill(mask.clone().bool_not(), MASKED_LOGIT);
        // Masked mean over candidates: padding rows must not dilute the pool.
        let weight = mask.float().unsqueeze_dim::<3>(2); // [B, N, 1]
        let count = weight.clone().sum_dim(1).clamp_min(1.0); // [B, 1, 1]
        let pooled = (embedding * weight)
            .sum_dim(1)
            .div(count)
            .squeeze_dim::<2>(1); // [B, H]
        let values = self
            .value_head
            .forward(tanh(
                self.value_in.forward(Tensor::cat(vec![pooled, global], 1)),
            ))
            .squeeze_dim::<1>(1);
        ScorerOutput { logits, values }
    }

    /// `forward` on a batch of observations.
    pub fn forward_batch(&self, batch: &ObsBatch) -> ScorerOutput {
        self.forward(
            batch.candidates.clone(),
            batch.global.clone(),
            batch.mask.clone(),
        )
    }
}

/// Synthetic observations for tests: deterministic pseudo-random features, the first `legal`
/// candidate rows and the wait row legal, the rest zero padding.
#[cfg(test)]
pub(crate) fn test_observation(seed: u64, legal: usize) -> Observation {
    use lachesis_env::gym::WAIT_ACTION;
    let value = |i: usize| {
        let x = (i as u64 * 7919 + seed * 104_729 + 17) % 1000;
        x as f32 / 500.0 - 1.0
    };
    let mask: Vec<bool> = (0..MAX_CANDIDATES)
        .map(|a| a < legal || a == WAIT_ACTION)
        .collect();
    let candidates = (0..MAX_CANDIDATES * CANDIDATE_WIDTH)
        .map(|i| {
            if mask[i / CANDIDATE_WIDTH] {
                value(i)
            } else {
                0.0
            }
        })
        .collect();
    let global = (0..GLOBAL_WIDTH).map(|i| value(i + 5000)).collect();
    Observation {
        candidates,
        global,
        mask,
    }
}

#[cfg(test)]
pub(crate) fn to_vec<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data()
        .try_to_vec::<f32>()
        .expect("an f32 tensor reads back")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tanh_through_sigmoid_is_tanh() {
        let device = Device::flex();
        let xs: Vec<f32> = (-4000..=4000).map(|i| i as f32 * 0.005).collect();
        let n = xs.len();
        let ys = to_vec(super::tanh(Tensor::<1>::from_data(
            TensorData::new(xs.clone(), [n]),
            &device,
        )));
        for (x, y) in xs.iter().zip(&ys) {
            assert!(
                (y - x.tanh()).abs() < 1e-6,
                "tanh({x}) = {} but got {y}",
                x.tanh()
            );
        }
        // Saturates without overflow, and keeps its sign.
        let far = to_vec(super::tanh(Tensor::<1>::from_data(
            TensorData::new(vec![-1e30f32, -100.0, 100.0, 1e30], [4]),
            &device,
        )));
        assert_eq!(far, vec![-1.0, -1.0, 1.0, 1.0]);
    }

    #[test]
    fn scores_a_batch_with_masked_rows_at_the_masked_logit() {
        let device = Device::flex();
        let model = ScorerConfig::new().init(&device);
        let obs = [test_observation(1, 3), test_observation(2, 10)];
        let out = model.forward_batch(&ObsBatch::from_observations(&obs, &device));
        assert_eq!(out.logits.dims(), [2, MAX_CANDIDATES]);
        assert_eq!(out.values.dims(), [2]);
        let logits = to_vec(out.logits);
        for (b, o) in obs.iter().enumerate() {
            for (a, legal) in o.mask.iter().enumerate() {
                let l = logits[b * MAX_CANDIDATES + a];
                assert!(l.is_finite());
                assert_eq!(l == MASKED_LOGIT, !legal, "row {b} action {a}");
            }
        }
        assert!(to_vec(out.values).iter().all(|v| v.is_finite()));
    }

    #[test]
    fn any_number_of_candidates_and_each_logit_reads_only_its_row() {
        let device = Device::flex();
        let model = ScorerConfig::new().with_hidden(16).init(&device);
        let run = |rows: Vec<f32>, n: usize| {
            let candidates =
                Tensor::<3>::from_data(TensorData::new(rows, [1, n, CANDIDATE_WIDTH]), &device);
            let global = Tensor::<2>::zeros([1, GLOBAL_WIDTH], &device);
            let mask =
                Tensor::<2, Bool>::from_data(TensorData::new(vec![true; n], [1, n]), &device);
            to_vec(model.forward(candidates, global, mask).logits)
        };
        let row: Vec<f32> = (0..CANDIDATE_WIDTH).map(|i| i as f32 / 10.0).collect();
        let three: Vec<f32> = [
            row.clone(),
            vec![0.5; CANDIDATE_WIDTH],
            vec![-0.5; CANDIDATE_WIDTH],
        ]
        .concat();
        let hundred: Vec<f32> = (0..100)
            .flat_map(|k| vec![k as f32 / 100.0; CANDIDATE_WIDTH])
            .collect();
        let many: Vec<f32> = [row, hundred].concat();
        let (a, b) = (run(three, 3), run(many, 101));
        assert_eq!((a.len(), b.len()), (3, 101));
        assert!((a[0] - b[0]).abs() < 1e-6);
    }

    #[test]
    fn padding_rows_do_not_change_the_value() {
        let device = Device::flex();
        let model = ScorerConfig::new().init(&device);
        let obs = test_observation(3, 4);
        let mut noisy = obs.clone();
        // Garbage in a masked row must be ignored by the pooled value.
        noisy.candidates[10 * CANDIDATE_WIDTH] = 9.0;
        let values = to_vec(
            model
                .forward_batch(&ObsBatch::from_observations(&[obs, noisy], &device))
                .values,
        );
        assert!((values[0] - values[1]).abs() < 1e-6);
    }
}
