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

use common::{blessing, json_differences, lachesis, stdout_of};
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

/// The small comparison's arguments: three policies, two 100-job windows of the bundled ITP
/// excerpt at load 1.0 on 16 GPUs, `resamples` bootstrap draws, into `out`.
fn small_compare<'a>(out: &'a Path, resamples: &'a str) -> Vec<&'a str> {
    vec![
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
        resamples,
        "--out",
        out.to_str().expect("a UTF-8 temp path"),
    ]
}

/// Runs the small comparison (100-job windows at load 1.0 on 16 GPUs queue enough for the three
/// policies to differ; 40 jobs at 0.8 gave them identical results) into `out` and returns its `comparison.json` without the fields
/// that differ between identical runs (wall time, threads, the command line).
fn compare(out: &Path, threads: &str) -> Value {
    let mut args = small_compare(out, "500");
    args.extend(["--threads", threads]);
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

/// The README's main command, `lachesis compare` with no arguments, exactly as a newcomer runs
/// it (only the output folder moved): the shipped model against the strongest heuristics on
/// the bundled excerpt at contention. The policies must really differ there (plain FIFO
/// clearly behind the winner), and the closing line names the winner, its lead over the
/// runner-up and the paired interval of that lead.
#[test]
fn the_default_comparison_shows_the_model_against_the_heuristics_at_contention() {
    let out = out_dir("compare_defaults");
    let run = lachesis(&["compare", "--out", out.to_str().expect("a UTF-8 temp path")]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "lachesis compare failed ({}):\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        stdout.starts_with("traces/itp/cluster10.csv on 3x8:V100 (3 nodes, 24 GPUs"),
        "{stdout}"
    );
    assert!(
        stdout.contains("7 policies x 36 units (12 windows of 150 jobs x loads 0.8,1,1.2"),
        "{stdout}"
    );
    let json: Value = serde_json::from_str(
        &fs::read_to_string(out.join("comparison.json")).expect("comparison.json written"),
    )
    .expect("comparison.json is JSON");
    let policies: Vec<&str> = json["setup"]["policies"]
        .as_array()
        .expect("policies")
        .iter()
        .map(|p| p.as_str().expect("a policy name"))
        .collect();
    assert_eq!(
        policies,
        [
            "rl:models/default",
            "gittins/best-fit/gittins-preempt",
            "tiresias/best-fit/las-preempt",
            "sjf/best-fit",
            "f1/best-fit/easy",
            "fifo/best-fit/easy",
            "fifo/best-fit"
        ]
    );
    assert_eq!(json["setup"]["baseline"], "rl:models/default");

    // At contention the policies differ: plain FIFO's average JCT is above the best one's by
    // more than a tenth, and above the model's with an interval clear of zero.
    let jct = json["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .find(|m| m["key"] == "avg_jct_s")
        .expect("an avg_jct_s metric");
    let rows = jct["policies"].as_array().expect("per-policy rows");
    let means: Vec<f64> = rows
        .iter()
        .map(|p| p["mean"].as_f64().expect("a mean"))
        .collect();
    let best = means.iter().copied().fold(f64::INFINITY, f64::min);
    let fifo = means[5];
    assert!(fifo > 1.1 * best, "FIFO {fifo} s against the best {best} s");
    let fifo_vs_model = &rows[5]["vs_baseline"];
    assert!(
        fifo_vs_model["ci_low"].as_f64().expect("an interval") > 0.0,
        "{fifo_vs_model}"
    );

    // The verdict: the last line before the report's path, naming the policy with the lowest
    // mean and the runner-up, with the paired interval.
    let lines: Vec<&str> = stdout.lines().collect();
    let verdict = lines[lines.len() - 3];
    let mut order: Vec<usize> = (0..means.len()).collect();
    order.sort_by(|a, b| means[*a].total_cmp(&means[*b]));
    let (won, next) = (policies[order[0]], policies[order[1]]);
    assert!(
        verdict.starts_with(&format!("verdict: {won} won: avg JCT ")),
        "{verdict}"
    );
    assert!(verdict.contains(&format!("% below {next} (")), "{verdict}");
    assert!(verdict.contains("[95% CI "), "{verdict}");
    assert!(verdict.contains(" of 36 units"), "{verdict}");
    let md = fs::read_to_string(out.join("report.md")).expect("report.md readable");
    assert!(md.contains(&format!("- {verdict}\n")), "{md}");

    // The captured gap: the model's share of the distance from the best heuristic to the
    // lower bound (no oracle runs here), the ratio of the means' differences.
    let gap = lines[lines.len() - 2];
    let h = (1..means.len())
        .min_by(|a, b| means[*a].total_cmp(&means[*b]))
        .expect("heuristics");
    let bound = json["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .find(|m| m["key"] == "min_avg_jct_s")
        .expect("the lower bound")["policies"][0]["mean"]
        .as_f64()
        .expect("a mean");
    let share = 100.0 * (means[h] - means[0]) / (means[h] - bound);
    assert!(
        gap.starts_with(&format!(
            "captured gap: rl:models/default closes {share:.1}% [95% CI "
        )),
        "{gap} (expected {share:.1}%)"
    );
    assert!(
        gap.contains(&format!("from the best heuristic {} (", policies[h]))
            && gap.contains("to the average-JCT lower bound ("),
        "{gap}"
    );
    assert!(md.contains(&format!("- {gap}\n")), "{md}");
    assert_eq!(json["setup"]["captured_gap"][0], gap);
}

/// Policies that run identically (`sjf` and `srtf` on a trace without runtime estimates) share
/// the verdict, and the runner-up is the best policy that differs; when none differs, the
/// verdict says there is no winner.
#[test]
fn the_verdict_names_identical_policies_together() {
    let verdict = |policies: &str| -> String {
        let out = out_dir(&format!("compare_verdict_{}", policies.len()));
        let run = lachesis(&[
            "compare",
            "--policies",
            policies,
            "--windows",
            "2",
            "--load",
            "1.2",
            "--resamples",
            "200",
            "--out",
            out.to_str().expect("a UTF-8 temp path"),
        ]);
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
        let line = stdout.lines().find(|l| l.starts_with("verdict: "));
        line.unwrap_or_else(|| panic!("no verdict in:\n{stdout}"))
            .to_string()
    };
    let three = verdict("fifo/best-fit,sjf/best-fit,srtf/best-fit");
    assert!(
        three.starts_with(
            "verdict: sjf/best-fit (identical to srtf/best-fit on every unit) won: avg JCT "
        ),
        "{three}"
    );
    assert!(three.contains("% below fifo/best-fit ("), "{three}");
    assert_eq!(
        verdict("sjf/best-fit,srtf/best-fit").split(" (").next(),
        Some("verdict: no winner: all 2 policies ran identically on average JCT")
    );
}

/// A typed run (Gavel's cluster, table and workload rule) reports effective throughput, the
/// share of GPU-time on each job's fastest model and the counts of GPU shares and resizes, in
/// the terminal table, `report.md`, `runs.csv` and `comparison.json`; `fastest` puts more GPU-time on the fastest model than
/// best fit. An untyped comparison has none of these rows (the golden test above).
#[test]
fn a_typed_comparison_shows_effective_throughput_and_fastest_model_share() {
    let out = out_dir("compare_typed");
    let run = lachesis(&[
        "compare",
        "--trace",
        "traces/openb/openb_pod_excerpt.csv",
        "--cluster",
        "gavel",
        "--throughputs",
        "gavel",
        "--assign-workloads",
        "gavel",
        "--policies",
        "tiresias/best-fit/las-preempt,het-las/fastest/las-preempt,fifo/fastest",
        "--windows",
        "2",
        "--window-jobs",
        "60",
        "--load",
        "1.0",
        "--resamples",
        "200",
        "--out",
        out.to_str().expect("a UTF-8 temp path"),
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    for row in ["effective throughput", "GPU-time on fastest model"] {
        assert!(stdout.contains(row), "no {row} row in:\n{stdout}");
    }
    let md = fs::read_to_string(out.join("report.md")).expect("report.md");
    assert!(md.contains("| GPU-time on fastest model ↑ |"), "{md}");
    assert!(
        md.contains("Effective throughput: reference GPU-hours"),
        "{md}"
    );
    let csv = fs::read_to_string(out.join("runs.csv")).expect("runs.csv");
    assert!(
        csv.lines()
            .next()
            .is_some_and(|h| h.ends_with(",effective_throughput,fastest_gpu_share,shares,resizes")),
        "{csv}"
    );
    let json: Value = serde_json::from_str(
        &fs::read_to_string(out.join("comparison.json")).expect("comparison.json"),
    )
    .expect("JSON");
    let share = json["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .find(|m| m["key"] == "fastest_gpu_share")
        .expect("the fastest-model row");
    let mean = |i: usize| share["policies"][i]["mean"].as_f64().expect("a mean");
    assert!(
        mean(1) > mean(0),
        "fastest {} vs best fit {}",
        mean(1),
        mean(0)
    );
    assert!((0.0..=1.0).contains(&mean(2)));
    // The counts of GPU shares and resizes are reported, neither better nor worse: no wins or
    // losses. None of these policies shares or resizes, so the terminal leaves the two rows
    // out (the same for every policy on every unit) and says so; the report keeps them.
    let left_out = stdout
        .lines()
        .find(|l| l.starts_with("left out, the same for every policy on every unit: "))
        .unwrap_or_else(|| panic!("no left-out line in:\n{stdout}"));
    for row in ["GPU shares started", "elastic resizes"] {
        assert!(left_out.contains(row), "{row} not in {left_out}");
        assert!(!stdout.contains(&format!("{row} (a count)")), "{stdout}");
    }
    assert!(md.contains("| elastic resizes (count) |"), "{md}");
    for key in ["shares", "resizes"] {
        let m = json["metrics"]
            .as_array()
            .expect("metrics")
            .iter()
            .find(|m| m["key"] == key)
            .unwrap_or_else(|| panic!("no {key} row"));
        assert_eq!(m["better"], "neither");
        for p in m["policies"].as_array().expect("policies").iter().skip(1) {
            assert_eq!(p["vs_baseline"]["wins"], 0, "{m:#}");
            assert_eq!(p["vs_baseline"]["losses"], 0, "{m:#}");
        }
    }
}

/// A trace with dependencies adds the pipeline metrics to every part of the report; other
/// traces' reports are unchanged (the golden comparison above).
#[test]
fn a_comparison_on_pipelines_reports_their_completion_and_critical_path() {
    let out = out_dir("compare_pipelines");
    let run = lachesis(&[
        "compare",
        "--trace",
        "traces/pipeline.csv",
        "--cluster",
        "1x8:V100",
        "--policies",
        "fifo/best-fit,sjf/best-fit",
        "--windows",
        "0",
        "--load",
        "none",
        "--resamples",
        "100",
        "--out",
        out.to_str().expect("a UTF-8 temp path"),
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    let md = fs::read_to_string(out.join("report.md")).expect("report.md");
    for row in [
        "avg pipeline completion (s)",
        "critical-path slowdown",
        "ready stages' wait share",
    ] {
        assert!(
            stdout.contains(row) || stdout.contains("left out"),
            "no {row} in:\n{stdout}"
        );
        assert!(md.contains(row), "no {row} in:\n{md}");
    }
    let csv = fs::read_to_string(out.join("runs.csv")).expect("runs.csv");
    assert!(
        csv.lines().next().is_some_and(|h| h.ends_with(
            ",avg_pipeline_completion_s,avg_critical_path_slowdown,ready_wait_share,\
             dependency_never_satisfied"
        )),
        "{csv}"
    );
    // `alert` never runs under either policy.
    assert!(csv.lines().skip(1).all(|l| l.ends_with(",1")), "{csv}");
}

/// The terminal table leaves out metrics no policy differs on (the lower bound, which the jobs
/// fix, on every unit) and says so in one line; the report keeps them. `-q` prints only the
/// verdict lines and where the report is. An unknown name in `--policies` is refused before
/// any work, listing the parts a name could have and pointing to `lachesis policies`.
#[test]
fn constant_rows_are_left_out_quiet_keeps_the_verdict_and_unknown_names_are_listed() {
    let run = |out: &Path, extra: &[&str]| -> String {
        let mut args = small_compare(out, "200");
        args.extend_from_slice(extra);
        let run = lachesis(&args);
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        String::from_utf8_lossy(&run.stdout).into_owned()
    };
    let out = out_dir("compare_left_out");
    let stdout = run(&out, &[]);
    let left_out = stdout
        .lines()
        .find(|l| l.starts_with("left out, the same for every policy on every unit: "))
        .unwrap_or_else(|| panic!("no left-out line in:\n{stdout}"));
    assert!(left_out.contains("avg JCT lower bound (s)"), "{left_out}");
    assert!(!stdout.contains("avg JCT lower bound (s) ("), "{stdout}");
    // Rows that differ stay, and nothing left out is one of them.
    assert!(stdout.contains("avg JCT (s) (lower is better)"), "{stdout}");
    assert!(!left_out.contains("avg JCT (s),"), "{left_out}");
    let json: Value = serde_json::from_str(
        &fs::read_to_string(out.join("comparison.json")).expect("comparison.json"),
    )
    .expect("JSON");
    for m in json["metrics"].as_array().expect("metrics") {
        let label = m["label"].as_str().expect("a label");
        let means: Vec<f64> = (m["policies"].as_array().expect("policies"))
            .iter()
            .map(|p| p["mean"].as_f64().expect("a mean"))
            .collect();
        let shown = stdout.contains(&format!("\n{label} ("));
        // A shown row differs somewhere; a row left out has one mean for every policy.
        if !shown {
            assert!(left_out.contains(label), "{label} neither shown nor named");
            assert!(means.iter().all(|x| *x == means[0]), "{label}: {means:?}");
        }
    }
    let md = fs::read_to_string(out.join("report.md")).expect("report.md");
    assert!(md.contains("| avg JCT lower bound (s) ↓ |"), "{md}");

    let quiet = run(&out_dir("compare_quiet"), &["-q"]);
    assert!(!quiet.contains("(lower is better)"), "{quiet}");
    let lines: Vec<&str> = quiet.lines().filter(|l| !l.is_empty()).collect();
    assert!(lines.iter().any(|l| l.starts_with("verdict: ")), "{quiet}");
    assert!(
        lines.last().is_some_and(|l| l.starts_with("report: ")),
        "{quiet}"
    );

    let run = lachesis(&["compare", "--policies", "fifo/best-fit,srpt"]);
    assert!(!run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("--policies: unknown policy `srpt`")
            && stderr.contains("orderings: fifo, priority, sjf, srtf")
            && stderr.contains("placements: first-fit, best-fit")
            && stderr.contains("`lachesis policies`"),
        "{stderr}"
    );
    let run = lachesis(&["compare", "--policies", "srpt/best-fit"]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("no ordering `srpt` (known: fifo,")
            && stderr.contains("`lachesis policies`"),
        "{stderr}"
    );
}

/// With tenants (the tiny trace's vision, nlp and infra), `report.md` has the longest wait of
/// each tenant per policy, the mean over units. On one unit (the whole trace) the worst
/// tenant's longest wait is the run's: the largest cell of a column is the policy's
/// `max_wait_s`.
#[test]
fn the_report_gives_the_longest_wait_per_tenant() {
    let out = out_dir("compare_tenant_waits");
    stdout_of(&[
        "compare",
        "--trace",
        "traces/tiny.csv",
        "--cluster",
        "4x8:V100+4x8:A100+4x1:T4",
        "--policies",
        "fifo/best-fit,sjf/best-fit",
        "--windows",
        "0",
        "--load",
        "3.0",
        "--resamples",
        "50",
        "-q",
        "--out",
        out.to_str().expect("a UTF-8 temp path"),
    ]);
    let md = fs::read_to_string(out.join("report.md")).expect("report.md");
    let at = md
        .find("## Longest wait per tenant")
        .unwrap_or_else(|| panic!("no tenant table in:\n{md}"));
    let rows: Vec<Vec<f64>> = md[at..]
        .lines()
        .filter(|l| {
            ["| vision |", "| nlp |", "| infra |"]
                .iter()
                .any(|t| l.starts_with(t))
        })
        .map(|l| {
            l.split('|')
                .skip(2)
                .filter(|c| !c.trim().is_empty())
                .map(|c| c.trim().replace(',', "").parse::<f64>().unwrap_or(0.0))
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 3, "{}", &md[at..]);
    let json: Value =
        serde_json::from_str(&fs::read_to_string(out.join("comparison.json")).expect("json"))
            .expect("JSON");
    let max_wait = json["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .find(|m| m["key"] == "max_wait_s")
        .expect("a max wait row");
    for (p, policy) in max_wait["policies"]
        .as_array()
        .expect("policies")
        .iter()
        .enumerate()
    {
        // One unit (the whole trace): the worst tenant's longest wait is the run's.
        let worst = rows.iter().map(|r| r[p]).fold(0.0, f64::max);
        let want = policy["mean"].as_f64().expect("a mean");
        assert!(
            want > 3600.0,
            "policy {p}: the trace queues at load 3 ({want} s)"
        );
        assert!((worst - want).abs() <= 1.0, "policy {p}: {worst} vs {want}");
    }
}

/// Gavel's round-based policies preempt every 6-minute round: with the default 30-min
/// checkpoints every round would lose its work and the run would never end, so `compare`
/// refuses at once, saying why; with `--checkpoint 1s` (applied to every policy) it runs.
#[test]
fn gavel_rounds_are_refused_with_checkpoints_longer_than_a_round() {
    let run = |name: &str, extra: &[&str]| {
        let out = out_dir(name);
        let mut args = vec![
            "compare",
            "--trace",
            "traces/itp/cluster10.csv",
            "--cluster",
            "2x8:V100",
            "--policies",
            "gavel-maxmin,fifo/best-fit",
            "--windows",
            "1",
            "--window-jobs",
            "30",
            "--load",
            "0.8",
            "--resamples",
            "50",
            "-q",
            "--out",
            out.to_str().expect("a UTF-8 temp path"),
        ];
        args.extend_from_slice(extra);
        lachesis(&args)
    };
    let refused = run("compare_gavel_default", &[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        stderr.contains(
            "gavel-maxmin reassign GPUs every 360 s round, but jobs checkpoint every 1800 s"
        ),
        "{stderr}"
    );
    let ran = run("compare_gavel_1s", &["--checkpoint", "1s"]);
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
}

/// A comparison run as shards (as a job array's tasks run it) and merged writes what one run
/// writes: the same comparison.json, wall time aside, and the same runs.csv. Partial results
/// are refused, naming the missing shard; a shard with no units (3 shards of 2 units) is fine.
#[test]
fn shards_merge_into_the_report_one_run_writes() {
    let whole = out_dir("compare_whole");
    let split = out_dir("compare_split");
    let ok = |args: &[&str]| {
        let out = lachesis(args);
        assert!(
            out.status.success(),
            "lachesis {args:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let with = |extra: &[&'static str]| {
        let mut args = small_compare(&split, "500");
        args.extend(extra);
        args
    };
    ok(&small_compare(&whole, "500"));
    ok(&with(&["--shard", "0/3"]));
    ok(&with(&["--shard", "2/3"]));
    let refused = common::stderr_of_failing(&with(&["--merge"]));
    assert!(
        refused.contains("shards missing: 1-of-3"),
        "the missing shard is named: {refused}"
    );
    assert!(!split.join("comparison.json").exists(), "nothing merged");
    ok(&with(&["--shard", "1/3"]));
    ok(&with(&["--merge"]));

    let read = |dir: &Path| {
        let text = fs::read_to_string(dir.join("comparison.json")).expect("comparison.json");
        let mut json: Value = serde_json::from_str(&text).expect("JSON");
        let setup = json["setup"].as_object_mut().expect("a setup");
        setup.remove("wall_s");
        let command = setup["command"].as_str().expect("a command").to_string();
        setup["command"] = Value::from(command.replace("compare_split", "compare_whole"));
        json
    };
    assert_eq!(read(&whole), read(&split));
    assert_eq!(
        fs::read_to_string(whole.join("runs.csv")).expect("runs.csv"),
        fs::read_to_string(split.join("runs.csv")).expect("runs.csv")
    );
}

/// `compare --slurm` against stand-ins for `sbatch` and `squeue` (shell scripts first on PATH)
/// that run the array's tasks at once, but lose task 1 on the first submission (as a node
/// failure would): the task is resubmitted alone and the report is merged; with no retries
/// left the run fails naming the task and its log, and nothing is merged.
#[test]
fn a_task_that_left_no_shard_is_resubmitted_and_partial_results_are_never_merged() {
    use std::os::unix::fs::PermissionsExt;
    let fake = out_dir("compare_fake_slurm");
    fs::create_dir_all(&fake).expect("a scratch directory");
    let script = |name: &str, text: &str| {
        let path = fake.join(name);
        fs::write(&path, text).expect("a stand-in written");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("executable");
    };
    script(
        "sbatch",
        "#!/bin/bash\n\
         array=''; file=''\n\
         for a in \"$@\"; do case \"$a\" in --array=*) array=\"${a#--array=}\";; --*) ;; *) file=\"$a\";; esac; done\n\
         n=$(( $(cat \"$FAKE_DIR/calls\" 2>/dev/null || echo 0) + 1 )); echo $n > \"$FAKE_DIR/calls\"\n\
         echo \"$array\" >> \"$FAKE_DIR/arrays\"\n\
         IFS=, read -ra ids <<< \"${array%%%*}\"\n\
         for i in \"${ids[@]}\"; do\n\
           if [ \"$i\" = 1 ] && { [ $n = 1 ] || [ -n \"$FAKE_ALWAYS\" ]; }; then continue; fi\n\
           SLURM_ARRAY_TASK_ID=$i sh \"$file\" > /dev/null 2>&1\n\
         done\n\
         echo \"$(( 100 + n ));cluster\"\n",
    );
    script("squeue", "#!/bin/sh\nexit 0\n");
    let path = format!(
        "{}:{}",
        fake.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = |name: &str, extra: &[&str]| {
        let out = out_dir(name);
        let _ = fs::remove_file(fake.join("calls"));
        let _ = fs::remove_file(fake.join("arrays"));
        let mut args = small_compare(&out, "300");
        args.extend(["--slurm", "3", "--slurm-throttle", "2"]);
        args.extend(extra);
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_lachesis"))
            .args(&args)
            .env("PATH", &path)
            .env("FAKE_DIR", &fake)
            .env("FAKE_ALWAYS", if extra.is_empty() { "" } else { "1" })
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("lachesis runs");
        let arrays = fs::read_to_string(fake.join("arrays")).unwrap_or_default();
        (out, output, arrays)
    };

    let (out, output, arrays) = run("compare_fake_slurm_retried", &[]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(arrays, "0,1,2%2\n1%2\n", "task 1 resubmitted alone");
    assert!(
        stdout.contains("slurm: job 102, 1 of 3 tasks (attempt 2 of 3)"),
        "{stdout}"
    );
    assert!(out.join("comparison.json").is_file(), "merged");

    let (out, output, arrays) = run("compare_fake_slurm_lost", &["--slurm-retries", "0"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert_eq!(arrays, "0,1,2%2\n");
    assert!(
        stderr.contains("tasks [1] left no shard after 1 attempts; nothing merged")
            && stderr.contains("task-1.log"),
        "{stderr}"
    );
    assert!(!out.join("comparison.json").exists(), "nothing merged");
}
