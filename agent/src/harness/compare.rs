//! Every policy on identical windows, loads and seeds, with paired differences against a
//! baseline (bootstrap 95% intervals), wins and losses, and a one-line verdict; the terminal
//! table of `lachesis compare` (`terminal_table`). `report` writes the files.

use super::HarnessError;
use super::registry::{policy_options, wants_tick_s};
use lachesis_env::cluster::ClusterSpec;
use lachesis_env::job::Trace;
use lachesis_env::metrics::paired::{Better, Paired, captured_share, paired};
use lachesis_env::metrics::{Summary, TimelineRow};
use lachesis_env::policy::{Policy, PolicyConfig, PolicyError, PolicyOptions, StarvationBound};
use lachesis_env::sim::{SimConfig, Simulator, scale_to_load};
use lachesis_env::trace::split::random_windows;
use lachesis_env::units::SimTime;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Builds a policy by name for one run (`registry::build`, or a caller's own policies first).
pub type BuildPolicy<'a> =
    dyn Fn(&str, &PolicyOptions) -> Result<Box<dyn Policy>, PolicyError> + Sync + 'a;

/// `policy_options` with the comparison's throughput table, for the parts that read rates
/// (`colocate`, `elastic`).
fn options_with_table(
    trace: &Trace,
    seed: u64,
    spec: &CompareSpec,
) -> Result<PolicyOptions, HarnessError> {
    let mut options = policy_options(trace, seed, &spec.policy_config);
    if let Some(table) = &spec.throughputs {
        let loaded = lachesis_env::throughput::load_table(table)
            .map_err(|e| HarnessError::Invalid(format!("throughputs {table}: {e}")))?;
        options.throughputs = Some(Arc::new(loaded));
    }
    Ok(options)
}

/// What to compare: the policies, the units (windows x loads x seeds) and the statistics.
#[derive(Debug, Clone)]
pub struct CompareSpec {
    /// Policy names, as `build` takes them.
    pub policies: Vec<String>,
    /// The policy the others are compared against (default: the first).
    pub baseline: Option<String>,
    /// Seeds per window and load (at least 1).
    pub seeds: u64,
    /// Random windows of the trace (0 = the whole trace once).
    pub windows: usize,
    /// Jobs per window.
    pub window_jobs: usize,
    /// Offered loads to scale each window to (`None` keeps the trace's own).
    pub loads: Vec<Option<f64>>,
    /// Periodic decision tick, seconds (default: what the policies want, `wants_tick_s`).
    pub tick_s: Option<f64>,
    /// Policy knobs.
    pub policy_config: PolicyConfig,
    /// Worker threads (default: all cores).
    pub threads: Option<usize>,
    /// Bootstrap resamples per interval.
    pub resamples: usize,
    /// Throughput table for typed jobs (`SimConfig::throughputs`).
    pub throughputs: Option<String>,
    /// The starvation bound below every policy (`SimConfig::starvation_bound`).
    pub starvation_bound: StarvationBound,
    /// Quotas below every policy (`SimConfig::quotas`: a quota file or `equal`); `None`:
    /// none.
    pub quotas: Option<String>,
    /// How often running jobs checkpoint, seconds, for every policy
    /// (`SimConfig::checkpoint_interval_s`; `None`: the simulator's default, 30 min).
    pub checkpoint_s: Option<f64>,
    /// The command line that asked for it (for the report's header).
    pub command: String,
}

impl Default for CompareSpec {
    /// `lachesis compare`'s defaults (its policies aside).
    fn default() -> Self {
        CompareSpec {
            policies: Vec::new(),
            baseline: None,
            seeds: 1,
            windows: 12,
            window_jobs: 150,
            loads: vec![Some(0.8), Some(1.0), Some(1.2)],
            tick_s: None,
            policy_config: PolicyConfig::default(),
            threads: None,
            resamples: 2000,
            throughputs: None,
            starvation_bound: StarvationBound::Auto,
            quotas: None,
            checkpoint_s: None,
            command: String::new(),
        }
    }
}

/// A finished comparison: what `report::write` and the terminal table show.
#[derive(Debug)]
pub struct Comparison {
    pub setup: Setup,
    /// Unit-major, then policy (`runs[u * policies + p]`).
    pub units: Vec<Unit>,
    pub runs: Vec<Run>,
    /// One per metric of `METRICS`, then of `TYPED_METRICS` when some run had typed jobs
    /// on a throughput table ([`metrics_of`]), in that order.
    pub metrics: Vec<MetricReport>,
}

/// One metric of the report.
#[derive(Debug)]
pub struct Metric {
    pub key: &'static str,
    pub label: &'static str,
    pub better: Better,
    pub get: fn(&Summary) -> f64,
}

/// Every metric of the report, in its order.
pub const METRICS: &[Metric] = &[
    Metric {
        key: "avg_jct_s",
        label: "avg JCT (s)",
        better: Better::Lower,
        get: |s| s.avg_jct_s,
    },
    Metric {
        key: "min_avg_jct_s",
        label: "avg JCT lower bound (s)",
        better: Better::Lower,
        get: |s| s.min_avg_jct_s,
    },
    Metric {
        key: "reducible_jct_pct",
        label: "reducible avg JCT (%)",
        better: Better::Lower,
        get: reducible_jct_pct,
    },
    Metric {
        key: "p50_jct_s",
        label: "median JCT (s)",
        better: Better::Lower,
        get: |s| s.p50_jct_s,
    },
    Metric {
        key: "p95_jct_s",
        label: "p95 JCT (s)",
        better: Better::Lower,
        get: |s| s.p95_jct_s,
    },
    Metric {
        key: "p99_jct_s",
        label: "p99 JCT (s)",
        better: Better::Lower,
        get: |s| s.p99_jct_s,
    },
    Metric {
        key: "avg_wait_s",
        label: "avg wait (s)",
        better: Better::Lower,
        get: |s| s.avg_wait_s,
    },
    Metric {
        key: "p999_wait_s",
        label: "p99.9 wait (s)",
        better: Better::Lower,
        get: |s| s.p999_wait_s,
    },
    Metric {
        key: "max_wait_s",
        label: "max wait (s)",
        better: Better::Lower,
        get: |s| s.max_wait_s,
    },
    Metric {
        key: "avg_bsld",
        label: "avg bounded slowdown",
        better: Better::Lower,
        get: |s| s.avg_bsld,
    },
    Metric {
        key: "makespan_s",
        label: "makespan (s)",
        better: Better::Lower,
        get: |s| s.makespan_s,
    },
    Metric {
        key: "gpu_alloc_rate",
        label: "GPU allocation rate",
        better: Better::Higher,
        get: |s| s.gpu_alloc_rate,
    },
    Metric {
        key: "frag_gpu_rate",
        label: "GPU fragmentation rate",
        better: Better::Lower,
        get: |s| s.frag_gpu_rate,
    },
    Metric {
        key: "energy_kwh",
        label: "energy (kWh)",
        better: Better::Lower,
        get: |s| s.energy_kwh,
    },
    Metric {
        key: "jain_fairness",
        label: "tenant fairness (Jain)",
        better: Better::Higher,
        get: |s| s.jain_fairness,
    },
    Metric {
        key: "preemption_waste_gpu_h",
        label: "preemption waste (GPU-h)",
        better: Better::Lower,
        get: |s| s.preemption_waste_gpu_h,
    },
];

/// The metrics of runs with a throughput table (`Summary::effective_throughput`,
/// `Summary::fastest_gpu_share`, and the counts of GPU shares and resizes), reported after
/// `METRICS` only when some run has them.
pub const TYPED_METRICS: &[Metric] = &[
    Metric {
        key: "effective_throughput",
        label: "effective throughput (ref. GPU-h per GPU-h)",
        better: Better::Higher,
        get: |s| s.effective_throughput.unwrap_or(0.0),
    },
    Metric {
        key: "fastest_gpu_share",
        label: "GPU-time on fastest model",
        better: Better::Higher,
        get: |s| s.fastest_gpu_share.unwrap_or(0.0),
    },
    Metric {
        key: "shares",
        label: "GPU shares started",
        better: Better::Neither,
        get: |s| s.shares as f64,
    },
    Metric {
        key: "resizes",
        label: "elastic resizes",
        better: Better::Neither,
        get: |s| s.resizes as f64,
    },
];

/// The metrics of runs with quotas (`Summary::quota_metrics`, docs/quotas.md), reported
/// after the others only when some run has them.
pub const QUOTA_METRICS: &[Metric] = &[
    Metric {
        key: "guarantee_violation_h",
        label: "guarantee violation (queue-h)",
        better: Better::Lower,
        get: |s| {
            s.quota_metrics
                .as_ref()
                .map_or(0.0, |m| m.guarantee_violation_h)
        },
    },
    Metric {
        key: "borrowed_gpu_h",
        label: "borrowed GPU-h",
        better: Better::Neither,
        get: |s| s.quota_metrics.as_ref().map_or(0.0, |m| m.borrowed_gpu_h),
    },
    Metric {
        key: "quota_preemptions",
        label: "quota preemptions",
        better: Better::Neither,
        get: |s| {
            s.quota_metrics
                .as_ref()
                .map_or(0.0, |m| m.quota_preemptions as f64)
        },
    },
    Metric {
        key: "preemptions_per_admission",
        label: "preemptions per admission",
        better: Better::Lower,
        get: |s| {
            s.quota_metrics
                .as_ref()
                .map_or(0.0, |m| m.preemptions_per_admission)
        },
    },
    Metric {
        key: "priority_inversions",
        label: "priority inversions",
        better: Better::Lower,
        get: |s| {
            s.quota_metrics
                .as_ref()
                .map_or(0.0, |m| m.priority_inversions as f64)
        },
    },
];

/// The metrics of runs on a trace with dependencies (`Summary::pipelines`,
/// docs/simulator.md#metrics), reported last only when some run has them.
pub const PIPELINE_METRICS: &[Metric] = &[
    Metric {
        key: "avg_pipeline_completion_s",
        label: "avg pipeline completion (s)",
        better: Better::Lower,
        get: |s| s.pipelines.as_ref().map_or(0.0, |p| p.avg_completion_s),
    },
    Metric {
        key: "avg_critical_path_slowdown",
        label: "critical-path slowdown",
        better: Better::Lower,
        get: |s| {
            s.pipelines
                .as_ref()
                .map_or(0.0, |p| p.avg_critical_path_slowdown)
        },
    },
    Metric {
        key: "ready_wait_share",
        label: "ready stages' wait share",
        better: Better::Lower,
        get: |s| s.pipelines.as_ref().map_or(0.0, |p| p.ready_wait_share),
    },
];

/// The metrics a comparison of `runs` reports: `METRICS`, then `TYPED_METRICS` when some run
/// had a throughput table and typed jobs, then `QUOTA_METRICS` when some run had quotas, then
/// `PIPELINE_METRICS` when some run's trace had dependencies.
pub fn metrics_of(runs: &[Run]) -> impl Iterator<Item = &'static Metric> {
    let typed = runs
        .iter()
        .any(|r| r.summary.effective_throughput.is_some());
    let quotas = runs.iter().any(|r| r.summary.quota_metrics.is_some());
    let pipelines = runs.iter().any(|r| r.summary.pipelines.is_some());
    METRICS
        .iter()
        .chain(TYPED_METRICS.iter().filter(move |_| typed))
        .chain(QUOTA_METRICS.iter().filter(move |_| quotas))
        .chain(PIPELINE_METRICS.iter().filter(move |_| pipelines))
}

