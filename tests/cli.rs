//! End-to-end tests of the `lachesis` command line: the real binary on the checked-in traces.
//!
//! ```sh
//! cargo test --test cli
//! ```

mod common;

use common::{lachesis, stdout_json, stdout_of, without_wall_time};
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};

const ITP: &str = "traces/itp/cluster10.csv";
const OPENB: &str = "traces/openb/openb_pod_excerpt.csv";
const TINY: &str = "traces/tiny.csv";
/// Every job of `tiny.csv` fits: 8 H100 nodes for the 8 x 8 GPU `moe-pretrain`, two V100M32
/// nodes for the 2 x 8 GPU `vit-large`, A100s for `serve-llm`, T4s for the sweeps.
const TINY_CLUSTER: &str = "8x8:H100+2x8:V100M32+2x8:A100+1x4:T4";
/// Leaves out the H100 and V100M32 that `moe-pretrain` and `vit-large` require.
const TINY_SHORT_CLUSTER: &str = "4x8:V100+4x8:A100+4x1:T4";

const SUMMARY_KEYS: [&str; 15] = [
    "jobs",
    "finished",
    "avg_jct_s",
    "p50_jct_s",
    "p95_jct_s",
    "p99_jct_s",
    "avg_wait_s",
    "avg_bsld",
    "makespan_s",
    "gpu_alloc_rate",
    "frag_gpu_rate",
    "energy_kwh",
    "rejected_decisions",
    "events",
    "wall_s",
];

/// A scratch directory under the system temp dir, unique per process and test, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(test: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("lachesis-cli-{}-{test}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("the temp dir is writable");
        TempDir(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn str(&self) -> &str {
        self.0.to_str().expect("temp paths are UTF-8")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn simulate(trace: &str, cluster: &str, extra: &[&str]) -> Value {
    let mut args = vec!["simulate", "--trace", trace, "--cluster", cluster, "--json"];
    args.extend_from_slice(extra);
    stdout_json(&args)
}

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("`{key}` is not a number in {v:#}"))
}

fn count(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("`{key}` is not a count in {v:#}"))
}

/// Runs `lachesis ARGS...`, which must fail cleanly: non-zero exit, no panic. Returns stderr.
fn fails(args: &[&str]) -> String {
    let out = lachesis(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "lachesis {args:?} should fail but succeeded:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        !stderr.contains("panicked"),
        "lachesis {args:?} panicked:\n{stderr}"
    );
    stderr
}

fn assert_mentions(stderr: &str, needles: &[&str]) {
    for needle in needles {
        assert!(
            stderr.contains(needle),
            "error message should mention `{needle}`:\n{stderr}"
        );
    }
}

#[test]
fn simulate_pulls_run_times_to_their_median_as_compare_does() {
    // Spread 1 keeps the trace; 0.5 pulls every run time halfway (on a log scale) to the
    // median, and the same run then has other run times; a negative spread is refused.
    let run = |extra: &[&str]| simulate(ITP, "3x8:V100", extra);
    let plain = run(&[]);
    let same = run(&["--duration-spread", "1"]);
    let pulled = run(&["--duration-spread", "0.5"]);
    assert_eq!(num(&plain, "avg_jct_s"), num(&same, "avg_jct_s"));
    assert_ne!(num(&plain, "avg_jct_s"), num(&pulled, "avg_jct_s"));
    assert_eq!(count(&pulled, "finished"), 260);
    let stderr = fails(&[
        "simulate",
        "--trace",
        ITP,
        "--cluster",
        "3x8:V100",
        "--duration-spread=-1",
    ]);
    assert!(stderr.contains("--duration-spread -1"), "{stderr}");
}

#[test]
fn simulate_json_has_the_summary_and_every_job_finishes() {
    let cases = [
        (ITP, "4x8:V100", "fifo/best-fit", 260),
        (ITP, "4x8:V100", "fifo/first-fit", 260),
        (OPENB, "openb", "fifo/best-fit", 381),
        (OPENB, "openb", "fifo/first-fit", 381),
        (TINY, TINY_CLUSTER, "fifo/best-fit", 20),
        (TINY, TINY_CLUSTER, "fifo/first-fit", 20),
    ];
    for (trace, cluster, policy, jobs) in cases {
        let s = simulate(trace, cluster, &["--policy", policy]);
        let case = format!("{trace} on {cluster} under {policy}");
        for key in SUMMARY_KEYS {
            assert!(s.get(key).is_some(), "{case}: no `{key}` in {s:#}");
        }
        assert_eq!(s["policy"], policy, "{case}");
        assert_eq!(count(&s, "jobs"), jobs, "{case}");
        assert_eq!(count(&s, "finished"), jobs, "{case}");
        assert_eq!(count(&s, "rejected_decisions"), 0, "{case}");
        for key in ["gpu_alloc_rate", "frag_gpu_rate"] {
            let rate = num(&s, key);
            assert!((0.0..=1.0).contains(&rate), "{case}: {key} = {rate}");
        }
        let jct = ["p50_jct_s", "p95_jct_s", "p99_jct_s"].map(|k| num(&s, k));
        assert!(jct[0] <= jct[1] && jct[1] <= jct[2], "{case}: JCT {jct:?}");
        assert!(num(&s, "avg_bsld") >= 1.0, "{case}");
        assert!(num(&s, "energy_kwh") > 0.0, "{case}");
        // Every job is submitted before the last finish, so the makespan covers the trace span.
        let stats = stdout_json(&["trace", "stats", trace, "--json"]);
        assert!(
            num(&s, "makespan_s") >= num(&stats, "span_s"),
            "{case}: makespan {} < span {}",
            s["makespan_s"],
            stats["span_s"]
        );
    }
}

