//! `lachesis bench sim`: simulator speed on the shared traces and at scale (`bench read`: trace
//! reading; `bench fgd`: the FGD paper's experiment, in `bench_fgd`; `bench env` and `bench
//! infer`: gym environment steps and learned-policy decisions, in `bench_env` and
//! `bench_infer`; `bench serve`: the decision service end to end, in `bench_serve`). Prints
//! rates and ratios measured side by side in one run; repeat runs and quote medians.

use anyhow::{Context, Result};
use lachesis_env::cluster::{ClusterSpec, load_cluster};
use lachesis_env::job::Trace;
use lachesis_env::job::{Elastic, TaskRequest};
use lachesis_env::policy::{PolicyOptions, build_policy, build_policy_with};
use lachesis_env::sim::{SimConfig, SimResult, Simulator, SizingRule};
use lachesis_env::throughput::{WorkloadRule, assign_workloads, load_table};
use lachesis_env::trace::read_trace;
use lachesis_env::trace::synthetic::synthetic_trace;
use lachesis_env::units::GPU_MILLI;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Replay the ITP clusters and the openb pods, then scale jobs (1k..1M) and nodes
    /// (100..10k) on synthetic workloads.
    Sim {
        /// Folder of the shared traces (default: $LACHESIS_SHARED_TRACES or ../shared/traces).
        #[arg(long)]
        traces: Option<PathBuf>,
        /// Largest synthetic job count in the job-scaling series.
        #[arg(long, default_value_t = 1_000_000)]
        max_jobs: usize,
        /// Nodes (8 GPUs each) of the job-scaling cluster; also the largest node count.
        #[arg(long, default_value_t = 10_000)]
        nodes: usize,
        /// Jobs in the node-scaling series.
        #[arg(long, default_value_t = 100_000)]
        node_series_jobs: usize,
        /// Policy to replay with.
        #[arg(long, default_value = "fifo/best-fit")]
        policy: String,
        /// Offered load of the synthetic workloads.
        #[arg(long, default_value_t = 0.9)]
        load: f64,
        /// Jobs of the heterogeneous run (Gavel's table and workload rule, GPU sharing,
        /// elastic jobs); 0 skips it. The speed target is 100,000 jobs on 1,000 nodes in
        /// under 10 s on one core.
        #[arg(long, default_value_t = 100_000)]
        hetero_jobs: usize,
        /// Nodes of the heterogeneous run: 8-GPU V100, P100 and K80 nodes in equal thirds.
        #[arg(long, default_value_t = 1_000)]
        hetero_nodes: usize,
        /// Policy of the heterogeneous run; it must share and resize for the run to measure
        /// them.
        #[arg(long, default_value = "fifo/best-fit/colocate/elastic")]
        hetero_policy: String,
    },
    /// Rows per second of reading and normalizing trace files (default: every shared trace).
    Read {
        /// Files to read; default: the CSV and SWF traces under --traces.
        files: Vec<PathBuf>,
        #[arg(long)]
        traces: Option<PathBuf>,
        /// Runs per file; the median and the best are printed.
        #[arg(long, default_value_t = 5)]
        repeats: usize,
    },
    /// The FGD paper's experiment: sampled openb pods arrive and never leave; GPU allocation
    /// and fragmentation rates per placement at 90..130% of capacity arrived.
    Fgd(crate::bench_fgd::Args),
    /// Gym environment steps per second (`SchedEnv` on one core, `VecEnv` on threads) on
    /// windows of a trace, against 200k steps/s and RLScheduler's 2.9k.
    Env(crate::bench_env::Args),
    /// Cost of one learned-policy decision (Scorer forward and masked argmax) on one core,
    /// against 1 ms.
    Infer(crate::bench_infer::Args),
    /// The model arm's decision in process (no gRPC): world build, decision time, model
    /// passes, placements and preemptions per decision, stepwise and batched side by side.
    Decide(crate::bench_decide::Args),
    /// The decision service end to end: `lachesis serve` as a separate process, `Decide` load
    /// over loopback gRPC; latency percentiles, decisions/s and an optional soak, against the
    /// issue's targets.
    Serve(crate::bench_serve::Args),
    /// Gavel's max-min allocation LP for 2,048 jobs on Gavel's cluster: exact against POP
    /// (k sub-problems) on one core and on all, with the objective gap.
    Lp(crate::bench_lp::Args),
    /// The Slurm bridge on a real Slurm cluster started here, against Slurm's own scheduler:
    /// jobs/s end to end and submit-to-running latency.
    Slurm(crate::bench_slurm::Args),
    /// The `select` meta-policy's cost: runs a comparison (the same flags as `compare`; put
    /// the library's families, `select` and the model in --policies) and prints the wall time
    /// the selector spent choosing against the comparison's, with the 10% budget.
    Select(Box<crate::compare::Args>),
    /// What lookahead pays: forks per second of a mid-run world, future traces per second,
    /// rollout events per second (issue #43's 10,000 forks/s target).
    Fork(crate::bench_fork::Args),
}