/// The columns of [`queue_table`], in its order.
pub const QUEUE_COLUMNS: [&str; 6] = [
    "avg wait (s)",
    "p99 wait (s)",
    "avg JCT (s)",
    "p99 JCT (s)",
    "guarantee violation (h)",
    "borrowed GPU-h",
];

/// One queue's row of [`queue_table`]: its name, and per policy the means of `QUEUE_COLUMNS`
/// (`None` where that policy's runs never had the queue).
pub type QueueRow = (String, Vec<Option<[f64; 6]>>);

/// Runs with quotas only: per queue (first seen order) and policy, the mean over the units
/// where the queue had jobs of its `QueueMetrics` (`QUEUE_COLUMNS`). `runs` gives each run's
/// policy index and summary; `None` where a policy's runs never had the queue.
pub fn queue_table<'a>(
    runs: impl Iterator<Item = (usize, &'a Summary)>,
    policies: usize,
) -> Vec<QueueRow> {
    // Per queue, per policy: the sums of the columns and how many runs.
    type Sums = Vec<([f64; 6], u32)>;
    let mut rows: Vec<(String, Sums)> = Vec::new();
    for (p, s) in runs {
        let Some(m) = &s.quota_metrics else { continue };
        for q in &m.queues {
            let at = match rows.iter().position(|(name, _)| *name == q.queue) {
                Some(at) => at,
                None => {
                    rows.push((q.queue.clone(), vec![([0.0; 6], 0); policies]));
                    rows.len() - 1
                }
            };
            let Some(cell) = rows[at].1.get_mut(p) else {
                continue;
            };
            let values = [
                q.avg_wait_s,
                q.p99_wait_s,
                q.avg_jct_s,
                q.p99_jct_s,
                q.guarantee_violation_h,
                q.borrowed_gpu_h,
            ];
            for (sum, v) in cell.0.iter_mut().zip(values) {
                *sum += v;
            }
            cell.1 += 1;
        }
    }
    rows.into_iter()
        .map(|(name, cells)| {
            let means = cells
                .into_iter()
                .map(|(sums, n)| (n > 0).then(|| sums.map(|v| v / f64::from(n))))
                .collect();
            (name, means)
        })
        .collect()
}

