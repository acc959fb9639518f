//! Policy names as the command line takes them: the heuristic registry's `ORDER/PLACE[/MOD...]`
//! and learned policies as `rl:PATH` (a model directory written by `lachesis train`).

use lachesis_agent::LearnedPolicy;
use lachesis_env::policy::{Policy, PolicyError, PolicyOptions, build_policy_with};
use std::path::Path;

/// Builds `name`: `rl:PATH` loads the model directory at PATH, anything else goes to the
/// heuristic registry.
pub fn build(name: &str, options: &PolicyOptions) -> Result<Box<dyn Policy>, PolicyError> {
    match name.trim().strip_prefix("rl:") {
        Some(path) => LearnedPolicy::load(Path::new(path), name.trim())
            .map(|p| Box::new(p) as Box<dyn Policy>)
            .map_err(|e| PolicyError::Failed {
                policy: name.to_string(),
                message: e.to_string(),
            }),
        None => build_policy_with(name, options),
    }
}
