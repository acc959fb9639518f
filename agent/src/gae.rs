//! Generalized advantage estimation over one environment's rollout, as a pure function.
//!
//! Termination and truncation are kept apart (as Gymnasium does): a terminated episode has no
//! future, so the step after it bootstraps from 0; a truncated one was cut short, so it
//! bootstraps from the value of its final observation. Either way the advantage recursion
//! stops at the episode boundary.

/// Advantages and returns (`advantages + values`) of a rollout of `T` steps.
///
/// Step `t` is taken from the observation valued `values[t]`, earns `rewards[t]` and ends the
/// episode when `terminated[t]` or `truncated[t]`. `bootstrap_values[t]` is the value of the
/// observation after step `t`, read only where it is not in `values`: where the episode was
/// truncated at `t` (the final observation, before the reset) or where the rollout stops
/// (`t = T - 1`, the next observation of the live episode). Elsewhere it is ignored.
///
/// # Panics
/// If the slices differ in length.
pub fn gae(
    rewards: &[f32],
    values: &[f32],
    terminated: &[bool],
    truncated: &[bool],
    bootstrap_values: &[f32],
    gamma: f32,
    lambda: f32,
) -> (Vec<f32>, Vec<f32>) {
    let n = rewards.len();
    assert!(
        values.len() == n
            && terminated.len() == n
            && truncated.len() == n
            && bootstrap_values.len() == n,
        "gae: rollout slices differ in length"
    );
    let mut advantages = vec![0.0; n];
    let mut next_advantage = 0.0;
    for t in (0..n).rev() {
        let next_value = next_value(values, terminated, truncated, bootstrap_values, t);
        let delta = rewards[t] + gamma * next_value - values[t];
        let carry = if terminated[t] || truncated[t] || t + 1 == n {
            0.0
        } else {
            next_advantage
        };
        next_advantage = delta + gamma * lambda * carry;
        advantages[t] = next_advantage;
    }
    let returns = advantages.iter().zip(values).map(|(a, v)| a + v).collect();
    (advantages, returns)
}

/// The value the step at `t` bootstraps from: 0 past a termination, the final observation's
/// value past a truncation or at the rollout's end, the next step's value otherwise.
fn next_value(
    values: &[f32],
    terminated: &[bool],
    truncated: &[bool],
    bootstrap_values: &[f32],
    t: usize,
) -> f32 {
    if terminated[t] {
        0.0
    } else if truncated[t] || t + 1 == values.len() {
        bootstrap_values[t]
    } else {
        values[t + 1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition: `A_t = sum_l (gamma lambda)^l delta_{t+l}`, summed up to and including
    /// the step that ends the episode or the rollout.
    fn naive(
        rewards: &[f32],
        values: &[f32],
        terminated: &[bool],
        truncated: &[bool],
        bootstrap: &[f32],
        gamma: f32,
        lambda: f32,
    ) -> Vec<f32> {
        let n = rewards.len();
        let delta = |k: usize| {
            let next = if terminated[k] {
                0.0
            } else if truncated[k] || k + 1 == n {
                bootstrap[k]
            } else {
                values[k + 1]
            };
            rewards[k] + gamma * next - values[k]
        };
        let mut out = Vec::with_capacity(n);
        for t in 0..n {
            let mut a = 0.0;
            let mut discount = 1.0;
            for k in t..n {
                a += discount * delta(k);
                if terminated[k] || truncated[k] {
                    break;
                }
                discount *= gamma * lambda;
            }
            out.push(a);
        }
        out
    }

    fn assert_close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-5, "{a:?} != {b:?}");
        }
    }

    #[test]
    fn matches_the_naive_double_loop_with_termination_and_mid_truncation() {
        let rewards = [1.0, 0.5, -0.2, 2.0, 0.0, 0.3, -1.0, 0.7, 0.1];
        let values = [0.3, -0.1, 0.8, 0.2, 0.5, -0.4, 0.9, 0.0, 0.6];
        let terminated = [false, false, true, false, false, false, false, false, false];
        let truncated = [false, false, false, false, true, false, false, false, false];
        // Read at the truncation (t = 4) and at the rollout's end (t = 8); junk elsewhere.
        let bootstrap = [9.0, 9.0, 9.0, 9.0, 1.5, 9.0, 9.0, 9.0, -0.7];
        let (gamma, lambda) = (0.99, 0.95);
        let (adv, ret) = gae(
            &rewards,
            &values,
            &terminated,
            &truncated,
            &bootstrap,
            gamma,
            lambda,
        );
        let expected = naive(
            &rewards,
            &values,
            &terminated,
            &truncated,
            &bootstrap,
            gamma,
            lambda,
        );
        assert_close(&adv, &expected);
        let expected_ret: Vec<f32> = expected.iter().zip(&values).map(|(a, v)| a + v).collect();
        assert_close(&ret, &expected_ret);
    }

    #[test]
    fn truncation_bootstraps_and_termination_does_not() {
        // One step each: r = 1, v = 0, final observation valued 2, gamma 0.5.
        let run = |term, trunc| gae(&[1.0], &[0.0], &[term], &[trunc], &[2.0], 0.5, 0.9).0[0];
        assert_eq!(run(true, false), 1.0); // 1 + 0.5 * 0
        assert_eq!(run(false, true), 2.0); // 1 + 0.5 * 2
        assert_eq!(run(false, false), 2.0); // rollout end: bootstrap too
    }

    #[test]
    fn lambda_one_gives_discounted_return_minus_value() {
        let rewards = [1.0, 1.0, 1.0];
        let values = [0.5, 0.25, 0.125];
        let (adv, ret) = gae(
            &rewards,
            &values,
            &[false, false, true],
            &[false; 3],
            &[0.0; 3],
            0.5,
            1.0,
        );
        // Monte Carlo returns: 1 + 0.5 (1 + 0.5 * 1) = 1.75, 1.5, 1.
        assert_close(&ret, &[1.75, 1.5, 1.0]);
        assert_close(&adv, &[1.25, 1.25, 0.875]);
    }
}