#[test]
fn out_dir_holds_the_summary_jobs_and_timeline() {
    for (trace, cluster) in [(TINY, TINY_CLUSTER), (ITP, "4x8:V100")] {
        let tmp = TempDir::new(&format!("out-{}", trace.replace('/', "_")));
        let out = tmp.path().join("run");
        let out_str = out.to_str().unwrap();
        let printed = simulate(trace, cluster, &["--out", out_str]);

        let written: Value =
            serde_json::from_str(&fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
        assert_eq!(
            without_wall_time(written),
            without_wall_time(printed.clone())
        );

        let jobs_csv = fs::read_to_string(out.join("jobs.csv")).unwrap();
        let mut lines = jobs_csv.lines();
        assert_eq!(
            lines.next(),
            Some(
                "job_id,submit_s,start_s,end_s,wait_s,jct_s,bsld,preemptions,gpus,tenant,measured,nodes"
            )
        );
        let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
        assert_eq!(rows.len() as u64, count(&printed, "jobs"), "{trace}");
        for row in &rows {
            assert_eq!(row.len(), 12, "{trace}: {row:?}");
            let t = |i: usize| -> f64 {
                row[i]
                    .parse()
                    .unwrap_or_else(|e| panic!("{trace}: field {i} of {row:?}: {e}"))
            };
            let (submit, start, end) = (t(1), t(2), t(3));
            assert!(submit <= start && start <= end, "{trace}: {row:?}");
            // Fields are printed to the millisecond.
            assert!((t(4) - (start - submit)).abs() < 2e-3, "wait: {row:?}");
            assert!((t(5) - (end - submit)).abs() < 2e-3, "jct: {row:?}");
            assert!(!row[9].is_empty(), "{trace}: every job has a tenant");
            assert_eq!(row[10], "true", "{trace}: no warm-up, every job measured");
            assert!(!row[11].is_empty(), "{trace}: a finished job ran somewhere");
        }

        let timeline = fs::read_to_string(out.join("timeline.csv")).unwrap();
        let mut lines = timeline.lines();
        assert_eq!(
            lines.next(),
            Some("time_s,allocated_gpus,running_jobs,queue_len,frag_gpus,power_w")
        );
        let times: Vec<f64> = lines
            .map(|l| l.split(',').next().unwrap().parse().unwrap())
            .collect();
        assert!(!times.is_empty(), "{trace}: empty timeline");
        assert!(times.is_sorted(), "{trace}: timeline goes back in time");
    }
}

#[test]
fn same_seed_gives_the_same_summary() {
    let run = || simulate(ITP, "4x8:V100", &["--seed", "42", "--load", "0.8"]);
    let first = without_wall_time(run());
    assert_eq!(first["seed"], 42);
    assert_eq!(first, without_wall_time(run()));
    let tiny = || simulate(TINY, TINY_CLUSTER, &["--seed", "7"]);
    assert_eq!(without_wall_time(tiny()), without_wall_time(tiny()));
}

#[test]
fn load_window_and_warmup_shape_the_run() {
    let base = simulate(ITP, "4x8:V100", &[]);
    let total = count(&base, "jobs");

    // Compressing arrivals from the trace's ~0.16 to 0.9 offered load queues more.
    let loaded = simulate(ITP, "4x8:V100", &["--load", "0.9"]);
    assert_eq!(count(&loaded, "jobs"), total);
    assert!(num(&loaded, "makespan_s") < num(&base, "makespan_s"));
    assert!(num(&loaded, "avg_wait_s") > num(&base, "avg_wait_s"));
    assert!(num(&loaded, "gpu_alloc_rate") > num(&base, "gpu_alloc_rate"));

    // The trace starts at 26.2 d and ends at 59.1 d.
    let windowed = simulate(ITP, "4x8:V100", &["--window", "27d..40d"]);
    let kept = count(&windowed, "jobs");
    assert!(0 < kept && kept < total, "window kept {kept} of {total}");
    assert_eq!(count(&windowed, "finished"), kept);

    let tmp = TempDir::new("warmup");
    let warm = simulate(ITP, "4x8:V100", &["--warmup", "5d", "--out", tmp.str()]);
    let warmup_jobs = count(&warm, "warmup_jobs");
    assert!(warmup_jobs > 0);
    assert_eq!(count(&warm, "jobs") + warmup_jobs, total);
    assert_eq!(count(&warm, "finished"), count(&warm, "jobs"));
    // jobs.csv keeps the warm-up jobs, flagged unmeasured.
    let jobs_csv = fs::read_to_string(tmp.path().join("jobs.csv")).unwrap();
    let measured: Vec<&str> = jobs_csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(10).unwrap())
        .collect();
    assert_eq!(measured.len() as u64, total);
    assert_eq!(
        measured.iter().filter(|m| **m == "false").count() as u64,
        warmup_jobs
    );
}

