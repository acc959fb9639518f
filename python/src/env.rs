//! The Gymnasium environments' Rust side: `Env` (one `SchedEnv` over windows of a trace) and
//! `VecEnv` (the Rust `VecEnv`, auto-resetting on the same step). Observations come back as
//! NumPy arrays that take over the environment's own buffers; the Python classes in
//! `lachesis/gym.py` add the spaces and Gymnasium's seeding.

use crate::errors;
use lachesis_agent::harness::{load_trace, resolve_cluster};
use lachesis_env::cluster::ClusterSpec;
use lachesis_env::gym::rollout::{Rule, play};
use lachesis_env::gym::{
    CANDIDATE_WIDTH, EndReason, EnvConfig, GLOBAL_WIDTH, Info, MAX_CANDIDATES, Observation,
    SchedEnv, VecEnv as RustVecEnv, WAIT_ACTION, window_pool,
};
use lachesis_env::job::Trace;
use lachesis_env::sim::scale_to_load;
use numpy::{IntoPyArray, PyArray1, ndarray};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use pyo3::{IntoPyObjectExt, intern};
use self_cell::self_cell;
use std::sync::Arc;
use std::time::Instant;

/// The episodes' windows, cluster and configuration: `_core.Setting(trace, cluster, ...)`,
/// built once from Python and given to `Env`, `VecEnv` and `rust_steps_per_s`.
#[pyclass(frozen, module = "lachesis._core")]
#[derive(Debug, Clone)]
pub struct Setting {
    pool: Vec<Trace>,
    spec: Arc<ClusterSpec>,
    cfg: EnvConfig,
}

#[pymethods]
impl Setting {
    /// Reads `trace`, sizes `cluster`, cuts `windows` seeded windows of `window_jobs` jobs (0:
    /// the whole trace, once), scales them to `load`, and parses `config` (JSON of
    /// `EnvConfig`).
    #[new]
    #[pyo3(signature = (trace, cluster, window_jobs=256, windows=16, load=None, seed=0, format=None, config=None))]
    #[allow(clippy::too_many_arguments)] // the Python constructor's keyword arguments
    fn new(
        trace: &str,
        cluster: &str,
        window_jobs: usize,
        windows: usize,
        load: Option<f64>,
        seed: u64,
        format: Option<&str>,
        config: Option<&str>,
    ) -> PyResult<Self> {
        let mut whole = load_trace(std::path::Path::new(trace), format).map_err(errors::harness)?;
        whole.name = trace.to_string();
        let spec = Arc::new(resolve_cluster(cluster, &whole).map_err(errors::harness)?);
        let mut pool = if window_jobs == 0 {
            vec![whole]
        } else {
            window_pool(&whole, window_jobs, windows.max(1), seed)
                .map_err(|e| errors::value(format!("{window_jobs}-job windows of {trace}: {e}")))?
        };
        if let Some(load) = load {
            pool = pool
                .iter()
                .map(|w| scale_to_load(w, &spec, load))
                .collect::<Result<_, _>>()
                .map_err(|e| errors::value(format!("load {load}: {e}")))?;
        }
        let cfg: EnvConfig = match config {
            Some(json) => serde_json::from_str(json)
                .map_err(|e| errors::value(format!("environment config: {e}")))?,
            None => EnvConfig::default(),
        };
        cfg.validate()
            .map_err(|e| errors::value(format!("environment config: {e}")))?;
        Ok(Setting { pool, spec, cfg })
    }

    /// Windows episodes are drawn from.
    #[getter]
    fn windows(&self) -> usize {
        self.pool.len()
    }

    /// Jobs in each window.
    fn window_sizes(&self) -> Vec<usize> {
        self.pool.iter().map(Trace::len).collect()
    }
}

fn end_name(end: EndReason) -> &'static str {
    match end {
        EndReason::AllDone => "all-done",
        EndReason::Stalled => "stalled",
        EndReason::StepLimit => "step-limit",
        EndReason::TimeLimit => "time-limit",
    }
}

/// `buf` as a NumPy array of shape `dim`, owning the buffer (one array object; `reshape` on a
/// flat one would make a second).
fn shaped<'py, T: numpy::Element, const N: usize>(
    py: Python<'py>,
    buf: Vec<T>,
    dim: [usize; N],
) -> PyResult<Bound<'py, PyAny>>
where
    [usize; N]: ndarray::IntoDimension,
{
    let array = ndarray::Array::from_shape_vec(dim, buf)
        .map_err(|e| errors::value(format!("observation buffer: {e}")))?;
    Ok(array.into_pyarray(py).into_any())
}

