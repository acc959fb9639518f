//! `lachesis simulate`: one trace, one cluster, one policy.

use crate::progress::RunProgress;
use anyhow::{Context, Result, bail};
use lachesis_agent::harness::{self, load_trace, resolve_cluster};
use lachesis_env::cluster::ClusterSpec;
use lachesis_env::job::Trace;
use lachesis_env::metrics::{Summary, write_jobs_csv, write_timeline_csv};
use lachesis_env::policy::StarvationBound;
use lachesis_env::quota::load_admission;
use lachesis_env::sim::{SimConfig, SimResult, Simulator, parse_window, scale_to_load};
use lachesis_env::throughput::{
    ElasticRule, WorkloadRule, assign_elastic, assign_workloads, load_table,
};
use lachesis_env::trace::gavel_jobs::{GavelWorkload, gavel_workload};
use lachesis_env::units::parse_duration;
use std::fs;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Trace file in any format `lachesis trace stats` reads, detected from its header; it
    /// must have arrival and duration times (a static pod list is placed by `bench fgd`).
    #[arg(long, required_unless_present = "generate")]
    pub trace: Option<PathBuf>,
    /// Force the trace format (normalized, openb, itp, swf, dlrm, helios, sia-philly).
    #[arg(long)]
    pub format: Option<String>,
    /// Generate the trace instead of reading one: `gavel:RATE:JOBS[:SEED][:multi]`, Gavel's
    /// workload generator (Poisson arrivals at RATE jobs/h, its duration mixture and job
    /// templates; `multi`: its multi-GPU sizes). Jobs carry Gavel's templates as workload
    /// types: run with `--throughputs gavel`.
    #[arg(long, value_name = "gavel:RATE:JOBS[:SEED][:multi]", conflicts_with_all = ["trace", "format"])]
    pub generate: Option<String>,
    /// Cluster: a preset (openb, pai-2020, spot-2026, gavel, sia; an inventory on a throughput
    /// table's GPU models as pai-2020:gavel), a shape like 64x8:A100, a TOML file, or
    /// `auto[:G:MODEL@LOAD]`: the smallest cluster of G-GPU nodes (default 8 x V100) that holds
    /// the largest job at offered load LOAD (default 0.8), sized from the trace.
    #[arg(long)]
    pub cluster: String,
    /// Policy name, e.g. fifo/best-fit (see `lachesis policies`).
    #[arg(long, default_value = "fifo/best-fit")]
    pub policy: String,
    /// Seed for every random choice; same seed, same run.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Compress (or stretch) arrivals to this offered load on the cluster.
    #[arg(long, allow_negative_numbers = true)]
    pub load: Option<f64>,
    /// Replay only jobs submitted in FROM..TO (durations since the trace origin, e.g. 115d..120d).
    #[arg(long)]
    pub window: Option<String>,
    /// Pull the trace's run times towards their median (< 1) or spread them (> 1) on a log
    /// scale before anything else, as `compare --duration-spread` does (1 keeps them).
    #[arg(long, value_name = "S")]
    pub duration_spread: Option<f64>,
    /// Warm-up from the first submit, run but left out of the metrics (e.g. 6h).
    #[arg(long)]
    pub warmup: Option<String>,
    /// Ask the policy again on this period as well as after events (e.g. 5m). Default: the
    /// config's `tick_s`, else 10m for `las-preempt`, a learned policy's training tick for
    /// `rl:PATH`, else none.
    #[arg(long)]
    pub tick: Option<String>,
    /// Policy knobs (TOML, e.g. `[tiresias] thresholds_gpu_s = [3250.0, 7200.0]`).
    #[arg(long)]
    pub policy_config: Option<PathBuf>,
    /// The starvation bound below every policy: `auto` (4x the 90th percentile of finished
    /// jobs' run times, at least 1 h), `off`, or a duration (e.g. 12h); default: the config's
    /// `starvation_bound`, else auto (docs/simulator.md).
    #[arg(long)]
    pub starvation_bound: Option<String>,
    /// Quotas below every policy (docs/quotas.md): a quota file, or `equal` (each tenant with
    /// a job gets an equal share of the cluster, one cohort, borrowing allowed). A tenant's
    /// jobs go to the queue of its name, else to a queue `default`. Default: the config's
    /// `quotas`, else none.
    #[arg(long, value_name = "FILE|equal")]
    pub quotas: Option<String>,
    /// Simulation config file (TOML, fields of SimConfig); flags override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Skip (and count) jobs that can never fit the cluster, or that the --throughputs table
    /// rates at their size on no GPU model they may use, instead of failing.
    #[arg(long)]
    pub skip_unplaceable: bool,
    #[command(flatten)]
    pub hetero: HeteroArgs,
    /// Write summary.json, jobs.csv and timeline.csv here.
    #[arg(short = 'o', long)]
    pub out: Option<PathBuf>,
    /// Print the summary as JSON on stdout instead of a table.
    #[arg(long)]
    pub json: bool,
    /// No progress bar.
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

