//! `LearnedPolicy`: a trained `Scorer` behind the simulator's `Policy` trait, so `simulate`,
//! `compare` and the service run it like any heuristic (registry name `rl:PATH`).
//!
//! A decision is built exactly as the environment offers it during training: the shared
//! `Enumerator` shortlists candidates on a planner holding the choices made so far at this
//! instant, the model scores them, the best legal action is taken (greedy), and the loop ends
//! when the model picks "wait" or nothing more can be placed. Nothing here reads a job's true
//! duration.

use crate::manifest::{Manifest, ModelError, WEIGHTS_FILE};
use crate::model::{Scorer, ScorerConfig};
use burn::module::Module;
use burn::tensor::{Bool, Device, Tensor, TensorData};
use lachesis_env::gym::{
    CANDIDATE_WIDTH, Enumerator, EnvConfig, Featurizer, GLOBAL_WIDTH, MAX_CANDIDATES, Observation,
    Taken, WAIT_ACTION,
};
use lachesis_env::policy::{Decision, DecisionContext, Policy, PolicyError};
use lachesis_env::units::SimTime;
use std::path::Path;

/// A trained candidate scorer acting as a scheduling policy.
pub struct LearnedPolicy {
    name: String,
    model: Scorer,
    device: Device,
    env: EnvConfig,
    /// Built at the first decision, when the cluster is known.
    enumerator: Option<Enumerator>,
    /// The first decision's time: the episode's origin for the `elapsed` feature.
    start: Option<SimTime>,
}

impl std::fmt::Debug for LearnedPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LearnedPolicy")
            .field("name", &self.name)
            .field("jobs_considered", &self.env.jobs_considered)
            .finish()
    }
}

/// The index of the highest logit among legal actions (ties: the lowest index).
pub fn greedy(logits: &[f32], mask: &[bool]) -> usize {
    let mut best = WAIT_ACTION;
    let mut best_logit = f32::NEG_INFINITY;
    for (a, (l, legal)) in logits.iter().zip(mask).enumerate() {
        if *legal && *l > best_logit {
            best = a;
            best_logit = *l;
        }
    }
    best
}

impl LearnedPolicy {
    /// A policy around `model` (inference: autodiff is dropped) acting as in environments
    /// built like `env` (its shortlist, proposers and preemption options).
    pub fn new(name: impl Into<String>, model: &Scorer, env: &EnvConfig) -> Self {
        LearnedPolicy {
            name: name.into(),
            model: model.valid(),
            device: Device::flex(),
            env: env.clone(),
            enumerator: None,
            start: None,
        }
    }

    /// Loads a model directory (see `manifest`); refuses a model of another feature schema.
    pub fn load(dir: &Path, name: impl Into<String>) -> Result<Self, ModelError> {
        let manifest = Manifest::read(dir)?;
        let model = load_scorer(dir, &manifest)?;
        Ok(Self::new(name, &model, &manifest.env))
    }

    /// Forgets what earlier decisions taught it: the cluster's totals the features are scaled
    /// by, the episode's origin, the online duration predictor and task mix, and the
    /// per-job caches (job ids are only meaningful within one episode). The next decision is
    /// taken as a first one, so a policy reused on unrelated snapshots (the service's pool)
    /// answers each exactly as a new one would.
    pub fn forget(&mut self) {
        self.enumerator = None;
        self.start = None;
    }

    /// The action the model takes on `obs` (greedy over legal actions; wait if the model's
    /// scores cannot be read).
    pub fn act(&self, obs: &Observation) -> usize {
        score(&self.model, &self.device, obs).map_or(WAIT_ACTION, |l| greedy(&l, &obs.mask))
    }
}