/// The observation as Gymnasium's `Dict` space holds it: `candidates` (MAX_CANDIDATES x
/// CANDIDATE_WIDTH) and `global` (GLOBAL_WIDTH), both float32, moved (not copied) into NumPy.
fn obs_dict<'py>(
    py: Python<'py>,
    candidates: Vec<f32>,
    global: Vec<f32>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item(
        intern!(py, "candidates"),
        shaped(py, candidates, [MAX_CANDIDATES, CANDIDATE_WIDTH])?,
    )?;
    d.set_item(intern!(py, "global"), global.into_pyarray(py))?;
    Ok(d)
}

/// `info`: the action mask (as MaskablePPO and Gymnasium's masking expect it) and what the
/// step reports.
fn info_dict<'py>(py: Python<'py>, info: &Info, mask: Vec<bool>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item(intern!(py, "action_mask"), PyArray1::from_vec(py, mask))?;
    d.set_item(intern!(py, "now_s"), info.now_s)?;
    d.set_item(intern!(py, "steps"), info.steps)?;
    d.set_item(intern!(py, "finished"), info.finished)?;
    d.set_item(intern!(py, "jobs"), info.jobs)?;
    d.set_item(intern!(py, "candidates"), info.candidates)?;
    d.set_item(intern!(py, "end"), info.end.map(end_name))?;
    Ok(d)
}

/// The action taken for `action` under `mask`: itself when legal; otherwise an error when
/// `raise_illegal`, else the default action (wait, or the first legal one where wait is
/// masked). The second value says whether it was replaced.
fn legal_action(action: usize, mask: &[bool], raise_illegal: bool) -> PyResult<(usize, bool)> {
    if mask.get(action).copied().unwrap_or(false) {
        return Ok((action, false));
    }
    if raise_illegal {
        return Err(errors::value(format!(
            "action {action} is not legal now (info[\"action_mask\"] is false there, or it is \
             out of 0..{MAX_CANDIDATES})"
        )));
    }
    let fallback = if mask.get(WAIT_ACTION).copied().unwrap_or(false) {
        WAIT_ACTION
    } else {
        mask.iter().position(|m| *m).unwrap_or(WAIT_ACTION)
    };
    Ok((fallback, true))
}

fn illegal_mode(illegal_action: &str) -> PyResult<bool> {
    match illegal_action {
        "raise" => Ok(true),
        "wait" => Ok(false),
        other => Err(errors::value(format!(
            "illegal_action: `{other}` is not \"wait\" or \"raise\""
        ))),
    }
}

type Slot<'a> = Option<SchedEnv<'a>>;

self_cell!(
    /// The windows, and the episode that borrows one of them.
    struct Episodes {
        owner: Vec<Trace>,
        #[not_covariant]
        dependent: Slot,
    }
    impl {Debug}
);

/// One scheduling environment over seeded windows of a trace (see `lachesis.gym`).
#[pyclass(unsendable, module = "lachesis._core")]
#[derive(Debug)]
pub struct Env {
    episodes: Episodes,
    spec: Arc<ClusterSpec>,
    cfg: EnvConfig,
    /// The mask of the last observation returned.
    mask: Vec<bool>,
    raise_illegal: bool,
}

#[pymethods]
impl Env {
    #[new]
    #[pyo3(signature = (setting, illegal_action="wait"))]
    fn new(setting: &Setting, illegal_action: &str) -> PyResult<Self> {
        let s = setting.clone();
        Ok(Env {
            episodes: Episodes::new(s.pool, |_| None),
            spec: s.spec,
            cfg: s.cfg,
            mask: Vec::new(),
            raise_illegal: illegal_mode(illegal_action)?,
        })
    }

    /// Windows episodes are drawn from.
    #[getter]
    fn windows(&self) -> usize {
        self.episodes.borrow_owner().len()
    }

    /// Jobs in each window.
    fn window_sizes(&self) -> Vec<usize> {
        self.episodes
            .borrow_owner()
            .iter()
            .map(Trace::len)
            .collect()
    }