#[test]
fn default_output_is_a_table() {
    let out = lachesis(&[
        "simulate",
        "--trace",
        ITP,
        "--cluster",
        "4x8:V100",
        "--quiet",
    ]);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("JCT"), "{stdout}");
    assert!(stdout.contains("GPU allocation"), "{stdout}");
    assert!(serde_json::from_str::<Value>(&stdout).is_err());
}

#[test]
fn missing_trace_names_the_path() {
    let path = "traces/no-such-trace.csv";
    let stderr = fails(&["simulate", "--trace", path, "--cluster", "4x8:V100"]);
    assert_mentions(&stderr, &[path]);
    let stderr = fails(&["trace", "stats", path]);
    assert_mentions(&stderr, &[path]);
}

#[test]
fn malformed_trace_names_file_line_and_field() {
    let tmp = TempDir::new("malformed-trace");
    let path = tmp.path().join("bad.csv");
    // Lines 1-3 are the version, tenants and header; line 5 is the second job.
    let text = [
        "#lachesis-trace v1",
        "#tenants,vision",
        "job_id,submit_s,duration_s,tasks,gpus,gpu_milli,cpu_milli,mem_mib,gpu_types,tenant,priority,qos,preemptible,kind,estimate_s",
        "a,0,3600,1,1,1000,8000,32768,,vision,0,latency-sensitive,true,training,",
        "b,30,soon,1,1,1000,8000,32768,,vision,0,latency-sensitive,true,training,",
        "c,60,3600,1,1,1000,8000,32768,,vision,0,latency-sensitive,true,training,",
    ]
    .join("\n");
    fs::write(&path, text).unwrap();
    let path = path.to_str().unwrap();
    let stderr = fails(&["simulate", "--trace", path, "--cluster", "4x8:V100"]);
    assert_mentions(&stderr, &[path, "line 5", "duration_s"]);
}

/// The bundled pipelines (`traces/README.md`) on two 8-GPU nodes.
const PIPELINE: &str = "traces/pipeline.csv";

#[test]
fn simulate_runs_pipelines_and_lists_jobs_never_satisfied() {
    let args = [
        "simulate",
        "--trace",
        PIPELINE,
        "--cluster",
        "2x8:V100",
        "--policy",
        "fifo/best-fit",
    ];
    let out = stdout_of(&args);
    assert!(
        out.contains("job alert: DependencyNeverSatisfied (afternotok:eval)"),
        "{out}"
    );
    assert!(out.contains("pipelines "), "{out}");
    let s = stdout_json(&[&args[..], &["--json"]].concat());
    // 13 jobs: `alert` never runs (eval succeeds), the other 12 finish; the ETL pipeline
    // takes its retry branch.
    assert_eq!((count(&s, "jobs"), count(&s, "finished")), (13, 12));
    assert_eq!(count(&s, "dependency_never_satisfied"), 1);
    let p = &s["pipelines"];
    assert_eq!((count(p, "pipelines"), count(p, "completed")), (2, 2));
    assert!(
        p["avg_critical_path_slowdown"].as_f64().unwrap() >= 1.0,
        "{p}"
    );
    // jobs.csv tells when each job became ready.
    let tmp = TempDir::new("pipeline-out");
    stdout_of(&[&args[..], &["--out", tmp.str(), "--quiet"]].concat());
    let jobs = fs::read_to_string(tmp.path().join("jobs.csv")).unwrap();
    assert!(
        jobs.lines()
            .next()
            .unwrap()
            .ends_with(",ready_s,never_satisfied")
    );
    assert!(
        jobs.lines()
            .any(|l| l.starts_with("alert,") && l.ends_with(",,true"))
    );
}

#[test]
fn a_bad_depends_on_names_file_and_line() {
    let tmp = TempDir::new("bad-depends-on");
    let path = tmp.path().join("bad.csv");
    let text = fs::read_to_string(PIPELINE)
        .unwrap()
        .replace("afterok:trial-1:trial-2:trial-3", "afterok:trial-1:trial-9");
    fs::write(&path, text).unwrap();
    let path = path.to_str().unwrap();
    let stderr = fails(&["simulate", "--trace", path, "--cluster", "2x8:V100"]);
    // Line 8 is `eval` (version, tenants and header first).
    assert_mentions(
        &stderr,
        &[
            &format!("{path} line 8, field depends_on"),
            "job eval: depends on trial-9, which is not in the trace",
        ],
    );
}

#[test]
fn unknown_cluster_preset_is_reported() {
    let stderr = fails(&["simulate", "--trace", TINY, "--cluster", "no-such-preset"]);
    assert_mentions(&stderr, &["no-such-preset", "preset"]);
}

#[test]
fn malformed_cluster_file_names_file_and_line() {
    let tmp = TempDir::new("malformed-cluster");
    let path = tmp.path().join("bad.toml");
    fs::write(
        &path,
        "[[nodes]]\ncount = 4\ngpus = 8\ngpu_model = \"V100\"\nthis is not toml\n",
    )
    .unwrap();
    let path = path.to_str().unwrap();
    let stderr = fails(&["simulate", "--trace", ITP, "--cluster", path]);
    assert_mentions(&stderr, &[&format!("{path}:5")]);
}

#[test]
fn unknown_policy_lists_the_known_names() {
    let run = |policy| {
        fails(&[
            "simulate",
            "--trace",
            ITP,
            "--cluster",
            "4x8:V100",
            "--policy",
            policy,
        ])
    };
    assert_mentions(&run("lifo/best-fit"), &["lifo", "fifo"]);
    assert_mentions(
        &run("fifo/bogus-fit"),
        &["random-fit", "first-fit", "best-fit"],
    );
}