/// The model's logits on `obs`, scoring only the legal rows (padding costs nothing); masked
/// actions get `-inf`.
pub fn score(model: &Scorer, device: &Device, obs: &Observation) -> Result<Vec<f32>, String> {
    let legal: Vec<usize> = obs.legal_actions().collect();
    let n = legal.len();
    let rows: Vec<f32> = legal.iter().flat_map(|a| obs.row(*a)).copied().collect();
    let candidates = Tensor::<3>::from_data(TensorData::new(rows, [1, n, CANDIDATE_WIDTH]), device);
    let global = Tensor::<2>::from_data(
        TensorData::new(obs.global.clone(), [1, GLOBAL_WIDTH]),
        device,
    );
    let mask = Tensor::<2, Bool>::from_data(TensorData::new(vec![true; n], [1, n]), device);
    let scores = model
        .forward(candidates, global, mask)
        .logits
        .into_data()
        .try_to_vec::<f32>()
        .map_err(|e| format!("reading the model's scores: {e:?}"))?;
    let mut out = vec![f32::NEG_INFINITY; MAX_CANDIDATES];
    for (a, s) in legal.iter().zip(scores) {
        out[*a] = s;
    }
    Ok(out)
}

/// The `Scorer` of a model directory whose manifest was read.
pub fn load_scorer(dir: &Path, manifest: &Manifest) -> Result<Scorer, ModelError> {
    let path = dir.join(WEIGHTS_FILE);
    if !path.is_file() {
        return Err(ModelError::Io {
            path,
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no weights file"),
        });
    }
    ScorerConfig::new()
        .with_hidden(manifest.hidden)
        .init(&Device::flex())
        .try_load_file(&path)
        .map_err(|e| ModelError::Weights {
            path,
            message: e.to_string(),
        })
}

impl Policy for LearnedPolicy {
    fn name(&self) -> &str {
        &self.name
    }

    fn decide(&mut self, ctx: &DecisionContext<'_>) -> Result<Decision, PolicyError> {
        let env = &self.env;
        let enumerator = self.enumerator.get_or_insert_with(|| {
            let cluster = ctx.cluster();
            let spec = cluster.spec();
            let featurizer = Featurizer {
                total_gpu_milli: spec.total_gpu_milli(),
                total_gpus: spec.total_gpus(),
                total_cpu_milli: spec.total_cpu_milli(),
                jobs_considered: env.jobs_considered,
            };
            Enumerator::from_config(env, featurizer, MAX_CANDIDATES - 1)
        });
        let start = *self.start.get_or_insert(ctx.now());
        let elapsed = ctx.now().saturating_sub(start);
        enumerator.observe(ctx);
        let mut planner = ctx.planner();
        let mut taken = Taken::default();
        let mut decision = Decision::default();
        let placed_now = |t: &Taken| u32::try_from(t.placed.len()).unwrap_or(u32::MAX);
        loop {
            let point =
                enumerator.enumerate_in(ctx, &mut planner, &taken, placed_now(&taken), elapsed);
            if point.candidates.is_empty() {
                break;
            }
            let obs = point.observation(enumerator.featurizer(), true);
            let logits =
                score(&self.model, &self.device, &obs).map_err(|message| PolicyError::Failed {
                    policy: self.name.clone(),
                    message,
                })?;
            if let Some(bad) = obs
                .legal_actions()
                .map(|a| logits[a])
                .find(|l| !l.is_finite())
            {
                return Err(PolicyError::InvalidOutput {
                    policy: self.name.clone(),
                    message: format!("the model scored a legal candidate {bad}"),
                });
            }
            let best = greedy(&logits, &obs.mask);
            if best == WAIT_ACTION {
                break;
            }
            let chosen = &point.candidates[best];
            for v in &chosen.preemptions {
                planner.free_running(*v);
            }
            planner
                .reserve(ctx.job(chosen.placement.job), &chosen.placement.tasks)
                .map_err(|e| PolicyError::Failed {
                    policy: self.name.clone(),
                    message: format!("a candidate no longer fits: {e}"),
                })?;
            taken.take(chosen);
            decision
                .preemptions
                .extend(chosen.preemptions.iter().copied());
            decision.placements.push(chosen.placement.clone());
        }
        Ok(decision)
    }
}
