//! `lachesis train --config FILE [--set path=value ...] --out models/NAME [--resume]`: trains a
//! policy (behaviour cloning from a heuristic, then PPO), keeps the best checkpoint on the
//! validation windows, then compares it with `lachesis compare` on the validation part of every
//! training trace and writes the model card from those tables.

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use lachesis_agent::harness::{load_trace, resolve_cluster};
use lachesis_agent::manifest::{CARD_FILE, Manifest};
use lachesis_agent::train::config::DataConfig;
use lachesis_agent::train::{Dataset, Progress, REPLAY_TEACHER, RunOptions, TrainConfig, train};
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Training config (TOML; see `models/default/train.toml`).
    #[arg(long, required_unless_present = "trace")]
    pub config: Option<PathBuf>,
    /// Start from this trained model's weights (fine-tuning). Without --config, with --trace:
    /// the quick recipe, its recorded training config on your trace (docs/training.md).
    #[arg(long = "from", value_name = "MODEL_DIR")]
    pub from: Option<PathBuf>,
    /// The quick recipe's trace: your cluster's own history (needs --from; no --config).
    #[arg(long, requires = "from", conflicts_with = "config")]
    pub trace: Option<PathBuf>,
    /// The quick recipe's trace format (default: detected from the header).
    #[arg(long, requires = "trace")]
    pub format: Option<String>,
    /// The quick recipe's cluster: a preset, a shape, a TOML cluster file or `auto`.
    #[arg(long, requires = "trace", default_value = "auto")]
    pub cluster: String,
    /// Override a config field, e.g. `--set ppo.total_steps=20000` (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
    /// With --from and --trace: the table the trace's typed jobs run at, and how it is typed.
    #[command(flatten)]
    pub hetero: crate::simulate::HeteroArgs,
    /// The model directory to write.
    #[arg(short = 'o', long)]
    pub out: PathBuf,
    /// Continue from OUT/checkpoint (same config and overrides).
    #[arg(long)]
    pub resume: bool,
    /// Skip the closing `lachesis compare` and model card.
    #[arg(long)]
    pub no_card: bool,
    /// Do not train: (re)write the model card of the model already in --out.
    #[arg(long, conflicts_with_all = ["resume", "no_card"])]
    pub card_only: bool,
    /// Validation windows per trace for the model card's comparison.
    #[arg(long, default_value_t = CARD_WINDOWS)]
    pub card_windows: usize,
    /// Offered loads of the model card's comparison.
    #[arg(long, value_delimiter = ',', default_value = CARD_LOADS)]
    pub card_loads: Vec<f64>,
    /// Seeds per window and load for the model card's comparison. The simulator draws nothing
    /// at random for deterministic policies, so extra seeds would only repeat their units and
    /// narrow the intervals falsely: windows and loads are the independent samples.
    #[arg(long, default_value_t = 1)]
    pub card_seeds: u64,
    /// No progress bar, and the model card's comparisons without their tables (the card
    /// and its reports hold them).
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// The model card's comparisons as Slurm job arrays (`--slurm TASKS` each; docs/sweeps.md).
    #[command(flatten)]
    pub slurm: crate::compare_slurm::SlurmArgs,
}

/// The model card's comparison: validation windows per trace, offered loads (as `f64`
/// prints them, so that `reproduce` can tell a default from a choice).
const CARD_WINDOWS: usize = 8;
const CARD_LOADS: &str = "0.8,0.9,1,1.1";

/// The baselines a model card compares against: every heuristic family of the library.
pub const CARD_BASELINES: &[&str] = &[
    "fifo/best-fit",
    "fifo/fgd",
    "fifo/best-fit/easy",
    "sjf/best-fit",
    "sjf/fgd",
    "srtf/best-fit",
    "tiresias/best-fit",
    "tiresias/best-fit/las-preempt",
    "gittins/best-fit",
    "gittins/best-fit/gittins-preempt",
    "wfp3/best-fit/easy",
    "f1/best-fit/easy",
    "drf/best-fit",
];

/// The card's further baselines on a trace typed by a throughput table: the
/// heterogeneity-aware, sharing and elastic heuristics (`docs/heterogeneity.md`).
pub const CARD_TYPED_BASELINES: &[&str] = &[
    "fifo/fastest",
    "tiresias/fastest/las-preempt",
    "het-las/fastest/las-preempt",
    "fifo/fastest/colocate",
];

/// The card's elastic baselines, on a trace with elastic jobs.
pub const CARD_ELASTIC_BASELINES: &[&str] = &[
    "fifo/fastest/elastic",
    "tiresias/fastest/las-preempt/elastic",
];

