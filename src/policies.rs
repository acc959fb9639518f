//! Policy names as the command line takes them: the heuristic registry's `ORDER/PLACE[/MOD...]`
//! and learned policies as `rl:PATH` (a model directory written by `lachesis train`, deciding
//! one placement per model pass as in training) or `rl-batched:PATH` (the same model, every
//! fitting candidate of a pass taken best first; see `lachesis_agent::Deciding`).

use lachesis_agent::{Deciding, LearnedPolicy};
use lachesis_env::policy::{Policy, PolicyError, PolicyOptions, build_policy_with};
use std::path::Path;

/// Builds `name`: `rl:PATH` and `rl-batched:PATH` load the model directory at PATH, anything
/// else goes to the heuristic registry.
pub fn build(name: &str, options: &PolicyOptions) -> Result<Box<dyn Policy>, PolicyError> {
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
/// policy was trained with.
pub fn wants_tick_s(name: &str) -> f64 {
    match Deciding::parse(name).map(|(_, path)| path) {
        Some(path) => lachesis_agent::Manifest::read(Path::new(path))
            .map_or(0.0, |m| m.env.sim.tick_s.max(0.0)),
        None if name
            .split('/')
            .any(|part| part == "las-preempt" || part == "gittins-preempt") =>
        {
            600.0
        }
        None => 0.0,
    }
}