/// Workload types and throughput tables (`docs/heterogeneity.md`), for `simulate` and
/// `compare`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct HeteroArgs {
    /// Throughput table for jobs with a workload type: gavel, sia, or a table file. Typed jobs
    /// then run at the table's rate where they are placed; untyped jobs are unaffected.
    #[arg(long, value_name = "gavel|sia|FILE")]
    pub throughputs: Option<String>,
    /// Give the trace's untyped GPU jobs workload types by Gavel's or Sia's rule, drawn with
    /// SEED (default 0). Needs --throughputs to change the run.
    #[arg(long, value_name = "gavel|sia[:SEED]")]
    pub assign_workloads: Option<String>,
    /// Make typed whole-GPU jobs elastic by Pollux's rule: 1-GPU tasks, from 1 GPU to the
    /// largest size the --throughputs table rates their workload at (at most 64). Applied after
    /// --assign-workloads.
    #[arg(long, value_name = "pollux")]
    pub assign_elastic: Option<String>,
}

impl HeteroArgs {
    /// `trace` with workload types (`--assign-workloads`) and elastic ranges
    /// (`--assign-elastic`) assigned, the rules and seed added to its name so that every
    /// report names them.
    pub fn assign(&self, mut trace: Trace) -> Result<Trace> {
        let Some(text) = &self.assign_workloads else {
            return self.assign_ranges(trace);
        };
        let (rule, seed) = match text.split_once(':') {
            Some((rule, seed)) => (
                rule,
                seed.trim()
                    .parse::<u64>()
                    .with_context(|| format!("--assign-workloads {text}: bad seed"))?,
            ),
            None => (text.as_str(), 0),
        };
        let Some(rule) = WorkloadRule::parse(rule) else {
            bail!("--assign-workloads {text}: expected gavel or sia, optionally :SEED");
        };
        let (mut typed, how) = assign_workloads(&trace, rule, seed);
        typed.name = format!("{} (workloads {})", trace.name, how.label());
        trace = typed;
        self.assign_ranges(trace)
    }

    /// `trace` with elastic ranges (`--assign-elastic`), the rule added to its name.
    fn assign_ranges(&self, trace: Trace) -> Result<Trace> {
        let Some(text) = &self.assign_elastic else {
            return Ok(trace);
        };
        let Some(rule) = ElasticRule::parse(text) else {
            bail!("--assign-elastic {text}: expected pollux");
        };
        let Some(table) = &self.throughputs else {
            bail!(
                "--assign-elastic {text} needs --throughputs: the ranges are the sizes the \
                 table rates"
            );
        };
        let table = load_table(table).with_context(|| format!("--throughputs {table}"))?;
        let (mut elastic, how) = assign_elastic(&trace, &table, rule);
        if how.made_elastic == 0 {
            bail!(
                "--assign-elastic {text}: no job of {} could be made elastic (it needs typed \
                 whole-GPU jobs of workloads the table rates on more than one GPU; \
                 --assign-workloads types a trace)",
                trace.name
            );
        }
        elastic.name = format!("{} (elastic {})", trace.name, how.label());
        Ok(elastic)
    }

    /// `cluster` with the table (`--throughputs`) added to its name, so that every report
    /// names it.
    pub fn name_cluster(&self, mut cluster: ClusterSpec) -> ClusterSpec {
        if let Some(table) = &self.throughputs {
            cluster.name = format!("{} (throughputs {table})", cluster.name);
        }
        cluster
    }
}

