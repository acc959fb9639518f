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
use lachesis_env::cluster::TaskPlacement;
use lachesis_env::gym::{
    CANDIDATE_WIDTH, Candidate, Enumerator, EnvConfig, Featurizer, GLOBAL_WIDTH, MAX_CANDIDATES,
    Observation, Taken, WAIT_ACTION, idle_due,
};
use lachesis_env::policy::{Decision, DecisionContext, Placement, Planner, Policy, PolicyError};
use lachesis_env::units::{NodeId, SimTime};
use std::path::Path;

/// How a decision is built from the model's scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Deciding {
    /// One placement per model pass, the shortlist rebuilt after each: exactly the steps the
    /// environment takes in training (`rl:PATH`).
    #[default]
    Stepwise,
    /// Every candidate of one pass, best score first (`rl-batched:PATH`, the service's
    /// default). The first is taken as scored; each later one is placed again by its own
    /// proposer on the cluster the earlier ones left (the model chose the job and the
    /// proposer), or, for a preemption, taken only if no earlier one touched its nodes. A job
    /// is placed once and a victim preempted once; what is passed over waits for the next
    /// pass, until a pass takes nothing or the model ranks "wait" first. Far fewer passes for
    /// a long queue on a large cluster; the model's scores of a pass's later candidates are
    /// those of the cluster at the start of the pass.
    Batched,
}

impl Deciding {
    /// Every way of deciding.
    pub const ALL: [Deciding; 2] = [Deciding::Stepwise, Deciding::Batched];

    /// The registry prefix: `rl:PATH` decides stepwise, `rl-batched:PATH` batched.
    pub fn prefix(self) -> &'static str {
        match self {
            Deciding::Stepwise => "rl:",
            Deciding::Batched => "rl-batched:",
        }
    }

    /// The name `serve.toml` and `ModelInfo` use.
    pub fn as_str(self) -> &'static str {
        match self {
            Deciding::Stepwise => "stepwise",
            Deciding::Batched => "batched",
        }
    }

    /// Splits a registry name into how it decides and its model directory.
    pub fn parse(name: &str) -> Option<(Deciding, &str)> {
        let name = name.trim();
        Deciding::ALL
            .into_iter()
            .find_map(|d| name.strip_prefix(d.prefix()).map(|path| (d, path)))
    }
}

impl std::str::FromStr for Deciding {
    type Err = String;

    /// `stepwise` or `batched` (`as_str`'s names), as command lines take them.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Deciding::ALL
            .into_iter()
            .find(|d| d.as_str() == s.trim())
            .ok_or_else(|| format!("{s:?} is not a way of deciding (stepwise or batched)"))
    }
}

/// What scores the candidates of an observation: one logit per row (`MAX_CANDIDATES`), the
/// higher the better; masked rows are ignored. The trained `Scorer` is one; a caller's own
/// (e.g. a model trained in Python) is another, run by `LearnedPolicy::with_scorer`.
pub trait ScoreCandidates: Send {
    fn scores(&self, obs: &Observation) -> Result<Vec<f32>, String>;
}

/// A burn `Scorer` on a device, for inference.
struct ModelScores {
    model: Scorer,
    device: Device,
}

impl ScoreCandidates for ModelScores {
    fn scores(&self, obs: &Observation) -> Result<Vec<f32>, String> {
        score(&self.model, &self.device, obs)
    }
}

/// A candidate scorer acting as a scheduling policy: a trained model, or any
/// `ScoreCandidates`.
pub struct LearnedPolicy {
    name: String,
    deciding: Deciding,
    scorer: Box<dyn ScoreCandidates>,
    env: EnvConfig,
    /// Built at the first decision, when the cluster is known.
    enumerator: Option<Enumerator>,
    /// The first decision's time: the episode's origin for the `elapsed` feature.
    start: Option<SimTime>,
    /// Model passes (shortlist, features, scores) over this policy's life.
    passes: u64,
    /// When it last looked at a point with nobody waiting: once a
    /// [`lachesis_env::gym::RESIZE_ROUND`], as in the environment it was trained in.
    idle_at: Option<SimTime>,
}

impl std::fmt::Debug for LearnedPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LearnedPolicy")
            .field("name", &self.name)
            .field("jobs_considered", &self.env.jobs_considered)
            .finish()
    }
}

/// The legal actions, highest logit first (ties: the lowest index first).
pub fn ranked(logits: &[f32], mask: &[bool]) -> Vec<usize> {
    let mut legal: Vec<usize> = (0..logits.len().min(mask.len()))
        .filter(|a| mask[*a])
        .collect();
    legal.sort_by(|a, b| logits[*b].total_cmp(&logits[*a]).then(a.cmp(b)));
    legal
}

