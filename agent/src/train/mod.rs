//! Training: behaviour cloning from a heuristic teacher, then PPO with invalid-action masking,
//! periodic greedy evaluation on validation windows (the best checkpoint is kept), TensorBoard
//! event files, and resume from the last checkpoint.
//!
//! The run writes a model directory:
//!
//! ```text
//! OUT/model.bpk           the kept (best on validation) weights
//! OUT/manifest.json       schema, dimensions, data and split, seed, config, git, validation
//! OUT/curve.csv           the validation curve (iteration, env steps, wall, avg JCT, ...)
//! OUT/tb/                 TensorBoard event files (CleanRL's metric names and sched/*)
//! OUT/checkpoint/         the latest state, for --resume (weights, optimizer, progress)
//! ```
//!
//! Honesty: training windows come from each trace's training split only, validation windows
//! from the validation split (by submit time, so no validation job is seen in training); the
//! policy sees only what `DecisionContext` shows (never a true duration).

pub mod config;
mod eval;
mod improve;
mod ppo_loop;

pub use config::TrainConfig;
pub use eval::{EvalUnit, evaluate, validation_table};

/// `bc.teacher` value that chooses each trace's teacher by replay (`select_teacher`).
pub const REPLAY_TEACHER: &str = "replay";

use crate::manifest::{DataRecord, Manifest, ModelError, TrainingRecord, WEIGHTS_FILE};
use crate::model::{Scorer, ScorerConfig};
use crate::tensorboard::SummaryWriter;
use burn::module::Module;
use burn::tensor::Device;
use eval::{Throughputs, heuristic};
use lachesis_env::cluster::ClusterSpec;
use lachesis_env::gym::EnvConfig;
use lachesis_env::gym::window_pool;
use lachesis_env::job::Trace;
use lachesis_env::sim::scale_to_load;
use lachesis_env::trace::split::split_by_time;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// A training trace with its cluster, as the command line resolved them.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// The trace's path or name, for the manifest.
    pub name: String,
    pub trace: Trace,
    pub cluster: Arc<ClusterSpec>,
    /// The throughput table its typed jobs run at (`gavel`, `sia` or a file); `None`: untyped.
    pub throughputs: Option<String>,
}

/// A training run that failed (the message names the file or field).
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("config: {0}")]
    Config(String),
    #[error("{name}: {message}")]
    Data { name: String, message: String },
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },
    #[error("environment: {0}")]
    Env(String),
    #[error("tensorboard: {0}")]
    Tensorboard(#[from] crate::tensorboard::TbError),
    #[error("{0}")]
    Other(String),
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> TrainError + '_ {
    move |e| TrainError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// What the run reports as it goes (for a progress bar).
#[derive(Debug, Clone)]
pub struct Progress {
    /// `teacher`, `bc-collect`, `bc-fit`, `improve-label`, `improve`, `ppo`, `eval`.
    pub phase: &'static str,
    pub done: u64,
    pub total: u64,
    pub message: String,
}

/// A training trace prepared: training windows and validation units.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub name: String,
    pub cluster: Arc<ClusterSpec>,
    /// The throughput table its typed jobs run at.
    pub throughputs: Option<Arc<Throughputs>>,
    /// The environment of its episodes: the run's, with this trace's table.
    pub env: EnvConfig,
    /// Training windows, each scaled to each training load.
    pub pool: Vec<Trace>,
    pub validation: Vec<EvalUnit>,
    pub record: DataRecord,
    /// The behaviour-cloning teacher of this trace's episodes (empty: none).
    pub teacher: String,
}

