//! `lachesis bench fgd`: the FGD paper's experiment (Weng et al., ATC'23) on openb. Pods sampled
//! with replacement from the trace arrive one by one and never leave; each policy places what
//! fits and drops the rest. Measures the GPU allocation rate and the FGD fragmentation rate (of
//! the sampled workload's task mix) when the arrived GPU demand reaches shares of capacity.

use anyhow::{Context, Result, ensure};
use lachesis_env::cluster::{ClusterSpec, ClusterState, load_cluster};
use lachesis_env::job::JobSpec;
use lachesis_env::metrics::{FragTracker, MixCounts, TaskMix};
use lachesis_env::policy::{
    DecisionContext, JobRuntime, JobState, PolicyOptions, build_policy_with,
};
use lachesis_env::trace::read_trace;
use lachesis_env::units::{JobId, SimTime};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// openb pod list, full or static (`openb_pod_list_multigpu50.csv`: no times), or any
    /// trace of pods (default: alibaba-openb-2023/openb_pod_list_default.csv under
    /// $LACHESIS_SHARED_TRACES or ../shared/traces, else the bundled excerpt).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Cluster to fill.
    #[arg(long, default_value = "openb")]
    cluster: String,
    /// Policies, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "fifo/first-fit,fifo/best-fit,fifo/worst-fit,fifo/most-allocated,\
                         fifo/dot-product,fifo/gpu-packing,fifo/gpu-clustering,fifo/random-fit,\
                         fifo/fgd,fifo/topo"
    )]
    policies: Vec<String>,
    /// Seeds 1..=N; each samples its own workload and seeds the policy.
    #[arg(long, default_value_t = 3)]
    seeds: u64,
    /// Shares of GPU capacity arrived at which to measure; sampling stops at the largest.
    #[arg(long, value_delimiter = ',', default_value = "0.9,1.0,1.1,1.2,1.3")]
    at: Vec<f64>,
    /// Folder for `fgd.csv` (one row per policy, seed and point).
    #[arg(short = 'o', long)]
    out: Option<PathBuf>,
}

/// The cluster when a share of capacity has arrived.
#[derive(Debug, Clone, Copy)]
struct Point {
    alloc_rate: f64,
    /// Expected fragmented GPU capacity over total GPU capacity.
    frag_rate: f64,
    dropped: u64,
}

pub fn run(args: &Args) -> Result<()> {
    let mut at = args.at.clone();
    at.sort_by(f64::total_cmp);
    ensure!(
        at.first().is_some_and(|a| *a > 0.0),
        "--at: give shares of capacity > 0"
    );
    let path = pod_list(args.trace.as_ref());
    let pods = read_trace(&path, None)
        .with_context(|| format!("reading {}", path.display()))?
        .trace;
    ensure!(
        pods.jobs().iter().any(|p| p.gpu_milli_total() > 0),
        "{} holds no pod that asks for a GPU",
        path.display()
    );
    let spec = Arc::new(load_cluster(&args.cluster)?);
    let top = at[at.len() - 1];
    outln!(
        "{}: {} pods; cluster {} ({} nodes, {} GPUs); sampled up to {top} x GPU capacity",
        path.display(),
        pods.len(),
        spec.name,
        spec.nodes.len(),
        spec.total_gpus()
    );
    let mut csv = String::from("policy,seed,arrived,gpu_alloc_rate,frag_gpu_rate,dropped\n");
    // points[policy][seed][at]
    let mut points = vec![Vec::new(); args.policies.len()];
    for seed in 1..=args.seeds.max(1) {
        let sampled = sample(pods.jobs(), spec.total_gpu_milli(), top, seed);
        let mut counts = MixCounts::default();
        for pod in &sampled {
            counts.add(&pod.task, pod.tasks);
        }
        let mix = counts.mix();
        for (i, policy) in args.policies.iter().enumerate() {
            let got = fill(&sampled, &spec, policy, seed, &at, &mix)?;
            for (share, p) in at.iter().zip(&got) {
                let _ = writeln!(
                    csv,
                    "{policy},{seed},{share},{:.6},{:.6},{}",
                    p.alloc_rate, p.frag_rate, p.dropped
                );
            }
            points[i].push(got);
        }
    }
    outln!("{}", table(&args.policies, &at, &points));
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let file = dir.join("fgd.csv");
        std::fs::write(&file, csv).with_context(|| format!("writing {}", file.display()))?;
        outln!("per seed: {}", file.display());
    }
    Ok(())
}

