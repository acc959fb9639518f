//! The training configuration (`lachesis train --config FILE`, TOML). Unknown fields are
//! rejected; every field has a default, so a file gives only what it changes. Overrides on the
//! command line (`--set ppo.total_steps=20000`) are applied to the TOML before parsing.

use lachesis_env::gym::EnvConfig;
use serde::{Deserialize, Serialize};

/// Everything a training run is built from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainConfig {
    /// Seeds windows, episodes, sampling and initialisation.
    pub seed: u64,
    /// Training traces, each on its cluster (at least one).
    pub data: Vec<DataConfig>,
    /// Held-out scenarios: traces, clusters or typings the model never trains on, compared in
    /// the model card on their validation part beside the training traces' (`[[card]]`).
    pub card: Vec<DataConfig>,
    pub split: SplitConfig,
    pub windows: WindowConfig,
    pub env: EnvConfig,
    pub model: ModelConfig,
    pub bc: BcConfig,
    pub improve: ImproveConfig,
    pub ppo: PpoConfig,
    pub eval: EvalConfig,
    /// Worker threads for the environments and evaluation (0 = every core).
    pub threads: usize,
    /// A trained model directory to start from (fine-tuning): its weights replace the fresh
    /// initialisation; its feature schema, `model` and `env` must be this config's. Empty: a
    /// fresh model.
    pub init: String,
}

/// One trace and the cluster it runs on (resolved by the command line: a preset, a shape,
/// a TOML cluster file or `auto[:G:MODEL@LOAD]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataConfig {
    pub trace: String,
    #[serde(default)]
    pub format: Option<String>,
    #[serde(default = "auto")]
    pub cluster: String,
    /// Run times pulled towards the trace's median (< 1) or spread (> 1) on a log scale,
    /// `d' = m (d / m)^spread` (`lachesis_env::sim::respread_durations`): the same history in
    /// another regime, for training that covers regimes no single trace shows. 1 keeps it.
    #[serde(default = "one")]
    pub spread: f64,
    /// The throughput table typed jobs run at (`gavel`, `sia` or a table file; as
    /// `--throughputs`): the simulator, the teachers and the baselines of this trace read it.
    #[serde(default)]
    pub throughputs: Option<String>,
    /// Types the trace's GPU jobs by Gavel's or Sia's rule (`gavel[:SEED]`, `sia[:SEED]`; as
    /// `--assign-workloads`). Needs `throughputs`.
    #[serde(default)]
    pub assign_workloads: Option<String>,
    /// Makes typed jobs elastic by Pollux's rule (`pollux`; as `--assign-elastic`). Needs
    /// `throughputs`.
    #[serde(default)]
    pub assign_elastic: Option<String>,
}

fn auto() -> String {
    "auto".into()
}

fn one() -> f64 {
    1.0
}

impl DataConfig {
    /// The scenario as the card's section titles name it: the label, then the cluster, the
    /// table and the typing rules where given.
    pub fn scenario(&self) -> String {
        let mut s = format!("`{}`", self.label());
        if self.cluster != "auto" {
            s.push_str(&format!(" on `{}`", self.cluster));
        }
        let parts: Vec<String> = self
            .hetero()
            .map(|(flag, v)| format!("{flag} {v}"))
            .collect();
        if !parts.is_empty() {
            s.push_str(&format!(" ({})", parts.join(", ")));
        }
        s
    }

    /// The table and typing rules given, as `simulate`'s and `compare`'s flags name them
    /// (`throughputs`, `assign-workloads`, `assign-elastic`) with their values.
    pub fn hetero(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [
            ("throughputs", &self.throughputs),
            ("assign-workloads", &self.assign_workloads),
            ("assign-elastic", &self.assign_elastic),
        ]
        .into_iter()
        .filter_map(|(flag, v)| Some((flag, v.as_deref()?)))
    }

    /// The trace's name in the manifest and the card: its path, and its spread unless 1.
    pub fn label(&self) -> String {
        if self.spread == 1.0 {
            self.trace.clone()
        } else {
            format!("{} (spread {})", self.trace, self.spread)
        }
    }
}

/// Time-ordered split of every trace: training windows come from the first `train` fraction
/// of jobs, validation windows from the next `validation` fraction; the rest is test, unused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SplitConfig {
    pub train: f64,
    pub validation: f64,
}

