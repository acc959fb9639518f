//! `SchedEnv`: one trace window on one cluster as a Gymnasium-style episode.

use super::candidates::{
    Candidate, CandidateKind, DecisionPoint, Enumerator, Proposer, Taken, idle_due,
};
use super::features::{
    FEATURE_SCHEMA_VERSION, Featurizer, GLOBAL_WIDTH, MAX_CANDIDATES, Observation, WAIT_ACTION,
};
use super::reward::{RewardConfig, RewardTerms, Snapshot, overwait_between, terms_between};
use crate::cluster::ClusterSpec;
use crate::job::Trace;
use crate::policy::Policy;
use crate::sim::{SimConfig, SimError, SimResult, Simulator};
use crate::units::SimTime;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

mod fork;

/// How an episode is built. Unknown fields are rejected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnvConfig {
    /// The simulation (its `seed` is replaced by `reset`'s).
    pub sim: SimConfig,
    pub reward: RewardConfig,
    /// Pending jobs (oldest first) that get candidates at each decision point.
    pub jobs_considered: usize,
    /// Heuristics proposing placements for each of those jobs (duplicates by node set merged).
    pub proposers: Vec<Proposer>,
    /// Offer LAS preemption candidates too (see `candidates`): a waiting job may preempt
    /// running jobs of a more served Tiresias queue. Run with `sim.tick_s > 0`.
    pub las_preemption: bool,
    /// Offer Gittins preemption candidates too (`gittins-preempt`'s victims, for a job no LAS
    /// candidate serves). Run with `sim.tick_s > 0`.
    pub gittins_preemption: bool,
    /// Mask "wait" when nothing would be running and some candidate can start: the agent may
    /// hold jobs back while others run, but never idle the whole cluster (or stall).
    pub work_conserving: bool,
    /// Bounds how long the agent may hold a job back: "wait" is masked whenever a candidate's
    /// job has waited at least this long (0: whenever any candidate exists, i.e. strictly
    /// work-conserving). Without a bound, an agent that has learned to wait while others run
    /// can hold jobs as long as anything runs at all: `rl:models/default` did, over 30-day
    /// windows (docs/training.md). Unset: no bound.
    pub max_hold_s: Option<f64>,
    /// Offer, for a job that may run on several GPU models of the cluster, a placement on each
    /// of them (best fit within that model) besides the proposers' picks; and for an elastic
    /// job that fits nowhere at its own size, a start at the largest smaller size that fits.
    pub model_candidates: bool,
    /// Hide the throughput table's rates from the features: every job's speeds are then its
    /// GPU models' catalog speeds (the policy must do without a workload's measured rates).
    /// The model card says which was used.
    pub hide_rates: bool,
    /// Truncate after this many steps (0 = no limit).
    pub max_steps: u64,
    /// Truncate once this much sim time has passed since the window's first submit (0 = no
    /// limit).
    pub max_sim_time_s: f64,
}

impl Default for EnvConfig {
    fn default() -> Self {
        EnvConfig {
            sim: SimConfig {
                record_timeline: false,
                starvation_bound: crate::policy::StarvationBound::Off,
                ..SimConfig::default()
            },
            reward: RewardConfig::default(),
            jobs_considered: 16,
            proposers: vec![Proposer::BestFit, Proposer::WorstFit, Proposer::Fgd],
            las_preemption: false,
            gittins_preemption: false,
            work_conserving: false,
            max_hold_s: None,
            model_candidates: true,
            hide_rates: false,
            max_steps: 0,
            max_sim_time_s: 0.0,
        }
    }
}

impl EnvConfig {
    /// Checks every field; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        self.reward.validate().map_err(|e| format!("reward.{e}"))?;
        if self.jobs_considered == 0 {
            return Err("jobs_considered must be at least 1".into());
        }
        if self.proposers.is_empty() {
            return Err("proposers must name at least one heuristic".into());
        }
        if let Some(h) = self.max_hold_s {
            SimTime::from_secs_f64(h).ok_or_else(|| {
                format!("max_hold_s must be a finite number of seconds >= 0, got {h}")
            })?;
        }
        SimTime::from_secs_f64(self.max_sim_time_s).ok_or_else(|| {
            format!(
                "max_sim_time_s must be a finite number of seconds >= 0, got {}",
                self.max_sim_time_s
            )
        })?;
        Ok(())
    }
}

