//! Policy-improvement rounds after behaviour cloning (DAgger-style, issue #24; `[improve]`).
//!
//! Each round, the current model acts (greedy) in training episodes; at decision points drawn
//! at `sample_rate` that have two legal actions or more, the teacher's choice, the model's
//! highest-scored candidates (up to `max_actions`) and "wait" are scored by lookahead
//! (`lachesis_env::gym::lookahead`): `futures` futures whose unfinished jobs last as drawn
//! from the run times of the episode's jobs seen to finish (`PredictedDurations`, never a true
//! duration) and whose arrivals are sampled from the recent ones (never the window's own
//! future submissions; until 2026-12-05 they were the window's), each action followed by the teacher or the model for `horizon_s`, scored by
//! minus jobs in the system x time. The best is the state's label. The labels of every round
//! so far join the cloned decisions (DAgger's aggregation), and the model is refitted to them
//! by cross-entropy. Each round reports the share of labels that differ from the teacher's
//! choice and the refitted model's validation score.

use super::config::ImproveRollout;
use super::eval::{EvalUnit, UnitResult, evaluate, relative_jct};
use super::ppo_loop::{Run, clip_global_norm, read};
use super::{Prepared, Progress, TrainConfig, TrainError};
use crate::manifest::{ImproveRecord, ImproveRound};
use crate::model::{ObsBatch, Scorer};
use crate::policy::{LearnedPolicy, greedy, ranked, score};
use crate::tensorboard::SummaryWriter;
use burn::module::Module;
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::activation::log_softmax;
use burn::tensor::{Device, Int, Tensor, TensorData};
use lachesis_env::gym::{
    EnvError, LookaheadConfig, Observation, PredictedDurations, Rollout, SchedEnv, TeacherRollout,
    WAIT_ACTION, lookahead,
};
use lachesis_env::policy::Policy;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use std::time::Instant;

/// What the manifest and the card say the labels are.
pub const LABEL_SOURCE: &str = "lookahead: each candidate considered is scored by simulating \
    ahead over futures whose unfinished jobs' durations are drawn from the run times of jobs \
    seen to finish (user estimates or a prior before any has), never the true durations, and \
    whose arrivals are sampled at the recent arrival rate as copies of recent jobs, never the \
    window's own future submissions";

/// The decisions behaviour cloning collected (observations and the teacher's actions).
pub(crate) struct Cloned {
    pub observations: Vec<Observation>,
    pub actions: Vec<usize>,
}

/// The current model as a rollout policy: greedy, as it is evaluated.
struct ModelRollout {
    policy: LearnedPolicy,
}

impl Rollout for ModelRollout {
    fn act(&mut self, fork: &SchedEnv<'_>) -> Result<usize, EnvError> {
        let obs = fork.observation().ok_or(EnvError::EpisodeOver)?;
        Ok(self.policy.act(&obs))
    }
}

/// One round's labels and how they went.
struct Labelled {
    observations: Vec<Observation>,
    actions: Vec<usize>,
    differ: usize,
    margins: Vec<f64>,
    seconds: Vec<f64>,
}

/// What the rounds work with besides the model: the run's config, data, device and workers,
/// and the validation units with the baselines' results on them.
pub(crate) struct Setting<'a> {
    pub cfg: &'a TrainConfig,
    pub prepared: &'a [Prepared],
    pub device: &'a Device,
    pub threads: usize,
    pub units: &'a [EvalUnit],
    pub baselines: &'a [(String, Vec<UnitResult>)],
}