#[test]
fn jobs_that_never_fit_stop_the_run_unless_skipped() {
    // The trace's two 16-GPU jobs need two 8-GPU nodes.
    let args = ["simulate", "--trace", ITP, "--cluster", "1x8:V100"];
    assert_mentions(&fails(&args), &["never fit", "--skip-unplaceable"]);
    let s = simulate(ITP, "1x8:V100", &["--skip-unplaceable"]);
    assert_eq!(count(&s, "skipped_unplaceable"), 2);
    assert_eq!(count(&s, "jobs"), 258);
    assert_eq!(count(&s, "finished"), 258);

    // tiny.csv: `moe-pretrain` wants H100, `vit-large` V100M32.
    let args = ["simulate", "--trace", TINY, "--cluster", TINY_SHORT_CLUSTER];
    assert_mentions(&fails(&args), &["moe-pretrain", "vit-large", "H100"]);
    let s = simulate(TINY, TINY_SHORT_CLUSTER, &["--skip-unplaceable"]);
    assert_eq!(count(&s, "skipped_unplaceable"), 2);
    assert_eq!(count(&s, "jobs"), 18);
    assert_eq!(count(&s, "finished"), 18);
}

#[test]
fn bad_window_and_load_are_rejected() {
    let sim = |extra: &[&str]| {
        let mut args = vec!["simulate", "--trace", ITP, "--cluster", "4x8:V100"];
        args.extend_from_slice(extra);
        fails(&args)
    };
    assert_mentions(&sim(&["--window", "5..2"]), &["--window", "5..2"]);
    assert_mentions(&sim(&["--window", "1000d.."]), &["--window", "no job"]);
    assert_mentions(&sim(&["--load=-1"]), &["--load", "-1"]);
    assert_mentions(&sim(&["--load", "0"]), &["--load", "0"]);
    // clap reads a detached `-1` as a flag; it must still fail cleanly.
    sim(&["--load", "-1"]);
    assert_mentions(&sim(&["--warmup", "soon"]), &["--warmup", "soon"]);
}

/// The model card prints its comparisons with `--split 0.7,0.15`; the same split given as
/// two words works too, and one fraction alone is refused with the flag's name.
#[test]
fn compare_split_takes_the_card_spelling_and_two_words() {
    let out = TempDir::new("compare-split");
    let head = [
        "compare",
        "--trace",
        ITP,
        "--cluster",
        "4x8:V100",
        "--split",
    ];
    for split in [&["0.7,0.15"][..], &["0.7", "0.15"][..]] {
        let mut args = head.to_vec();
        args.extend_from_slice(split);
        args.extend_from_slice(&[
            "--part",
            "validation",
            "--policies",
            "fifo/best-fit,sjf/best-fit",
            "--windows",
            "1",
            "--window-jobs",
            "30",
            "--load",
            "1.0",
            "--resamples",
            "100",
            "--out",
            out.str(),
        ]);
        stdout_of(&args);
        let text = std::fs::read_to_string(out.path().join("comparison.json")).unwrap();
        assert!(text.contains("validation part of split 0.7,0.15"), "{text}");
    }
    let mut args = head.to_vec();
    args.extend_from_slice(&["0.7", "--part", "validation", "--out", out.str()]);
    let err = fails(&args);
    assert_mentions(&err, &["--split", "two fractions"]);
}

#[test]
fn trace_stats_reports_jobs_and_offered_load() {
    let stats = stdout_json(&["trace", "stats", ITP, "--cluster", "4x8:V100", "--json"]);
    assert_eq!(count(&stats, "jobs"), 260);
    let load = &stats["offered_load"];
    assert_eq!(count(load, "cluster_gpus"), 32);
    // Offered load = GPU-hours / (GPUs x span): 4023.49 / (32 x 2837918 s / 3600) = 0.1595.
    assert!(
        (num(&stats, "gpu_hours") - 4023.491).abs() < 1e-3,
        "{stats:#}"
    );
    assert_eq!(num(&stats, "span_s"), 2_837_918.0);
    let expected = num(&stats, "gpu_hours") / (32.0 * num(&stats, "span_s") / 3600.0);
    assert!((num(load, "load") - expected).abs() < 1e-12, "{load}");

    let out = lachesis(&["trace", "stats", ITP, "--cluster", "4x8:V100"]);
    assert!(out.status.success());
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("GPUs per job"), "{table}");
    assert!(table.contains("offered load"), "{table}");
    assert!(serde_json::from_str::<Value>(&table).is_err());
}

#[test]
fn policies_lists_the_registered_parts() {
    let out = lachesis(&["policies"]);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    for name in ["fifo", "first-fit", "best-fit"] {
        assert!(stdout.contains(name), "no `{name}` in:\n{stdout}");
    }
}