/// The share of a run's average JCT above its lower bound, in percent: the most that any
/// scheduler, even one knowing every true duration, could still cut from it on those jobs.
pub fn reducible_jct_pct(s: &Summary) -> f64 {
    if s.avg_jct_s > 0.0 {
        100.0 * (s.avg_jct_s - s.min_avg_jct_s).max(0.0) / s.avg_jct_s
    } else {
        0.0
    }
}

/// One unit: a window at a load with a seed; every policy runs on it.
#[derive(Debug, Clone, Serialize)]
pub struct Unit {
    pub window: usize,
    pub from_s: f64,
    pub to_s: f64,
    pub load: Option<f64>,
    pub seed: u64,
}

/// What one run leaves for the report (whole in a shard's file, `ShardRuns`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Run {
    pub policy: String,
    pub unit: usize,
    pub summary: Summary,
    /// JCT of every measured finished job, seconds.
    pub jcts: Vec<f64>,
    /// Their waits, seconds.
    pub waits: Vec<f64>,
    /// GPU-seconds served per tenant (measured jobs, first start to finish).
    pub tenant_gpu_s: std::collections::BTreeMap<String, f64>,
    /// The longest wait of each tenant's measured finished jobs, seconds.
    pub tenant_max_wait_s: std::collections::BTreeMap<String, f64>,
    pub timeline: Vec<TimelineRow>,
}

#[derive(Debug, Serialize)]
pub struct MetricReport {
    pub key: &'static str,
    pub label: &'static str,
    pub better: Better,
    /// Per policy: mean over units.
    pub means: Vec<f64>,
    /// Per policy: against the baseline (`None` for the baseline itself).
    pub paired: Vec<Option<Paired>>,
    /// Every policy scored what the baseline scored on every unit (within `1e-9` relative,
    /// the paired comparison's ties); `false` with a single policy. Not in the JSON: the
    /// terminal table leaves such metrics out, the report keeps them.
    #[serde(skip)]
    pub same_for_all: bool,
}

/// Runs every policy of `spec` on every unit of `trace` on `cluster` (policies built by
/// `build`, fresh for each run) and computes the paired statistics. `trace.name` names it in
/// the report. Results do not depend on the thread count.
pub fn compare(
    trace: &Trace,
    cluster: Arc<ClusterSpec>,
    spec: &CompareSpec,
    build: &BuildPolicy<'_>,
) -> Result<Comparison, HarnessError> {
    let started = Instant::now();
    let plan = plan(trace, spec, build)?;
    let all: Vec<usize> = (0..plan.units.len()).collect();
    let runs = run_units(trace, &cluster, spec, build, &plan, &all)?;
    Ok(assemble(trace, &cluster, spec, plan, runs, started))
}