/// Training episodes: random windows of the training split, scaled to random offered loads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WindowConfig {
    /// Jobs per window.
    pub jobs: usize,
    /// Windows drawn per trace (each at every load).
    pub pool: usize,
    /// Offered loads each window is scaled to.
    pub loads: Vec<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    pub hidden: usize,
}

/// Behaviour cloning: imitate a heuristic before PPO, so training starts from the teacher.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BcConfig {
    /// A registry heuristic, e.g. `sjf/best-fit`; `replay` = for each trace the best of
    /// `candidates` on its training windows; empty = no warm start.
    pub teacher: String,
    /// With `teacher = "replay"`: the heuristics replayed (none may be an oracle).
    pub candidates: Vec<String>,
    /// With `teacher = "replay"`: training windows (at every training load) each candidate
    /// is replayed on per trace, evenly spread over the trace's window pool.
    pub replay_windows: usize,
    /// Decisions collected by following the teacher.
    pub samples: usize,
    pub epochs: usize,
    pub minibatch: usize,
    pub lr: f64,
    /// DAgger rounds after the first fit (Ross et al., AISTATS'11): the model drives, the
    /// teacher labels the states the model reaches, the labels join the data and the model is
    /// fitted again, so it learns to recover from its own mistakes (which following the
    /// teacher never shows it).
    pub dagger_rounds: usize,
    /// Decisions collected per DAgger round.
    pub dagger_samples: usize,
    /// Epochs over the aggregated data per DAgger round.
    pub dagger_epochs: usize,
}

/// Policy-improvement rounds after behaviour cloning (DAgger-style; `improve.rs`): the model
/// acts in training episodes, decision points it reaches are labelled by lookahead over
/// futures whose durations are drawn from what the scheduler has seen finish (never the true
/// ones), the labels join the cloned decisions and the model is refitted to them by
/// cross-entropy (`bc.epochs`, `bc.minibatch`, `bc.lr`). Needs `bc.teacher` (a real
/// scheduler, not an oracle).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ImproveConfig {
    /// Rounds (0 = none).
    pub rounds: usize,
    /// States labelled per round.
    pub states: usize,
    /// Chance that a decision point the model reaches (with two legal actions or more) is
    /// labelled; a round gives up after `4 x states / sample_rate` steps.
    pub sample_rate: f64,
    /// Futures sampled per state, the same for every action considered.
    pub futures: usize,
    /// Sim seconds each future runs past the state (> 0).
    pub horizon_s: f64,
    /// Candidates scored per state besides "wait": the teacher's choice, then the model's
    /// highest-scored ones.
    pub max_actions: usize,
    /// Who acts in a future after the action scored.
    pub rollout: ImproveRollout,
    /// Mean run time (s) of the prior a job's future duration is drawn from before any job of
    /// the episode has finished (where it has no user estimate).
    pub prior_mean_s: f64,
    /// Weight of a lookahead label against a cloned decision in the refit.
    pub label_weight: f64,
}

/// The rollout policy of the improvement lookahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ImproveRollout {
    /// The episode's behaviour-cloning teacher.
    Teacher,
    /// The current model, greedy.
    Policy,
}

impl ImproveRollout {
    pub fn as_str(self) -> &'static str {
        match self {
            ImproveRollout::Teacher => "teacher",
            ImproveRollout::Policy => "policy",
        }
    }
}