fn prepare(cfg: &TrainConfig, datasets: &[Dataset]) -> Result<Vec<Prepared>, TrainError> {
    let mut out = Vec::new();
    for (k, d) in datasets.iter().enumerate() {
        let data_err = |message: String| TrainError::Data {
            name: d.name.clone(),
            message,
        };
        let throughputs = match &d.throughputs {
            Some(spec) => Some(Arc::new(Throughputs::load(spec).map_err(data_err)?)),
            None => None,
        };
        let mut env = cfg.env.clone();
        env.sim.throughputs = d.throughputs.clone();
        let split = split_by_time(&d.trace, cfg.split.train, cfg.split.validation)
            .map_err(|e| data_err(e.to_string()))?;
        let jobs = cfg.windows.jobs;
        let seed = cfg.seed.wrapping_add(k as u64 * 7919);
        let windows = window_pool(&split.train, jobs, cfg.windows.pool, seed)
            .map_err(|e| data_err(format!("training split: {e}")))?;
        let mut pool = Vec::new();
        for w in &windows {
            for load in &cfg.windows.loads {
                pool.push(
                    scale_to_load(w, &d.cluster, *load)
                        .map_err(|e| data_err(format!("training window at load {load}: {e}")))?,
                );
            }
        }
        let val_jobs = cfg.validation_window_jobs();
        let val_windows = window_pool(&split.validation, val_jobs, cfg.eval.windows, seed ^ 0xdead)
            .map_err(|e| data_err(format!("validation split: {e}")))?;
        let mut validation = Vec::new();
        for (w, window) in val_windows.iter().enumerate() {
            for load in &cfg.eval.loads {
                let scaled = Arc::new(
                    scale_to_load(window, &d.cluster, *load)
                        .map_err(|e| data_err(format!("validation window at load {load}: {e}")))?,
                );
                for seed in 0..cfg.eval.seeds.max(1) {
                    validation.push(EvalUnit {
                        trace: Arc::clone(&scaled),
                        cluster: Arc::clone(&d.cluster),
                        seed,
                        label: format!("{} w{w} load {load} seed {seed}", d.name),
                        throughputs: throughputs.clone(),
                    });
                }
            }
        }
        out.push(Prepared {
            name: d.name.clone(),
            cluster: Arc::clone(&d.cluster),
            throughputs,
            env,
            pool,
            validation,
            record: DataRecord {
                trace: d.name.clone(),
                cluster: d.cluster.name.clone(),
                jobs: d.trace.len(),
                train_fraction: cfg.split.train,
                validation_fraction: cfg.split.validation,
                cuts_s: [split.cuts[0].secs_f64(), split.cuts[1].secs_f64()],
                ..DataRecord::default()
            },
            teacher: cfg.bc.teacher.clone(),
        });
    }
    Ok(out)
}

/// Each candidate's score on `units` (the geometric mean of its average JCT, infinite when it
/// left a job unfinished), and the best: the first with the lowest score.
#[derive(Debug, Clone, PartialEq)]
pub struct TeacherChoice {
    pub chosen: String,
    pub scores: Vec<(String, f64)>,
}

/// Replays every candidate heuristic on `units` (training windows: what the operator's
/// history shows) and picks the one with the lowest geometric-mean average JCT. A candidate
/// that leaves any job unfinished scores infinity. Only real schedulers compete: the
/// candidates see what `DecisionContext` shows, never a true duration.
pub fn select_teacher(
    candidates: &[String],
    units: &[EvalUnit],
    tick_s: f64,
    threads: usize,
) -> Result<TeacherChoice, TrainError> {
    let mut scores = Vec::with_capacity(candidates.len());
    for c in candidates {
        // A heuristic that reads a throughput table cannot run on a trace without one: it is
        // no candidate there.
        if units
            .iter()
            .any(|u| heuristic(c, u.throughputs.as_ref()).is_err())
        {
            scores.push((c.clone(), f64::INFINITY));
            continue;
        }
        let results = evaluate(
            units,
            &|u| heuristic(c, u.throughputs.as_ref()),
            tick_s,
            threads,
        )
        .map_err(TrainError::Other)?;
        let unfinished = results.iter().any(|r| r.summary.finished < r.summary.jobs);
        let logs: Vec<f64> = results
            .iter()
            .map(|r| r.summary.avg_jct_s.max(1e-3).ln())
            .collect();
        let score = if unfinished || logs.is_empty() {
            f64::INFINITY
        } else {
            (logs.iter().sum::<f64>() / logs.len() as f64).exp()
        };
        scores.push((c.clone(), score));
    }
    let chosen = scores
        .iter()
        .fold(None::<&(String, f64)>, |best, s| match best {
            Some(b) if b.1 <= s.1 => Some(b),
            _ => Some(s),
        })
        .map(|(c, _)| c.clone())
        .ok_or_else(|| TrainError::Config("bc.candidates is empty".into()))?;
    Ok(TeacherChoice { chosen, scores })
}

