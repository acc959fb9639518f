//! `lachesis compare`: every policy on identical windows, loads and seeds, with paired
//! differences against a baseline (bootstrap 95% intervals), wins and losses, a terminal
//! table, `report.md`, `report.html` with SVG plots, `runs.csv` and `comparison.json`; and
//! `lachesis report DIR`. The harness itself is `lachesis_agent::harness`: this module parses
//! the arguments and prints.

use anyhow::{Context, Result, bail, ensure};
use lachesis_agent::harness::{self, CompareSpec, resolve_cluster};
use lachesis_env::units::parse_duration;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Trace to compare on (default: the bundled ITP cluster 10 excerpt).
    #[arg(long, default_value = "traces/itp/cluster10.csv")]
    pub trace: PathBuf,
    #[arg(long)]
    pub format: Option<String>,
    /// Compare on a generated trace instead: `gavel:RATE:JOBS[:SEED][:multi]` (as `simulate
    /// --generate`; run with `--throughputs gavel`).
    #[arg(long, value_name = "gavel:RATE:JOBS[:SEED][:multi]", conflicts_with_all = ["trace", "format"])]
    pub generate: Option<String>,
    /// Cluster: preset, shape, TOML file, or auto[:G:MODEL@LOAD] sized from the whole trace
    /// (default: 3 nodes of 8 V100s, where the excerpt's windows queue and the policies differ).
    #[arg(long, default_value = "3x8:V100")]
    pub cluster: String,
    /// Policies, comma-separated (default: the shipped model, the strongest heuristics, the
    /// adaptive Gittins policy among them, and plain FIFO for scale).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "rl:models/default,gittins/best-fit/gittins-preempt,tiresias/best-fit/las-preempt,sjf/best-fit,f1/best-fit/easy,fifo/best-fit/easy,fifo/best-fit"
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
    /// The starvation bound below every policy: `auto` (4x the 90th percentile of finished
    /// jobs' run times, at least 1 h), `off`, or a duration (e.g. 12h). A job waiting past it
    /// gets a reservation no policy may bypass (docs/simulator.md).
    #[arg(long, default_value = "auto")]
    pub starvation_bound: String,
    /// Quotas below every policy (docs/quotas.md): a quota file, or `equal` (each tenant with
    /// a job in a run's window gets an equal share of the cluster, one cohort, borrowing
    /// allowed). A tenant's jobs go to the queue of its name, else to a queue `default`.
    #[arg(long, value_name = "FILE|equal")]
    pub quotas: Option<String>,
    /// How often running jobs checkpoint (e.g. 30m, 1s; 0 = never), the same for every
    /// policy: a preempted job resumes from its last checkpoint. Default: the simulator's 30 min.
    #[arg(long)]
    pub checkpoint: Option<String>,
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
    #[command(flatten)]
    pub hetero: crate::simulate::HeteroArgs,
    /// Print only the verdict and where the report is (the tables are in the report).
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Run one part of the comparison, `I/N` (the units `u` with `u % N == I`, every policy
    /// on each), and write its runs to OUT/shards/I-of-N.json, for running it as N processes
    /// (a job array's tasks); `--merge` then writes the report.
    #[arg(long, value_name = "I/N", conflicts_with_all = ["merge", "tasks"])]
    pub shard: Option<String>,
    /// Write the report from OUT/shards/ (every shard of one split, run with the same
    /// arguments), exactly as one run would write it, wall time aside. Missing or foreign
    /// shards are refused, named.
    #[arg(long, conflicts_with = "tasks")]
    pub merge: bool,
    #[command(flatten)]
    pub slurm: crate::compare_slurm::SlurmArgs,
}

impl Args {
    /// A `lachesis compare` command line (program first) that gives these arguments, `--quiet`,
    /// `--shard`, `--merge` and the `--slurm*` flags aside: what each task of `--slurm` runs.
    pub fn argv(&self) -> Vec<String> {
        let mut v = vec!["lachesis".to_string(), "compare".to_string()];
        let mut flag = |name: &str, value: Option<String>| {
            if let Some(value) = value {
                v.push(format!("--{name}"));
                v.push(value);
            }
        };
        let list = |xs: &[String]| Some(xs.join(","));
        flag("trace", Some(self.trace.display().to_string()));
        flag("format", self.format.clone());
        flag("cluster", Some(self.cluster.clone()));
        flag("policies", list(&self.policies));
        flag("baseline", self.baseline.clone());
        flag("seeds", Some(self.seeds.to_string()));
        flag(
            "split",
            self.split
                .as_ref()
                .map(|s| s.iter().map(f64::to_string).collect::<Vec<_>>().join(",")),
        );
        flag("part", self.part.clone());
        flag(
            "duration-spread",
            self.duration_spread.map(|d| d.to_string()),
        );
        flag("windows", Some(self.windows.to_string()));
        flag("window-jobs", Some(self.window_jobs.to_string()));
        flag("load", list(&self.load));
        flag("tick", self.tick.clone());
        flag("starvation-bound", Some(self.starvation_bound.clone()));
        flag("quotas", self.quotas.clone());
        flag("checkpoint", self.checkpoint.clone());
        flag(
            "policy-config",
            self.policy_config.as_ref().map(|p| p.display().to_string()),
        );
        flag("threads", self.threads.map(|t| t.to_string()));
        flag("resamples", Some(self.resamples.to_string()));
        flag("throughputs", self.hetero.throughputs.clone());
        flag("assign-workloads", self.hetero.assign_workloads.clone());
        flag("assign-elastic", self.hetero.assign_elastic.clone());
        flag("out", Some(self.out.display().to_string()));
        v
    }
}

