//! `lachesis bench lp`: Gavel's allocation LP at scale (issue #42): the max-min fairness LP
//! of `gavel-maxmin` for JOBS jobs of Gavel's generator on Gavel's cluster, solved exactly
//! and with POP (k sub-problems, on one core and on all), with each answer's objective gap
//! to the exact one. Targets: POP (k = 8) at most 1 s on one core, within 1% of exact.
//! `--space-sharing` adds the pairs of 1-GPU jobs that gain from sharing a GPU
//! (`gavel-maxmin-ss`'s LP); their number grows with the square of the jobs.

use anyhow::{Context, Result, ensure};
use lachesis_env::cluster::load_cluster;
use lachesis_env::optim::{Allocation, Lp, Pair, Pop, Problem, Split, gaining_pairs};
use lachesis_env::throughput::{Consolidation, load_table};
use lachesis_env::trace::gavel_jobs::{GavelWorkload, gavel_workload};
use std::time::Instant;

/// The targets: POP's solve on one core, and its objective gap.
const TARGET_S: f64 = 1.0;
const TARGET_GAP: f64 = 0.01;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Active jobs in the LP.
    #[arg(long, default_value_t = 2048)]
    jobs: usize,
    /// POP's sub-problems.
    #[arg(long, default_value_t = 8)]
    k: usize,
    /// Every job on 1 GPU (default: Gavel's multi-GPU sizes, 1/2/4/8 GPUs).
    #[arg(long)]
    single_gpu: bool,
    /// Seed of the generated jobs and of POP's split.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Timed solves of each kind; the median is printed.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// The LP: `maxmin` (gavel-maxmin) or `maxsum` (gavel-maxsum).
    #[arg(long, default_value = "maxmin")]
    lp: String,
    /// Add pair variables for 1-GPU jobs that gain from sharing a GPU, at the table's pair
    /// rates (the `-ss` policies' LP).
    #[arg(long)]
    space_sharing: bool,
}

