//! `lachesis bench decide`: the model arm's decision in process, without gRPC or a second
//! process. The synthetic snapshots of `bench serve` are validated into the service's world,
//! then the model decides each, every way of deciding (and the heuristics asked for, by
//! default the service's baseline) side by side on the same snapshots.
//! Prints the median world build, the decision's median and p99, and per decision the model
//! passes, placements and preemptions: the transport-free part of `bench serve`'s model
//! scenarios, and where a faster decision path shows first.

use crate::bench_infer::percentile;
use anyhow::{Context, Result, ensure};
use lachesis_agent::policy::load_scorer;
use lachesis_agent::{Deciding, LearnedPolicy, Manifest, Scorer};
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
    /// Heuristics to time beside the model, comma-separated (default: the service's
    /// baseline); `--heuristics ''` for none.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "tiresias/best-fit/las-preempt"
    )]
    heuristics: Vec<String>,
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
    /// Model passes (the model's rows only).
    passes: Option<u64>,
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

/// One row of the table: the model deciding one way, or a heuristic.
enum Arm {
    Model(Deciding),
    Heuristic(String),
}

impl Arm {
    fn label(&self) -> &str {
        match self {
            Arm::Model(d) => d.as_str(),
            Arm::Heuristic(name) => name,
        }
    }

    /// A fresh policy, as the service lends one per decision (the model's from weights
    /// loaded once).
    fn policy(&self, model: &Model) -> Result<Lent> {
        Ok(match self {
            Arm::Model(d) => Lent::Model(Box::new(
                LearnedPolicy::new("model", &model.scorer, &model.manifest.env).deciding(*d),
            )),
            Arm::Heuristic(name) => Lent::Heuristic(
                lachesis_env::policy::build_policy(name, 1)
                    .map_err(|e| anyhow::anyhow!("--heuristics {name}: {e}"))?,
            ),
        })
    }
}

/// The model directory, read once.
struct Model {
    scorer: Scorer,
    manifest: Manifest,
}

/// A policy for one decision; the model's counts its passes.
enum Lent {
    Model(Box<LearnedPolicy>),
    Heuristic(Box<dyn Policy>),
}

impl Lent {
    fn policy(&mut self) -> &mut dyn Policy {
        match self {
            Lent::Model(p) => p.as_mut(),
            Lent::Heuristic(p) => p.as_mut(),
        }
    }
    fn passes(&self) -> Option<u64> {
        match self {
            Lent::Model(p) => Some(p.passes()),
            Lent::Heuristic(_) => None,
        }
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
    // Read once up front, so a bad model directory is reported before any timing.
    let loading = || format!("loading the model at {}", args.model.display());
    let manifest = Manifest::read(&args.model).with_context(loading)?;
    let scorer = load_scorer(&args.model, &manifest).with_context(loading)?;
    let model = Model { scorer, manifest };
    let arms: Vec<Arm> = args
        .deciding
        .iter()
        .map(|d| Arm::Model(deciding(d)))
        .chain(
            args.heuristics
                .iter()
                .filter(|h| !h.trim().is_empty())
                .map(|h| Arm::Heuristic(h.trim().to_string())),
        )
        .collect();
    for arm in &arms {
        arm.policy(&model)?;
    }
    let mut rows: Vec<Row> = arms.iter().map(|_| Row::default()).collect();
    for seed in args.seed..args.seed + args.snapshots {
        let snapshot = synthetic::snapshot(args.nodes, args.pending, UTILIZATION, seed);
        for _ in 0..args.repeats {
            // The arms take turns on each snapshot, so machine noise falls on all of them.
            for (arm, row) in arms.iter().zip(&mut rows) {
                let started = Instant::now();
                let world = World::build(&snapshot)
                    .map_err(|e| anyhow::anyhow!("synthetic snapshot {seed}: {e}"))?;
                row.build_ms.push(started.elapsed().as_secs_f64() * 1e3);
                let mut policy = arm.policy(&model)?;
                let started = Instant::now();
                let decision = policy
                    .policy()
                    .decide(&world.context())
                    .map_err(|e| anyhow::anyhow!("snapshot {seed}, {}: {e}", arm.label()))?;
                row.decide_ms.push(started.elapsed().as_secs_f64() * 1e3);
                row.placements += decision.placements.len();
                row.preemptions += decision.preemptions.len();
                row.decisions += 1;
                if let Some(p) = policy.passes() {
                    row.passes = Some(row.passes.unwrap_or(0) + p);
                }
            }
        }
    }
    outln!(
        "model {} in process on synthetic snapshots of {} nodes ({}% of GPUs busy) and {} \
         pending jobs, seeds {}..{}, {} decision(s) each; medians and nearest-rank p99, ms; \
         per decision: model passes, placements, preemptions; each decision by a fresh \
         policy on a freshly built world",
        args.model.display(),
        args.nodes,
        UTILIZATION * 100.0,
        args.pending,
        args.seed,
        args.seed + args.snapshots - 1,
        args.repeats
    );
    let width = arms
        .iter()
        .map(|a| a.label().len())
        .max()
        .unwrap_or(8)
        .max(8);
    outln!(
        "{:<width$} {:>9} {:>10} {:>10} {:>8} {:>11} {:>12}",
        "policy",
        "build_ms",
        "decide_p50",
        "decide_p99",
        "passes",
        "placements",
        "preemptions"
    );
    for (arm, row) in arms.iter().zip(&mut rows) {
        row.build_ms.sort_by(f64::total_cmp);
        row.decide_ms.sort_by(f64::total_cmp);
        let per = |x: f64| x / row.decisions.max(1) as f64;
        let passes = row
            .passes
            .map_or_else(|| "-".to_string(), |p| format!("{:.1}", per(p as f64)));
        outln!(
            "{:<width$} {:>9.2} {:>10.2} {:>10.2} {:>8} {:>11.1} {:>12.1}",
            arm.label(),
            percentile(&row.build_ms, 0.5),
            percentile(&row.decide_ms, 0.5),
            percentile(&row.decide_ms, 0.99),
            passes,
            per(row.placements as f64),
            per(row.preemptions as f64)
        );
    }
    Ok(())
}
