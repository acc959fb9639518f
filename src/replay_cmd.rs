//! `lachesis replay LOG`: the service's decision log turned back into a trace and a cluster,
//! a summary of what was answered, then `lachesis compare` of the arms on that traffic, and
//! the arm verdict: the model arm against the heuristic arm on the recent traffic, as the
//! service's guard judges it (`lachesis_serve::verdict`).

use crate::compare;
use anyhow::{Context, Result, bail};
use lachesis_agent::harness;
use lachesis_serve::replay::{self, Replayed};
use lachesis_serve::selection;
use lachesis_serve::verdict::{self, Arms, VerdictSpec};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The decision log (`decision_log.path` of serve.toml); its rotated files are read too.
    log: PathBuf,
    /// Where the rebuilt trace, cluster and comparison go.
    #[arg(short = 'o', long, default_value = "out/replay")]
    out: PathBuf,
    /// Policies to compare (default: the heuristics that answered in the log, then
    /// `rl-batched:MODEL`, the model arm as the service decides by default; name
    /// `rl:MODEL` for a service configured `deciding = "stepwise"`).
    #[arg(long, value_delimiter = ',')]
    policies: Vec<String>,
    /// The model directory standing for the model arm.
    #[arg(long, default_value = "models/default")]
    model: String,
    /// Seeds per run (the verdict averages them within each window).
    #[arg(long, default_value_t = 3)]
    seeds: u64,
    /// Only summarise the log and write the trace; do not simulate (no verdict either,
    /// unless `--verdict`).
    #[arg(long)]
    no_compare: bool,
    /// Judge the model arm against the heuristic arm on the recent traffic, as the service's
    /// guard does; given by default when the log holds answers of both arms (shadow or A/B
    /// routing, or both the model and the baseline arm).
    #[arg(long)]
    verdict: bool,
    /// The model arm's policy for the verdict (default: `rl-batched:MODEL`, the model as the
    /// service decides by default).
    #[arg(long, value_name = "POLICY")]
    model_arm: Option<String>,
    /// The heuristic arm's policy for the verdict (default: the heuristic that answered most
    /// in the log: the service's baseline).
    #[arg(long, value_name = "POLICY")]
    heuristic_arm: Option<String>,
    /// What the service's selector (`[guard] candidates`) would follow on the recent
    /// traffic: the heuristic arm, these candidates and the model arm, each run on the same
    /// windows; the line says which and why (the arm followed before: the model arm).
    #[arg(long, value_delimiter = ',', value_name = "POLICY,...")]
    select: Vec<String>,
    /// The selector's hysteresis: a share of the followed arm's average JCT.
    #[arg(long, default_value_t = 0.02)]
    hysteresis: f64,
    /// Verdict: the most recent finished jobs judged, at most.
    #[arg(long, default_value_t = VerdictSpec::default().recent_jobs)]
    recent_jobs: usize,
    /// Verdict: only jobs submitted within this many hours before the log's end (0: no limit).
    #[arg(long, default_value_t = VerdictSpec::default().recent_hours)]
    recent_hours: f64,
    /// Verdict: jobs per window (each window is one unit of the paired comparison).
    #[arg(long, default_value_t = VerdictSpec::default().window_jobs)]
    window_jobs: usize,
    /// Verdict: fewer recent finished jobs than this is too little traffic to judge.
    #[arg(long, default_value_t = VerdictSpec::default().min_jobs)]
    min_jobs: usize,
    /// Leave the comparison's tables out (they are in OUT/compare/report.md).
    #[arg(short = 'q', long)]
    quiet: bool,
}

pub fn run(args: &Args) -> Result<()> {
    let files = replay::files(&args.log);
    if files.is_empty() {
        bail!("{}: no decision log there", args.log.display());
    }
    let r = replay::replay(&files)?;
    let s = &r.summary;
    outln!(
        "decision log: {} records in {} file(s); {} placements, {} preemptions; median decision {} us",
        s.records,
        files.len(),
        s.placements,
        s.preemptions,
        s.median_decision_us
    );
    for (arm, n) in &s.arms {
        outln!("  arm {arm}: {n}");
    }
    for (d, n) in &s.deciders {
        outln!("  decided by {d}: {n}");
    }
    for (reason, n) in &s.fallbacks {
        outln!("  fallback {reason}: {n}");
    }
    if s.shadow > 0 {
        outln!(
            "  shadow: the model agreed with the returned answer on {} of {} requests ({:.1}%)",
            s.shadow_agree,
            s.shadow,
            100.0 * s.shadow_agree as f64 / s.shadow as f64
        );
    }
    outln!(
        "jobs: {} seen, {} finished while logged (replayed), {} still running at the end and {} \
         never started (left out)",
        s.jobs_seen,
        s.jobs_finished,
        s.jobs_running_at_end,
        s.jobs_never_started
    );
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let trace_path = args.out.join("trace.csv");
    let file = std::fs::File::create(&trace_path)
        .with_context(|| format!("creating {}", trace_path.display()))?;
    lachesis_env::trace::write_normalized(&r.trace, std::io::BufWriter::new(file))
        .with_context(|| format!("writing {}", trace_path.display()))?;
    let cluster_path = args.out.join("cluster.toml");
    std::fs::write(&cluster_path, &r.cluster_toml)
        .with_context(|| format!("writing {}", cluster_path.display()))?;
    outln!(
        "wrote {} and {}",
        trace_path.display(),
        cluster_path.display()
    );
    if !args.no_compare {
        run_compare(args, &r, trace_path, cluster_path)?;
    }
    if args.verdict || (s.both_arms() && !args.no_compare) {
        print_verdict(args, &r)?;
    }
    if !args.select.is_empty() {
        print_selection(args, &r)?;
    }
    Ok(())
}