#[test]
fn bench_fgd_fills_the_openb_cluster_and_writes_csv() {
    let dir = TempDir::new("bench-fgd");
    let args = [
        "bench",
        "fgd",
        "--trace",
        OPENB,
        "--seeds",
        "1",
        "--policies",
        "fifo/best-fit",
        "--at",
        "0.5,1.0",
        "--out",
        dir.str(),
    ];
    let out = lachesis(&args);
    assert!(
        out.status.success(),
        "lachesis {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let csv = fs::read_to_string(dir.path().join("fgd.csv")).expect("fgd.csv written");
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 2, "one row per point:\n{csv}");
    // At half capacity arrived nothing is dropped: allocation is about 0.5 (one pod past it).
    let alloc: f64 = rows[0][3].parse().expect("a rate");
    assert!((0.5..0.51).contains(&alloc), "{csv}");
    assert_eq!(rows[0][5], "0", "{csv}");
    // At full capacity arrived the cluster holds at most all of it.
    let alloc: f64 = rows[1][3].parse().expect("a rate");
    assert!((0.5..=1.0).contains(&alloc), "{csv}");
}

/// `bench decide` runs the shipped model in process both ways on the same snapshots, and the
/// service's baseline beside them: batched deciding takes fewer model passes.
#[test]
fn bench_decide_prints_both_ways_and_batched_takes_fewer_passes() {
    let out = stdout_of(&[
        "bench",
        "decide",
        "--nodes",
        "20",
        "--pending",
        "12",
        "--snapshots",
        "2",
        "--repeats",
        "1",
        "--engine",
    ]);
    let row = |name: &str| -> Vec<f64> {
        let line = out
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} row:\n{out}"));
        line.split_whitespace()
            .skip(1)
            .map(|v| v.parse().unwrap())
            .collect()
    };
    let (stepwise, batched) = (row("stepwise"), row("batched"));
    // Columns: build_ms, decide_p50, decide_p99, passes, placements, preemptions.
    assert_eq!(stepwise.len(), 6, "{out}");
    assert!(batched[3] < stepwise[3], "{out}");
    assert!(batched[4] > 0.0 && stepwise[4] > 0.0, "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("tiresias/best-fit/las-preempt")),
        "the service's baseline is timed beside the model:\n{out}"
    );
    // The service engine's row (decode, decide, encode, total p50 and p99, request and
    // response kB, placements): the same baseline on the same snapshots places as many jobs.
    let lines: Vec<&str> = out.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.trim_start().starts_with("decode "))
        .unwrap_or_else(|| panic!("no engine table:\n{out}"));
    let engine: Vec<f64> = lines[header + 1]
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(engine.len(), 8, "{out}");
    assert!(engine[3] > 0.0 && engine[5] > 0.0, "{out}");
    let baseline_placed: f64 = out
        .lines()
        .find(|l| l.starts_with("tiresias/best-fit/las-preempt"))
        .and_then(|l| l.split_whitespace().nth(5))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no placements in the baseline's row:\n{out}"));
    assert_eq!(engine[7], baseline_placed, "{out}");
    let err = fails(&["bench", "decide", "--model", "no/such/model"]);
    assert_mentions(&err, &["no/such/model"]);
    let err = fails(&["bench", "decide", "--heuristics", "fifo/no-such-placer"]);
    assert_mentions(&err, &["--heuristics", "fifo/no-such-placer"]);
}

#[test]
fn bench_env_prints_rates_ratios_and_a_stable_checksum() {
    let args = [
        "bench",
        "env",
        "--window-jobs",
        "20",
        "--episodes",
        "2",
        "--repeats",
        "1",
        "--threads",
        "2",
        "--envs",
        "3",
    ];
    let out = stdout_of(&args);
    for line in [
        "SchedEnv first-legal",
        "SchedEnv random-legal",
        "VecEnv 3 envs on 1 thread(s)",
        "VecEnv 3 envs on 2 thread(s)",
    ] {
        assert!(out.contains(line), "no {line:?} in:\n{out}");
    }
    assert!(out.contains("x the 200k target") && out.contains("x RLScheduler's 2.9k"));
    // Same seed, same observations: the checksums (not the rates) repeat.
    let checksums = |out: &str| -> Vec<String> {
        out.split("obs checksum ")
            .skip(1)
            .map(|rest| rest.chars().take(16).collect())
            .collect()
    };
    assert_eq!(checksums(&out).len(), 2, "{out}");
    assert_eq!(checksums(&out), checksums(&stdout_of(&args)));
}

#[test]
fn bench_infer_prints_the_decision_time_against_1_ms() {
    let out = stdout_of(&[
        "bench",
        "infer",
        "--candidates",
        "16",
        "--repeats",
        "5",
        "--warmup",
        "1",
    ]);
    let width = lachesis_env::gym::CANDIDATE_WIDTH;
    assert!(
        out.contains(&format!("16 candidates x {width} features")),
        "{out}"
    );
    assert!(out.contains("decision: median"), "{out}");
    assert!(out.contains("x the 1 ms target"), "{out}");
}

