//! The on-policy loop: rollouts over vectorised environments, GAE, clipped PPO updates with
//! global gradient clipping and a linearly annealed learning rate; behaviour cloning before
//! it; evaluation and checkpoints along the way.

use super::eval::{EvalUnit, UnitResult, evaluate, relative_jct};
use super::{Prepared, Progress, TrainConfig, TrainError, fresh_model, init_model, io};
use crate::gae::gae;
use crate::masked::MaskedCategorical;
use crate::model::{ObsBatch, Scorer};
use crate::policy::LearnedPolicy;
use crate::ppo::{Minibatch, PpoLossConfig, ppo_loss};
use crate::tensorboard::SummaryWriter;
use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::activation::log_softmax;
use burn::tensor::{Device, Int, Tensor, TensorData};
use lachesis_env::gym::{EnvConfig, MAX_CANDIDATES, Observation, StepPool, VecEnv};
use lachesis_env::policy::Policy;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// Gymnasium's `NormalizeReward`: rewards divided by the running standard deviation of the
/// discounted return.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct RewardScale {
    count: f64,
    mean: f64,
    m2: f64,
    returns: Vec<f64>,
}

impl RewardScale {
    fn scale(&mut self, env: usize, reward: f32, gamma: f32, done: bool) -> f32 {
        if self.returns.len() <= env {
            self.returns.resize(env + 1, 0.0);
        }
        let r = &mut self.returns[env];
        *r = *r * f64::from(gamma) + f64::from(reward);
        let x = *r;
        if done {
            *r = 0.0;
        }
        self.count += 1.0;
        let delta = x - self.mean;
        self.mean += delta / self.count;
        self.m2 += delta * (x - self.mean);
        let var = if self.count > 1.0 {
            self.m2 / self.count
        } else {
            1.0
        };
        (f64::from(reward) / (var + 1e-8).sqrt()) as f32
    }
}

/// One point of the validation curve.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CurvePoint {
    iteration: u64,
    env_steps: u64,
    wall_s: f64,
    /// Geometric mean of avg JCT relative to the first baseline (lower is better).
    relative_jct: f64,
    avg_jct_s: f64,
    p99_jct_s: f64,
    gpu_alloc: f64,
    frag: f64,
    #[serde(default)]
    unfinished: u64,
}

/// What `--resume` restores besides weights and optimizer.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct State {
    iteration: u64,
    env_steps: u64,
    wall_s: f64,
    best_score: Option<f64>,
    best_iteration: u64,
    /// The kept checkpoint's validation row (for the manifest, without evaluating it again).
    #[serde(default)]
    best_row: Option<crate::manifest::ValidationRow>,
    reward_scale: RewardScale,
    curve: Vec<CurvePoint>,
    /// The config the checkpoint was trained with: resuming with another one is refused.
    config: String,
}

pub(crate) struct Run<'p> {
    cfg: &'p TrainConfig,
    prepared: &'p [Prepared],
    out: std::path::PathBuf,
    device: Device,
    model: Scorer,
    best: Scorer,
    optim: ModuleOptimizer,
    state: State,
    resumed: bool,
    threads: usize,
    /// The workers every `VecEnv` of the run steps on (one pool, not one per training trace).
    step_pool: Option<StepPool>,
    started: Instant,
}

const CHECKPOINT: &str = "checkpoint";

fn save_err(path: &Path) -> impl Fn(burn::store::RecordError) -> TrainError + '_ {
    move |e| TrainError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

impl<'p> Run<'p> {
    pub(crate) fn start(
        cfg: &'p TrainConfig,
        prepared: &'p [Prepared],
        out: &Path,
        options: &super::RunOptions,
        device: &Device,
        threads: usize,
    ) -> Result<Self, TrainError> {
        device.seed(cfg.seed);
        let mut model = if cfg.init.is_empty() {
            fresh_model(cfg, device)
        } else {
            init_model(cfg, device)?
        };
        let mut optim = AdamConfig::new().with_epsilon(cfg.ppo.adam_eps).init();
        let mut state = State {
            config: cfg.to_toml(),
            ..State::default()
        };
        let dir = out.join(CHECKPOINT);
        let mut resumed = false;
        if options.resume {
            let state_path = dir.join("state.json");
            let text = std::fs::read_to_string(&state_path).map_err(io(&state_path))?;
            state = serde_json::from_str(&text).map_err(|e| TrainError::Io {
                path: state_path.clone(),
                message: e.to_string(),
            })?;
            // The same run, perhaps extended: only ppo.total_steps may change.
            let same = TrainConfig::parse(&state.config, &[]).is_ok_and(|mut before| {
                before.ppo.total_steps = cfg.ppo.total_steps;
                before == *cfg
            });
            if !same {
                return Err(TrainError::Config(format!(
                    "{}: the checkpoint was trained with another config; resume with the same \
                     config and overrides (only ppo.total_steps may change), or start over \
                     without --resume",
                    state_path.display()
                )));
            }
            state.config = cfg.to_toml();
            let weights = dir.join("model.bpk");
            model = model.try_load_file(&weights).map_err(save_err(&weights))?;
            let opt = dir.join("optim.bpk");
            optim = optim.load(&opt).map_err(save_err(&opt))?;
            resumed = true;
        }
        let best = if resumed && out.join(CHECKPOINT).join("best.bpk").is_file() {
            let p = dir.join("best.bpk");
            fresh_model(cfg, device)
                .try_load_file(&p)
                .map_err(save_err(&p))?
        } else {
            model.clone()
        };
        Ok(Run {
            cfg,
            prepared,
            out: out.to_path_buf(),
            device: device.clone(),
            model,
            best,
            optim,
            state,
            resumed,
            threads,
            step_pool: StepPool::new(threads),
            started: Instant::now(),
        })
    }