    /// Starts an episode on window `window` with simulation seed `seed`: `(obs, info)`.
    fn reset<'py>(
        &mut self,
        py: Python<'py>,
        window: usize,
        seed: u64,
    ) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>)> {
        let (spec, cfg) = (&self.spec, &self.cfg);
        let (obs, info) = self.episodes.with_dependent_mut(|pool, slot| {
            let trace = pool.get(window).ok_or_else(|| {
                errors::value(format!("window {window} of {} windows", pool.len()))
            })?;
            let mut env =
                SchedEnv::new(trace, Arc::clone(spec), cfg.clone()).map_err(errors::env)?;
            let first = env.reset(seed).map_err(errors::env)?;
            *slot = Some(env);
            PyResult::Ok(first)
        })?;
        self.mask.clone_from(&obs.mask);
        Ok((
            obs_dict(py, obs.candidates, obs.global)?,
            info_dict(py, &info, obs.mask)?,
        ))
    }

    /// Takes `action`: `(obs, reward, terminated, truncated, info)`. An illegal action raises
    /// `ValueError` or is replaced by the default action (`illegal_action`; then
    /// `info["illegal_action"]` is true); a step after the end raises `EpisodeOver`.
    fn step<'py>(&mut self, py: Python<'py>, action: usize) -> PyResult<Bound<'py, PyAny>> {
        let (action, replaced) = if self.mask.is_empty() {
            (action, false)
        } else {
            legal_action(action, &self.mask, self.raise_illegal)?
        };
        let step = self.episodes.with_dependent_mut(|_, slot| match slot {
            Some(env) => env.step(action).map_err(errors::env),
            None => Err(errors::env(lachesis_env::gym::EnvError::EpisodeOver)),
        })?;
        self.mask.clone_from(&step.obs.mask);
        let info = info_dict(py, &step.info, step.obs.mask)?;
        if replaced {
            info.set_item(intern!(py, "illegal_action"), true)?;
        }
        (
            obs_dict(py, step.obs.candidates, step.obs.global)?,
            f64::from(step.reward),
            step.terminated,
            step.truncated,
            info,
        )
            .into_bound_py_any(py)
    }

    /// The mask of the last observation (all false before the first reset).
    fn action_mask<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<bool>> {
        if self.mask.is_empty() {
            return PyArray1::from_vec(py, vec![false; MAX_CANDIDATES]);
        }
        PyArray1::from_slice(py, &self.mask)
    }
}

type VecSlot<'a> = Option<RustVecEnv<'a>>;

self_cell!(
    /// The windows, and the vector of environments over them.
    struct Vector {
        owner: Vec<Trace>,
        #[not_covariant]
        dependent: VecSlot,
    }
    impl {Debug}
);

/// `n` environments over windows of a trace, stepped together by the Rust `VecEnv` (see
/// `lachesis.gym.SchedulingVectorEnv`).
#[pyclass(unsendable, module = "lachesis._core")]
#[derive(Debug)]
pub struct VecEnv {
    vector: Vector,
    spec: Arc<ClusterSpec>,
    cfg: EnvConfig,
    n: usize,
    threads: usize,
    /// `n` masks of the last observations, flat.
    masks: Vec<bool>,
    raise_illegal: bool,
}

/// `obs` batched: `candidates` (n x MAX_CANDIDATES x CANDIDATE_WIDTH), `global` (n x
/// GLOBAL_WIDTH), and the masks (n x MAX_CANDIDATES, flat).
fn batch<'py>(py: Python<'py>, obs: &[Observation]) -> PyResult<(Bound<'py, PyDict>, Vec<bool>)> {
    let n = obs.len();
    let mut candidates = Vec::with_capacity(n * MAX_CANDIDATES * CANDIDATE_WIDTH);
    let mut global = Vec::with_capacity(n * GLOBAL_WIDTH);
    let mut masks = Vec::with_capacity(n * MAX_CANDIDATES);
    for o in obs {
        candidates.extend_from_slice(&o.candidates);
        global.extend_from_slice(&o.global);
        masks.extend_from_slice(&o.mask);
    }
    let d = PyDict::new(py);
    d.set_item(
        intern!(py, "candidates"),
        shaped(py, candidates, [n, MAX_CANDIDATES, CANDIDATE_WIDTH])?,
    )?;
    d.set_item(
        intern!(py, "global"),
        shaped(py, global, [n, GLOBAL_WIDTH])?,
    )?;
    Ok((d, masks))
}

fn mask_array<'py>(py: Python<'py>, masks: Vec<bool>, n: usize) -> PyResult<Bound<'py, PyAny>> {
    shaped(py, masks, [n, MAX_CANDIDATES])
}

#[pymethods]
impl VecEnv {
    #[new]
    #[pyo3(signature = (num_envs, setting, threads=1, illegal_action="wait"))]
    fn new(
        num_envs: usize,
        setting: &Setting,
        threads: usize,
        illegal_action: &str,
    ) -> PyResult<Self> {
        if num_envs == 0 {
            return Err(errors::value("num_envs must be at least 1"));
        }
        let s = setting.clone();
        Ok(VecEnv {
            vector: Vector::new(s.pool, |_| None),
            spec: s.spec,
            cfg: s.cfg,
            n: num_envs,
            threads: threads.max(1),
            masks: Vec::new(),
            raise_illegal: illegal_mode(illegal_action)?,
        })
    }

