//! The comparison harness and the simulator for Python: `compare` and `simulate` run
//! heuristics by registry name and Python callables that score candidates (a model trained in
//! Python decides exactly as `rl:PATH` does, through `LearnedPolicy::with_scorer`), and
//! `read_trace` reads any trace format. Results come back as JSON and CSV text that
//! `lachesis/__init__.py` turns into pandas DataFrames.

use crate::errors;
use lachesis_agent::harness::{self, CompareSpec, Comparison, load_trace, resolve_cluster};
use lachesis_agent::{LearnedPolicy, ScoreCandidates};
use lachesis_env::gym::{CANDIDATE_WIDTH, EnvConfig, MAX_CANDIDATES, Observation};
use lachesis_env::metrics::{write_jobs_csv, write_timeline_csv};
use lachesis_env::policy::{Policy, PolicyError, PolicyOptions};
use lachesis_env::sim::{SimConfig, Simulator, scale_to_load};
use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// A Python callable `scorer(obs, action_mask) -> scores` (one per candidate row, higher is
/// better) as a candidate scorer. The first Python exception it raises is kept, so that the
/// caller sees it as raised rather than as a message.
struct PyScorer {
    scorer: Py<PyAny>,
    raised: Arc<Mutex<Option<PyErr>>>,
}

impl PyScorer {
    fn call(&self, py: Python<'_>, obs: &Observation) -> PyResult<Vec<f32>> {
        let d = PyDict::new(py);
        let candidates =
            PyArray1::from_slice(py, &obs.candidates).reshape([MAX_CANDIDATES, CANDIDATE_WIDTH])?;
        d.set_item("candidates", candidates)?;
        d.set_item("global", PyArray1::from_slice(py, &obs.global))?;
        let out = self
            .scorer
            .call1(py, (d, PyArray1::from_slice(py, &obs.mask)))?;
        let out = out.bind(py);
        let scores = match out.extract::<PyReadonlyArray1<'_, f32>>() {
            Ok(array) => array.as_slice()?.to_vec(),
            Err(_) => out.extract::<Vec<f32>>()?,
        };
        if scores.len() != MAX_CANDIDATES {
            return Err(PyValueError::new_err(format!(
                "the scorer returned {} scores for {MAX_CANDIDATES} candidate rows",
                scores.len()
            )));
        }
        Ok(scores)
    }
}

impl ScoreCandidates for PyScorer {
    fn scores(&self, obs: &Observation) -> Result<Vec<f32>, String> {
        Python::attach(|py| {
            self.call(py, obs).map_err(|e| {
                let message = e.to_string();
                if let Ok(mut slot) = self.raised.lock() {
                    slot.get_or_insert(e);
                }
                message
            })
        })
    }
}

/// Policies by name: the callables in `scorers` first (deciding on the shortlist of
/// environments built like `env`), then the registry.
struct Builder {
    scorers: HashMap<String, Py<PyAny>>,
    env: EnvConfig,
    raised: Arc<Mutex<Option<PyErr>>>,
}

impl Builder {
    fn new(
        py: Python<'_>,
        scorers: HashMap<String, Py<PyAny>>,
        env: Option<&str>,
    ) -> PyResult<Self> {
        let env = match env {
            Some(json) => serde_json::from_str(json)
                .map_err(|e| errors::value(format!("environment config: {e}")))?,
            None => EnvConfig::default(),
        };
        for (name, f) in &scorers {
            if !f.bind(py).is_callable() {
                return Err(errors::value(format!("policy {name}: not callable")));
            }
        }
        Ok(Builder {
            scorers,
            env,
            raised: Arc::new(Mutex::new(None)),
        })
    }

    fn build(&self, name: &str, options: &PolicyOptions) -> Result<Box<dyn Policy>, PolicyError> {
        match self.scorers.get(name) {
            Some(f) => {
                let scorer = Python::attach(|py| PyScorer {
                    scorer: f.clone_ref(py),
                    raised: Arc::clone(&self.raised),
                });
                Ok(Box::new(LearnedPolicy::with_scorer(
                    name,
                    Box::new(scorer),
                    &self.env,
                )))
            }
            None => harness::build(name, options),
        }
    }

    /// The first Python exception a scorer raised (the simulator counts a failed decision
    /// and goes on; from Python, the exception is the answer).
    fn raised(&self) -> Option<PyErr> {
        self.raised.lock().ok().and_then(|mut slot| slot.take())
    }
}

/// Every policy on identical units, with paired statistics against the baseline: the result
/// as JSON (`setup`, `units`, `runs`, `paired`, `table`).
#[pyfunction]
#[pyo3(signature = (trace, cluster, policies, scorers, baseline=None, seeds=1, windows=12, window_jobs=150, loads=vec![Some(0.8), Some(1.0), Some(1.2)], tick_s=None, threads=None, resamples=2000, format=None, env_config=None))]
#[allow(clippy::too_many_arguments)] // Python keyword arguments
pub fn compare(
    py: Python<'_>,
    trace: &str,
    cluster: &str,
    policies: Vec<String>,
    scorers: HashMap<String, Py<PyAny>>,
    baseline: Option<String>,
    seeds: u64,
    windows: usize,
    window_jobs: usize,
    loads: Vec<Option<f64>>,
    tick_s: Option<f64>,
    threads: Option<usize>,
    resamples: usize,
    format: Option<&str>,
    env_config: Option<&str>,
) -> PyResult<String> {
    let mut trace_read = load_trace(Path::new(trace), format).map_err(errors::harness)?;
    trace_read.name = trace.to_string();
    let spec_cluster = Arc::new(resolve_cluster(cluster, &trace_read).map_err(errors::harness)?);
    let builder = Builder::new(py, scorers, env_config)?;
    let spec = CompareSpec {
        policies,
        baseline,
        seeds,
        windows,
        window_jobs,
        loads,
        tick_s,
        threads,
        resamples,
        command: "lachesis.compare (Python)".into(),
        ..CompareSpec::default()
    };
    let result = py.detach(|| {
        harness::compare(&trace_read, spec_cluster, &spec, &|name, options| {
            builder.build(name, options)
        })
    });
    if let Some(raised) = builder.raised() {
        return Err(raised);
    }
    let comparison = result.map_err(errors::harness)?;
    serde_json::to_string(&comparison_json(&comparison)).map_err(errors::value)
}

