//! `lachesis bench slurm`: the Slurm bridge end to end on a real Slurm cluster (started here,
//! see `lachesis_serve::slurm::testbed`), against Slurm's own scheduler on the same cluster
//! shape: jobs submitted as fast as `sbatch` allows, each seen running by polling `squeue`
//! every 50 ms; jobs/s from the first submission to the last start, and submit-to-running
//! latency percentiles.

use anyhow::{Context, Result, anyhow};
use lachesis_serve::ServeConfig;
use lachesis_serve::config::RoutingMode;
use lachesis_serve::slurm::testbed::{NodeGroup, Testbed, TestbedSpec};
use lachesis_serve::slurm::{Bridge, BridgeConfig, CommandCtl};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Virtual nodes (8 a100 GPUs, 64 CPUs each).
    #[arg(long, default_value_t = 64)]
    nodes: u32,
    /// Jobs submitted (1 GPU each, all fit at once).
    #[arg(long, default_value_t = 300)]
    jobs: u32,
    /// The service's policy (baseline routing).
    #[arg(long, default_value = "fifo/best-fit")]
    policy: String,
    /// The bridge's cycle interval, ms.
    #[arg(long, default_value_t = 100)]
    interval_ms: u64,
}

struct Outcome {
    jobs: usize,
    seconds: f64,
    latencies: Vec<f64>,
}

fn spec(args: &Args, hold: bool) -> TestbedSpec {
    TestbedSpec {
        groups: vec![NodeGroup {
            cpus: 64,
            mem_mib: 512_000,
            ..NodeGroup::gpu("bn", args.nodes, "a100", 8)
        }],
        partitions: vec!["gpu".into()],
        hold_on_submit: hold,
    }
}

/// Polls `squeue` for running jobs, noting when each was first seen running.
fn poll(bed: &Testbed, running: &mut BTreeMap<u64, Instant>) -> Result<()> {
    let out = bed
        .command("squeue")
        .args(["-h", "-t", "RUNNING", "-o", "%i"])
        .output()
        .context("squeue")?;
    let now = Instant::now();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Ok(id) = line.trim().parse::<u64>() {
            running.entry(id).or_insert(now);
        }
    }
    Ok(())
}

const JOB: [&str; 7] = [
    "-o",
    "/dev/null",
    "--gres=gpu:a100:1",
    "-c",
    "1",
    "--wrap",
    "sleep 600",
];

