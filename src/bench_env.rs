//! `lachesis bench env`: steps per second of the gym environment on windows of a trace, one
//! `SchedEnv` on one core under two cheap action rules, then a `VecEnv` on threads. Prints
//! medians over repeats and the ratios to the target and to RLScheduler's environment.

use anyhow::{Context, Result, ensure};
use lachesis_agent::harness::{load_trace, resolve_cluster};
use lachesis_env::cluster::ClusterSpec;
use lachesis_env::gym::rollout::{Rule, play};
use lachesis_env::gym::{EnvConfig, VecEnv, window_pool};
use lachesis_env::job::Trace;
use lachesis_env::sim::scale_to_load;
use rand::SeedableRng;
use rand::rngs::StdRng;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// The target for one core, steps per second.
const TARGET_STEPS_PER_S: f64 = 200_000.0;
/// RLScheduler's Python environment (about 2,900 steps per second).
const RLSCHEDULER_STEPS_PER_S: f64 = 2_900.0;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Trace whose windows are the episodes (default: the bundled ITP cluster 10, as `compare`).
    #[arg(long, default_value = "traces/itp/cluster10.csv")]
    trace: PathBuf,
    /// Cluster: preset, shape, TOML file, or auto[:G:MODEL@LOAD] sized from the whole trace.
    #[arg(long, default_value = "auto")]
    cluster: String,
    /// Jobs per episode window.
    #[arg(long, default_value_t = 256)]
    window_jobs: usize,
    /// Scale each window's arrivals to this offered load (default: the trace's own).
    #[arg(long)]
    load: Option<f64>,
    /// Episodes (seeded random windows) per repeat and rule.
    #[arg(long, default_value_t = 8)]
    episodes: usize,
    /// Timed repeats; the median is printed.
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Threads of the `VecEnv` measurement, also run on one thread (0 skips both).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Environments of the `VecEnv`.
    #[arg(long, default_value_t = 8)]
    envs: usize,
    /// Seed of the windows and of the random rule.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// The median and the largest of `rates` (the best repeat: the least disturbed by neighbours).
fn median_best(mut rates: Vec<f64>) -> (f64, f64) {
    rates.sort_by(f64::total_cmp);
    (rates[rates.len() / 2], rates[rates.len() - 1])
}

fn ratios(rate: f64) -> String {
    format!(
        "{:.3}x the 200k target, {:.1}x RLScheduler's 2.9k",
        rate / TARGET_STEPS_PER_S,
        rate / RLSCHEDULER_STEPS_PER_S
    )
}

pub fn run(args: &Args) -> Result<()> {
    ensure!(
        args.episodes > 0 && args.repeats > 0 && args.envs > 0,
        "--episodes, --repeats and --envs must be at least 1"
    );
    let trace = load_trace(&args.trace, None)?;
    let spec = Arc::new(resolve_cluster(&args.cluster, &trace)?);
    let mut pool =
        window_pool(&trace, args.window_jobs, args.episodes, args.seed).with_context(|| {
            format!(
                "{}-job windows of {}",
                args.window_jobs,
                args.trace.display()
            )
        })?;
    if let Some(load) = args.load {
        pool = pool
            .iter()
            .map(|w| scale_to_load(w, &spec, load))
            .collect::<Result<_, _>>()
            .with_context(|| format!("--load {load}"))?;
    }
    let mut cfg = EnvConfig::default();
    cfg.sim.skip_unplaceable = true;
    outln!(
        "{}: {} episodes of {}-job windows (load {}) on {} ({} nodes, {} GPUs); \
         {} proposers x {} jobs considered; one core",
        args.trace.display(),
        pool.len(),
        args.window_jobs,
        args.load
            .map_or_else(|| "as traced".to_string(), |l| l.to_string()),
        spec.name,
        spec.nodes.len(),
        spec.total_gpus(),
        cfg.proposers.len(),
        cfg.jobs_considered
    );
    let mut single = 0.0;
    for rule in [Rule::FirstLegal, Rule::Random] {
        let seen = play(&pool, &spec, &cfg, rule, args.seed, true)?;
        let mut rates = Vec::with_capacity(args.repeats);
        for _ in 0..args.repeats {
            let started = Instant::now();
            let t = play(&pool, &spec, &cfg, rule, args.seed, false)?;
            rates.push(t.steps as f64 / started.elapsed().as_secs_f64());
        }
        let (rate, best) = median_best(rates);
        if matches!(rule, Rule::FirstLegal) {
            single = rate;
        }
        outln!(
            "SchedEnv {:<12} {:>8.0} steps/s (median of {}; best {:.0}), {} steps/episode, \
             {:.1} candidates/step, obs checksum {:016x}; {}",
            rule.name(),
            rate,
            args.repeats,
            best,
            seen.steps / seen.episodes,
            seen.candidates as f64 / seen.steps as f64,
            seen.checksum,
            ratios(rate)
        );
    }
    let mut threads = vec![1, args.threads];
    threads.dedup();
    for threads in threads.into_iter().filter(|t| *t > 0 && args.threads > 0) {
        let (rate, best) = vec_rate(&pool, &spec, &cfg, args, threads)?;
        outln!(
            "VecEnv {} envs on {} thread(s): {:>8.0} steps/s (median of {}; best {:.0}), \
             {:.2}x one SchedEnv",
            args.envs,
            threads,
            rate,
            args.repeats,
            best,
            rate / single
        );
    }
    Ok(())
}

/// Env steps per second of a `VecEnv` of `args.envs` environments on `threads` threads under
/// the first-legal rule, auto-resetting over the pool; about as many steps per repeat as the
/// single-env runs. `VecEnv::step` clones every observation and spawns its threads anew.
fn vec_rate(
    pool: &[Trace],
    spec: &Arc<ClusterSpec>,
    cfg: &EnvConfig,
    args: &Args,
    threads: usize,
) -> Result<(f64, f64)> {
    let envs = args.envs.max(1);
    let per_env = play(pool, spec, cfg, Rule::FirstLegal, args.seed, false)?.steps / envs as u64;
    let mut venv =
        VecEnv::new(pool, Arc::clone(spec), cfg.clone(), envs, args.seed)?.with_threads(threads);
    let mut rng = StdRng::seed_from_u64(args.seed);
    let mut obs = venv.reset()?;
    let mut rates = Vec::with_capacity(args.repeats);
    for _ in 0..args.repeats {
        let started = Instant::now();
        for _ in 0..per_env.max(1) {
            let actions: Vec<usize> = obs
                .iter()
                .map(|o| Rule::FirstLegal.act(o, &mut rng))
                .collect();
            obs = venv.step(&actions)?.obs;
        }
        rates.push((per_env.max(1) * envs as u64) as f64 / started.elapsed().as_secs_f64());
    }
    Ok(median_best(rates))
}
