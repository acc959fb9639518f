//! Golden test of `lachesis compare` on a tiny trace: the metrics of `comparison.json` (means
//! and paired statistics) must reproduce `tests/golden/compare_cluster10.json` (floats to a
//! relative 1e-9), the report files must exist, and the result must not depend on threads.
//!
//! After an intended change of results, regenerate the file, then review its diff:
//!
//! ```sh
//! LACHESIS_BLESS=1 cargo test --test compare
//! ```

mod common;

use common::{blessing, json_differences, lachesis};
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};

const GOLDEN: &str = "tests/golden/compare_cluster10.json";
const SVGS: [&str; 4] = [
    "jct_cdf.svg",
    "load_sweep.svg",
    "alloc_timeline.svg",
    "queue_timeline.svg",
];

/// A fresh output folder for one test (removed first, so stale files cannot pass).
fn out_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = fs::remove_dir_all(&dir);
    dir
}

/// Runs the small comparison (100-job windows at load 1.0 on 16 GPUs queue enough for the three
/// policies to differ; 40 jobs at 0.8 gave them identical results) into `out` and returns its `comparison.json` without the fields
/// that differ between identical runs (wall time, threads, the command line).
fn compare(out: &Path, threads: &str) -> Value {
    let out_arg = out.to_str().expect("a UTF-8 temp path");
    let args = [
        "compare",
        "--trace",
        "traces/itp/cluster10.csv",
        "--cluster",
        "2x8:V100",
        "--policies",
        "fifo/best-fit,sjf/best-fit,fifo/best-fit/easy",
        "--windows",
        "2",
        "--window-jobs",
        "100",
        "--load",
        "1.0",
        "--resamples",
        "500",
        "--threads",
        threads,
        "--out",
        out_arg,
    ];
    let run = lachesis(&args);
    assert!(
        run.status.success(),
        "lachesis {args:?} failed ({}):\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    let text = fs::read_to_string(out.join("comparison.json")).expect("comparison.json written");
    let mut json: Value = serde_json::from_str(&text).expect("comparison.json is JSON");
    let setup = json["setup"]
        .as_object_mut()
        .expect("comparison.json has a setup object");
    for key in ["wall_s", "threads", "command"] {
        setup.remove(key);
    }
    json
}

#[test]
fn comparison_matches_the_golden_file() {
    let out = out_dir("compare_golden");
    let actual = compare(&out, "2");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(GOLDEN);
    if blessing() {
        let text = serde_json::to_string_pretty(&actual).expect("JSON serializes") + "\n";
        fs::write(&path, text).expect("golden file written");
        eprintln!("blessed {}", path.display());
    } else {
        let text = fs::read_to_string(&path)
            .unwrap_or_else(|_| panic!("no {GOLDEN} (LACHESIS_BLESS=1 writes it)"));
        let golden: Value = serde_json::from_str(&text).expect("the golden file is JSON");
        let diffs = json_differences(&golden, &actual);
        assert!(
            diffs.is_empty(),
            "comparison.json differs from {GOLDEN} (if intended: LACHESIS_BLESS=1 cargo test \
             --test compare, then review the diff):\n{}",
            diffs.join("\n")
        );
    }

    for name in ["report.md", "report.html", "runs.csv"].iter().chain(&SVGS) {
        assert!(out.join(name).is_file(), "compare wrote no {name}");
    }
    let html = fs::read_to_string(out.join("report.html")).expect("report.html readable");
    assert!(
        html.contains(lachesis_serve::ui::STYLE_CSS),
        "report.html has the dashboard's look (its stylesheet, inlined)"
    );
    // `lachesis report` writes the same page again from the directory alone.
    let again = out.join("again.html");
    let path = |p: &Path| p.to_str().expect("a UTF-8 temp path").to_string();
    let run = lachesis(&["report", &path(&out), "-o", &path(&again)]);
    assert!(run.status.success(), "{run:?}");
    assert!(
        fs::read_to_string(&again).expect("lachesis report wrote its page") == html,
        "lachesis report wrote another page than compare"
    );
    for name in SVGS {
        let svg = fs::read_to_string(out.join(name)).expect("SVG readable");
        assert!(svg.contains("<svg"), "{name} is not an SVG");
        assert!(html.contains(&svg), "report.html does not embed {name}");
    }
    // One row per policy and unit (3 policies x 2 windows x 1 load x 1 seed) plus the header.
    let csv = fs::read_to_string(out.join("runs.csv")).expect("runs.csv readable");
    assert_eq!(csv.lines().count(), 1 + 3 * 2);

    // The bound: the same for every policy (every job finished), below each one's average,
    // and the reducible share is what lies between.
    let metric = |key: &str| -> Vec<f64> {
        actual["metrics"]
            .as_array()
            .expect("metrics")
            .iter()
            .find(|m| m["key"] == key)
            .unwrap_or_else(|| panic!("comparison.json has no metric {key}"))["policies"]
            .as_array()
            .expect("policies")
            .iter()
            .map(|p| p["mean"].as_f64().expect("a mean"))
            .collect()
    };
    let (avg, bound, reducible) = (
        metric("avg_jct_s"),
        metric("min_avg_jct_s"),
        metric("reducible_jct_pct"),
    );
    assert!(
        bound[0] > 0.0 && bound.iter().all(|b| (b - bound[0]).abs() < 1e-9),
        "{bound:?}"
    );
    for i in 0..avg.len() {
        assert!(
            avg[i] > bound[i],
            "avg JCT {} not above its bound {}",
            avg[i],
            bound[i]
        );
        assert!(reducible[i] > 0.0 && reducible[i] < 100.0, "{reducible:?}");
    }
    // FIFO queues the most here, so the most of its average could still be won.
    assert!(reducible[0] > reducible[1], "{reducible:?}");
    let md = fs::read_to_string(out.join("report.md")).expect("report.md readable");
    assert!(md.contains("| avg JCT lower bound (s) ↓ |"), "{md}");
    assert!(md.contains("no scheduler can go below it"), "{md}");
    assert!(html.contains("no scheduler can go below it"));
}

#[test]
fn threads_do_not_change_the_comparison() {
    let one = compare(&out_dir("compare_threads_1"), "1");
    let two = compare(&out_dir("compare_threads_2"), "2");
    assert_eq!(one, two);
}