/// Waits until every job in `since` runs; latencies from each job's instant.
fn wait_running(bed: &Testbed, since: &BTreeMap<u64, Instant>, first: Instant) -> Result<Outcome> {
    let mut running = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        poll(bed, &mut running)?;
        let left = since.keys().filter(|id| !running.contains_key(*id)).count();
        if left == 0 {
            break;
        }
        if Instant::now() > deadline {
            return Err(anyhow!(
                "{left} of {} jobs still not running after 240 s",
                since.len()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let last = since
        .keys()
        .filter_map(|id| running.get(id))
        .max()
        .copied()
        .unwrap_or(first);
    let mut latencies: Vec<f64> = since
        .iter()
        .filter_map(|(id, at)| running.get(id).map(|r| r.duration_since(*at).as_secs_f64()))
        .collect();
    latencies.sort_by(f64::total_cmp);
    Ok(Outcome {
        jobs: since.len(),
        seconds: last.duration_since(first).as_secs_f64(),
        latencies,
    })
}

/// Stream: jobs submitted back to back while the scheduler runs; latency from each submission.
fn stream(bed: &Testbed, n: u32) -> Result<Outcome> {
    let mut submitted = BTreeMap::new();
    let first = Instant::now();
    for _ in 0..n {
        let id = bed.sbatch(&JOB).map_err(|e| anyhow!(e))?;
        submitted.insert(id, Instant::now());
    }
    wait_running(bed, &submitted, first)
}

/// Backlog: jobs submitted held, then `go` (release them all, or start the bridge); latency
/// from `go`.
fn backlog(
    bed: &Testbed,
    n: u32,
    hold: bool,
    go: impl FnOnce(&[u64]) -> Result<()>,
) -> Result<Outcome> {
    let mut ids = Vec::new();
    for _ in 0..n {
        let args: Vec<&str> = if hold {
            ["-H"].iter().chain(JOB.iter()).copied().collect()
        } else {
            JOB.to_vec()
        };
        ids.push(bed.sbatch(&args).map_err(|e| anyhow!(e))?);
    }
    let t0 = Instant::now();
    go(&ids)?;
    let since: BTreeMap<u64, Instant> = ids.iter().map(|id| (*id, t0)).collect();
    wait_running(bed, &since, t0)
}

/// The service in-process and the bridge on its own thread, for one testbed.
struct Runner {
    runtime: tokio::runtime::Runtime,
    service: Option<lachesis_serve::Running>,
    bcfg: BridgeConfig,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<Timings>>>,
}

type Timings = (usize, Vec<f64>, [Vec<f64>; 3]);

impl Runner {
    fn new(args: &Args, bed: &Testbed) -> Result<Runner> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let mut cfg = ServeConfig {
            model: String::new(),
            baseline: args.policy.clone(),
            ..ServeConfig::default()
        };
        cfg.routing.mode = RoutingMode::Baseline;
        cfg.grpc.addr = "127.0.0.1:0".into();
        cfg.http.addr = String::new();
        cfg.validate()?;
        let service = runtime.block_on(lachesis_serve::start(cfg))?;
        let mut bcfg = BridgeConfig {
            interval_ms: args.interval_ms,
            ..BridgeConfig::default()
        };
        bcfg.service.addr = service.grpc_addr.to_string();
        bcfg.slurm = bed.slurm_config();
        Ok(Runner {
            runtime,
            service: Some(service),
            bcfg,
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
        })
    }

    fn start(&mut self) {
        let stop = Arc::clone(&self.stop);
        let bcfg = self.bcfg.clone();
        self.thread = Some(std::thread::spawn(move || -> Result<Timings> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let interval = Duration::from_millis(bcfg.interval_ms);
            let ctl = CommandCtl::new(&bcfg.slurm);
            let mut b = Bridge::new(bcfg, ctl)?;
            let mut placed = 0;
            let mut cycle_ms = Vec::new();
            let mut parts: [Vec<f64>; 3] = Default::default();
            while !stop.load(Ordering::SeqCst) {
                let t = Instant::now();
                match rt.block_on(b.cycle()) {
                    Ok(r) => {
                        placed += r.placed.len();
                        if !r.placed.is_empty() {
                            cycle_ms.push(t.elapsed().as_secs_f64() * 1e3);
                            parts[0].push(r.read_ms);
                            parts[1].push(r.decide_ms);
                            parts[2].push(r.apply_ms);
                        }
                    }
                    Err(e) => eprintln!("bridge cycle failed: {e}"),
                }
                std::thread::sleep(interval.saturating_sub(t.elapsed()));
            }
            Ok((placed, cycle_ms, parts))
        }));
    }

    /// Stops the bridge and the service; prints the bridge's cycle figures.
    fn finish(mut self, label: &str) -> Result<()> {
        self.stop.store(true, Ordering::SeqCst);
        let timings = match self.thread.take() {
            Some(t) => Some(
                t.join()
                    .map_err(|_| anyhow!("the bridge thread panicked"))??,
            ),
            None => None,
        };
        if let Some(s) = self.service.take() {
            self.runtime.block_on(s.shutdown())?;
        }
        if let Some((placed, mut cycle_ms, mut parts)) = timings {
            cycle_ms.sort_by(f64::total_cmp);
            for p in &mut parts {
                p.sort_by(f64::total_cmp);
            }
            println!(
                "bridge ({label}): {placed} placements in {} cycles that placed (median {:.0} ms, max {:.0} ms; \
                 median read {:.0} ms, decide {:.0} ms, pin+release {:.0} ms)",
                cycle_ms.len(),
                pct(&cycle_ms, 0.5),
                pct(&cycle_ms, 1.0),
                pct(&parts[0], 0.5),
                pct(&parts[1], 0.5),
                pct(&parts[2], 0.5)
            );
        }
        Ok(())
    }
}

fn pct(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}

pub fn run(args: &Args) -> Result<()> {
    lachesis_serve::slurm::testbed::available().map_err(|e| anyhow!("no Slurm here: {e}"))?;
    println!(
        "bench slurm: {} nodes x 8 a100 GPUs, {} one-GPU jobs (all fit at once), policy {}\n\
         stream: submitted back to back, latency from each submission;\n\
         backlog: all submitted held first, then released at once (Slurm) or the bridge started;\n\
         latency from that moment. Jobs seen running by polling squeue every 50 ms.\n",
        args.nodes, args.jobs, args.policy
    );
    let fresh = |hold: bool| Testbed::start(&spec(args, hold)).map_err(|e| anyhow!(e));

    let slurm_stream = {
        let bed = fresh(false)?;
        stream(&bed, args.jobs)?
    };
    let slurm_backlog = {
        let bed = fresh(false)?;
        backlog(&bed, args.jobs, true, |ids| {
            let list: Vec<String> = ids.iter().map(u64::to_string).collect();
            bed.scontrol(&["release", &list.join(",")])
                .map(|_| ())
                .map_err(|e| anyhow!(e))
        })?
    };
    let bridge_stream = {
        let bed = fresh(true)?;
        let mut runner = Runner::new(args, &bed)?;
        runner.start();
        let r = stream(&bed, args.jobs);
        runner.finish("stream")?;
        r?
    };
    let bridge_backlog = {
        let bed = fresh(true)?;
        let mut runner = Runner::new(args, &bed)?;
        let r = backlog(&bed, args.jobs, false, |_| {
            runner.start();
            Ok(())
        });
        runner.finish("backlog")?;
        r?
    };

    println!(
        "\n{:<10} {:<34} {:>6} {:>10} {:>12} {:>10} {:>10}",
        "scenario", "scheduler", "jobs", "jobs/s", "median (s)", "p90 (s)", "max (s)"
    );
    let rows = [
        ("stream", "slurm (its own scheduler)", &slurm_stream),
        (
            "stream",
            "lachesis bridge (service decides)",
            &bridge_stream,
        ),
        ("backlog", "slurm (its own scheduler)", &slurm_backlog),
        (
            "backlog",
            "lachesis bridge (service decides)",
            &bridge_backlog,
        ),
    ];
    for (scenario, name, o) in rows {
        println!(
            "{:<10} {:<34} {:>6} {:>10.1} {:>12.3} {:>10.3} {:>10.3}",
            scenario,
            name,
            o.jobs,
            o.jobs as f64 / o.seconds.max(1e-9),
            pct(&o.latencies, 0.5),
            pct(&o.latencies, 0.9),
            pct(&o.latencies, 1.0)
        );
    }
    let rate = |o: &Outcome| o.jobs as f64 / o.seconds.max(1e-9);
    println!(
        "\nratio bridge/slurm: stream throughput {:.2}, median latency {:.2}; backlog throughput {:.2}, median latency {:.2}",
        rate(&bridge_stream) / rate(&slurm_stream),
        pct(&bridge_stream.latencies, 0.5) / pct(&slurm_stream.latencies, 0.5),
        rate(&bridge_backlog) / rate(&slurm_backlog),
        pct(&bridge_backlog.latencies, 0.5) / pct(&slurm_backlog.latencies, 0.5),
    );
    Ok(())
}