/// PPO (CleanRL's names and defaults where they apply).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PpoConfig {
    /// Environment steps in all (0 = no PPO: behaviour cloning only).
    pub total_steps: u64,
    /// Parallel environments per trace.
    pub num_envs: usize,
    /// Steps per environment per rollout.
    pub num_steps: usize,
    pub lr: f64,
    /// Anneal the learning rate linearly to 0 over the run.
    pub anneal_lr: bool,
    pub gamma: f32,
    pub gae_lambda: f32,
    pub num_minibatches: usize,
    pub update_epochs: usize,
    pub norm_adv: bool,
    pub clip_coef: f32,
    pub clip_vloss: bool,
    pub ent_coef: f32,
    pub vf_coef: f32,
    /// Global gradient-norm clip.
    pub max_grad_norm: f32,
    /// Stop an update's epochs early once the approximate KL passes this (0 = never).
    pub target_kl: f32,
    /// Scale rewards by a running standard deviation of the discounted return (Gymnasium's
    /// `NormalizeReward`).
    pub norm_reward: bool,
    /// Adam's epsilon.
    pub adam_eps: f32,
    /// The entropy coefficient at the end of the run: it decays linearly from `ent_coef` to
    /// this (unset: constant).
    pub ent_coef_final: Option<f32>,
    /// Rollouts per input (Decima's input-dependent baseline, Mao et al., ICLR'19): with 2 or
    /// more, each iteration runs whole episodes, this many over the same window and seed, and
    /// a step's baseline is the mean over them of the return still to come from the same
    /// sim time; no discount, no value bootstrap, the value head untrained. 0 or 1: CleanRL's
    /// fixed-length rollouts of `num_steps` steps with GAE.
    pub rollouts_per_input: usize,
    /// Inputs (window, seed, horizon) per iteration in that mode, taken from the training
    /// traces in turn.
    pub inputs_per_iteration: usize,
    /// Curriculum on episode length in that mode: an input's episodes are cut at a sim time
    /// drawn from an exponential distribution whose mean, in multiples of the window's submit
    /// span, grows linearly from `horizon_start` to `horizon_final` over the run (0 for both:
    /// never cut, every episode runs until its jobs are done).
    pub horizon_start: f64,
    pub horizon_final: f64,
}

/// Periodic evaluation on validation windows (greedy policy); the best checkpoint is kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EvalConfig {
    /// Evaluate every this many PPO iterations (and after warm start, and at the end).
    pub every: u64,
    /// Validation windows per trace.
    pub windows: usize,
    /// Jobs per validation window, here and in the model card's comparisons (0: `windows.jobs`).
    /// Long windows that stay contended measure what a scheduler decides; short ones drain.
    pub window_jobs: usize,
    pub loads: Vec<f64>,
    pub seeds: u64,
    /// Heuristics evaluated once on the same units, for the table and the TensorBoard text.
    pub baselines: Vec<String>,
    /// Decision tick of the evaluation simulations, seconds (0 = none).
    pub tick_s: f64,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            seed: 1,
            data: vec![DataConfig {
                trace: "traces/itp/cluster10.csv".into(),
                format: None,
                cluster: "auto".into(),
                spread: 1.0,
                throughputs: None,
                assign_workloads: None,
                assign_elastic: None,
            }],
            card: Vec::new(),
            split: SplitConfig::default(),
            windows: WindowConfig::default(),
            env: EnvConfig::default(),
            model: ModelConfig::default(),
            bc: BcConfig::default(),
            improve: ImproveConfig::default(),
            ppo: PpoConfig::default(),
            eval: EvalConfig::default(),
            threads: 0,
            init: String::new(),
        }
    }
}

impl Default for SplitConfig {
    fn default() -> Self {
        SplitConfig {
            train: 0.7,
            validation: 0.15,
        }
    }
}

impl Default for WindowConfig {
    fn default() -> Self {
        WindowConfig {
            jobs: 256,
            pool: 32,
            loads: vec![0.8, 0.9, 1.0, 1.1],
        }
    }
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig { hidden: 64 }
    }
}

impl Default for BcConfig {
    fn default() -> Self {
        BcConfig {
            teacher: "sjf/best-fit".into(),
            candidates: vec![
                "tiresias/best-fit/las-preempt".into(),
                "gittins/best-fit/gittins-preempt".into(),
                "gittins/best-fit".into(),
                "sjf/best-fit".into(),
                "fifo/best-fit".into(),
            ],
            replay_windows: 8,
            samples: 20_000,
            epochs: 10,
            minibatch: 256,
            lr: 1e-3,
            dagger_rounds: 0,
            dagger_samples: 8_000,
            dagger_epochs: 4,
        }
    }
}

impl Default for ImproveConfig {
    fn default() -> Self {
        ImproveConfig {
            rounds: 0,
            states: 256,
            sample_rate: 0.05,
            futures: 4,
            horizon_s: 4.0 * 3600.0,
            max_actions: 3,
            rollout: ImproveRollout::Teacher,
            prior_mean_s: 3600.0,
            label_weight: 1.0,
        }
    }
}

