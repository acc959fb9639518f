//! Greedy evaluation on validation units: every policy on the same windows, loads and seeds.

use crate::manifest::ValidationRow;
use lachesis_env::cluster::ClusterSpec;
use lachesis_env::job::Trace;
use lachesis_env::metrics::Summary;
use lachesis_env::policy::{Policy, PolicyOptions, build_policy_with};
use lachesis_env::sim::{SimConfig, Simulator};
use lachesis_env::throughput::{ThroughputTable, load_table};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One validation run: a window (already scaled to its load) on a cluster with a seed.
#[derive(Debug, Clone)]
pub struct EvalUnit {
    pub trace: Arc<Trace>,
    pub cluster: Arc<ClusterSpec>,
    pub seed: u64,
    pub label: String,
    /// The throughput table typed jobs run at (`None`: untyped).
    pub throughputs: Option<Arc<Throughputs>>,
}

/// Builds a fresh policy for a unit (the unit's table for the heuristics that read one).
pub type PolicyBuilder<'a> = dyn Fn(&EvalUnit) -> Result<Box<dyn Policy>, String> + Sync + 'a;

/// A throughput table as configured (`gavel`, `sia` or a file) and loaded once.
#[derive(Debug)]
pub struct Throughputs {
    pub spec: String,
    pub table: Arc<ThroughputTable>,
}

impl Throughputs {
    pub fn load(spec: &str) -> Result<Throughputs, String> {
        let table = load_table(spec).map_err(|e| format!("throughputs {spec}: {e}"))?;
        Ok(Throughputs {
            spec: spec.to_string(),
            table: Arc::new(table),
        })
    }
}

/// The heuristic `name` as it runs with `throughputs` (the parts that read rates need it).
pub fn heuristic(
    name: &str,
    throughputs: Option<&Arc<Throughputs>>,
) -> Result<Box<dyn Policy>, String> {
    let options = PolicyOptions {
        throughputs: throughputs.map(|t| Arc::clone(&t.table)),
        ..PolicyOptions::default()
    };
    build_policy_with(name, &options).map_err(|e| e.to_string())
}

/// What one unit measured.
#[derive(Debug, Clone)]
pub struct UnitResult {
    pub summary: Summary,
}

/// Runs a fresh policy from `build` on every unit, on up to `threads` threads; results in
/// unit order.
pub fn evaluate(
    units: &[EvalUnit],
    build: &PolicyBuilder<'_>,
    tick_s: f64,
    threads: usize,
) -> Result<Vec<UnitResult>, String> {
    let next = AtomicUsize::new(0);
    let threads = threads.clamp(1, units.len().max(1));
    let mut results: Vec<(usize, Result<UnitResult, String>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(unit) = units.get(i) else { break };
                        done.push((i, run_unit(unit, build, tick_s)));
                    }
                    done
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_default())
            .collect()
    });
    if results.len() != units.len() {
        return Err("an evaluation worker panicked".into());
    }
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, r)| r).collect()
}

fn run_unit(unit: &EvalUnit, build: &PolicyBuilder<'_>, tick_s: f64) -> Result<UnitResult, String> {
    let cfg = SimConfig {
        seed: unit.seed,
        tick_s,
        skip_unplaceable: true,
        record_timeline: false,
        throughputs: unit.throughputs.as_ref().map(|t| t.spec.clone()),
        ..SimConfig::default()
    };
    let mut policy = build(unit)?;
    let sim = Simulator::new(&unit.trace, Arc::clone(&unit.cluster), &cfg)
        .map_err(|e| format!("{}: {e}", unit.label))?;
    let r = sim.run(policy.as_mut(), &mut |_| {});
    if r.summary.policy_errors > 0 {
        return Err(format!(
            "{}: policy {} failed {} times",
            unit.label,
            policy.name(),
            r.summary.policy_errors
        ));
    }
    Ok(UnitResult { summary: r.summary })
}

/// Means over units, a row per policy.
pub fn validation_table(rows: &[(String, Vec<UnitResult>)]) -> Vec<ValidationRow> {
    rows.iter()
        .map(|(policy, results)| {
            let mean = |f: fn(&Summary) -> f64| {
                lachesis_env::metrics::mean(
                    &results.iter().map(|r| f(&r.summary)).collect::<Vec<_>>(),
                )
            };
            ValidationRow {
                policy: policy.clone(),
                avg_jct_s: mean(|s| s.avg_jct_s),
                p99_jct_s: mean(|s| s.p99_jct_s),
                gpu_alloc: mean(|s| s.gpu_alloc_rate),
                frag: mean(|s| s.frag_gpu_rate),
                unfinished: results
                    .iter()
                    .map(|r| r.summary.jobs.saturating_sub(r.summary.finished))
                    .sum(),
                units: results.len(),
            }
        })
        .collect()
}

/// The score the best checkpoint is chosen by: the geometric mean over units of the policy's
/// average JCT over the reference's on the same unit (lower is better; 1 = as good as the
/// reference). Units where either is 0 are skipped. Infinite when the policy left any job
/// unfinished on a unit where the reference finished them all: average JCT over finished jobs
/// would reward starving the long ones.
pub fn relative_jct(results: &[UnitResult], reference: &[UnitResult]) -> f64 {
    let starved = results
        .iter()
        .zip(reference)
        .any(|(a, b)| a.summary.finished < a.summary.jobs && b.summary.finished >= b.summary.jobs);
    if starved {
        return f64::INFINITY;
    }
    let logs: Vec<f64> = results
        .iter()
        .zip(reference)
        .filter(|(a, b)| a.summary.avg_jct_s > 0.0 && b.summary.avg_jct_s > 0.0)
        .map(|(a, b)| (a.summary.avg_jct_s / b.summary.avg_jct_s).ln())
        .collect();
    if logs.is_empty() {
        1.0
    } else {
        (logs.iter().sum::<f64>() / logs.len() as f64).exp()
    }
}