/// One part of a comparison, for running it as several processes (a Slurm job array's
/// tasks): the units `u` with `u % count == index`, every policy on each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    /// `I/N` with `I < N`.
    pub fn parse(text: &str) -> Result<Shard, HarnessError> {
        let bad = || HarnessError::Invalid(format!("shard: `{text}` is not I/N with 0 <= I < N"));
        let (i, n) = text.split_once('/').ok_or_else(bad)?;
        let (index, count) = (
            i.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    /// Its file in a compare directory's `shards/`.
    pub fn file_name(&self) -> String {
        format!("{}-of-{}.json", self.index, self.count)
    }
}

/// What one shard ran, whole (every field the report reads), as `compare_shard` leaves it and
/// `merge` takes it.
#[derive(Debug, Serialize, Deserialize)]
pub struct ShardRuns {
    pub shard: Shard,
    /// The comparison's policies and unit count, which every shard of it must share.
    pub policies: Vec<String>,
    pub units: usize,
    pub runs: Vec<Run>,
}

/// Runs `shard`'s part of the comparison `compare` would run.
pub fn compare_shard(
    trace: &Trace,
    cluster: Arc<ClusterSpec>,
    spec: &CompareSpec,
    build: &BuildPolicy<'_>,
    shard: Shard,
) -> Result<ShardRuns, HarnessError> {
    let plan = plan(trace, spec, build)?;
    let mine: Vec<usize> = (0..plan.units.len())
        .filter(|u| u % shard.count == shard.index)
        .collect();
    let runs = run_units(trace, &cluster, spec, build, &plan, &mine)?;
    Ok(ShardRuns {
        shard,
        policies: spec.policies.clone(),
        units: plan.units.len(),
        runs,
    })
}

/// The comparison `compare` would return, from the runs of all the shards of one split (its
/// `wall_s` is the merge's own). Refuses, naming them,
/// shards of another split or comparison, and missing or repeated ones: partial results are
/// never merged.
pub fn merge(
    trace: &Trace,
    cluster: Arc<ClusterSpec>,
    spec: &CompareSpec,
    build: &BuildPolicy<'_>,
    shards: Vec<ShardRuns>,
) -> Result<Comparison, HarnessError> {
    let started = Instant::now();
    let plan = plan(trace, spec, build)?;
    let Some(count) = shards.first().map(|s| s.shard.count) else {
        return Err(HarnessError::Invalid("merge: no shards".into()));
    };
    let mut seen = vec![false; count];
    for s in &shards {
        let name = s.shard.file_name();
        if s.shard.count != count {
            return Err(HarnessError::Invalid(format!(
                "merge: shard {name} is of a split into {}, not {count}",
                s.shard.count
            )));
        }
        if s.policies != spec.policies || s.units != plan.units.len() {
            return Err(HarnessError::Invalid(format!(
                "merge: shard {name} ran another comparison ({} units of {}), not {} units of {}",
                s.units,
                s.policies.join(","),
                plan.units.len(),
                spec.policies.join(",")
            )));
        }
        if std::mem::replace(&mut seen[s.shard.index], true) {
            return Err(HarnessError::Invalid(format!(
                "merge: shard {name} given twice"
            )));
        }
    }
    let missing: Vec<String> = (0..count)
        .filter(|&i| !seen[i])
        .map(|index| Shard { index, count }.file_name())
        .collect();
    if !missing.is_empty() {
        return Err(HarnessError::Invalid(format!(
            "merge: shards missing: {} (run them with --shard I/{count})",
            missing.join(", ")
        )));
    }
    let n = spec.policies.len();
    let mut slots: Vec<Option<Run>> = (0..plan.units.len() * n).map(|_| None).collect();
    for record in shards.into_iter().flat_map(|s| s.runs) {
        let p = spec.policies.iter().position(|x| *x == record.policy);
        let slot = p.and_then(|p| slots.get_mut(record.unit * n + p));
        match slot {
            Some(slot @ None) => *slot = Some(record),
            _ => {
                return Err(HarnessError::Invalid(format!(
                    "merge: a run of {} on unit {} is unexpected or repeated",
                    record.policy, record.unit
                )));
            }
        }
    }
    let runs = slots
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            r.ok_or_else(|| {
                HarnessError::Invalid(format!(
                    "merge: no run of {} on unit {}",
                    spec.policies[i % n],
                    i / n
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(assemble(trace, &cluster, spec, plan, runs, started))
}

/// What a comparison runs: its units and simulation config, checked.
struct Plan {
    baseline: String,
    base_idx: usize,
    cfg: SimConfig,
    windows: usize,
    units: Vec<Unit>,
}

fn plan(trace: &Trace, spec: &CompareSpec, build: &BuildPolicy<'_>) -> Result<Plan, HarnessError> {
    if spec.policies.is_empty() {
        return Err(HarnessError::Invalid(
            "policies: give at least one policy".into(),
        ));
    }
    if spec.loads.is_empty() {
        return Err(HarnessError::Invalid(
            "loads: give at least one load".into(),
        ));
    }
    if let Some(bad) = spec
        .loads
        .iter()
        .flatten()
        .find(|l| !(l.is_finite() && **l > 0.0))
    {
        return Err(HarnessError::Invalid(format!(
            "load: `{bad}` is not an offered load > 0 (or `none`)"
        )));
    }
    let baseline = spec
        .baseline
        .clone()
        .unwrap_or_else(|| spec.policies[0].clone());
    let Some(base_idx) = spec.policies.iter().position(|p| *p == baseline) else {
        return Err(HarnessError::Invalid(format!(
            "baseline {baseline} is not among the policies"
        )));
    };
    for p in &spec.policies {
        build(p, &options_with_table(trace, 0, spec)?)?;
    }
    let mut cfg = SimConfig {
        skip_unplaceable: true,
        timeline_interval_s: 600.0,
        throughputs: spec.throughputs.clone(),
        starvation_bound: spec.starvation_bound,
        quotas: spec.quotas.clone(),
        ..SimConfig::default()
    };
    if let Some(c) = spec.checkpoint_s {
        cfg.checkpoint_interval_s = c;
    }
    cfg.tick_s = match spec.tick_s {
        Some(t) => t,
        None => spec
            .policies
            .iter()
            .map(|p| wants_tick_s(p))
            .fold(0.0, f64::max),
    };
    let windows: Vec<(f64, f64)> = if spec.windows == 0 {
        vec![(0.0, f64::INFINITY)]
    } else {
        random_windows(trace, spec.window_jobs, spec.windows, 0)?
            .iter()
            .map(|w| (w.from_s, w.to_s))
            .collect()
    };
    let mut units = Vec::new();
    for (w, (from_s, to_s)) in windows.iter().enumerate() {
        for load in &spec.loads {
            for seed in 0..spec.seeds.max(1) {
                units.push(Unit {
                    window: w,
                    from_s: *from_s,
                    to_s: *to_s,
                    load: *load,
                    seed,
                });
            }
        }
    }
    Ok(Plan {
        baseline,
        base_idx,
        cfg,
        windows: windows.len(),
        units,
    })
}

/// The worker threads for `jobs` runs.
fn threads_for(spec: &CompareSpec, jobs: usize) -> usize {
    spec.threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, jobs.max(1))
}

/// Every policy on each of `units` (indices into the plan's), unit-major.
fn run_units(
    trace: &Trace,
    cluster: &Arc<ClusterSpec>,
    spec: &CompareSpec,
    build: &BuildPolicy<'_>,
    plan: &Plan,
    units: &[usize],
) -> Result<Vec<Run>, HarnessError> {
    let jobs: Vec<(usize, usize)> = units
        .iter()
        .flat_map(|&u| (0..spec.policies.len()).map(move |p| (u, p)))
        .collect();
    let threads = threads_for(spec, jobs.len());
    let next = AtomicUsize::new(0);
    let results: Vec<Result<Run, HarnessError>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some((u, p)) = jobs.get(i) else { break };
                        done.push((
                            i,
                            run_one(
                                trace,
                                cluster,
                                &plan.units,
                                (*u, *p),
                                spec,
                                &plan.cfg,
                                build,
                            ),
                        ));
                    }
                    done
                })
            })
            .collect();
        let mut all: Vec<(usize, Result<Run, HarnessError>)> = workers
            .into_iter()
            .flat_map(|w| w.join().expect("a compare worker panicked"))
            .collect();
        all.sort_by_key(|(i, _)| *i);
        all.into_iter().map(|(_, r)| r).collect()
    });
    results.into_iter().collect()
}

