//! Policy names as every program takes them: the heuristic registry's `ORDER/PLACE[/MOD...]`
//! and learned policies as `rl:PATH` (a model directory written by `lachesis train`, deciding
//! one placement per model pass as in training) or `rl-batched:PATH` (the same model, every
//! fitting candidate of a pass taken best first; see `Deciding`). Also what policies are
//! built with (`policy_options`, `read_policy_config`).

use super::HarnessError;
use crate::{Deciding, LearnedPolicy};
use lachesis_env::job::Trace;
use lachesis_env::policy::{
    Policy, PolicyConfig, PolicyError, PolicyOptions, Select, build_policy_with, build_select,
};
use lachesis_env::units::SimTime;
use std::path::Path;

/// Builds `name`: `rl:PATH` and `rl-batched:PATH` load the model directory at PATH, anything
/// else goes to the heuristic registry.
pub fn build(name: &str, options: &PolicyOptions) -> Result<Box<dyn Policy>, PolicyError> {
    if let Some(candidates) = Select::parse_name(name) {
        // Candidates built here too, so that `rl:PATH` can be one.
        return build_select(name, candidates, options, build);
    }
    match Deciding::parse(name) {
        Some((deciding, path)) => LearnedPolicy::load(Path::new(path), name.trim())
            .map(|p| Box::new(p.deciding(deciding)) as Box<dyn Policy>)
            .map_err(|e| PolicyError::Failed {
                policy: name.to_string(),
                message: e.to_string(),
            }),
        None => build_policy_with(name, options),
    }
}

/// The decision tick `name` needs when none is given, seconds (0 = none): 10 minutes for
/// `las-preempt` and `gittins-preempt` (service grows between events), the tick a learned
/// policy was trained with, Gavel's 6-minute round for `gavel-*`, else `elastic`'s default round (60 s: its rounds come due only
/// when it is asked).
pub fn wants_tick_s(name: &str) -> f64 {
    if let Some(mut candidates) = Select::parse_name(name) {
        // The finest tick any candidate needs (the defaults include `las-preempt`'s).
        if candidates.is_empty() {
            candidates = Select::DEFAULT_UNTYPED.map(String::from).to_vec();
        }
        return candidates
            .iter()
            .map(|c| wants_tick_s(c))
            .filter(|t| *t > 0.0)
            .reduce(f64::min)
            .unwrap_or(0.0);
    }
    match Deciding::parse(name).map(|(_, path)| path) {
        Some(path) => {
            crate::Manifest::read(Path::new(path)).map_or(0.0, |m| m.env.sim.tick_s.max(0.0))
        }
        None if name
            .split('/')
            .any(|part| part == "las-preempt" || part == "gittins-preempt") =>
        {
            600.0
        }
        None if name.trim().starts_with("gavel-") => lachesis_env::policy::GAVEL_ROUND_S,
        None if name.split('/').any(|part| part == "elastic") => {
            lachesis_env::policy::DEFAULT_ROUND_S
        }
        None => 0.0,
    }
}

/// What policies are built with: the seed, and the trace's true durations for the explicitly
/// named `*-oracle` orderings (upper bounds); every other part ignores them.
pub fn policy_options(trace: &Trace, seed: u64, config: &PolicyConfig) -> PolicyOptions {
    let durations: Vec<SimTime> = trace
        .jobs()
        .iter()
        .map(|j| trace.true_duration(j.id))
        .collect();
    PolicyOptions {
        seed,
        oracle_durations: Some(durations.into()),
        tiresias: config.tiresias.clone(),
        gittins: config.gittins.clone(),
        colocate: config.colocate.clone(),
        elastic: config.elastic.clone(),
        gavel: config.gavel.clone(),
        select: config.select.clone(),
        ..PolicyOptions::default()
    }
}

/// Reads a policy config file (`[tiresias]` ...; see `PolicyConfig`), or the defaults.
pub fn read_policy_config(path: Option<&Path>) -> Result<PolicyConfig, HarnessError> {
    let Some(path) = path else {
        return Ok(PolicyConfig::default());
    };
    let text = std::fs::read_to_string(path).map_err(|source| HarnessError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| HarnessError::Config {
        path: path.to_path_buf(),
        what: "policy config",
        message: e.to_string(),
    })
}
