//! Helpers shared by the end-to-end tests: run the real `lachesis` binary from the workspace
//! root, so that trace paths are the checked-in `traces/...` and appear as such in summaries.

// Each test crate uses a subset of these helpers.
#![allow(dead_code)]

use serde_json::Value;
use std::process::{Command, Output};

/// Runs `lachesis ARGS...` in the workspace root and returns what it did.
pub fn lachesis(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lachesis"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the lachesis binary runs")
}

/// Runs `lachesis ARGS...`, which must succeed, and parses its stdout as JSON.
pub fn stdout_json(args: &[&str]) -> Value {
    let out = lachesis(args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "lachesis {args:?} failed ({}):\n{stderr}",
        out.status
    );
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("lachesis {args:?} printed invalid JSON ({e}):\n{stdout}"))
}

/// The summary without `wall_s`, the one field that differs between identical runs.
pub fn without_wall_time(mut summary: Value) -> Value {
    summary
        .as_object_mut()
        .expect("a summary is a JSON object")
        .remove("wall_s");
    summary
}