/// The comparison of all the plan's `runs` (unit-major, then policy).
fn assemble(
    trace: &Trace,
    cluster: &ClusterSpec,
    spec: &CompareSpec,
    plan: Plan,
    runs: Vec<Run>,
    started: Instant,
) -> Comparison {
    let units = plan.units;
    let metrics = metric_reports(
        &runs,
        &spec.policies,
        plan.base_idx,
        units.len(),
        spec.resamples,
    );
    let verdict = verdict(&runs, &spec.policies, units.len(), spec.resamples);
    let captured_gap = captured_gap(&runs, &spec.policies, units.len(), spec.resamples);
    let setup = Setup {
        command: spec.command.clone(),
        trace: trace.name.clone(),
        trace_jobs: trace.len(),
        cluster: cluster.name.clone(),
        cluster_desc: cluster.describe(),
        policies: spec.policies.clone(),
        baseline: plan.baseline,
        units: units.len(),
        windows: plan.windows,
        window_jobs: if spec.windows == 0 {
            trace.len()
        } else {
            spec.window_jobs
        },
        loads: spec.loads.clone(),
        seeds: spec.seeds.max(1),
        runs: runs.len(),
        threads: threads_for(spec, runs.len()),
        wall_s: started.elapsed().as_secs_f64(),
        verdict,
        captured_gap,
    };
    Comparison {
        setup,
        units,
        runs,
        metrics,
    }
}

impl Comparison {
    /// One line per run that left measured jobs unfinished (its JCT and wait figures cover
    /// finished jobs only).
    pub fn warnings(&self) -> Vec<String> {
        self.runs
            .iter()
            .filter_map(|r| {
                let left = r.summary.jobs.saturating_sub(r.summary.finished);
                (left > 0).then(|| {
                    format!(
                        "{} left {left} of {} jobs unfinished on unit {}: its JCT and wait \
                         figures there cover finished jobs only",
                        r.policy, r.summary.jobs, r.unit
                    )
                })
            })
            .collect()
    }

    /// `lachesis compare`'s terminal table, with a table per queue where quotas were on.
    pub fn terminal_table(&self) -> String {
        let k = self.setup.policies.len().max(1);
        let queues = queue_table(
            self.runs
                .iter()
                .enumerate()
                .map(|(i, r)| (i % k, &r.summary)),
            k,
        );
        terminal_table(&self.setup, &self.metrics) + &queue_lines(&self.setup.policies, &queues)
    }

    /// One policy's value of `metric` on every unit, in unit order.
    pub fn unit_values(&self, metric: &Metric, policy: usize) -> Vec<f64> {
        unit_values(
            &self.runs,
            self.setup.policies.len(),
            self.units.len(),
            metric,
            policy,
        )
    }
}

