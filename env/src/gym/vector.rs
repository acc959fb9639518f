//! `VecEnv`: N environments over random windows of a training trace, stepped together in
//! parallel (a pool of worker threads kept for the `VecEnv`'s life, one chunk of environments
//! each), each reset automatically when its episode ends. Results do not depend on the thread
//! count: every environment is stepped on its own, and the seeded draws of new windows happen
//! afterwards, in environment order.

use super::env::{EnvConfig, EnvError, Info, SchedEnv};
use super::features::Observation;
use crate::cluster::ClusterSpec;
use crate::job::Trace;
use crate::trace::split::{SplitError, random_windows};
use crate::units::SimTime;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::sync::Arc;

/// `count` windows of about `jobs` consecutive jobs of `trace`, as traces (seeded): the pool a
/// `VecEnv` draws its episodes from.
pub fn window_pool(
    trace: &Trace,
    jobs: usize,
    count: usize,
    seed: u64,
) -> Result<Vec<Trace>, SplitError> {
    Ok(random_windows(trace, jobs, count, seed)?
        .into_iter()
        .map(|w| {
            let from = SimTime::from_secs_f64(w.from_s).expect("window starts are finite");
            let to = SimTime::from_secs_f64(w.to_s).expect("window ends are finite");
            trace.window(from, to)
        })
        .collect())
}

/// The batched result of one `VecEnv::step`. Where an episode ended, `obs[i]` is the first
/// observation of the next one (auto-reset) and `final_obs[i]` the last of the ended one.
#[derive(Debug, Clone, PartialEq)]
pub struct VecStep {
    pub obs: Vec<Observation>,
    pub rewards: Vec<f32>,
    pub terminated: Vec<bool>,
    pub truncated: Vec<bool>,
    pub final_obs: Vec<Option<Observation>>,
    pub infos: Vec<Info>,
}

/// Worker threads that step environments, shareable by several `VecEnv`s (a trainer with one
/// `VecEnv` per training trace steps them one after another, so one pool serves them all).
#[derive(Debug, Clone)]
pub struct StepPool {
    workers: Arc<rayon::ThreadPool>,
}

impl StepPool {
    /// A pool for stepping on `threads` threads: the calling thread steps one chunk itself,
    /// so it holds `threads - 1` workers. `None` for one thread, or when the system refuses
    /// the threads (stepping is then sequential, with the same results).
    pub fn new(threads: usize) -> Option<StepPool> {
        if threads <= 1 {
            return None;
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads - 1)
            .thread_name(|i| format!("vecenv-{i}"))
            .build()
            .ok()
            .map(|workers| StepPool {
                workers: Arc::new(workers),
            })
    }

    /// The threads a step uses: the workers and the caller.
    pub fn threads(&self) -> usize {
        self.workers.current_num_threads() + 1
    }
}

/// N environments over windows drawn (seeded) from a pool.
pub struct VecEnv<'t> {
    pool: &'t [Trace],
    spec: Arc<ClusterSpec>,
    cfg: EnvConfig,
    envs: Vec<SchedEnv<'t>>,
    rng: StdRng,
    threads: usize,
    /// The workers when `threads > 1` (built on first use unless shared; `None` steps
    /// sequentially).
    workers: Option<StepPool>,
}

impl std::fmt::Debug for VecEnv<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VecEnv")
            .field("envs", &self.envs.len())
            .field("pool", &self.pool.len())
            .finish()
    }
}

impl<'t> VecEnv<'t> {
    /// `n` environments; `reset` must be called before `step`.
    pub fn new(
        pool: &'t [Trace],
        spec: Arc<ClusterSpec>,
        cfg: EnvConfig,
        n: usize,
        seed: u64,
    ) -> Result<Self, EnvError> {
        if pool.is_empty() || n == 0 {
            return Err(EnvError::Config(
                "a VecEnv needs at least one window and one environment".into(),
            ));
        }
        let mut v = VecEnv {
            pool,
            spec,
            cfg,
            envs: Vec::with_capacity(n),
            rng: StdRng::seed_from_u64(seed),
            threads: std::thread::available_parallelism().map_or(1, |t| t.get()),
            workers: None,
        };
        for _ in 0..n {
            let env = v.draw()?;
            v.envs.push(env);
        }
        Ok(v)
    }

