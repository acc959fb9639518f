//! `lachesis replay LOG`: the service's decision log turned back into a trace and a cluster,
//! a summary of what was answered, then `lachesis compare` of the arms on that traffic.

use crate::compare;
use anyhow::{Context, Result, bail};
use lachesis_serve::replay;
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
    /// Seeds per run.
    #[arg(long, default_value_t = 3)]
    seeds: u64,
    /// Only summarise the log and write the trace; do not simulate.
    #[arg(long)]
    no_compare: bool,
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
    if args.no_compare {
        return Ok(());
    }
    let policies = if args.policies.is_empty() {
        let mut p: Vec<String> = s
            .deciders
            .keys()
            .flat_map(|d| d.split('+'))
            .filter(|d| !d.starts_with("model:") && !d.starts_with("none"))
            .map(str::to_string)
            .collect();
        p.sort();
        p.dedup();
        // The model arm as the service decides by default (`deciding`).
        let deciding = lachesis_serve::ServeConfig::default().deciding;
        p.push(format!("{}{}", deciding.prefix(), args.model));
        p
    } else {
        args.policies.clone()
    };
    compare::run(&compare::Args {
        trace: trace_path,
        format: None,
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
        policy_config: None,
        out: args.out.join("compare"),
        threads: None,
        resamples: 2000,
    })
}
