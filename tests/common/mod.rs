//! Helpers shared by the end-to-end tests: run the real `lachesis` binary from the workspace
//! root, so that trace paths are the checked-in `traces/...` and appear as such in summaries.

// Each test crate uses a subset of these helpers.
#![allow(dead_code)]

pub mod server;
pub mod webdriver;

use serde_json::Value;

/// Relative tolerance of float comparisons against golden files.
pub const REL_TOL: f64 = 1e-9;
use std::process::{Command, Output};

/// Runs `lachesis ARGS...` in the workspace root and returns what it did.
pub fn lachesis(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lachesis"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the lachesis binary runs")
}

/// Stdout of `lachesis ARGS...`, which must succeed.
pub fn stdout_of(args: &[&str]) -> String {
    let out = lachesis(args);
    assert!(
        out.status.success(),
        "lachesis {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Stderr of `lachesis ARGS...`, which must fail.
pub fn stderr_of_failing(args: &[&str]) -> String {
    let out = lachesis(args);
    assert!(!out.status.success(), "lachesis {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
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

/// True when the golden tests should write their files instead of comparing
/// (`LACHESIS_BLESS=1`).
pub fn blessing() -> bool {
    std::env::var("LACHESIS_BLESS").is_ok_and(|v| v == "1")
}

/// Differences between a golden and an actual JSON value, one line each, named by their path
/// (`metrics[2].policies[1].mean`): counts compare exactly, floats to `REL_TOL`.
pub fn json_differences(golden: &Value, actual: &Value) -> Vec<String> {
    let mut out = Vec::new();
    differences_at("", golden, actual, &mut out);
    out
}

fn differences_at(path: &str, golden: &Value, actual: &Value, out: &mut Vec<String>) {
    match (golden, actual) {
        (Value::Object(g), Value::Object(a)) => {
            let mut keys: Vec<&String> = g.keys().chain(a.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let at = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match (g.get(k), a.get(k)) {
                    (Some(g), Some(a)) => differences_at(&at, g, a, out),
                    (g, a) => out.push(format!("{at}: golden {}, actual {}", show(g), show(a))),
                }
            }
        }
        (Value::Array(g), Value::Array(a)) if g.len() == a.len() => {
            for (i, (g, a)) in g.iter().zip(a).enumerate() {
                differences_at(&format!("{path}[{i}]"), g, a, out);
            }
        }
        _ if same(golden, actual) => {}
        _ => out.push(format!("{path}: golden {golden}, actual {actual}")),
    }
}

fn show(v: Option<&Value>) -> String {
    v.map_or_else(|| "missing".into(), Value::to_string)
}

fn same(golden: &Value, actual: &Value) -> bool {
    match (golden.as_f64(), actual.as_f64()) {
        (Some(g), Some(a)) if golden.is_f64() || actual.is_f64() => {
            g == a || (g - a).abs() <= REL_TOL * g.abs().max(a.abs())
        }
        _ => golden == actual,
    }
}

/// The Python the tests that drive real Python clients run (`LACHESIS_PYTHON`: `.ci/run` sets
/// it to the notebooks' venv, which has grpcio-reflection), or `None` to skip
/// (with `why` printed). Where `CI` is set a missing one fails the test: CI must run it.
pub fn python(why: &str) -> Option<std::path::PathBuf> {
    match std::env::var_os("LACHESIS_PYTHON") {
        Some(p) => {
            let p = std::path::PathBuf::from(p);
            assert!(p.exists(), "LACHESIS_PYTHON={} does not exist", p.display());
            Some(p)
        }
        None if std::env::var_os("CI").is_some() => {
            panic!("CI is set but LACHESIS_PYTHON is not: {why} must run in CI")
        }
        None => {
            eprintln!(
                "skipped: set LACHESIS_PYTHON to a python with the packages of \
                 notebooks/requirements.txt ({why})"
            );
            None
        }
    }
}
