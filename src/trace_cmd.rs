//! `lachesis trace ...`: look at, convert and cut traces.

use anyhow::{Context, Result, bail};
use lachesis_agent::harness::{ensure_timed, load_trace, parse_format, resolve_cluster};
use lachesis_env::job::Trace;
use lachesis_env::sim::parse_window;
use lachesis_env::trace::gavel_jobs::{GavelWorkload, gavel_workload};
use lachesis_env::trace::split::{random_windows, split_by_time};
use lachesis_env::trace::{TraceStats, WorkloadModel, read_trace, write_normalized};
use std::fs;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Jobs, span, arrivals, GPU demand, durations, and offered load on a cluster.
    Stats {
        /// Trace file.
        path: PathBuf,
        /// Force the format (see `lachesis trace convert --help`).
        #[arg(long)]
        format: Option<String>,
        /// Cluster to compute the offered load on (preset, shape, TOML file or auto[...]).
        #[arg(long)]
        cluster: Option<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Convert any supported trace to the normalized format.
    Convert {
        path: PathBuf,
        /// Force the format: normalized, openb, openb-static, itp, swf, dlrm, helios or
        /// sia-philly (default: detected from the header, then from the file name).
        #[arg(long)]
        format: Option<String>,
        /// Output file (normalized CSV).
        #[arg(short = 'o', long)]
        out: PathBuf,
    },
    /// Cut a window of a trace (by submit time, or the first N jobs from a time).
    Sample {
        path: PathBuf,
        #[arg(long)]
        format: Option<String>,
        /// Keep jobs submitted in FROM..TO (trace time, e.g. 10d..12d).
        #[arg(long)]
        window: Option<String>,
        /// Keep at most this many jobs (the earliest, after --window).
        #[arg(long)]
        jobs: Option<usize>,
        #[arg(short = 'o', long)]
        out: PathBuf,
    },
    /// Fit a workload model (arrival rhythm and bursts, job shapes, durations, tenants) to a
    /// trace and save it as JSON.
    Fit {
        path: PathBuf,
        #[arg(long)]
        format: Option<String>,
        /// Model file to write.
        #[arg(short = 'o', long)]
        out: PathBuf,
    },
    /// Draw a synthetic trace from a fitted model (same seed, same trace).
    Synth {
        /// Model file written by `lachesis trace fit`.
        model: PathBuf,
        /// Jobs to draw.
        #[arg(long, default_value_t = 10_000)]
        jobs: usize,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Output file (normalized CSV).
        #[arg(short = 'o', long)]
        out: PathBuf,
    },
    /// Write a generated workload as a trace file, for anything that takes `--trace`:
    /// `gavel:RATE:JOBS[:SEED][:multi]`, Gavel's generator (as `simulate --generate`).
    Generate {
        /// The generator and its parameters, e.g. gavel:5.6:3000:1.
        #[arg(value_name = "gavel:RATE:JOBS[:SEED][:multi]")]
        spec: String,
        /// Output file (normalized CSV, with the workload column).
        #[arg(short = 'o', long)]
        out: PathBuf,
    },
    /// Time-ordered train / validation / test sets (no overlap), and random training windows.
    Split {
        path: PathBuf,
        #[arg(long)]
        format: Option<String>,
        /// Fraction of jobs for training (the earliest).
        #[arg(long, default_value_t = 0.7)]
        train: f64,
        /// Fraction of jobs for validation (next); the rest is test.
        #[arg(long, default_value_t = 0.15)]
        validation: f64,
        /// Also draw this many random windows of --episode-jobs jobs from the training set.
        #[arg(long, default_value_t = 0)]
        episodes: usize,
        #[arg(long, default_value_t = 500)]
        episode_jobs: usize,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Directory for train.csv, validation.csv, test.csv (normalized) and episodes.json.
        #[arg(short = 'o', long)]
        out: PathBuf,
    },
}

