//! `lachesis compare`: every policy on identical windows, loads and seeds, with paired
//! differences against a baseline (bootstrap 95% intervals), wins and losses, a terminal
//! table, `report.md`, `report.html` with SVG plots, `runs.csv` and `comparison.json`.

use crate::simulate::{load_trace, policy_config, policy_options, resolve_cluster};
use anyhow::{Context, Result, bail, ensure};
use lachesis_env::cluster::ClusterSpec;
use lachesis_env::job::Trace;
use lachesis_env::metrics::paired::{Better, Paired, captured_share, paired};
use lachesis_env::metrics::{Summary, TimelineRow};
use lachesis_env::policy::PolicyConfig;
use lachesis_env::sim::{SimConfig, Simulator, scale_to_load};
use lachesis_env::trace::split::random_windows;
use lachesis_env::units::{SimTime, parse_duration};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Trace to compare on (default: the bundled ITP cluster 10 excerpt).
    #[arg(long, default_value = "traces/itp/cluster10.csv")]
    pub trace: PathBuf,
    #[arg(long)]
    pub format: Option<String>,
    /// Cluster: preset, shape, TOML file, or auto[:G:MODEL@LOAD] sized from the whole trace
    /// (default: 3 nodes of 8 V100s, where the excerpt's windows queue and the policies differ).
    #[arg(long, default_value = "3x8:V100")]
    pub cluster: String,
    /// Policies, comma-separated (default: the shipped model, the strongest heuristics, and
    /// plain FIFO for scale).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "rl:models/default,tiresias/best-fit/las-preempt,sjf/best-fit,f1/best-fit/easy,fifo/best-fit/easy,fifo/best-fit"
    )]
    pub policies: Vec<String>,
    /// The policy the others are compared against (default: the first).
    #[arg(long)]
    pub baseline: Option<String>,
    /// Seeds per window and load.
    #[arg(long, default_value_t = 1)]
    pub seeds: u64,
    /// Draw windows from one part of a time-ordered split of the trace: `TRAIN,VALIDATION`
    /// fractions of jobs (e.g. `0.7,0.15`), the rest is test. Needs `--part`.
    #[arg(long, value_delimiter = ',', num_args = 1..=2, requires = "part")]
    pub split: Option<Vec<f64>>,
    /// The part of `--split` to compare on: `train`, `validation` or `test`.
    #[arg(long, requires = "split")]
    pub part: Option<String>,
    /// Pull the trace's run times towards their median (< 1) or spread them (> 1) on a log
    /// scale before anything else: `d' = m (d / m)^S` (1 keeps them). For trying policies on
    /// regimes a trace does not show, as training's `spread` does.
    #[arg(long, value_name = "S")]
    pub duration_spread: Option<f64>,
    /// Random windows of the trace (0 = the whole trace once).
    #[arg(long, default_value_t = 12)]
    pub windows: usize,
    /// Jobs per window.
    #[arg(long, default_value_t = 150)]
    pub window_jobs: usize,
    /// Offered loads to scale each window to, comma-separated ("none" keeps the trace's own).
    #[arg(long, value_delimiter = ',', default_value = "0.8,1.0,1.2")]
    pub load: Vec<String>,
    /// Periodic decision tick, e.g. 5m (default: 10m when a policy uses las-preempt, a learned
    /// policy's training tick for `rl:PATH`, else none).
    #[arg(long)]
    pub tick: Option<String>,
    /// Policy knobs (TOML, e.g. `[tiresias] thresholds_gpu_s = [3250.0, 7200.0]`).
    #[arg(long)]
    pub policy_config: Option<PathBuf>,
    /// Where the report goes.
    #[arg(short = 'o', long, default_value = "out/compare")]
    pub out: PathBuf,
    /// Worker threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Bootstrap resamples per interval.
    #[arg(long, default_value_t = 2000)]
    pub resamples: usize,
}

/// One metric of the report.
struct Metric {
    key: &'static str,
    label: &'static str,
    better: Better,
    get: fn(&Summary) -> f64,
}

