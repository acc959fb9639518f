//! `lachesis bench fork`: what lookahead pays to look ahead (issue #43, point 3). A world of
//! JOBS synthetic jobs on NODES nodes of 8 V100s at offered load LOAD is run under
//! `fifo/best-fit` to the decision point where half its jobs have arrived; there it is forked
//! again and again: forks per second of the run as it is (`Simulator::fork`, what the
//! improvement labels use), of the run onto a sampled future (a future's trace and fork,
//! what `select` does per candidate), and rollout events per second of `fifo/best-fit`
//! rolled 1 h ahead on such futures. Target: 10,000 forks per second of a 1,000-job,
//! 100-node world. The checksum (events of the rollouts) is the same from run to run.

use anyhow::{Result, ensure};
use lachesis_env::cluster::load_cluster;
use lachesis_env::gym::PredictedDurations;
use lachesis_env::policy::lookahead::{Future, Lookahead};
use lachesis_env::policy::{build_policy, sample_arrivals, sample_durations};
use lachesis_env::sim::{SimConfig, Simulator};
use lachesis_env::trace::synthetic::synthetic_trace;
use lachesis_env::units::SimTime;
use rand::SeedableRng;
use rand::rngs::StdRng;
use std::sync::Arc;
use std::time::Instant;

/// The target for the first measure.
const TARGET_FORKS_PER_S: f64 = 10_000.0;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Jobs of the synthetic world.
    #[arg(long, default_value_t = 1000)]
    jobs: usize,
    /// Nodes of 8 V100s.
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    /// Offered load of the synthetic jobs.
    #[arg(long, default_value_t = 1.2)]
    load: f64,
    /// Timed rounds of each measure; the median is printed.
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Forks (or rollouts) per round.
    #[arg(long, default_value_t = 200)]
    forks: usize,
}

/// The median of `xs` (sorted here).
fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

pub fn run(args: &Args) -> Result<()> {
    ensure!(args.jobs >= 2, "--jobs: give at least 2");
    ensure!(args.nodes >= 1, "--nodes: give at least 1");
    ensure!(
        args.repeats >= 1 && args.forks >= 1,
        "--repeats and --forks: at least 1"
    );
    let spec = Arc::new(load_cluster(&format!("{}x8:V100", args.nodes))?);
    let trace = synthetic_trace(args.jobs, &spec, args.load, 1);
    let cfg = SimConfig::default();
    let mut sim = Simulator::new(&trace, Arc::clone(&spec), &cfg)?;
    let mut policy = build_policy("fifo/best-fit", 0)?;
    // To the first decision point with half the jobs arrived.
    while sim.advance() {
        if Lookahead::arrived(&sim) >= args.jobs / 2 {
            break;
        }
        let d = policy.decide(&sim.context())?;
        sim.apply(&d);
    }
    let arrived = Lookahead::arrived(&sim);
    let ctx = sim.context();
    let running = ctx.cluster().running().count();
    println!(
        "world: {} jobs on {} nodes, at {:.0} s: {arrived} arrived, {} waiting, {running} running",
        args.jobs,
        args.nodes,
        sim.now().secs_f64(),
        ctx.pending_len()
    );
    let mut durations = PredictedDurations::censored(PredictedDurations::DEFAULT_PRIOR_MEAN_S);
    durations.observe(&ctx, ctx.cluster().running().map(|a| a.job));
    let horizon_s = 3600.0;
    let horizon = SimTime::from_secs(3600);
    let mut rng = StdRng::seed_from_u64(7);
    let futures: Vec<Future> = (0..args.forks)
        .map(|_| Future {
            durations: sample_durations(&ctx, arrived, &durations, &mut rng),
            arrivals: sample_arrivals(&ctx, arrived, 500, horizon_s, &durations, &mut rng),
        })
        .collect();

    let same = trace.clone();
    let mut plain = Vec::new();
    let mut onto = Vec::new();
    let mut rolled = Vec::new();
    let mut checksum = 0u64;
    for _ in 0..args.repeats {
        let t = Instant::now();
        for _ in 0..args.forks {
            std::hint::black_box(sim.fork(&same, Some(horizon))?);
        }
        plain.push(args.forks as f64 / t.elapsed().as_secs_f64());

        let t = Instant::now();
        for f in &futures {
            let ft = sim.future_trace(f)?;
            std::hint::black_box(&ft);
        }
        onto.push(args.forks as f64 / t.elapsed().as_secs_f64());

        let t = Instant::now();
        let mut events = 0u64;
        for f in &futures {
            let mut ps = vec![build_policy("fifo/best-fit", 0)?];
            for r in sim.rollouts(f, &mut ps, horizon)? {
                events += r?.events;
            }
        }
        rolled.push(events as f64 / t.elapsed().as_secs_f64());
        checksum = events;
    }
    let forks = median(plain);
    println!(
        "fork (the run as it is):          {forks:>12.0} forks/s (target {TARGET_FORKS_PER_S:.0}: {})",
        if forks >= TARGET_FORKS_PER_S {
            "met"
        } else {
            "not met"
        }
    );
    println!(
        "future trace (select, per future): {:>12.0} traces/s",
        median(onto)
    );
    println!(
        "rollouts, fifo/best-fit 1 h ahead: {:>12.0} events/s ({} futures; checksum {checksum} events)",
        median(rolled),
        args.forks
    );
    Ok(())
}