/// Takes `chosen` on the planner (its victims freed, then its placement reserved) and into
/// the decision; if it no longer fits, the planner is left as it was and the error says why.
fn take(
    ctx: &DecisionContext<'_>,
    planner: &mut Planner<'_>,
    chosen: &Candidate,
    taken: &mut Taken,
    decision: &mut Decision,
) -> Result<(), String> {
    let mark = planner.mark();
    if chosen.host().is_some() {
        // The GPU is the host's: the planner takes the guest's CPU and memory on the node.
        let mut guest = ctx.job(chosen.placement.job).clone();
        guest.task.gpus = 0;
        guest.task.gpu_milli = 0;
        let cpu_only: Vec<TaskPlacement> = chosen
            .placement
            .tasks
            .iter()
            .map(|t| TaskPlacement {
                node: t.node,
                gpus: Vec::new(),
            })
            .collect();
        planner
            .reserve(&guest, &cpu_only)
            .map_err(|e| e.to_string())?;
        taken.take(chosen);
        decision.shares.push(chosen.placement.clone());
        return Ok(());
    }
    if chosen.is_resize() {
        // The job's tasks freed, its new ones taken, as `ClusterState::resize` does.
        let job = chosen.placement.job;
        let fits = if planner.free_running(job) {
            planner
                .reserve(ctx.job(job), &chosen.placement.tasks)
                .map_err(|e| e.to_string())
        } else {
            Err(format!("job {job} to resize is not running"))
        };
        if fits.is_err() {
            planner.undo_to(mark);
            return fits;
        }
        taken.take(chosen);
        decision.resizes.push(chosen.placement.clone());
        return Ok(());
    }
    let fits = match chosen
        .preemptions
        .iter()
        .find(|v| !planner.free_running(**v))
    {
        Some(v) => Err(format!("victim {v} is not running")),
        None => planner
            .reserve(ctx.job(chosen.placement.job), &chosen.placement.tasks)
            .map_err(|e| e.to_string()),
    };
    if fits.is_err() {
        planner.undo_to(mark);
        return fits;
    }
    taken.take(chosen);
    decision
        .preemptions
        .extend(chosen.preemptions.iter().copied());
    decision.placements.push(chosen.placement.clone());
    Ok(())
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
        let scores = ModelScores {
            model: model.valid(),
            device: Device::flex(),
        };
        Self::with_scorer(name, Box::new(scores), env)
    }

    /// A policy deciding by `scorer`'s scores, with the shortlist of environments built like
    /// `env`: exactly the decisions an agent taking the highest-scored legal action at every
    /// step of such an environment would make.
    pub fn with_scorer(
        name: impl Into<String>,
        scorer: Box<dyn ScoreCandidates>,
        env: &EnvConfig,
    ) -> Self {
        LearnedPolicy {
            name: name.into(),
            deciding: Deciding::Stepwise,
            scorer,
            env: env.clone(),
            enumerator: None,
            start: None,
            passes: 0,
            idle_at: None,
        }
    }

    /// Loads a model directory (see `manifest`); refuses a model of another feature schema.
    pub fn load(dir: &Path, name: impl Into<String>) -> Result<Self, ModelError> {
        let manifest = Manifest::read(dir)?;
        let model = load_scorer(dir, &manifest)?;
        Ok(Self::new(name, &model, &manifest.env))
    }

    /// Model passes (shortlist, features, scores) over this policy's life.
    pub fn passes(&self) -> u64 {
        self.passes
    }

    /// Decides as `deciding` says from now on.
    pub fn deciding(mut self, deciding: Deciding) -> Self {
        self.deciding = deciding;
        self
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
        self.scorer
            .scores(obs)
            .map_or(WAIT_ACTION, |l| greedy(&l, &obs.mask))
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

    /// With resize candidates it may grow a running elastic job while nobody waits.
    fn acts_without_queue(&self) -> bool {
        self.env.model_candidates
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
        // With nobody waiting only a grow of a running elastic job can be taken: a point that
        // offers one at most once a round, as in training.
        let idle = ctx.pending_len() == 0;
        if idle && !idle_due(self.idle_at, ctx.now()) {
            return Ok(Decision::default());
        }
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
            if idle {
                self.idle_at = Some(ctx.now());
            }
            self.passes += 1;
            let obs = point.observation(enumerator.featurizer(), true);
            let logits = self
                .scorer
                .scores(&obs)
                .map_err(|message| PolicyError::Failed {
                    policy: self.name.clone(),
                    message,
                })?;
            if logits.len() != MAX_CANDIDATES {
                return Err(PolicyError::InvalidOutput {
                    policy: self.name.clone(),
                    message: format!(
                        "{} scores for {MAX_CANDIDATES} candidate rows",
                        logits.len()
                    ),
                });
            }
            if let Some(bad) = obs
                .legal_actions()
                .map(|a| logits[a])
                .find(|l| !l.is_finite())
            {
                return Err(PolicyError::InvalidOutput {
                    policy: self.name.clone(),
                    message: format!("the scorer scored a legal candidate {bad}"),
                });
            }
            let before = decision.placements.len() + decision.resizes.len();
            match self.deciding {
                Deciding::Stepwise => {
                    let best = greedy(&logits, &obs.mask);
                    if best == WAIT_ACTION {
                        break;
                    }
                    take(
                        ctx,
                        &mut planner,
                        &point.candidates[best],
                        &mut taken,
                        &mut decision,
                    )
                    .map_err(|why| PolicyError::Failed {
                        policy: self.name.clone(),
                        message: format!("a candidate no longer fits: {why}"),
                    })?;
                }
                Deciding::Batched => {
                    // Nodes this pass placed on or freed. A later placement of the pass is
                    // asked of its proposer again on the cluster as it now is (the model
                    // chose the job and the proposer, not a node measured on what was); a
                    // later preemption on those nodes waits for the next pass.
                    let mut touched: Vec<NodeId> = Vec::new();
                    for a in ranked(&logits, &obs.mask) {
                        // The model would rather wait than take what it scored lower.
                        if a == WAIT_ACTION {
                            break;
                        }
                        let c = &point.candidates[a];
                        if taken.placed.contains(&c.placement.job)
                            || taken.touches(c.placement.job)
                            || c.host().is_some_and(|h| taken.touches(h))
                            || c.preemptions.iter().any(|v| taken.touches(*v))
                            || !taken.allows_resize(c)
                        {
                            continue;
                        }
                        let fresh;
                        let chosen = if touched.is_empty() || c.host().is_some() {
                            // A share is on its host's GPU, wherever this pass went; `take`
                            // checks the node still has the CPU and memory.
                            c
                        } else if c.is_resize() {
                            // A resize measured on what was: only where this pass left no mark.
                            let old = planner.state().allocation(c.placement.job);
                            let near = old
                                .into_iter()
                                .flat_map(|a| a.tasks.iter())
                                .chain(&c.placement.tasks)
                                .any(|t| touched.contains(&t.node));
                            if near {
                                continue;
                            }
                            c
                        } else if c.preemptions.is_empty() {
                            let job = ctx.job(c.placement.job);
                            let Some(tasks) = enumerator.propose_again(&mut planner, job, &c.stats)
                            else {
                                continue;
                            };
                            fresh = Candidate {
                                placement: Placement { job: job.id, tasks },
                                ..c.clone()
                            };
                            &fresh
                        } else if c.placement.tasks.iter().any(|t| touched.contains(&t.node)) {
                            continue;
                        } else {
                            c
                        };
                        let freed: Vec<NodeId> = chosen
                            .preemptions
                            .iter()
                            .filter_map(|v| planner.state().allocation(*v))
                            .flat_map(|alloc| alloc.nodes())
                            .collect();
                        // One that no longer fits waits for the next pass.
                        if take(ctx, &mut planner, chosen, &mut taken, &mut decision).is_ok() {
                            touched.extend(chosen.placement.tasks.iter().map(|t| t.node));
                            touched.extend(freed);
                        }
                    }
                }
            }
            if decision.placements.len() + decision.resizes.len() == before {
                break;
            }
        }
        Ok(decision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranked_orders_legal_actions_by_score_ties_by_index() {
        let logits = [0.5, 2.0, f32::NEG_INFINITY, 2.0, -1.0];
        let mask = [true, true, false, true, true];
        assert_eq!(ranked(&logits, &mask), vec![1, 3, 0, 4]);
        assert_eq!(ranked(&logits, &[false; 5]), Vec::<usize>::new());
    }

    #[test]
    fn registry_names_say_how_the_model_decides() {
        assert_eq!(
            Deciding::parse(" rl:models/default"),
            Some((Deciding::Stepwise, "models/default"))
        );
        assert_eq!(
            Deciding::parse("rl-batched:m"),
            Some((Deciding::Batched, "m"))
        );
        assert_eq!(Deciding::parse("fifo/best-fit"), None);
        for d in Deciding::ALL {
            assert_eq!(d.as_str().parse(), Ok(d));
        }
        assert!("greedy".parse::<Deciding>().is_err());
    }
}
