//! Gavel's anchor (issue #42): heterogeneity-aware against agnostic max-min fairness on
//! Gavel's cluster (36 V100 + 36 P100 + 36 K80), on Gavel's generated workload.
//!
//! `cargo run --release -p lachesis-env --example gavel_anchor -- JOBS_PER_HOUR JOBS SEED
//! [multi]`: average JCT, hours, of the jobs after the first fifth (a warm-up), per policy.

use lachesis_env::cluster::load_cluster;
use lachesis_env::policy::build_policy;
use lachesis_env::sim::{SimConfig, Simulator};
use lachesis_env::trace::gavel_jobs::{GavelWorkload, gavel_workload};
use std::sync::Arc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rate: f64 = args.first().map_or(Ok(5.6), |a| a.parse())?;
    let jobs: usize = args.get(1).map_or(Ok(1000), |a| a.parse())?;
    let seed: u64 = args.get(2).map_or(Ok(0), |a| a.parse())?;
    let multi_gpu = args.get(3).is_some_and(|a| a == "multi");
    let trace = gavel_workload(&GavelWorkload {
        jobs,
        jobs_per_hour: rate,
        multi_gpu,
        seed,
    })?;
    let warmup_s = trace.jobs()[jobs / 5].submit.ms() as f64 / 1000.0;
    let spec = Arc::new(load_cluster("gavel")?);
    let cfg = SimConfig {
        seed,
        tick_s: 360.0,
        checkpoint_interval_s: 1.0,
        throughputs: Some("gavel".into()),
        warmup_s,
        record_timeline: false,
        ..SimConfig::default()
    };
    println!("{}", trace.name);
    for name in ["gavel-maxmin", "gavel-maxmin-agnostic"] {
        let mut policy = build_policy(name, seed)?;
        let s = Simulator::new(&trace, Arc::clone(&spec), &cfg)?
            .run(policy.as_mut(), &mut |_| {})
            .summary;
        println!(
            "{name}: avg JCT {:.2} h over {} measured jobs ({} finished), p50 {:.2} h, \
             preemptions {}, rejected {}, wall {:.1} s",
            s.avg_jct_s / 3600.0,
            s.jobs,
            s.finished,
            s.p50_jct_s / 3600.0,
            s.preemptions,
            s.rejected_decisions,
            s.wall_s
        );
    }
    Ok(())
}