/// The given pod list, else the shared one, else the bundled excerpt (with a note).
fn pod_list(given: Option<&PathBuf>) -> PathBuf {
    if let Some(p) = given {
        return p.clone();
    }
    let shared =
        crate::bench::shared_dir(&None).join("alibaba-openb-2023/openb_pod_list_default.csv");
    if shared.is_file() {
        return shared;
    }
    let excerpt = Path::new("traces/openb/openb_pod_excerpt.csv").to_path_buf();
    outln!(
        "note: {} not found; using the bundled excerpt {}",
        shared.display(),
        excerpt.display()
    );
    excerpt
}

/// Pods drawn with replacement until they ask `share` x `capacity_milli` GPU; ids and submit
/// times follow the draw order.
fn sample(pods: &[JobSpec], capacity_milli: u64, share: f64, seed: u64) -> Vec<JobSpec> {
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut out, mut demand) = (Vec::new(), 0.0);
    while demand < share * capacity_milli as f64 {
        let mut pod = pods[rng.random_range(0..pods.len())].clone();
        pod.id = JobId(out.len() as u32);
        pod.submit = SimTime(out.len() as u64);
        demand += pod.gpu_milli_total() as f64;
        out.push(pod);
    }
    out
}

/// Places `pods` one by one under `policy`; the cluster at each share of `at` arrived.
fn fill(
    pods: &[JobSpec],
    spec: &Arc<ClusterSpec>,
    policy: &str,
    seed: u64,
    at: &[f64],
    mix: &TaskMix,
) -> Result<Vec<Point>> {
    let options = PolicyOptions {
        seed,
        oracle_durations: None,
        ..PolicyOptions::default()
    };
    let mut p = build_policy_with(policy, &options)?;
    let cluster = RefCell::new(ClusterState::new(Arc::clone(spec)));
    let mut runtime = vec![JobRuntime::default(); pods.len()];
    let capacity = spec.total_gpu_milli() as f64;
    let (mut arrived, mut dropped, mut points) = (0.0, 0, Vec::with_capacity(at.len()));
    for pod in pods {
        arrived += pod.gpu_milli_total() as f64;
        runtime[pod.id.index()].state = JobState::Pending;
        let pending = BTreeSet::from([pod.id]);
        let ctx = DecisionContext::new(pod.submit, pods, &runtime, &pending, &cluster);
        let decision = p
            .decide(&ctx)
            .with_context(|| format!("{policy} deciding"))?;
        runtime[pod.id.index()].state = match decision.placements.into_iter().next() {
            Some(placed) => {
                cluster.borrow_mut().allocate(pod, placed.tasks)?;
                JobState::Running
            }
            None => {
                dropped += 1;
                JobState::Rejected
            }
        };
        while points.len() < at.len() && arrived >= at[points.len()] * capacity {
            let state = cluster.borrow();
            points.push(Point {
                alloc_rate: state.allocated_gpu_milli() as f64 / capacity,
                frag_rate: FragTracker::new(mix.clone(), &state).total_milli() / capacity,
                dropped,
            });
        }
    }
    Ok(points)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// Medians over seeds: allocation rates, then fragmentation rates, at each share arrived.
fn table(policies: &[String], at: &[f64], points: &[Vec<Vec<Point>>]) -> String {
    let width = policies.iter().map(String::len).max().unwrap_or(6).max(6);
    let mut s = format!(
        "medians over seeds; alloc = allocated / total GPU, frag = FGD fragment / total GPU\n{:<width$}",
        "policy"
    );
    for key in ["alloc", "frag"] {
        for a in at {
            let _ = write!(s, " {:>10}", format!("{key}@{:.0}%", a * 100.0));
        }
    }
    for (policy, seeds) in policies.iter().zip(points) {
        let _ = write!(s, "\n{policy:<width$}");
        let get: [fn(&Point) -> f64; 2] = [|p| p.alloc_rate, |p| p.frag_rate];
        for f in get {
            for i in 0..at.len() {
                let _ = write!(
                    s,
                    " {:>10.4}",
                    median(seeds.iter().map(|s| f(&s[i])).collect())
                );
            }
        }
    }
    s
}