pub fn run(args: &Args) -> Result<()> {
    let cfg = resolve_config(args)?;
    let manifest = if args.card_only {
        Manifest::read(&args.out)?
    } else {
        let mut datasets = Vec::new();
        for d in &cfg.data {
            let path = Path::new(&d.trace);
            let mut trace = load_trace(path, d.format.as_deref())?;
            if d.spread != 1.0 {
                trace = lachesis_env::sim::respread_durations(&trace, d.spread)
                    .with_context(|| format!("{}: spread {}", d.trace, d.spread))?;
            }
            trace.name = d.label();
            let hetero = hetero_of(d);
            let trace = hetero
                .assign(trace)
                .with_context(|| format!("{}: workload types", d.trace))?;
            let cluster = Arc::new(
                hetero.name_cluster(
                    resolve_cluster(&d.cluster, &trace)
                        .with_context(|| format!("{}: cluster `{}`", d.trace, d.cluster))?,
                ),
            );
            datasets.push(Dataset {
                name: trace.name.clone(),
                trace,
                cluster,
                throughputs: d.throughputs.clone(),
            });
        }
        let options = RunOptions {
            resume: args.resume,
            git_revision: git_revision(),
        };
        let mut bar = Bar::new(args.quiet);
        let manifest = train(&cfg, &datasets, &args.out, &options, &mut |p| {
            bar.update(&p)
        })?;
        bar.finish();
        manifest
    };
    outln!("model: {}", args.out.display());
    outln!(
        "trained {} PPO iterations, {} env steps in {:.0} s; kept iteration {}",
        manifest.training.ppo_iterations,
        manifest.training.env_steps,
        manifest.training.wall_s,
        manifest.training.best_iteration
    );
    for r in &manifest.validation {
        outln!(
            "  {:<32} avg JCT {:>10.0} s  p99 {:>10.0} s  alloc {:.3}  unfinished {}",
            r.policy,
            r.avg_jct_s,
            r.p99_jct_s,
            r.gpu_alloc,
            r.unfinished
        );
    }
    if args.no_card {
        write_card(args, &cfg, &manifest, &[], &[])?;
        return Ok(());
    }
    let mut sections = Vec::new();
    let mut headroom = Vec::new();
    let held_out = cfg.card.iter().map(|d| (d, true));
    for (d, held) in cfg.data.iter().map(|d| (d, false)).chain(held_out) {
        let mut name = Path::new(&d.trace)
            .file_stem()
            .map_or_else(|| "trace".into(), |s| s.to_string_lossy().to_string());
        if d.spread != 1.0 {
            name = format!("{name}-spread{}", d.spread);
        }
        // A copy on another named cluster (an inventory on a table's models, say) gets its
        // own directory; a typed copy too, beside the untyped one.
        if d.cluster != "auto" && Some(&d.cluster) != d.throughputs.as_ref() {
            name = format!("{name}-{}", d.cluster.replace([':', '/', '.'], "-"));
        }
        if let Some(t) = &d.throughputs {
            let table = Path::new(t)
                .file_stem()
                .map_or_else(|| t.clone(), |s| s.to_string_lossy().to_string());
            if !name.ends_with(&format!("-{table}")) {
                name = format!("{name}-{table}");
            }
        }
        if d.assign_elastic.is_some() {
            name = format!("{name}-elastic");
        }
        let out = args.out.join("compare").join(&name);
        let model = format!("rl:{}", args.out.display());
        let mut policies = vec![model.clone()];
        policies.extend(CARD_BASELINES.iter().map(|s| s.to_string()));
        if d.throughputs.is_some() {
            policies.extend(CARD_TYPED_BASELINES.iter().map(|s| s.to_string()));
        }
        if d.assign_elastic.is_some() {
            policies.extend(CARD_ELASTIC_BASELINES.iter().map(|s| s.to_string()));
        }
        let hetero = hetero_of(d);
        let hetero_flags: String = d.hetero().map(|(f, v)| format!(" --{f} {v}")).collect();
        let compare = crate::compare::Args {
            trace: PathBuf::from(&d.trace),
            format: d.format.clone(),
            generate: None,
            cluster: d.cluster.clone(),
            policies,
            baseline: Some(model),
            seeds: args.card_seeds,
            split: Some(vec![cfg.split.train, cfg.split.validation]),
            part: Some("validation".into()),
            duration_spread: (d.spread != 1.0).then_some(d.spread),
            windows: args.card_windows,
            window_jobs: cfg.validation_window_jobs(),
            load: args.card_loads.iter().map(|l| l.to_string()).collect(),
            tick: Some("10m".into()),
            starvation_bound: "auto".into(),
            quotas: None,
            checkpoint: None,
            policy_config: None,
            out: out.clone(),
            threads: None,
            resamples: 2000,
            hetero,
            quiet: args.quiet,
            shard: None,
            merge: false,
            slurm: args.slurm.clone(),
        };
        crate::compare::run(&compare)
            .with_context(|| format!("comparing on the validation part of {}", d.trace))?;
        let spread = if d.spread != 1.0 {
            format!(" --duration-spread {}", d.spread)
        } else {
            String::new()
        };
        let command = format!(
            "lachesis compare --trace {}{spread} --cluster {}{hetero_flags} --split {},{} \
             --part validation --windows {} --window-jobs {} --load {} --seeds {} --tick 10m \
             --baseline rl:{} --policies {} --out {}",
            d.trace,
            d.cluster,
            cfg.split.train,
            cfg.split.validation,
            args.card_windows,
            cfg.validation_window_jobs(),
            compare.load.join(","),
            args.card_seeds,
            args.out.display(),
            compare.policies.join(","),
            out.display()
        );
        let report = std::fs::read_to_string(out.join("report.md"))
            .with_context(|| format!("reading {}", out.join("report.md").display()))?;
        let title = if held {
            format!("{} (held out: never trained on)", d.scenario())
        } else {
            d.scenario()
        };
        headroom.push(Headroom::read(&title, &out.join("comparison.json"))?);
        sections.push((title, command, report));
    }
    write_card(args, &cfg, &manifest, &headroom, &sections)?;
    outln!("model card: {}", args.out.join(CARD_FILE).display());
    Ok(())
}