#[test]
fn bench_serve_drives_a_separate_service_process_without_errors() {
    let out = stdout_of(&[
        "bench",
        "serve",
        "--scenarios",
        "heuristic-1000x100",
        "--throughput-s",
        "1",
        "--concurrency",
        "2",
        "--nodes",
        "50",
        "--pending",
        "10",
    ]);
    assert!(out.contains("cores"), "{out}");
    let header: Vec<&str> = out
        .lines()
        .find(|l| l.starts_with("scenario "))
        .unwrap_or_else(|| panic!("no table header in:\n{out}"))
        .split_whitespace()
        .collect();
    let row: Vec<&str> = out
        .lines()
        .find(|l| l.starts_with("heuristic-1000x100 "))
        .unwrap_or_else(|| panic!("no heuristic row in:\n{out}"))
        .split_whitespace()
        .collect();
    let cell = |name: &str| {
        let i = header.iter().position(|h| *h == name).expect("a column");
        row[i]
    };
    assert_eq!(cell("snapshot"), "50x10", "{out}");
    assert_eq!(cell("conc"), "2", "{out}");
    assert_eq!(cell("errors"), "0", "{out}");
    let rate: f64 = cell("decisions/s").parse().expect("a rate");
    assert!(rate > 0.0, "{out}");
    // Some of the pending jobs fit (or preempt their way in) on every snapshot.
    let placed: f64 = cell("placed/s").parse().expect("a rate");
    assert!(placed > 0.0, "{out}");
    assert!(out.contains(">= 2,000 decisions/s: "), "{out}");
}