fn run_one(
    trace: &Trace,
    cluster: &Arc<ClusterSpec>,
    units: &[Unit],
    (u, p): (usize, usize),
    spec: &CompareSpec,
    cfg: &SimConfig,
    build: &BuildPolicy<'_>,
) -> Result<Run, HarnessError> {
    let (unit, policy) = (&units[u], spec.policies[p].as_str());
    let to = if unit.to_s.is_finite() {
        SimTime::from_secs_f64(unit.to_s).unwrap_or(SimTime::MAX)
    } else {
        SimTime::MAX
    };
    let from = SimTime::from_secs_f64(unit.from_s).unwrap_or(SimTime::ZERO);
    let mut window = trace.window(from, to);
    if let Some(load) = unit.load {
        window = scale_to_load(&window, cluster, load).map_err(|e| {
            HarnessError::from(e).context(format!("window {} at load {load}", unit.window))
        })?;
    }
    let cfg = SimConfig {
        seed: unit.seed,
        ..cfg.clone()
    };
    let options = options_with_table(&window, unit.seed, spec)?;
    let mut p = build(policy, &options)?;
    let r = Simulator::new(&window, Arc::clone(cluster), &cfg)?.run(p.as_mut(), &mut |_| {});
    let measured = || r.jobs.iter().filter(|j| j.measured && j.finish.is_some());
    let jcts = measured()
        .filter_map(|j| j.jct())
        .map(SimTime::secs_f64)
        .collect();
    let waits = measured()
        .filter_map(|j| j.wait())
        .map(SimTime::secs_f64)
        .collect();
    let mut tenant_gpu_s = std::collections::BTreeMap::new();
    let mut tenant_max_wait_s = std::collections::BTreeMap::<String, f64>::new();
    for j in measured() {
        if let Some(w) = j.wait() {
            let longest = tenant_max_wait_s.entry(j.tenant.clone()).or_insert(0.0);
            *longest = longest.max(w.secs_f64());
        }
        let (Some(start), Some(end)) = (j.first_start, j.finish) else {
            continue;
        };
        *tenant_gpu_s.entry(j.tenant.clone()).or_insert(0.0) +=
            j.gpus as f64 * end.saturating_sub(start).secs_f64();
    }
    Ok(Run {
        policy: policy.to_string(),
        unit: u,
        summary: r.summary,
        jcts,
        waits,
        tenant_gpu_s,
        tenant_max_wait_s,
        timeline: r.timeline,
    })
}

fn metric_reports(
    runs: &[Run],
    policies: &[String],
    base: usize,
    units: usize,
    resamples: usize,
) -> Vec<MetricReport> {
    let n = policies.len();
    let value = |m: &Metric, p: usize| unit_values(runs, n, units, m, p);
    metrics_of(runs)
        .map(|m| {
            let base_values = value(m, base);
            let means = (0..n)
                .map(|p| lachesis_env::metrics::mean(&value(m, p)))
                .collect();
            let paired = (0..n)
                .map(|p| {
                    (p != base).then(|| paired(&base_values, &value(m, p), m.better, resamples, 7))
                })
                .collect();
            let tie = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-12);
            let same_for_all = n > 1
                && (0..n).all(|p| {
                    value(m, p)
                        .iter()
                        .zip(&base_values)
                        .all(|(v, b)| tie(*v, *b))
                });
            MetricReport {
                key: m.key,
                label: m.label,
                better: m.better,
                means,
                paired,
                same_for_all,
            }
        })
        .collect()
}

/// One policy's value of `metric` on every unit, in unit order (runs are ordered unit-major,
/// policy-minor).
fn unit_values(runs: &[Run], policies: usize, units: usize, metric: &Metric, p: usize) -> Vec<f64> {
    (0..units)
        .map(|u| (metric.get)(&runs[u * policies + p].summary))
        .collect()
}

/// The comparison in one line: the policy with the lowest mean average JCT, how far below the
/// runner-up it is (difference and ratio of the means), and the paired bootstrap interval of
/// that difference over the units. Policies that ran exactly as the winner on every unit (say
/// `sjf` and `srtf` without runtime estimates) are named with it, and the runner-up is the
/// best policy that did not. `None` with fewer than two policies.
fn verdict(runs: &[Run], policies: &[String], units: usize, resamples: usize) -> Option<String> {
    let jct = &METRICS[0];
    debug_assert_eq!(jct.key, "avg_jct_s");
    let values: Vec<Vec<f64>> = (0..policies.len())
        .map(|p| unit_values(runs, policies.len(), units, jct, p))
        .collect();
    let means: Vec<f64> = values
        .iter()
        .map(|v| lachesis_env::metrics::mean(v))
        .collect();
    let mut order: Vec<usize> = (0..policies.len()).collect();
    order.sort_by(|a, b| means[*a].total_cmp(&means[*b]));
    if order.len() < 2 {
        return None;
    }
    let won = order[0];
    let (twins, others): (Vec<usize>, Vec<usize>) =
        order[1..].iter().partition(|p| values[**p] == values[won]);
    let winner = if twins.is_empty() {
        policies[won].clone()
    } else {
        let names: Vec<&str> = twins.iter().map(|p| policies[*p].as_str()).collect();
        format!(
            "{} (identical to {} on every unit)",
            policies[won],
            names.join(", ")
        )
    };
    let Some(&next) = others.first() else {
        return Some(format!(
            "verdict: no winner: all {} policies ran identically on average JCT ({} s)",
            policies.len(),
            fmt_num(means[won])
        ));
    };
    // The runner-up as the baseline: the difference is winner - runner-up, wins the winner's.
    let d = paired(&values[next], &values[won], Better::Lower, resamples, 7);
    let pct = if means[next] > 0.0 {
        100.0 * (means[next] - means[won]) / means[next]
    } else {
        0.0
    };
    let tail = if d.significant() {
        String::new()
    } else {
        "; the interval includes 0: no clear winner".into()
    };
    let ratio = if means[next] > 0.0 {
        means[won] / means[next]
    } else {
        1.0
    };
    Some(format!(
        "verdict: {winner} won: avg JCT {} s, {pct:.2}% below {} ({} s, ratio {ratio:.3}); \
         paired difference {} s [95% CI {}, {}], better on {} and worse on {} of {} units{tail}",
        fmt_num(means[won]),
        policies[next],
        fmt_num(means[next]),
        fmt_num(d.mean_diff),
        fmt_num(d.ci_low),
        fmt_num(d.ci_high),
        d.wins,
        d.losses,
        d.units,
    ))
}