/// Runs `improve.rounds` rounds on `run`'s model (see the module docs); `cloned` is what
/// behaviour cloning collected.
pub(crate) fn improve(
    run: &mut Run<'_>,
    cloned: Cloned,
    setting: &Setting<'_>,
    progress: &mut dyn FnMut(Progress),
    tb: &mut SummaryWriter,
) -> Result<ImproveRecord, TrainError> {
    let Setting {
        cfg,
        prepared,
        device,
        threads,
        units,
        baselines,
    } = *setting;
    let mut record = ImproveRecord {
        label_source: LABEL_SOURCE.to_string(),
        settings: toml::to_string(&cfg.improve).unwrap_or_default(),
        rounds: Vec::new(),
    };
    let mut observations = cloned.observations;
    let mut actions = cloned.actions;
    let mut weights = vec![1.0f32; actions.len()];
    for round in 0..cfg.improve.rounds {
        let model = run.model_mut().valid();
        let new = label_round(&model, cfg, prepared, threads, round, progress)?;
        let n = new.actions.len();
        weights.extend(std::iter::repeat_n(cfg.improve.label_weight as f32, n));
        observations.extend(new.observations);
        actions.extend(new.actions);
        refit(
            run.model_mut(),
            &observations,
            &actions,
            &weights,
            cfg,
            device,
            round,
        )?;
        let model = run.model_mut().valid();
        let results = evaluate(
            units,
            &|_| Ok(Box::new(LearnedPolicy::new("learned", &model, &cfg.env)) as _),
            cfg.eval.tick_s,
            threads,
        )
        .map_err(TrainError::Other)?;
        let validation_score = match baselines.first() {
            Some((_, b)) => relative_jct(&results, b),
            None => super::validation_table(&[("learned".into(), results)])[0].avg_jct_s,
        };
        let row = ImproveRound {
            labels: n,
            teacher_disagreement: new.differ as f64 / n.max(1) as f64,
            mean_margin: new.margins.iter().sum::<f64>() / n.max(1) as f64,
            median_label_s: median(new.seconds),
            validation_score,
        };
        let step = round as u64 + 1;
        for (tag, v) in [
            ("improve/labels", n as f64),
            ("improve/teacher_disagreement", row.teacher_disagreement),
            ("improve/mean_margin", row.mean_margin),
            ("improve/median_label_seconds", row.median_label_s),
            ("improve/validation_score", row.validation_score),
        ] {
            tb.add_scalar(tag, v, step)?;
        }
        progress(Progress {
            phase: "improve",
            done: step,
            total: cfg.improve.rounds as u64,
            message: format!(
                "round {step}: {n} labels, {:.0}% unlike the teacher, validation {:.4}",
                100.0 * row.teacher_disagreement,
                row.validation_score
            ),
        });
        record.rounds.push(row);
    }
    Ok(record)
}

fn median(mut xs: Vec<f64>) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Follows `model` (greedy) through training episodes, labelling sampled decision points by
/// lookahead, until `improve.states` labels or `4 x states / sample_rate` steps.
fn label_round(
    model: &Scorer,
    cfg: &TrainConfig,
    prepared: &[Prepared],
    threads: usize,
    round: usize,
    progress: &mut dyn FnMut(Progress),
) -> Result<Labelled, TrainError> {
    let im = &cfg.improve;
    let env_err = |e: EnvError| TrainError::Env(e.to_string());
    let mut rng = StdRng::seed_from_u64(cfg.seed ^ 0x1a9 ^ (round as u64).wrapping_mul(7919));
    let plain = Device::flex();
    let max_steps = (4.0 * im.states as f64 / im.sample_rate).ceil() as usize;
    let mut out = Labelled {
        observations: Vec::new(),
        actions: Vec::new(),
        differ: 0,
        margins: Vec::new(),
        seconds: Vec::new(),
    };
    let mut steps = 0usize;
    while out.actions.len() < im.states && steps < max_steps {
        let p = &prepared[rng.random_range(0..prepared.len())];
        let window = p
            .pool
            .get(rng.random_range(0..p.pool.len().max(1)))
            .ok_or_else(|| TrainError::Data {
                name: p.name.clone(),
                message: "no training window".into(),
            })?;
        let build = || {
            super::build_teacher(&p.teacher, window, p.throughputs.as_ref())
                .map_err(|e| EnvError::Config(format!("improve teacher: {e}")))
        };
        let mut env = SchedEnv::new(window, std::sync::Arc::clone(&p.cluster), p.env.clone())
            .map_err(env_err)?;
        let (_, info) = env.reset(rng.random()).map_err(env_err)?;
        if info.end.is_some() {
            // Nothing to decide in this window.
            steps += 1;
            continue;
        }
        let mut teacher: Box<dyn Policy> = build().map_err(env_err)?;
        let rollout = || -> Result<Box<dyn Rollout>, EnvError> {
            Ok(match im.rollout {
                ImproveRollout::Policy => Box::new(ModelRollout {
                    policy: LearnedPolicy::new("learned", model, &cfg.env),
                }),
                ImproveRollout::Teacher => Box::new(TeacherRollout::new(build()?)),
            })
        };
        loop {
            let obs = env
                .observation()
                .ok_or(EnvError::EpisodeOver)
                .map_err(env_err)?;
            // The teacher is asked at every step (it learns online from what it is shown).
            let (taught, _) = env.imitate(teacher.as_mut()).map_err(env_err)?;
            let logits = score(model, &plain, &obs).map_err(TrainError::Other)?;
            let legal = obs.legal_actions().count();
            if legal >= 2 && rng.random::<f64>() < im.sample_rate {
                let considered = considered(taught, &logits, &obs.mask, im.max_actions);
                let started = Instant::now();
                let label = lookahead(
                    &env,
                    &considered,
                    &PredictedDurations::from_episode(&env, im.prior_mean_s),
                    &rollout,
                    &LookaheadConfig {
                        futures: im.futures,
                        horizon_s: im.horizon_s,
                        seed: rng.random(),
                        threads,
                    },
                )
                .map_err(env_err)?;
                out.seconds.push(started.elapsed().as_secs_f64());
                out.differ += usize::from(label.action != taught);
                out.margins.push(label.margin);
                out.actions.push(label.action);
                out.observations.push(obs.clone());
                progress(Progress {
                    phase: "improve-label",
                    done: out.actions.len() as u64,
                    total: im.states as u64,
                    message: format!("round {}", round + 1),
                });
            }
            steps += 1;
            let step = env.step(greedy(&logits, &obs.mask)).map_err(env_err)?;
            if step.terminated
                || step.truncated
                || out.actions.len() >= im.states
                || steps >= max_steps
            {
                break;
            }
        }
    }
    Ok(out)
}

