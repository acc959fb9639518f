//! Every shipped excerpt and every shared trace goes through the CLI: `trace stats` counts
//! what the READMEs and FIELDS.txt say, `trace convert` writes a normalized trace that reads
//! back with the same jobs, and the excerpts replay.

mod common;

use common::{lachesis, stderr_of_failing, stdout_json, stdout_of};
use std::path::{Path, PathBuf};

/// (path, rows read, jobs kept) of each shipped excerpt, as its README states.
const EXCERPTS: &[(&str, u64, u64)] = &[
    ("traces/tiny.csv", 20, 20),
    ("traces/pipeline.csv", 13, 13),
    ("traces/itp/cluster10.csv", 260, 260),
    ("traces/openb/openb_pod_excerpt.csv", 400, 381),
    ("traces/swf/KTH-SP2-1996-2.1-cln-first1000.swf", 1000, 1000),
    ("traces/dlrm/dlrm_every48th.csv", 498, 498),
    ("traces/fixtures/helios_sample.csv", 12, 10),
    ("traces/fixtures/philly_sample.csv", 8, 6),
    ("traces/fixtures/sample.swf", 10, 7),
    ("traces/fixtures/philly-sia-format.csv", 25, 24),
];

/// The FGD paper's static openb layout (no times), as its fixture README states.
const STATIC_OPENB: &str = "traces/fixtures/openb-static-format.csv";

fn temp_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lachesis-traces-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// `trace stats --json` agrees with `expected` rows and jobs; `convert` keeps every job.
fn check_converts(path: &str, rows: u64, jobs: u64, out: &Path) {
    let stats = stdout_json(&["trace", "stats", path, "--json"]);
    assert_eq!(stats["read"]["rows"], rows, "{path}: rows");
    assert_eq!(stats["jobs"], jobs, "{path}: jobs");
    let normalized = out.join("normalized.csv");
    let n = normalized.to_str().expect("UTF-8 temp path");
    let conv = lachesis(&["trace", "convert", path, "--out", n]);
    assert!(
        conv.status.success(),
        "{path}: {}",
        String::from_utf8_lossy(&conv.stderr)
    );
    let back = stdout_json(&["trace", "stats", n, "--json"]);
    assert_eq!(back["jobs"], jobs, "{path}: converted");
    assert_eq!(
        back["gpu_hours"], stats["gpu_hours"],
        "{path}: converted GPU work"
    );
    assert_eq!(back["span_s"], stats["span_s"], "{path}: converted span");
}

