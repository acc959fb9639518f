//! End-to-end tests of quotas (`--quotas`, docs/quotas.md): the real binary on the bundled
//! traces.
//!
//! ```sh
//! cargo test --test quotas
//! ```

mod common;

use common::{lachesis, stdout_json, stdout_of, without_wall_time};
use serde_json::Value;
use std::fs;
use std::path::PathBuf;

const TINY: &str = "traces/tiny.csv";
/// Every job of `tiny.csv` fits (as in `tests/cli.rs`).
const TINY_CLUSTER: &str = "8x8:H100+2x8:V100M32+2x8:A100+1x4:T4";
const KTH: &str = "traces/swf/KTH-SP2-1996-2.1-cln-first1000.swf";

/// Writes `text` to a quota file unique to this process and `name`; its path.
fn quota_file(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "lachesis-quotas-{}-{name}.toml",
        std::process::id()
    ));
    fs::write(&path, text).expect("the temp dir is writable");
    path
}

fn simulate(trace: &str, cluster: &str, extra: &[&str]) -> Value {
    let mut args = vec!["simulate", "--trace", trace, "--cluster", cluster, "--json"];
    args.extend_from_slice(extra);
    stdout_json(&args)
}

/// `lachesis ARGS...` must fail cleanly; its stderr.
fn fails(args: &[&str]) -> String {
    let out = lachesis(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "lachesis {args:?} succeeded");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

#[test]
fn a_team_over_its_quota_waits_and_is_told_why() {
    // vision may hold one GPU and borrow none: its 4-, 8- and 16-GPU jobs never start, and
    // the run says which quota blocks them. nlp and infra take every GPU (`default`).
    let file = quota_file(
        "tight",
        "[[cohort]]\nname = \"org\"\n\
         [[queue]]\nname = \"vision\"\ncohort = \"org\"\n\
         [[queue.quota]]\nflavor = \"default\"\nresource = \"gpu\"\nnominal = 1\nborrowing_limit = 0\n\
         [[queue]]\nname = \"default\"\ncohort = \"org\"\n\
         [[queue.quota]]\nflavor = \"default\"\nresource = \"gpu\"\nnominal = 99\n",
    );
    let path = file.to_str().expect("UTF-8 temp path");
    let out = lachesis(&[
        "simulate",
        "--trace",
        TINY,
        "--cluster",
        TINY_CLUSTER,
        "--quotas",
        path,
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: Value = serde_json::from_slice(&out.stdout).expect("JSON summary");
    assert_eq!(s["quotas"], path);
    assert_eq!(s["jobs"], 20);
    assert_eq!(
        s["finished"], 17,
        "detr-ft, vit-large and distill never start"
    );
    assert_eq!(s["rejected_decisions"], 0);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "3 job(s) never started, blocked by their queue's quota; e.g. job detr-ft: quota \
             of queue vision on default/gpu: asks 8, 1 available (nominal 1, in use 0)"
        ),
        "{stderr}"
    );
    // The table says it too.
    let out = lachesis(&[
        "simulate",
        "--trace",
        TINY,
        "--cluster",
        TINY_CLUSTER,
        "--quotas",
        path,
        "-q",
    ]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains(&format!("quotas             {path} (0 starts refused)")),
        "{table}"
    );
}

#[test]
fn the_documented_example_runs_and_every_job_finishes() {
    let s = simulate(
        TINY,
        TINY_CLUSTER,
        &["--quotas", "docs/examples/quotas.toml"],
    );
    assert_eq!(s["quotas"], "docs/examples/quotas.toml");
    assert_eq!(s["finished"], 20);
}

/// `simulate` on the tiny trace with the quota file `body` (written as `name`): the file's
/// path and what the refusal printed.
fn simulate_refuses(name: &str, body: &str) -> (String, String) {
    let file = quota_file(name, body);
    let path = file.to_str().expect("UTF-8 temp path").to_string();
    let stderr = fails(&[
        "simulate",
        "--trace",
        TINY,
        "--cluster",
        TINY_CLUSTER,
        "--quotas",
        &path,
    ]);
    (path, stderr)
}

#[test]
fn a_bad_quota_file_is_refused_naming_file_line_and_field() {
    let (path, stderr) = simulate_refuses(
        "bad",
        "[[queue]]\nname = \"vision\"\n[[queue.quota]]\nflavor = \"default\"\nresource = \"gpus\"\nnominal = 4\n",
    );
    assert!(
        stderr.contains(&format!(
            "{path}:5:12: queue[0].quota[0].resource: `gpus`: expected gpu, cpu or memory"
        )),
        "{stderr}"
    );
    // A tenant without a queue (and no `default` queue) is named, by `compare` too.
    let file = quota_file(
        "vision-only",
        "[[queue]]\nname = \"vision\"\n[[queue.quota]]\nflavor = \"default\"\nresource = \"gpu\"\nnominal = 4\n",
    );
    let path = file.to_str().expect("UTF-8 temp path");
    for cmd in ["simulate", "compare"] {
        let stderr = fails(
            &[
                cmd,
                "--trace",
                TINY,
                "--cluster",
                TINY_CLUSTER,
                "--quotas",
                path,
                "--policies",
                "fifo/best-fit",
            ]
            .into_iter()
            .filter(|a| cmd == "compare" || !["--policies", "fifo/best-fit"].contains(a))
            .collect::<Vec<_>>(),
        );
        assert!(
            stderr.contains("tenant `nlp` (job bert-base) has no queue: add a queue named `nlp`"),
            "{cmd}: {stderr}"
        );
    }
    let stderr = fails(&[
        "simulate",
        "--trace",
        TINY,
        "--cluster",
        TINY_CLUSTER,
        "--quotas",
        "no/such.toml",
    ]);
    assert!(
        stderr.contains("no/such.toml: cannot read the quota file"),
        "{stderr}"
    );
}

#[test]
fn equal_shares_on_bundled_traces_with_tenants_change_no_result() {
    // Under `equal` the tenants' quotas sum to the cluster and borrowing is unlimited: with
    // no preemption to reclaim (Kueue's default, Never), it refuses nothing that fits, so the
    // run is the run without quotas. KTH's 54 users are its tenants.
    for (trace, cluster, extra) in [
        (TINY, TINY_CLUSTER, &[][..]),
        (KTH, "4x0:CPU", &["--skip-unplaceable", "--load", "1.2"][..]),
    ] {
        for policy in ["fifo/best-fit", "sjf/best-fit"] {
            let mut args = vec!["--policy", policy];
            args.extend_from_slice(extra);
            let off = without_wall_time(simulate(trace, cluster, &args));
            args.extend_from_slice(&["--quotas", "equal"]);
            let mut on = without_wall_time(simulate(trace, cluster, &args));
            assert_eq!(on["quotas"], "equal");
            assert!(on.get("quota_vetoes").is_none(), "{trace} {policy}: {on:#}");
            // Runs with quotas add what quotas did; under `equal` nothing was preempted.
            assert_eq!(on["quota_metrics"]["quota_preemptions"], 0);
            assert!(off.get("quota_metrics").is_none());
            let on_map = on.as_object_mut().expect("an object");
            on_map.remove("quotas");
            on_map.remove("quota_metrics");
            assert_eq!(off, on, "{trace} under {policy}");
        }
    }
    // `compare` takes it too.
    let out = std::env::temp_dir().join(format!("lachesis-quotas-{}-cmp", std::process::id()));
    let out_str = out.to_str().expect("UTF-8 temp path");
    let run = lachesis(&[
        "compare",
        "--trace",
        TINY,
        "--cluster",
        TINY_CLUSTER,
        "--policies",
        "fifo/best-fit,sjf/best-fit",
        "--windows",
        "0",
        "--load",
        "none",
        "--resamples",
        "20",
        "--quotas",
        "equal",
        "--quiet",
        "--out",
        out_str,
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let _ = fs::remove_dir_all(&out);
}

/// Team `b` fills the 2x4 V100 cluster at 0 (two 4-GPU jobs of 10 h, one on `a`'s quota);
/// `a`'s 4-GPU job comes at 100 s. `a` reclaims (`reclaim_within_cohort = "Any"`).
fn reclaim_inputs() -> (PathBuf, PathBuf) {
    let trace = std::env::temp_dir().join(format!(
        "lachesis-quotas-{}-reclaim.csv",
        std::process::id()
    ));
    fs::write(
        &trace,
        "#lachesis-trace v1\n#tenants,a,b\n\
         job_id,submit_s,duration_s,tasks,gpus,gpu_milli,cpu_milli,mem_mib,gpu_types,tenant,\
         priority,qos,preemptible,kind,estimate_s\n\
         b-1,0,36000,1,4,1000,1000,1024,,b,0,best-effort,true,training,\n\
         b-2,0,36000,1,4,1000,1000,1024,,b,0,best-effort,true,training,\n\
         a-1,100,600,1,4,1000,1000,1024,,a,0,latency-sensitive,true,training,\n",
    )
    .expect("the temp dir is writable");
    let queue = |name: &str, preemption: &str| {
        format!(
            "[[queue]]\nname = \"{name}\"\ncohort = \"org\"\n[[queue.quota]]\nflavor = \"V100\"\n\
             resource = \"gpu\"\nnominal = 4\n{preemption}"
        )
    };
    let quotas = quota_file(
        "reclaim",
        &format!(
            "[[cohort]]\nname = \"org\"\n{}{}",
            queue("a", "[queue.preemption]\nreclaim_within_cohort = \"Any\"\n"),
            queue("b", "")
        ),
    );
    (trace, quotas)
}

#[test]
fn reclaim_preempts_the_borrower_and_compare_reports_the_quota_metrics() {
    let (trace, quotas) = reclaim_inputs();
    let (trace, quotas) = (
        trace.to_str().expect("UTF-8 temp path"),
        quotas.to_str().expect("UTF-8 temp path"),
    );
    // simulate: a's job starts at 100 s, one of b's is preempted, no guarantee violated.
    let s = simulate(trace, "2x4:V100", &["--quotas", quotas]);
    let m = &s["quota_metrics"];
    assert_eq!(m["quota_preemptions"], 1, "{s:#}");
    assert_eq!(m["guarantee_violation_h"], 0.0);
    assert_eq!(m["queues"][0]["queue"], "a");
    assert_eq!(m["queues"][0]["avg_wait_s"], 0.0, "a waited not at all");
    assert_eq!(s["preemptions"], 1);
    let text = stdout_of(&[
        "simulate",
        "--trace",
        trace,
        "--cluster",
        "2x4:V100",
        "--quotas",
        quotas,
    ]);
    assert!(text.contains("quota preemption   1 preempted"), "{text}");
    assert!(
        text.contains("guarantees         0.00 h violated"),
        "{text}"
    );
    // compare: the quota metrics rows, a table per queue, and the same in report.md and
    // comparison.json.
    let out = std::env::temp_dir().join(format!("lachesis-quotas-{}-reclaim", std::process::id()));
    let out_str = out.to_str().expect("UTF-8 temp path");
    let text = stdout_of(&[
        "compare",
        "--trace",
        trace,
        "--cluster",
        "2x4:V100",
        "--policies",
        "fifo/best-fit,sjf/best-fit",
        "--windows",
        "0",
        "--load",
        "none",
        "--resamples",
        "20",
        "--quotas",
        quotas,
        "--out",
        out_str,
    ]);
    for label in [
        "guarantee violation (queue-h)",
        "borrowed GPU-h",
        "quota preemptions",
        "preemptions per admission",
        "priority inversions",
        "per queue, mean over units",
        "violated h",
        "borrow GPU-h",
    ] {
        assert!(text.contains(label), "{label}: {text}");
    }
    let report = fs::read_to_string(out.join("report.md")).expect("report.md");
    assert!(report.contains("## Per queue"), "{report}");
    assert!(
        report.contains("| a | `fifo/best-fit` | 0 | 0 | 600 | 600 | 0 | 0 |"),
        "{report}"
    );
    let json: Value = serde_json::from_str(
        &fs::read_to_string(out.join("comparison.json")).expect("comparison.json"),
    )
    .expect("JSON");
    let metric = |key: &str| {
        json["metrics"]
            .as_array()
            .expect("metrics")
            .iter()
            .find(|m| m["key"] == key)
            .map(|m| m["policies"][0]["mean"].clone())
    };
    assert_eq!(metric("quota_preemptions"), Some(Value::from(1.0)));
    assert_eq!(metric("guarantee_violation_h"), Some(Value::from(0.0)));
    assert_eq!(metric("preemptions_per_admission"), Some(Value::from(0.25)));
    let _ = fs::remove_dir_all(&out);
}

#[test]
fn a_bad_preemption_policy_is_refused_naming_file_line_and_field() {
    let (path, stderr) = simulate_refuses(
        "bad-preemption",
        "[[queue]]\nname = \"vision\"\n[queue.preemption]\nwithin_cluster_queue = \"Any\"\n",
    );
    assert!(
        stderr.contains(&format!(
            "{path}:4:24: queue[0].preemption.within_cluster_queue: `Any`: expected Never, \
             LowerPriority, LowerOrNewerEqualPriority"
        )),
        "{stderr}"
    );
}