    pub(crate) fn resumed(&self) -> bool {
        self.resumed
    }
    pub(crate) fn iteration(&self) -> u64 {
        self.state.iteration
    }
    pub(crate) fn env_steps(&self) -> u64 {
        self.state.env_steps
    }
    pub(crate) fn best_iteration(&self) -> u64 {
        self.state.best_iteration
    }
    pub(crate) fn prior_wall_s(&self) -> f64 {
        self.state.wall_s
    }
    /// The kept checkpoint's validation row, if this run (or the one it resumes) evaluated it.
    pub(crate) fn best_row(&self) -> Option<crate::manifest::ValidationRow> {
        self.state.best_row.clone()
    }
    pub(crate) fn best_model(&self) -> Scorer {
        self.best.valid()
    }

    /// The reward environment `env` earned, as the learner sees it (normalised if configured).
    fn reward(&mut self, env: usize, reward: f32, done: bool) -> f32 {
        let p = &self.cfg.ppo;
        if p.norm_reward {
            self.state.reward_scale.scale(env, reward, p.gamma, done)
        } else {
            reward
        }
    }

    fn wall_s(&self) -> f64 {
        self.state.wall_s + self.started.elapsed().as_secs_f64()
    }

    fn envs(&self, seed: u64) -> Result<Vec<VecEnv<'p>>, TrainError> {
        let per = self.cfg.ppo.num_envs.max(1);
        self.prepared
            .iter()
            .enumerate()
            .map(|(k, p)| {
                let env_cfg: EnvConfig = p.env.clone();
                VecEnv::new(
                    &p.pool,
                    std::sync::Arc::clone(&p.cluster),
                    env_cfg,
                    per,
                    seed.wrapping_add(k as u64 * 104_729),
                )
                .map(|v| v.with_pool(self.step_pool.as_ref()))
                .map_err(|e| TrainError::Env(format!("{}: {e}", p.name)))
            })
            .collect()
    }

    /// Collects `bc.samples` decisions following the teacher, then fits the policy to its
    /// actions (cross-entropy) and the value head to the discounted (normalised) returns;
    /// then `bc.dagger_rounds` DAgger rounds: the model drives, the teacher labels, refit on
    /// everything so far. Returns the decisions, for the improvement rounds to add to.
    pub(crate) fn behaviour_clone(
        &mut self,
        progress: &mut dyn FnMut(Progress),
        tb: &mut SummaryWriter,
    ) -> Result<super::improve::Cloned, TrainError> {
        let cfg = self.cfg;
        let mut data = self.collect_labels(false, cfg.bc.samples, cfg.seed ^ 0xbc, progress)?;
        tb.add_scalar(
            "bc/teacher_exact_fraction",
            data.exact as f64 / data.obs.len().max(1) as f64,
            0,
        )?;
        let mut epoch0 = 0;
        self.fit(&data, cfg.bc.epochs, &mut epoch0, progress, tb)?;
        for round in 1..=cfg.bc.dagger_rounds {
            let seed = (cfg.seed ^ 0xda99e5).wrapping_add(round as u64 * 7919);
            let more = self.collect_labels(true, cfg.bc.dagger_samples, seed, progress)?;
            // How often the model, driving, chose otherwise than its teacher would have.
            tb.add_scalar(
                "bc/dagger_disagreement",
                more.disagree as f64 / more.obs.len().max(1) as f64,
                round as u64,
            )?;
            data.append(more);
            self.fit(&data, cfg.bc.dagger_epochs, &mut epoch0, progress, tb)?;
        }
        // A fresh optimizer for PPO (BC's moments would carry its larger steps over).
        self.optim = AdamConfig::new().with_epsilon(cfg.ppo.adam_eps).init();
        Ok(super::improve::Cloned {
            observations: data.obs,
            actions: data.actions,
        })
    }

    /// `samples` decisions labelled with each trace's teacher; the teacher drives, or (with
    /// `model_drives`) the current model does, greedily, as it would be deployed.
    fn collect_labels(
        &mut self,
        model_drives: bool,
        samples: usize,
        seed: u64,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Labelled, TrainError> {
        let cfg = self.cfg;
        let mut envs = self.envs(seed)?;
        let total_envs: usize = envs.iter().map(VecEnv::len).sum();
        // Each trace's environments follow that trace's teacher (chosen by replay or given).
        let names: Vec<&str> = envs
            .iter()
            .zip(self.prepared)
            .flat_map(|(v, p)| std::iter::repeat_n(p.teacher.as_str(), v.len()))
            .collect();
        let tables: Vec<Option<&Arc<super::Throughputs>>> = envs
            .iter()
            .zip(self.prepared)
            .flat_map(|(v, p)| std::iter::repeat_n(p.throughputs.as_ref(), v.len()))
            .collect();
        let build = |g: usize, trace: &lachesis_env::job::Trace| {
            super::build_teacher(names[g], trace, tables[g])
                .map_err(|e| TrainError::Config(format!("bc: {e}")))
        };
        let mut teachers: Vec<Box<dyn Policy>> = envs
            .iter()
            .flat_map(|v| (0..v.len()).map(move |i| v.env(i).trace()))
            .enumerate()
            .map(|(g, t)| build(g, t))
            .collect::<Result<_, _>>()?;
        let mut distinct: Vec<&str> = names.clone();
        distinct.dedup();
        let teacher_name = distinct.join(", ");
        let mut obs: Vec<Observation> = Vec::new();
        for v in &mut envs {
            obs.extend(v.reset().map_err(|e| TrainError::Env(e.to_string()))?);
        }
        let driver = model_drives.then(|| self.model.valid());
        let plain = Device::flex();
        let steps_per_env = samples.div_ceil(total_envs);
        let mut out = Labelled::default();
        let mut per_env: Vec<Vec<(usize, f32, bool, bool)>> = vec![Vec::new(); total_envs];
        for t in 0..steps_per_env {
            let mut labels = Vec::with_capacity(total_envs);
            let mut offset = 0;
            for v in &envs {
                for i in 0..v.len() {
                    let (a, same) = v
                        .env(i)
                        .imitate(teachers[offset + i].as_mut())
                        .map_err(|e| TrainError::Env(e.to_string()))?;
                    out.exact += u64::from(same);
                    labels.push(a);
                }
                offset += v.len();
            }
            let acts = match &driver {
                None => labels.clone(),
                Some(model) => {
                    let logits = read(
                        model
                            .forward_batch(&ObsBatch::from_observations(&obs, &plain))
                            .logits,
                    );
                    let mut acts = Vec::with_capacity(total_envs);
                    for (i, o) in obs.iter().enumerate() {
                        let row = &logits[i * MAX_CANDIDATES..(i + 1) * MAX_CANDIDATES];
                        let a = crate::policy::greedy(row, &o.mask);
                        out.disagree += u64::from(a != labels[i]);
                        acts.push(a);
                    }
                    acts
                }
            };
            let mut offset = 0;
            for v in &mut envs {
                let n = v.len();
                let step = v
                    .step(&acts[offset..offset + n])
                    .map_err(|e| TrainError::Env(e.to_string()))?;
                for i in 0..n {
                    let g = offset + i;
                    out.obs
                        .push(std::mem::replace(&mut obs[g], step.obs[i].clone()));
                    out.actions.push(labels[g]);
                    let done = step.terminated[i] || step.truncated[i];
                    let r = self.reward(g, step.rewards[i], done);
                    per_env[g].push((out.obs.len() - 1, r, step.terminated[i], step.truncated[i]));
                    if done {
                        // The environment moved on to a new window (an oracle teacher reads
                        // that window's durations).
                        teachers[g] = build(g, v.env(i).trace())?;
                    }
                }
                offset += n;
            }
            progress(Progress {
                phase: if model_drives { "dagger" } else { "bc-collect" },
                done: (t + 1) as u64,
                total: steps_per_env as u64,
                message: format!("labelled by {teacher_name}"),
            });
        }
        // Monte Carlo returns per environment (no bootstrap: the value head starts untrained).
        out.returns = vec![0.0f32; out.obs.len()];
        for steps in &per_env {
            let rewards: Vec<f32> = steps.iter().map(|s| s.1).collect();
            let zeros = vec![0.0; rewards.len()];
            let term: Vec<bool> = steps.iter().map(|s| s.2).collect();
            let trunc: Vec<bool> = steps.iter().map(|s| s.3).collect();
            let (_, ret) = gae(&rewards, &zeros, &term, &trunc, &zeros, cfg.ppo.gamma, 1.0);
            for (s, r) in steps.iter().zip(ret) {
                out.returns[s.0] = r;
            }
        }
        Ok(out)
    }

    /// `epochs` passes of cross-entropy (and value regression) over `data`; `epoch0` counts
    /// the epochs fitted so far (the TensorBoard step).
    fn fit(
        &mut self,
        data: &Labelled,
        epochs: usize,
        epoch0: &mut usize,
        progress: &mut dyn FnMut(Progress),
        tb: &mut SummaryWriter,
    ) -> Result<(), TrainError> {
        let cfg = self.cfg;
        let n = data.obs.len();
        let mut rng = StdRng::seed_from_u64(cfg.seed ^ 0xb0c ^ (*epoch0 as u64) << 8);
        let mut order: Vec<usize> = (0..n).collect();
        let batches_per_epoch = n.div_ceil(cfg.bc.minibatch);
        let total = (epochs * batches_per_epoch) as u64;
        let mut step = 0u64;
        for epoch in 0..epochs {
            shuffle(&mut order, &mut rng);
            let (mut loss_sum, mut correct, mut seen) = (0.0f64, 0usize, 0usize);
            for chunk in order.chunks(cfg.bc.minibatch) {
                let obs: Vec<Observation> = chunk.iter().map(|i| data.obs[*i].clone()).collect();
                let batch = ObsBatch::from_observations(&obs, &self.device);
                let out = self.model.forward_batch(&batch);
                let b = chunk.len();
                let acts: Vec<i64> = chunk.iter().map(|i| data.actions[*i] as i64).collect();
                let act_t =
                    Tensor::<1, Int>::from_data(TensorData::new(acts.clone(), [b]), &self.device);
                let logp = log_softmax(out.logits.clone(), 1);
                let nll = logp
                    .gather(1, act_t.unsqueeze_dim::<2>(1))
                    .squeeze_dim::<1>(1)
                    .neg()
                    .mean();
                let ret: Vec<f32> = chunk.iter().map(|i| data.returns[*i]).collect();
                let ret_t = Tensor::<1>::from_data(TensorData::new(ret, [b]), &self.device);
                let vloss = (out.values - ret_t).square().mean() * 0.5;
                let loss = nll.clone() + vloss * cfg.ppo.vf_coef;
                let predicted = read(out.logits.argmax(1).squeeze_dim::<1>(1).float());
                correct += predicted
                    .iter()
                    .zip(&acts)
                    .filter(|(p, a)| **p as i64 == **a)
                    .count();
                seen += b;
                loss_sum += f64::from(read(nll)[0]) * b as f64;
                let grads = GradientsParams::from_grads(loss.backward(), &self.model);
                let grads = clip_global_norm(&self.model, grads, cfg.ppo.max_grad_norm);
                self.model = self.optim.step(cfg.bc.lr, self.model.clone(), grads);
                step += 1;
                progress(Progress {
                    phase: "bc-fit",
                    done: step,
                    total,
                    message: format!("epoch {}/{epochs} on {n} decisions", epoch + 1),
                });
            }
            let at = (*epoch0 + epoch) as u64;
            tb.add_scalar("bc/loss", loss_sum / seen.max(1) as f64, at)?;
            tb.add_scalar("bc/accuracy", correct as f64 / seen.max(1) as f64, at)?;
        }
        *epoch0 += epochs;
        Ok(())
    }

    /// The model being trained, for the improvement rounds (`improve.rs`).
    pub(crate) fn model_mut(&mut self) -> &mut Scorer {
        &mut self.model
    }

    /// PPO iterations until `ppo.total_steps`, evaluating every `eval.every` iterations (and
    /// before the first and after the last).
    pub(crate) fn train(
        &mut self,
        progress: &mut dyn FnMut(Progress),
        tb: &mut SummaryWriter,
        units: &[EvalUnit],
        baselines: &[(String, Vec<UnitResult>)],
    ) -> Result<(), TrainError> {
        let cfg = self.cfg;
        let p = &cfg.ppo;
        let per_iteration = (self.prepared.len() * p.num_envs * p.num_steps) as u64;
        let iterations = if p.total_steps == 0 {
            0
        } else {
            p.total_steps.div_ceil(per_iteration)
        };
        // Rollouts per input >= 2: whole episodes per input, input-dependent baselines; the
        // run then ends when `total_steps` environment steps are taken (episodes vary).
        let grouped = p.rollouts_per_input >= 2;
        let done = |s: &State| {
            if grouped {
                s.env_steps >= p.total_steps
            } else {
                s.iteration >= iterations
            }
        };
        // The share of the run still to go (1 at the start, 0 at the end).
        let remaining = |s: &State| {
            if grouped {
                1.0 - (s.env_steps as f64 / p.total_steps.max(1) as f64).min(1.0)
            } else {
                1.0 - s.iteration as f64 / iterations.max(1) as f64
            }
        };
        if self.state.curve.is_empty() {
            self.evaluate_now(units, baselines, tb)?;
        }
        if done(&self.state) {
            return Ok(());
        }
        let mut envs = if grouped {
            Vec::new()
        } else {
            self.envs(cfg.seed.wrapping_add(self.state.iteration * 31))?
        };
        let mut obs: Vec<Observation> = Vec::new();
        for v in &mut envs {
            obs.extend(v.reset().map_err(|e| TrainError::Env(e.to_string()))?);
        }
        let n_envs = obs.len();
        let mut rng = StdRng::seed_from_u64(cfg.seed.wrapping_add(self.state.iteration) ^ 0x99);
        let mut episode_return = vec![0.0f64; n_envs];
        let mut episode_len = vec![0u64; n_envs];
        let plain = Device::flex();
        while !done(&self.state) {
            let it_start = Instant::now();
            let frac = remaining(&self.state);
            let lr = if p.anneal_lr { p.lr * frac } else { p.lr };
            let ent_coef = p
                .ent_coef_final
                .map_or(p.ent_coef, |end| end + (p.ent_coef - end) * frac as f32);
            let loss_cfg = PpoLossConfig {
                clip_coef: p.clip_coef,
                clip_vloss: p.clip_vloss,
                ent_coef,
                // The input-dependent baseline replaces the value head's.
                vf_coef: if grouped { 0.0 } else { p.vf_coef },
                norm_adv: p.norm_adv,
            };
            let (flat_obs, f_act, f_logp, f_val, f_adv, f_ret) = if grouped {
                let b = self.collect_inputs(&mut rng, 1.0 - frac, tb)?;
                (b.obs, b.act, b.logp, b.val, b.adv, b.ret)
            } else {
                let policy = self.model.valid();
                // Rollout: per env, per step.
                let t_max = p.num_steps;
                let mut b_obs: Vec<Vec<Observation>> = vec![Vec::with_capacity(t_max); n_envs];
                let mut b_act = vec![Vec::with_capacity(t_max); n_envs];
                let mut b_logp = vec![Vec::with_capacity(t_max); n_envs];
                let mut b_val = vec![Vec::with_capacity(t_max); n_envs];
                let mut b_rew = vec![Vec::with_capacity(t_max); n_envs];
                let mut b_term = vec![Vec::with_capacity(t_max); n_envs];
                let mut b_trunc = vec![Vec::with_capacity(t_max); n_envs];
                let mut b_boot = vec![vec![0.0f32; t_max]; n_envs];
                for t in 0..t_max {
                    let out = policy.forward_batch(&ObsBatch::from_observations(&obs, &plain));
                    let logits = read(out.logits);
                    let values = read(out.values);
                    let mut acts = Vec::with_capacity(n_envs);
                    for (i, o) in obs.iter().enumerate() {
                        let row = &logits[i * MAX_CANDIDATES..(i + 1) * MAX_CANDIDATES];
                        let d = MaskedCategorical::new(row, &o.mask).ok_or_else(|| {
                            TrainError::Other("the model produced non-finite logits".into())
                        })?;
                        let a = d.sample(rng.random::<f32>());
                        b_logp[i].push(d.log_prob(a));
                        b_act[i].push(a);
                        b_val[i].push(values[i]);
                        acts.push(a);
                    }
                    let mut offset = 0;
                    let mut finals: Vec<(usize, Observation)> = Vec::new();
                    for v in &mut envs {
                        let n = v.len();
                        let step = v
                            .step(&acts[offset..offset + n])
                            .map_err(|e| TrainError::Env(e.to_string()))?;
                        for i in 0..n {
                            let g = offset + i;
                            let done = step.terminated[i] || step.truncated[i];
                            episode_return[g] += f64::from(step.rewards[i]);
                            episode_len[g] += 1;
                            let r = self.reward(g, step.rewards[i], done);
                            b_rew[g].push(r);
                            b_term[g].push(step.terminated[i]);
                            b_trunc[g].push(step.truncated[i]);
                            b_obs[g].push(std::mem::replace(&mut obs[g], step.obs[i].clone()));
                            if step.truncated[i]
                                && let Some(f) = &step.final_obs[i]
                            {
                                finals.push((g * t_max + t, f.clone()));
                            }
                            if done {
                                let step_no = self.state.env_steps + (t * n_envs + g) as u64;
                                tb.add_scalar(
                                    "charts/episodic_return",
                                    episode_return[g],
                                    step_no,
                                )?;
                                tb.add_scalar(
                                    "charts/episodic_length",
                                    episode_len[g] as f64,
                                    step_no,
                                )?;
                                episode_return[g] = 0.0;
                                episode_len[g] = 0;
                            }
                        }
                        offset += n;
                    }
                    if !finals.is_empty() {
                        let fo: Vec<Observation> = finals.iter().map(|f| f.1.clone()).collect();
                        let v = read(
                            policy
                                .forward_batch(&ObsBatch::from_observations(&fo, &plain))
                                .values,
                        );
                        for ((k, _), value) in finals.iter().zip(v) {
                            b_boot[k / t_max][k % t_max] = value;
                        }
                    }
                }
                // Bootstrap the live episodes from the next observation's value.
                let next_v = read(
                    policy
                        .forward_batch(&ObsBatch::from_observations(&obs, &plain))
                        .values,
                );
                let mut flat_obs = Vec::with_capacity(n_envs * t_max);
                let (mut f_act, mut f_logp, mut f_val, mut f_adv, mut f_ret) =
                    (vec![], vec![], vec![], vec![], vec![]);
                for g in 0..n_envs {
                    b_boot[g][t_max - 1] = if b_trunc[g][t_max - 1] {
                        b_boot[g][t_max - 1]
                    } else {
                        next_v[g]
                    };
                    let (adv, ret) = gae(
                        &b_rew[g],
                        &b_val[g],
                        &b_term[g],
                        &b_trunc[g],
                        &b_boot[g],
                        p.gamma,
                        p.gae_lambda,
                    );
                    flat_obs.append(&mut b_obs[g]);
                    f_act.extend(b_act[g].iter().map(|a| *a as i64));
                    f_logp.extend_from_slice(&b_logp[g]);
                    f_val.extend_from_slice(&b_val[g]);
                    f_adv.extend(adv);
                    f_ret.extend(ret);
                }
                (flat_obs, f_act, f_logp, f_val, f_adv, f_ret)
            };
            self.state.env_steps += flat_obs.len() as u64;
            let rollout_s = it_start.elapsed().as_secs_f64();
            // Update.
            let n = flat_obs.len();
            let mb_size = n.div_ceil(p.num_minibatches);
            let mut order: Vec<usize> = (0..n).collect();
            let mut stats = UpdateStats::default();
            'epochs: for _ in 0..p.update_epochs {
                shuffle(&mut order, &mut rng);
                for chunk in order.chunks(mb_size) {
                    let b = chunk.len();
                    let pick_f = |v: &[f32]| -> Tensor<1> {
                        Tensor::from_data(
                            TensorData::new(chunk.iter().map(|i| v[*i]).collect::<Vec<_>>(), [b]),
                            &self.device,
                        )
                    };
                    let obs: Vec<Observation> =
                        chunk.iter().map(|i| flat_obs[*i].clone()).collect();
                    let mb = Minibatch {
                        obs: ObsBatch::from_observations(&obs, &self.device),
                        actions: Tensor::from_data(
                            TensorData::new(
                                chunk.iter().map(|i| f_act[*i]).collect::<Vec<_>>(),
                                [b],
                            ),
                            &self.device,
                        ),
                        old_log_probs: pick_f(&f_logp),
                        old_values: pick_f(&f_val),
                        advantages: pick_f(&f_adv),
                        returns: pick_f(&f_ret),
                    };
                    let loss = ppo_loss(&self.model, &mb, &loss_cfg);
                    stats.add(&loss);
                    let kl = f64::from(read(loss.approx_kl.clone())[0]);
                    let grads = GradientsParams::from_grads(loss.loss.backward(), &self.model);
                    let grads = clip_global_norm(&self.model, grads, p.max_grad_norm);
                    self.model = self.optim.step(lr, self.model.clone(), grads);
                    if p.target_kl > 0.0 && kl > f64::from(p.target_kl) {
                        break 'epochs;
                    }
                }
            }
            self.state.iteration += 1;
            let step_no = self.state.env_steps;
            let sps = n as f64 / it_start.elapsed().as_secs_f64().max(1e-9);
            let explained = explained_variance(&f_val, &f_ret);
            for (tag, v) in [
                ("charts/learning_rate", lr),
                ("charts/ent_coef", f64::from(ent_coef)),
                ("charts/SPS", sps),
                ("charts/rollout_seconds", rollout_s),
                ("losses/value_loss", stats.mean(0)),
                ("losses/policy_loss", stats.mean(1)),
                ("losses/entropy", stats.mean(2)),
                ("losses/approx_kl", stats.mean(3)),
                ("losses/clipfrac", stats.mean(4)),
                ("losses/explained_variance", explained),
            ] {
                tb.add_scalar(tag, v, step_no)?;
            }
            progress(Progress {
                phase: "ppo",
                done: self.state.iteration,
                total: if grouped {
                    self.state.iteration + (remaining(&self.state) > 0.0) as u64
                } else {
                    iterations
                },
                message: format!(
                    "{} steps, {sps:.0} steps/s, kl {:.4}",
                    step_no,
                    stats.mean(3)
                ),
            });
            let last = done(&self.state);
            if self.state.iteration.is_multiple_of(cfg.eval.every) || last {
                self.evaluate_now(units, baselines, tb)?;
                self.checkpoint()?;
            }
        }
        Ok(())
    }

    /// One iteration's batch in input-baseline mode: for each of `inputs_per_iteration`
    /// inputs (a window of the next training trace, an episode seed, a horizon from the
    /// curriculum at `progress` in [0, 1]), `rollouts_per_input` episodes sampled from the
    /// current policy, their advantages measured against each other (`input_advantages`).
    fn collect_inputs(
        &mut self,
        rng: &mut StdRng,
        progress: f64,
        tb: &mut SummaryWriter,
    ) -> Result<Batch, TrainError> {
        let p = &self.cfg.ppo;
        let policy = self.model.valid();
        let plain = Device::flex();
        let env_err = |e: lachesis_env::gym::EnvError| TrainError::Env(e.to_string());
        let mut batch = Batch::default();
        let mut returns = Vec::new();
        for g in 0..p.inputs_per_iteration {
            let k =
                (self.state.iteration as usize * p.inputs_per_iteration + g) % self.prepared.len();
            let prep = &self.prepared[k];
            let window = &prep.pool[rng.random_range(0..prep.pool.len())];
            let seed: u64 = rng.random();
            let mut env_cfg = prep.env.clone();
            let mean = p.horizon_start + (p.horizon_final - p.horizon_start) * progress;
            if mean > 0.0 {
                let span = window
                    .submit_range()
                    .map_or(0.0, |(a, b)| b.saturating_sub(a).secs_f64())
                    .max(1.0);
                // An exponential draw: short episodes are common, long ones happen.
                let u: f64 = rng.random();
                env_cfg.max_sim_time_s = (-mean * (1.0 - u).ln() * span).max(1.0);
            }
            if env_cfg.max_steps == 0 {
                // Bounds an episode that never ends (a policy preempting back and forth).
                env_cfg.max_steps = 64 * window.len() as u64 + 1024;
            }
            let n = p.rollouts_per_input;
            let mut envs = (0..n)
                .map(|_| {
                    lachesis_env::gym::SchedEnv::new(
                        window,
                        Arc::clone(&prep.cluster),
                        env_cfg.clone(),
                    )
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(env_err)?;
            let mut obs: Vec<Option<Observation>> = Vec::with_capacity(n);
            let mut now = Vec::with_capacity(n);
            for e in &mut envs {
                let (o, info) = e.reset(seed).map_err(env_err)?;
                obs.push(Some(o));
                now.push(info.now_s);
            }
            let mut timed: Vec<Vec<(f64, f32)>> = vec![Vec::new(); n];
            let mut steps: Vec<Vec<(Observation, i64, f32, f32)>> = vec![Vec::new(); n];
            loop {
                let live: Vec<usize> = (0..n).filter(|i| obs[*i].is_some()).collect();
                if live.is_empty() {
                    break;
                }
                let batch_obs: Vec<Observation> =
                    live.iter().filter_map(|i| obs[*i].clone()).collect();
                let out = policy.forward_batch(&ObsBatch::from_observations(&batch_obs, &plain));
                let logits = read(out.logits);
                let values = read(out.values);
                for (row, i) in live.iter().copied().enumerate() {
                    let Some(o) = obs[i].take() else { continue };
                    let scores = &logits[row * MAX_CANDIDATES..(row + 1) * MAX_CANDIDATES];
                    let d = MaskedCategorical::new(scores, &o.mask).ok_or_else(|| {
                        TrainError::Other("the model produced non-finite logits".into())
                    })?;
                    let a = d.sample(rng.random::<f32>());
                    let step = envs[i].step(a).map_err(env_err)?;
                    timed[i].push((now[i], step.reward));
                    steps[i].push((o, a as i64, d.log_prob(a), values[row]));
                    now[i] = step.info.now_s;
                    if !(step.terminated || step.truncated) {
                        obs[i] = Some(step.obs);
                    }
                }
            }
            let adv = crate::input_advantages(&timed)
                .map_err(|e| TrainError::Other(format!("input baseline: {e}")))?;
            for (i, rollout) in steps.into_iter().enumerate() {
                returns.push(adv.returns[i].first().copied().unwrap_or(0.0));
                for (t, (o, a, logp, v)) in rollout.into_iter().enumerate() {
                    batch.obs.push(o);
                    batch.act.push(a);
                    batch.logp.push(logp);
                    batch.val.push(v);
                    batch.adv.push(adv.advantages[i][t]);
                    batch.ret.push(adv.returns[i][t]);
                }
            }
        }
        let step_no = self.state.env_steps + batch.obs.len() as u64;
        let mean = returns.iter().map(|r| f64::from(*r)).sum::<f64>() / returns.len().max(1) as f64;
        tb.add_scalar("charts/episodic_return", mean, step_no)?;
        tb.add_scalar(
            "charts/episodic_length",
            batch.obs.len() as f64 / returns.len().max(1) as f64,
            step_no,
        )?;
        Ok(batch)
    }

    /// Greedy evaluation of the current model on the validation units; keeps it if best.
    fn evaluate_now(
        &mut self,
        units: &[EvalUnit],
        baselines: &[(String, Vec<UnitResult>)],
        tb: &mut SummaryWriter,
    ) -> Result<(), TrainError> {
        let model = self.model.valid();
        let results = evaluate(
            units,
            &|_| Ok(Box::new(LearnedPolicy::new("learned", &model, &self.cfg.env)) as _),
            self.cfg.eval.tick_s,
            self.threads,
        )
        .map_err(TrainError::Other)?;
        let rows = super::validation_table(&[("learned".into(), results.clone())]);
        let row = &rows[0];
        let score = baselines
            .first()
            .map_or(row.avg_jct_s, |(_, b)| relative_jct(&results, b));
        let step = self.state.env_steps;
        for (tag, v) in [
            ("sched/avg_jct_s", row.avg_jct_s),
            ("sched/p99_jct_s", row.p99_jct_s),
            ("sched/gpu_alloc", row.gpu_alloc),
            ("sched/frag", row.frag),
            ("sched/relative_jct", score),
        ] {
            tb.add_scalar(tag, v, step)?;
        }
        if self.state.curve.is_empty() {
            let table = super::validation_table(baselines);
            let mut text =
                String::from("|policy|avg JCT (s)|p99 JCT (s)|GPU alloc|frag|\n|-|-|-|-|-|\n");
            for r in &table {
                text.push_str(&format!(
                    "|{}|{:.0}|{:.0}|{:.3}|{:.3}|\n",
                    r.policy, r.avg_jct_s, r.p99_jct_s, r.gpu_alloc, r.frag
                ));
            }
            tb.add_text("validation/baselines", &text, 0)?;
        }
        self.state.curve.push(CurvePoint {
            iteration: self.state.iteration,
            env_steps: step,
            wall_s: self.wall_s(),
            relative_jct: score,
            avg_jct_s: row.avg_jct_s,
            p99_jct_s: row.p99_jct_s,
            gpu_alloc: row.gpu_alloc,
            frag: row.frag,
            unfinished: row.unfinished,
        });
        // Infinite scores (starved jobs) lose to any finite one; the first evaluation is kept
        // if nothing better ever comes.
        if self.state.best_score.is_none_or(|b| score < b) {
            self.state.best_score = Some(score);
            self.state.best_iteration = self.state.iteration;
            self.state.best_row = Some(row.clone());
            self.best = self.model.clone();
        }
        Ok(())
    }

    /// Writes `OUT/checkpoint/` (latest weights, best weights, optimizer, progress).
    fn checkpoint(&mut self) -> Result<(), TrainError> {
        let dir = self.out.join(CHECKPOINT);
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let p = dir.join("model.bpk");
        self.model.clone().save_file(&p).map_err(save_err(&p))?;
        let p = dir.join("best.bpk");
        self.best.clone().save_file(&p).map_err(save_err(&p))?;
        let p = dir.join("optim.bpk");
        self.optim.save(&p).map_err(save_err(&p))?;
        let mut state = self.state.clone();
        state.wall_s = self.wall_s();
        let p = dir.join("state.json");
        let text = serde_json::to_string_pretty(&state).map_err(|e| TrainError::Io {
            path: p.clone(),
            message: e.to_string(),
        })?;
        std::fs::write(&p, text).map_err(io(&p))
    }

    pub(crate) fn write_curve(&self, path: &Path) -> Result<(), TrainError> {
        let mut s = String::from(
            "iteration,env_steps,wall_s,relative_jct,avg_jct_s,p99_jct_s,gpu_alloc,frag,unfinished\n",
        );
        for c in &self.state.curve {
            s.push_str(&format!(
                "{},{},{:.1},{:.4},{:.1},{:.1},{:.4},{:.4},{}\n",
                c.iteration,
                c.env_steps,
                c.wall_s,
                c.relative_jct,
                c.avg_jct_s,
                c.p99_jct_s,
                c.gpu_alloc,
                c.frag,
                c.unfinished
            ));
        }
        std::fs::write(path, s).map_err(io(path))
    }
}

/// Decisions labelled by the teacher, with the returns of the episodes they were taken in.
#[derive(Default)]
struct Labelled {
    obs: Vec<Observation>,
    actions: Vec<usize>,
    returns: Vec<f32>,
    /// Labels the teacher's own decision mapped to exactly.
    exact: u64,
    /// Decisions where the driving model chose otherwise than the label.
    disagree: u64,
}

impl Labelled {
    fn append(&mut self, mut other: Labelled) {
        self.obs.append(&mut other.obs);
        self.actions.append(&mut other.actions);
        self.returns.append(&mut other.returns);
        self.exact += other.exact;
        self.disagree += other.disagree;
    }
}

/// One iteration's samples, flattened.
#[derive(Default)]
struct Batch {
    obs: Vec<Observation>,
    act: Vec<i64>,
    logp: Vec<f32>,
    val: Vec<f32>,
    adv: Vec<f32>,
    ret: Vec<f32>,
}

#[derive(Default)]
struct UpdateStats {
    sums: [f64; 5],
    n: usize,
}

impl UpdateStats {
    fn add(&mut self, l: &crate::ppo::PpoLoss) {
        let parts = [
            &l.value_loss,
            &l.policy_loss,
            &l.entropy,
            &l.approx_kl,
            &l.clip_fraction,
        ];
        for (s, t) in self.sums.iter_mut().zip(parts) {
            *s += f64::from(read(t.clone())[0]);
        }
        self.n += 1;
    }
    fn mean(&self, k: usize) -> f64 {
        self.sums[k] / self.n.max(1) as f64
    }
}

/// `1 - Var(returns - values) / Var(returns)` (CleanRL's explained variance).
fn explained_variance(values: &[f32], returns: &[f32]) -> f64 {
    let var = |xs: &mut dyn Iterator<Item = f64>| {
        let v: Vec<f64> = xs.collect();
        let m = v.iter().sum::<f64>() / v.len().max(1) as f64;
        v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v.len().max(1) as f64
    };
    let vr = var(&mut returns.iter().map(|r| f64::from(*r)));
    if vr == 0.0 {
        return f64::NAN;
    }
    1.0 - var(&mut returns.iter().zip(values).map(|(r, v)| f64::from(r - v))) / vr
}

fn shuffle(order: &mut [usize], rng: &mut StdRng) {
    for i in (1..order.len()).rev() {
        let j = rng.random_range(0..=i);
        order.swap(i, j);
    }
}

/// A tensor's values as `f32` (empty if it cannot be read).
pub(crate) fn read<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap_or_default()
}