#[test]
fn excerpts_count_what_their_readmes_say_and_convert() {
    let dir = temp_dir("excerpts");
    for (path, rows, jobs) in EXCERPTS {
        check_converts(path, *rows, *jobs, &dir);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn excerpts_replay_on_sized_clusters() {
    for (path, _, jobs) in EXCERPTS {
        // CPU-only logs (SWF) need CPU capacity: 128 64-core nodes hold the KTH jobs.
        let cluster = if path.ends_with(".swf") {
            "128x0:CPU"
        } else {
            "auto"
        };
        let s = stdout_json(&[
            "simulate",
            "--trace",
            path,
            "--cluster",
            cluster,
            "--json",
            "--skip-unplaceable",
        ]);
        // A job whose dependency can never be satisfied (`pipeline.csv`'s alert) never runs.
        let done = s["finished"].as_u64().unwrap()
            + s["skipped_unplaceable"].as_u64().unwrap()
            + s["dependency_never_satisfied"].as_u64().unwrap_or(0);
        assert_eq!(done, *jobs, "{path}: {s}");
    }
}

#[test]
fn sia_philly_reads_with_counted_drops_and_vcs_as_tenants() {
    let stats = stdout_json(&[
        "trace",
        "stats",
        "traces/fixtures/philly-sia-format.csv",
        "--json",
    ]);
    let read = &stats["read"];
    assert_eq!(read["format"], "sia-philly");
    assert_eq!(read["dropped"]["duplicate-row"], 1, "{stats}");
    assert_eq!(read["notes"]["origin"], "2017-10-01 03:30:57");
    assert_eq!(stats["tenants"], 6);
    // The last of the unsorted rows: 2 days + 22:03:07 - 03:30:57 after the first.
    assert_eq!(stats["last_submit_s"], 239_530.0);
    // Forcing the format reads the same.
    let forced = stdout_json(&[
        "trace",
        "stats",
        "traces/fixtures/philly-sia-format.csv",
        "--format",
        "sia-philly",
        "--json",
    ]);
    assert_eq!(forced, stats);
}

#[test]
fn static_openb_is_benched_and_summarised_but_not_simulated() {
    let stats = stdout_json(&["trace", "stats", STATIC_OPENB, "--json"]);
    assert_eq!(stats["read"]["format"], "openb-static");
    assert_eq!(
        (&stats["read"]["rows"], &stats["jobs"]),
        (&20.into(), &20.into())
    );
    assert_eq!(stats["static_workload"], true);
    assert!(stats["duration_s"].is_null() && stats["first_submit_s"].is_null());

    let dir = temp_dir("static");
    let out = dir.to_str().expect("UTF-8 temp path");
    let args = [
        "bench",
        "fgd",
        "--trace",
        STATIC_OPENB,
        "--seeds",
        "1",
        "--policies",
        "fifo/best-fit,fifo/fgd",
        "--at",
        "0.5,1.0",
        "--out",
        out,
    ];
    let stdout = stdout_of(&args);
    assert!(
        stdout.contains(&format!("{STATIC_OPENB}: 20 pods")),
        "{stdout}"
    );
    let csv = std::fs::read_to_string(dir.join("fgd.csv")).expect("fgd.csv written");
    // Two policies x two points, nothing dropped at half capacity.
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 4, "{csv}");
    for row in rows.iter().filter(|r| r[2] == "0.5") {
        let alloc: f64 = row[3].parse().expect("a rate");
        assert!((0.5..0.51).contains(&alloc) && row[5] == "0", "{csv}");
    }

    // Replaying or converting it would invent times: refused, saying what to run instead.
    for args in [
        &["simulate", "--trace", STATIC_OPENB, "--cluster", "openb"][..],
        &[
            "trace",
            "convert",
            STATIC_OPENB,
            "--out",
            &format!("{out}/n.csv"),
        ][..],
    ] {
        let err = stderr_of_failing(args);
        assert!(
            err.contains("no arrival or duration times"),
            "{args:?}: {err}"
        );
        assert!(
            err.contains(&format!("lachesis bench fgd --trace {STATIC_OPENB}")),
            "{err}"
        );
    }
    // The full layout forced to the static one is read as pods without times.
    let forced = stdout_json(&[
        "trace",
        "stats",
        "traces/openb/openb_pod_excerpt.csv",
        "--format",
        "openb-static",
        "--json",
    ]);
    assert_eq!(
        (&forced["jobs"], &forced["static_workload"]),
        (&400.into(), &true.into())
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn an_unknown_header_lists_the_formats_tried() {
    let dir = temp_dir("unknown");
    let path = dir.join("jobs.csv");
    std::fs::write(&path, "when,gpus\n2017-10-01 00:00:00,1\n").unwrap();
    let err = stderr_of_failing(&["trace", "stats", path.to_str().unwrap()]);
    assert!(err.contains("cannot tell the trace format"), "{err}");
    for line in [
        "  sia-philly    a header with timestamp and num_gpus",
        "  openb-static  a header with num_gpu and gpu_milli, and no times",
        "  helios        a header with gpu_num and submit_time",
        "`--format NAME`",
    ] {
        assert!(err.contains(line), "no {line:?} in:\n{err}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// FIELDS.txt's verified counts: (file under the shared traces, rows, jobs kept).
const SHARED: &[(&str, u64, u64)] = &[
    ("msft-itp-2021/cluster01.csv", 1595, 1595),
    ("msft-itp-2021/cluster04.csv", 15802, 15802),
    ("alibaba-openb-2023/openb_pod_list_default.csv", 8152, 7255),
    ("hpc-swf/CTC-SP2-1996-3.1-cln.swf.gz", 77_222, 77_222),
    ("hpc-swf/KTH-SP2-1996-2.1-cln.swf.gz", 28_476, 28_475),
    ("hpc-swf/SDSC-BLUE-2000-4.2-cln.swf.gz", 243_306, 232_540),
    (
        "alibaba-dlrm-2025/disaggregated_DLRM_trace.csv",
        23_871,
        23_871,
    ),
];

#[test]
fn every_shared_trace_converts() {
    let root = std::env::var_os("LACHESIS_SHARED_TRACES")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/traces"));
    if !root.is_dir() {
        println!(
            "skipped: no shared traces at {} (set LACHESIS_SHARED_TRACES)",
            root.display()
        );
        return;
    }
    let dir = temp_dir("shared");
    for (file, rows, jobs) in SHARED {
        let path = root.join(file);
        check_converts(path.to_str().unwrap(), *rows, *jobs, &dir);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn fit_synth_split_and_sample_from_the_cli() {
    let dir = temp_dir("fit");
    let path = |name: &str| {
        dir.join(name)
            .to_str()
            .expect("UTF-8 temp path")
            .to_string()
    };
    let model = path("model.json");
    let ok = |args: &[&str]| {
        let out = lachesis(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    ok(&["trace", "fit", "traces/itp/cluster10.csv", "--out", &model]);
    let synth = path("synth.csv");
    ok(&[
        "trace", "synth", &model, "--jobs", "500", "--seed", "4", "--out", &synth,
    ]);
    let again = path("again.csv");
    ok(&[
        "trace", "synth", &model, "--jobs", "500", "--seed", "4", "--out", &again,
    ]);
    assert_eq!(
        std::fs::read(&synth).unwrap(),
        std::fs::read(&again).unwrap(),
        "same seed"
    );
    assert_eq!(
        stdout_json(&["trace", "stats", &synth, "--json"])["jobs"],
        500
    );

    let split = path("split");
    ok(&[
        "trace",
        "split",
        "traces/itp/cluster10.csv",
        "--out",
        &split,
        "--episodes",
        "2",
        "--episode-jobs",
        "20",
    ]);
    let stats =
        |name: &str| stdout_json(&["trace", "stats", &format!("{split}/{name}.csv"), "--json"]);
    let (train, val, test) = (stats("train"), stats("validation"), stats("test"));
    let jobs = |s: &serde_json::Value| s["jobs"].as_u64().unwrap();
    assert_eq!(jobs(&train) + jobs(&val) + jobs(&test), 260);
    let first = |s: &serde_json::Value| s["first_submit_s"].as_f64().unwrap();
    let last = |s: &serde_json::Value| s["last_submit_s"].as_f64().unwrap();
    assert!(
        last(&train) < first(&val) && last(&val) < first(&test),
        "no overlap in time"
    );
    let episodes: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{split}/episodes.json")).unwrap())
            .unwrap();
    assert_eq!(episodes.as_array().unwrap().len(), 2);

    let sample = path("sample.csv");
    ok(&[
        "trace",
        "sample",
        "traces/itp/cluster10.csv",
        "--jobs",
        "10",
        "--out",
        &sample,
    ]);
    assert_eq!(
        stdout_json(&["trace", "stats", &sample, "--json"])["jobs"],
        10
    );
    std::fs::remove_dir_all(dir).unwrap();
}