const METRICS: &[Metric] = &[
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

/// The share of a run's average JCT above its lower bound, in percent: the most that any
/// scheduler, even one knowing every true duration, could still cut from it on those jobs.
fn reducible_jct_pct(s: &Summary) -> f64 {
    if s.avg_jct_s > 0.0 {
        100.0 * (s.avg_jct_s - s.min_avg_jct_s).max(0.0) / s.avg_jct_s
    } else {
        0.0
    }
}

/// One unit: a window at a load with a seed; every policy runs on it.
#[derive(Debug, Clone, Serialize)]
struct Unit {
    window: usize,
    from_s: f64,
    to_s: f64,
    load: Option<f64>,
    seed: u64,
}

/// What one run leaves for the report.
#[derive(Debug, Clone, Serialize)]
struct Run {
    policy: String,
    unit: usize,
    summary: Summary,
    #[serde(skip)]
    jcts: Vec<f64>,
    #[serde(skip)]
    waits: Vec<f64>,
    /// GPU-seconds served per tenant (measured jobs, first start to finish).
    #[serde(skip)]
    tenant_gpu_s: std::collections::BTreeMap<String, f64>,
    #[serde(skip)]
    timeline: Vec<TimelineRow>,
}

#[derive(Debug, Serialize)]
struct MetricReport {
    key: &'static str,
    label: &'static str,
    better: Better,
    /// Per policy: mean over units.
    means: Vec<f64>,
    /// Per policy: against the baseline (`None` for the baseline itself).
    paired: Vec<Option<Paired>>,
}

pub fn run(args: &Args) -> Result<()> {
    let started = Instant::now();
    let mut trace = load_trace(&args.trace, args.format.as_deref())?;
    if let Some(spread) = args.duration_spread {
        trace = lachesis_env::sim::respread_durations(&trace, spread)
            .with_context(|| format!("--duration-spread {spread}"))?;
    }
    trace.name = args.trace.display().to_string();
    let cluster = Arc::new(resolve_cluster(&args.cluster, &trace)?);
    if let (Some(split), Some(part)) = (&args.split, &args.part) {
        ensure!(
            split.len() == 2,
            "--split takes two fractions, TRAIN,VALIDATION (e.g. 0.7,0.15); got {split:?}"
        );
        let parts = lachesis_env::trace::split::split_by_time(&trace, split[0], split[1])
            .context("--split")?;
        let name = format!(
            "{} ({part} part of split {},{})",
            trace.name, split[0], split[1]
        );
        trace = match part.as_str() {
            "train" => parts.train,
            "validation" => parts.validation,
            "test" => parts.test,
            other => bail!("--part: `{other}` is not train, validation or test"),
        };
        trace.name = name;
    }
    if args.policies.is_empty() {
        bail!("--policies: give at least one policy");
    }
    let baseline = args
        .baseline
        .clone()
        .unwrap_or_else(|| args.policies[0].clone());
    let Some(base_idx) = args.policies.iter().position(|p| *p == baseline) else {
        bail!("--baseline {baseline} is not among --policies");
    };
    let policy_cfg = policy_config(args.policy_config.as_deref())?;
    for p in &args.policies {
        crate::policies::build(p, &policy_options(&trace, 0, &policy_cfg))?;
    }
    let loads = parse_loads(&args.load)?;
    let mut cfg = SimConfig {
        skip_unplaceable: true,
        timeline_interval_s: 600.0,
        ..SimConfig::default()
    };
    cfg.tick_s = match &args.tick {
        Some(t) => parse_duration(t)
            .map_err(anyhow::Error::msg)
            .context("--tick")?
            .secs_f64(),
        None => args
            .policies
            .iter()
            .map(|p| crate::policies::wants_tick_s(p))
            .fold(0.0, f64::max),
    };
    let windows: Vec<(f64, f64)> = if args.windows == 0 {
        vec![(0.0, f64::INFINITY)]
    } else {
        random_windows(&trace, args.window_jobs, args.windows, 0)?
            .iter()
            .map(|w| (w.from_s, w.to_s))
            .collect()
    };
    let mut units = Vec::new();
    for (w, (from_s, to_s)) in windows.iter().enumerate() {
        for load in &loads {
            for seed in 0..args.seeds.max(1) {
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
    let jobs: Vec<(usize, usize)> = (0..units.len())
        .flat_map(|u| (0..args.policies.len()).map(move |p| (u, p)))
        .collect();
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, jobs.len().max(1));
    let next = AtomicUsize::new(0);
    let results: Vec<Result<Run>> = std::thread::scope(|scope| {
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
                                &trace,
                                &cluster,
                                &units[*u],
                                *u,
                                &args.policies[*p],
                                &cfg,
                                &policy_cfg,
                            ),
                        ));
                    }
                    done
                })
            })
            .collect();
        let mut all: Vec<(usize, Result<Run>)> = workers
            .into_iter()
            .flat_map(|w| w.join().expect("a compare worker panicked"))
            .collect();
        all.sort_by_key(|(i, _)| *i);
        all.into_iter().map(|(_, r)| r).collect()
    });
    let runs: Vec<Run> = results.into_iter().collect::<Result<_>>()?;
    for r in &runs {
        let left = r.summary.jobs.saturating_sub(r.summary.finished);
        if left > 0 {
            eprintln!(
                "warning: {} left {left} of {} jobs unfinished on unit {}: its JCT and wait \
                 figures there cover finished jobs only",
                r.policy, r.summary.jobs, r.unit
            );
        }
    }
    let reports = metric_reports(&runs, &args.policies, base_idx, units.len(), args.resamples);
    let verdict = verdict(&runs, &args.policies, units.len(), args.resamples);
    let captured_gap = captured_gap(&runs, &args.policies, units.len(), args.resamples);
    let wall_s = started.elapsed().as_secs_f64();
    let setup = Setup {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        trace: trace.name.clone(),
        trace_jobs: trace.len(),
        cluster: cluster.name.clone(),
        cluster_desc: cluster.describe(),
        policies: args.policies.clone(),
        baseline: baseline.clone(),
        units: units.len(),
        windows: windows.len(),
        window_jobs: if args.windows == 0 {
            trace.len()
        } else {
            args.window_jobs
        },
        loads: loads.clone(),
        seeds: args.seeds.max(1),
        runs: runs.len(),
        threads,
        wall_s,
        verdict,
        captured_gap,
    };
    crate::report::write(
        &args.out,
        &setup,
        &units,
        &runs_view(&runs, &args.policies),
        &reports_view(&reports),
    )?;
    out!("{}", terminal_table(&setup, &reports));
    if let Some(v) = &setup.verdict {
        outln!("\n{v}");
    }
    for line in &setup.captured_gap {
        outln!("{line}");
    }
    outln!("report: {}", args.out.join("report.md").display());
    Ok(())
}