/// Scales every gradient by `max_norm / global_norm` when the global L2 norm over all
/// parameters exceeds `max_norm` (CleanRL's `clip_grad_norm_`; burn's own clipping is per
/// parameter).
pub(crate) fn clip_global_norm(
    model: &Scorer,
    mut grads: GradientsParams,
    max_norm: f32,
) -> GradientsParams {
    if max_norm.is_nan() || max_norm <= 0.0 {
        return grads;
    }
    struct Norm<'g> {
        grads: &'g GradientsParams,
        sum: f64,
    }
    impl ModuleVisitor for Norm<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(g) = self.grads.get::<D>(param.id) {
                self.sum += f64::from(read(g.square().sum())[0]);
            }
        }
    }
    struct Scale<'g> {
        grads: &'g mut GradientsParams,
        factor: f32,
    }
    impl ModuleVisitor for Scale<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(g) = self.grads.remove::<D>(param.id) {
                self.grads.register(param.id, g * self.factor);
            }
        }
    }
    let mut norm = Norm {
        grads: &grads,
        sum: 0.0,
    };
    model.visit(&mut norm);
    let total = norm.sum.sqrt();
    if total > f64::from(max_norm) {
        let factor = (f64::from(max_norm) / (total + 1e-6)) as f32;
        model.visit(&mut Scale {
            grads: &mut grads,
            factor,
        });
    }
    grads
}
