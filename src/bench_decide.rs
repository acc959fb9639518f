//! `lachesis bench decide`: the model arm's decision in process, without gRPC or a second
//! process. The synthetic snapshots of `bench serve` are validated into the service's world,
//! then the model decides each, every way of deciding (and the heuristics asked for, by
//! default the service's baseline) side by side on the same snapshots.
//! Prints the median world build, the decision's median and p99, and per decision the model
//! passes, placements and preemptions: the transport-free part of `bench serve`'s model
//! scenarios, and where a faster decision path shows first.

use crate::bench_infer::percentile;
use anyhow::{Context, Result, bail, ensure};
use lachesis_agent::policy::load_scorer;
use lachesis_agent::{Deciding, LearnedPolicy, Manifest, Scorer};
use lachesis_env::policy::Policy;
use lachesis_serve::proto::Snapshot;
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
    /// Ways of deciding to run, comma-separated: stepwise, batched.
    #[arg(long, value_delimiter = ',', default_value = "stepwise,batched")]
    deciding: Vec<Deciding>,
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
    /// Also time the service's whole arm in process (`--engine-routing`, default the heuristic
    /// chain): the request's protobuf decoded, `Engine::decide` (world build, decision,
    /// shield, a reason for every job left pending, metrics), the answer encoded; `bench
    /// serve` minus gRPC.
    #[arg(long)]
    engine: bool,
    /// With `--engine`, also time this many session deltas per snapshot (each snapshot opens
    /// a session, untimed; `SessionDriver` makes the deltas); 0: none.
    #[arg(long, default_value_t = 50)]
    session_deltas: usize,
    /// With `--engine`, the arm timed: `baseline` (the heuristic chain) or `model` (the
    /// learned policy from `--model` as the service runs it: deadline, spare copy for the
    /// fallback, shield; a long deadline so every answer is the model's).
    #[arg(long, value_enum, default_value = "baseline")]
    engine_routing: EngineRouting,
}