#[test]
fn policy_config_tunes_tiresias_and_rejects_unknown_fields() {
    let dir =
        std::env::temp_dir().join(format!("lachesis-cli-{}-policy-config", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.toml");
    fs::write(
        &good,
        "[tiresias]\nthresholds_gpu_s = [600.0]\npromote_knob = 0.0\n",
    )
    .unwrap();
    let bad = dir.join("bad.toml");
    fs::write(&bad, "[tiresias]\nthreshold = 3\n").unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "simulate",
            "--trace",
            "traces/itp/cluster10.csv",
            "--cluster",
            "2x8:V100",
            "--load",
            "1.0",
            "--policy",
            "tiresias/best-fit/las-preempt",
            "--tick",
            "10m",
            "--json",
        ];
        args.extend_from_slice(extra);
        stdout_json(&args)
    };
    let default = run(&[]);
    let tuned = run(&["--policy-config", good.to_str().unwrap()]);
    assert_eq!(count(&tuned, "finished"), 260);
    assert_ne!(
        default["avg_jct_s"], tuned["avg_jct_s"],
        "other queues, other schedule"
    );
    let err = fails(&[
        "simulate",
        "--trace",
        "traces/itp/cluster10.csv",
        "--cluster",
        "2x8:V100",
        "--policy",
        "tiresias/best-fit",
        "--policy-config",
        bad.to_str().unwrap(),
    ]);
    assert!(
        err.contains("bad.toml") && err.contains("threshold"),
        "{err}"
    );
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn slurm_bridge_refuses_a_bad_config_naming_the_file_and_field() {
    let dir = std::env::temp_dir().join(format!("lachesis-bridge-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("missing.toml");
    let stderr = fails(&["slurm-bridge", "--config", missing.to_str().unwrap()]);
    assert_mentions(&stderr, &["missing.toml"]);

    let bad = dir.join("bridge.toml");
    std::fs::write(&bad, "[on_service_down]\npolicy = \"sometimes\"\n").unwrap();
    let stderr = fails(&["slurm-bridge", "--config", bad.to_str().unwrap()]);
    assert_mentions(&stderr, &["bridge.toml", "policy", "sometimes"]);

    std::fs::write(&bad, "[on_service_down]\nhold_timeout_s = -1\n").unwrap();
    let stderr = fails(&["slurm-bridge", "--config", bad.to_str().unwrap()]);
    assert_mentions(&stderr, &["bridge.toml", "on_service_down.hold_timeout_s"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn throughputs_and_workload_rules_are_named_and_a_missing_gpu_is_refused() {
    // Typed by Gavel's rule (seed 7) and run at Gavel's rates: the summary names both.
    let typed = simulate(
        "traces/openb/openb_pod_excerpt.csv",
        "4x8:V100+4x8:K80",
        &["--throughputs", "gavel", "--assign-workloads", "gavel:7"],
    );
    assert_eq!(
        typed["trace"],
        "traces/openb/openb_pod_excerpt.csv (workloads gavel (seed 7))"
    );
    assert_eq!(typed["cluster"], "4x8:V100+4x8:K80 (throughputs gavel)");
    assert_eq!(count(&typed, "finished"), count(&typed, "jobs"));
    // Untyped, the table changes nothing but the cluster's name.
    let plain = simulate("traces/openb/openb_pod_excerpt.csv", "4x8:V100", &[]);
    let with_table = simulate(
        "traces/openb/openb_pod_excerpt.csv",
        "4x8:V100",
        &["--throughputs", "gavel"],
    );
    assert_eq!(num(&plain, "avg_jct_s"), num(&with_table, "avg_jct_s"));
    // Gavel measured no A100: typed jobs that may run there are refused, naming it.
    let err = fails(&[
        "simulate",
        "--trace",
        "traces/openb/openb_pod_excerpt.csv",
        "--cluster",
        "4x8:A100",
        "--throughputs",
        "gavel",
        "--assign-workloads",
        "gavel",
    ]);
    assert_mentions(&err, &["throughput table gavel", "A100", "gpu_types"]);
    let err = fails(&[
        "simulate",
        "--trace",
        "traces/openb/openb_pod_excerpt.csv",
        "--cluster",
        "4x8:V100",
        "--assign-workloads",
        "nope",
    ]);
    assert_mentions(&err, &["--assign-workloads nope", "gavel or sia"]);
}

#[test]
fn pollux_elastic_ranges_are_named_resized_and_need_a_table() {
    // Typed by Gavel's rule, then elastic by Pollux's: the trace's name says both, and the
    // elastic heuristic resizes jobs.
    let elastic = simulate(
        "traces/openb/openb_pod_excerpt.csv",
        "4x8:V100+4x8:K80",
        &[
            "--throughputs",
            "gavel",
            "--assign-workloads",
            "gavel:7",
            "--assign-elastic",
            "pollux",
            "--policy",
            "fifo/fastest/elastic",
        ],
    );
    assert_eq!(
        elastic["trace"],
        "traces/openb/openb_pod_excerpt.csv (workloads gavel (seed 7)) (elastic pollux)"
    );
    assert_eq!(count(&elastic, "finished"), count(&elastic, "jobs"));
    assert!(count(&elastic, "resizes") > 0, "{elastic:#}");
    let base = [
        "simulate",
        "--trace",
        "traces/openb/openb_pod_excerpt.csv",
        "--cluster",
        "4x8:V100",
    ];
    let err = fails(&[&base[..], &["--assign-elastic", "pollux"]].concat());
    assert_mentions(&err, &["--assign-elastic pollux needs --throughputs"]);
    let err = fails(
        &[
            &base[..],
            &["--throughputs", "gavel", "--assign-elastic", "sia"],
        ]
        .concat(),
    );
    assert_mentions(&err, &["--assign-elastic sia", "expected pollux"]);
    // Untyped jobs cannot be made elastic: refused rather than silently rigid.
    let err = fails(
        &[
            &base[..],
            &["--throughputs", "gavel", "--assign-elastic", "pollux"],
        ]
        .concat(),
    );
    assert_mentions(
        &err,
        &["no job of", "could be made elastic", "--assign-workloads"],
    );
}

/// `select` runs from the CLI: simulate says what it followed and writes every choice with
/// its scores and reason; compare prints its cost; names and settings it cannot take are
/// refused up front.
#[test]
fn select_runs_in_simulate_and_compare_and_says_what_it_followed() {
    let tmp = TempDir::new("select");
    let out = tmp.path().join("run");
    let cfg = tmp.path().join("policy.toml");
    fs::write(
        &cfg,
        "[select]\nepoch_s = 3600.0\nhorizon_s = 7200.0\nfutures = 2\nmin_history = 5\n",
    )
    .unwrap();
    let simulate = |dir: &Path| {
        stdout_of(&[
            "simulate",
            "--trace",
            ITP,
            "--cluster",
            "2x8:V100",
            "--policy",
            "select:sjf/best-fit+fifo/best-fit+tiresias/best-fit/las-preempt",
            "--policy-config",
            cfg.to_str().unwrap(),
            "--out",
            dir.to_str().unwrap(),
        ])
    };
    let printed = simulate(&out);
    assert!(printed.contains("selector: followed "), "{printed}");
    let log: Value =
        serde_json::from_str(&fs::read_to_string(out.join("selection.json")).unwrap()).unwrap();
    let choices = log["choices"].as_array().expect("choices");
    assert!(choices.len() >= 2, "{log}");
    for c in choices {
        assert_eq!(c["scores"].as_array().unwrap().len(), 3, "{c}");
        assert!(!c["why"].as_str().unwrap().is_empty());
    }
    let summary: Value =
        serde_json::from_str(&fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert!(
        summary["selection"]
            .as_str()
            .unwrap()
            .starts_with("followed")
    );
    // The same run twice: the same choices (it never reads the wall clock to decide).
    let again = tmp.path().join("again");
    simulate(&again);
    let log2: Value =
        serde_json::from_str(&fs::read_to_string(again.join("selection.json")).unwrap()).unwrap();
    assert_eq!(log["choices"], log2["choices"]);

    let cmp = tmp.path().join("cmp");
    let printed = stdout_of(&[
        "compare",
        "--trace",
        ITP,
        "--cluster",
        "2x8:V100",
        "--windows",
        "2",
        "--window-jobs",
        "120",
        "--policies",
        "sjf/best-fit,fifo/best-fit,select,select:sjf/best-fit+fifo/best-fit",
        "--policy-config",
        cfg.to_str().unwrap(),
        "-q",
        "--out",
        cmp.to_str().unwrap(),
    ]);
    for line in [
        "select: choosing took ",
        "select:sjf/best-fit+fifo/best-fit: choosing took ",
    ] {
        assert_eq!(
            printed.matches(line).count(),
            1,
            "one line per selector, whatever the units:\n{printed}"
        );
    }
    assert!(printed.contains("captured gap: select closes"), "{printed}");

    let err = fails(&[
        "simulate",
        "--trace",
        ITP,
        "--cluster",
        "2x8:V100",
        "--policy",
        "select:sjf/best-fit+sjf-oracle/best-fit",
    ]);
    assert_mentions(&err, &["sjf-oracle/best-fit", "upper bound"]);
    fs::write(&cfg, "[select]\nhysteresis = 1.5\n").unwrap();
    let err = fails(&[
        "simulate",
        "--trace",
        ITP,
        "--cluster",
        "2x8:V100",
        "--policy",
        "select",
        "--policy-config",
        cfg.to_str().unwrap(),
    ]);
    assert_mentions(&err, &["select.hysteresis"]);
}

#[test]
fn gavel_space_sharing_runs_from_the_cli_and_shares_gpus() {
    // 60 jobs on 12 GPUs: enough contention that the LP pairs jobs on GPUs.
    let args = |policy: &'static str| {
        vec![
            "simulate",
            "--generate",
            "gavel:5.6:60:1",
            "--cluster",
            "1x4:V100+1x4:P100+1x4:K80",
            "--throughputs",
            "gavel",
            "--config",
            "docs/examples/gavel-sim.toml",
            "--policy",
            policy,
            "--json",
        ]
    };
    for policy in ["gavel-maxmin-ss", "gavel-maxmin-agnostic-ss"] {
        let s = stdout_json(&args(policy));
        assert_eq!(count(&s, "finished"), 60, "{policy}: {s}");
        assert_eq!(count(&s, "rejected_decisions"), 0, "{policy}: {s}");
        assert!(count(&s, "shares") > 0, "{policy} shared no GPU: {s}");
    }
    // Without a table there are no pair rates: refused, naming the flag.
    let mut no_table = args("gavel-maxmin-ss");
    no_table.retain(|a| *a != "--throughputs" && *a != "gavel");
    let err = fails(&no_table);
    assert_mentions(&err, &["gavel-maxmin-ss", "--throughputs"]);
}

#[test]
fn generate_gavel_is_a_trace_source_for_simulate_and_compare() {
    let run = |spec: &str| {
        stdout_json(&[
            "simulate",
            "--generate",
            spec,
            "--cluster",
            "gavel",
            "--throughputs",
            "gavel",
            "--policy",
            "fifo/fastest",
            "--json",
        ])
    };
    let s = run("gavel:5.6:40:3");
    assert_eq!(
        s["trace"],
        "gavel-workload (40 jobs, 5.6 jobs/h, 1-GPU, seed 3)"
    );
    assert_eq!(count(&s, "jobs"), 40);
    assert_eq!(count(&s, "finished"), 40);
    // Same spec, same run; another seed, another trace.
    assert_eq!(
        without_wall_time(s.clone()),
        without_wall_time(run("gavel:5.6:40:3"))
    );
    assert_ne!(s["avg_jct_s"], run("gavel:5.6:40:4")["avg_jct_s"]);
    let multi = run("gavel:2:40:3:multi");
    assert_eq!(count(&multi, "finished"), 40);

    let err = fails(&["simulate", "--generate", "gavel:0:40", "--cluster", "gavel"]);
    assert_mentions(&err, &["--generate", "RATE must be > 0", "gavel:RATE:JOBS"]);
    let err = fails(&[
        "simulate",
        "--generate",
        "philly:4:40",
        "--cluster",
        "gavel",
    ]);
    assert_mentions(&err, &["--generate", "unknown generator `philly`"]);
    let err = fails(&[
        "simulate",
        "--generate",
        "gavel:4:40",
        "--trace",
        TINY,
        "--cluster",
        "gavel",
    ]);
    assert_mentions(&err, &["--generate", "--trace"]);
    let err = fails(&["simulate", "--cluster", "gavel"]);
    assert_mentions(&err, &["--trace"]);

    // Written out by `trace generate`, the same jobs replay from the file.
    let dir = TempDir::new("trace-generate");
    let file = dir.path().join("gavel.csv");
    let file = file.to_str().unwrap();
    let printed = stdout_of(&["trace", "generate", "gavel:5.6:40:3", "-o", file]);
    assert!(printed.contains("40 jobs written"), "{printed}");
    let replayed = stdout_json(&[
        "simulate",
        "--trace",
        file,
        "--cluster",
        "gavel",
        "--throughputs",
        "gavel",
        "--policy",
        "fifo/fastest",
        "--json",
    ]);
    assert_eq!(count(&replayed, "finished"), 40);
    let rel = num(&replayed, "avg_jct_s") / num(&s, "avg_jct_s") - 1.0;
    assert!(rel.abs() < 1e-6, "{rel}");
    let err = fails(&["trace", "generate", "gavel:4", "-o", file]);
    assert_mentions(&err, &["trace generate", "no JOBS"]);

    let out = TempDir::new("compare-generate");
    let printed = stdout_of(&[
        "compare",
        "--generate",
        "gavel:5.6:40:3",
        "--cluster",
        "gavel",
        "--throughputs",
        "gavel",
        "--policies",
        "fifo/fastest,fifo/best-fit",
        "--windows",
        "0",
        "--load",
        "none",
        "--resamples",
        "100",
        "-q",
        "-o",
        out.str(),
    ]);
    assert!(printed.contains("report:"), "{printed}");
    let report = fs::read_to_string(out.path().join("report.md")).unwrap();
    assert!(report.contains("gavel-workload (40 jobs"), "{report}");
}

#[test]
fn bench_fork_measures_forks_and_rollouts_with_a_stable_checksum() {
    let args = [
        "bench",
        "fork",
        "--jobs",
        "120",
        "--nodes",
        "6",
        "--forks",
        "4",
        "--repeats",
        "1",
    ];
    let first = stdout_of(&args);
    for line in [
        "forks/s (target 10000",
        "traces/s",
        "events/s (4 futures; checksum",
    ] {
        assert!(first.contains(line), "no `{line}` in:\n{first}");
    }
    let checksum = |s: &str| s.split("checksum ").nth(1).map(str::to_string);
    assert_eq!(checksum(&first), checksum(&stdout_of(&args)));
    assert!(fails(&["bench", "fork", "--jobs", "1"]).contains("--jobs"));
}
