//! `lachesis bench decide`: the model arm's decision in process, without gRPC or a second
//! process. The synthetic snapshots of `bench serve` are validated into the service's world,
//! then the model decides each, every way of deciding side by side on the same snapshots.
//! Prints the median world build, the decision's median and p99, and per decision the model
//! passes, placements and preemptions: the transport-free part of `bench serve`'s model
//! scenarios, and where a faster decision path shows first.

use crate::bench_infer::percentile;
use anyhow::{Context, Result, ensure};
use lachesis_agent::{Deciding, LearnedPolicy};
use lachesis_env::policy::Policy;
use lachesis_serve::synthetic;
use lachesis_serve::world::World;
use std::path::PathBuf;
use std::time::Instant;

/// Share of GPUs busy in the snapshots (as `bench serve`).
const UTILIZATION: f64 = 0.9;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Nodes per snapshot.
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    /// Pending jobs per snapshot.
    #[arg(long, default_value_t = 100)]
    pending: usize,
    /// Snapshots (seeds `seed..seed + snapshots`).
    #[arg(long, default_value_t = 8)]
    snapshots: u64,
    /// Decisions per snapshot and way of deciding (each by a fresh policy, as the service's
    /// pool lends one that has forgotten).
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Ways of deciding to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "stepwise,batched",
          value_parser = ["stepwise", "batched"])]
    deciding: Vec<String>,
    /// Model directory.
    #[arg(long, default_value = "models/default")]
    model: PathBuf,
    /// Seed of the first snapshot.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// What one way of deciding measured.
#[derive(Default)]
struct Row {
    build_ms: Vec<f64>,
    decide_ms: Vec<f64>,
    passes: u64,
    placements: usize,
    preemptions: usize,
    decisions: usize,
}

fn deciding(name: &str) -> Deciding {
    match name {
        "batched" => Deciding::Batched,
        _ => Deciding::Stepwise,
    }
}

pub fn run(args: &Args) -> Result<()> {
    ensure!(
        args.nodes > 0 && args.snapshots > 0 && args.repeats > 0,
        "--nodes, --snapshots and --repeats must be at least 1"
    );
    ensure!(
        !args.deciding.is_empty(),
        "--deciding names no way of deciding"
    );
    // Load once up front, so a bad model directory is reported before any timing.
    let template = LearnedPolicy::load(&args.model, "model")
        .with_context(|| format!("loading the model at {}", args.model.display()))?;
    drop(template);
    let mut rows: Vec<Row> = args.deciding.iter().map(|_| Row::default()).collect();
    for seed in args.seed..args.seed + args.snapshots {
        let snapshot = synthetic::snapshot(args.nodes, args.pending, UTILIZATION, seed);
        for _ in 0..args.repeats {
            // The ways take turns on each snapshot, so machine noise falls on all of them.
            for (name, row) in args.deciding.iter().zip(&mut rows) {
                let started = Instant::now();
                let world = World::build(&snapshot)
                    .map_err(|e| anyhow::anyhow!("synthetic snapshot {seed}: {e}"))?;
                row.build_ms.push(started.elapsed().as_secs_f64() * 1e3);
                let mut policy = LearnedPolicy::load(&args.model, "model")
                    .with_context(|| format!("loading the model at {}", args.model.display()))?
                    .deciding(deciding(name));
                let started = Instant::now();
                let decision = policy
                    .decide(&world.context())
                    .map_err(|e| anyhow::anyhow!("snapshot {seed}, {name}: {e}"))?;
                row.decide_ms.push(started.elapsed().as_secs_f64() * 1e3);
                row.passes += policy.passes();
                row.placements += decision.placements.len();
                row.preemptions += decision.preemptions.len();
                row.decisions += 1;
            }
        }
    }
    outln!(
        "model {} in process on synthetic snapshots of {} nodes ({}% of GPUs busy) and {} \
         pending jobs, seeds {}..{}, {} decision(s) each; medians and nearest-rank p99, ms; \
         per decision: model passes, placements, preemptions",
        args.model.display(),
        args.nodes,
        UTILIZATION * 100.0,
        args.pending,
        args.seed,
        args.seed + args.snapshots - 1,
        args.repeats
    );
    outln!(
        "{:<10} {:>9} {:>10} {:>10} {:>8} {:>11} {:>12}",
        "deciding",
        "build_ms",
        "decide_p50",
        "decide_p99",
        "passes",
        "placements",
        "preemptions"
    );
    for (name, row) in args.deciding.iter().zip(&mut rows) {
        row.build_ms.sort_by(f64::total_cmp);
        row.decide_ms.sort_by(f64::total_cmp);
        let per = |x: f64| x / row.decisions.max(1) as f64;
        outln!(
            "{:<10} {:>9.2} {:>10.2} {:>10.2} {:>8.1} {:>11.1} {:>12.1}",
            name,
            percentile(&row.build_ms, 0.5),
            percentile(&row.decide_ms, 0.5),
            percentile(&row.decide_ms, 0.99),
            per(row.passes as f64),
            per(row.placements as f64),
            per(row.preemptions as f64)
        );
    }
    Ok(())
}
