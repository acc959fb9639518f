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

/// Submits the jobs, polls until all run; the bed is stopped by the caller.
fn drive(bed: &Testbed, n: u32) -> Result<Outcome> {
    let mut submitted: BTreeMap<u64, Instant> = BTreeMap::new();
    let mut running: BTreeMap<u64, Instant> = BTreeMap::new();
    let first = Instant::now();
    let poll = |running: &mut BTreeMap<u64, Instant>| -> Result<()> {
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
    };
    for i in 0..n {
        let id = bed
            .sbatch(&[
                "-o",
                "/dev/null",
                "--gres=gpu:a100:1",
                "-c",
                "1",
                "--wrap",
                "sleep 600",
            ])
            .map_err(|e| anyhow!(e))?;
        submitted.insert(id, Instant::now());
        if i % 25 == 24 {
            poll(&mut running)?;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    while submitted.keys().any(|id| !running.contains_key(id)) {
        if Instant::now() > deadline {
            return Err(anyhow!(
                "{} of {n} jobs still not running after 180 s",
                submitted
                    .keys()
                    .filter(|id| !running.contains_key(id))
                    .count()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
        poll(&mut running)?;
    }
    let last = submitted
        .keys()
        .filter_map(|id| running.get(id))
        .max()
        .copied()
        .unwrap_or(first);
    let mut latencies: Vec<f64> = submitted
        .iter()
        .filter_map(|(id, at)| running.get(id).map(|r| r.duration_since(*at).as_secs_f64()))
        .collect();
    latencies.sort_by(f64::total_cmp);
    Ok(Outcome {
        jobs: submitted.len(),
        seconds: last.duration_since(first).as_secs_f64(),
        latencies,
    })
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
        "bench slurm: {} nodes x 8 GPUs, {} one-GPU jobs submitted back to back\n",
        args.nodes, args.jobs
    );

    // Slurm's own scheduler.
    let slurm = {
        let mut bed = Testbed::start(&spec(args, false)).map_err(|e| anyhow!(e))?;
        let r = drive(&bed, args.jobs);
        bed.stop();
        r?
    };

    // The bridge: a held submission, the service in-process, the bridge on its own thread.
    let bridge = {
        let mut bed = Testbed::start(&spec(args, true)).map_err(|e| anyhow!(e))?;
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
        let stop = Arc::new(AtomicBool::new(false));
        type Timings = (usize, Vec<f64>, [Vec<f64>; 3]);
        let cycles = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || -> Result<Timings> {
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
            })
        };
        let r = drive(&bed, args.jobs);
        stop.store(true, Ordering::SeqCst);
        let (placed, mut cycle_ms, mut parts) = cycles
            .join()
            .map_err(|_| anyhow!("the bridge thread panicked"))??;
        bed.stop();
        runtime.block_on(service.shutdown())?;
        cycle_ms.sort_by(f64::total_cmp);
        for p in &mut parts {
            p.sort_by(f64::total_cmp);
        }
        println!(
            "bridge: {placed} placements, cycles that placed: {} (median {:.0} ms, max {:.0} ms; \
             median read {:.0} ms, decide {:.0} ms, pin+release {:.0} ms)\n",
            cycle_ms.len(),
            pct(&cycle_ms, 0.5),
            pct(&cycle_ms, 1.0),
            pct(&parts[0], 0.5),
            pct(&parts[1], 0.5),
            pct(&parts[2], 0.5)
        );
        r?
    };

    println!(
        "{:<34} {:>6} {:>10} {:>12} {:>10} {:>10}",
        "scheduler", "jobs", "jobs/s", "median (s)", "p90 (s)", "max (s)"
    );
    for (name, o) in [
        ("slurm (sched/backfill, own choice)", &slurm),
        ("lachesis bridge (service decides)", &bridge),
    ] {
        println!(
            "{:<34} {:>6} {:>10.1} {:>12.3} {:>10.3} {:>10.3}",
            name,
            o.jobs,
            o.jobs as f64 / o.seconds.max(1e-9),
            pct(&o.latencies, 0.5),
            pct(&o.latencies, 0.9),
            pct(&o.latencies, 1.0)
        );
    }
    println!(
        "\nratio bridge/slurm: throughput {:.2}, median latency {:.2}",
        (bridge.jobs as f64 / bridge.seconds) / (slurm.jobs as f64 / slurm.seconds),
        pct(&bridge.latencies, 0.5) / pct(&slurm.latencies, 0.5)
    );
    Ok(())
}