pub fn run(args: &Args) -> Result<()> {
    ensure!(args.jobs > 0, "--jobs: give at least one job");
    ensure!(args.repeats > 0, "--repeats: give at least one");
    let lp = match args.lp.as_str() {
        "maxmin" => Lp::MaxMin,
        "maxsum" => Lp::MaxSum,
        other => anyhow::bail!("--lp: `{other}` is not maxmin or maxsum"),
    };
    let trace = gavel_workload(&GavelWorkload {
        jobs: args.jobs,
        jobs_per_hour: 1.0,
        multi_gpu: !args.single_gpu,
        seed: args.seed,
    })?;
    let cluster = load_cluster("gavel")?;
    let table = load_table("gavel")?;
    let mut capacity = vec![0.0; cluster.models.len()];
    for n in &cluster.nodes {
        if let Some(m) = n.gpu_model {
            capacity[m.index()] += f64::from(n.gpus);
        }
    }
    let gpus: Vec<_> = cluster
        .models
        .iter()
        .map(|m| table.gpu(&m.name))
        .collect::<Result<_, _>>()
        .context("the gavel table covers the gavel cluster")?;
    // Speeds relative to the job's rate on the reference GPU at its size, as the policy sees
    // them through the run's throughput view.
    let mut rows = Vec::with_capacity(trace.len());
    let mut scale = Vec::with_capacity(trace.len());
    for job in trace.jobs() {
        let name = job.workload.as_ref().context("generated jobs are typed")?;
        let w = table.workload(name.as_str())?;
        let size = job.task.gpus;
        let row = gpus
            .iter()
            .map(|g| table.speed(w, *g, size, Consolidation::Consolidated, size))
            .collect::<Result<Vec<f64>, _>>()?;
        rows.push(row);
        scale.push(f64::from(size));
    }
    let weights = vec![1.0; rows.len()];
    let pairs = if args.space_sharing {
        pairs_of(&trace, &table, &gpus, &rows)?
    } else {
        Vec::new()
    };
    let p = Problem {
        throughputs: &rows,
        scale: &scale,
        capacity: &capacity,
        weights: &weights,
        pairs: &pairs,
    };
    outln!(
        "{lp:?} LP: {} jobs of {}{} on cluster gavel ({}), table gavel; median of {} solves\n",
        args.jobs,
        trace.name,
        if args.space_sharing {
            format!(", {} pairs", pairs.len())
        } else {
            String::new()
        },
        cluster
            .models
            .iter()
            .zip(&capacity)
            .map(|(m, c)| format!("{c} {}", m.name))
            .collect::<Vec<_>>()
            .join(" + "),
        args.repeats
    );
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    let (exact, exact_s) = timed(args.repeats, || one.install(|| lp.solve(&p)))?;
    outln!(
        "{:<44} {:>8.3} s  objective {:.6}",
        "exact (Clarabel), 1 core",
        exact_s,
        exact.objective
    );
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    for (split, label) in [
        (Split::Stratified, "stratified"),
        (Split::Random, "random, POP's split"),
    ] {
        let pop = Pop {
            k: args.k,
            seed: args.seed,
            split,
        };
        let (a, one_s) = timed(args.repeats, || one.install(|| pop.solve(lp, &p)))?;
        let (_, all_s) = timed(args.repeats, || pop.solve(lp, &p))?;
        let gap = 1.0 - a.objective / exact.objective;
        outln!(
            "{:<44} {:>8.3} s  objective {:.6}  gap {:+.2}%  ({:.3} s on {cores} cores)",
            format!("POP k={} {label}, 1 core", args.k),
            one_s,
            a.objective,
            100.0 * gap,
            all_s
        );
        if split == Split::Stratified {
            outln!(
                "  target: <= {TARGET_S} s on one core ({}), gap <= {}% ({})",
                verdict(one_s <= TARGET_S),
                100.0 * TARGET_GAP,
                verdict(gap <= TARGET_GAP)
            );
        }
    }
    Ok(())
}

/// The pairs of 1-GPU jobs of `trace` that gain from sharing a GPU of `gpus`, at the table's
/// pair rates relative to each job's reference rate (what the policy's view gives).
fn pairs_of(
    trace: &lachesis_env::job::Trace,
    table: &lachesis_env::throughput::ThroughputTable,
    gpus: &[lachesis_env::throughput::TableGpu],
    rows: &[Vec<f64>],
) -> Result<Vec<Pair>> {
    let mut workloads = Vec::with_capacity(trace.len());
    for job in trace.jobs() {
        let name = job.workload.as_ref().context("generated jobs are typed")?;
        workloads.push(table.workload(name.as_str())?);
    }
    let one_gpu: Vec<usize> = (0..trace.len())
        .filter(|i| trace.jobs()[*i].task.gpus == 1 && trace.jobs()[*i].tasks == 1)
        .collect();
    Ok(gaining_pairs(rows, &one_gpu, false, |a, b, j| {
        let (wa, wb) = (workloads[a], workloads[b]);
        let [ra, rb] = table.pair(wa, wb, gpus[j])?;
        let reference = |w| table.reference_rate(w, 1).ok();
        Some([ra / reference(wa)?, rb / reference(wb)?])
    }))
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "missed" }
}

/// The last answer of `repeats` runs of `solve`, and the median wall time in seconds.
fn timed<E: std::error::Error + Send + Sync + 'static>(
    repeats: usize,
    mut solve: impl FnMut() -> Result<Allocation, E>,
) -> Result<(Allocation, f64)> {
    let mut times = Vec::with_capacity(repeats);
    let mut last = None;
    for _ in 0..repeats {
        let t = Instant::now();
        last = Some(solve()?);
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let answer = last.context("at least one solve")?;
    Ok((answer, times[times.len() / 2]))
}