/// A fault of the caller or the configuration (expected outcomes are values in `Step`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EnvError {
    #[error("the episode is over (or was never reset): call reset")]
    EpisodeOver,
    #[error("action {action} is not legal now (mask is false or out of 0..{MAX_CANDIDATES})")]
    IllegalAction { action: usize },
    #[error("invalid environment config: {0}")]
    Config(String),
    #[error(transparent)]
    Sim(#[from] SimError),
}

/// Why an episode ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EndReason {
    /// Every job finished: `terminated`.
    AllDone,
    /// The agent waited while nothing ran and nothing was left to arrive, so nothing could
    /// ever happen again; jobs were left pending: `truncated` (the state is not terminal: a
    /// placement would have resumed it).
    Stalled,
    /// `max_steps` reached: `truncated`.
    StepLimit,
    /// `max_sim_time_s` reached: `truncated`.
    TimeLimit,
}

/// What a step (or reset) reports besides the observation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Info {
    pub now_s: f64,
    pub steps: u64,
    pub finished: u64,
    pub jobs: u64,
    /// Legal actions besides wait.
    pub candidates: usize,
    /// The step's unweighted reward terms.
    pub terms: RewardTerms,
    pub end: Option<EndReason>,
}

/// One step's result, as Gymnasium's 5-tuple.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub obs: Observation,
    pub reward: f32,
    /// All jobs done (a terminal state: do not bootstrap).
    pub terminated: bool,
    /// Cut short (horizon or stall): bootstrap from `obs`. Never together with `terminated`.
    pub truncated: bool,
    pub info: Info,
}

/// What was done at the current instant of an episode: the placements made (a global
/// feature) and the resizes and shares applied (`Taken::take_applied`), so that no job is
/// resized twice, nor grown and shrunk, in one instant.
#[derive(Debug, Clone, Default)]
struct ThisInstant {
    at: SimTime,
    placed: u32,
    applied: Taken,
}

impl ThisInstant {
    fn at(at: SimTime) -> Self {
        ThisInstant {
            at,
            ..ThisInstant::default()
        }
    }

    /// Moves to `now`, forgetting what was done at an earlier instant.
    fn enter(&mut self, now: SimTime) {
        if now != self.at {
            *self = ThisInstant::at(now);
        }
    }
}

/// A scheduling episode over one trace window on one cluster.
///
/// Contract (Gymnasium's): `reset(seed)` starts an episode and returns the first observation;
/// `step(action)` takes an index whose `obs.mask` entry is true. Action `WAIT_ACTION` applies
/// nothing more at this instant and lets time advance to the next decision point; any other
/// legal action starts that candidate's job on its placement at once (a one-placement
/// `Decision` applied to the simulator, preempting the candidate's victims first if it is a
/// preemption candidate) and the candidates are enumerated again at the same
/// instant, so a decision is built job by job and "wait" closes it. Decision points where no
/// candidate exists are skipped (their time still earns reward). Same seed and same actions,
/// same observations and rewards. A masked action is an error and changes nothing. Wait is
/// always legal unless `work_conserving` is on, nothing would be running and a candidate exists.
pub struct SchedEnv<'t> {
    trace: &'t Trace,
    spec: Arc<ClusterSpec>,
    cfg: EnvConfig,
    featurizer: Featurizer,
    sim: Option<Simulator<'t>>,
    enumerator: Enumerator,
    point: Option<DecisionPoint>,
    /// The mask of the observation last returned (empty before the first reset); that
    /// observation is `point`'s, live or not as `live` says (`observation` rebuilds it).
    mask: Vec<bool>,
    live: bool,
    steps: u64,
    start: SimTime,
    instant: ThisInstant,
    done: bool,
    /// Resize candidates are offered (elastic jobs, a throughput table, `model_candidates`):
    /// the episode also stops while elastic jobs run with nobody waiting.
    resizes: bool,
    /// When the last point with nobody waiting was offered (at most one a [`super::RESIZE_ROUND`]).
    idle_at: Option<SimTime>,
}

impl std::fmt::Debug for SchedEnv<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedEnv")
            .field("trace", &self.trace.name)
            .field("cluster", &self.spec.name)
            .field("steps", &self.steps)
            .field("done", &self.done)
            .finish()
    }
}