fn sim_config(args: &Args) -> Result<SimConfig> {
    let mut cfg = match &args.config {
        Some(path) => {
            let text =
                fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            toml::from_str(&text)
                .with_context(|| format!("{}: invalid simulation config", path.display()))?
        }
        None => SimConfig::default(),
    };
    if let Some(seed) = args.seed {
        cfg.seed = seed;
    }
    let secs = |flag: &str, text: &str| -> Result<f64> {
        Ok(parse_duration(text)
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("--{flag}"))?
            .secs_f64())
    };
    if let Some(w) = &args.warmup {
        cfg.warmup_s = secs("warmup", w)?;
    }
    if let Some(t) = &args.tick {
        cfg.tick_s = secs("tick", t)?;
    } else if cfg.tick_s == 0.0 {
        // What the policy needs to work as designed: 10 min for las-preempt, a learned
        // policy's training tick.
        cfg.tick_s = harness::wants_tick_s(&args.policy);
    }
    cfg.skip_unplaceable |= args.skip_unplaceable;
    if let Some(b) = &args.starvation_bound {
        cfg.starvation_bound = parse_bound(b)?;
    }
    if let Some(table) = &args.hetero.throughputs {
        cfg.throughputs = Some(table.clone());
    }
    if let Some(q) = &args.quotas {
        cfg.quotas = Some(q.clone());
    }
    Ok(cfg)
}

/// `--quotas`, checked against the whole trace and cluster before any run, so that a bad
/// file or a tenant without a queue is reported once, named: the setting itself.
pub fn check_quotas(
    quotas: Option<&str>,
    trace: &Trace,
    cluster: &Arc<ClusterSpec>,
) -> Result<Option<String>> {
    let Some(q) = quotas else {
        return Ok(None);
    };
    load_admission(q, trace, cluster).with_context(|| format!("--quotas {q}"))?;
    Ok(Some(q.to_string()))
}

/// `--starvation-bound`: `auto`, `off` or a duration (`12h`, `3600s`, or plain seconds).
pub fn parse_bound(text: &str) -> Result<StarvationBound> {
    let t = text.trim();
    if t == "auto" || t == "off" || t.parse::<f64>().is_ok() {
        return StarvationBound::parse(t)
            .map_err(anyhow::Error::msg)
            .context("--starvation-bound");
    }
    let secs = parse_duration(t)
        .map_err(anyhow::Error::msg)
        .context("--starvation-bound: `auto`, `off` or a duration such as 12h")?
        .secs_f64();
    StarvationBound::parse(&secs.to_string())
        .map_err(anyhow::Error::msg)
        .context("--starvation-bound")
}

