//! Golden tests: `lachesis simulate --json` on small checked-in traces must reproduce the
//! summaries in `tests/golden/*.json`, every field but `wall_s` (floats to a relative 1e-9).
//!
//! After an intended change of results, regenerate the files, then review their diff:
//!
//! ```sh
//! LACHESIS_BLESS=1 cargo test --test golden
//! ```
//!
//! With `LACHESIS_BLESS=1` the test writes the golden files instead of comparing.

mod common;

use common::{blessing, json_differences, stdout_json, without_wall_time};
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};

/// Golden file name (without `.json`), then the `simulate` arguments.
const CASES: [(&str, &[&str]); 5] = [
    (
        "itp-cluster10_4x8-V100_fifo-best-fit",
        &[
            "--trace",
            "traces/itp/cluster10.csv",
            "--cluster",
            "4x8:V100",
            "--policy",
            "fifo/best-fit",
        ],
    ),
    (
        "itp-cluster10_4x8-V100_fifo-first-fit",
        &[
            "--trace",
            "traces/itp/cluster10.csv",
            "--cluster",
            "4x8:V100",
            "--policy",
            "fifo/first-fit",
        ],
    ),
    (
        "openb-excerpt_openb_fifo-best-fit",
        &[
            "--trace",
            "traces/openb/openb_pod_excerpt.csv",
            "--cluster",
            "openb",
            "--policy",
            "fifo/best-fit",
        ],
    ),
    (
        "tiny_mixed_fifo-best-fit",
        &[
            "--trace",
            "traces/tiny.csv",
            "--cluster",
            "8x8:H100+2x8:V100M32+2x8:A100+1x4:T4",
            "--policy",
            "fifo/best-fit",
        ],
    ),
    (
        // No H100 or V100M32: two jobs skipped as unplaceable.
        "tiny_no-h100_fifo-first-fit_skip-unplaceable",
        &[
            "--trace",
            "traces/tiny.csv",
            "--cluster",
            "4x8:V100+4x8:A100+4x1:T4",
            "--policy",
            "fifo/first-fit",
            "--skip-unplaceable",
        ],
    ),
];

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// Differences between the golden and the actual summary, one line each, `wall_s` aside.
fn differences(golden: &Value, actual: &Value) -> Vec<String> {
    json_differences(
        &without_wall_time(golden.clone()),
        &without_wall_time(actual.clone()),
    )
}

#[test]
fn summaries_match_the_golden_files() {
    let dir = golden_dir();
    let mut failures = Vec::new();
    for (name, args) in CASES {
        let path = dir.join(format!("{name}.json"));
        let mut cmd = vec!["simulate", "--json"];
        cmd.extend_from_slice(args);
        let actual = without_wall_time(stdout_json(&cmd));
        if blessing() {
            let text = serde_json::to_string_pretty(&actual).unwrap() + "\n";
            fs::write(&path, text).unwrap();
            eprintln!("blessed {}", path.display());
            continue;
        }
        let Ok(text) = fs::read_to_string(&path) else {
            failures.push(format!(
                "{name}: no golden file {} (LACHESIS_BLESS=1 writes it)",
                path.display()
            ));
            continue;
        };
        let golden: Value = serde_json::from_str(&text).unwrap();
        failures.extend(
            differences(&golden, &actual)
                .into_iter()
                .map(|d| format!("{name}: {d}")),
        );
    }
    assert!(
        failures.is_empty(),
        "summaries differ from the golden files (if intended: LACHESIS_BLESS=1 cargo test \
         --test golden, then review the diff):\n{}",
        failures.join("\n")
    );
}

#[test]
fn every_golden_file_has_a_case() {
    for entry in fs::read_dir(golden_dir()).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap().to_str().unwrap();
        if stem.starts_with("compare_") {
            continue; // tests/compare.rs owns these
        }
        assert!(
            CASES.iter().any(|(name, _)| *name == stem),
            "{} belongs to no case in tests/golden.rs: remove it",
            path.display()
        );
    }
}

#[test]
fn the_comparison_tolerates_rounding_only() {
    let golden: Value = serde_json::json!({"jobs": 20, "avg_jct_s": 100.0, "wall_s": 1.0});
    let close = serde_json::json!({"jobs": 20, "avg_jct_s": 100.0 + 1e-8, "wall_s": 9.0});
    assert!(differences(&golden, &close).is_empty());
    let far = serde_json::json!({"jobs": 20, "avg_jct_s": 100.0 + 1e-6});
    assert_eq!(differences(&golden, &far).len(), 1);
    let extra = serde_json::json!({"jobs": 21, "avg_jct_s": 100.0, "new": 0});
    assert_eq!(differences(&golden, &extra).len(), 2);
}