/// The run's config: `--config` with its overrides (and `--from` as `init`), or the quick
/// fine-tuning recipe (`quick_recipe`) on `--trace`.
/// A `[[data]]` entry's table and typing rules, as `simulate` and `compare` take them.
fn hetero_of(d: &DataConfig) -> crate::simulate::HeteroArgs {
    crate::simulate::HeteroArgs {
        throughputs: d.throughputs.clone(),
        assign_workloads: d.assign_workloads.clone(),
        assign_elastic: d.assign_elastic.clone(),
    }
}

fn resolve_config(args: &Args) -> Result<TrainConfig> {
    if args.config.is_some()
        && (args.hetero.throughputs.is_some()
            || args.hetero.assign_workloads.is_some()
            || args.hetero.assign_elastic.is_some())
    {
        anyhow::bail!(
            "--throughputs, --assign-workloads and --assign-elastic go with --from and --trace; \
             with --config, give them in the [[data]] entries"
        );
    }
    let mut cfg = if let Some(path) = &args.config {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        TrainConfig::parse(&text, &args.set)
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("{}: invalid training config", path.display()))?
    } else {
        let (Some(from), Some(trace)) = (&args.from, &args.trace) else {
            anyhow::bail!("give --config FILE, or --from MODEL_DIR with --trace FILE");
        };
        let manifest = Manifest::read(from)?;
        let base = TrainConfig::parse(&manifest.training.config, &[])
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("{}: the model's recorded training config", from.display()))?;
        let jobs = load_trace(trace, args.format.as_deref())?.len();
        let data = DataConfig {
            trace: trace.display().to_string(),
            format: args.format.clone(),
            cluster: args.cluster.clone(),
            spread: 1.0,
            throughputs: args.hetero.throughputs.clone(),
            assign_workloads: args.hetero.assign_workloads.clone(),
            assign_elastic: args.hetero.assign_elastic.clone(),
        };
        let (quick, dropped) = quick_recipe(base, data, jobs)?;
        if !dropped.is_empty() {
            eprintln!(
                "note: left out of bc.candidates and eval.baselines, as they read a throughput \
                 table and {} has none (--throughputs gives it one): {}",
                trace.display(),
                dropped.join(", ")
            );
        }
        TrainConfig::parse(&quick.to_toml(), &args.set)
            .map_err(anyhow::Error::msg)
            .context("the quick recipe with --set")?
    };
    if let Some(from) = &args.from {
        cfg.init = from.display().to_string();
    }
    Ok(cfg)
}

/// Fine-tuning on one operator's history, in minutes: the base model's own environment,
/// model and reward (so its weights read the same features), the teacher chosen by replay
/// on the trace's training part, a full cloning pass and a short PPO run, validation on
/// windows as long as the validation part allows (at most the base's). The card compares on
/// that trace only: the base's held-out scenarios (`[[card]]`) are its own recipe's, on data
/// that need not be here. On a trace without a throughput table, the base's teacher
/// candidates and baselines that read one cannot run: they are left out, and returned.
fn quick_recipe(
    mut cfg: TrainConfig,
    data: DataConfig,
    trace_jobs: usize,
) -> Result<(TrainConfig, Vec<String>)> {
    let part = |f: f64| (trace_jobs as f64 * f) as usize;
    let mut dropped = Vec::new();
    if data.throughputs.is_none() {
        let mut runnable = |names: &mut Vec<String>, field: &str| -> Result<()> {
            let mut kept = Vec::with_capacity(names.len());
            for n in names.drain(..) {
                let reads = lachesis_env::policy::reads_throughputs(&n)
                    .with_context(|| format!("the model's recorded training config: {field}"))?;
                if !reads {
                    kept.push(n);
                } else if !dropped.contains(&n) {
                    dropped.push(n);
                }
            }
            *names = kept;
            Ok(())
        };
        runnable(&mut cfg.bc.candidates, "bc.candidates")?;
        runnable(&mut cfg.eval.baselines, "eval.baselines")?;
    }
    cfg.data = vec![data];
    cfg.card = Vec::new();
    cfg.bc.teacher = REPLAY_TEACHER.into();
    cfg.bc.samples = 16_000;
    cfg.bc.epochs = 12;
    cfg.bc.lr = 1e-3;
    cfg.ppo.total_steps = 20_000;
    cfg.ppo.num_envs = 4;
    cfg.eval.every = 5;
    cfg.eval.windows = 2;
    cfg.windows.jobs = cfg.windows.jobs.min(part(cfg.split.train).max(1));
    cfg.eval.window_jobs = cfg
        .validation_window_jobs()
        .min(part(cfg.split.validation).max(1));
    Ok((cfg, dropped))
}