pub fn run(args: &Args) -> Result<()> {
    crate::compare::check_policy_names("--policy", std::slice::from_ref(&args.policy))?;
    let cfg = sim_config(args)?;
    if let Some(w) = harness::compare::gavel_checkpoint_warning(
        std::slice::from_ref(&args.policy),
        cfg.checkpoint_interval_s,
    ) {
        bail!("--policy {}: {w}", args.policy);
    }
    let mut trace = trace_source(
        args.trace.as_deref(),
        args.format.as_deref(),
        args.generate.as_deref(),
    )?;
    if let Some(spread) = args.duration_spread {
        trace = lachesis_env::sim::respread_durations(&trace, spread)
            .with_context(|| format!("--duration-spread {spread}"))?;
    }
    if let Some(w) = &args.window {
        let (from, to) = parse_window(w).context("--window")?;
        trace = trace.window(from, to);
        if trace.is_empty() {
            bail!(
                "--window {w}: no job of {} is submitted in that window",
                trace.name
            );
        }
    }
    trace = args.hetero.assign(trace)?;
    let spec = Arc::new(
        args.hetero
            .name_cluster(resolve_cluster(&args.cluster, &trace)?),
    );
    if let Some(load) = args.load {
        trace = scale_to_load(&trace, &spec, load).context("--load")?;
    }
    let policy_cfg = harness::read_policy_config(args.policy_config.as_deref())?;
    let mut options = harness::policy_options(&trace, cfg.seed, &policy_cfg);
    // The rate-reading parts (`colocate`, `elastic`) read the run's table.
    if let Some(table) = &cfg.throughputs {
        let loaded = lachesis_env::throughput::load_table(table)
            .with_context(|| format!("--throughputs {table}"))?;
        options.throughputs = Some(Arc::new(loaded));
    }
    let mut policy = harness::build(&args.policy, &options)?;
    check_quotas(cfg.quotas.as_deref(), &trace, &spec)?;
    let sim = Simulator::new(&trace, Arc::clone(&spec), &cfg)?;
    let mut bar = RunProgress::new(args.quiet || args.json);
    let result = sim.run(policy.as_mut(), &mut |p| bar.update(p));
    bar.finish();
    if result.summary.jobs == 0 {
        eprintln!("warning: no job was measured (is the warm-up longer than the trace?)");
    }
    if let Some((name, why)) = result.quota_blocked.first() {
        eprintln!(
            "warning: {} job(s) never started, blocked by their queue's quota; e.g. job {name}: \
             {why}",
            result.quota_blocked.len()
        );
    }
    if let Some(dir) = &args.out {
        write_outputs(dir, &result)?;
        if let Some(log) = policy.selection() {
            let path = dir.join("selection.json");
            let file =
                fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
            serde_json::to_writer_pretty(BufWriter::new(file), log)?;
        }
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&result.summary)?);
    } else {
        out!("{}", summary_table(&result.summary));
        if let Some(log) = policy.selection() {
            outln!("selector: {}", log.line());
        }
        if let Some(dir) = &args.out {
            outln!("outputs: {}", dir.display());
        }
    }
    // Never silently dropped: each job whose dependency can never be satisfied, as Slurm's
    // squeue reports it (on stderr under --json, whose stdout is the summary alone).
    for (name, dep) in &result.never_satisfied {
        let line = format!("job {name}: DependencyNeverSatisfied ({dep})");
        if args.json {
            eprintln!("{line}");
        } else {
            outln!("{line}");
        }
    }
    Ok(())
}

/// The trace of `--trace FILE` (named by its path) or of `--generate SPEC` (named by the
/// generator and its parameters), for `simulate` and `compare`.
pub fn trace_source(
    path: Option<&Path>,
    format: Option<&str>,
    generate: Option<&str>,
) -> Result<Trace> {
    match (path, generate) {
        (_, Some(spec)) => {
            let workload = GavelWorkload::parse(spec).context("--generate")?;
            gavel_workload(&workload).context("--generate")
        }
        (Some(path), None) => {
            let mut trace = load_trace(path, format)?;
            trace.name = path.display().to_string();
            Ok(trace)
        }
        (None, None) => bail!("give --trace FILE or --generate gavel:RATE:JOBS[:SEED][:multi]"),
    }
}

/// Writes `summary.json`, `jobs.csv`, `timeline.csv` into `dir` (created if missing).
pub fn write_outputs(dir: &Path, r: &SimResult) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let create = |name: &str| -> Result<BufWriter<fs::File>> {
        let path = dir.join(name);
        Ok(BufWriter::new(
            fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?,
        ))
    };
    serde_json::to_writer_pretty(create("summary.json")?, &r.summary)?;
    write_jobs_csv(create("jobs.csv")?, &r.jobs).context("writing jobs.csv")?;
    write_timeline_csv(create("timeline.csv")?, &r.timeline).context("writing timeline.csv")?;
    Ok(())
}