    /// Steps with at most `threads` threads (1 = sequentially); the default is every core.
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self.workers = None;
        self
    }

    /// Steps on `pool`'s threads (shared with whoever else holds it) instead of a pool of its
    /// own; `None`: sequentially.
    pub fn with_pool(mut self, pool: Option<&StepPool>) -> Self {
        self.threads = pool.map_or(1, StepPool::threads);
        self.workers = pool.cloned();
        self
    }

    /// Builds the worker pool for `threads` threads once. Without one (one thread, or the
    /// system refused the threads) `step` runs sequentially, with the same results.
    fn start_workers(&mut self, threads: usize) {
        if threads > 1 && self.workers.is_none() {
            self.workers = StepPool::new(threads);
        }
    }

    pub fn len(&self) -> usize {
        self.envs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.envs.is_empty()
    }

    /// Environment `i` (for `SchedEnv::imitate` and inspection).
    ///
    /// # Panics
    /// If `i >= len()`.
    pub fn env(&self, i: usize) -> &SchedEnv<'t> {
        &self.envs[i]
    }

    fn draw(&mut self) -> Result<SchedEnv<'t>, EnvError> {
        let i = self.rng.random_range(0..self.pool.len());
        SchedEnv::new(&self.pool[i], Arc::clone(&self.spec), self.cfg.clone())
    }

    /// Resets every environment (episode seeds drawn from the VecEnv's seed).
    pub fn reset(&mut self) -> Result<Vec<Observation>, EnvError> {
        let mut out = Vec::with_capacity(self.envs.len());
        for i in 0..self.envs.len() {
            let seed = self.rng.random();
            out.push(self.envs[i].reset(seed)?.0);
        }
        Ok(out)
    }

    /// Steps environment i with `actions[i]`, auto-resetting the ones that end on a new window.
    pub fn step(&mut self, actions: &[usize]) -> Result<VecStep, EnvError> {
        if actions.len() != self.envs.len() {
            return Err(EnvError::Config(format!(
                "{} actions for {} environments",
                actions.len(),
                self.envs.len()
            )));
        }
        let n = self.envs.len();
        let mut out = VecStep {
            obs: Vec::with_capacity(n),
            rewards: Vec::with_capacity(n),
            terminated: Vec::with_capacity(n),
            truncated: Vec::with_capacity(n),
            final_obs: Vec::with_capacity(n),
            infos: Vec::with_capacity(n),
        };
        let threads = self.threads.min(n).max(1);
        let chunk = n.div_ceil(threads);
        self.start_workers(threads);
        let envs = &mut self.envs;
        let step_chunk = |(envs, acts): (&mut [SchedEnv<'t>], &[usize])| {
            envs.iter_mut()
                .zip(acts)
                .map(|(e, a)| e.step(*a))
                .collect::<Vec<_>>()
        };
        let steps: Vec<Result<super::env::Step, EnvError>> = match self.workers.as_ref() {
            Some(StepPool { workers }) if threads > 1 => {
                let mut chunks = envs.chunks_mut(chunk).zip(actions.chunks(chunk));
                let first = chunks.next();
                let mut rest: Vec<Vec<_>> = Vec::new();
                rest.resize_with(n.div_ceil(chunk).saturating_sub(1), Vec::new);
                let mut mine = Vec::new();
                workers.in_place_scope(|scope| {
                    for (part, out) in chunks.zip(rest.iter_mut()) {
                        scope.spawn(move |_| *out = step_chunk(part));
                    }
                    if let Some(part) = first {
                        mine = step_chunk(part);
                    }
                });
                mine.into_iter().chain(rest.into_iter().flatten()).collect()
            }
            _ => step_chunk((envs.as_mut_slice(), actions)),
        };
        for (i, step) in steps.into_iter().enumerate() {
            let step = step?;
            let (obs, final_obs) = if step.terminated || step.truncated {
                let mut env = self.draw()?;
                let seed = self.rng.random();
                let (first, _) = env.reset(seed)?;
                self.envs[i] = env;
                (first, Some(step.obs))
            } else {
                (step.obs, None)
            };
            out.obs.push(obs);
            out.rewards.push(step.reward);
            out.terminated.push(step.terminated);
            out.truncated.push(step.truncated);
            out.final_obs.push(final_obs);
            out.infos.push(step.info);
        }
        Ok(out)
    }
}