pub fn shared_dir(traces: &Option<PathBuf>) -> PathBuf {
    traces.clone().unwrap_or_else(|| {
        std::env::var_os("LACHESIS_SHARED_TRACES")
            .map_or_else(|| PathBuf::from("../shared/traces"), PathBuf::from)
    })
}

pub fn run(cmd: &Command) -> Result<()> {
    match cmd {
        Command::Sim {
            traces,
            max_jobs,
            nodes,
            node_series_jobs,
            policy,
            load,
            hetero_jobs,
            hetero_nodes,
            hetero_policy,
        } => {
            let series = Series {
                max_jobs: *max_jobs,
                nodes: *nodes,
                node_series_jobs: *node_series_jobs,
                load: *load,
            };
            sim_speed(&shared_dir(traces), &series, policy)?;
            if *hetero_jobs > 0 {
                hetero_speed(*hetero_jobs, *hetero_nodes, *load, hetero_policy)?;
            }
            Ok(())
        }
        Command::Read {
            files,
            traces,
            repeats,
        } => {
            let files = if files.is_empty() {
                shared_trace_files(&shared_dir(traces))?
            } else {
                files.clone()
            };
            read_speed(&files, *repeats)
        }
        Command::Fgd(args) => crate::bench_fgd::run(args),
        Command::Env(args) => crate::bench_env::run(args),
        Command::Infer(args) => crate::bench_infer::run(args),
        Command::Serve(args) => crate::bench_serve::run(args),
        Command::Decide(args) => crate::bench_decide::run(args),
        Command::Slurm(args) => crate::bench_slurm::run(args),
        Command::Select(args) => select_cost(args),
        Command::Fork(args) => crate::bench_fork::run(args),
        Command::Lp(args) => crate::bench_lp::run(args),
    }
}

/// The job traces under `dir` (CSV and SWF, not the inventories).
fn shared_trace_files(dir: &std::path::Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for sub in [
        "msft-itp-2021",
        "alibaba-openb-2023",
        "hpc-swf",
        "alibaba-dlrm-2025",
    ] {
        let Ok(entries) = std::fs::read_dir(dir.join(sub)) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                let name = p
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                (name.ends_with(".csv") || name.ends_with(".swf") || name.ends_with(".swf.gz"))
                    && !name.contains("node_list")
            })
            .collect();
        files.sort();
        out.extend(files);
    }
    anyhow::ensure!(!out.is_empty(), "no trace files under {}", dir.display());
    Ok(out)
}

/// The synthetic scaling series of `bench sim`.
struct Series {
    max_jobs: usize,
    nodes: usize,
    node_series_jobs: usize,
    load: f64,
}