/// The human summary: one metric a line.
pub fn summary_table(s: &Summary) -> String {
    let h = |secs: f64| {
        if secs >= 3600.0 {
            format!("{secs:.0} s ({:.2} h)", secs / 3600.0)
        } else {
            format!("{secs:.1} s")
        }
    };
    let mut rows: Vec<(&str, String)> = vec![
        ("policy", s.policy.clone()),
        ("trace", s.trace.clone()),
        ("cluster", s.cluster.clone()),
        ("seed", s.seed.to_string()),
        (
            "jobs",
            format!(
                "{} measured, {} finished ({} warm-up, {} unplaceable skipped)",
                s.jobs, s.finished, s.warmup_jobs, s.skipped_unplaceable
            ),
        ),
        (
            "JCT avg / p50",
            format!("{} / {}", h(s.avg_jct_s), h(s.p50_jct_s)),
        ),
        (
            "JCT p95 / p99",
            format!("{} / {}", h(s.p95_jct_s), h(s.p99_jct_s)),
        ),
        (
            "wait avg / p95",
            format!("{} / {}", h(s.avg_wait_s), h(s.p95_wait_s)),
        ),
        (
            "bounded slowdown",
            format!("avg {:.2}, p95 {:.2}", s.avg_bsld, s.p95_bsld),
        ),
        ("makespan", h(s.makespan_s)),
        (
            "GPU allocation",
            format!("{:.1} %", 100.0 * s.gpu_alloc_rate),
        ),
        (
            "GPU fragmentation",
            format!("{:.1} %", 100.0 * s.frag_gpu_rate),
        ),
        (
            "CPU allocation",
            format!("{:.1} %", 100.0 * s.cpu_alloc_rate),
        ),
        ("avg queue length", format!("{:.1}", s.avg_queue_len)),
        ("tenant fairness", format!("{:.3} (Jain)", s.jain_fairness)),
        ("energy (GPUs)", format!("{:.1} kWh", s.energy_kwh)),
        (
            "preemptions",
            format!(
                "{} ({:.2} GPU-h lost)",
                s.preemptions, s.preemption_waste_gpu_h
            ),
        ),
        (
            "decisions",
            format!(
                "{} ({} rejected, {} policy errors)",
                s.decisions, s.rejected_decisions, s.policy_errors
            ),
        ),
    ];
    if let Some(q) = &s.quotas {
        let refused = format!("{q} ({} starts refused)", s.quota_vetoes);
        rows.push(("quotas", refused));
    }
    let mut queues = Vec::new();
    if let Some(m) = &s.quota_metrics {
        rows.push((
            "guarantees",
            format!(
                "{:.2} h violated, {:.2} GPU-h borrowed",
                m.guarantee_violation_h, m.borrowed_gpu_h
            ),
        ));
        rows.push((
            "quota preemption",
            format!(
                "{} preempted, {:.3} preemptions per start, {} priority inversions",
                m.quota_preemptions, m.preemptions_per_admission, m.priority_inversions
            ),
        ));
        // A line per queue, the first `SHOWN_QUEUES` of them (all are in `--json`).
        const SHOWN_QUEUES: usize = 12;
        for q in m.queues.iter().take(SHOWN_QUEUES) {
            queues.push((
                format!("  {}", q.queue),
                format!(
                    "wait {:.2} / {:.2} h, JCT {:.2} / {:.2} h (avg / p99), {:.2} h violated, \
                     {:.2} GPU-h borrowed",
                    q.avg_wait_s / 3600.0,
                    q.p99_wait_s / 3600.0,
                    q.avg_jct_s / 3600.0,
                    q.p99_jct_s / 3600.0,
                    q.guarantee_violation_h,
                    q.borrowed_gpu_h
                ),
            ));
        }
        if m.queues.len() > SHOWN_QUEUES {
            let more = m.queues.len() - SHOWN_QUEUES;
            queues.push(("  ...".into(), format!("{more} more queues in --json")));
        }
    }
    if let Some(p) = &s.pipelines {
        rows.push((
            "pipelines",
            format!(
                "{} ({} completed; never satisfied: {} job(s))",
                p.pipelines, p.completed, s.dependency_never_satisfied
            ),
        ));
        rows.push((
            "pipeline time avg",
            format!(
                "{} (critical-path slowdown {:.2}, ready stages waited {:.1} %)",
                h(p.avg_completion_s),
                p.avg_critical_path_slowdown,
                100.0 * p.ready_wait_share
            ),
        ));
    }
    let events = ("events", format!("{} in {:.4} s wall", s.events, s.wall_s));
    let line = |k: &str, v: &str| format!("{k:<18} {v}\n");
    rows.iter()
        .map(|(k, v)| line(k, v))
        .chain(queues.iter().map(|(k, v)| line(k, v)))
        .chain(std::iter::once(line(events.0, &events.1)))
        .collect()
}
