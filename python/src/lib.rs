//! `lachesis._core`: the Rust side of the Python package `lachesis`. The Gymnasium
//! environments (`env`), the comparison harness and the simulator (`harness`), and how their
//! errors become Python exceptions (`errors`). The Python modules in `python/lachesis/` wrap
//! these in Gymnasium's and pandas' types; nothing here imports either.

mod env;
mod errors;
mod harness;

use lachesis_env::gym::{
    CANDIDATE_FEATURES, FEATURE_BOUND, FEATURE_SCHEMA_VERSION, GLOBAL_FEATURES, MAX_CANDIDATES,
    WAIT_ACTION,
};
use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<env::Setting>()?;
    m.add_class::<env::Env>()?;
    m.add_class::<env::VecEnv>()?;
    m.add_function(wrap_pyfunction!(harness::compare, m)?)?;
    m.add_function(wrap_pyfunction!(harness::simulate, m)?)?;
    m.add_function(wrap_pyfunction!(harness::read_trace, m)?)?;
    m.add_function(wrap_pyfunction!(harness::policy_names, m)?)?;
    m.add_function(wrap_pyfunction!(env::rust_steps_per_s, m)?)?;
    m.add("EpisodeOver", m.py().get_type::<errors::EpisodeOver>())?;
    m.add("CANDIDATE_FEATURES", CANDIDATE_FEATURES.to_vec())?;
    m.add("GLOBAL_FEATURES", GLOBAL_FEATURES.to_vec())?;
    m.add("MAX_CANDIDATES", MAX_CANDIDATES)?;
    m.add("WAIT_ACTION", WAIT_ACTION)?;
    m.add("FEATURE_BOUND", FEATURE_BOUND)?;
    m.add("FEATURE_SCHEMA_VERSION", FEATURE_SCHEMA_VERSION)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