impl ImproveConfig {
    /// Checks every field (the message names it); `teacher` is `bc.teacher`.
    fn validate(&self, teacher: &str, candidates: &[String]) -> Result<(), String> {
        if self.rounds == 0 {
            return Ok(());
        }
        if teacher.is_empty() {
            return Err(
                "improve.rounds: improvement rounds follow behaviour cloning; give a \
                        bc.teacher"
                    .into(),
            );
        }
        if let Some(o) = std::iter::once(teacher)
            .chain(
                candidates
                    .iter()
                    .map(String::as_str)
                    .filter(|_| teacher == super::REPLAY_TEACHER),
            )
            .find(|t| super::is_oracle(t))
        {
            return Err(format!(
                "improve.rounds: bc.teacher `{o}` reads true durations; improvement labels \
                 come from lookahead over predicted durations only, with a real scheduler \
                 as teacher"
            ));
        }
        let positive = [
            ("states", self.states),
            ("futures", self.futures),
            ("max_actions", self.max_actions),
        ];
        if let Some((field, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("improve.{field} must be >= 1"));
        }
        if !(self.sample_rate > 0.0 && self.sample_rate <= 1.0) {
            return Err(format!(
                "improve.sample_rate must be in (0, 1], got {}",
                self.sample_rate
            ));
        }
        for (field, v) in [
            ("horizon_s", self.horizon_s),
            ("prior_mean_s", self.prior_mean_s),
            ("label_weight", self.label_weight),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!(
                    "improve.{field} must be a finite number > 0, got {v}"
                ));
            }
        }
        Ok(())
    }
}

impl Default for PpoConfig {
    fn default() -> Self {
        PpoConfig {
            total_steps: 100_000,
            num_envs: 8,
            num_steps: 128,
            lr: 2.5e-4,
            anneal_lr: true,
            gamma: 0.99,
            gae_lambda: 0.95,
            num_minibatches: 4,
            update_epochs: 4,
            norm_adv: true,
            clip_coef: 0.2,
            clip_vloss: true,
            ent_coef: 0.01,
            vf_coef: 0.5,
            max_grad_norm: 0.5,
            target_kl: 0.0,
            norm_reward: true,
            adam_eps: 1e-5,
            ent_coef_final: None,
            rollouts_per_input: 0,
            inputs_per_iteration: 2,
            horizon_start: 0.0,
            horizon_final: 0.0,
        }
    }
}

impl Default for EvalConfig {
    fn default() -> Self {
        EvalConfig {
            every: 5,
            windows: 4,
            window_jobs: 0,
            loads: vec![0.8, 1.1],
            seeds: 1,
            baselines: vec![
                "fifo/best-fit".into(),
                "sjf/best-fit".into(),
                "tiresias/best-fit".into(),
            ],
            tick_s: 0.0,
        }
    }
}

impl TrainConfig {
    /// Jobs per validation window (`eval.window_jobs`, else `windows.jobs`).
    pub fn validation_window_jobs(&self) -> usize {
        if self.eval.window_jobs == 0 {
            self.windows.jobs
        } else {
            self.eval.window_jobs
        }
    }