/// A duration flag (`10m`, `1s`) in seconds, if given; the error names the flag.
fn optional_secs(flag: &str, text: Option<&str>) -> Result<Option<f64>> {
    text.map(|t| {
        parse_duration(t)
            .map_err(anyhow::Error::msg)
            .with_context(|| flag.to_string())
            .map(|d| d.secs_f64())
    })
    .transpose()
}

pub fn run(args: &Args) -> Result<()> {
    run_comparison(args).map(|_| ())
}

/// What each selector (`select`) followed, and its cost: the wall time it spent choosing
/// against the comparison's (every policy's runs, inputs read), one line each.
pub fn selector_lines(c: &harness::Comparison) -> Vec<String> {
    let total_s = c.setup.wall_s;
    let runs_s: f64 = c.runs.iter().map(|r| r.summary.wall_s).sum();
    // Each selector once, in the comparison's order (runs are unit-major).
    let mut names: Vec<&str> = Vec::new();
    for r in c.runs.iter().filter(|r| r.summary.select_wall_s.is_some()) {
        if !names.contains(&r.policy.as_str()) {
            names.push(r.policy.as_str());
        }
    }
    names
        .into_iter()
        .map(|name| {
            let runs: Vec<&harness::Run> = c.runs.iter().filter(|r| r.policy == name).collect();
            let choosing: f64 = runs.iter().filter_map(|r| r.summary.select_wall_s).sum();
            let own: f64 = runs.iter().map(|r| r.summary.wall_s).sum();
            format!(
                "{name}: choosing took {choosing:.2} s, {:.1}% of the comparison's {total_s:.2} s \
                 ({:.1}% of the {runs_s:.2} s every run took; its own runs {own:.2} s); first \
                 unit: {}",
                100.0 * choosing / total_s.max(1e-9),
                100.0 * choosing / runs_s.max(1e-9),
                runs.first()
                    .and_then(|r| r.summary.selection.as_deref())
                    .unwrap_or("-")
            )
        })
        .collect()
}

/// `run`, returning the comparison (for `lachesis bench select`); `None` for a `--shard` run,
/// which writes its runs only.
pub fn run_comparison(args: &Args) -> Result<Option<harness::Comparison>> {
    let started = Instant::now();
    check_policy_names("--policies", &args.policies)?;
    let mut trace = crate::simulate::trace_source(
        Some(&args.trace),
        args.format.as_deref(),
        args.generate.as_deref(),
    )?;
    if let Some(spread) = args.duration_spread {
        trace = lachesis_env::sim::respread_durations(&trace, spread)
            .with_context(|| format!("--duration-spread {spread}"))?;
    }
    trace = args.hetero.assign(trace)?;
    let cluster = Arc::new(
        args.hetero
            .name_cluster(resolve_cluster(&args.cluster, &trace)?),
    );
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
    if let Some(b) = args
        .baseline
        .as_ref()
        .filter(|b| !args.policies.contains(b))
    {
        bail!("--baseline {b} is not among --policies");
    }
    let tick_s = optional_secs("--tick", args.tick.as_deref())?;
    let checkpoint_s = optional_secs("--checkpoint", args.checkpoint.as_deref())?;
    if let Some(w) = harness::compare::gavel_checkpoint_warning(
        &args.policies,
        checkpoint_s.unwrap_or(lachesis_env::sim::SimConfig::default().checkpoint_interval_s),
    ) {
        bail!("--policies: {w}");
    }
    let spec = CompareSpec {
        policies: args.policies.clone(),
        baseline: args.baseline.clone(),
        seeds: args.seeds,
        windows: args.windows,
        window_jobs: args.window_jobs,
        loads: parse_loads(&args.load)?,
        tick_s,
        policy_config: harness::read_policy_config(args.policy_config.as_deref())?,
        threads: args.threads,
        resamples: args.resamples,
        throughputs: args.hetero.throughputs.clone(),
        starvation_bound: crate::simulate::parse_bound(&args.starvation_bound)?,
        quotas: crate::simulate::check_quotas(args.quotas.as_deref(), &trace, &cluster)?,
        checkpoint_s,
        command: command_line(),
    };
    let shards = args.out.join("shards");
    if let Some(array) = args.slurm.array() {
        crate::compare_slurm::run(&array, &args.argv(), &args.out)?;
    }
    if let Some(text) = &args.shard {
        let shard = harness::Shard::parse(text).context("--shard")?;
        let runs = harness::compare_shard(&trace, cluster, &spec, &harness::build, shard)?;
        std::fs::create_dir_all(&shards)
            .with_context(|| format!("creating {}", shards.display()))?;
        let path = shards.join(shard.file_name());
        std::fs::write(&path, serde_json::to_string(&runs)?)
            .with_context(|| format!("writing {}", path.display()))?;
        outln!(
            "shard {}/{}: {} runs in {:.1} s: {}",
            shard.index,
            shard.count,
            runs.runs.len(),
            started.elapsed().as_secs_f64(),
            path.display()
        );
        return Ok(None);
    }
    let mut comparison = if args.merge || args.slurm.tasks.is_some() {
        harness::merge(
            &trace,
            cluster,
            &spec,
            &harness::build,
            read_shards(&shards)?,
        )?
    } else {
        harness::compare(&trace, cluster, &spec, &harness::build)?
    };
    for warning in comparison.warnings() {
        eprintln!("warning: {warning}");
    }
    // The wall time covers reading the inputs too, as it always has.
    comparison.setup.wall_s = started.elapsed().as_secs_f64();
    harness::report::write(&args.out, &comparison, lachesis_serve::ui::STYLE_CSS)?;
    if !args.quiet {
        out!("{}", comparison.terminal_table());
    }
    if let Some(v) = &comparison.setup.verdict {
        outln!("\n{v}");
    }
    for line in &comparison.setup.captured_gap {
        outln!("{line}");
    }
    for line in selector_lines(&comparison) {
        outln!("{line}");
    }
    outln!("report: {}", args.out.join("report.md").display());
    Ok(Some(comparison))
}