    /// Builds the environments anew from `seed` (windows and episode seeds are drawn from it)
    /// and resets them: `(obs, infos)`.
    fn reset<'py>(
        &mut self,
        py: Python<'py>,
        seed: u64,
    ) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>)> {
        let (spec, cfg, n, threads) = (&self.spec, &self.cfg, self.n, self.threads);
        let obs = self.vector.with_dependent_mut(|pool, slot| {
            let mut v = RustVecEnv::new(pool, Arc::clone(spec), cfg.clone(), n, seed)
                .map_err(errors::env)?
                .with_threads(threads);
            let obs = v.reset().map_err(errors::env)?;
            *slot = Some(v);
            PyResult::Ok(obs)
        })?;
        let (obs, masks) = batch(py, &obs)?;
        self.masks.clone_from(&masks);
        let infos = PyDict::new(py);
        infos.set_item(intern!(py, "action_mask"), mask_array(py, masks, n)?)?;
        Ok((obs, infos))
    }

    /// Steps every environment: `(obs, rewards, terminated, truncated, infos, final_obs)`,
    /// where `final_obs` is `None` when no episode ended, else a list with the last
    /// observation of each that did (`None` for the others); those environments were reset on
    /// this step and `obs` holds their first observation.
    fn step<'py>(&mut self, py: Python<'py>, actions: Vec<usize>) -> PyResult<Bound<'py, PyAny>> {
        if actions.len() != self.n {
            return Err(errors::value(format!(
                "{} actions for {} environments",
                actions.len(),
                self.n
            )));
        }
        let mut taken = Vec::with_capacity(self.n);
        let mut replaced = Vec::with_capacity(self.n);
        for (i, a) in actions.iter().enumerate() {
            let mask = self.masks.get(i * MAX_CANDIDATES..(i + 1) * MAX_CANDIDATES);
            let (a, r) = match mask {
                Some(mask) => legal_action(*a, mask, self.raise_illegal)?,
                None => (*a, false),
            };
            taken.push(a);
            replaced.push(r);
        }
        let step = self.vector.with_dependent_mut(|_, slot| match slot {
            Some(v) => v.step(&taken).map_err(errors::env),
            None => Err(errors::env(lachesis_env::gym::EnvError::EpisodeOver)),
        })?;
        let (obs, masks) = batch(py, &step.obs)?;
        self.masks.clone_from(&masks);
        let infos = PyDict::new(py);
        infos.set_item(intern!(py, "action_mask"), mask_array(py, masks, self.n)?)?;
        infos.set_item(
            intern!(py, "finished"),
            PyArray1::from_iter(py, step.infos.iter().map(|i| i.finished)),
        )?;
        if replaced.iter().any(|r| *r) {
            infos.set_item(
                intern!(py, "illegal_action"),
                PyArray1::from_vec(py, replaced),
            )?;
        }
        let final_obs = if step.final_obs.iter().any(Option::is_some) {
            let list = PyList::empty(py);
            for (last, info) in step.final_obs.into_iter().zip(&step.infos) {
                match last {
                    Some(o) => {
                        let d = obs_dict(py, o.candidates, o.global)?;
                        d.set_item(intern!(py, "end"), info.end.map(end_name))?;
                        list.append(d)?;
                    }
                    None => list.append(py.None())?,
                }
            }
            list.into_any()
        } else {
            py.None().into_bound(py)
        };
        let rewards = PyArray1::from_iter(py, step.rewards.iter().map(|r| f64::from(*r)));
        (
            obs,
            rewards,
            PyArray1::from_vec(py, step.terminated),
            PyArray1::from_vec(py, step.truncated),
            infos,
            final_obs,
        )
            .into_bound_py_any(py)
    }
}

/// Steps per second of the Rust `SchedEnv` alone (no Python) on `setting`'s windows, under the
/// first-legal rule, episode i seeded `seed + i`: one rate per repeat, and the steps of a
/// repeat. For measuring the Python environment's overhead beside it.
#[pyfunction]
#[pyo3(signature = (setting, seed=0, repeats=5))]
pub fn rust_steps_per_s(
    py: Python<'_>,
    setting: &Setting,
    seed: u64,
    repeats: usize,
) -> PyResult<(Vec<f64>, u64)> {
    py.detach(|| {
        let mut rates = Vec::with_capacity(repeats);
        let mut steps = 0;
        for _ in 0..repeats.max(1) {
            let started = Instant::now();
            let t = play(
                &setting.pool,
                &setting.spec,
                &setting.cfg,
                Rule::FirstLegal,
                seed,
                false,
            )
            .map_err(|e| e.to_string())?;
            rates.push(t.steps as f64 / started.elapsed().as_secs_f64());
            steps = t.steps;
        }
        Ok::<_, String>((rates, steps))
    })
    .map_err(errors::value)
}