/// With `bc.teacher = "replay"`, chooses each trace's teacher on `replay_windows` of its
/// training windows (evenly spread over its pool, every load) and records it.
fn choose_teachers(
    cfg: &TrainConfig,
    prepared: &mut [Prepared],
    threads: usize,
    progress: &mut dyn FnMut(Progress),
) -> Result<(), TrainError> {
    if cfg.bc.teacher != REPLAY_TEACHER {
        for p in prepared.iter_mut() {
            p.record.teacher = (!p.teacher.is_empty()).then(|| p.teacher.clone());
        }
        return Ok(());
    }
    let total = prepared.len() as u64;
    for (k, p) in prepared.iter_mut().enumerate() {
        let windows = p.pool.len() / cfg.windows.loads.len().max(1);
        let take = cfg.bc.replay_windows.min(windows).max(1);
        let units: Vec<EvalUnit> = (0..take)
            .flat_map(|i| {
                let w = i * windows / take;
                let per = cfg.windows.loads.len().max(1);
                (w * per..(w + 1) * per).filter_map(|j| p.pool.get(j))
            })
            .enumerate()
            .map(|(i, t)| EvalUnit {
                trace: Arc::new(t.clone()),
                cluster: Arc::clone(&p.cluster),
                seed: i as u64,
                label: format!("{} training window {i}", p.name),
                throughputs: p.throughputs.clone(),
            })
            .collect();
        progress(Progress {
            phase: "teacher",
            done: k as u64,
            total,
            message: format!(
                "replaying {} heuristics on {}",
                cfg.bc.candidates.len(),
                p.name
            ),
        });
        let choice = select_teacher(&cfg.bc.candidates, &units, cfg.eval.tick_s, threads)?;
        p.teacher = choice.chosen.clone();
        p.record.teacher = Some(choice.chosen);
        p.record.teacher_scores = choice.scores;
    }
    Ok(())
}

/// Everything about a run besides its config.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Continue from `OUT/checkpoint` instead of starting over.
    pub resume: bool,
    /// Recorded in the manifest.
    pub git_revision: String,
}

/// Whether the policy `name` has an oracle part, one that reads true durations.
pub fn is_oracle(name: &str) -> bool {
    name.split('/').any(|part| part.trim().ends_with("-oracle"))
}

/// The behaviour-cloning teacher for an episode over `trace`. An oracle teacher (e.g.
/// `srtf-oracle/best-fit/las-preempt`) is built with that window's true durations: a
/// privileged teacher, legitimate in training because the history's durations are known once
/// its jobs have finished. Only its choices reach the model, as labels; the model's features
/// never hold a duration, so the trained policy decides on what a scheduler knows.
pub(crate) fn build_teacher(
    name: &str,
    trace: &lachesis_env::job::Trace,
    throughputs: Option<&Arc<Throughputs>>,
) -> Result<Box<dyn lachesis_env::policy::Policy>, lachesis_env::policy::PolicyError> {
    let options = lachesis_env::policy::PolicyOptions {
        oracle_durations: is_oracle(name).then(|| trace.true_durations().into()),
        throughputs: throughputs.map(|t| Arc::clone(&t.table)),
        ..lachesis_env::policy::PolicyOptions::default()
    };
    lachesis_env::policy::build_policy_with(name, &options)
}