/// The command that reproduces this run, as the card quotes it.
fn reproduce(args: &Args) -> String {
    let mut c = String::from("lachesis train");
    if let Some(p) = &args.config {
        c += &format!(" --config {}", p.display());
    }
    if let Some(p) = &args.from {
        c += &format!(" --from {}", p.display());
    }
    if let Some(p) = &args.trace {
        c += &format!(" --trace {} --cluster {}", p.display(), args.cluster);
        if let Some(f) = &args.format {
            c += &format!(" --format {f}");
        }
    }
    for o in &args.set {
        c += &format!(" --set {o}");
    }
    c += &format!(" --out {}", args.out.display());
    if args.card_windows != CARD_WINDOWS {
        c += &format!(" --card-windows {}", args.card_windows);
    }
    let loads: Vec<String> = args.card_loads.iter().map(f64::to_string).collect();
    let loads = loads.join(",");
    if loads != CARD_LOADS {
        c += &format!(" --card-loads {loads}");
    }
    if args.card_seeds != 1 {
        c += &format!(" --card-seeds {}", args.card_seeds);
    }
    c
}

/// The model's captured share from a comparison's `captured gap` lines: `12.3% [95% CI 4.5,
/// 20.1]`, `none to capture`, or `-` where the comparison has none.
fn captured_of(lines: &serde_json::Value) -> String {
    let Some(line) = lines
        .as_array()
        .and_then(|l| l.first())
        .and_then(|l| l.as_str())
    else {
        return "-".into();
    };
    if line.contains("none to capture") {
        return "none to capture".into();
    }
    match (line.find(" closes "), line.find(" of the distance")) {
        (Some(a), Some(b)) if a + 8 <= b => line[a + 8..b].to_string(),
        _ => "-".into(),
    }
}

/// One trace's line of the card's summary, read back from its `comparison.json` (the model
/// is that comparison's baseline, first among its policies).
#[derive(Debug, Clone, PartialEq)]
struct Headroom {
    trace: String,
    cluster: String,
    /// The baseline with the lowest mean average JCT, and that mean.
    best: String,
    best_jct_s: f64,
    model_jct_s: f64,
    /// The best heuristic minus the model, per unit: mean and 95% interval.
    diff: (f64, f64, f64),
    /// The mean lower bound of the average JCT, and the best heuristic's reducible share (%).
    bound_s: f64,
    best_reducible_pct: f64,
    /// The share of the distance from the best heuristic to the bound the model closes, with
    /// its 95% interval, as `compare` reports it (`captured gap`).
    captured: String,
    /// Tails, the model's then the best heuristic's: p99 JCT and the longest wait, seconds.
    p99_jct_s: (f64, f64),
    max_wait_s: (f64, f64),
}