/// The arm `--engine` times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum EngineRouting {
    Baseline,
    Model,
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
        .map(|d| Arm::Model(*d))
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
    let snapshots: Vec<(u64, Snapshot)> = (args.seed..args.seed + args.snapshots)
        .map(|seed| {
            let snapshot = synthetic::snapshot(args.nodes, args.pending, UTILIZATION, seed);
            (seed, snapshot)
        })
        .collect();
    for (seed, snapshot) in &snapshots {
        for _ in 0..args.repeats {
            // The arms take turns on each snapshot, so machine noise falls on all of them.
            for (arm, row) in arms.iter().zip(&mut rows) {
                let started = Instant::now();
                let world = World::build(snapshot)
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
    let engine = if args.engine {
        let model = match args.engine_routing {
            EngineRouting::Baseline => None,
            EngineRouting::Model => Some(args.model.as_path()),
        };
        let mut rows = vec![engine_row(&snapshots, args.repeats, 0, model)?];
        if args.session_deltas > 0 {
            rows.push(engine_row(&snapshots, 0, args.session_deltas, model)?);
        }
        rows
    } else {
        Vec::new()
    };
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
    for e in engine {
        e.print();
    }
    Ok(())
}

/// The heuristic arm's whole request path in process, stage by stage.
#[derive(Default)]
struct EngineRow {
    decode_ms: Vec<f64>,
    decide_ms: Vec<f64>,
    encode_ms: Vec<f64>,
    total_ms: Vec<f64>,
    request_bytes: usize,
    response_bytes: usize,
    placements: usize,
    decisions: usize,
    /// The arm timed: `baseline (CHAIN)` or `model (DIR)`.
    arm: String,
    /// What one timed request is.
    what: String,
}

impl EngineRow {
    fn print(&self) {
        let med = |v: &[f64]| {
            let mut v = v.to_vec();
            v.sort_by(f64::total_cmp);
            percentile(&v, 0.5)
        };
        let mut total = self.total_ms.clone();
        total.sort_by(f64::total_cmp);
        let n = self.decisions.max(1) as f64;
        outln!(
            "service engine, routing {}, in process, {}: request decoded, \
             Engine::decide, answer encoded; medians, ms; {} decisions",
            self.arm,
            self.what,
            self.decisions
        );
        outln!(
            "{:>10} {:>10} {:>10} {:>10} {:>10} {:>12} {:>12} {:>11}",
            "decode",
            "decide",
            "encode",
            "total_p50",
            "total_p99",
            "request_kB",
            "response_kB",
            "placements"
        );
        outln!(
            "{:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>12.1} {:>12.1} {:>11.1}",
            med(&self.decode_ms),
            med(&self.decide_ms),
            med(&self.encode_ms),
            percentile(&total, 0.5),
            percentile(&total, 0.99),
            self.request_bytes as f64 / n / 1e3,
            self.response_bytes as f64 / n / 1e3,
            self.placements as f64 / n
        );
    }
}

/// Times the service's heuristic arm (`Engine` with routing `baseline`, no model, no decision
/// log) on the same synthetic snapshots, from request bytes to answer bytes: each snapshot
/// `repeats` times whole, then (`deltas` > 0) a session opened on it, untimed, and `deltas`
/// deltas from `SessionDriver`.
fn engine_row(
    snapshots: &[(u64, Snapshot)],
    repeats: usize,
    deltas: usize,
    model: Option<&std::path::Path>,
) -> Result<EngineRow> {
    use lachesis_serve::config::RoutingMode;
    use lachesis_serve::proto::{DecideRequest, DecideResponse};
    use prost::Message;
    let defaults = lachesis_serve::ServeConfig::default();
    let cfg = lachesis_serve::ServeConfig {
        model: model.map(|m| m.display().to_string()).unwrap_or_default(),
        routing: lachesis_serve::config::RoutingConfig {
            mode: if model.is_some() {
                RoutingMode::Model
            } else {
                RoutingMode::Baseline
            },
            ..Default::default()
        },
        // Long enough that the chain never answers for the model (a fallback is an error
        // below), short of forever.
        deadline_ms: if model.is_some() {
            60_000.0
        } else {
            defaults.deadline_ms
        },
        ..defaults
    };
    let arm = match model {
        Some(m) => format!("model ({})", m.display()),
        None => format!("baseline ({})", cfg.baseline),
    };
    // Reserved up front: the process's memory then grows by a fixed 32 bytes a request (the
    // four timings, as pages are first touched), never in doubling steps, so a long
    // `--session-deltas` run can be read for growth of its own.
    let timed = snapshots.len() * repeats.max(deltas);
    let mut row = EngineRow {
        arm,
        what: if deltas > 0 {
            format!("sessions: each snapshot once, untimed, then {deltas} deltas")
        } else {
            "whole snapshots".into()
        },
        decode_ms: Vec::with_capacity(timed),
        decide_ms: Vec::with_capacity(timed),
        encode_ms: Vec::with_capacity(timed),
        total_ms: Vec::with_capacity(timed),
        ..EngineRow::default()
    };
    let metrics = std::sync::Arc::new(lachesis_serve::Metrics::new());
    let engine = std::sync::Arc::new(
        lachesis_serve::Engine::new(cfg, metrics).context("starting the service engine")?,
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("starting a tokio runtime")?;
    for (seed, snapshot) in snapshots {
        let session = format!("bench-{seed}");
        let mut driver = None;
        if deltas > 0 {
            let opened: DecideResponse = runtime
                .block_on(engine.decide(DecideRequest {
                    snapshot: Some(snapshot.clone()),
                    session: session.clone(),
                    ..Default::default()
                }))
                .map_err(|e| anyhow::anyhow!("snapshot {seed}: the engine refused: {e}"))?;
            let mut d = lachesis_serve::synthetic::SessionDriver::new(
                snapshot,
                snapshot.pending.len(),
                1_000,
                *seed,
            );
            d.answered(&opened);
            driver = Some(d);
        }
        let whole = DecideRequest {
            snapshot: Some(snapshot.clone()),
            ..Default::default()
        }
        .encode_to_vec();
        for _ in 0..repeats.max(deltas) {
            let delta_bytes;
            let bytes: &[u8] = match driver.as_mut() {
                Some(d) => {
                    delta_bytes = DecideRequest {
                        session: session.clone(),
                        delta: Some(d.delta()),
                        ..Default::default()
                    }
                    .encode_to_vec();
                    &delta_bytes
                }
                None => &whole,
            };
            let started = Instant::now();
            let request = DecideRequest::decode(bytes).context("decoding a synthetic request")?;
            let decoded = Instant::now();
            let response: DecideResponse = runtime
                .block_on(engine.decide(request))
                .map_err(|e| anyhow::anyhow!("snapshot {seed}: the engine refused: {e}"))?;
            let decided = Instant::now();
            if model.is_some() && !response.fallbacks.is_empty() {
                bail!(
                    "snapshot {seed}: the model did not answer (decided by {}): {:?}",
                    response.decided_by,
                    response.fallbacks
                );
            }
            let out = response.encode_to_vec();
            let done = Instant::now();
            row.decode_ms.push((decoded - started).as_secs_f64() * 1e3);
            row.decide_ms.push((decided - decoded).as_secs_f64() * 1e3);
            row.encode_ms.push((done - decided).as_secs_f64() * 1e3);
            row.total_ms.push((done - started).as_secs_f64() * 1e3);
            row.request_bytes += bytes.len();
            row.response_bytes += out.len();
            row.placements += response.placements.len();
            row.decisions += 1;
            if let Some(d) = driver.as_mut() {
                d.answered(&response);
            }
        }
    }
    Ok(row)
}