impl<'t> SchedEnv<'t> {
    /// An environment over `trace` on `spec`; checks the config and that the trace can run.
    ///
    /// Episodes run without the starvation bound (`SimConfig::starvation_bound` is set to
    /// `off`): the environment applies one candidate at a time and offers only what the
    /// simulator would run, and a refused start would be offered again. The bound applies to
    /// whatever a policy, learned ones included, decides in `simulate`, `compare` and the
    /// service.
    pub fn new(
        trace: &'t Trace,
        spec: Arc<ClusterSpec>,
        mut cfg: EnvConfig,
    ) -> Result<Self, EnvError> {
        cfg.sim.starvation_bound = crate::policy::StarvationBound::Off;
        cfg.validate().map_err(EnvError::Config)?;
        Simulator::new(trace, Arc::clone(&spec), &cfg.sim)?;
        let cfg_resizes = cfg.model_candidates
            && cfg.sim.throughputs.is_some()
            && trace.jobs().iter().any(|j| j.elastic.is_some());
        let featurizer = Featurizer {
            total_gpu_milli: spec.total_gpu_milli(),
            total_gpus: spec.total_gpus(),
            total_cpu_milli: spec.total_cpu_milli(),
            jobs_considered: cfg.jobs_considered,
        };
        Ok(SchedEnv {
            trace,
            spec,
            enumerator: Enumerator::from_config(&cfg, featurizer, MAX_CANDIDATES - 1),
            cfg,
            featurizer,
            sim: None,
            point: None,
            mask: Vec::new(),
            live: false,
            steps: 0,
            start: SimTime::ZERO,
            instant: ThisInstant::default(),
            done: true,
            resizes: cfg_resizes,
            idle_at: None,
        })
    }

    pub const fn schema_version() -> u32 {
        FEATURE_SCHEMA_VERSION
    }

    pub fn config(&self) -> &EnvConfig {
        &self.cfg
    }