fn sim_speed(dir: &std::path::Path, series: &Series, policy: &str) -> Result<()> {
    let Series {
        max_jobs,
        nodes,
        node_series_jobs,
        load,
    } = series;
    let cfg = SimConfig {
        skip_unplaceable: true,
        ..SimConfig::default()
    };
    outln!(
        "policy {policy}; one core; wall times cover setup and simulation, not reading the trace\n"
    );

    let itp = dir.join("msft-itp-2021");
    if itp.is_dir() {
        outln!("ITP clusters (sized by `auto`: 8-GPU V100 nodes, offered load <= 0.8):");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&itp)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "csv"))
            .collect();
        files.sort();
        let (mut jobs, mut events, mut wall) = (0u64, 0u64, 0.0);
        for f in &files {
            let trace = read_trace(f, None)?.trace;
            let cluster = itp_cluster(&trace)?;
            let r = replay(&trace, cluster, policy, &cfg)?;
            outln!(
                "  {:<14} {:>6} jobs on {:>4} nodes: {:>8.4} s, {:>10.0} events/s",
                f.file_name()
                    .map(|n| n.to_string_lossy())
                    .unwrap_or_default(),
                trace.len(),
                r.1,
                r.0.summary.wall_s,
                r.0.summary.events as f64 / r.0.summary.wall_s
            );
            jobs += trace.len() as u64;
            events += r.0.summary.events;
            wall += r.0.summary.wall_s;
        }
        outln!(
            "  all {} clusters: {jobs} jobs in {wall:.3} s ({:.0} jobs/s, {:.0} events/s)\n",
            files.len(),
            jobs as f64 / wall,
            events as f64 / wall
        );
    } else {
        outln!("ITP: skipped, {} not found\n", itp.display());
    }

    let openb = dir.join("alibaba-openb-2023/openb_pod_list_default.csv");
    if openb.is_file() {
        let trace = read_trace(&openb, None)?.trace;
        let (r, _) = replay(&trace, load_cluster("openb")?, policy, &cfg)?;
        outln!(
            "openb: {} pods on the 1523-node openb cluster: {:.3} s ({:.0} jobs/s, {:.0} events/s)\n",
            trace.len(),
            r.summary.wall_s,
            trace.len() as f64 / r.summary.wall_s,
            r.summary.events as f64 / r.summary.wall_s
        );
    } else {
        outln!("openb: skipped, {} not found\n", openb.display());
    }

    outln!("Job scaling: {nodes} nodes x 8 GPUs, synthetic load {load}:");
    outln!(
        "  {:>9} {:>10} {:>9} {:>12} {:>10}",
        "jobs",
        "events",
        "wall s",
        "ns/event",
        "vs first"
    );
    let mut base = None;
    let mut n = 1000;
    while n <= *max_jobs {
        let cluster = load_cluster(&format!("{nodes}x8:V100"))?;
        let trace = synthetic_trace(n, &cluster, *load, 1);
        let (r, _) = replay(&trace, cluster, policy, &cfg)?;
        print_scale_row(n, &r, &mut base);
        n *= 10;
    }
    outln!("\nNode scaling: {node_series_jobs} synthetic jobs at load {load}:");
    outln!(
        "  {:>9} {:>10} {:>9} {:>12} {:>10}",
        "nodes",
        "events",
        "wall s",
        "ns/event",
        "vs first"
    );
    let mut base = None;
    let mut k = 100;
    while k <= *nodes {
        let cluster = load_cluster(&format!("{k}x8:V100"))?;
        let trace = synthetic_trace(*node_series_jobs, &cluster, *load, 1);
        let (r, _) = replay(&trace, cluster, policy, &cfg)?;
        print_scale_row(k, &r, &mut base);
        k *= 10;
    }
    Ok(())
}

/// The heterogeneous run of `bench sim`: `jobs` synthetic jobs on `nodes` 8-GPU nodes, a third
/// each of V100, P100 and K80, typed by Gavel's rule and run at Gavel's measured rates. Gavel's
/// table stops at 8 GPUs, so larger gangs become 8-GPU jobs and fractional jobs take a whole
/// GPU (so that they may share one); every other multi-GPU job is elastic over 1..=8 GPUs, as
/// 1-GPU tasks. The target is under 10 s on one core for 100,000 jobs on 1,000 nodes.
fn hetero_speed(jobs: usize, nodes: usize, load: f64, policy: &str) -> Result<()> {
    let third = nodes / 3;
    let shape = format!(
        "{}x8:V100+{}x8:P100+{}x8:K80",
        nodes - 2 * third,
        third,
        third
    );
    let cluster = load_cluster(&shape)?;
    let base = synthetic_trace(jobs, &cluster, load, 1);
    let mut specs = base.jobs().to_vec();
    for (i, j) in specs.iter_mut().enumerate() {
        let gpus = (j.tasks * j.task.gpus).min(8);
        if gpus > 1 && i % 2 == 0 {
            j.tasks = gpus;
            j.task = TaskRequest {
                gpus: 1,
                gpu_milli: GPU_MILLI,
                cpu_milli: 4000,
                mem_mib: 16_384,
            };
            j.elastic = Some(Elastic {
                min_gpus: 1,
                max_gpus: 8,
            });
        } else {
            j.tasks = 1;
            j.task = TaskRequest {
                gpus,
                gpu_milli: GPU_MILLI,
                cpu_milli: 4000 * u64::from(gpus),
                mem_mib: 16_384 * u64::from(gpus),
            };
        }
    }
    let trace = Trace::new(
        base.name.clone(),
        specs,
        base.true_durations().to_vec(),
        base.tenants().to_vec(),
    )?;
    let (trace, _) = assign_workloads(&trace, WorkloadRule::Gavel, 1);
    let cfg = SimConfig {
        skip_unplaceable: true,
        throughputs: Some("gavel".into()),
        ..SimConfig::default()
    };
    let options = PolicyOptions {
        seed: cfg.seed,
        throughputs: Some(Arc::new(load_table("gavel")?)),
        ..PolicyOptions::default()
    };
    let mut p = build_policy_with(policy, &options)?;
    let started = Instant::now();
    let sim = Simulator::new(&trace, Arc::new(cluster), &cfg)?;
    let r = sim.run(p.as_mut(), &mut |_| {});
    let wall = started.elapsed().as_secs_f64();
    let s = &r.summary;
    outln!(
        "\nHeterogeneous: {jobs} Gavel-typed jobs on {shape} (sharing, elastic), {policy}, \
         load {load}:"
    );
    outln!(
        "  {} finished, {} events, {} shares, {} resizes, {:.1} simulated days: {wall:.3} s \
         ({:.0} ns/event); target < 10 s: {}",
        s.finished,
        s.events,
        s.shares,
        s.resizes,
        s.makespan_s / 86_400.0,
        wall * 1e9 / s.events.max(1) as f64,
        if wall < 10.0 { "met" } else { "MISSED" }
    );
    Ok(())
}

