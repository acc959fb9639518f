//! Wall time to label one state by lookahead, with `[improve]`'s defaults (4 futures of 4 h,
//! the teacher's choice and the next 2 legal candidates and wait, `sjf/best-fit` as teacher
//! and rollout policy), on random windows of a trace scaled to offered load 1 on its `auto`
//! cluster, as training episodes are. The teacher drives each episode; about one decision point
//! in 20 with two legal actions or more is labelled. Prints the median, the 90th percentile and
//! the mean seconds per state.
//!
//! ```sh
//! cargo run --release -p lachesis-env --example lookahead_cost -- ../shared/traces/msft-itp-2021/cluster10.csv 512 40 2
//! ```
//! Arguments: TRACE [WINDOW_JOBS=512] [STATES=40] [THREADS=2].

use lachesis_env::gym::{
    EnvConfig, EnvError, LookaheadConfig, PredictedDurations, Rollout, SchedEnv, TeacherRollout,
    WAIT_ACTION, lookahead, window_pool,
};
use lachesis_env::policy::build_policy;
use lachesis_env::sim::{SizingRule, scale_to_load};
use lachesis_env::trace::read_trace;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

const TEACHER: &str = "sjf/best-fit";

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = PathBuf::from(
        args.first()
            .ok_or("usage: TRACE [WINDOW_JOBS] [STATES] [THREADS]")?,
    );
    let number = |i: usize, default: usize| -> Result<usize, Box<dyn Error>> {
        Ok(args
            .get(i)
            .map(|a| a.parse())
            .transpose()?
            .unwrap_or(default))
    };
    let (window_jobs, states, threads) = (number(1, 512)?, number(2, 40)?, number(3, 2)?);
    let trace = read_trace(&path, None)?.trace;
    let rule = SizingRule::parse("auto").ok_or("auto sizing")??;
    let spec = Arc::new(rule.size(&trace)?);
    let windows = window_pool(&trace, window_jobs, 16, 1)?;
    let mut cfg = EnvConfig::default();
    cfg.sim.skip_unplaceable = true;
    let rollout = || -> Result<Box<dyn Rollout>, EnvError> {
        let teacher = build_policy(TEACHER, 0).map_err(|e| EnvError::Config(e.to_string()))?;
        Ok(Box::new(TeacherRollout::new(teacher)))
    };
    let mut rng = StdRng::seed_from_u64(7);
    let mut seconds = Vec::new();
    'windows: for window in &windows {
        let window = scale_to_load(window, &spec, 1.0)?;
        let mut env = SchedEnv::new(&window, Arc::clone(&spec), cfg.clone())?;
        if env.reset(0)?.1.end.is_some() {
            continue;
        }
        let mut teacher = build_policy(TEACHER, 0)?;
        loop {
            let obs = env.observation().ok_or("no observation")?;
            let (taught, _) = env.imitate(teacher.as_mut())?;
            if obs.legal_actions().count() >= 2 && rng.random::<f64>() < 0.05 {
                let mut actions = vec![taught];
                actions.extend(
                    obs.legal_actions()
                        .filter(|a| *a != taught && *a != WAIT_ACTION)
                        .take(3 - usize::from(taught != WAIT_ACTION)),
                );
                if obs.mask[WAIT_ACTION] && taught != WAIT_ACTION {
                    actions.push(WAIT_ACTION);
                }
                let started = Instant::now();
                lookahead(
                    &env,
                    &actions,
                    &PredictedDurations::from_episode(&env, 3600.0),
                    &rollout,
                    &LookaheadConfig {
                        futures: 4,
                        horizon_s: 4.0 * 3600.0,
                        seed: rng.random(),
                        threads,
                    },
                )?;
                seconds.push(started.elapsed().as_secs_f64());
                if seconds.len() >= states {
                    break 'windows;
                }
            }
            let step = env.step(taught)?;
            if step.terminated || step.truncated {
                break;
            }
        }
    }
    if seconds.is_empty() {
        return Err("no state was labelled".into());
    }
    let mean = seconds.iter().sum::<f64>() / seconds.len() as f64;
    seconds.sort_by(f64::total_cmp);
    let at = |q: f64| seconds[((seconds.len() - 1) as f64 * q).round() as usize];
    println!(
        "{} states of {}-job windows of {} on {} ({} GPUs), {threads} threads: median {:.3} s, \
         p90 {:.3} s, mean {:.3} s per state",
        seconds.len(),
        window_jobs,
        path.display(),
        spec.name,
        spec.total_gpus(),
        at(0.5),
        at(0.9),
        mean
    );
    Ok(())
}