    /// Parses TOML text after applying `overrides` (`path.to.field=value`, the value in TOML
    /// syntax; a bare word is taken as a string). Errors name the field.
    pub fn parse(text: &str, overrides: &[String]) -> Result<Self, String> {
        let mut doc: toml::Table = text.parse().map_err(|e| format!("{e}"))?;
        for o in overrides {
            let (path, value) = o
                .split_once('=')
                .ok_or_else(|| format!("override `{o}`: expected path.to.field=value"))?;
            let value = parse_value(value.trim());
            set_path(&mut doc, path.trim(), value).map_err(|e| format!("override `{o}`: {e}"))?;
        }
        let cfg: TrainConfig = doc.try_into().map_err(|e| format!("{e}"))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks every field; the message names it.
    pub fn validate(&self) -> Result<(), String> {
        if self.data.is_empty() {
            return Err("data: give at least one [[data]] trace".into());
        }
        for (section, entries) in [("data", &self.data), ("card", &self.card)] {
            if let Some(d) = entries
                .iter()
                .find(|d| !(d.spread.is_finite() && d.spread >= 0.0))
            {
                return Err(format!(
                    "{section}: {}: spread must be a finite exponent >= 0, got {}",
                    d.trace, d.spread
                ));
            }
            if let Some(d) = entries.iter().find(|d| {
                d.throughputs.is_none()
                    && (d.assign_workloads.is_some() || d.assign_elastic.is_some())
            }) {
                return Err(format!(
                    "{section}: {}: assign_workloads and assign_elastic need throughputs (the \
                     table the typed jobs run at)",
                    d.trace
                ));
            }
        }
        let fraction = |f: f64| f.is_finite() && f > 0.0 && f < 1.0;
        if !fraction(self.split.train)
            || !fraction(self.split.validation)
            || self.split.train + self.split.validation > 1.0
        {
            return Err(format!(
                "split: train ({}) and validation ({}) must be in (0, 1) and sum to at most 1",
                self.split.train, self.split.validation
            ));
        }
        let loads_ok = |l: &[f64]| !l.is_empty() && l.iter().all(|x| x.is_finite() && *x > 0.0);
        if self.windows.jobs == 0 || self.windows.pool == 0 || !loads_ok(&self.windows.loads) {
            return Err("windows: jobs and pool must be >= 1, loads non-empty and > 0".into());
        }
        if self.model.hidden == 0 {
            return Err("model.hidden must be >= 1".into());
        }
        self.env.validate().map_err(|e| format!("env.{e}"))?;
        if !self.bc.teacher.is_empty()
            && (self.bc.samples == 0
                || self.bc.minibatch == 0
                || self.bc.lr.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater))
        {
            return Err("bc: samples, minibatch and lr must be > 0 with a teacher".into());
        }
        if self.bc.dagger_rounds > 0 && (self.bc.dagger_samples == 0 || self.bc.dagger_epochs == 0)
        {
            return Err(
                "bc: dagger_samples and dagger_epochs must be > 0 with dagger_rounds".into(),
            );
        }
        if self.bc.teacher == super::REPLAY_TEACHER {
            if self.bc.candidates.is_empty() || self.bc.replay_windows == 0 {
                return Err(
                    "bc: teacher = \"replay\" needs candidates and replay_windows >= 1".into(),
                );
            }
            if let Some(o) = self.bc.candidates.iter().find(|c| super::is_oracle(c)) {
                return Err(format!(
                    "bc.candidates: `{o}` reads true durations; replay chooses among real \
                     schedulers only"
                ));
            }
        }
        self.improve
            .validate(&self.bc.teacher, &self.bc.candidates)?;
        let p = &self.ppo;
        if p.total_steps > 0
            && (p.num_envs == 0
                || p.num_steps == 0
                || p.num_minibatches == 0
                || p.update_epochs == 0
                || p.lr.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
                || p.num_minibatches > p.num_envs * p.num_steps)
        {
            return Err(
                "ppo: num_envs, num_steps, num_minibatches (<= num_envs x num_steps), \
                 update_epochs and lr must be > 0"
                    .into(),
            );
        }
        if !(0.0..=1.0).contains(&p.gamma) || !(0.0..=1.0).contains(&p.gae_lambda) {
            return Err("ppo: gamma and gae_lambda must be in [0, 1]".into());
        }
        if let Some(e) = p.ent_coef_final
            && !(e.is_finite() && e >= 0.0)
        {
            return Err(format!(
                "ppo.ent_coef_final must be finite and >= 0, got {e}"
            ));
        }
        if p.rollouts_per_input >= 2 && p.inputs_per_iteration == 0 {
            return Err("ppo.inputs_per_iteration must be >= 1 with rollouts_per_input".into());
        }
        for (field, h) in [
            ("horizon_start", p.horizon_start),
            ("horizon_final", p.horizon_final),
        ] {
            if !(h.is_finite() && h >= 0.0) {
                return Err(format!("ppo.{field} must be finite and >= 0, got {h}"));
            }
        }
        if (p.horizon_start > 0.0) != (p.horizon_final > 0.0) {
            return Err(
                "ppo: horizon_start and horizon_final are both > 0 (a curriculum) or both 0".into(),
            );
        }
        if self.eval.every == 0 || self.eval.windows == 0 || !loads_ok(&self.eval.loads) {
            return Err("eval: every and windows must be >= 1, loads non-empty and > 0".into());
        }
        Ok(())
    }

    /// The config as TOML (what the model directory records).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# not serializable: {e}"))
    }
}