/// The command line for the report, without `--shard I/N`, `--merge` and `--slurm*`: the
/// shards and the merge of a split report the comparison they make together.
fn command_line() -> String {
    let mut drop = vec!["--shard", "--merge"];
    drop.extend(crate::compare_slurm::FLAGS);
    crate::compare_slurm::without_flags(std::env::args(), &drop).join(" ")
}

/// Every shard file in `dir` (`*.json`), sorted by name; an unreadable one is refused, named.
fn read_shards(dir: &std::path::Path) -> Result<Vec<harness::ShardRuns>> {
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("--merge: reading {} (run the shards first)", dir.display()))?;
    let mut paths: Vec<PathBuf> = entries
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("--merge: reading {}", dir.display()))?;
    paths.retain(|p| p.extension().is_some_and(|e| e == "json"));
    paths.sort();
    paths
        .iter()
        .map(|p| {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            serde_json::from_str(&text)
                .with_context(|| format!("{}: not a shard's runs", p.display()))
        })
        .collect()
}

/// Refuses, before any work, a heuristic name in `policies` that names no registered parts:
/// the error lists the parts it could name and points to `lachesis policies`. Learned
/// policies (`rl:PATH`) are checked when their model is loaded.
pub fn check_policy_names(flag: &str, policies: &[String]) -> Result<()> {
    for p in policies {
        if lachesis_agent::Deciding::parse(p).is_none() {
            lachesis_env::policy::reads_throughputs(p).map_err(|e| {
                anyhow::anyhow!("{flag}: {e}; `lachesis policies` describes every part")
            })?;
        }
    }
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

/// `lachesis report DIR`: the page of a compare directory.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// A `lachesis compare --out` directory (its comparison.json and plots are read).
    dir: PathBuf,
    /// The page to write (default: DIR/report.html).
    #[arg(short = 'o', long)]
    out: Option<PathBuf>,
}

/// Writes the HTML page of the compare directory `args.dir` (in the dashboard's look) again.
pub fn report(args: &ReportArgs) -> Result<()> {
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| args.dir.join("report.html"));
    harness::report::rewrite_page(&args.dir, &out, lachesis_serve::ui::STYLE_CSS)?;
    outln!("report: {}", out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn argv_gives_back_every_argument() {
        let given = "lachesis compare --trace t.csv --format itp --cluster 2x8:V100 \
                     --policies a,b --baseline b --seeds 2 --split 0.7,0.15 --part validation \
                     --duration-spread 0.5 --windows 3 --window-jobs 80 --load 0.9,none \
                     --tick 10m --starvation-bound off --checkpoint 1s --policy-config p.toml \
                     --threads 2 --resamples 300 --throughputs gavel --assign-workloads gavel:7 \
                     --assign-elastic pollux --out o";
        let words: Vec<&str> = given.split_whitespace().collect();
        let parsed = Cli::try_parse_from(&words[1..]).expect("the arguments parse");
        assert_eq!(parsed.args.argv(), words);
        // And the defaults, given by nothing.
        let bare = Cli::try_parse_from(["compare"]).expect("no arguments parse");
        let again = Cli::try_parse_from(&bare.args.argv()[1..]).expect("argv parses");
        assert_eq!(format!("{:?}", again.args), format!("{:?}", bare.args));
    }
}