/// Trains per `cfg` on `datasets` and writes the model directory `out`; returns its manifest.
pub fn train(
    cfg: &TrainConfig,
    datasets: &[Dataset],
    out: &Path,
    options: &RunOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<Manifest, TrainError> {
    cfg.validate().map_err(TrainError::Config)?;
    let started = Instant::now();
    std::fs::create_dir_all(out).map_err(io(out))?;
    let mut prepared = prepare(cfg, datasets)?;
    // Every teacher and baseline must build (with a table when some trace has one: the parts
    // that read rates need it).
    let any_table = prepared.iter().find_map(|p| p.throughputs.as_ref());
    let teachers: Vec<&String> = if cfg.bc.teacher == REPLAY_TEACHER {
        cfg.bc.candidates.iter().collect()
    } else {
        std::iter::once(&cfg.bc.teacher)
            .filter(|t| !t.is_empty())
            .collect()
    };
    for teacher in teachers {
        let empty = lachesis_env::job::Trace::new("check", Vec::new(), Vec::new(), Vec::new())
            .map_err(|e| TrainError::Config(format!("bc.teacher: {e}")))?;
        build_teacher(teacher, &empty, any_table)
            .map_err(|e| TrainError::Config(format!("bc.teacher: {e}")))?;
    }
    for b in &cfg.eval.baselines {
        heuristic(b, any_table).map_err(|e| TrainError::Config(format!("eval.baselines: {e}")))?;
    }
    let device = Device::flex().autodiff();
    let threads = if cfg.threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        cfg.threads
    };
    // TbError names the file itself.
    let mut tb = SummaryWriter::create(&out.join("tb"))?;
    tb.add_text("hyperparameters", &hyperparameter_table(cfg), 0)?;

    let units: Vec<EvalUnit> = prepared
        .iter()
        .flat_map(|p| p.validation.iter().cloned())
        .collect();
    progress(Progress {
        phase: "eval",
        done: 0,
        total: 1,
        message: format!("baselines on {} validation units", units.len()),
    });
    let baselines: Vec<(String, Vec<eval::UnitResult>)> = cfg
        .eval
        .baselines
        .iter()
        .map(|b| {
            let results = evaluate(
                &units,
                &|u| heuristic(b, u.throughputs.as_ref()),
                cfg.eval.tick_s,
                threads,
            )
            .map_err(TrainError::Other)?;
            Ok((b.clone(), results))
        })
        .collect::<Result<_, TrainError>>()?;

    if !cfg.bc.teacher.is_empty() {
        choose_teachers(cfg, &mut prepared, threads, progress)?;
    }
    let mut run = ppo_loop::Run::start(cfg, &prepared, out, options, &device, threads)?;
    // Improvement rounds follow cloning; a resumed run has done both (their rows are not kept).
    let mut improved = (cfg.improve.rounds > 0).then(|| crate::manifest::ImproveRecord {
        label_source: improve::LABEL_SOURCE.to_string(),
        settings: toml::to_string(&cfg.improve).unwrap_or_default(),
        rounds: Vec::new(),
    });
    if !run.resumed() && !cfg.bc.teacher.is_empty() {
        let cloned = run.behaviour_clone(progress, &mut tb)?;
        if cfg.improve.rounds > 0 {
            let setting = improve::Setting {
                cfg,
                prepared: &prepared,
                device: &device,
                threads,
                units: &units,
                baselines: &baselines,
            };
            improved = Some(improve::improve(
                &mut run, cloned, &setting, progress, &mut tb,
            )?);
        }
    }
    run.train(progress, &mut tb, &units, &baselines)?;
    tb.flush()?;

    let best = run.best_model();
    best.clone()
        .save_file(out.join(WEIGHTS_FILE))
        .map_err(|e| TrainError::Io {
            path: out.join(WEIGHTS_FILE),
            message: e.to_string(),
        })?;
    let mut manifest = Manifest::new(
        cfg.model.hidden,
        cfg.env.clone(),
        TrainingRecord {
            config: cfg.to_toml(),
            data: prepared.iter().map(|p| p.record.clone()).collect(),
            seed: cfg.seed,
            git_revision: options.git_revision.clone(),
            teacher: (!cfg.bc.teacher.is_empty()).then(|| cfg.bc.teacher.clone()),
            ppo_iterations: run.iteration(),
            env_steps: run.env_steps(),
            wall_s: started.elapsed().as_secs_f64() + run.prior_wall_s(),
            best_iteration: run.best_iteration(),
            improve: improved,
        },
    );
    let learned = match run.best_row() {
        Some(row) => row,
        // A checkpoint from before rows were kept: evaluate the kept model once.
        None => {
            let results = evaluate(
                &units,
                &|_| Ok(Box::new(crate::LearnedPolicy::new("learned", &best, &cfg.env)) as _),
                cfg.eval.tick_s,
                threads,
            )
            .map_err(TrainError::Other)?;
            validation_table(&[("learned".to_string(), results)]).remove(0)
        }
    };
    manifest.validation = std::iter::once(learned)
        .chain(validation_table(&baselines))
        .collect();
    manifest.write(out)?;
    run.write_curve(&out.join("curve.csv"))?;
    Ok(manifest)
}