fn comparison_json(c: &Comparison) -> Value {
    let runs: Vec<Value> = c
        .runs
        .iter()
        .map(|r| {
            let unit = &c.units[r.unit];
            let mut row = json!({
                "policy": r.policy, "unit": r.unit, "window": unit.window,
                "load": unit.load, "seed": unit.seed,
            });
            if let (Some(row), Ok(Value::Object(summary))) =
                (row.as_object_mut(), serde_json::to_value(&r.summary))
            {
                for (k, v) in summary {
                    row.entry(k).or_insert(v);
                }
            }
            row
        })
        .collect();
    let mut paired = Vec::new();
    for m in &c.metrics {
        for (i, policy) in c.setup.policies.iter().enumerate() {
            let p = m.paired[i].as_ref();
            paired.push(json!({
                "metric": m.key, "label": m.label, "better": m.better, "policy": policy,
                "mean": m.means[i], "baseline": p.is_none(),
                "mean_diff": p.map(|p| p.mean_diff), "ci_low": p.map(|p| p.ci_low),
                "ci_high": p.map(|p| p.ci_high), "wins": p.map(|p| p.wins),
                "losses": p.map(|p| p.losses), "significant": p.map(|p| p.significant()),
            }));
        }
    }
    json!({
        "setup": c.setup, "units": c.units, "runs": runs, "paired": paired,
        "table": c.terminal_table(), "warnings": c.warnings(),
    })
}

/// One policy (a registry name, or `scorer`, a Python callable, named `policy`) on a trace:
/// `(summary JSON, jobs CSV, timeline CSV)`.
#[pyfunction]
#[pyo3(signature = (trace, cluster, policy, scorer=None, seed=0, load=None, tick_s=None, skip_unplaceable=true, format=None, env_config=None))]
#[allow(clippy::too_many_arguments)] // Python keyword arguments
pub fn simulate(
    py: Python<'_>,
    trace: &str,
    cluster: &str,
    policy: String,
    scorer: Option<Py<PyAny>>,
    seed: u64,
    load: Option<f64>,
    tick_s: Option<f64>,
    skip_unplaceable: bool,
    format: Option<&str>,
    env_config: Option<&str>,
) -> PyResult<(String, String, String)> {
    let mut t = load_trace(Path::new(trace), format).map_err(errors::harness)?;
    t.name = trace.to_string();
    let spec = Arc::new(resolve_cluster(cluster, &t).map_err(errors::harness)?);
    if let Some(load) = load {
        t = scale_to_load(&t, &spec, load)
            .map_err(|e| errors::value(format!("load {load}: {e}")))?;
    }
    let scorers: HashMap<String, Py<PyAny>> =
        scorer.into_iter().map(|f| (policy.clone(), f)).collect();
    let builder = Builder::new(py, scorers, env_config)?;
    let cfg = SimConfig {
        seed,
        skip_unplaceable,
        tick_s: tick_s.unwrap_or_else(|| harness::wants_tick_s(&policy)),
        ..SimConfig::default()
    };
    let options = harness::policy_options(&t, seed, &Default::default());
    let mut p = builder
        .build(&policy, &options)
        .map_err(|e| errors::harness(e.into()))?;
    let sim = Simulator::new(&t, spec, &cfg).map_err(|e| errors::harness(e.into()))?;
    let result = py.detach(|| sim.run(p.as_mut(), &mut |_| {}));
    if let Some(raised) = builder.raised() {
        return Err(raised);
    }
    let summary = serde_json::to_string(&result.summary).map_err(errors::value)?;
    let mut jobs = Vec::new();
    write_jobs_csv(&mut jobs, &result.jobs).map_err(errors::value)?;
    let mut timeline = Vec::new();
    write_timeline_csv(&mut timeline, &result.timeline).map_err(errors::value)?;
    Ok((
        summary,
        String::from_utf8_lossy(&jobs).into_owned(),
        String::from_utf8_lossy(&timeline).into_owned(),
    ))
}

/// Reads a trace in any format (detected, or `format`): `(normalized CSV, format name)`.
#[pyfunction]
#[pyo3(signature = (path, format=None))]
pub fn read_trace(path: &str, format: Option<&str>) -> PyResult<(String, String)> {
    let format = format
        .map(harness::parse_format)
        .transpose()
        .map_err(errors::harness)?;
    let read = lachesis_env::trace::read_trace(Path::new(path), format).map_err(errors::trace)?;
    let mut out = Vec::new();
    lachesis_env::trace::write_normalized(&read.trace, &mut out)
        .map_err(|e| errors::value(format!("{path}: {e}")))?;
    Ok((
        String::from_utf8_lossy(&out).into_owned(),
        read.report.format.as_str().to_string(),
    ))
}

/// The registry's policy parts: `(part, name, summary)`.
#[pyfunction]
pub fn policy_names() -> Vec<(String, String, String)> {
    lachesis_env::policy::policy_catalog()
        .into_iter()
        .map(|i| {
            (
                i.part.to_string(),
                i.name.to_string(),
                i.summary.to_string(),
            )
        })
        .collect()
}