/// The selector's choice on the recent traffic, one line.
fn print_selection(args: &Args, r: &Replayed) -> Result<()> {
    let spec = verdict_spec(args)?;
    if !(args.hysteresis.is_finite() && (0.0..1.0).contains(&args.hysteresis)) {
        bail!("--hysteresis: {} is not a share in [0, 1)", args.hysteresis);
    }
    let mut arms: Vec<String> = args
        .heuristic_arm
        .clone()
        .or_else(|| r.summary.heuristic_arm())
        .into_iter()
        .collect();
    for c in &args.select {
        if !arms.contains(c) {
            arms.push(c.clone());
        }
    }
    let model = args
        .model_arm
        .clone()
        .unwrap_or_else(|| default_model_arm(args));
    if !arms.contains(&model) {
        arms.push(model);
    }
    let before = arms.len() - 1;
    let s = selection::select(r, &arms, before, args.hysteresis, &spec, &harness::build)
        .context("the selector")?;
    for warning in &s.warnings {
        eprintln!("warning: {warning}");
    }
    outln!("{s}");
    Ok(())
}

/// The recent traffic the verdict and the selector judge, from the flags.
fn verdict_spec(args: &Args) -> Result<VerdictSpec> {
    let spec = VerdictSpec {
        recent_jobs: args.recent_jobs,
        recent_hours: args.recent_hours,
        window_jobs: args.window_jobs,
        min_jobs: args.min_jobs,
        seeds: args.seeds,
        ..VerdictSpec::default()
    };
    if let Err(e) = spec.validate() {
        bail!("{}: {}", e.field.flag(), e.message);
    }
    Ok(spec)
}

/// The model arm as the service decides by default (`deciding`), on `args.model`.
fn default_model_arm(args: &Args) -> String {
    let deciding = lachesis_serve::ServeConfig::default().deciding;
    format!("{}{}", deciding.prefix(), args.model)
}

fn run_compare(
    args: &Args,
    r: &Replayed,
    trace_path: PathBuf,
    cluster_path: PathBuf,
) -> Result<()> {
    let s = &r.summary;
    let policies = if args.policies.is_empty() {
        let mut p: Vec<String> = s.heuristics().into_keys().collect();
        p.push(default_model_arm(args));
        p
    } else {
        args.policies.clone()
    };
    compare::run(&compare::Args {
        trace: trace_path,
        format: None,
        generate: None,
        cluster: cluster_path.display().to_string(),
        policies,
        baseline: None,
        seeds: args.seeds,
        split: None,
        part: None,
        duration_spread: None,
        windows: 0,
        window_jobs: 100,
        load: vec!["none".into()],
        tick: None,
        starvation_bound: "auto".into(),
        quotas: None,
        checkpoint: None,
        policy_config: None,
        out: args.out.join("compare"),
        threads: None,
        resamples: 2000,
        hetero: Default::default(),
        quiet: args.quiet,
        shard: None,
        merge: false,
        slurm: Default::default(),
    })
}

/// The arm verdict on the recent traffic, one line (and the runs that left jobs unfinished,
/// on stderr).
fn print_verdict(args: &Args, r: &Replayed) -> Result<()> {
    let spec = verdict_spec(args)?;
    let heuristic = match args
        .heuristic_arm
        .clone()
        .or_else(|| r.summary.heuristic_arm())
    {
        Some(h) => h,
        None => bail!(
            "--heuristic-arm: no heuristic answered in the log; name the heuristic arm's policy"
        ),
    };
    let arms = Arms {
        model: args
            .model_arm
            .clone()
            .unwrap_or_else(|| default_model_arm(args)),
        heuristic,
    };
    let v = verdict::judge(r, &arms, &spec, &harness::build).context("the arm verdict")?;
    for warning in &v.warnings {
        eprintln!("warning: {warning}");
    }
    outln!("{v}");
    Ok(())
}