/// The hyperparameters as a Markdown table (TensorBoard's text tab renders it).
fn hyperparameter_table(cfg: &TrainConfig) -> String {
    let mut s = String::from("|param|value|\n|-|-|\n");
    for line in cfg.to_toml().lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some((k, v)) = line.split_once(" = ") {
            s.push_str(&format!("|{k}|{v}|\n"));
        } else {
            s.push_str(&format!("|{line}||\n"));
        }
    }
    s
}

/// A freshly initialized model of `cfg`'s size (seeded through burn's device seed).
pub(crate) fn fresh_model(cfg: &TrainConfig, device: &Device) -> Scorer {
    ScorerConfig::new()
        .with_hidden(cfg.model.hidden)
        .init(device)
}

/// The weights of the model in `cfg.init`, to fine-tune: its manifest must match this build
/// (`Manifest::read`) and this config's `model` and `env`, or the weights would read other
/// candidates than they were trained on.
pub(crate) fn init_model(cfg: &TrainConfig, device: &Device) -> Result<Scorer, TrainError> {
    let dir = Path::new(&cfg.init);
    let manifest = Manifest::read(dir)?;
    let mismatch = |what: &str| {
        TrainError::Config(format!(
            "init: {}: the model was trained with another {what}; fine-tune with its own (the \
             `{what}` of its manifest.json)",
            dir.display()
        ))
    };
    if manifest.hidden != cfg.model.hidden {
        return Err(mismatch("model.hidden"));
    }
    if manifest.env != cfg.env {
        return Err(mismatch("env"));
    }
    let path = dir.join(WEIGHTS_FILE);
    fresh_model(cfg, device)
        .try_load_file(&path)
        .map_err(|e| TrainError::Io {
            path,
            message: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use lachesis_env::cluster::load_cluster;
    use lachesis_env::job::{JobKind, JobSpec, Qos, TaskRequest};
    use lachesis_env::units::{JobId, SimTime, TenantId};

    /// 160 one-GPU jobs arriving every `gap_s` on a 4-GPU node, with run times `run_s(i)`.
    fn units(gap_s: u64, run_s: impl Fn(usize) -> u64) -> Vec<EvalUnit> {
        let jobs: Vec<JobSpec> = (0..160)
            .map(|i| JobSpec {
                id: JobId(0),
                name: format!("j{i}"),
                submit: SimTime::from_secs(i as u64 * gap_s),
                tasks: 1,
                task: TaskRequest::whole(1, 1000, 1024),
                gpu_types: Vec::new(),
                tenant: TenantId(0),
                priority: 0,
                qos: Qos::LatencySensitive,
                preemptible: true,
                kind: JobKind::Training,
                estimate: None,
                workload: None,
                constraints: Default::default(),
                elastic: None,
            })
            .collect();
        let durations = (0..160).map(|i| SimTime::from_secs(run_s(i))).collect();
        let trace = Trace::new("constructed", jobs, durations, vec!["t".into()]).unwrap();
        vec![EvalUnit {
            trace: Arc::new(trace),
            cluster: Arc::new(load_cluster("1x4:V100").unwrap()),
            seed: 0,
            label: "constructed".into(),
            throughputs: None,
        }]
    }

    #[test]
    fn replay_picks_the_heuristic_that_wins_on_the_history() {
        let candidates: Vec<String> = ["tiresias/best-fit/las-preempt", "fifo/best-fit"]
            .map(String::from)
            .to_vec();
        // Run times alike (10 h, +-5%), a job every 2.6 h on 4 GPUs (load ~0.96): LAS's
        // preemption time-slices them, FIFO runs each to the end. FIFO must win.
        let alike = units(9_360, |i| 36_000 + (i as u64 * 7_919 % 3_600) - 1_800);
        let choice = select_teacher(&candidates, &alike, 600.0, 1).unwrap();
        assert_eq!(choice.chosen, "fifo/best-fit", "{:?}", choice.scores);
        // Heavy-tailed: every tenth job runs 40 h, the rest 5 min (mean ~4.1 h), a job every
        // 1.1 h: LAS lets the short jobs pass the long ones. LAS must win.
        let heavy = units(3_960, |i| if i % 10 == 3 { 144_000 } else { 300 });
        let choice = select_teacher(&candidates, &heavy, 600.0, 1).unwrap();
        assert_eq!(
            choice.chosen, "tiresias/best-fit/las-preempt",
            "{:?}",
            choice.scores
        );
        assert!(choice.scores.iter().all(|(_, s)| s.is_finite()));
    }
}