impl Headroom {
    fn read(trace: &str, path: &Path) -> Result<Headroom> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let json: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
        let metric = |key: &str| -> Result<&Vec<serde_json::Value>> {
            json["metrics"]
                .as_array()
                .and_then(|ms| ms.iter().find(|m| m["key"] == key))
                .and_then(|m| m["policies"].as_array())
                .with_context(|| format!("{}: no metric `{key}`", path.display()))
        };
        let number = |v: &serde_json::Value, what: &str| -> Result<f64> {
            v.as_f64()
                .with_context(|| format!("{}: {what} is not a number", path.display()))
        };
        let mean = |row: &serde_json::Value| number(&row["mean"], "a policy's mean");
        let jct = metric("avg_jct_s")?;
        let (model, heuristics) = jct
            .split_first()
            .with_context(|| format!("{}: no policies", path.display()))?;
        let means: Vec<f64> = heuristics.iter().map(mean).collect::<Result<_>>()?;
        let (best_idx, best_jct_s) = means
            .iter()
            .copied()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .with_context(|| format!("{}: no baseline beside the model", path.display()))?;
        let best = &heuristics[best_idx];
        let paired = &best["vs_baseline"];
        let policy_row = |key: &str, i: usize| -> Result<f64> {
            let row = metric(key)?
                .get(i)
                .with_context(|| format!("{}: `{key}` lacks policy {i}", path.display()))?;
            mean(row)
        };
        Ok(Headroom {
            trace: trace.to_string(),
            cluster: json["setup"]["cluster"].as_str().unwrap_or("?").to_string(),
            best: best["policy"].as_str().unwrap_or("?").to_string(),
            best_jct_s,
            model_jct_s: mean(model)?,
            diff: (
                number(&paired["mean_diff"], "the paired difference")?,
                number(&paired["ci_low"], "the interval's low end")?,
                number(&paired["ci_high"], "the interval's high end")?,
            ),
            bound_s: policy_row("min_avg_jct_s", 0)?,
            best_reducible_pct: policy_row("reducible_jct_pct", best_idx + 1)?,
            captured: captured_of(&json["setup"]["captured_gap"]),
            p99_jct_s: (
                policy_row("p99_jct_s", 0)?,
                policy_row("p99_jct_s", best_idx + 1)?,
            ),
            max_wait_s: (
                policy_row("max_wait_s", 0)?,
                policy_row("max_wait_s", best_idx + 1)?,
            ),
        })
    }
}

/// The card's lines on the policy-improvement rounds: how their labels were made (never from
/// true durations) and how each round went.
fn write_improvement(
    s: &mut String,
    cfg: &TrainConfig,
    im: &lachesis_agent::manifest::ImproveRecord,
) -> Result<()> {
    let c = &cfg.improve;
    writeln!(
        s,
        "- policy improvement: {} DAgger-style rounds after cloning, {} states each (drawn at \
         rate {} from the model's own episodes). Labels by {}: for each state the teacher's \
         choice, up to {} of the model's highest-scored candidates and \"wait\" were each \
         followed by the {} over {} futures of {} s (the same futures for every action), and \
         the one with the least job-time in the system won. Each round's labels joined the \
         cloned decisions (weight {}) and the model was refitted to them.",
        c.rounds,
        c.states,
        c.sample_rate,
        im.label_source,
        c.max_actions,
        match c.rollout {
            lachesis_agent::train::config::ImproveRollout::Teacher => "teacher",
            lachesis_agent::train::config::ImproveRollout::Policy => "model (greedy)",
        },
        c.futures,
        c.horizon_s,
        c.label_weight
    )?;
    for (k, r) in im.rounds.iter().enumerate() {
        writeln!(
            s,
            "  - round {}: {} labels, {:.0}% unlike the teacher's choice, median {:.2} s to \
             label a state, validation score {:.4}",
            k + 1,
            r.labels,
            100.0 * r.teacher_disagreement,
            r.median_label_s,
            r.validation_score
        )?;
    }
    Ok(())
}