fn parse_loads(loads: &[String]) -> Result<Vec<Option<f64>>> {
    loads
        .iter()
        .map(|l| match l.trim() {
            "none" => Ok(None),
            x => match x.parse::<f64>() {
                Ok(v) if v.is_finite() && v > 0.0 => Ok(Some(v)),
                _ => bail!("--load: `{x}` is not an offered load > 0 (or `none`)"),
            },
        })
        .collect()
}

fn run_one(
    trace: &Trace,
    cluster: &Arc<ClusterSpec>,
    unit: &Unit,
    u: usize,
    policy: &str,
    cfg: &SimConfig,
    policy_cfg: &PolicyConfig,
) -> Result<Run> {
    let to = if unit.to_s.is_finite() {
        SimTime::from_secs_f64(unit.to_s).unwrap_or(SimTime::MAX)
    } else {
        SimTime::MAX
    };
    let from = SimTime::from_secs_f64(unit.from_s).unwrap_or(SimTime::ZERO);
    let mut window = trace.window(from, to);
    if let Some(load) = unit.load {
        window = scale_to_load(&window, cluster, load)
            .with_context(|| format!("window {} at load {load}", unit.window))?;
    }
    let cfg = SimConfig {
        seed: unit.seed,
        ..cfg.clone()
    };
    let mut p = crate::policies::build(policy, &policy_options(&window, unit.seed, policy_cfg))?;
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
    for j in measured() {
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
    METRICS
        .iter()
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
            MetricReport {
                key: m.key,
                label: m.label,
                better: m.better,
                means,
                paired,
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

/// For each learned policy (`rl:`), the share of the distance from the best heuristic (the
/// lowest mean average JCT among policies neither learned nor oracle) to the best oracle bound
/// that it closes, with its bootstrap interval over units (`captured_share`). The bound, per
/// unit, is the best oracle policy's average JCT where the comparison runs one (`*-oracle`,
/// which know true durations), else the average-JCT lower bound (each job's run time alone).
fn captured_gap(runs: &[Run], policies: &[String], units: usize, resamples: usize) -> Vec<String> {
    let jct = |p: usize| unit_values(runs, policies.len(), units, &METRICS[0], p);
    debug_assert_eq!(METRICS[1].key, "min_avg_jct_s");
    let learned = |p: &String| p.starts_with("rl:");
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
pub struct RunView<'a> {
    pub policy: &'a str,
    pub policy_idx: usize,
    pub unit: usize,
    pub summary: &'a Summary,
    pub jcts: &'a [f64],
    pub waits: &'a [f64],
    pub tenant_gpu_s: &'a std::collections::BTreeMap<String, f64>,
    pub timeline: &'a [TimelineRow],
}

pub struct MetricView<'a> {
    pub key: &'a str,
    pub label: &'a str,
    pub better: Better,
    pub means: &'a [f64],
    pub paired: &'a [Option<Paired>],
}

fn runs_view<'a>(runs: &'a [Run], policies: &[String]) -> Vec<RunView<'a>> {
    runs.iter()
        .map(|r| RunView {
            policy: &r.policy,
            policy_idx: policies.iter().position(|p| *p == r.policy).unwrap_or(0),
            unit: r.unit,
            summary: &r.summary,
            jcts: &r.jcts,
            waits: &r.waits,
            tenant_gpu_s: &r.tenant_gpu_s,
            timeline: &r.timeline,
        })
        .collect()
}

fn reports_view(reports: &[MetricReport]) -> Vec<MetricView<'_>> {
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
    for m in reports {
        let arrow = match m.better {
            Better::Lower => "lower is better",
            Better::Higher => "higher is better",
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