    /// The trace (window) this environment replays.
    pub fn trace(&self) -> &'t Trace {
        self.trace
    }

    /// Starts an episode with `seed` (the simulation's seed).
    pub fn reset(&mut self, seed: u64) -> Result<(Observation, Info), EnvError> {
        let mut sim_cfg = self.cfg.sim.clone();
        sim_cfg.seed = seed;
        let mut sim = Simulator::new(self.trace, Arc::clone(&self.spec), &sim_cfg)?;
        sim.ask_without_queue(self.resizes);
        self.sim = Some(sim);
        self.enumerator = Enumerator::from_config(&self.cfg, self.featurizer, MAX_CANDIDATES - 1);
        self.steps = 0;
        self.done = false;
        // The simulator starts at the window's first submit: the episode's time origin.
        self.start = self.now();
        self.instant = ThisInstant::at(self.start);
        self.idle_at = None;
        let mut terms = RewardTerms::default();
        let end = self.advance_to_choice(&mut terms);
        let step = self.finish_step(terms, end);
        Ok((step.obs, step.info))
    }

    /// Takes `action` (see the type's docs).
    pub fn step(&mut self, action: usize) -> Result<Step, EnvError> {
        if self.done {
            return Err(EnvError::EpisodeOver);
        }
        let legal = self.mask.get(action).copied().unwrap_or(false);
        if !legal {
            return Err(EnvError::IllegalAction { action });
        }
        self.steps += 1;
        let mut terms = RewardTerms::default();
        let end = if action == WAIT_ACTION {
            self.wait(&mut terms)
        } else {
            let point = self
                .point
                .take()
                .expect("a live episode has a decision point");
            let chosen = &point.candidates[action];
            let sim = self.sim.as_mut().expect("a live episode has a simulator");
            sim.apply(&chosen.decision());
            self.count_placement();
            self.instant.applied.take_applied(chosen);
            self.advance_to_choice(&mut terms)
        };
        let end = end.or_else(|| self.horizon());
        Ok(self.finish_step(terms, end))
    }

    /// The candidate behind action `action` now (`None` for wait, padding, or no episode).
    pub fn candidate(&self, action: usize) -> Option<&Candidate> {
        if self.done {
            return None;
        }
        self.point.as_ref()?.candidates.get(action)
    }

    /// The action a heuristic `teacher` would take now, for behaviour cloning: the teacher
    /// decides on this decision point's context, and its first placement that is a candidate
    /// here (same job and node set, else the same job placed another way) is the action;
    /// `WAIT_ACTION` when none is (the teacher places nothing now, or only jobs outside the
    /// shortlist). The second value says whether the teacher's choice was matched exactly
    /// (wait counts as exact when the teacher placed nothing). The teacher must be asked at
    /// every step of the episode (it may learn online from what it is shown).
    pub fn imitate(&self, teacher: &mut dyn Policy) -> Result<(usize, bool), EnvError> {
        let (Some(sim), Some(point), false) = (self.sim.as_ref(), self.point.as_ref(), self.done)
        else {
            return Err(EnvError::EpisodeOver);
        };
        let decision = teacher
            .decide(&sim.context())
            .map_err(|e| EnvError::Config(format!("teacher: {e}")))?;
        let wait_legal = self.mask.get(WAIT_ACTION).copied().unwrap_or(false);
        // Where waiting is masked (work-conserving), the teacher's "nothing now" becomes the
        // first candidate.
        let wait = if wait_legal { WAIT_ACTION } else { 0 };
        // A resize the teacher makes first (to admit a job, or into idle GPUs): the candidate
        // of the same job at the same size.
        for r in &decision.resizes {
            if let Some(i) = point.candidates.iter().position(|c| {
                c.is_resize()
                    && c.placement.job == r.job
                    && c.placement.tasks.len() == r.tasks.len()
            }) {
                return Ok((i, true));
            }
        }
        if decision.placements.is_empty() {
            // A share the teacher makes: the share candidate of the same job, exact when it
            // takes the same GPU.
            for sh in &decision.shares {
                let mut same = point
                    .candidates
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| c.host().is_some() && c.placement.job == sh.job);
                if let Some((i, c)) = same.next() {
                    return Ok((i, c.placement.tasks == sh.tasks));
                }
            }
            let nothing = decision.resizes.is_empty() && decision.shares.is_empty();
            return Ok((wait, wait_legal && nothing));
        }
        let nodes = |tasks: &[crate::cluster::TaskPlacement]| {
            let mut n: Vec<_> = tasks.iter().map(|t| t.node).collect();
            n.sort_unstable();
            n.dedup();
            n
        };
        for (k, placement) in decision.placements.iter().enumerate() {
            let want = nodes(&placement.tasks);
            let same_job = || {
                point.candidates.iter().enumerate().filter(|(_, c)| {
                    c.kind == CandidateKind::Start && c.placement.job == placement.job
                })
            };
            if let Some((i, _)) = same_job().find(|(_, c)| nodes(&c.placement.tasks) == want) {
                return Ok((i, k == 0));
            }
            if let Some((i, _)) = same_job().next() {
                return Ok((i, false));
            }
        }
        Ok((wait, false))
    }

    /// The current observation, as the last `reset` or `step` returned it (`None` before the
    /// first reset). Rebuilt from the decision point, so a step does not keep a copy.
    pub fn observation(&self) -> Option<Observation> {
        if self.mask.is_empty() {
            return None;
        }
        Some(self.observe())
    }

    /// The observation of the decision point now (see `observation`).
    fn observe(&self) -> Observation {
        match &self.point {
            Some(point) => point.observation(&self.featurizer, self.live),
            None => Observation::waiting_only(&self.featurizer, &[0.0; GLOBAL_WIDTH]),
        }
    }

    /// Closes the episode's simulation: its summary and job records.
    pub fn finish(self, policy: &str) -> Option<SimResult> {
        self.sim.map(|s| s.finish(policy, 0.0))
    }

    fn now(&self) -> SimTime {
        self.sim.as_ref().map_or(SimTime::ZERO, |s| s.now())
    }

    fn count_placement(&mut self) {
        let now = self.now();
        self.instant.enter(now);
        self.instant.placed += 1;
    }

    fn horizon(&self) -> Option<EndReason> {
        if self.cfg.max_steps > 0 && self.steps >= self.cfg.max_steps {
            return Some(EndReason::StepLimit);
        }
        let limit = SimTime::from_secs_f64(self.cfg.max_sim_time_s).unwrap_or(SimTime::ZERO);
        if limit > SimTime::ZERO && self.now().saturating_sub(self.start) >= limit {
            return Some(EndReason::TimeLimit);
        }
        None
    }

    /// Lets time pass to the next decision point, then on to one with candidates.
    fn wait(&mut self, terms: &mut RewardTerms) -> Option<EndReason> {
        if let Some(end) = self.advance_once(terms) {
            return Some(end);
        }
        self.advance_to_choice(terms)
    }

    /// Enumerates candidates here; while there are none, advances. `Some` when the run ends.
    fn advance_to_choice(&mut self, terms: &mut RewardTerms) -> Option<EndReason> {
        loop {
            let sim = self.sim.as_ref().expect("a live episode has a simulator");
            let pending = sim.context().pending_len();
            // With resize candidates, a point with nobody waiting may grow a running job: one
            // that offers a grow at most once a round.
            let now = sim.now();
            let idle = pending == 0
                && self.resizes
                && idle_due(self.idle_at, now)
                && sim.context().cluster().running().any(|a| a.elastic);
            if pending > 0 || idle {
                self.instant.enter(now);
                let point = self.enumerator.enumerate_after(
                    &sim.context(),
                    &self.instant.applied,
                    self.instant.placed,
                    now.saturating_sub(self.start),
                );
                let any = !point.candidates.is_empty();
                if any && pending == 0 {
                    // A round begins where a grow was offered.
                    self.idle_at = Some(now);
                }
                self.point = Some(point);
                if any {
                    return None;
                }
            }
            if let Some(end) = self.advance_once(terms) {
                return Some(end);
            }
        }
    }

    /// One `Simulator::advance`, with the reward it earned. The pending set is fixed until the
    /// advance returns (it returns at the first batch after which jobs are pending, and batches
    /// only add pending jobs), so the slowdown proxy's rate is constant over the stretch.
    fn advance_once(&mut self, terms: &mut RewardTerms) -> Option<EndReason> {
        let cfg = &self.cfg.reward;
        let sim = self.sim.as_mut().expect("a live episode has a simulator");
        let bound_ms = cfg.bsld_bound_s * 1000.0;
        let rate: f64 = {
            let ctx = sim.context();
            ctx.pending()
                .map(|p| 1.0 / p.spec.estimate.map_or(0.0, |e| e.ms() as f64).max(bound_ms))
                .sum()
        };
        // When each pending job's idle time passes the tail term's bound (only when weighed).
        let due: Vec<f64> = if cfg.overwait != 0.0 {
            let ctx = sim.context();
            let now = ctx.now().ms() as f64;
            let bound = cfg.overwait_bound_s * 1000.0;
            ctx.pending()
                .map(|p| now - p.idle().ms() as f64 + bound)
                .collect()
        } else {
            Vec::new()
        };
        let before = snapshot(sim);
        let t0 = sim.now();
        let more = sim.advance();
        let after = snapshot(sim);
        let dt = sim.now().saturating_sub(t0).ms() as f64;
        if !due.is_empty() {
            terms.overwait += overwait_between(cfg, &due, t0.ms() as f64, dt);
        }
        terms.add(&terms_between(
            cfg,
            &before,
            &after,
            rate,
            dt,
            self.spec.total_gpu_milli() as f64,
            self.spec.total_gpus() as f64,
        ));
        if more {
            return None;
        }
        let p = sim.progress();
        if p.finished >= p.jobs {
            Some(EndReason::AllDone)
        } else if sim.stopped() {
            // A fork that reached its end (`fork`): cut short, nothing stalled.
            Some(EndReason::TimeLimit)
        } else {
            terms.unfinished += p.jobs - p.finished;
            Some(EndReason::Stalled)
        }
    }

    fn finish_step(&mut self, terms: RewardTerms, end: Option<EndReason>) -> Step {
        self.live = end.is_none();
        let obs = self.observe();
        let candidates = match &self.point {
            Some(point) if self.live => point.candidates.len(),
            _ => 0,
        };
        let sim = self.sim.as_ref().expect("a live episode has a simulator");
        let p = sim.progress();
        let info = Info {
            now_s: sim.now().secs_f64(),
            steps: self.steps,
            finished: p.finished,
            jobs: p.jobs,
            candidates,
            terms,
            end,
        };
        let reward = self.cfg.reward.reward(&terms) as f32;
        self.done = end.is_some();
        self.mask.clone_from(&obs.mask);
        Step {
            obs,
            reward: if reward.is_finite() { reward } else { 0.0 },
            terminated: end == Some(EndReason::AllDone),
            truncated: matches!(
                end,
                Some(EndReason::Stalled | EndReason::StepLimit | EndReason::TimeLimit)
            ),
            info,
        }
    }
}

fn snapshot(sim: &Simulator<'_>) -> Snapshot {
    let i = sim.integrals();
    Snapshot {
        queue_ms: i.queue_ms,
        system_ms: i.system_ms,
        alloc_milli_ms: i.alloc_milli_ms,
        frag_milli_ms: i.frag_milli_ms,
        energy_wms: i.energy_wms,
    }
}