/// For each learned policy (`rl:`) and selector (`select`), the share of the distance from
/// the best heuristic (the lowest mean average JCT among policies neither learned, selector
/// nor oracle) to the best oracle bound
/// that it closes, with its bootstrap interval over units (`captured_share`). The bound, per
/// unit, is the best oracle policy's average JCT where the comparison runs one (`*-oracle`,
/// which know true durations), else the average-JCT lower bound (each job's run time alone).
fn captured_gap(runs: &[Run], policies: &[String], units: usize, resamples: usize) -> Vec<String> {
    let jct = |p: usize| unit_values(runs, policies.len(), units, &METRICS[0], p);
    debug_assert_eq!(METRICS[1].key, "min_avg_jct_s");
    let learned =
        |p: &String| p.starts_with("rl:") || lachesis_env::policy::Select::parse_name(p).is_some();
    let oracle = |p: &String| p.contains("-oracle");
    let best = |keep: &dyn Fn(&String) -> bool| {
        (0..policies.len())
            .filter(|p| keep(&policies[*p]))
            .map(|p| (p, lachesis_env::metrics::mean(&jct(p))))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    };
    let Some((h, h_mean)) = best(&|p| !learned(p) && !oracle(p)) else {
        return Vec::new();
    };
    let (bound, bound_name) = match best(&|p| oracle(p)) {
        Some((o, _)) => (jct(o), format!("`{}`", policies[o])),
        None => (
            unit_values(runs, policies.len(), units, &METRICS[1], h),
            "the average-JCT lower bound".to_string(),
        ),
    };
    let b_mean = lachesis_env::metrics::mean(&bound);
    (0..policies.len())
        .filter(|p| learned(&policies[*p]))
        .map(|m| {
            let name = &policies[m];
            match captured_share(&jct(h), &jct(m), &bound, resamples, 11) {
                Some(s) => format!(
                    "captured gap: {name} closes {:.1}% [95% CI {:.1}, {:.1}] of the distance \
                     from the best heuristic {} ({} s) to {bound_name} ({} s)",
                    100.0 * s.share,
                    100.0 * s.ci_low,
                    100.0 * s.ci_high,
                    policies[h],
                    fmt_num(h_mean),
                    fmt_num(b_mean),
                ),
                None => format!(
                    "captured gap: none to capture: the best heuristic {} ({} s) is at \
                     {bound_name} ({} s)",
                    policies[h],
                    fmt_num(h_mean),
                    fmt_num(b_mean),
                ),
            }
        })
        .collect()
}

/// The run's setup, for the report's header (read back by `lachesis report`).
#[derive(Debug, Serialize, Deserialize)]
pub struct Setup {
    pub command: String,
    pub trace: String,
    pub trace_jobs: usize,
    pub cluster: String,
    pub cluster_desc: String,
    pub policies: Vec<String>,
    pub baseline: String,
    pub units: usize,
    pub windows: usize,
    pub window_jobs: usize,
    pub loads: Vec<Option<f64>>,
    pub seeds: u64,
    pub runs: usize,
    pub threads: usize,
    pub wall_s: f64,
    /// The one-line verdict (`verdict`), printed last and at the top of the report (kept in
    /// comparison.json so `lachesis report` writes the same page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    /// Each learned policy's captured share of the gap (`captured_gap`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub captured_gap: Vec<String>,
}

/// Views handed to the report writer (kept apart so it does not depend on this module's
/// private types).
#[derive(Debug)]
pub struct RunView<'a> {
    pub policy: &'a str,
    pub policy_idx: usize,
    pub unit: usize,
    pub summary: &'a Summary,
    pub jcts: &'a [f64],
    pub waits: &'a [f64],
    pub tenant_gpu_s: &'a std::collections::BTreeMap<String, f64>,
    pub tenant_max_wait_s: &'a std::collections::BTreeMap<String, f64>,
    pub timeline: &'a [TimelineRow],
}

#[derive(Debug)]
pub struct MetricView<'a> {
    pub key: &'a str,
    pub label: &'a str,
    pub better: Better,
    pub means: &'a [f64],
    pub paired: &'a [Option<Paired>],
}

pub(super) fn runs_view<'a>(runs: &'a [Run], policies: &[String]) -> Vec<RunView<'a>> {
    runs.iter()
        .map(|r| RunView {
            policy: &r.policy,
            policy_idx: policies.iter().position(|p| *p == r.policy).unwrap_or(0),
            unit: r.unit,
            summary: &r.summary,
            jcts: &r.jcts,
            waits: &r.waits,
            tenant_gpu_s: &r.tenant_gpu_s,
            tenant_max_wait_s: &r.tenant_max_wait_s,
            timeline: &r.timeline,
        })
        .collect()
}

