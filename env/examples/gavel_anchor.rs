//! Gavel's anchor (issue #42): heterogeneity-aware against agnostic max-min fairness on
//! Gavel's cluster (36 V100 + 36 P100 + 36 K80), on Gavel's generated workload, measured as
//! Gavel measures it (`scripts/sweeps/run_sweep_continuous.py -s 4000 -e 5000`): the average
//! JCT of the jobs with ids in `from..to`, arrivals going on while they run.
//!
//! ```sh
//! cargo run --release -p lachesis-env --example gavel_anchor -- RATE JOBS SEED \
//!     [multi] [from=4000] [to=5000] [restart=0] [round=360] [reset=1920] [pop=1] \
//!     [shuffle] [fill] [always] [policies=gavel-maxmin,gavel-maxmin-agnostic]
//! ```
//!
//! `policies` may name the space-sharing variants (`gavel-maxmin-ss`, ...): the policies are
//! built with Gavel's table, which gives them the pair rates.
//!
//! `restart`: seconds every (re)start pays (the simulator's default is 60; Gavel's simulator
//! charges none); `round`, `reset`, `pop` (`pop_k`), `shuffle` (`shuffle_agnostic`), `fill`
//! (`fill_unallocated`), `always`
//! (`rounds_without_queue`): the policies' `[gavel]` knobs. Jobs checkpoint every
//! second (a preempted job keeps its work, as at the end of a Gavel lease). Prints one line a
//! policy.

use lachesis_env::cluster::load_cluster;
use lachesis_env::policy::{PolicyOptions, build_policy_with};
use lachesis_env::sim::{SimConfig, Simulator};
use lachesis_env::throughput::load_table;
use lachesis_env::trace::gavel_jobs::{GavelWorkload, gavel_workload};
use std::sync::Arc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rate: f64 = args.first().map_or(Ok(5.6), |a| a.parse())?;
    let jobs: usize = args.get(1).map_or(Ok(6000), |a| a.parse())?;
    let seed: u64 = args.get(2).map_or(Ok(0), |a| a.parse())?;
    let option = |key: &str| {
        args.iter()
            .skip(3)
            .find_map(|a| a.strip_prefix(key)?.strip_prefix('='))
            .map(str::to_string)
    };
    let number = |key: &str, default: f64| -> Result<f64, String> {
        option(key).map_or(Ok(default), |v| {
            v.parse().map_err(|_| format!("{key}={v}: not a number"))
        })
    };
    let flag = |name: &str| args.iter().skip(3).any(|a| a == name);
    let multi_gpu = flag("multi");
    let from = number("from", 4000.0)? as usize;
    let to = (number("to", 5000.0)? as usize).min(jobs);
    let restart_s = number("restart", 0.0)?;
    let policies = option("policies").unwrap_or("gavel-maxmin,gavel-maxmin-agnostic".into());
    let mut options = PolicyOptions {
        throughputs: Some(Arc::new(load_table("gavel")?)),
        ..PolicyOptions::default()
    };
    options.gavel.round_s = number("round", options.gavel.round_s)?;
    options.gavel.reset_s = number("reset", options.gavel.reset_s)?;
    options.gavel.pop_k = number("pop", 1.0)? as usize;
    options.gavel.shuffle_agnostic = flag("shuffle");
    options.gavel.fill_unallocated = flag("fill");
    options.gavel.rounds_without_queue = flag("always");
    if from >= to {
        return Err(format!("empty window {from}..{to} of {jobs} jobs").into());
    }
    let trace = gavel_workload(&GavelWorkload {
        jobs,
        jobs_per_hour: rate,
        multi_gpu,
        seed,
    })?;
    let spec = Arc::new(load_cluster("gavel")?);
    let cfg = SimConfig {
        seed,
        tick_s: options.gavel.round_s,
        checkpoint_interval_s: 1.0,
        restart_overhead_s: restart_s,
        throughputs: Some("gavel".into()),
        record_timeline: false,
        ..SimConfig::default()
    };
    println!(
        "{}; window jobs {from}..{to}; restart {restart_s} s; {:?}",
        trace.name, options.gavel
    );
    for name in policies.split(',') {
        let mut policy = build_policy_with(name, &options)?;
        let result =
            Simulator::new(&trace, Arc::clone(&spec), &cfg)?.run(policy.as_mut(), &mut |_| {});
        let window = &result.jobs[from..to];
        let jcts: Vec<f64> = window
            .iter()
            .filter_map(|j| Some(j.jct()?.secs_f64() / 3600.0))
            .collect();
        let preemptions: u64 = window.iter().map(|j| u64::from(j.preemptions)).sum();
        let s = &result.summary;
        println!(
            "{name}: avg JCT {:.2} h over jobs {from}..{to} ({} finished), \
             preemptions {:.1} a job, all jobs avg JCT {:.2} h, shares {}, GPUs allocated \
             {:.1}%, rejected {}, wall {:.1} s",
            jcts.iter().sum::<f64>() / jcts.len().max(1) as f64,
            jcts.len(),
            preemptions as f64 / window.len() as f64,
            s.avg_jct_s / 3600.0,
            s.shares,
            100.0 * s.gpu_alloc_rate,
            s.rejected_decisions,
            s.wall_s
        );
    }
    Ok(())
}