fn print_scale_row(size: usize, r: &SimResult, base: &mut Option<f64>) {
    let ns = r.summary.wall_s * 1e9 / r.summary.events as f64;
    let first = *base.get_or_insert(ns);
    outln!(
        "  {:>9} {:>10} {:>9.3} {:>12.0} {:>9.2}x",
        size,
        r.summary.events,
        r.summary.wall_s,
        ns,
        ns / first
    );
}

fn itp_cluster(trace: &Trace) -> Result<ClusterSpec> {
    SizingRule::default()
        .size(trace)
        .context("sizing the ITP cluster")
}

fn replay(
    trace: &Trace,
    cluster: ClusterSpec,
    policy: &str,
    cfg: &SimConfig,
) -> Result<(SimResult, usize)> {
    let nodes = cluster.nodes.len();
    let mut p = build_policy(policy, cfg.seed)?;
    let started = Instant::now();
    let sim = Simulator::new(trace, Arc::new(cluster), cfg)?;
    let mut r = sim.run(p.as_mut(), &mut |_| {});
    r.summary.wall_s = started.elapsed().as_secs_f64();
    Ok((r, nodes))
}

/// Rows per second of reading and normalizing each trace file (best of `repeats` runs, so a
/// noisy neighbour does not decide the figure; the median is printed too).
pub fn read_speed(files: &[PathBuf], repeats: usize) -> Result<()> {
    outln!(
        "{:<48} {:>9} {:>10} {:>14} {:>14}",
        "file",
        "rows",
        "jobs",
        "median rows/s",
        "best rows/s"
    );
    let (mut all_rows, mut all_secs) = (0u64, 0.0);
    for f in files {
        let mut secs = Vec::with_capacity(repeats);
        let mut rows = 0;
        let mut jobs = 0;
        for _ in 0..repeats.max(1) {
            let started = Instant::now();
            let read = read_trace(f, None)?;
            secs.push(started.elapsed().as_secs_f64());
            rows = read.report.rows;
            jobs = read.trace.len();
        }
        secs.sort_by(f64::total_cmp);
        let median = secs[secs.len() / 2];
        outln!(
            "{:<48} {:>9} {:>10} {:>14.0} {:>14.0}",
            f.display().to_string(),
            rows,
            jobs,
            rows as f64 / median,
            rows as f64 / secs[0]
        );
        all_rows += rows;
        all_secs += median;
    }
    outln!(
        "all: {all_rows} rows in {all_secs:.3} s (medians): {:.0} rows/s",
        all_rows as f64 / all_secs
    );
    Ok(())
}

/// `lachesis bench select`: a comparison, then the selector's cost against the budget.
fn select_cost(args: &crate::compare::Args) -> Result<()> {
    let c = crate::compare::run_comparison(args)?
        .ok_or_else(|| anyhow::anyhow!("--shard: bench select measures a whole comparison"))?;
    let lines = crate::compare::selector_lines(&c);
    anyhow::ensure!(
        !lines.is_empty(),
        "--policies: name a selector (select, or select:A+B+...) to measure its cost"
    );
    let choosing: f64 = c.runs.iter().filter_map(|r| r.summary.select_wall_s).sum();
    let ratio = choosing / c.setup.wall_s.max(1e-9);
    println!(
        "select cost: {choosing:.2} s choosing in a {:.2} s comparison: {:.1}% (budget 10%: {})",
        c.setup.wall_s,
        100.0 * ratio,
        if ratio <= 0.10 { "met" } else { "over" }
    );
    Ok(())
}