pub(super) fn reports_view(reports: &[MetricReport]) -> Vec<MetricView<'_>> {
    reports
        .iter()
        .map(|m| MetricView {
            key: m.key,
            label: m.label,
            better: m.better,
            means: &m.means,
            paired: &m.paired,
        })
        .collect()
}

/// A number in a width-friendly form.
pub fn fmt_num(x: f64) -> String {
    let a = x.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 1e5 {
        format!("{x:.3e}")
    } else if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.4}")
    }
}

/// `Δ [low, high] W/L` against the baseline, or `baseline`.
pub fn fmt_paired(p: &Option<Paired>) -> String {
    match p {
        None => "baseline".into(),
        Some(p) => format!(
            "{}{} [{}, {}] {}W/{}L",
            if p.mean_diff >= 0.0 { "+" } else { "" },
            fmt_num(p.mean_diff),
            fmt_num(p.ci_low),
            fmt_num(p.ci_high),
            p.wins,
            p.losses
        ),
    }
}

fn terminal_table(setup: &Setup, reports: &[MetricReport]) -> String {
    let mut s = String::new();
    let loads: Vec<String> = setup
        .loads
        .iter()
        .map(|l| l.map_or("trace".into(), |x| x.to_string()))
        .collect();
    let _ = writeln!(
        s,
        "{} on {} ({}): {} policies x {} units ({} windows of {} jobs x loads {} x {} seeds) = {} runs in {:.1} s on {} threads",
        setup.trace,
        setup.cluster,
        setup.cluster_desc,
        setup.policies.len(),
        setup.units,
        setup.windows,
        setup.window_jobs,
        loads.join(","),
        setup.seeds,
        setup.runs,
        setup.wall_s,
        setup.threads
    );
    let _ = writeln!(
        s,
        "paired difference vs {} with a bootstrap 95% interval, wins/losses over units\n",
        setup.baseline
    );
    let width = setup
        .policies
        .iter()
        .map(|p| p.len())
        .max()
        .unwrap_or(8)
        .max(8);
    // A metric every policy scored the same on every unit (the lower bound, which the jobs
    // fix; Jain's index where the trace has no tenants) cannot tell them apart: one line
    // names them instead of a table of ties. The report keeps every row.
    let (shown, same): (Vec<&MetricReport>, Vec<&MetricReport>) =
        reports.iter().partition(|m| !m.same_for_all);
    if !same.is_empty() {
        let labels: Vec<&str> = same.iter().map(|m| m.label).collect();
        let _ = writeln!(
            s,
            "left out, the same for every policy on every unit: {}\n",
            labels.join(", ")
        );
    }
    for m in shown {
        let arrow = match m.better {
            Better::Lower => "lower is better",
            Better::Higher => "higher is better",
            Better::Neither => "a count",
        };
        let _ = writeln!(s, "{} ({arrow})", m.label);
        for (i, p) in setup.policies.iter().enumerate() {
            let _ = writeln!(
                s,
                "  {p:<width$} {:>12}  {}",
                fmt_num(m.means[i]),
                fmt_paired(&m.paired[i])
            );
        }
    }
    s
}

/// The per-queue table of the terminal (`queue_table`, the first 12 queues), empty without
/// quotas.
fn queue_lines(policies: &[String], rows: &[QueueRow]) -> String {
    let mut s = String::new();
    if rows.is_empty() {
        return s;
    }
    let width = policies.iter().map(|p| p.len()).max().unwrap_or(8).max(8);
    let short = [
        "avg wait s",
        "p99 wait s",
        "avg JCT s",
        "p99 JCT s",
        "violated h",
        "borrow GPU-h",
    ];
    let header: String = short.iter().map(|c| format!("{c:>13}")).collect();
    let _ = writeln!(s, "\nper queue, mean over units");
    let _ = writeln!(s, "  {:<width$} {header}", "");
    // The first `SHOWN` queues; report.md has them all.
    const SHOWN: usize = 12;
    for (queue, cells) in rows.iter().take(SHOWN) {
        let _ = writeln!(s, "{queue}");
        for (p, cell) in policies.iter().zip(cells) {
            let values = cell.map_or_else(
                || "-".to_string(),
                |c| c.iter().map(|v| format!("{:>13}", fmt_num(*v))).collect(),
            );
            let _ = writeln!(s, "  {p:<width$} {values}");
        }
    }
    if rows.len() > SHOWN {
        let _ = writeln!(s, "... {} more queues in report.md", rows.len() - SHOWN);
    }
    s
}

/// Why a round-based Gavel policy cannot run where jobs checkpoint less often than its rounds
/// preempt them (`checkpoint_s`: the interval in force, seconds): every round would lose the
/// work since the last checkpoint, and a job longer than a round would never finish (the run
/// would not end). `simulate` and `compare` refuse such runs with this message.
pub fn gavel_checkpoint_warning(policies: &[String], checkpoint_s: f64) -> Option<String> {
    let round_s = lachesis_env::policy::GAVEL_ROUND_S;
    let gavel: Vec<&str> = policies
        .iter()
        .map(|p| p.trim())
        .filter(|p| p.starts_with("gavel-"))
        .collect();
    (!gavel.is_empty() && (checkpoint_s <= 0.0 || checkpoint_s > round_s)).then(|| {
        format!(
            "{} reassign GPUs every {round_s:.0} s round, but jobs checkpoint every \
             {checkpoint_s:.0} s (0: never): each round's preemptions lose the work since the \
             last checkpoint: checkpoint at least every round, as Gavel's jobs do at every lease \
             end (compare --checkpoint 1s; simulate: checkpoint_interval_s in --config)",
            gavel.join(", ")
        )
    })
}