/// Writes OUT/MODEL_CARD.md: what the model is, how it was trained, and the comparison
/// tables (the `report.md` of each `lachesis compare` run, links to its plots adjusted).
fn write_card(
    args: &Args,
    cfg: &TrainConfig,
    manifest: &Manifest,
    headroom: &[Headroom],
    sections: &[(String, String, String)],
) -> Result<()> {
    let t = &manifest.training;
    let mut s = String::new();
    let name = args
        .out
        .file_name()
        .map_or_else(|| "model".into(), |n| n.to_string_lossy().to_string());
    writeln!(s, "# Model card: `{name}`\n")?;
    writeln!(
        s,
        "A learned scheduling policy for `lachesis` (`rl:{}`): a candidate-scoring network \
         (hidden width {}) choosing among (job, placement) candidates and \"wait\", feature \
         schema v{}. It sees only what a real scheduler knows at decision time (job specs, \
         user estimates where the trace has them, an online duration predictor learned from \
         finished jobs, the cluster's state); never a job's true duration.\n",
        args.out.display(),
        manifest.hidden,
        manifest.feature_schema_version
    )?;
    writeln!(
        s,
        "GPU rates: {}\n",
        if manifest.env.hide_rates {
            "hidden (`env.hide_rates`): every job's speeds are its GPU models' catalog speeds; \
             the throughput table's per-workload rates never reach the features"
        } else {
            "visible: a typed job's speeds on each GPU model are the throughput table's (what \
             profiling a job on each GPU type gives, as Sia does); an untyped job's are the \
             catalog's"
        }
    )?;
    writeln!(s, "## Training\n")?;
    writeln!(s, "- reproduce: `{}`", reproduce(args))?;
    if !cfg.init.is_empty() {
        writeln!(s, "- fine-tuned from: `{}`", cfg.init)?;
    }
    writeln!(s, "- git revision: `{}`", t.git_revision)?;
    writeln!(s, "- seed: {}", t.seed)?;
    writeln!(
        s,
        "- warm start: {}",
        t.teacher.as_ref().map_or("none".to_string(), |x| format!(
            "behaviour cloning from `{x}` ({} decisions, {} epochs){}{}",
            cfg.bc.samples,
            cfg.bc.epochs,
            if cfg.bc.dagger_rounds > 0 {
                format!(
                    ", then {} DAgger rounds ({} decisions each, the model driving and the \
                     teacher labelling)",
                    cfg.bc.dagger_rounds, cfg.bc.dagger_samples
                )
            } else {
                String::new()
            },
            if lachesis_agent::train::is_oracle(x) {
                "; a privileged teacher: it read the training windows' true durations, which \
                 reached the model only as its choices (the model's features hold none)"
            } else {
                ""
            }
        ))
    )?;
    if let Some(im) = &t.improve {
        write_improvement(&mut s, cfg, im)?;
    }
    let p = &cfg.ppo;
    let mode = if p.rollouts_per_input >= 2 {
        format!(
            " (Decima's: {} whole episodes per input, the input-dependent baseline{})",
            p.rollouts_per_input,
            if p.horizon_start > 0.0 {
                format!(
                    ", episode-length curriculum {} to {} window spans",
                    p.horizon_start, p.horizon_final
                )
            } else {
                String::new()
            }
        )
    } else {
        String::new()
    };
    writeln!(
        s,
        "- PPO{mode}: {} iterations, {} environment steps; {:.0} s wall on this machine; kept \
         iteration {} (best validation average JCT relative to `{}`)",
        t.ppo_iterations,
        t.env_steps,
        t.wall_s,
        t.best_iteration,
        cfg.eval.baselines.first().map_or("-", String::as_str)
    )?;
    writeln!(
        s,
        "- episodes: windows of {} jobs from each trace's training split, scaled to offered loads {:?}",
        cfg.windows.jobs, cfg.windows.loads
    )?;
    writeln!(
        s,
        "- data (time-ordered split: training jobs all precede validation jobs):\n"
    )?;
    writeln!(
        s,
        "| trace | cluster | jobs | train | validation | validation starts at (s) |"
    )?;
    writeln!(s, "|---|---|---|---|---|---|")?;
    for d in &t.data {
        writeln!(
            s,
            "| `{}` | `{}` | {} | {} | {} | {:.0} |",
            d.trace, d.cluster, d.jobs, d.train_fraction, d.validation_fraction, d.cuts_s[0]
        )?;
    }
    writeln!(
        s,
        "\nThe validation curve is in `curve.csv`, TensorBoard event files in `tb/`.\n"
    )?;
    writeln!(
        s,
        "## Validation during training (greedy, {} units)\n",
        manifest.validation.first().map_or(0, |r| r.units)
    )?;
    writeln!(
        s,
        "| policy | avg JCT (s) | p99 JCT (s) | GPU allocation | fragmentation | unfinished jobs |"
    )?;
    writeln!(s, "|---|---|---|---|---|---|")?;
    for r in &manifest.validation {
        writeln!(
            s,
            "| `{}` | {:.0} | {:.0} | {:.3} | {:.4} | {} |",
            r.policy, r.avg_jct_s, r.p99_jct_s, r.gpu_alloc, r.frag, r.unfinished
        )?;
    }
    if !headroom.is_empty() {
        writeln!(
            s,
            "\n## Summary: the model against the best heuristic, and the most any policy could win\n"
        )?;
        writeln!(
            s,
            "From the comparisons below (validation windows, mean over units). Every policy, the \
             model included, runs under the simulator's default starvation bound (`auto`, \
             docs/simulator.md); the model's training episodes run without it. The lower bound is \
             the average of each job's run time alone: no policy, not even one knowing every \
             duration, averages below it, so no policy can beat the best heuristic by more than \
             that heuristic's reducible share.\n"
        )?;
        writeln!(
            s,
            "| scenario | cluster | best heuristic | its avg JCT (s) | model (s) | model / best | heuristic - model (s), 95% CI | lower bound (s) | gap captured, 95% CI | most any policy could win |"
        )?;
        writeln!(s, "|---|---|---|---|---|---|---|---|---|---|")?;
        for h in headroom {
            writeln!(
                s,
                "| {} | `{}` | `{}` | {:.0} | {:.0} | {:.3} | {:+.1} [{:.1}, {:.1}] | {:.0} | {} | {}% |",
                h.trace,
                h.cluster,
                h.best,
                h.best_jct_s,
                h.model_jct_s,
                h.model_jct_s / h.best_jct_s,
                h.diff.0,
                h.diff.1,
                h.diff.2,
                h.bound_s,
                h.captured,
                // Two significant digits below 1%, so a share of 0.0035% does not print as 0.
                if h.best_reducible_pct >= 1.0 || h.best_reducible_pct == 0.0 {
                    format!("{:.1}", h.best_reducible_pct)
                } else {
                    let digits = (1.0 - h.best_reducible_pct.log10().floor()).clamp(1.0, 8.0);
                    format!("{:.*}", digits as usize, h.best_reducible_pct)
                }
            )?;
        }
    }
    if !headroom.is_empty() {
        writeln!(
            s,
            "\n## Tails: the model against the same best heuristic\n\nMeans over units of each \
             run's p99 JCT and its longest first wait (submission to first start).\n"
        )?;
        writeln!(
            s,
            "| scenario | best heuristic | p99 JCT, model (s) | best's (s) | model / best | longest first wait, model (s) | best's (s) | model / best |"
        )?;
        writeln!(s, "|---|---|---|---|---|---|---|---|")?;
        let ratio = |(m, b): (f64, f64)| {
            if b > 0.0 {
                format!("{:.3}", m / b)
            } else {
                "-".into()
            }
        };
        for h in headroom {
            writeln!(
                s,
                "| {} | `{}` | {:.0} | {:.0} | {} | {:.0} | {:.0} | {} |",
                h.trace,
                h.best,
                h.p99_jct_s.0,
                h.p99_jct_s.1,
                ratio(h.p99_jct_s),
                h.max_wait_s.0,
                h.max_wait_s.1,
                ratio(h.max_wait_s),
            )?;
        }
    }
    if !sections.is_empty() {
        writeln!(
            s,
            "\n## Against every baseline on validation windows (`lachesis compare`)\n"
        )?;
        writeln!(
            s,
            "Each table is the `report.md` of the command above it, with the model as the baseline: a cell's paired difference is that heuristic minus the model, so a positive avg-JCT difference means the model was better. Windows come from the validation part only, which training never saw. The units are windows x offered loads: neither the simulator nor these policies draw anything at random, so extra seeds would only repeat units and narrow the intervals falsely.\n"
        )?;
    }
    for (scenario, command, report) in sections {
        writeln!(s, "### {scenario}\n\n```sh\n{command}\n```\n")?;
        let body: String = report
            .lines()
            .skip_while(|l| l.starts_with("# "))
            .take_while(|l| !l.starts_with("## Plots"))
            .collect::<Vec<_>>()
            .join("\n");
        writeln!(s, "{body}\n")?;
    }
    writeln!(s, "## Limits\n")?;
    if manifest.env.las_preemption {
        writeln!(
            s,
            "- Its preemptions are the shortlist's: for a job that cannot start, one minimal victim set of a strictly lower class (QoS, then priority) or, failing that, Tiresias' LAS set of more-served jobs; it never chooses its own victims."
        )?;
    } else {
        writeln!(
            s,
            "- The action space places or waits; it preempts only jobs of a strictly lower class (QoS, then priority), so it cannot express Tiresias' LAS preemption among equals: `tiresias/best-fit/las-preempt` is a different kind of policy (preemptive) and is listed for reference."
        )?;
    }
    writeln!(
        s,
        "- The figures above are `rl:PATH`, which decides stepwise as in training. `lachesis serve` decides `batched` by default (`deciding` in serve.toml; `rl-batched:PATH` in `compare`); docs/serve.md compares the two."
    )?;
    writeln!(
        s,
        "- Trained on the traces above; on a cluster or workload unlike them, compare it first (`lachesis compare --policies rl:PATH,...`)."
    )?;
    let path = args.out.join(CARD_FILE);
    std::fs::write(&path, s).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

fn git_revision() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// A phase-aware progress bar with ETA (only on a terminal, never with `--quiet`).
struct Bar {
    enabled: bool,
    bar: Option<ProgressBar>,
    phase: &'static str,
}

impl Bar {
    fn new(quiet: bool) -> Self {
        Bar {
            enabled: !quiet && std::io::stderr().is_terminal(),
            bar: None,
            phase: "",
        }
    }
    fn update(&mut self, p: &Progress) {
        if !self.enabled {
            return;
        }
        if self.phase != p.phase {
            if let Some(b) = self.bar.take() {
                b.finish_and_clear();
            }
            self.phase = p.phase;
            let bar = ProgressBar::with_draw_target(Some(p.total), ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template(
                "{prefix:>10} [{elapsed_precise}] {wide_bar} {pos}/{len} ETA {eta} {msg}",
            ) {
                bar.set_style(style);
            }
            bar.set_prefix(p.phase);
            self.bar = Some(bar);
        }
        if let Some(b) = &self.bar {
            b.set_length(p.total);
            b.set_position(p.done);
            b.set_message(p.message.clone());
        }
    }
    fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipped model's recipe on an untyped trace: the candidates and baselines that read
    /// a table are left out (and named), the base's held-out scenarios are not inherited; on a
    /// typed trace every candidate stays.
    #[test]
    fn the_quick_recipe_keeps_what_runs_on_the_trace() {
        let manifest = Manifest::read(Path::new("models/default")).unwrap();
        let base = TrainConfig::parse(&manifest.training.config, &[]).unwrap();
        assert!(!base.card.is_empty());
        let reads = |n: &String| lachesis_env::policy::reads_throughputs(n).unwrap();
        assert!(
            base.bc.candidates.iter().any(reads),
            "{:?}",
            base.bc.candidates
        );
        let data = |throughputs: Option<&str>| DataConfig {
            trace: "traces/itp/cluster10.csv".into(),
            format: None,
            cluster: "auto".into(),
            spread: 1.0,
            throughputs: throughputs.map(str::to_string),
            assign_workloads: throughputs.map(|t| format!("{t}:1")),
            assign_elastic: None,
        };
        let (cfg, dropped) = quick_recipe(base.clone(), data(None), 260).unwrap();
        assert!(cfg.card.is_empty());
        assert!(
            !cfg.bc.candidates.iter().any(reads),
            "{:?}",
            cfg.bc.candidates
        );
        assert!(
            !cfg.eval.baselines.iter().any(reads),
            "{:?}",
            cfg.eval.baselines
        );
        let expected: Vec<String> = base
            .bc
            .candidates
            .iter()
            .filter(|n| reads(n))
            .cloned()
            .collect();
        assert_eq!(dropped, expected);
        assert!(dropped.contains(&"fifo/fastest/colocate".to_string()));
        // Only those: the rest of the base's list, in its order.
        assert_eq!(
            cfg.bc.candidates.len() + dropped.len(),
            base.bc.candidates.len()
        );
        cfg.validate().unwrap();

        let (cfg, dropped) = quick_recipe(base.clone(), data(Some("gavel")), 260).unwrap();
        assert!(dropped.is_empty());
        assert_eq!(cfg.bc.candidates, base.bc.candidates);
    }

    #[test]
    fn the_summary_takes_the_best_heuristic_and_its_reducible_share() {
        let dir = std::env::temp_dir().join(format!("lachesis-headroom-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("comparison.json");
        let paired =
            |d: f64| serde_json::json!({"mean_diff": d, "ci_low": d - 1.0, "ci_high": d + 1.0});
        let json = serde_json::json!({
            "setup": {"cluster": "16x8:V100"},
            "metrics": [
                {"key": "avg_jct_s", "policies": [
                    {"policy": "rl:m", "mean": 100.0, "vs_baseline": null},
                    {"policy": "fifo/best-fit", "mean": 130.0, "vs_baseline": paired(30.0)},
                    {"policy": "tiresias/best-fit/las-preempt", "mean": 98.0, "vs_baseline": paired(-2.0)},
                ]},
                {"key": "min_avg_jct_s", "policies": [
                    {"policy": "rl:m", "mean": 90.0}, {"policy": "fifo/best-fit", "mean": 90.0},
                    {"policy": "tiresias/best-fit/las-preempt", "mean": 90.0},
                ]},
                {"key": "reducible_jct_pct", "policies": [
                    {"policy": "rl:m", "mean": 10.0}, {"policy": "fifo/best-fit", "mean": 30.8},
                    {"policy": "tiresias/best-fit/las-preempt", "mean": 8.2},
                ]},
                {"key": "p99_jct_s", "policies": [
                    {"policy": "rl:m", "mean": 500.0}, {"policy": "fifo/best-fit", "mean": 300.0},
                    {"policy": "tiresias/best-fit/las-preempt", "mean": 400.0},
                ]},
                {"key": "max_wait_s", "policies": [
                    {"policy": "rl:m", "mean": 70.0}, {"policy": "fifo/best-fit", "mean": 60.0},
                    {"policy": "tiresias/best-fit/las-preempt", "mean": 35.0},
                ]},
            ],
        });
        std::fs::write(&path, json.to_string()).unwrap();
        let h = Headroom::read("t.csv", &path).unwrap();
        assert_eq!(h.best, "tiresias/best-fit/las-preempt");
        assert_eq!(
            (h.best_jct_s, h.model_jct_s, h.bound_s),
            (98.0, 100.0, 90.0)
        );
        assert_eq!(h.diff, (-2.0, -3.0, -1.0));
        assert_eq!(h.best_reducible_pct, 8.2);
        assert_eq!(h.cluster, "16x8:V100");
        // Tails against the best heuristic by average JCT, not the best tail.
        assert_eq!((h.p99_jct_s, h.max_wait_s), ((500.0, 400.0), (70.0, 35.0)));
        // A file without the bound names what is missing.
        std::fs::write(
            &path,
            r#"{"metrics": [{"key": "avg_jct_s", "policies": []}]}"#,
        )
        .unwrap();
        let err = format!("{:#}", Headroom::read("t.csv", &path).unwrap_err());
        assert!(err.contains("no policies"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