/// The actions a state's lookahead scores: the teacher's choice first (it wins ties), then
/// the model's highest-scored candidates up to `max_actions` besides "wait", then "wait"
/// where legal.
fn considered(taught: usize, logits: &[f32], mask: &[bool], max_actions: usize) -> Vec<usize> {
    let mut out = vec![taught];
    for a in ranked(logits, mask) {
        let candidates = out.iter().filter(|x| **x != WAIT_ACTION).count();
        if a != WAIT_ACTION && !out.contains(&a) && candidates < max_actions {
            out.push(a);
        }
    }
    if mask.get(WAIT_ACTION).copied().unwrap_or(false) && !out.contains(&WAIT_ACTION) {
        out.push(WAIT_ACTION);
    }
    out
}

/// Fits the policy head to `actions` on `observations` by weighted cross-entropy (`bc`'s
/// epochs, minibatch and learning rate, a fresh Adam).
fn refit(
    model: &mut Scorer,
    observations: &[Observation],
    actions: &[usize],
    weights: &[f32],
    cfg: &TrainConfig,
    device: &Device,
    round: usize,
) -> Result<(), TrainError> {
    let bc = &cfg.bc;
    let mut optim = AdamConfig::new().with_epsilon(cfg.ppo.adam_eps).init();
    let mut rng = StdRng::seed_from_u64(cfg.seed ^ 0x7ef ^ round as u64);
    let mut order: Vec<usize> = (0..observations.len()).collect();
    for _ in 0..bc.epochs {
        order.shuffle(&mut rng);
        for chunk in order.chunks(bc.minibatch.max(1)) {
            let b = chunk.len();
            let obs: Vec<Observation> = chunk.iter().map(|i| observations[*i].clone()).collect();
            let out = model.forward_batch(&ObsBatch::from_observations(&obs, device));
            let acts: Vec<i64> = chunk.iter().map(|i| actions[*i] as i64).collect();
            let act_t = Tensor::<1, Int>::from_data(TensorData::new(acts, [b]), device);
            let w: Vec<f32> = chunk.iter().map(|i| weights[*i]).collect();
            let total: f32 = w.iter().sum();
            let w_t = Tensor::<1>::from_data(TensorData::new(w, [b]), device);
            let nll = log_softmax(out.logits, 1)
                .gather(1, act_t.unsqueeze_dim::<2>(1))
                .squeeze_dim::<1>(1)
                .neg();
            let loss = (nll * w_t).sum() / total.max(f32::MIN_POSITIVE);
            if !read(loss.clone()).first().is_some_and(|l| l.is_finite()) {
                return Err(TrainError::Other(
                    "improve: the refit's loss is not finite".into(),
                ));
            }
            let grads = GradientsParams::from_grads(loss.backward(), &*model);
            let grads = clip_global_norm(model, grads, cfg.ppo.max_grad_norm);
            *model = optim.step(bc.lr, model.clone(), grads);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn considered_puts_the_teacher_first_then_the_model_then_wait() {
        let mut logits = vec![f32::NEG_INFINITY; WAIT_ACTION + 1];
        let mut mask = vec![false; WAIT_ACTION + 1];
        for (a, l) in [(0, 0.5), (1, 2.0), (2, 1.0), (3, 3.0), (WAIT_ACTION, 9.0)] {
            logits[a] = l;
            mask[a] = true;
        }
        // Teacher 2; the model ranks wait, 3, 1, 2, 0: two candidates besides wait.
        assert_eq!(considered(2, &logits, &mask, 2), vec![2, 3, WAIT_ACTION]);
        assert_eq!(
            considered(WAIT_ACTION, &logits, &mask, 2),
            vec![WAIT_ACTION, 3, 1]
        );
        mask[WAIT_ACTION] = false;
        assert_eq!(considered(0, &logits, &mask, 1), vec![0]);
    }
}