pub fn run(cmd: &Command) -> Result<()> {
    match cmd {
        Command::Stats {
            path,
            format,
            cluster,
            json,
        } => {
            let format = format.as_deref().map(parse_format).transpose()?;
            let read = read_trace(path, format)?;
            let cluster = cluster
                .as_deref()
                .map(|c| resolve_cluster(c, &read.trace))
                .transpose()?;
            let stats = TraceStats::compute(&read.trace, Some(&read.report), cluster.as_ref());
            if *json {
                outln!("{}", serde_json::to_string_pretty(&stats)?);
            } else {
                out!("{stats}");
            }
        }
        Command::Convert { path, format, out } => {
            let format = format.as_deref().map(parse_format).transpose()?;
            let read = read_trace(path, format)?;
            ensure_timed(path, &read.report)?;
            write_trace(&read.trace, out)?;
            let r = &read.report;
            outln!(
                "{}: {} rows read as {}, {} jobs written to {}, {} dropped, {} censored",
                path.display(),
                r.rows,
                r.format,
                r.kept,
                out.display(),
                r.dropped_total(),
                r.censored
            );
            for (reason, n) in &r.dropped {
                outln!("  dropped {reason}: {n}");
            }
        }
        Command::Generate { spec, out } => {
            let workload = GavelWorkload::parse(spec).context("trace generate")?;
            let trace = gavel_workload(&workload).context("trace generate")?;
            write_trace(&trace, out)?;
            outln!(
                "{}: {} jobs written to {}",
                trace.name,
                trace.len(),
                out.display()
            );
        }
        Command::Sample {
            path,
            format,
            window,
            jobs,
            out,
        } => {
            let mut trace = load_trace(path, format.as_deref())?;
            if let Some(w) = window {
                let (from, to) = parse_window(w).context("--window")?;
                trace = trace.window(from, to);
            }
            if let Some(n) = jobs {
                let keep = trace.jobs().get(*n).map(|j| j.id);
                if let Some(cut) = keep {
                    trace = trace.filter(|j| j.id < cut);
                }
            }
            if trace.is_empty() {
                bail!("the sample of {} is empty", path.display());
            }
            write_trace(&trace, out)?;
            outln!("{} jobs written to {}", trace.len(), out.display());
        }
        Command::Fit { path, format, out } => {
            let trace = load_trace(path, format.as_deref())?;
            let model = WorkloadModel::fit(&trace)
                .with_context(|| format!("fitting {}", path.display()))?;
            model.save(out)?;
            let parts = model.parts();
            outln!(
                "{}: fitted {} jobs ({:.1} jobs/day, {} job classes) -> {}",
                path.display(),
                parts.fitted_jobs,
                parts.jobs_per_day,
                parts.mix.classes.len(),
                out.display()
            );
        }
        Command::Synth {
            model,
            jobs,
            seed,
            out,
        } => {
            let model = WorkloadModel::load(model)?;
            let trace = model.synth(*jobs, *seed);
            write_trace(&trace, out)?;
            outln!(
                "{} jobs (seed {seed}) written to {}",
                trace.len(),
                out.display()
            );
        }
        Command::Split {
            path,
            format,
            train,
            validation,
            episodes,
            episode_jobs,
            seed,
            out,
        } => {
            let trace = load_trace(path, format.as_deref())?;
            let split = split_by_time(&trace, *train, *validation)?;
            fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
            for (name, part) in [
                ("train", &split.train),
                ("validation", &split.validation),
                ("test", &split.test),
            ] {
                write_trace(part, &out.join(format!("{name}.csv")))?;
                outln!("{name:<11} {:>8} jobs", part.len());
            }
            outln!(
                "cuts at {:.3} s and {:.3} s (trace time)",
                split.cuts[0].secs_f64(),
                split.cuts[1].secs_f64()
            );
            if *episodes > 0 {
                let windows = random_windows(&split.train, *episode_jobs, *episodes, *seed)?;
                let file = out.join("episodes.json");
                fs::write(&file, serde_json::to_string_pretty(&windows)?)
                    .with_context(|| format!("writing {}", file.display()))?;
                outln!(
                    "{episodes} training windows of {episode_jobs} jobs in {}",
                    file.display()
                );
            }
        }
    }
    Ok(())
}

fn write_trace(trace: &Trace, out: &Path) -> Result<()> {
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let file = fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    write_normalized(trace, BufWriter::new(file))
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}