fn parse_value(text: &str) -> toml::Value {
    // `x = VALUE` parses any TOML value; a bare word falls back to a string.
    format!("x = {text}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("x"))
        .unwrap_or_else(|| toml::Value::String(text.to_string()))
}

fn set_path(doc: &mut toml::Table, path: &str, value: toml::Value) -> Result<(), String> {
    let mut parts: Vec<&str> = path.split('.').collect();
    let last = parts.pop().filter(|s| !s.is_empty()).ok_or("empty path")?;
    let mut table = doc;
    for p in parts {
        table = table
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .ok_or_else(|| format!("`{p}` is not a table"))?;
    }
    table.insert(last.to_string(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_parse_and_overrides_apply() {
        let cfg = TrainConfig::parse(
            "seed = 3\n[ppo]\nnum_envs = 4\n",
            &[
                "ppo.total_steps=1000".into(),
                "bc.teacher=fifo/best-fit".into(),
            ],
        )
        .unwrap();
        assert_eq!(cfg.seed, 3);
        assert_eq!(cfg.ppo.num_envs, 4);
        assert_eq!(cfg.ppo.total_steps, 1000);
        assert_eq!(cfg.bc.teacher, "fifo/best-fit");
        // Round trip through the recorded TOML.
        assert_eq!(TrainConfig::parse(&cfg.to_toml(), &[]).unwrap(), cfg);
    }

    #[test]
    fn bad_fields_are_named() {
        let e = TrainConfig::parse("[ppo]\nnum_env = 4\n", &[]).unwrap_err();
        assert!(e.contains("num_env"), "{e}");
        let e = TrainConfig::parse("[split]\ntrain = 0.9\nvalidation = 0.2\n", &[]).unwrap_err();
        assert!(e.contains("split"), "{e}");
        let e = TrainConfig::parse("", &["ppo.lr".into()]).unwrap_err();
        assert!(e.contains("path.to.field=value"), "{e}");
        for (set, field) in [
            ("ppo.ent_coef_final=-1", "ent_coef_final"),
            ("ppo.horizon_start=-0.5", "horizon_start"),
            ("ppo.horizon_start=0.5", "horizon_final"),
            ("bc.dagger_samples=0", "dagger_samples"),
        ] {
            let mut sets = vec![set.to_string()];
            if field == "dagger_samples" {
                sets.push("bc.dagger_rounds=2".into());
            }
            let e = TrainConfig::parse("", &sets).unwrap_err();
            assert!(e.contains(field), "{set}: {e}");
        }
        let e = TrainConfig::parse(
            "",
            &[
                "ppo.rollouts_per_input=4".into(),
                "ppo.inputs_per_iteration=0".into(),
            ],
        )
        .unwrap_err();
        assert!(e.contains("inputs_per_iteration"), "{e}");
        let e = TrainConfig::parse("[improve]\nrounds = 1\nfutures = 0\n", &[]).unwrap_err();
        assert!(e.contains("improve.futures"), "{e}");
        let e = TrainConfig::parse("[improve]\nrounds = 1\nhorizon_s = 0.0\n", &[]).unwrap_err();
        assert!(e.contains("improve.horizon_s"), "{e}");
        let e =
            TrainConfig::parse("[improve]\nrounds = 1\nrollout = \"oracle\"\n", &[]).unwrap_err();
        assert!(e.contains("rollout"), "{e}");
        let oracle = "[bc]\nteacher = \"srtf-oracle/best-fit\"\n[improve]\nrounds = 1\n";
        let e = TrainConfig::parse(oracle, &[]).unwrap_err();
        assert!(
            e.contains("improve.rounds") && e.contains("true durations"),
            "{e}"
        );
        let e =
            TrainConfig::parse("[bc]\nteacher = \"\"\n[improve]\nrounds = 1\n", &[]).unwrap_err();
        assert!(e.contains("improve.rounds"), "{e}");
        // Off by default, and a round trip keeps the section.
        let on = TrainConfig::parse("[improve]\nrounds = 2\nrollout = \"policy\"\n", &[]).unwrap();
        assert_eq!(TrainConfig::default().improve.rounds, 0);
        assert_eq!(TrainConfig::parse(&on.to_toml(), &[]).unwrap(), on);
    }
}
