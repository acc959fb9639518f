//! `lachesis simulate`: one trace, one cluster, one policy.

use crate::progress::RunProgress;
use anyhow::{Context, Result, bail};
use lachesis_env::cluster::{ClusterSpec, load_cluster};
use lachesis_env::job::Trace;
use lachesis_env::metrics::{Summary, write_jobs_csv, write_timeline_csv};
use lachesis_env::policy::{PolicyConfig, PolicyOptions};
use lachesis_env::sim::{SimConfig, SimResult, Simulator, SizingRule, parse_window, scale_to_load};
use lachesis_env::trace::{ReadReport, read_trace};
use lachesis_env::units::{SimTime, parse_duration};
use std::fs;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Trace file in any format `lachesis trace stats` reads, detected from its header; it
    /// must have arrival and duration times (a static pod list is placed by `bench fgd`).
    #[arg(long)]
    pub trace: PathBuf,
    /// Force the trace format (normalized, openb, itp, swf, dlrm, helios, sia-philly).
    #[arg(long)]
    pub format: Option<String>,
    /// Cluster: a preset (openb, pai-2020, spot-2026), a shape like 64x8:A100, a TOML file, or
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
    /// Simulation config file (TOML, fields of SimConfig); flags override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Skip (and count) jobs that can never fit the cluster instead of failing.
    #[arg(long)]
    pub skip_unplaceable: bool,
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

/// A cluster by preset, shape or file, or sized from `trace` for `auto[...]`.
pub fn resolve_cluster(arg: &str, trace: &Trace) -> Result<ClusterSpec> {
    match SizingRule::parse(arg) {
        Some(rule) => Ok(rule?.size(trace)?),
        None => Ok(load_cluster(arg)?),
    }
}

/// Reads a trace to replay, forcing `format` if given; errors name the file. A static
/// workload is refused (see [`ensure_timed`]).
pub fn load_trace(path: &Path, format: Option<&str>) -> Result<Trace> {
    let format = format.map(crate::trace_cmd::parse_format).transpose()?;
    let read = read_trace(path, format)?;
    ensure_timed(path, &read.report)?;
    Ok(read.trace)
}

/// Refuses a trace read from a format without arrival and duration times (a static workload)
/// where its jobs would be replayed or written out with times, and says what to run instead.
pub fn ensure_timed(path: &Path, report: &ReadReport) -> Result<()> {
    if report.format.has_times() {
        return Ok(());
    }
    let p = path.display();
    bail!(
        "{p}: a static workload ({} format): its jobs have no arrival or duration times, so \
         it cannot be replayed; place it as the FGD experiment does with \
         `lachesis bench fgd --trace {p}`, or summarise it with `lachesis trace stats {p}`",
        report.format
    )
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
        cfg.tick_s = crate::policies::wants_tick_s(&args.policy);
    }
    cfg.skip_unplaceable |= args.skip_unplaceable;
    Ok(cfg)
}

pub fn run(args: &Args) -> Result<()> {
    let cfg = sim_config(args)?;
    let mut trace = load_trace(&args.trace, args.format.as_deref())?;
    trace.name = args.trace.display().to_string();
    if let Some(w) = &args.window {
        let (from, to) = parse_window(w).context("--window")?;
        trace = trace.window(from, to);
        if trace.is_empty() {
            bail!(
                "--window {w}: no job of {} is submitted in that window",
                args.trace.display()
            );
        }
    }
    let spec = Arc::new(resolve_cluster(&args.cluster, &trace)?);
    if let Some(load) = args.load {
        trace = scale_to_load(&trace, &spec, load).context("--load")?;
    }
    let policy_cfg = policy_config(args.policy_config.as_deref())?;
    let mut policy =
        crate::policies::build(&args.policy, &policy_options(&trace, cfg.seed, &policy_cfg))?;
    let sim = Simulator::new(&trace, Arc::clone(&spec), &cfg)?;
    let mut bar = RunProgress::new(args.quiet || args.json);
    let result = sim.run(policy.as_mut(), &mut |p| bar.update(p));
    bar.finish();
    if result.summary.jobs == 0 {
        eprintln!("warning: no job was measured (is the warm-up longer than the trace?)");
    }
    if let Some(dir) = &args.out {
        write_outputs(dir, &result)?;
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&result.summary)?);
    } else {
        out!("{}", summary_table(&result.summary));
        if let Some(dir) = &args.out {
            outln!("outputs: {}", dir.display());
        }
    }
    Ok(())
}

/// What policies are built with: the seed, and the trace's true durations for the explicitly
/// named `*-oracle` orderings (upper bounds); every other part ignores them.
pub fn policy_options(trace: &Trace, seed: u64, config: &PolicyConfig) -> PolicyOptions {
    let durations: Vec<SimTime> = trace
        .jobs()
        .iter()
        .map(|j| trace.true_duration(j.id))
        .collect();
    PolicyOptions {
        seed,
        oracle_durations: Some(durations.into()),
        tiresias: config.tiresias.clone(),
        gittins: config.gittins.clone(),
    }
}

/// Reads a policy config file (`[tiresias]` ...; see `PolicyConfig`), or the defaults.
pub fn policy_config(path: Option<&Path>) -> Result<PolicyConfig> {
    let Some(path) = path else {
        return Ok(PolicyConfig::default());
    };
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("{}: invalid policy config", path.display()))
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
    let rows: Vec<(&str, String)> = vec![
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
        ("events", format!("{} in {:.4} s wall", s.events, s.wall_s)),
    ];
    rows.iter().map(|(k, v)| format!("{k:<18} {v}\n")).collect()
}
